/* test_checkpoint.c: the resume state file and checkpoint directories. state.bin round-trips the master weights, the
 * Adam moments, the data position, the sampler state and the config bitwise; a state that refers to model.safetensors
 * for the master weights round-trips the reference and leaves the model's weights alone; a version-1 file still
 * reads; a flipped byte in any section (or in a header), a truncation anywhere, trailing bytes, nonzero padding or
 * reserved bytes (with their CRC right) and a state of another model shape are each an error naming the file and the
 * section. Checkpoint directories: listing ignores temporaries, pruning keeps the newest K, leftovers of a crash are
 * cleaned, a missing or truncated file is found, a state of another step is refused; the F32 export holds the master
 * weights once (state.bin refers to it) and resumes bitwise, a damaged model.safetensors is found by its CRC, the
 * BF16 export keeps them in state.bin. The log is cut back to a step without torn lines. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "persist/checkpoint.h"
#include "persist/run_dir.h"
#include "persist/state_file.h"
#include "tests/ckpt_fixtures.h"
#include "tests/test_util.h"

static char dir[256];

static TrainState some_state(uint64_t step) {
    TrainState s = {step, {3, 1, 77}, 2, 123456789, 0xDEADBEEFCAFEF00Dull};
    return s;
}

static const char *CONFIG_TEXT = "{\"hidden_size\": 24, \"note\": \"any text\"}";

/* The byte offset of section i's header (0 master, 1 adam_m, 2 adam_v, 3 data_position, 4 sampler_rng, 5 config). */
static size_t section_offset(size_t n_params, int i) {
    size_t sizes[6] = {n_params * 4, n_params * 4, n_params * 4, 40, 8, strlen(CONFIG_TEXT)}, at = 72;
    for (int k = 0; k < i; k++) at += 32 + sizes[k] + 4;
    return at;
}

static void test_state_round_trip(const char *path, Model *a) {
    char err[1024];
    TrainState s = some_state(42), r;
    const StateData d = host_state_data(a, s, CONFIG_TEXT);
    int ok = state_write(path, &d, err, sizeof(err)) == 0;
    CHECK(ok, "write state.bin%s%s", ok ? "" : ": ", ok ? "" : err);
    ModelConfig c = a->cfg;
    Model b;
    create_model(&b, &c, 99, 0);
    char *text = NULL;
    StateInfo info;
    ok = ok && state_read(path, &b, &r, &text, &info, err, sizeof(err)) == 0;
    size_t n = a->table.n_params * 4;
    CHECK(ok && memcmp(a->master, b.master, n) == 0 && memcmp(a->adam_m, b.adam_m, n) == 0 &&
              memcmp(a->adam_v, b.adam_v, n) == 0 && memcmp(b.weights, b.master, n) == 0,
          "master weights (and the working copy), Adam m and v come back bitwise%s%s", ok ? "" : ": ", ok ? "" : err);
    CHECK(ok && r.step == 42 && r.data.epoch == 3 && r.data.shard == 1 && r.data.sample == 77 && r.data_shards == 2 &&
              r.data_tokens == 123456789 && r.sample_rng == s.sample_rng && text && strcmp(text, CONFIG_TEXT) == 0,
          "step, data position, data size, sampler state and config text come back");
    CHECK(ok && info.version == 2 && !info.master_in_weights, "a state written now is version 2 and holds the master "
          "weights (version %u, master_in_weights %d)", ok ? info.version : 0, ok ? info.master_in_weights : -1);
    free(text);
    model_destroy(&b);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size == section_offset(a->table.n_params, 6),
          "the file is exactly the documented layout (%lld bytes)", (long long)st.st_size);
}

/* Reads a damaged copy of the state into a fresh model: the error must hold the path and both words. */
static void expect_bad_state(const char *label, const char *path, const ModelConfig *c, const char *w1,
                             const char *w2) {
    Model m;
    create_model(&m, c, 5, 0);
    TrainState r;
    char err[1024] = "";
    StateInfo info;
    int rc = state_read(path, &m, &r, NULL, &info, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, path) && strstr(err, w1) && (!w2 || strstr(err, w2)), "%s: %s", label, err);
    model_destroy(&m);
}

/* Sets byte `offset` of the file to v and stores the right CRC32 of the n bytes from `from` at `from + n` (a change
 * that the CRCs do not catch). */
static void set_byte_with_crc(const char *path, size_t offset, unsigned char v, size_t from, size_t n) {
    size_t len;
    unsigned char *b = read_bytes(path, &len);
    if (!b || offset >= len || from + n + 4 > len) {
        free(b);
        return;
    }
    b[offset] = v;
    uint32_t crc = (uint32_t)crc32(0, b + from, (uInt)n);
    memcpy(b + from + n, &crc, 4);
    write_bytes(path, b, len);
    free(b);
}

static void test_state_damage(const char *good, const Model *a) {
    static const char *names[] = {"master", "adam_m", "adam_v", "data_position", "sampler_rng", "config"};
    char path[512];
    snprintf(path, sizeof(path), "%s/damaged.bin", dir);
    size_t np = a->table.n_params;
    for (int i = 0; i < 6; i++) {
        size_t payload = section_offset(np, i) + 32, len = section_offset(np, i + 1) - 4 - payload;
        char label[128], quoted[64];
        copy_file(good, path);
        flip_byte(path, payload + len / 2);
        snprintf(label, sizeof(label), "a flipped byte in section %s", names[i]);
        snprintf(quoted, sizeof(quoted), "\"%s\"", names[i]);
        expect_bad_state(label, path, &a->cfg, quoted, "CRC mismatch");
    }
    copy_file(good, path);
    flip_byte(path, 20);
    expect_bad_state("a flipped byte in the file header", path, &a->cfg, "header fails its CRC", NULL);
    copy_file(good, path);
    flip_byte(path, section_offset(np, 2) + 17); /* the length field of adam_v */
    expect_bad_state("a flipped byte in a section header", path, &a->cfg, "\"adam_v\"", "header");
    /* bytes that the writer leaves zero and no CRC covers, or that a CRC recomputed over them does not catch */
    copy_file(good, path);
    set_byte_with_crc(path, 68, 1, 0, 64);
    expect_bad_state("a nonzero reserved field in the file header", path, &a->cfg, "reserved", NULL);
    copy_file(good, path);
    set_byte_with_crc(path, section_offset(np, 2) + 8, 'E', section_offset(np, 2), 28);
    expect_bad_state("a section name with other bytes than NUL after it (its CRC right)", path, &a->cfg, "\"adam_v\"",
                     "after the name");
    copy_file(good, path);
    set_byte_with_crc(path, section_offset(np, 4) + 25, 1, section_offset(np, 4), 28);
    expect_bad_state("a nonzero reserved field in a section header (its CRC right)", path, &a->cfg,
                     "\"sampler_rng\"", "reserved");
    size_t cuts[] = {40, 72 + 10, section_offset(np, 1) + 100, section_offset(np, 6) - 2};
    for (int i = 0; i < 4; i++) {
        char label[64];
        copy_file(good, path);
        truncate_to(path, cuts[i]);
        snprintf(label, sizeof(label), "truncated at byte %zu", cuts[i]);
        expect_bad_state(label, path, &a->cfg, "truncated", NULL);
    }
    size_t n;
    unsigned char *bytes = read_bytes(good, &n);
    unsigned char *longer = malloc(n + 3);
    memcpy(longer, bytes, n);
    memset(longer + n, 7, 3);
    write_bytes(path, longer, n + 3);
    free(bytes);
    free(longer);
    expect_bad_state("3 bytes after the last section", path, &a->cfg, "unexpected bytes", NULL);
    ModelConfig other = a->cfg;
    other.intermediate_size = 48;
    expect_bad_state("a state of another model shape", good, &other, "another model", "intermediate_size is 40");
    other = a->cfg;
    other.tie_word_embeddings = !other.tie_word_embeddings;
    expect_bad_state("a state of a model with the other embedding tying", good, &other, "another model",
                     "tie_word_embeddings");
}

/* A state that refers to model.safetensors for the master weights: the reference comes back and the model's own
 * weights are not touched; the same file with the version field set to 1 is refused (version 1 has no reference). */
static void test_state_weights_reference(const Model *a) {
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/ref.bin", dir);
    StateData d = host_state_data(a, some_state(9), CONFIG_TEXT);
    d.master = NULL;
    d.weights_bytes = 123456789012ull;
    d.weights_crc = 0xA5C3E1F0u;
    int ok = state_write(path, &d, err, sizeof(err)) == 0;
    ModelConfig c = a->cfg;
    Model b;
    create_model(&b, &c, 99, 0);
    float *before = malloc(b.table.n_params * sizeof(float));
    memcpy(before, b.master, b.table.n_params * sizeof(float));
    TrainState r;
    StateInfo info;
    ok = ok && state_read(path, &b, &r, NULL, &info, err, sizeof(err)) == 0;
    size_t n = a->table.n_params * 4;
    CHECK(ok && info.master_in_weights && info.weights_bytes == d.weights_bytes && info.weights_crc == d.weights_crc &&
              memcmp(b.adam_m, a->adam_m, n) == 0 && memcmp(b.master, before, n) == 0 && r.step == 9,
          "a state referring to model.safetensors: the size and CRC32 come back, the moments load, the model's "
          "weights stay as they were%s%s", ok ? "" : ": ", ok ? "" : err);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size == section_offset(a->table.n_params, 6) - n + 16,
          "that state is n_params x 4 bytes smaller than one with the weights (%lld bytes)", (long long)st.st_size);
    set_byte_with_crc(path, 8, 1, 0, 64);
    expect_bad_state("a version-1 file with a master_file section", path, &a->cfg, "expected section \"master\"",
                     "\"master_file\"");
    free(before);
    model_destroy(&b);
}

/* A file of version 1 (this layout with the master weights, from before version 2) still reads. */
static void test_state_version_1(const char *good, const Model *a) {
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/v1.bin", dir);
    copy_file(good, path);
    set_byte_with_crc(path, 8, 1, 0, 64);
    ModelConfig c = a->cfg;
    Model b;
    create_model(&b, &c, 99, 0);
    TrainState r;
    StateInfo info;
    int ok = state_read(path, &b, &r, NULL, &info, err, sizeof(err)) == 0;
    CHECK(ok && info.version == 1 && memcmp(a->master, b.master, a->table.n_params * 4) == 0 && r.step == 42,
          "a version-1 state.bin (written before the master weights could be referred to) reads%s%s", ok ? "" : ": ",
          ok ? "" : err);
    model_destroy(&b);
}

/* checkpoint_holds with the model m's own values. */
static int loads_as(const char *ck, uint64_t step, const Model *m, char *err, size_t errlen) {
    return checkpoint_holds(ck, step, &m->cfg, m->master, m->adam_m, m->adam_v, err, errlen);
}

/* The F32 export is the master weights: state.bin refers to it (16 bytes instead of n_params x 4), the checkpoint
 * loads bitwise, and a damaged model.safetensors is found by its CRC32. The BF16 export keeps them in state.bin. */
static void test_master_stored_once(const Model *m) {
    char run[512], err[1024], ck[1100], path[1200];
    snprintf(run, sizeof(run), "%s/once", dir);
    Config cfg;
    config_defaults(&cfg);
    cfg.model = m->cfg;
    TrainState s = some_state(6);
    CheckpointStats cs;
    int ok = checkpoint_save(run, m, &cfg, &s, &cs, err, sizeof(err)) == 0;
    checkpoint_path(ck, sizeof(ck), run, 6);
    snprintf(path, sizeof(path), "%s/state.bin", ck);
    char *json = config_to_json(&cfg);
    size_t np = m->table.n_params, want = 72 + (32 + 16 + 4) + 2 * (32 + np * 4 + 4) + (32 + 40 + 4) + (32 + 8 + 4) +
                                          (32 + strlen(json) + 4);
    free(json);
    struct stat st;
    CHECK(ok && stat(path, &st) == 0 && (size_t)st.st_size == want,
          "with the F32 export, state.bin holds the moments and a reference to model.safetensors (%lld bytes, "
          "expected %zu)%s%s", (long long)st.st_size, want, ok ? "" : ": ", ok ? "" : err);
    ok = ok && loads_as(ck, 6, m, err, sizeof(err)) == 0;
    CHECK(ok, "it loads: master weights (from model.safetensors), working copy and moments bitwise%s%s", ok ? "" : ": ",
          ok ? "" : err);
    snprintf(path, sizeof(path), "%s/model.safetensors", ck);
    size_t n;
    unsigned char *saved = read_bytes(path, &n);
    flip_byte(path, n - 4 * (np / 3));
    ok = checkpoint_check_files(ck, err, sizeof(err)) == 0 && loads_as(ck, 6, m, err, sizeof(err)) != 0;
    CHECK(ok && strstr(err, path) && strstr(err, "CRC32") && strstr(err, "damaged"),
          "a flipped bit in model.safetensors' weights is found by the CRC32 that state.bin holds: %s", err);
    if (saved) write_bytes(path, saved, n);
    free(saved);
    snprintf(cfg.train.export_dtype, sizeof(cfg.train.export_dtype), "bf16");
    ok = checkpoint_save(run, m, &cfg, &s, &cs, err, sizeof(err)) == 0 && loads_as(ck, 6, m, err, sizeof(err)) == 0;
    Model b;
    ModelConfig c = m->cfg;
    create_model(&b, &c, 8, 0);
    TrainState r;
    StateInfo info;
    snprintf(path, sizeof(path), "%s/state.bin", ck);
    ok = ok && state_read(path, &b, &r, NULL, &info, err, sizeof(err)) == 0;
    CHECK(ok && !info.master_in_weights, "with the BF16 export, state.bin holds the fp32 master weights and the "
          "checkpoint loads bitwise%s%s", ok ? "" : ": ", ok ? "" : err);
    model_destroy(&b);
}

static int list_equals(const char *run, const uint64_t *want, int n) {
    CheckpointList l;
    char err[512];
    if (checkpoint_list(run, &l, err, sizeof(err))) return 0;
    int eq = l.n == n;
    for (int i = 0; i < n && eq; i++) eq = l.steps[i] == want[i];
    checkpoint_list_free(&l);
    return eq;
}

static void test_directories(Model *m) {
    char run[512], err[1024], path[1200];
    snprintf(run, sizeof(run), "%s/run", dir);
    Config cfg;
    config_defaults(&cfg);
    cfg.model = m->cfg;
    int ok = 1;
    uint64_t total = 0;
    for (uint64_t step = 1; step <= 4 && ok; step++) {
        TrainState s = some_state(step);
        CheckpointStats cs;
        ok = checkpoint_save(run, m, &cfg, &s, &cs, err, sizeof(err)) == 0;
        total = cs.bytes;
    }
    uint64_t all[] = {1, 2, 3, 4};
    CHECK(ok && list_equals(run, all, 4), "four checkpoints written and listed in order%s%s", ok ? "" : ": ",
          ok ? "" : err);
    snprintf(path, sizeof(path), "%s/step_00000004/state.bin", run);
    struct stat st;
    CHECK(ok && stat(path, &st) == 0 && total > (uint64_t)st.st_size, "the reported size counts every file");
    /* leftovers of a crash: a half-written checkpoint and a half-deleted one */
    snprintf(path, sizeof(path), "%s/.step_00000009.tmp", run);
    fs_make_dirs(path, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/.step_00000009.tmp/state.bin", run);
    write_bytes(path, "partial", 7);
    snprintf(path, sizeof(path), "%s/.step_00000002.deleting", run);
    fs_make_dirs(path, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/step_12", run); /* not 8 digits: not a checkpoint */
    fs_make_dirs(path, err, sizeof(err));
    CHECK(list_equals(run, all, 4), "temporaries and odd names are not listed as checkpoints");
    ok = checkpoint_clean_leftovers(run, err, sizeof(err)) == 0;
    snprintf(path, sizeof(path), "%s/.step_00000009.tmp", run);
    int tmp_gone = !fs_exists(path);
    snprintf(path, sizeof(path), "%s/.step_00000002.deleting", run);
    CHECK(ok && tmp_gone && !fs_exists(path) && list_equals(run, all, 4),
          "leftovers are removed, the complete checkpoints stay");
    ok = checkpoint_prune(run, 2, err, sizeof(err)) == 0;
    uint64_t newest[] = {3, 4};
    CHECK(ok && list_equals(run, newest, 2), "keep_last 2 keeps the newest two");
    ok = checkpoint_prune(run, 0, err, sizeof(err)) == 0 && checkpoint_prune(run, 1, err, sizeof(err)) == 0;
    uint64_t last[] = {4};
    CHECK(ok && list_equals(run, last, 1), "keep_last 0 keeps all; keep_last 1 keeps the newest");
    /* rewriting a step replaces it only once the new one is complete */
    TrainState s = some_state(4);
    s.sample_rng = 5;
    CheckpointStats cs;
    Model back;
    ModelConfig c = m->cfg;
    create_model(&back, &c, 8, 0);
    TrainState r;
    char ck[1100];
    checkpoint_path(ck, sizeof(ck), run, 4);
    ok = checkpoint_save(run, m, &cfg, &s, &cs, err, sizeof(err)) == 0 &&
         checkpoint_load_state(ck, 4, &back, &r, err, sizeof(err)) == 0 && r.sample_rng == 5;
    CHECK(ok && list_equals(run, last, 1), "a checkpoint of an existing step replaces it%s%s", ok ? "" : ": ",
          ok ? "" : err);
    CHECK(checkpoint_check_files(ck, err, sizeof(err)) == 0, "a complete checkpoint passes the file check");
    ok = checkpoint_load_state(ck, 5, &back, &r, err, sizeof(err)) != 0 && strstr(err, "step 4") &&
         strstr(err, "step 5");
    CHECK(ok, "a state.bin of another step than its directory's: %s", err);
    snprintf(path, sizeof(path), "%s/model.safetensors", ck);
    size_t n;
    unsigned char *saved = read_bytes(path, &n);
    truncate_to(path, n - 8);
    CHECK(checkpoint_check_files(ck, err, sizeof(err)) != 0 && strstr(err, path),
          "a truncated model.safetensors is found: %s", err);
    unlink(path);
    CHECK(checkpoint_check_files(ck, err, sizeof(err)) != 0 && strstr(err, path) && strstr(err, "missing"),
          "a missing model.safetensors is found: %s", err);
    write_bytes(path, saved, n);
    free(saved);
    model_destroy(&back);
}

static void test_log_truncate(void) {
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    const char *log = "{\"step\":1,\"loss\":5.5}\n{\"step\":2,\"loss\":5.4}\n{\"step\":2,\"val_loss\":5.3}\n"
                      "{\"step\":3,\"loss\":5.2}\n{\"step\":3,\"sample\":\"a\\nb\"}\n{\"step\":4,\"loss\":5.1}\n"
                      "{\"step\":4,\"val_loss\":5.0}\n{\"step\":5,\"lo";
    write_bytes(path, log, strlen(log));
    int dropped = 0;
    int ok = run_log_truncate(path, 3, &dropped, err, sizeof(err)) == 0;
    size_t n;
    char *text = (char *)read_bytes(path, &n);
    const char *want = "{\"step\":1,\"loss\":5.5}\n{\"step\":2,\"loss\":5.4}\n{\"step\":2,\"val_loss\":5.3}\n"
                       "{\"step\":3,\"loss\":5.2}\n{\"step\":3,\"sample\":\"a\\nb\"}\n";
    CHECK(ok && text && strcmp(text, want) == 0 && dropped == 3,
          "the log keeps the records up to step 3 and drops 3 lines (two later records and a torn one)");
    free(text);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK(!fs_exists(tmp), "no temporary file is left");
}

int main(void) {
    make_temp_dir(dir, sizeof(dir), "test_checkpoint");
    ModelConfig c = small_model_config(0);
    Model a;
    create_model(&a, &c, 7, 1);
    char good[512];
    snprintf(good, sizeof(good), "%s/state.bin", dir);
    test_state_round_trip(good, &a);
    test_state_damage(good, &a);
    test_state_version_1(good, &a);
    test_state_weights_reference(&a);
    test_master_stored_once(&a);
    test_directories(&a);
    test_log_truncate();
    model_destroy(&a);
    remove_temp_dir(dir);
    return test_summary();
}
