/* suggest.h: "did you mean" for a misspelt or foreign name: the known names nearest to it by edit distance, and the
 * known names that aliases (names other programs use for the same thing) map it to. Written once for the flags and
 * the config keys (model/config.c). */
#ifndef SUGGEST_H
#define SUGGEST_H

#include <stddef.h>

/* An alias: another program's name for one of ours (e.g. "lr" for "learning_rate"). */
typedef struct SuggestAlias {
    const char *alias, *name;
} SuggestAlias;

/* Writes into out (cap bytes) the names nearest to word, as "A", "A or B" or "A, B or C" (at most 3), each written
 * as prefix + name; the alias targets of word first, then the names within a small edit distance (about a third of
 * word's length, at least 2), nearest first. Returns how many were written (0: none near, out is ""). */
int suggest_names(const char *word, const char *const *names, int n_names, const SuggestAlias *aliases,
                  int n_aliases, const char *prefix, char *out, size_t cap);

/* The Levenshtein distance of a and b (insertions, deletions, substitutions; case-sensitive). */
int suggest_edit_distance(const char *a, const char *b);

#endif
