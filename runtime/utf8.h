/* UTF-8, one definition for the tokenizer, the Jinja interpreter and the fuzz targets' checks:
 * validity (the well-formed sequences of Unicode's table 3-7 (no overlong forms, no surrogates,
 * nothing past U+10FFFF)), decoding and encoding. */
#ifndef LOCKSTEP_UTF8_H
#define LOCKSTEP_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* length of the well-formed sequence at s[0..n), or 0 when it is ill-formed or cut short */
static inline int ls_utf8_len(const uint8_t *s, size_t n)
{
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range (Unicode's table 3-7) */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if ((size_t)len > n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

/* whether s[0..n) is all well-formed; if not, the offset of the first bad sequence in *bad
 * (bad may be NULL) */
static inline int ls_utf8_valid(const char *s, size_t n, size_t *bad)
{
    for (size_t i = 0; i < n;) {
        int l = ls_utf8_len((const uint8_t *)s + i, n - i);
        if (!l) {
            if (bad) *bad = i;
            return 0;
        }
        i += (size_t)l;
    }
    return 1;
}

/* the code point of the well-formed sequence of len bytes (ls_utf8_len's) at s */
static inline uint32_t ls_utf8_decode(const uint8_t *s, int len)
{
    if (len == 1) return s[0];
    uint32_t cp = s[0] & (0x7Fu >> len);
    for (int i = 1; i < len; i++) cp = cp << 6 | (s[i] & 0x3Fu);
    return cp;
}

/* cp (at most U+10FFFF) as UTF-8 at out (room for 4 bytes); its length */
static inline int ls_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

#endif
