/* meta.h: the data's meta.json, which scripts/prepare_data.py writes beside the token shards (the tokenizer they were
 * made with, the shard files and their token counts). The trainer reads two entries of it: the tokenizer, and the
 * vocabulary size for its message about data of another vocabulary. */
#ifndef META_H
#define META_H

#include <stddef.h>

/* tokenizer "auto": when tokenizer (a buffer of cap bytes) holds "auto", replaces it with the "tokenizer" of meta.json
 * in the directory of the shards of the glob train_data, or with "" when there is no meta.json; any other value is
 * left as it is. 0, or -1 with a message for a broken meta.json. */
int meta_resolve_tokenizer(const char *train_data, char *tokenizer, size_t cap, char *err, size_t errlen);

/* The "vocab_size" of that meta.json (its path into path, cap bytes), or 0 when there is none or it does not read. */
int meta_vocab_size(const char *train_data, char *path, size_t cap);

#endif
