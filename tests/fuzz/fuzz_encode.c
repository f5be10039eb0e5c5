/* fuzz_encode.c: libFuzzer harness of the prompt encoder (tokenizer_encode, what --sample-prompt goes through) with
 * the byte vocabulary and the Llama 3 tokenizer (the file named by $FUZZ_TOKENIZER, read once). The input, up to its
 * first NUL byte (a prompt is a C string), is the text. Properties, for both: the ids decode back to the text
 * exactly; every id is an ordinary token (below the special ones); with room for fewer ids, encode gives at most that
 * many and they decode to a prefix of the text (checked with Llama 3 on texts of up to 64 bytes, as its encoder's
 * time grows with the square of the length and the truncation does not depend on it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

static Tokenizer *tokenizers[2]; /* byte, Llama 3 */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    char err[1024];
    const char *path = getenv("FUZZ_TOKENIZER");
    if (!path) {
        fprintf(stderr, "fuzz_encode: set FUZZ_TOKENIZER to the Llama 3 tokenizer.model\n");
        exit(1);
    }
    tokenizers[0] = tokenizer_open("byte", err, sizeof(err));
    tokenizers[1] = tokenizer_open(path, err, sizeof(err));
    if (!tokenizers[0] || !tokenizers[1]) {
        fprintf(stderr, "fuzz_encode: %s\n", err);
        exit(1);
    }
    return 0;
}

/* ids[0..n) decode to text[0..*used); 0 if an id is not an ordinary token or its piece is not the next text. */
static int decodes_to_prefix(const Tokenizer *tok, const int32_t *ids, int n, const char *text, size_t len,
                             size_t *used) {
    int ordinary = tokenizer_bos(tok) < 0 ? tokenizer_vocab_size(tok) : tokenizer_bos(tok);
    *used = 0;
    for (int i = 0; i < n; i++) {
        size_t piece_len;
        const char *piece = tokenizer_piece(tok, ids[i], &piece_len);
        if (ids[i] < 0 || ids[i] >= ordinary || piece_len > len - *used || memcmp(text + *used, piece, piece_len))
            return 0;
        *used += piece_len;
    }
    return 1;
}

static void check_round_trip(const Tokenizer *tok, const char *text, int32_t *ids) {
    size_t len = strlen(text), used;
    int max = (int)len + 1;
    int n = tokenizer_encode(tok, text, ids, max);
    FUZZ_ASSERT(n >= 0 && n <= max, "encode of %zu bytes gave %d ids", len, n);
    FUZZ_ASSERT(decodes_to_prefix(tok, ids, n, text, len, &used) && used == len,
                "%zu bytes encode to %d ids that do not decode back to them", len, n);
    if (tokenizer_bos(tok) >= 0 && len > 64) return;
    int fewer = n / 2;
    int k = tokenizer_encode(tok, text, ids, fewer);
    FUZZ_ASSERT(k >= 0 && k <= fewer, "encode into room for %d ids gave %d", fewer, k);
    FUZZ_ASSERT(decodes_to_prefix(tok, ids, k, text, len, &used), "encode into room for %d ids is not a prefix",
                fewer);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    int32_t *ids = malloc((size + 1) * sizeof(int32_t));
    if (text && ids) {
        memcpy(text, data, size);
        text[size] = 0;
        for (int t = 0; t < 2; t++) check_round_trip(tokenizers[t], text, ids);
    }
    free(text);
    free(ids);
    return 0;
}
