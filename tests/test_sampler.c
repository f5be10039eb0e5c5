/* test_sampler.c: sample_text writes the prompt, then the piece of each generated token; a generated NUL byte (the
 * byte vocabulary has one) is written as U+FFFD instead of ending the text; the text is truncated to the buffer. */
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/sampler.h"
#include "tests/small_model.h"
#include "tests/test_util.h"

#define U_FFFD "\xEF\xBF\xBD"

int main(void) {
    char err[256] = "";
    ModelConfig c = small_model_config(1);
    c.vocab_size = 256;
    Model m;
    if (model_create(&m, &c, &kernels_cpu, 1, 16, MODEL_GRADS_APART, err, sizeof(err))) {
        CHECK(0, "model_create: %s", err);
        return test_summary();
    }
    Tokenizer *tok = tokenizer_open("byte", err, sizeof(err));
    float *zeros = calloc(m.table.n_params, sizeof(float));
    if (!tok || !zeros) {
        CHECK(0, "setup: %s", tok ? "out of memory" : err);
        return test_summary();
    }
    /* Every weight zero: every logit is 0, so greedy sampling draws id 0, the NUL byte, each time. */
    model_set_master(&m, zeros, 0, m.table.n_params);
    uint64_t rng = 1;
    const SampleSettings greedy = {.n_new = 3, .temperature = 0, .top_k = 0, .stop_id = -1};
    char out[64];
    int n = sample_text(&m, tok, "AB", &greedy, &rng, out, sizeof(out));
    CHECK(n == 3 && strcmp(out, "AB" U_FFFD U_FFFD U_FFFD) == 0,
          "three generated NUL bytes are written as U+FFFD after the prompt (%d tokens, %zu bytes)", n, strlen(out));
    char small[7];
    n = sample_text(&m, tok, "AB", &greedy, &rng, small, sizeof(small));
    CHECK(n == 3 && strcmp(small, "AB" U_FFFD) == 0, "truncated to a buffer of 7 bytes: \"AB\" and one U+FFFD whole");
    free(zeros);
    tokenizer_close(tok);
    model_destroy(&m);
    return test_summary();
}
