/* dataloader.h: batches of token sequences from llm.c-format shards, with deterministic shuffling and a resumable
 * position.
 *
 * Shard format (llm.c): a header of 256 int32 (header[0] = magic: 20240520 for uint16 tokens, 20240801 for uint32
 * tokens; header[1] = version, 1; header[2] = number of tokens), then the tokens, little-endian.
 *
 * A sample is T+1 consecutive tokens starting at token s*T of one shard, s in [0, (ntok-1)/T): inputs are its first T
 * tokens, targets its last T. A batch is B samples taken in order (a batch may span the end of one shard and the start
 * of the next). An epoch is batches_per_epoch batches: when fewer than B samples remain in its order, they are skipped
 * and the next epoch begins (with shuffling, different samples are skipped in each epoch). With shuffling, every epoch
 * has its own order of shards and, inside each shard, its own order of samples, both derived only from (seed, epoch,
 * shard index), so a position (epoch, shard, sample) is all that is needed to resume. Without shuffling the order is
 * the sorted shard list and increasing s, as for validation.
 */
#ifndef DATALOADER_H
#define DATALOADER_H

#include <stddef.h>
#include <stdint.h>

typedef struct DataPosition {
    uint64_t epoch;  /* completed passes over all shards */
    uint64_t shard;  /* index into this epoch's shard order */
    uint64_t sample; /* index into that shard's sample order */
} DataPosition;

typedef struct DataLoader DataLoader;

/* Opens every file matching the glob pattern (sorted by name) and validates each header (magic, version, the token
 * count against the file size) and that the shards hold at least one batch together. vocab_size bounds the token ids
 * (checked as batches are read). On error returns NULL with a message naming the file and the problem in err. */
DataLoader *dataloader_open(const char *pattern, int B, int T, int vocab_size, int shuffle, uint64_t seed,
                            char *err, size_t errlen);
void dataloader_close(DataLoader *dl);

/* The next batch: inputs and targets, B*T each. Wraps to the next epoch at the end of the data.
 * Returns 0, or -1 with a message in err (a read error, a token id >= vocab_size: naming the shard and offset). */
int dataloader_next(DataLoader *dl, int32_t *inputs, int32_t *targets, char *err, size_t errlen);

/* Reads the next n batches (into inputs and targets, each over the last) and goes back to where it was: the data a
 * run will read first is checked (its token ids against the vocabulary) before the run writes anything. 0, or -1
 * with dataloader_next's message. */
int dataloader_check_next(DataLoader *dl, uint64_t n, int32_t *inputs, int32_t *targets, char *err, size_t errlen);

/* The position of the next batch: never past the end of a shard nor in the skipped end of an epoch. */
DataPosition dataloader_tell(const DataLoader *dl);
/* Returns 0, or -1 with a message if the position is outside the data. */
int dataloader_seek(DataLoader *dl, DataPosition pos, char *err, size_t errlen);
void dataloader_rewind(DataLoader *dl); /* back to epoch 0, shard 0, sample 0 */

int dataloader_num_shards(const DataLoader *dl);
uint64_t dataloader_num_tokens(const DataLoader *dl);    /* all tokens in all shards */
uint64_t dataloader_batches_per_epoch(const DataLoader *dl); /* floor(total samples / B) */

#endif
