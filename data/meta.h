/* meta.h: the data's meta.json, which scripts/prepare_data.py writes beside the token shards (the tokenizer they were
 * made with, the shard files and their token counts). The trainer reads one entry of it: the tokenizer. */
#ifndef META_H
#define META_H

#include <stddef.h>

/* tokenizer "auto": when tokenizer (a buffer of cap bytes) holds "auto", replaces it with the "tokenizer" of meta.json
 * in the directory of the shards of the glob train_data, or with "" when there is no meta.json; any other value is
 * left as it is. 0, or -1 with a message for a broken meta.json. */
int meta_resolve_tokenizer(const char *train_data, char *tokenizer, size_t cap, char *err, size_t errlen);

#endif
