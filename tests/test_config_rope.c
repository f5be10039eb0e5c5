/* test_config_rope.c: a Hugging Face config's RoPE in transformers 4's form (rope_theta + rope_scaling) and in
 * transformers 5's (rope_parameters) describes the same model, llama3 scaling and plain; a file that gives both forms
 * must agree, or is an error naming both keys; unsupported or malformed RoPE keys are errors naming the key; the
 * export writes the form that both versions read. The fixtures are written here, key for key as transformers 4.57 and
 * 5.23 save a LlamaConfig. */
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "model/config.h"
#include "persist/hf_config.h"
#include "tests/test_util.h"

/* The keys of both versions' files other than the RoPE ones (transformers 5 adds pad_token_id: null). */
#define BASE_KEYS                                                                                                     \
    "\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "               \
    "\"bos_token_id\": 1, \"eos_token_id\": 2, \"head_dim\": 16, \"hidden_act\": \"silu\", \"hidden_size\": 64, "     \
    "\"initializer_range\": 0.02, \"intermediate_size\": 128, \"max_position_embeddings\": 2048, "                    \
    "\"mlp_bias\": false, \"model_type\": \"llama\", \"num_attention_heads\": 4, \"num_hidden_layers\": 2, "           \
    "\"num_key_value_heads\": 2, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": true, "     \
    "\"use_cache\": true, \"vocab_size\": 256"
#define V4_KEYS BASE_KEYS ", \"dtype\": \"float32\", \"transformers_version\": \"4.57.6\""
#define V5_KEYS BASE_KEYS ", \"dtype\": \"float32\", \"pad_token_id\": null, \"transformers_version\": \"5.23.0\""
#define LLAMA3_FIELDS                                                                                                 \
    "\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "                                         \
    "\"original_max_position_embeddings\": 8192"

static const char *V4_LLAMA3 = "{" V4_KEYS ", \"rope_scaling\": {" LLAMA3_FIELDS ", \"rope_type\": \"llama3\"}, "
                               "\"rope_theta\": 500000.0}";
static const char *V5_LLAMA3 = "{" V5_KEYS ", \"rope_parameters\": {" LLAMA3_FIELDS ", \"rope_theta\": 500000.0, "
                               "\"rope_type\": \"llama3\"}}";
static const char *V4_PLAIN = "{" V4_KEYS ", \"rope_scaling\": null, \"rope_theta\": 250000.0}";
static const char *V5_PLAIN = "{" V5_KEYS ", \"rope_parameters\": {\"rope_theta\": 250000.0, \"rope_type\": "
                              "\"default\"}}";

static char last_path[64];

/* Loads the JSON text as a config file on top of what c holds. 0, or -1 with the message in err. */
static int load_text_onto(Config *c, const char *text, char *err, size_t errlen) {
    snprintf(last_path, sizeof(last_path), "/tmp/test_config_rope_XXXXXX");
    int fd = mkstemp(last_path);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) != 0) {
        snprintf(err, errlen, "cannot write a temporary file");
        return -1;
    }
    int rc = config_load_file(c, last_path, err, errlen);
    unlink(last_path);
    return rc;
}

/* Loads the JSON text as a config file on top of the defaults into c. */
static int load_text(Config *c, const char *text, char *err, size_t errlen) {
    config_defaults(c);
    return load_text_onto(c, text, err, errlen);
}

/* The same model from the transformers 4 and transformers 5 files of one RoPE. */
static void test_both_versions(const char *what, const char *v4, const char *v5, int llama3, double theta) {
    Config a, b;
    char err[1024];
    int rc4 = load_text(&a, v4, err, sizeof(err));
    CHECK(rc4 == 0, "%s, transformers 4's file loads%s%s", what, rc4 ? ": " : "", rc4 ? err : "");
    int rc5 = load_text(&b, v5, err, sizeof(err));
    CHECK(rc5 == 0, "%s, transformers 5's file loads%s%s", what, rc5 ? ": " : "", rc5 ? err : "");
    if (rc4 || rc5) return;
    const char *diff = config_model_difference(&a.model, &b.model);
    CHECK(diff == NULL, "%s: both files give the same model (first difference: %s)", what, diff ? diff : "none");
    const ModelConfig *m = &b.model;
    int scaled = m->rope_llama3 && m->rope_factor == 32 && m->rope_low_freq_factor == 1 &&
                 m->rope_high_freq_factor == 4 && m->rope_original_max_position_embeddings == 8192;
    CHECK(m->rope_theta == theta && (llama3 ? scaled : !m->rope_llama3),
          "%s: rope_theta %g, llama3 scaling %s (%d, factor %g, %g, %g, %d)", what, m->rope_theta,
          llama3 ? "on" : "off", m->rope_llama3, m->rope_factor, m->rope_low_freq_factor, m->rope_high_freq_factor,
          m->rope_original_max_position_embeddings);
}

/* A file that loads to the RoPE given (llama3 with factor 32, or plain) and theta. */
static void expect_rope(const char *what, const char *text, int llama3, double theta) {
    Config c;
    char err[1024];
    int rc = load_text(&c, text, err, sizeof(err));
    CHECK(rc == 0 && c.model.rope_llama3 == llama3 && (!llama3 || c.model.rope_factor == 32) &&
              c.model.rope_theta == theta,
          "%s: llama3 %d (want %d), rope_theta %g (want %g)%s%s", what, rc ? -1 : c.model.rope_llama3, llama3,
          rc ? 0 : c.model.rope_theta, theta, rc ? ": " : "", rc ? err : "");
}

/* A file refused with a message that names the file and holds each of the NULL-terminated words. */
static void expect_error(const char *what, const char *text, ...) {
    Config c;
    char err[1024];
    int rc = load_text(&c, text, err, sizeof(err));
    int ok = rc != 0 && strstr(err, last_path) != NULL;
    va_list ap;
    va_start(ap, text);
    for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *)) ok = ok && strstr(err, w);
    va_end(ap);
    CHECK(ok, "%s: %s", what, rc ? err : "accepted");
}

#define LLAMA3_FIELDS_BUT_MAX "\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
#define SMALL "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, " \
              "\"num_attention_heads\": 4, \"vocab_size\": 256, "

static void test_mixed_and_bad(void) {
    expect_rope("both forms, agreeing", "{" SMALL "\"rope_theta\": 500000, \"rope_scaling\": {\"rope_type\": "
                "\"llama3\", " LLAMA3_FIELDS "}, \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": "
                "500000, " LLAMA3_FIELDS "}}", 1, 500000);
    expect_rope("rope_parameters without rope_theta takes the top-level rope_theta",
                "{" SMALL "\"rope_theta\": 500000, \"rope_parameters\": {\"rope_type\": \"llama3\", " LLAMA3_FIELDS
                "}}", 1, 500000);
    expect_rope("rope_parameters without rope_type is plain RoPE",
                "{" SMALL "\"rope_parameters\": {\"rope_theta\": 123456}}", 0, 123456);
    expect_rope("rope_scaling's legacy \"type\" key", "{" SMALL "\"rope_scaling\": {\"type\": \"llama3\", "
                LLAMA3_FIELDS "}}", 1, 10000);
    expect_rope("partial_rotary_factor 1 is plain RoPE over the whole head",
                "{" SMALL "\"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 1.0}}", 0,
                10000);
    expect_error("both forms, scaling disagrees",
                 "{" SMALL "\"rope_scaling\": {\"rope_type\": \"llama3\", " LLAMA3_FIELDS "}, \"rope_parameters\": "
                 "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
                 "\"original_max_position_embeddings\": 8192}}",
                 "rope_scaling (llama3: factor 32", "rope_parameters (llama3: factor 8", "disagree", NULL);
    expect_error("both forms: rope_scaling null, rope_parameters llama3",
                 "{" SMALL "\"rope_scaling\": null, \"rope_parameters\": {\"rope_type\": \"llama3\", " LLAMA3_FIELDS
                 "}}", "rope_scaling (default)", "rope_parameters (llama3", NULL);
    expect_error("both forms, rope_theta disagrees",
                 "{" SMALL "\"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_type\": \"default\", "
                 "\"rope_theta\": 500000.0}}", "rope_theta (10000)", "rope_parameters.rope_theta (500000)",
                 "disagree", NULL);
    expect_error("rope_type yarn", "{" SMALL "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}",
                 "rope_parameters.rope_type \"yarn\" is not supported", NULL);
    expect_error("rope_type linear in rope_scaling",
                 "{" SMALL "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 4.0}}",
                 "rope_scaling.rope_type \"linear\"", NULL);
    expect_error("partial_rotary_factor 0.5",
                 "{" SMALL "\"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}}",
                 "rope_parameters.partial_rotary_factor must be 1", NULL);
    expect_error("a llama3 field with rope_type default",
                 "{" SMALL "\"rope_parameters\": {\"rope_type\": \"default\", \"factor\": 8.0}}",
                 "rope_parameters.factor is not used by rope_type \"default\"", NULL);
    expect_error("llama3 without original_max_position_embeddings",
                 "{" SMALL "\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 32.0, "
                 "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0}}",
                 "rope_parameters.original_max_position_embeddings must be a positive number", NULL);
    expect_error("an unknown key inside rope_parameters",
                 "{" SMALL "\"rope_parameters\": {\"rope_type\": \"default\", \"beta_fast\": 32}}",
                 "unknown key rope_parameters.beta_fast", NULL);
    expect_error("rope_parameters not an object", "{" SMALL "\"rope_parameters\": \"llama3\"}",
                 "rope_parameters must be an object or null", NULL);
    expect_error("rope_type and type disagree",
                 "{" SMALL "\"rope_scaling\": {\"rope_type\": \"llama3\", \"type\": \"default\", " LLAMA3_FIELDS
                 "}}", "rope_scaling.rope_type (\"llama3\") and rope_scaling.type (\"default\") disagree", NULL);
    expect_error("rope_theta out of range inside rope_parameters",
                 "{" SMALL "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 0.5}}",
                 "rope_theta = 0.5 is out of range", NULL);
    expect_error("rope_theta a string", "{" SMALL "\"rope_theta\": \"10000\"}", "\"rope_theta\" must be a number",
                 NULL);
    /* values that JSON holds but the config cannot: an infinite factor (train_config.json would write it as null),
     * an original_max_position_embeddings beyond int or not an integer (found by tests/fuzz/fuzz_config.c) */
    expect_error("an infinite factor",
                 "{" SMALL "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 1e999, \"low_freq_factor\": 1, "
                 "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}",
                 "rope_scaling.factor must be a positive number", NULL);
    expect_error("an infinite low_freq_factor",
                 "{" SMALL "\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, "
                 "\"low_freq_factor\": 1e400, \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}",
                 "rope_parameters.low_freq_factor must be a positive number", NULL);
    expect_error("original_max_position_embeddings 1e12",
                 "{" SMALL "\"rope_scaling\": {\"rope_type\": \"llama3\", " LLAMA3_FIELDS_BUT_MAX
                 "\"original_max_position_embeddings\": 1e12}}",
                 "rope_scaling.original_max_position_embeddings must be an integer", NULL);
    expect_error("original_max_position_embeddings 8192.5",
                 "{" SMALL "\"rope_scaling\": {\"rope_type\": \"llama3\", " LLAMA3_FIELDS_BUT_MAX
                 "\"original_max_position_embeddings\": 8192.5}}",
                 "rope_scaling.original_max_position_embeddings must be an integer", NULL);
}

/* The export's config.json holds rope_theta and rope_scaling (read by transformers 4 and 5), not rope_parameters;
 * a file loaded on top of a config (the -c file of --resume) that says rope_scaling null means plain RoPE. */
static void test_export_and_onto(void) {
    Config c;
    char err[1024];
    if (load_text(&c, V5_LLAMA3, err, sizeof(err))) {
        CHECK(0, "load: %s", err);
        return;
    }
    char *json = hf_export_config(&c.model, "float32");
    int ok = json && strstr(json, "\"rope_theta\":\t500000") && strstr(json, "\"rope_scaling\":\t{") &&
             strstr(json, "\"rope_type\":\t\"llama3\"") && !strstr(json, "rope_parameters");
    CHECK(ok, "the export of a transformers 5 config writes rope_theta and rope_scaling");
    Config back;
    ok = json && load_text(&back, json, err, sizeof(err)) == 0 &&
         config_model_difference(&c.model, &back.model) == NULL;
    CHECK(ok, "the export loads back to the same model");
    free(json);
    ok = load_text_onto(&c, "{\"rope_scaling\": null}", err, sizeof(err)) == 0;
    CHECK(ok && !c.model.rope_llama3 && c.model.rope_theta == 500000,
          "\"rope_scaling\": null on top of a llama3 config gives plain RoPE and keeps rope_theta");
}

int main(void) {
    test_both_versions("llama3 scaling", V4_LLAMA3, V5_LLAMA3, 1, 500000);
    test_both_versions("plain RoPE", V4_PLAIN, V5_PLAIN, 0, 250000);
    Config a, b;
    char err[1024];
    int rc = load_text(&a, V5_LLAMA3, err, sizeof(err)) || load_text(&b, V5_PLAIN, err, sizeof(err));
    const char *diff = rc ? NULL : config_model_difference(&a.model, &b.model);
    CHECK(diff && strcmp(diff, "rope_theta") == 0, "the llama3 and the plain fixture are different models (%s)",
          diff ? diff : "none");
    test_mixed_and_bad();
    test_export_and_onto();
    return test_summary();
}
