/* test_config.c: the shipped configs load and describe the intended models (Llama 3.2 1B: 1,235,814,400 parameters),
 * flags override the file whatever their position, and the effective config written to a run directory loads back
 * to the same configuration. The Hugging Face config.json of an export loads back to the same model; on --resume only
 * the safe keys may change; -c and --init-from must describe the same model. Derived counts are checked in 64 bits
 * (micro-steps per step that an int cannot count are refused, naming the keys); a string that is not UTF-8 is refused
 * (train_config.json could not hold it). */
#include <string.h>
#include <unistd.h>

#include "model/config.h"
#include "persist/hf_config.h"
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

static void test_llama3_3b(void) {
    Config c;
    char err[512];
    char *argv[] = {"train", "-c", "configs/llama3_3b.json"};
    int rc = config_from_args(&c, 3, argv, err, sizeof(err));
    CHECK(rc == 0, "configs/llama3_3b.json loads and validates%s%s", rc ? ": " : "", rc ? err : "");
    if (rc) return;
    const ModelConfig *m = &c.model;
    CHECK(m->hidden_size == 3072 && m->num_hidden_layers == 28 && m->num_attention_heads == 24 &&
              m->num_key_value_heads == 8 && m->head_dim == 128 && m->intermediate_size == 8192 &&
              m->vocab_size == 128256 && m->tie_word_embeddings == 1 && m->rope_llama3 && m->rope_factor == 32,
          "Llama 3.2 3B shape: D=%d L=%d Hq=%d Hkv=%d hd=%d F=%d V=%d tied=%d, llama3 RoPE", m->hidden_size,
          m->num_hidden_layers, m->num_attention_heads, m->num_key_value_heads, m->head_dim, m->intermediate_size,
          m->vocab_size, m->tie_word_embeddings);
    CHECK(config_num_parameters(m) == 3212749824LL, "parameter count %lld (Llama 3.2 3B has 3,212,749,824)",
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

/* Writes text to a new temporary file; its path into path (a "/tmp/test_config_XXXXXX" buffer). */
static int write_temp(char *path, const char *text) {
    int fd = mkstemp(path);
    int ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0) close(fd);
    return ok ? 0 : -1;
}

static void test_hf_config(void) {
    const char *configs[] = {"configs/llama3_1b.json", "configs/llama3_tiny.json"};
    for (int i = 0; i < 2; i++) {
        Config a, b;
        char err[512];
        char *argv[] = {"train", "-c", (char *)configs[i]};
        if (config_from_args(&a, 3, argv, err, sizeof(err))) {
            CHECK(0, "load %s: %s", configs[i], err);
            continue;
        }
        char path[] = "/tmp/test_config_XXXXXX";
        char *json = hf_export_config(&a.model, "bfloat16");
        int ok = json && strstr(json, "\"LlamaForCausalLM\"") && strstr(json, "\"torch_dtype\":\t\"bfloat16\"") &&
                 write_temp(path, json) == 0;
        free(json);
        config_defaults(&b);
        ok = ok && config_load_file(&b, path, err, sizeof(err)) == 0;
        unlink(path);
        CHECK(ok && config_model_difference(&a.model, &b.model) == NULL,
              "%s: the Hugging Face config.json of an export loads back to the same model%s%s", configs[i],
              ok ? "" : ": ", ok ? "" : err);
    }
}

static void test_resume_merge(void) {
    Config ckpt, c;
    char err[1024];
    char *load[] = {"train", "-c", "configs/llama3_tiny.json"};
    if (config_from_args(&ckpt, 3, load, err, sizeof(err))) {
        CHECK(0, "load: %s", err);
        return;
    }
    char *safe[] = {"train", "-o", "runs/x", "--resume", "--steps", "5000", "--eval-every", "7", "--keep-last", "1",
                    "--learning-rate", "3e-3"};
    c = ckpt;
    int rc = config_resume_merge(&c, 12, safe, err, sizeof(err));
    CHECK(rc == 0 && c.train.steps == 5000 && c.train.eval_every == 7 && c.train.keep_last == 1 && c.train.resume &&
              strcmp(c.train.out_dir, "runs/x") == 0,
          "--resume takes steps, eval_every, keep_last, out_dir and an unchanged learning rate%s%s", rc ? ": " : "",
          rc ? err : "");
    char *lr[] = {"train", "--resume", "--learning-rate", "0.1"};
    c = ckpt;
    rc = config_resume_merge(&c, 4, lr, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "learning_rate") && strstr(err, "0.1"), "--resume refuses a new learning rate: %s",
          err);
    char *batch[] = {"train", "--resume", "-b", "2"};
    c = ckpt;
    rc = config_resume_merge(&c, 4, batch, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "batch_size"), "--resume refuses a new batch size: %s", err);
    char *model[] = {"train", "--resume", "-c", "configs/llama3_1b.json"};
    c = ckpt;
    rc = config_resume_merge(&c, 4, model, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "hidden_size"), "--resume refuses a config of another model: %s", err);
}

static void test_init_from_agreement(void) {
    char dir[] = "/tmp/test_config_init_XXXXXX";
    if (!mkdtemp(dir)) return;
    char path[128];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    Config a;
    char err[1024];
    char *load[] = {"train", "-c", "configs/llama3_tiny.json"};
    config_from_args(&a, 3, load, err, sizeof(err));
    ModelConfig other = a.model;
    other.num_key_value_heads = 4;
    char *json = hf_export_config(&other, "float32");
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(json, f);
        fclose(f);
    }
    free(json);
    char *both[] = {"train", "-c", "configs/llama3_tiny.json", "--init-from", dir};
    int rc = config_from_args(&a, 5, both, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, path) && strstr(err, "num_key_value_heads") && strstr(err, "2 vs 4"),
          "-c and --init-from configs of different models: %s", err);
    char *only[] = {"train", "--init-from", dir, "-i", "data/tinyshakespeare_byte/train_*.bin", "-t", "128"};
    rc = config_from_args(&a, 7, only, err, sizeof(err));
    CHECK(rc == 0 && a.model.num_key_value_heads == 4 && strcmp(a.path, path) == 0,
          "without -c the model comes from --init-from's config.json%s%s", rc ? ": " : "", rc ? err : "");
    unlink(path);
    rmdir(dir);
}

static void test_micro_steps_range(void) {
    Config c;
    char err[512] = "";
    /* 2^38 tokens in micro-batches of 2 x 64: 2^31 micro-steps, one more than an int holds */
    char *over[] = {"train", "-c", "configs/llama3_tiny.json", "-b", "2", "-t", "64", "--total-batch-tokens",
                    "274877906944"};
    int rc = config_from_args(&c, 9, over, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "total_batch_tokens (274877906944)") && strstr(err, "2147483648 micro-batches") &&
              strstr(err, "batch_size*seq_len (2 x 64)"),
          "2^31 micro-steps per step are refused, naming the keys: %s", err);
    char *most[] = {"train", "-c", "configs/llama3_tiny.json", "-b", "2", "-t", "64", "--total-batch-tokens",
                    "274877906816"};
    rc = config_from_args(&c, 9, most, err, sizeof(err));
    CHECK(rc == 0 && config_micro_steps(&c.train) == 2147483647, "2^31 - 1 micro-steps are accepted (%lld)%s%s",
          (long long)config_micro_steps(&c.train), rc ? ": " : "", rc ? err : "");
    char *beyond[] = {"train", "-c", "configs/llama3_tiny.json", "--total-batch-tokens", "1e17"};
    rc = config_from_args(&c, 5, beyond, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "total_batch_tokens"), "a total_batch_tokens beyond exact doubles is refused: %s",
          err);
}

static void test_utf8_strings(void) {
    Config c;
    char err[512] = "";
    char *argv[] = {"train", "-c", "configs/llama3_tiny.json", "--sample-prompt", "caf\xe9"};
    int rc = config_from_args(&c, 5, argv, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "--sample-prompt") && strstr(err, "sample_prompt is not UTF-8 text (byte 4, 0xe9"),
          "a Latin-1 --sample-prompt is refused, naming the byte: %s", err);
    char *good[] = {"train", "-c", "configs/llama3_tiny.json", "--sample-prompt", "caf\xc3\xa9"};
    rc = config_from_args(&c, 5, good, err, sizeof(err));
    CHECK(rc == 0 && strcmp(c.train.sample_prompt, "caf\xc3\xa9") == 0, "a UTF-8 --sample-prompt is kept%s%s",
          rc ? ": " : "", rc ? err : "");
}

int main(void) {
    test_llama3_1b();
    test_llama3_3b();
    test_flags_override();
    test_round_trip();
    test_hf_config();
    test_resume_merge();
    test_init_from_agreement();
    test_micro_steps_range();
    test_utf8_strings();
    return test_summary();
}
