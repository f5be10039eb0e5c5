/* tokenizer.h: token ids to text (for samples printed during training) and a simple encoder for prompts.
 *
 * Two vocabularies: "byte" (256 ids, id = byte value, the tiny CPU config's vocabulary) and the Llama 3 tiktoken
 * file (tokenizer.model: one "base64-token rank" per line, 128000 ranks, followed by 256 special tokens
 * 128000..128255 with Llama 3's names, BOS = 128000 = <|begin_of_text|>, EOS = 128001 = <|end_of_text|>).
 */
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;

/* spec is "byte" or the path of a tiktoken-format file. NULL with a message in err on failure (naming the file,
 * the line and the problem for a malformed file). */
Tokenizer *tokenizer_open(const char *spec, char *err, size_t errlen);
/* The same from a tiktoken file's len bytes in memory; name is the file, for messages. */
Tokenizer *tokenizer_from_memory(const char *text, size_t len, const char *name, char *err, size_t errlen);
void tokenizer_close(Tokenizer *tok);

int tokenizer_vocab_size(const Tokenizer *tok); /* 256 or 128256 */
int tokenizer_bos(const Tokenizer *tok);        /* -1 when the vocabulary has none (byte) */

/* The bytes of one token (not NUL-terminated; a token may be part of a UTF-8 character). Special tokens give their
 * names ("<|begin_of_text|>"). An id outside the vocabulary gives "<?>" */
const char *tokenizer_piece(const Tokenizer *tok, int32_t id, size_t *len);

/* Encodes text into at most max ids; returns the count. Byte: one id per byte. Llama 3: byte-pair merging by rank
 * over the whole text, without tiktoken's regex pre-split, so boundaries can differ from tiktoken's but the ids
 * always decode to the same text. Does not add BOS. -1 when out of memory. */
int tokenizer_encode(const Tokenizer *tok, const char *text, int32_t *out, int max);

#endif
