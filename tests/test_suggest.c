/* test_suggest.c: util/suggest.c: edit distances worked out by hand, and the suggestions: aliases first, then the
 * names within the distance bound nearest first, at most three, written "A", "A or B", "A, B or C" with the prefix;
 * nothing near gives 0 and "". */
#include "tests/test_util.h"
#include "util/suggest.h"

static const char *NAMES[] = {"steps", "seed", "seq_len", "learning_rate", "warmup_steps", "eval_every", "stem"};
static const SuggestAlias ALIASES[] = {{"lr", "learning_rate"}, {"max_steps", "steps"}};
#define N_NAMES ((int)(sizeof(NAMES) / sizeof(NAMES[0])))

/* suggest_names of word into out, with the test's names and aliases and prefix "--"; returns the count. */
static int suggest(const char *word, char *out, size_t cap) {
    return suggest_names(word, NAMES, N_NAMES, ALIASES, 2, "--", out, cap);
}

int main(void) {
    CHECK(suggest_edit_distance("kitten", "sitting") == 3, "kitten -> sitting: 3 edits");
    CHECK(suggest_edit_distance("", "abc") == 3 && suggest_edit_distance("abc", "") == 3, "to and from empty: 3");
    CHECK(suggest_edit_distance("steps", "steps") == 0, "a name from itself: 0");
    CHECK(suggest_edit_distance("stpes", "steps") == 2, "a swap is two substitutions: 2");

    char out[256];
    int n = suggest("lr", out, sizeof(out));
    CHECK(n == 1 && strcmp(out, "--learning_rate") == 0, "alias lr: %d, \"%s\"", n, out);
    n = suggest("max_steps", out, sizeof(out));
    CHECK(n == 1 && strcmp(out, "--steps") == 0, "alias max_steps, no name within its bound: %d, \"%s\"", n, out);
    n = suggest("stap", out, sizeof(out));
    CHECK(n == 2 && strcmp(out, "--steps or --stem") == 0, "stap: two names at distance 2, in list order: %d, \"%s\"",
          n, out);
    n = suggest("sted", out, sizeof(out));
    CHECK(n == 3 && strcmp(out, "--seed, --stem or --steps") == 0,
          "sted: the names at distance 1, then the one at 2: %d, \"%s\"", n, out);
    n = suggest("warmup_step", out, sizeof(out));
    CHECK(n == 1 && strcmp(out, "--warmup_steps") == 0, "warmup_step: %d, \"%s\"", n, out);
    n = suggest("frobnicate", out, sizeof(out));
    CHECK(n == 0 && out[0] == 0, "frobnicate: nothing near: %d, \"%s\"", n, out);
    n = suggest("lr", out, 8);
    CHECK(n == 1 && strlen(out) == 7, "a short buffer holds a truncated, terminated list: \"%s\"", out);
    return test_summary();
}
