/* suggest.c: the nearest known names to an unknown one (see suggest.h). */
#include "util/suggest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SUGGESTIONS 3

int suggest_edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    int *row = malloc((m + 1) * sizeof(int));
    if (!row) return (int)(n > m ? n : m); /* out of memory: no closeness claimed */
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    int d = row[m];
    free(row);
    return d;
}

/* Adds name to the list (once). */
static void add(const char **list, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (strcmp(list[i], name) == 0) return;
    if (*n < MAX_SUGGESTIONS) list[(*n)++] = name;
}

int suggest_names(const char *word, const char *const *names, int n_names, const SuggestAlias *aliases,
                  int n_aliases, const char *prefix, char *out, size_t cap) {
    const char *chosen[MAX_SUGGESTIONS];
    int n = 0;
    for (int i = 0; i < n_aliases; i++)
        if (strcmp(word, aliases[i].alias) == 0) add(chosen, &n, aliases[i].name);
    const int limit = strlen(word) / 3 > 2 ? (int)(strlen(word) / 3) : 2;
    for (int d = 1; d <= limit && n < MAX_SUGGESTIONS; d++)
        for (int i = 0; i < n_names && n < MAX_SUGGESTIONS; i++)
            if (suggest_edit_distance(word, names[i]) == d) add(chosen, &n, names[i]);
    size_t used = 0;
    if (cap) out[0] = 0;
    for (int i = 0; i < n && used < cap; i++) {
        const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";
        int w = snprintf(out + used, cap - used, "%s%s%s", sep, prefix, chosen[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
    return n;
}
