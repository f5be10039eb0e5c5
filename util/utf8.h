/* utf8.h: checking UTF-8 text: what JSON files (the run's train_config.json and log.jsonl) can hold. */
#ifndef UTF8_H
#define UTF8_H

#include <stddef.h>

/* The length of the valid UTF-8 sequence at s (1 to 4), or 0 if the bytes there are not one. */
int utf8_sequence(const unsigned char *s);
/* The offset of the first byte of the NUL-terminated s that is not part of valid UTF-8, or -1 when it is all valid. */
long utf8_invalid_at(const char *s);
/* A copy of text with every byte that is not part of valid UTF-8 replaced by U+FFFD; NULL when out of memory. The
 * caller frees it. */
char *utf8_repaired(const char *text);

#endif
