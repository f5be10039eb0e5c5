/* fuzz_tokenizer.c: libFuzzer harness of the tiktoken tokenizer-file parser, from memory (tokenizer_from_memory,
 * what --tokenizer FILE reads). Property: a file that parses has the Llama 3 vocabulary (128256 ids, BOS 128000) and
 * every id decodes to a piece. */
#include <stdint.h>

#include "data/tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024];
    Tokenizer *tok = tokenizer_from_memory((const char *)data, size, "fuzz.model", err, sizeof(err));
    if (!tok) return 0;
    FUZZ_ASSERT(tokenizer_vocab_size(tok) == 128256 && tokenizer_bos(tok) == 128000, "not the Llama 3 vocabulary");
    for (int32_t id = 0; id < tokenizer_vocab_size(tok); id++) {
        size_t len;
        const char *piece = tokenizer_piece(tok, id, &len);
        FUZZ_ASSERT(piece && len > 0, "id %d has no piece", id);
    }
    tokenizer_close(tok);
    return 0;
}
