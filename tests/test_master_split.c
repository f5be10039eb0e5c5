/* test_master_split.c: the fp32 master weight's two halves (kernels/master_split.h) against a reference made in
 * double arithmetic: hi is the weight's bf16, to nearest with ties to even; joining the halves gives the word back,
 * except on a tie, where it gives the word one ulp toward its rounding and rounds to the same hi. Every low half
 * with a spread of high halves (every sign and exponent, the mantissa's top bits in steps), then the edges. */
#include "kernels/master_split.h"
#include "tests/test_util.h"

/* bf16 of finite or infinite x, to nearest with ties to even, by comparing the distances to the two bf16 values
 * around it in double (the top of the range rounds to infinity past the halfway point, as IEEE's overflow does). */
static uint16_t ref_bf16(uint32_t x) {
    const uint32_t down = x >> 16, up = down + 1;
    if ((x & 0xffffu) == 0) return (uint16_t)down;
    const double v = fabs((double)f32_of_bits(x)), a = fabs((double)f32_of_bits(down << 16));
    /* the bf16 above in magnitude; above the largest finite one, where infinity is, the value one step on (the
     * step below it again), so that the halfway point is where IEEE's rounding overflows */
    const double b = (up & 0x7fffu) == 0x7f80u ? 2.0 * a - fabs((double)f32_of_bits((down - 1) << 16))
                                                : fabs((double)f32_of_bits(up << 16));
    const double da = v - a, db = b - v;
    if (da < db) return (uint16_t)down;
    if (db < da) return (uint16_t)up;
    return (uint16_t)(down & 1u ? up : down);
}

typedef struct Tally {
    uint64_t words, ties, bad_hi, bad_join, bad_tie;
    uint32_t first_bad;
} Tally;

static void check_word(uint32_t x, Tally *t) {
    uint16_t hi, lo;
    master_split(x, &hi, &lo);
    const uint32_t back = master_join(hi, lo);
    t->words++;
    const int bad_hi = hi != ref_bf16(x);
    int bad_join = 0, bad_tie = 0;
    if ((x & 0xffffu) == 0x8000u) {
        t->ties++;
        /* one ulp toward the rounding, with the same bf16 */
        const uint32_t want = hi == (x >> 16) ? x - 1 : x + 1;
        bad_tie = back != want || ref_bf16(back) != hi;
    } else {
        bad_join = back != x;
    }
    t->bad_hi += bad_hi;
    t->bad_join += bad_join;
    t->bad_tie += bad_tie;
    if ((bad_hi || bad_join || bad_tie) && !t->first_bad) t->first_bad = x ? x : 1;
}

int main(void) {
    Tally t = {0};
    /* every low half, under high halves of every sign and exponent with mantissa tops 0, 1, 2, 63 and 127 (the
     * exponent's carry), not NaN */
    static const uint32_t tops[] = {0, 1, 2, 63, 127};
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t e = 0; e < 255; e++)
            for (size_t k = 0; k < sizeof(tops) / sizeof(tops[0]); k++) {
                const uint32_t high = sign << 15 | e << 7 | tops[k];
                for (uint32_t low = 0; low < 0x10000u; low++) check_word(high << 16 | low, &t);
            }
    CHECK(t.bad_hi == 0 && t.bad_join == 0 && t.bad_tie == 0 && t.ties == 2 * 255 * 5,
          "%llu words (%llu ties): hi is the bf16 to nearest even, the halves join to the word, a tie to its "
          "neighbour toward the rounding (wrong: %llu hi, %llu joins, %llu ties; first 0x%08x)",
          (unsigned long long)t.words, (unsigned long long)t.ties, (unsigned long long)t.bad_hi,
          (unsigned long long)t.bad_join, (unsigned long long)t.bad_tie, t.first_bad);

    /* the edges: zeros, the smallest subnormal, the largest finite (rounds to infinity), infinities */
    static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x00008000u, 0x7f7fffffu,
                                     0xff7fffffu, 0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x3f808000u, 0x3f818000u};
    Tally te = {0};
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) check_word(edges[i], &te);
    CHECK(te.bad_hi == 0 && te.bad_join == 0 && te.bad_tie == 0, "the edges (zeros, subnormals, the largest finite, "
          "infinities, ties at 1.0 and 1.01) (first wrong 0x%08x)", te.first_bad);
    uint16_t hi, lo;
    master_split(0x7f7fffffu, &hi, &lo);
    CHECK(hi == 0x7f80u && master_join(hi, lo) == 0x7f7fffffu,
          "FLT_MAX's bf16 is infinity and the halves still join to FLT_MAX (hi 0x%04x)", hi);
    master_split(0x3f808000u, &hi, &lo); /* 1.00390625: a tie between 1.0 (even) and 1.0078125: rounds down */
    CHECK(hi == 0x3f80u && lo == 0x7fffu && master_join(hi, lo) == 0x3f807fffu,
          "a tie rounding down keeps hi 0x3f80 and moves the word to 0x3f807fff (hi 0x%04x, lo 0x%04x)", hi, lo);
    master_split(0x3f818000u, &hi, &lo); /* a tie above an odd bf16: rounds up */
    CHECK(hi == 0x3f82u && lo == 0x8001u && master_join(hi, lo) == 0x3f818001u,
          "a tie rounding up takes hi 0x3f82 and moves the word to 0x3f818001 (hi 0x%04x, lo 0x%04x)", hi, lo);
    master_split(0x7fc01234u, &hi, &lo);
    const uint32_t nan_back = master_join(hi, lo);
    CHECK((hi & 0x7f80u) == 0x7f80u && (hi & 0x7fu) != 0 && (nan_back & 0x7fffffffu) > 0x7f800000u,
          "a NaN stays a NaN in hi and in the join (hi 0x%04x, join 0x%08x)", hi, nan_back);
    return test_summary();
}
