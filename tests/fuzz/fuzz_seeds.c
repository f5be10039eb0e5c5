/* fuzz_seeds.c: writes the seed corpora of the fuzz harnesses (make fuzz-seeds) from real files: checkpoints of
 * the fuzz model written by checkpoint_save (model.safetensors in F32 and BF16, config.json, train_config.json,
 * state.bin), an F16 export and a sharded copy, the JSON configs, token shards, texts and run logs given on the
 * command line and the first lines of the Llama 3 tokenizer file, each in the input format of its harness
 * (tests/fuzz/fuzz_*.c).
 *
 *   fuzz_seeds OUT TOKENIZER FILE...   (FILE: *.json configs, *.bin token shards, *.txt texts, *.jsonl run logs)
 *
 * Writes OUT/<harness>/<seed> for each harness, using OUT/work for the checkpoints. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist/checkpoint.h"
#include "persist/hf_weights.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_model.h"

static const char *out_dir;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_seeds: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* A seed: OUT/harness/name holding the parts, separated by FUZZ_SEPARATOR, after prefix_len bytes of prefix. */
static void write_seed(const char *harness, const char *name, const void *prefix, size_t prefix_len,
                       const FuzzPart *parts, int n) {
    char dir[1024], path[1200], err[512];
    snprintf(dir, sizeof(dir), "%s/%s", out_dir, harness);
    if (fs_make_dirs(dir, err, sizeof(err))) die("%s", err);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && (prefix_len == 0 || fwrite(prefix, 1, prefix_len, f) == prefix_len);
    for (int i = 0; i < n && ok; i++)
        ok = (i == 0 || fputs(FUZZ_SEPARATOR, f) >= 0) && fwrite(parts[i].data, 1, parts[i].size, f) == parts[i].size;
    if (!f || fclose(f) != 0 || !ok) die("cannot write %s", path);
}

/* A file read whole (freed at exit: the program is short-lived). */
static FuzzPart file_part(const char *path) {
    size_t n;
    unsigned char *b = read_bytes(path, &n);
    if (!b) die("cannot read %s", path);
    return (FuzzPart){b, n};
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A checkpoint of the fuzz model (tied or not) in run_dir/step_00000005 with its weights in dtype. */
static void write_checkpoint(const char *run_dir, int tied, const char *dtype) {
    char err[1024];
    ModelConfig c = fuzz_model_config(tied);
    Model m;
    create_model(&m, &c, 7, 1);
    Config cfg;
    config_defaults(&cfg);
    cfg.model = c;
    snprintf(cfg.train.train_data, sizeof(cfg.train.train_data), "data/fuzz/train_*.bin");
    snprintf(cfg.train.export_dtype, sizeof(cfg.train.export_dtype), "%s", dtype);
    TrainState s = {.step = 5, .data = {1, 0, 3}, .data_shards = 1, .data_tokens = 1000, .sample_rng = 42};
    CheckpointStats stats;
    if (checkpoint_save(run_dir, &m, &cfg, &s, &stats, err, sizeof(err))) die("%s", err);
    model_destroy(&m);
}

/* The checkpoints and the seeds made from them: safetensors, hf_import, state, state_crc, config. */
static void checkpoint_seeds(void) {
    char work[256], run[320], path[1024], err[1024];
    snprintf(work, sizeof(work), "%s/work", out_dir);
    if (fs_remove_tree(work, err, sizeof(err)) || fs_make_dirs(work, err, sizeof(err))) die("%s", err);
    static const struct {
        const char *run, *dtype;
        int tied;
    } runs[] = {{"untied_f32", "f32", 0}, {"tied_bf16", "bf16", 1}};
    for (int r = 0; r < 2; r++) {
        snprintf(run, sizeof(run), "%s/%s", work, runs[r].run);
        write_checkpoint(run, runs[r].tied, runs[r].dtype);
        char step[400], name[128];
        snprintf(step, sizeof(step), "%s/step_00000005", run);
        snprintf(path, sizeof(path), "%s/model.safetensors", step);
        FuzzPart weights = file_part(path);
        snprintf(name, sizeof(name), "%s.safetensors", runs[r].run);
        write_seed("safetensors", name, NULL, 0, &weights, 1);
        uint8_t mode = (uint8_t)runs[r].tied;
        write_seed("hf_import", name, &mode, 1, &weights, 1);
        /* the same weights as two shards and an index */
        char shards[400];
        snprintf(shards, sizeof(shards), "%s/sharded", run);
        if (fs_make_dirs(shards, err, sizeof(err)) || write_shards(path, shards, err, sizeof(err))) die("%s", err);
        FuzzPart set[3];
        static const char *set_files[] = {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s/%s", shards, set_files[i]);
            set[i] = file_part(path);
        }
        mode |= 2;
        snprintf(name, sizeof(name), "%s_sharded", runs[r].run);
        write_seed("hf_import", name, &mode, 1, set, 3);
        snprintf(name, sizeof(name), "%s_shard1.safetensors", runs[r].run);
        write_seed("safetensors", name, NULL, 0, &set[1], 1);
        /* the untied model's state (the state harnesses' model); the tied one's fails the shape check */
        snprintf(path, sizeof(path), "%s/state.bin", step);
        FuzzPart state = file_part(path);
        snprintf(name, sizeof(name), "%s_state.bin", runs[r].run);
        write_seed("state", name, NULL, 0, &state, 1);
        write_seed("state_crc", name, NULL, 0, &state, 1);
        static const char *configs[] = {"config.json", "train_config.json"};
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof(path), "%s/%s", step, configs[i]);
            FuzzPart text = file_part(path);
            snprintf(name, sizeof(name), "%s_%s", runs[r].run, configs[i]);
            write_seed("config", name, NULL, 0, &text, 1);
        }
    }
    /* an F16 export */
    ModelConfig c = fuzz_model_config(0);
    Model m;
    create_model(&m, &c, 9, 0);
    snprintf(path, sizeof(path), "%s/f16.safetensors", work);
    if (hf_export_weights(&m, path, ST_F16, err, sizeof(err))) die("%s", err);
    model_destroy(&m);
    FuzzPart f16 = file_part(path);
    write_seed("safetensors", "untied_f16.safetensors", NULL, 0, &f16, 1);
    uint8_t mode = 0;
    write_seed("hf_import", "untied_f16", &mode, 1, &f16, 1);
}

/* Command lines as the flag harness takes them: arguments separated by NUL bytes. */
static void flag_seeds(void) {
    static const char *lines[][16] = {
        {"-n", "100", "-l", "3e-4", "--lr-schedule", "wsd", "--wsd-decay-frac", "0.3", "--min-lr-frac", "0.05"},
        {"-b", "8", "-t", "16", "--total-batch-tokens", "256", "--warmup-steps", "10", "-s", "7"},
        {"--sample-prompt", "ROMEO:", "--temperature", "0.8", "--sample-every", "5", "--sample-tokens", "64"},
        {"-c", "configs/llama3_tiny.json", "-i", "data/x/train_*.bin", "-j", "data/x/val_*.bin", "-o", "runs/x",
         "--overwrite"},
        {"--device", "cpu", "--fusion", "off", "--export-dtype", "bf16", "--keep-last", "2", "--checkpoint-every",
         "10", "--resume", "--resume-fallback"},
        {"--skip-nonfinite", "3", "--grad-clip", "0", "--beta1", "0.8", "--beta2", "0.99", "--adam-eps", "1e-7",
         "--weight-decay", "0"},
        {"--eval-every", "50", "--eval-batches", "4", "--tokenizer", "byte", "--init-from", "hf/model"},
    };
    for (size_t l = 0; l < sizeof(lines) / sizeof(lines[0]); l++) {
        char text[1024];
        size_t len = 0;
        for (int i = 0; i < 16 && lines[l][i]; i++) {
            size_t n = strlen(lines[l][i]) + 1; /* with its NUL, the separator */
            memcpy(text + len, lines[l][i], n);
            len += n;
        }
        char name[32];
        snprintf(name, sizeof(name), "flags_%zu", l);
        FuzzPart p = {(const uint8_t *)text, len - 1};
        write_seed("flags", name, NULL, 0, &p, 1);
    }
}

/* The data loader's settings (tests/fuzz/fuzz_dataloader.c) followed by the shards. */
static void dataloader_seeds(const FuzzPart *shards, const char **names, int n) {
    for (int i = 0; i < n; i++) {
        int32_t magic = 0;
        memcpy(&magic, shards[i].data, shards[i].size < 4 ? shards[i].size : 4);
        uint32_t vocab = magic == 20240801 ? 128256 - 1 : 256 - 1; /* uint32 tokens: Llama 3 */
        for (int variant = 0; variant < 2; variant++) {
            uint8_t settings[35] = {0};
            settings[0] = variant ? 3 : 1;                    /* B = 4 or 2 */
            settings[1] = variant ? 15 : 7;                   /* T = 16 or 8 */
            memcpy(settings + 2, &vocab, 3);                  /* vocab_size - 1 */
            settings[5] = (uint8_t)(variant ? 3 : 0);         /* shuffle, seek first */
            settings[6] = 42;                                 /* seed */
            settings[10] = 3;                                 /* batches */
            uint64_t pos[3] = {1, 0, 2};
            memcpy(settings + 11, pos, sizeof(pos));
            FuzzPart parts[3] = {{settings, sizeof(settings)}, shards[i], shards[(i + 1) % n]};
            char name[256];
            snprintf(name, sizeof(name), "%d_%s_%d", i, names[i], variant);
            write_seed("dataloader", name, NULL, 0, parts, variant ? 3 : 2);
        }
    }
}

/* The first lines of the tokenizer file (the parser reads them all before it finds too few ranks). */
static void tokenizer_seeds(const char *path) {
    FuzzPart all = file_part(path);
    static const int lines[] = {20, 300};
    for (int i = 0; i < 2; i++) {
        size_t len = 0;
        for (int seen = 0; len < all.size && seen < lines[i]; len++) seen += all.data[len] == '\n';
        FuzzPart head = {all.data, len};
        char name[32];
        snprintf(name, sizeof(name), "head_%d.model", lines[i]);
        write_seed("tokenizer", name, NULL, 0, &head, 1);
    }
}

/* Pieces of the texts for the encoder (each a few hundred bytes, cut anywhere, also inside a UTF-8 character). */
static void encode_seeds(const FuzzPart *texts, const char **names, int n) {
    for (int i = 0; i < n; i++)
        for (size_t at = 0, k = 0; at < texts[i].size && k < 8; at += 333, k++) {
            FuzzPart p = {texts[i].data + at, texts[i].size - at < 300 ? texts[i].size - at : 300};
            char name[256];
            snprintf(name, sizeof(name), "%s_%zu", names[i], k);
            write_seed("encode", name, NULL, 0, &p, 1);
        }
}

/* A run log cut at a few steps (the u32 before it), also with a torn last line as a crash leaves it. */
static void log_seeds(FuzzPart log, const char *name) {
    static const uint32_t steps[] = {0, 2, 1000};
    for (int i = 0; i < 3; i++) {
        char seed[256];
        snprintf(seed, sizeof(seed), "%s_%u", name, steps[i]);
        write_seed("log", seed, &steps[i], 4, &log, 1);
    }
    uint8_t *torn = malloc(log.size + 16);
    if (!torn) die("out of memory");
    memcpy(torn, log.data, log.size);
    memcpy(torn + log.size, "{\"step\": 9, \"lo", 16);
    FuzzPart p = {torn, log.size + 16};
    char seed[256];
    snprintf(seed, sizeof(seed), "%s_torn", name);
    write_seed("log", seed, &steps[1], 4, &p, 1);
    free(torn);
}

int main(int argc, char **argv) {
    if (argc < 3) die("usage: fuzz_seeds OUT TOKENIZER FILE... (*.json configs, *.bin shards, *.txt, *.jsonl logs)");
    out_dir = argv[1];
    FuzzPart shards[64], texts[64];
    const char *shard_names[64], *text_names[64];
    int n_shards = 0, n_texts = 0;
    for (int i = 3; i < argc; i++) {
        const char *name = base_name(argv[i]);
        if (ends_with(name, ".json")) {
            FuzzPart p = file_part(argv[i]);
            write_seed("config", name, NULL, 0, &p, 1);
        } else if (ends_with(name, ".bin") && n_shards < 64) {
            shard_names[n_shards] = name;
            shards[n_shards++] = file_part(argv[i]);
        } else if (ends_with(name, ".jsonl")) {
            log_seeds(file_part(argv[i]), name);
        } else if (ends_with(name, ".txt") && n_texts < 64) {
            text_names[n_texts] = name;
            texts[n_texts++] = file_part(argv[i]);
        } else {
            die("%s: not a .json, .bin, .txt or .jsonl file (or too many)", argv[i]);
        }
    }
    checkpoint_seeds();
    flag_seeds();
    dataloader_seeds(shards, shard_names, n_shards);
    tokenizer_seeds(argv[2]);
    encode_seeds(texts, text_names, n_texts);
    return 0;
}
