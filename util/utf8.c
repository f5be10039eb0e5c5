/* utf8.c: UTF-8 validation and repair (see utf8.h). */
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

int utf8_sequence(const unsigned char *s) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (n && (s[1] < lo || s[1] > hi)) return 0;
    for (int i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return n;
}

long utf8_invalid_at(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int len = utf8_sequence(p);
        if (!len) return (long)(p - (const unsigned char *)s);
        p += len;
    }
    return -1;
}

char *utf8_repaired(const char *text) {
    size_t n = strlen(text), out = 0;
    char *s = malloc(3 * n + 1);
    if (!s) return NULL;
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        int len = utf8_sequence(p);
        if (len) {
            memcpy(s + out, p, (size_t)len);
            out += (size_t)len;
            p += len;
        } else {
            memcpy(s + out, "\xEF\xBF\xBD", 3);
            out += 3;
            p++;
        }
    }
    s[out] = 0;
    return s;
}
