/* test_data.c: tests of the shard loader (data/dataloader.c) on shards written into a temporary directory, and of the
 * tokenizer (data/tokenizer.c): the byte vocabulary, malformed tiktoken files, and the Llama 3 tokenizer file from
 * $SHARED_DATA. */
#include "data/dataloader.h"
#include "data/tokenizer.h"
#include "tests/test_util.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define MAGIC_U16 20240520
#define MAGIC_U32 20240801
#define VOCAB 60000 /* above every token the tests write (1000 * shard + offset) */
#define MAX_KEYS 4096

static char tmp_dir[] = "/tmp/test_data_XXXXXX";
static char err[1024];

static void path_in_tmp(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmp_dir, name); }

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes a shard file with any header (to make bad ones): tokens[0..ntok) in the size that magic implies (uint16 for
 * MAGIC_U16, else uint32), then extra_bytes zero bytes. Exits with a FAIL line if the file cannot be written. */
static void write_shard_raw(const char *name, int32_t magic, int32_t version, int32_t header_count,
                            const uint32_t *tokens, size_t ntok, size_t extra_bytes) {
    char path[512];
    path_in_tmp(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    uint8_t header[1024] = {0};
    put_le32(header, (uint32_t)magic);
    put_le32(header + 4, (uint32_t)version);
    put_le32(header + 8, (uint32_t)header_count);
    int ok = f && fwrite(header, 1, sizeof header, f) == sizeof header;
    size_t token_bytes = magic == MAGIC_U16 ? 2 : 4;
    for (size_t i = 0; ok && i < ntok; i++) {
        uint8_t b[4];
        put_le32(b, tokens[i]);
        ok = fwrite(b, 1, token_bytes, f) == token_bytes;
    }
    for (size_t i = 0; ok && i < extra_bytes; i++) ok = fputc(0, f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) {
        printf("FAIL cannot write the test shard %s\n", path);
        exit(1);
    }
}

/* A valid shard of ntok tokens base, base+1, ... */
static void write_shard(const char *name, int token_bytes, uint32_t base, size_t ntok) {
    uint32_t *tokens = malloc(ntok * sizeof *tokens);
    for (size_t i = 0; i < ntok; i++) tokens[i] = base + (uint32_t)i;
    write_shard_raw(name, token_bytes == 2 ? MAGIC_U16 : MAGIC_U32, 1, (int32_t)ntok, tokens, ntok, 0);
    free(tokens);
}

static void write_text_file(const char *name, const char *text) {
    char path[512];
    path_in_tmp(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) {
        printf("FAIL cannot write the test file %s\n", path);
        exit(1);
    }
}

static DataLoader *open_in_tmp(const char *glob_name, int B, int T, int vocab, int shuffle, uint64_t seed) {
    char pattern[512];
    path_in_tmp(pattern, sizeof pattern, glob_name);
    return dataloader_open(pattern, B, T, vocab, shuffle, seed, err, sizeof err);
}

/* Reads n batches and stores each sample's first input token, which identifies the sample, in keys[n*B].
 * Returns 0, or -1 on a loader error or when inputs and targets are not the same tokens offset by one. */
static int read_keys(DataLoader *dl, int B, int T, int n, uint32_t *keys) {
    int32_t *inputs = malloc((size_t)B * T * sizeof *inputs), *targets = malloc((size_t)B * T * sizeof *targets);
    int status = 0;
    for (int i = 0; i < n && status == 0; i++) {
        status = dataloader_next(dl, inputs, targets, err, sizeof err);
        for (int b = 0; b < B && status == 0; b++) {
            const int32_t *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
            for (int t = 0; t < T; t++)
                if (in[t] != in[0] + t || tg[t] != in[0] + t + 1) status = -1;
            keys[(size_t)i * B + b] = (uint32_t)in[0];
        }
    }
    free(inputs);
    free(targets);
    return status;
}

static int count_open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

static void test_header_errors(void) {
    uint32_t tokens[64];
    for (int i = 0; i < 64; i++) tokens[i] = (uint32_t)i;
    DataLoader *dl;

    write_shard_raw("magic_000.bin", 20240521, 1, 64, tokens, 64, 0);
    dl = open_in_tmp("magic_*.bin", 2, 8, VOCAB, 0, 0);
    CHECK(!dl && strstr(err, "magic_000.bin") && strstr(err, "magic"), "wrong magic is an error naming the file: %s",
          err);

    write_shard_raw("version_000.bin", MAGIC_U16, 2, 64, tokens, 64, 0);
    dl = open_in_tmp("version_*.bin", 2, 8, VOCAB, 0, 0);
    CHECK(!dl && strstr(err, "version_000.bin") && strstr(err, "version 2"),
          "wrong version is an error naming the file: %s", err);

    write_shard_raw("zero_000.bin", MAGIC_U16, 1, 0, tokens, 0, 0);
    dl = open_in_tmp("zero_*.bin", 2, 8, VOCAB, 0, 0);
    CHECK(!dl && strstr(err, "zero_000.bin") && strstr(err, "token count 0"),
          "a zero token count is an error naming the file: %s", err);

    /* 64 tokens of uint32 = 1024 + 256 bytes expected; 63 written = 1276 bytes */
    write_shard_raw("trunc_000.bin", MAGIC_U32, 1, 64, tokens, 63, 0);
    dl = open_in_tmp("trunc_*.bin", 2, 8, VOCAB, 0, 0);
    CHECK(!dl && strstr(err, "trunc_000.bin") && strstr(err, "1280") && strstr(err, "1276"),
          "a truncated shard is an error naming the file and both sizes: %s", err);

    write_shard_raw("extra_000.bin", MAGIC_U16, 1, 64, tokens, 64, 3);
    dl = open_in_tmp("extra_*.bin", 2, 8, VOCAB, 0, 0);
    CHECK(!dl && strstr(err, "extra_000.bin") && strstr(err, "1152") && strstr(err, "1155"),
          "extra bytes after the tokens are an error naming the file and both sizes: %s", err);

    write_shard("good_000.bin", 2, 0, 64);
    write_shard_raw("good_001.bin", MAGIC_U16, 1, 64, tokens, 64, 1);
    dl = open_in_tmp("good_*.bin", 2, 8, VOCAB, 0, 0);
    CHECK(!dl && strstr(err, "good_001.bin"), "one bad shard among good ones names the bad one: %s", err);

    dl = open_in_tmp("nothing_*.bin", 2, 8, VOCAB, 0, 0);
    CHECK(!dl && strstr(err, "nothing_*.bin"), "a pattern matching no file is an error naming the pattern: %s", err);

    /* T = 8: 5 tokens hold no sample, 9 tokens hold one; B = 2 needs two */
    write_shard("small_000.bin", 2, 0, 5);
    write_shard("small_001.bin", 2, 1000, 9);
    dl = open_in_tmp("small_*.bin", 2, 8, VOCAB, 0, 0);
    CHECK(!dl && strstr(err, "small_000.bin") && strstr(err, "fewer than one batch"),
          "shards holding fewer than B samples together are an error naming them: %s", err);
    dl = open_in_tmp("small_*.bin", 1, 8, VOCAB, 0, 0);
    CHECK(dl && dataloader_batches_per_epoch(dl) == 1, "the same shards hold one batch of B = 1 (%s)", dl ? "" : err);
    dataloader_close(dl);
}

static void test_token_sizes_and_offsets(void) {
    const int B = 3, T = 8, n = 12;
    write_shard("u16_000.bin", 2, 100, 203);
    write_shard("u32_000.bin", 4, 100, 203);
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        DataLoader *a = open_in_tmp("u16_*.bin", B, T, VOCAB, shuffle, 5);
        DataLoader *b = open_in_tmp("u32_*.bin", B, T, VOCAB, shuffle, 5);
        uint32_t ka[MAX_KEYS], kb[MAX_KEYS];
        int ok = a && b && read_keys(a, B, T, n, ka) == 0 && read_keys(b, B, T, n, kb) == 0;
        CHECK(ok, "uint16 and uint32 shards read, targets are inputs shifted by one (shuffle %d) %s", shuffle,
              ok ? "" : err);
        CHECK(ok && memcmp(ka, kb, sizeof(uint32_t) * B * n) == 0,
              "uint16 and uint32 shards of the same tokens give the same batches (shuffle %d)", shuffle);
        dataloader_close(a);
        dataloader_close(b);
    }
}

static void test_sequential(void) {
    /* T = 8: 50 tokens hold 6 samples, 5 tokens none, 33 tokens 4: 10 samples, B = 4: 2 batches, 2 samples skipped */
    const int B = 4, T = 8;
    write_shard("seq_000.bin", 2, 0, 50);
    write_shard("seq_001.bin", 2, 1000, 5);
    write_shard("seq_002.bin", 4, 2000, 33);
    DataLoader *dl = open_in_tmp("seq_*.bin", B, T, VOCAB, 0, 0);
    CHECK(dl != NULL, "sequential loader opens %s", dl ? "" : err);
    if (!dl) return;
    CHECK(dataloader_num_shards(dl) == 3 && dataloader_num_tokens(dl) == 88 && dataloader_batches_per_epoch(dl) == 2,
          "3 shards, 88 tokens, 2 batches per epoch (got %d, %llu, %llu)", dataloader_num_shards(dl),
          (unsigned long long)dataloader_num_tokens(dl), (unsigned long long)dataloader_batches_per_epoch(dl));
    uint32_t keys[24];
    const uint32_t epoch[8] = {0, 8, 16, 24, 32, 40, 2000, 2008};
    int ok = read_keys(dl, B, T, 6, keys) == 0;
    for (int i = 0; ok && i < 24; i++) ok = keys[i] == epoch[i % 8];
    CHECK(ok, "without shuffle, samples come in order across shards (a batch spans two), skipping the empty shard "
              "and the epoch's last partial batch, for 3 epochs");
    DataPosition pos = dataloader_tell(dl);
    CHECK(pos.epoch == 3 && pos.shard == 0 && pos.sample == 0, "after 3 epochs the position is (3, 0, 0), got (%llu, "
          "%llu, %llu)", (unsigned long long)pos.epoch, (unsigned long long)pos.shard, (unsigned long long)pos.sample);
    dataloader_close(dl);
}

/* Checks that every sample of the shuf_* shards is read exactly once in each of several epochs (when total samples
 * are a multiple of B) or at most once (otherwise), that the epochs' orders differ, and that each epoch reads the
 * shards one after another. */
static void test_shuffle_epochs(int B) {
    const int T = 8, epochs = 4;
    const int total_samples = 18; /* shuf_*: 5 + 10 + 0 + 3 */
    DataLoader *dl = open_in_tmp("shuf_*.bin", B, T, VOCAB, 1, 42);
    CHECK(dl != NULL, "shuffled loader opens (B = %d) %s", B, dl ? "" : err);
    if (!dl) return;
    int per_epoch = (int)dataloader_batches_per_epoch(dl) * B;
    uint32_t keys[MAX_KEYS];
    int ok = read_keys(dl, B, T, epochs * per_epoch / B, keys) == 0;
    CHECK(ok && per_epoch == total_samples / B * B, "read %d epochs of %d samples %s", epochs, per_epoch,
          ok ? "" : err);
    int once = ok, orders_differ = 1, shard_runs_ok = 1, sequential = 1;
    for (int e = 0; ok && e < epochs; e++) {
        const uint32_t *k = keys + (size_t)e * per_epoch;
        int seen[4][16] = {{0}}, switches = 0;
        for (int i = 0; i < per_epoch; i++) {
            seen[k[i] / 1000][k[i] % 1000 / T]++;
            if (i > 0 && k[i] / 1000 != k[i - 1] / 1000) switches++;
            if (i > 0 && k[i] < k[i - 1]) sequential = 0;
        }
        int shard_samples[4] = {5, 10, 0, 3};
        for (int s = 0; s < 4; s++)
            for (int j = 0; j < shard_samples[s]; j++)
                if (seen[s][j] > 1 || (per_epoch == total_samples && seen[s][j] != 1)) once = 0;
        if (switches > 2) shard_runs_ok = 0; /* three shards with samples: at most two switches */
        for (int f = 0; f < e; f++)
            if (memcmp(k, keys + (size_t)f * per_epoch, sizeof(uint32_t) * per_epoch) == 0) orders_differ = 0;
    }
    if (per_epoch == total_samples)
        CHECK(once, "with shuffle each epoch visits every sample exactly once (B = %d)", B);
    else
        CHECK(once, "with shuffle each epoch visits %d of %d samples, none twice (B = %d)", per_epoch, total_samples,
              B);
    CHECK(orders_differ && !sequential, "each epoch has its own order, not the sequential one (B = %d)", B);
    CHECK(shard_runs_ok, "each epoch reads the shards one after another (B = %d)", B);
    dataloader_close(dl);
}

static void test_seeds(void) {
    const int B = 3, T = 8, n = 18;
    uint32_t k1[MAX_KEYS], k2[MAX_KEYS], k3[MAX_KEYS];
    DataLoader *a = open_in_tmp("shuf_*.bin", B, T, VOCAB, 1, 7), *b = open_in_tmp("shuf_*.bin", B, T, VOCAB, 1, 7),
               *c = open_in_tmp("shuf_*.bin", B, T, VOCAB, 1, 8);
    int ok = a && b && c && read_keys(a, B, T, n, k1) == 0 && read_keys(b, B, T, n, k2) == 0 &&
             read_keys(c, B, T, n, k3) == 0;
    CHECK(ok && memcmp(k1, k2, sizeof(uint32_t) * B * n) == 0, "two loaders with the same seed give the same batches");
    CHECK(ok && memcmp(k1, k3, sizeof(uint32_t) * B * n) != 0, "a different seed gives different batches");
    dataloader_rewind(a);
    ok = ok && read_keys(a, B, T, n, k2) == 0;
    CHECK(ok && memcmp(k1, k2, sizeof(uint32_t) * B * n) == 0, "rewind starts the same sequence again");
    dataloader_close(a);
    dataloader_close(b);
    dataloader_close(c);
}

static void test_tell_seek(int shuffle) {
    /* shuf_* with B = 3: 6 batches per epoch; positions before, at and after an epoch boundary */
    const int B = 3, T = 8, after = 7;
    const int skips[] = {0, 4, 6, 11};
    for (size_t i = 0; i < sizeof skips / sizeof skips[0]; i++) {
        uint32_t skipped[MAX_KEYS], k1[MAX_KEYS], k2[MAX_KEYS];
        DataLoader *a = open_in_tmp("shuf_*.bin", B, T, VOCAB, shuffle, 3);
        DataLoader *b = open_in_tmp("shuf_*.bin", B, T, VOCAB, shuffle, 3);
        int ok = a && b && read_keys(a, B, T, skips[i], skipped) == 0;
        DataPosition pos = a ? dataloader_tell(a) : (DataPosition){0, 0, 0};
        ok = ok && read_keys(a, B, T, after, k1) == 0 && dataloader_seek(b, pos, err, sizeof err) == 0 &&
             read_keys(b, B, T, after, k2) == 0;
        CHECK(ok && memcmp(k1, k2, sizeof(uint32_t) * B * after) == 0,
              "shuffle %d: after %d batches, tell (%llu, %llu, %llu) and seek in a fresh loader give the same %d "
              "batches %s",
              shuffle, skips[i], (unsigned long long)pos.epoch, (unsigned long long)pos.shard,
              (unsigned long long)pos.sample, after, ok ? "" : err);
        dataloader_close(a);
        dataloader_close(b);
    }
    DataLoader *dl = open_in_tmp("shuf_*.bin", B, T, VOCAB, shuffle, 3);
    if (!dl) return;
    uint32_t keys[MAX_KEYS];
    read_keys(dl, B, T, 2, keys);
    DataPosition before = dataloader_tell(dl);
    int bad_shard = dataloader_seek(dl, (DataPosition){0, 4, 0}, err, sizeof err);
    CHECK(bad_shard == -1 && strstr(err, "outside the data"), "shuffle %d: seeking to shard 4 of 4 is an error: %s",
          shuffle, err);
    int bad_sample = dataloader_seek(dl, (DataPosition){5, 0, 10}, err, sizeof err);
    DataPosition now = dataloader_tell(dl);
    CHECK(bad_sample == -1 && strstr(err, "outside the data") && now.epoch == before.epoch &&
              now.shard == before.shard && now.sample == before.sample,
          "shuffle %d: seeking past a shard's samples is an error and leaves the position: %s", shuffle, err);
    uint32_t k1[MAX_KEYS], k2[MAX_KEYS];
    int ok = read_keys(dl, B, T, 3, k1) == 0 && dataloader_seek(dl, before, err, sizeof err) == 0 &&
             read_keys(dl, B, T, 3, k2) == 0;
    CHECK(ok && memcmp(k1, k2, sizeof(uint32_t) * B * 3) == 0,
          "shuffle %d: after failed seeks the loader reads on, and seeking back repeats the same batches", shuffle);
    dataloader_close(dl);
}

static void test_one_file_open(void) {
    char name[64];
    for (int i = 0; i < 24; i++) {
        snprintf(name, sizeof name, "many_%03d.bin", i);
        write_shard(name, 2, 1000 * (uint32_t)i, 40);
    }
    int before = count_open_fds(), most = 0;
    DataLoader *dl = open_in_tmp("many_*.bin", 5, 8, VOCAB, 1, 1);
    int ok = dl != NULL;
    for (int i = 0; ok && i < 60; i++) {
        uint32_t keys[8];
        ok = read_keys(dl, 5, 8, 1, keys) == 0;
        int n = count_open_fds() - before;
        if (n > most) most = n;
    }
    CHECK(ok && before > 0 && most <= 1, "reading 24 shuffled shards keeps at most one file open (%d) %s", most,
          ok ? "" : err);
    dataloader_close(dl);
    CHECK(count_open_fds() == before, "close releases the open file");
}

static void test_out_of_vocab(void) {
    uint32_t tokens[40];
    for (int i = 0; i < 40; i++) tokens[i] = (uint32_t)i;
    tokens[13] = 99;
    write_shard_raw("oov_000.bin", MAGIC_U32, 1, 40, tokens, 40, 0);
    DataLoader *dl = open_in_tmp("oov_*.bin", 2, 8, 99, 0, 0);
    CHECK(dl != NULL, "a shard with an out-of-vocabulary id opens (ids are checked as batches are read) %s",
          dl ? "" : err);
    if (!dl) return;
    int32_t inputs[16], targets[16];
    int rc = dataloader_next(dl, inputs, targets, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "oov_000.bin") && strstr(err, "token 13") && strstr(err, "id 99") &&
              strstr(err, "another vocabulary"),
          "a token id >= vocab_size is an error naming the file, offset and id: %s", err);
    DataPosition pos = dataloader_tell(dl);
    CHECK(pos.epoch == 0 && pos.shard == 0 && pos.sample == 0, "the failed batch leaves the position");
    dataloader_close(dl);
}

static void test_byte_tokenizer(void) {
    Tokenizer *tok = tokenizer_open("byte", err, sizeof err);
    CHECK(tok && tokenizer_vocab_size(tok) == 256 && tokenizer_bos(tok) == -1, "byte tokenizer: 256 ids, no BOS");
    if (!tok) return;
    const char *text = "h\xc3\xa9llo\n\x01\xff";
    int32_t ids[32];
    int n = tokenizer_encode(tok, text, ids, 32);
    char decoded[64] = {0};
    size_t used = 0, len;
    int ids_ok = n == (int)strlen(text);
    for (int i = 0; i < n; i++) {
        ids_ok = ids_ok && ids[i] == (uint8_t)text[i];
        const char *piece = tokenizer_piece(tok, ids[i], &len);
        memcpy(decoded + used, piece, len);
        used += len;
    }
    CHECK(ids_ok && used == strlen(text) && memcmp(decoded, text, used) == 0,
          "byte tokenizer: ids are the bytes and decode back");
    CHECK(tokenizer_encode(tok, text, ids, 3) == 3, "byte tokenizer: encode stops at max ids");
    const char *piece = tokenizer_piece(tok, 256, &len);
    CHECK(len == 3 && memcmp(piece, "<?>", 3) == 0, "an id outside the vocabulary decodes to <?>");
    tokenizer_close(tok);
}

static void test_malformed_tokenizer_files(void) {
    char path[512];
    struct {
        const char *name, *text, *expect;
    } cases[] = {
        {"bad_base64.model", "IQ== 0\nIg== 1\nI!== 2\n", "line 3"},
        {"bad_padding.model", "IQ== 0\nI=g= 1\n", "line 2"},
        {"bad_order.model", "IQ== 0\nIg== 2\n", "line 2"},
        {"bad_rank.model", "IQ== 0\nIg== x1\n", "line 2"},
        {"bad_line.model", "IQ== 0\nIg==\n", "line 2"},
        {"short.model", "IQ== 0\nIg== 1\n", "2 ranks, expected 128000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text_file(cases[i].name, cases[i].text);
        path_in_tmp(path, sizeof path, cases[i].name);
        Tokenizer *tok = tokenizer_open(path, err, sizeof err);
        CHECK(!tok && strstr(err, path) && strstr(err, cases[i].expect), "malformed tokenizer file %s: %s",
              cases[i].name, err);
        tokenizer_close(tok);
    }
    path_in_tmp(path, sizeof path, "missing.model");
    Tokenizer *tok = tokenizer_open(path, err, sizeof err);
    CHECK(!tok && strstr(err, path), "a missing tokenizer file is an error naming it: %s", err);
}

/* text with \n, \r and \t escaped, so that each check prints one line. */
static const char *escaped(const char *text) {
    static char out[512];
    size_t j = 0;
    for (const char *c = text; *c && j + 3 < sizeof out; c++) {
        const char *esc = *c == '\n' ? "\\n" : *c == '\r' ? "\\r" : *c == '\t' ? "\\t" : NULL;
        if (esc) {
            memcpy(out + j, esc, 2);
            j += 2;
        } else {
            out[j++] = *c;
        }
    }
    out[j] = '\0';
    return out;
}

/* Encodes text, checks the ids decode back to it; returns the number of ids (or -1). */
static int llama3_round_trip(const Tokenizer *tok, const char *text, int32_t *ids, int max) {
    int n = tokenizer_encode(tok, text, ids, max);
    size_t used = 0, text_len = strlen(text), len;
    int same = n >= 0;
    for (int i = 0; same && i < n; i++) {
        const char *piece = tokenizer_piece(tok, ids[i], &len);
        same = ids[i] >= 0 && ids[i] < 128000 && used + len <= text_len && memcmp(text + used, piece, len) == 0;
        used += len;
    }
    CHECK(same && used == text_len, "llama3: \"%s\" encodes to %d ids that decode back", escaped(text), n);
    return n;
}

static void test_llama3_tokenizer(void) {
    const char *dir = getenv("SHARED_DATA") ? getenv("SHARED_DATA") : "../shared/data";
    char path[512];
    snprintf(path, sizeof path, "%s/llama3_tokenizer.model", dir);
    Tokenizer *tok = tokenizer_open(path, err, sizeof err);
    CHECK(tok != NULL, "llama3: the tokenizer file opens (looked at %s; set SHARED_DATA to its directory) %s", path,
          tok ? "" : err);
    if (!tok) return;
    CHECK(tokenizer_vocab_size(tok) == 128256 && tokenizer_bos(tok) == 128000, "llama3: 128256 ids, BOS 128000");
    struct {
        int32_t id;
        const char *name;
    } specials[] = {{128000, "<|begin_of_text|>"},   {128001, "<|end_of_text|>"},
                    {128004, "<|finetune_right_pad_id|>"}, {128009, "<|eot_id|>"},
                    {128010, "<|python_tag|>"},      {128011, "<|reserved_special_token_3|>"},
                    {128255, "<|reserved_special_token_247|>"}};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        size_t len;
        const char *piece = tokenizer_piece(tok, specials[i].id, &len);
        CHECK(len == strlen(specials[i].name) && memcmp(piece, specials[i].name, len) == 0, "llama3: id %d is %s",
              specials[i].id, specials[i].name);
    }
    int32_t ids[256];
    /* From tiktoken with the same file and Llama 3's pattern: enc.encode_ordinary("Hello") == [9906],
     * enc.encode_ordinary(" world") == [1917]. */
    int n = llama3_round_trip(tok, "Hello", ids, 256);
    CHECK(n == 1 && ids[0] == 9906, "llama3: \"Hello\" is the single id 9906, as tiktoken gives");
    n = llama3_round_trip(tok, "Hello world", ids, 256);
    CHECK(n == 2 && ids[0] == 9906 && ids[1] == 1917, "llama3: \"Hello world\" is 9906 1917, as tiktoken gives");
    llama3_round_trip(tok, "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.", ids,
                      256);
    llama3_round_trip(tok, "Punctuation: (a+b)*c = {d}; x != y? \"quoted\" -- 'single' ... #1,234.56!", ids, 256);
    llama3_round_trip(tok, "naïve café — ünïcode 日本語 🙂", ids, 256);
    llama3_round_trip(tok, "\n\n\t  spaces   and\r\nnewlines\n", ids, 256);
    CHECK(tokenizer_encode(tok, "", ids, 256) == 0, "llama3: the empty text is no ids");
    CHECK(tokenizer_encode(tok, "Hello world", ids, 1) == 1 && ids[0] == 9906, "llama3: encode stops at max ids");
    tokenizer_close(tok);
}

static void remove_tmp_dir(void) {
    DIR *d = opendir(tmp_dir);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            path_in_tmp(path, sizeof path, e->d_name);
            remove(path);
        }
    if (d) closedir(d);
    rmdir(tmp_dir);
}

int main(void) {
    if (!mkdtemp(tmp_dir)) {
        printf("FAIL cannot create a temporary directory\n");
        return 1;
    }
    test_header_errors();
    test_token_sizes_and_offsets();
    test_sequential();
    /* T = 8: 41 tokens hold 5 samples, 81 tokens 10, 7 tokens none, 25 tokens 3: 18 samples */
    write_shard("shuf_000.bin", 2, 0, 41);
    write_shard("shuf_001.bin", 4, 1000, 81);
    write_shard("shuf_002.bin", 2, 2000, 7);
    write_shard("shuf_003.bin", 2, 3000, 25);
    test_shuffle_epochs(3);
    test_shuffle_epochs(4);
    test_seeds();
    test_tell_seek(0);
    test_tell_seek(1);
    test_one_file_open();
    test_out_of_vocab();
    test_byte_tokenizer();
    test_malformed_tokenizer_files();
    test_llama3_tokenizer();
    remove_tmp_dir();
    return test_summary();
}
