/* test_config.c: the shipped configs load and describe the intended models (Llama 3.2 1B: 1,235,814,400 parameters),
 * flags override the file whatever their position, and the effective config written to a run directory loads back
 * to the same configuration. */
#include <string.h>
#include <unistd.h>

#include "model/config.h"
#include "tests/test_util.h"

static void test_llama3_1b(void) {
    Config c;
    char err[512];
    char *argv[] = {"train", "-c", "configs/llama3_1b.json"};
    int rc = config_from_args(&c, 3, argv, err, sizeof(err));
    CHECK(rc == 0, "configs/llama3_1b.json loads and validates%s%s", rc ? ": " : "", rc ? err : "");
    if (rc) return;
    const ModelConfig *m = &c.model;
    CHECK(m->hidden_size == 2048 && m->num_hidden_layers == 16 && m->num_attention_heads == 32 &&
              m->num_key_value_heads == 8 && m->head_dim == 64 && m->intermediate_size == 8192 &&
              m->vocab_size == 128256 && m->tie_word_embeddings == 1,
          "Llama 3.2 1B shape: D=%d L=%d Hq=%d Hkv=%d hd=%d F=%d V=%d tied=%d", m->hidden_size,
          m->num_hidden_layers, m->num_attention_heads, m->num_key_value_heads, m->head_dim, m->intermediate_size,
          m->vocab_size, m->tie_word_embeddings);
    CHECK(m->rope_llama3 && m->rope_factor == 32 && m->rope_low_freq_factor == 1 && m->rope_high_freq_factor == 4 &&
              m->rope_original_max_position_embeddings == 8192 && m->rope_theta == 500000 && m->rms_norm_eps == 1e-5,
          "llama3 rope_scaling, theta and eps parsed");
    CHECK(config_num_parameters(m) == 1235814400LL, "parameter count %lld (Llama 3.2 1B has 1,235,814,400)",
          (long long)config_num_parameters(m));
}

static void test_flags_override(void) {
    Config c;
    char err[512];
    /* flags before -c still override the file */
    char *argv[] = {"train", "-n", "7", "--learning-rate", "0.01", "-c", "configs/llama3_tiny.json", "-b", "2",
                    "--warmup-steps", "3"};
    int rc = config_from_args(&c, 11, argv, err, sizeof(err));
    CHECK(rc == 0 && c.train.steps == 7 && c.train.learning_rate == 0.01 && c.train.batch_size == 2 &&
              c.train.seq_len == 256 && c.model.hidden_size == 128,
          "flags override the file in any position (steps %d, lr %g, batch %d)%s%s", c.train.steps,
          c.train.learning_rate, c.train.batch_size, rc ? ": " : "", rc ? err : "");
}

static void test_round_trip(void) {
    Config a, b;
    char err[512];
    char *argv[] = {"train", "-c", "configs/llama3_1b.json", "--lr-schedule", "wsd", "--seed", "99"};
    if (config_from_args(&a, 7, argv, err, sizeof(err))) {
        CHECK(0, "load: %s", err);
        return;
    }
    char path[] = "/tmp/test_config_XXXXXX";
    int fd = mkstemp(path);
    char *json = config_to_json(&a);
    int ok = fd >= 0 && write(fd, json, strlen(json)) == (ssize_t)strlen(json) && close(fd) == 0;
    free(json);
    config_defaults(&b);
    ok = ok && config_load_file(&b, path, err, sizeof(err)) == 0;
    unlink(path);
    CHECK(ok && memcmp(&a.model, &b.model, sizeof(a.model)) == 0 && memcmp(&a.train, &b.train, sizeof(a.train)) == 0,
          "the effective config written as JSON loads back identically%s%s", ok ? "" : ": ", ok ? "" : err);
}

int main(void) {
    test_llama3_1b();
    test_flags_override();
    test_round_trip();
    return test_summary();
}
