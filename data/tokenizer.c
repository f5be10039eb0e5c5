/* tokenizer.c: the tokenizer declared in tokenizer.h: the byte vocabulary, a strict parser for tiktoken-format files
 * (base64 token + rank per line) with Llama 3's 256 special tokens, an open-addressing hash table from token bytes to
 * rank, and a byte-pair encoder that merges by rank. */
#include "data/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fsutil.h"

#define LLAMA3_NUM_RANKS 128000
#define LLAMA3_NUM_SPECIAL 256
#define LLAMA3_BOS 128000

struct Tokenizer {
    int vocab_size;
    int bos;           /* -1 for the byte vocabulary */
    int num_ranks;     /* ids below this are byte sequences that BPE can produce (all 256 for "byte") */
    char *bytes;       /* the pieces of all ids, back to back */
    size_t *offsets;   /* piece of id i = bytes[offsets[i] .. offsets[i+1]) */
    int32_t *table;    /* open addressing: rank or -1; NULL for the byte vocabulary */
    size_t table_mask; /* table size - 1 (a power of two) */
};

/* Llama 3's special tokens 128000..128010; 128011..128255 are <|reserved_special_token_3|> onwards. */
static const char *const LLAMA3_SPECIAL_NAMES[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
};
#define LLAMA3_NAMED_SPECIAL ((int)(sizeof LLAMA3_SPECIAL_NAMES / sizeof LLAMA3_SPECIAL_NAMES[0]))

/* A growable byte buffer for the pieces. */
typedef struct Bytes {
    char *data;
    size_t len, cap;
} Bytes;

static int bytes_append(Bytes *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *data = realloc(b->data, cap);
        if (!data) return -1;
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static uint64_t hash_bytes(const char *s, size_t n) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    return h;
}

/* The slot holding the rank of s[0..n), or the empty slot where it would go. */
static size_t table_slot(const Tokenizer *tok, const char *s, size_t n) {
    size_t i = (size_t)hash_bytes(s, n) & tok->table_mask;
    for (;;) {
        int32_t id = tok->table[i];
        if (id < 0) return i;
        size_t len = tok->offsets[id + 1] - tok->offsets[id];
        if (len == n && memcmp(tok->bytes + tok->offsets[id], s, n) == 0) return i;
        i = (i + 1) & tok->table_mask;
    }
}

static int32_t lookup_rank(const Tokenizer *tok, const char *s, size_t n) { return tok->table[table_slot(tok, s, n)]; }

static int base64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes standard padded base64 s[0..n) onto out; -1 if it is not valid base64 (or decodes to nothing). */
static int base64_decode_append(const char *s, size_t n, Bytes *out, int *out_of_memory) {
    if (n == 0 || n % 4 != 0) return -1;
    for (size_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int pad = last ? (s[n - 1] == '=') + (s[n - 2] == '=') : 0;
        if (pad == 1 && s[n - 1] != '=') return -1; /* "x=x" style padding */
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            int d = k >= 4 - pad ? 0 : base64_value(s[i + (size_t)k]);
            if (d < 0) return -1;
            v = v << 6 | (uint32_t)d;
        }
        unsigned char chunk[3] = {(unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
        if (bytes_append(out, chunk, (size_t)(3 - pad)) != 0) {
            *out_of_memory = 1;
            return -1;
        }
    }
    return 0;
}

/* The rank written as the decimal digits s[0..n), or -1 if it is not one or exceeds INT32_MAX. */
static int64_t parse_rank(const char *s, size_t n) {
    int64_t v = 0;
    if (n == 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
        if (v > INT32_MAX) return -1;
    }
    return v;
}

/* Parses the "base64 rank" lines of text[0..len) into pieces and offsets (ranks 0..N-1 in order, N = 128000);
 * offsets gets room for the special tokens too (sized by the text's lines, so that a short, bad file costs little).
 * name is the file, for messages. */
static int parse_tiktoken_text(const char *text, size_t len, const char *name, Bytes *pieces, size_t **offsets,
                               char *err, size_t errlen) {
    size_t lines = 1;
    for (const char *p = text; (p = memchr(p, '\n', len - (size_t)(p - text))); p++) lines++;
    if (lines > LLAMA3_NUM_RANKS) lines = LLAMA3_NUM_RANKS;
    *offsets = malloc((lines + LLAMA3_NUM_SPECIAL + 1) * sizeof **offsets);
    long line_no = 0;
    int count = 0, out_of_memory = !*offsets;
    for (size_t at = 0; at < len && !out_of_memory;) {
        const char *line = text + at, *newline = memchr(line, '\n', len - at);
        size_t n = newline ? (size_t)(newline - line) : len - at;
        at += n + (newline != NULL);
        line_no++;
        while (n > 0 && line[n - 1] == '\r') n--;
        int shown = n < 60 ? (int)n : 60;
        const char *space = memchr(line, ' ', n);
        if (!space || space == line || space + 1 == line + n) {
            snprintf(err, errlen, "tokenizer file %s, line %ld: expected \"base64-token rank\", got \"%.*s\"", name,
                     line_no, shown, line);
            return -1;
        }
        if (count == LLAMA3_NUM_RANKS) {
            snprintf(err, errlen, "tokenizer file %s, line %ld: more than %d ranks (Llama 3 has %d)", name, line_no,
                     LLAMA3_NUM_RANKS, LLAMA3_NUM_RANKS);
            return -1;
        }
        size_t rank_len = (size_t)(line + n - space - 1);
        if (parse_rank(space + 1, rank_len) != count) {
            snprintf(err, errlen,
                     "tokenizer file %s, line %ld: rank \"%.*s\" where %d was expected (ranks must be 0, 1, 2, ... "
                     "in order)",
                     name, line_no, rank_len < 30 ? (int)rank_len : 30, space + 1, count);
            return -1;
        }
        (*offsets)[count] = pieces->len;
        if (base64_decode_append(line, (size_t)(space - line), pieces, &out_of_memory) != 0) {
            if (out_of_memory) break;
            snprintf(err, errlen, "tokenizer file %s, line %ld: invalid base64 token \"%.*s\"", name, line_no,
                     (int)(space - line < 60 ? space - line : 60), line);
            return -1;
        }
        count++;
    }
    if (out_of_memory) {
        snprintf(err, errlen, "tokenizer file %s: out of memory", name);
        return -1;
    }
    if (count != LLAMA3_NUM_RANKS) {
        snprintf(err, errlen, "tokenizer file %s: %d ranks, expected %d (a Llama 3 tiktoken tokenizer.model)", name,
                 count, LLAMA3_NUM_RANKS);
        return -1;
    }
    return 0;
}

static Tokenizer *byte_tokenizer(char *err, size_t errlen) {
    Tokenizer *tok = calloc(1, sizeof *tok);
    char *bytes = malloc(256);
    size_t *offsets = malloc(257 * sizeof *offsets);
    if (!tok || !bytes || !offsets) {
        free(tok);
        free(bytes);
        free(offsets);
        snprintf(err, errlen, "tokenizer: out of memory");
        return NULL;
    }
    for (int i = 0; i < 256; i++) bytes[i] = (char)i;
    for (int i = 0; i <= 256; i++) offsets[i] = (size_t)i;
    *tok = (Tokenizer){.vocab_size = 256, .bos = -1, .num_ranks = 256, .bytes = bytes, .offsets = offsets};
    return tok;
}

/* Appends the 256 special tokens' names after the ranks. */
static int append_special_names(Bytes *pieces, size_t *offsets) {
    for (int i = 0; i < LLAMA3_NUM_SPECIAL; i++) {
        char reserved[64];
        const char *name = reserved;
        if (i < LLAMA3_NAMED_SPECIAL)
            name = LLAMA3_SPECIAL_NAMES[i];
        else
            snprintf(reserved, sizeof reserved, "<|reserved_special_token_%d|>", i - LLAMA3_NAMED_SPECIAL + 3);
        offsets[LLAMA3_NUM_RANKS + i] = pieces->len;
        if (bytes_append(pieces, name, strlen(name)) != 0) return -1;
    }
    offsets[LLAMA3_NUM_RANKS + LLAMA3_NUM_SPECIAL] = pieces->len;
    return 0;
}

/* Fills the hash table with the ranks; every token must be distinct and every single byte must be a token. */
static int build_rank_table(Tokenizer *tok, const char *path, char *err, size_t errlen) {
    size_t size = 1;
    while (size < 2 * (size_t)tok->num_ranks) size *= 2;
    tok->table = malloc(size * sizeof *tok->table);
    if (!tok->table) {
        snprintf(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    memset(tok->table, 0xff, size * sizeof *tok->table); /* all -1 */
    tok->table_mask = size - 1;
    for (int32_t id = 0; id < tok->num_ranks; id++) {
        size_t slot = table_slot(tok, tok->bytes + tok->offsets[id], tok->offsets[id + 1] - tok->offsets[id]);
        if (tok->table[slot] >= 0) {
            snprintf(err, errlen, "tokenizer file %s, line %d: the token duplicates the one on line %d", path, id + 1,
                     tok->table[slot] + 1);
            return -1;
        }
        tok->table[slot] = id;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if (lookup_rank(tok, &c, 1) < 0) {
            snprintf(err, errlen, "tokenizer file %s: the byte 0x%02x is not a token (not a byte-level BPE vocabulary)",
                     path, b);
            return -1;
        }
    }
    return 0;
}

Tokenizer *tokenizer_open(const char *spec, char *err, size_t errlen) {
    if (strcmp(spec, "byte") == 0) return byte_tokenizer(err, errlen);
    size_t len;
    char inner[512];
    char *text = fs_read_all(spec, SIZE_MAX, &len, inner, sizeof inner);
    if (!text) {
        snprintf(err, errlen, "tokenizer file %s", inner); /* inner is "PATH: problem" */
        return NULL;
    }
    Tokenizer *tok = tokenizer_from_memory(text, len, spec, err, errlen);
    free(text);
    return tok;
}

Tokenizer *tokenizer_from_memory(const char *text, size_t len, const char *name, char *err, size_t errlen) {
    Bytes pieces = {0};
    size_t *offsets = NULL;
    Tokenizer *tok = NULL;
    if (parse_tiktoken_text(text, len, name, &pieces, &offsets, err, errlen) != 0) goto fail;
    if (append_special_names(&pieces, offsets) != 0) {
        snprintf(err, errlen, "tokenizer: out of memory");
        goto fail;
    }
    tok = calloc(1, sizeof *tok);
    if (!tok) {
        snprintf(err, errlen, "tokenizer: out of memory");
        goto fail;
    }
    *tok = (Tokenizer){.vocab_size = LLAMA3_NUM_RANKS + LLAMA3_NUM_SPECIAL,
                       .bos = LLAMA3_BOS,
                       .num_ranks = LLAMA3_NUM_RANKS,
                       .bytes = pieces.data,
                       .offsets = offsets};
    if (build_rank_table(tok, name, err, errlen) != 0) {
        tokenizer_close(tok);
        return NULL;
    }
    return tok;
fail:
    free(pieces.data);
    free(offsets);
    return NULL;
}

void tokenizer_close(Tokenizer *tok) {
    if (!tok) return;
    free(tok->bytes);
    free(tok->offsets);
    free(tok->table);
    free(tok);
}

int tokenizer_vocab_size(const Tokenizer *tok) { return tok->vocab_size; }
int tokenizer_bos(const Tokenizer *tok) { return tok->bos; }

const char *tokenizer_piece(const Tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->vocab_size) {
        *len = 3;
        return "<?>";
    }
    *len = tok->offsets[id + 1] - tok->offsets[id];
    return tok->bytes + tok->offsets[id];
}

/* The rank of the merge of parts i and i+1 (parts are text[start[i] .. start[i+1])), or INT32_MAX if none. */
static int32_t pair_rank(const Tokenizer *tok, const char *text, const size_t *start, size_t num_parts, size_t i) {
    if (i + 1 >= num_parts) return INT32_MAX;
    int32_t rank = lookup_rank(tok, text + start[i], start[i + 2] - start[i]);
    return rank < 0 ? INT32_MAX : rank;
}

int tokenizer_encode(const Tokenizer *tok, const char *text, int32_t *out, int max) {
    size_t n = strlen(text);
    if (!tok->table) { /* byte vocabulary */
        size_t limit = max > 0 ? (size_t)max : 0;
        int count = (int)(n < limit ? n : limit);
        for (int i = 0; i < count; i++) out[i] = (uint8_t)text[i];
        return count;
    }
    /* Byte-pair merging: start from single bytes, repeatedly merge the adjacent pair of lowest rank. */
    size_t *start = malloc((n + 1) * sizeof *start);
    int32_t *ranks = malloc((n + 1) * sizeof *ranks);
    if (!start || !ranks) {
        free(start);
        free(ranks);
        return -1;
    }
    size_t num_parts = n;
    for (size_t i = 0; i <= n; i++) start[i] = i;
    for (size_t i = 0; i < num_parts; i++) ranks[i] = pair_rank(tok, text, start, num_parts, i);
    for (;;) {
        size_t best = 0;
        for (size_t i = 1; i < num_parts; i++)
            if (ranks[i] < ranks[best]) best = i;
        if (num_parts == 0 || ranks[best] == INT32_MAX) break;
        /* parts best and best+1 become one: drop the boundary start[best+1] */
        memmove(start + best + 1, start + best + 2, (num_parts - best - 1) * sizeof *start);
        memmove(ranks + best + 1, ranks + best + 2, (num_parts - best - 2) * sizeof *ranks);
        num_parts--;
        ranks[best] = pair_rank(tok, text, start, num_parts, best);
        if (best > 0) ranks[best - 1] = pair_rank(tok, text, start, num_parts, best - 1);
    }
    int count = 0;
    for (size_t i = 0; i < num_parts && count < max; i++)
        out[count++] = lookup_rank(tok, text + start[i], start[i + 1] - start[i]);
    free(start);
    free(ranks);
    return count;
}
