/* Jinja lexer and parser: template text to a tree of jnode (jinja_internal.h).
 *
 * The lexer follows jinja2's lexer.py rule by rule, with the environment transformers builds
 * (trim_blocks, lstrip_blocks, keep_trailing_newline off): newlines are normalised to "\n" and
 * one trailing newline is dropped before anything else; "-" on a tag side strips all Unicode
 * whitespace on that side, "+" turns lstrip off; trim_blocks eats one "\n" after a block or
 * comment end; lstrip_blocks removes spaces and tabs from a line's start up to a block or
 * comment tag (not "{{"), and only when the line started there (line_starting); end tags are
 * not recognised while brackets are open, so "{{ {'a': {}}}}" works.
 *
 * The parser is jinja2's parser.py transcribed: the same precedence (filters bind tighter than
 * unary minus's operand, ** is left-associative, "x is test arg" takes a primary), the same
 * tuple rules ("{{ a, b }}" prints a tuple), the same statements. Filters and tests are resolved
 * here, as jinja2 does at compile time, so an unknown one is an error even in a branch never
 * taken. Recursion is bounded twice: the parser's own depth, and each node's height, so the
 * evaluator's recursion is bounded by JX_MAX_HEIGHT. */
#include "config.h"
#include "jinja_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum tok_type {
    T_DATA,
    T_VBEGIN,
    T_VEND,
    T_BBEGIN,
    T_BEND,
    T_NAME,
    T_STR,
    T_INT,
    T_FLOAT,
    T_OP,
    T_EOF
};

struct tok {
    uint8_t t;
    int line, col;
    const char *s; /* the source text (names, operators) */
    size_t n;
    char *v; /* T_DATA, T_STR: the text (owned) */
    size_t vlen;
    int64_t i;
    double f;
};

struct lexer {
    const char *src; /* normalised */
    size_t len, pos;
    int line, col;
    struct tok *toks;
    size_t ntok, cap;
    char *err;
    size_t errlen;
    int failed;
};

static int lex_fail(struct lexer *lx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int lex_fail(struct lexer *lx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = jx_vfail(&lx->failed, lx->err, lx->errlen, lx->line, lx->col, fmt, ap);
    va_end(ap);
    return rc;
}

/* moves pos to np, keeping line:column (columns count code points from 1) */
static void lex_adv(struct lexer *lx, size_t np)
{
    for (size_t i = lx->pos; i < np; i++) {
        unsigned char c = (unsigned char)lx->src[i];
        if (c == '\n') {
            lx->line++;
            lx->col = 1;
        } else if ((c & 0xC0) != 0x80) {
            lx->col++;
        }
    }
    lx->pos = np;
}

static struct tok *lex_push(struct lexer *lx, int type, size_t start, size_t n)
{
    if (lx->ntok == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        struct tok *t = realloc(lx->toks, cap * sizeof(*t));
        if (!t) {
            lex_fail(lx, "out of memory");
            return NULL;
        }
        lx->toks = t;
        lx->cap = cap;
    }
    struct tok *t = &lx->toks[lx->ntok++];
    memset(t, 0, sizeof(*t));
    t->t = (uint8_t)type;
    t->line = lx->line;
    t->col = lx->col;
    t->s = lx->src + start;
    t->n = n;
    return t;
}

/* length of the Unicode whitespace (Python's \s) at s[i], 0 if none */
static size_t ws_at(const char *s, size_t len, size_t i)
{
    if (i >= len) return 0;
    size_t j = i;
    uint32_t cp = jx_u8_next(s, len, &j);
    return jx_isspace(cp) ? j - i : 0;
}

static size_t skip_ws(const char *s, size_t len, size_t i)
{
    size_t w;
    while ((w = ws_at(s, len, i)) > 0) i += w;
    return i;
}

/* end of s[a, b) with trailing Unicode whitespace removed */
static size_t rstrip_end(const char *s, size_t a, size_t b)
{
    size_t end = a, i = a;
    while (i < b) {
        size_t j = i;
        uint32_t cp = jx_u8_next(s, b, &j);
        if (!jx_isspace(cp)) end = j;
        i = j;
    }
    return end;
}

/* jinja2's OptionalLStrip: the end of the text s[a, b) before a tag with strip sign sign */
static size_t lstrip_text(const struct lexer *lx, size_t a, size_t b, char sign, int is_var,
                          int line_starting)
{
    if (sign == '-') return rstrip_end(lx->src, a, b);
    if (sign == '+' || is_var) return b;
    size_t l = b;
    while (l > a && lx->src[l - 1] != '\n') l--;
    if (l == a && !line_starting) return b;
    if (l == b) return b; /* nothing to strip: \s+ needs one character */
    for (size_t i = l; i < b;) {
        size_t w = ws_at(lx->src, b, i);
        if (!w) return b;
        i += w;
    }
    return l;
}

static int lex_data(struct lexer *lx, size_t a, size_t b)
{
    if (b <= a) return 0;
    struct tok *t = lex_push(lx, T_DATA, a, b - a);
    if (!t) return -1;
    t->v = malloc(b - a + 1);
    if (!t->v) return lex_fail(lx, "out of memory");
    memcpy(t->v, lx->src + a, b - a);
    t->v[b - a] = '\0';
    t->vlen = b - a;
    return 0;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}
static int is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
static int is_name0(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* digits with single underscores between them ((\d+_)*\d+): end, or i when none */
static size_t scan_digits(const char *s, size_t len, size_t i)
{
    if (i >= len || !is_digit(s[i])) return i;
    while (i < len && is_digit(s[i])) {
        i++;
        if (i + 1 < len && s[i] == '_' && is_digit(s[i + 1])) i++;
    }
    return i;
}

/* float_re at i: its end, or 0 */
static size_t scan_float(const char *s, size_t len, size_t i)
{
    if (i > 0 && s[i - 1] == '.') return 0;
    size_t j = scan_digits(s, len, i);
    if (j == i) return 0;
    size_t frac = 0;
    if (j < len && s[j] == '.') {
        size_t k = scan_digits(s, len, j + 1);
        if (k > j + 1) frac = k;
    }
    size_t e = frac ? frac : j;
    if (e < len && (s[e] == 'e' || s[e] == 'E')) {
        size_t k = e + 1;
        if (k < len && (s[k] == '+' || s[k] == '-')) k++;
        size_t m = scan_digits(s, len, k);
        if (m > k) return m;
    }
    return frac;
}

/* integer_re at i: its end, or 0 */
static size_t scan_int(const char *s, size_t len, size_t i, int *base)
{
    *base = 10;
    if (i + 1 < len && s[i] == '0' && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
        char b = (char)(s[i + 1] | 0x20);
        *base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
        size_t j = i + 2, end = 0;
        for (;;) {
            size_t k = j;
            if (k < len && s[k] == '_') k++;
            if (k >= len) break;
            char c = s[k];
            int ok = *base == 2   ? (c == '0' || c == '1')
                     : *base == 8 ? (c >= '0' && c <= '7')
                                  : is_hex(c);
            if (!ok) break;
            j = k + 1;
            end = j;
        }
        if (end) return end;
        *base = 10;
        /* "0b" without digits: the 0 alone, as 0(_?0)* */
    }
    if (i >= len || !is_digit(s[i])) return 0;
    if (s[i] == '0') {
        size_t j = i + 1;
        for (;;) {
            size_t k = j;
            if (k < len && s[k] == '_') k++;
            if (k < len && s[k] == '0')
                j = k + 1;
            else
                break;
        }
        return j;
    }
    size_t j = i + 1;
    for (;;) {
        size_t k = j;
        if (k < len && s[k] == '_') k++;
        if (k < len && is_digit(s[k]))
            j = k + 1;
        else
            break;
    }
    return j;
}

static int hexval(char c)
{
    return is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* Python's unicode-escape decoding of a string literal's body s[0, n) into t->v */
static int lex_unescape(struct lexer *lx, struct tok *t, const char *s, size_t n)
{
    char *o = malloc(n + 1);
    if (!o) return lex_fail(lx, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\') {
            o[k++] = s[i++];
            continue;
        }
        i++;
        char c = s[i]; /* the string regex guarantees a character after a backslash */
        uint32_t cp;
        size_t digits = 0;
        switch (c) {
        case '\n':
            i++;
            continue;
        case '\\':
            o[k++] = '\\';
            i++;
            continue;
        case '\'':
            o[k++] = '\'';
            i++;
            continue;
        case '"':
            o[k++] = '"';
            i++;
            continue;
        case 'a':
            o[k++] = 7;
            i++;
            continue;
        case 'b':
            o[k++] = 8;
            i++;
            continue;
        case 'f':
            o[k++] = 12;
            i++;
            continue;
        case 'n':
            o[k++] = '\n';
            i++;
            continue;
        case 'r':
            o[k++] = '\r';
            i++;
            continue;
        case 't':
            o[k++] = '\t';
            i++;
            continue;
        case 'v':
            o[k++] = 11;
            i++;
            continue;
        case 'x':
            digits = 2;
            break;
        case 'u':
            digits = 4;
            break;
        case 'U':
            digits = 8;
            break;
        case 'N':
            free(o);
            return lex_fail(lx, "unsupported: \\N{...} escapes in string literals");
        default:
            if (c >= '0' && c <= '7') {
                cp = 0;
                for (int d = 0; d < 3 && i < n && s[i] >= '0' && s[i] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                k += (size_t)ls_utf8_encode(cp, o + k);
                continue;
            }
            if ((unsigned char)c >= 0x80) {
                free(o);
                return lex_fail(lx, "unsupported: a backslash before a non-ASCII character");
            }
            o[k++] = '\\'; /* unknown escapes stay as they are */
            continue;
        }
        i++;
        cp = 0;
        for (size_t d = 0; d < digits; d++, i++) {
            if (i >= n || !is_hex(s[i])) {
                free(o);
                return lex_fail(lx, "truncated \\%c escape in a string literal", c);
            }
            cp = cp * 16 + (uint32_t)hexval(s[i]);
        }
        if (cp > 0x10FFFF) {
            free(o);
            return lex_fail(lx, "illegal Unicode character in a string literal");
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            free(o);
            return lex_fail(lx, "unsupported: a surrogate escape in a string literal");
        }
        k += (size_t)ls_utf8_encode(cp, o + k); /* an escape is never shorter than its UTF-8 */
    }
    o[k] = '\0';
    t->v = o;
    t->vlen = k;
    return 0;
}

/* the tokens of a {{ }} or {% %} tag, up to and including its end */
static int lex_tag(struct lexer *lx, int is_block, int *line_starting)
{
    const char *s = lx->src;
    size_t len = lx->len;
    char stack[JX_MAX_HEIGHT];
    int depth = 0;
    for (;;) {
        size_t p = lx->pos;
        if (p >= len) return 0; /* the parser reports the missing end */
        if (depth == 0) {
            size_t end = 0;
            if (is_block) {
                if (s[p] == '+' && p + 2 < len + 0 && s[p + 1] == '%' && s[p + 2] == '}')
                    end = p + 3;
                else if (s[p] == '-' && p + 2 < len && s[p + 1] == '%' && s[p + 2] == '}')
                    end = skip_ws(s, len, p + 3);
                else if (s[p] == '%' && p + 1 < len && s[p + 1] == '}')
                    end = p + 2 + (p + 2 < len && s[p + 2] == '\n');
            } else {
                if (s[p] == '-' && p + 2 < len && s[p + 1] == '}' && s[p + 2] == '}')
                    end = skip_ws(s, len, p + 3);
                else if (s[p] == '}' && p + 1 < len && s[p + 1] == '}')
                    end = p + 2;
            }
            if (end) {
                if (!lex_push(lx, is_block ? T_BEND : T_VEND, p, end - p)) return -1;
                *line_starting = s[end - 1] == '\n';
                lex_adv(lx, end);
                return 0;
            }
        }
        size_t w = skip_ws(s, len, p);
        if (w > p) {
            lex_adv(lx, w);
            continue;
        }
        size_t e;
        int base;
        if ((e = scan_float(s, len, p)) > 0) {
            char buf[128];
            size_t k = 0;
            for (size_t i = p; i < e && k + 1 < sizeof(buf); i++)
                if (s[i] != '_') buf[k++] = s[i];
            buf[k] = '\0';
            struct tok *t = lex_push(lx, T_FLOAT, p, e - p);
            if (!t) return -1;
            t->f = strtod(buf, NULL);
        } else if ((e = scan_int(s, len, p, &base)) > 0) {
            int64_t v = 0;
            size_t i = p + (base != 10 ? 2 : 0);
            for (; i < e; i++) {
                if (s[i] == '_') continue;
                int d = hexval(s[i]);
                if (__builtin_mul_overflow(v, (int64_t)base, &v) ||
                    __builtin_add_overflow(v, (int64_t)d, &v))
                    return lex_fail(lx, "unsupported: an integer literal past 64 bits");
            }
            struct tok *t = lex_push(lx, T_INT, p, e - p);
            if (!t) return -1;
            t->i = v;
        } else if (is_name0(s[p])) {
            e = p + 1;
            while (e < len && (is_name0(s[e]) || is_digit(s[e]))) e++;
            if (!lex_push(lx, T_NAME, p, e - p)) return -1;
        } else if (s[p] == '\'' || s[p] == '"') {
            char q = s[p];
            e = p + 1;
            while (e < len && s[e] != q) e += s[e] == '\\' && e + 1 < len ? 2 : 1;
            if (e >= len) return lex_fail(lx, "unexpected char '%c' (an unterminated string)", q);
            struct tok *t = lex_push(lx, T_STR, p, e + 1 - p);
            if (!t || lex_unescape(lx, t, s + p + 1, e - p - 1) < 0) return -1;
            e++;
        } else {
            static const char *const two[] = {"//", "**", "==", "!=", ">=", "<="};
            e = 0;
            for (size_t k = 0; k < 6; k++)
                if (p + 1 < len && s[p] == two[k][0] && s[p + 1] == two[k][1]) e = p + 2;
            if (!e && strchr("+-/*%~[](){}=.:|,;<>", s[p]) && s[p]) e = p + 1;
            if (!e) {
                size_t j = p;
                uint32_t cp = jx_u8_next(s, len, &j);
                return lex_fail(lx, "unexpected char U+%04X", (unsigned)cp);
            }
            char c = s[p];
            if (e == p + 1 && (c == '(' || c == '[' || c == '{')) {
                if (depth >= JX_MAX_HEIGHT) return lex_fail(lx, "brackets nest too deeply");
                stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (e == p + 1 && (c == ')' || c == ']' || c == '}')) {
                if (depth == 0) return lex_fail(lx, "unexpected '%c'", c);
                if (stack[depth - 1] != c)
                    return lex_fail(lx, "unexpected '%c', expected '%c'", c, stack[depth - 1]);
                depth--;
            }
            if (!lex_push(lx, T_OP, p, e - p)) return -1;
        }
        lex_adv(lx, e);
    }
}

/* {%(-|+|)\s*raw\s*(?:-%}\s*|%}) at p: the end of the match, or 0 */
static size_t match_raw(const char *s, size_t len, size_t p, int end_tag)
{
    size_t i = p + 2;
    if (i < len && (s[i] == '-' || s[i] == '+')) i++;
    i = skip_ws(s, len, i);
    const char *kw = end_tag ? "endraw" : "raw";
    size_t kl = strlen(kw);
    if (i + kl > len || memcmp(s + i, kw, kl) != 0) return 0;
    i = skip_ws(s, len, i + kl);
    if (end_tag && i + 2 < len && s[i] == '+' && s[i + 1] == '%' && s[i + 2] == '}') return i + 3;
    if (i + 2 < len && s[i] == '-' && s[i + 1] == '%' && s[i + 2] == '}')
        return skip_ws(s, len, i + 3);
    if (i + 1 < len && s[i] == '%' && s[i + 1] == '}')
        return i + 2 + (end_tag && i + 2 < len && s[i + 2] == '\n');
    return 0;
}

static int lex_all(struct lexer *lx)
{
    const char *s = lx->src;
    size_t len = lx->len;
    int line_starting = 1;
    while (lx->pos < len) {
        size_t p = lx->pos;
        while (p + 1 < len &&
               !(s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')))
            p++;
        if (p + 1 >= len) { /* the rest is text */
            if (lex_data(lx, lx->pos, len) < 0) return -1;
            lex_adv(lx, len);
            break;
        }
        char kind = s[p + 1];
        char sign = p + 2 < len && (s[p + 2] == '-' || s[p + 2] == '+') ? s[p + 2] : 0;
        size_t raw_end = kind == '%' ? match_raw(s, len, p, 0) : 0;
        size_t tag_end = raw_end ? raw_end : p + 2 + (sign != 0);
        size_t text_end = lstrip_text(lx, lx->pos, p, sign, kind == '{', line_starting);
        if (lex_data(lx, lx->pos, text_end) < 0) return -1;
        lex_adv(lx, p);
        line_starting = s[tag_end - 1] == '\n';
        if (raw_end) {
            lex_adv(lx, raw_end);
            size_t q = raw_end, m = 0;
            for (; q + 1 < len; q++)
                if (s[q] == '{' && s[q + 1] == '%' && (m = match_raw(s, len, q, 1)) > 0) break;
            if (!m) return lex_fail(lx, "Missing end of raw directive");
            char esign = q + 2 < len && (s[q + 2] == '-' || s[q + 2] == '+') ? s[q + 2] : 0;
            size_t cend = lstrip_text(lx, raw_end, q, esign, 0, line_starting);
            if (lex_data(lx, raw_end, cend) < 0) return -1;
            line_starting = s[m - 1] == '\n';
            lex_adv(lx, m);
        } else if (kind == '#') {
            size_t q = tag_end, m = 0;
            for (; q + 1 < len; q++) {
                if (s[q] == '+' && q + 2 < len && s[q + 1] == '#' && s[q + 2] == '}') {
                    m = q + 3;
                    break;
                }
                if (s[q] == '-' && q + 2 < len && s[q + 1] == '#' && s[q + 2] == '}') {
                    m = skip_ws(s, len, q + 3);
                    break;
                }
                if (s[q] == '#' && s[q + 1] == '}') {
                    m = q + 2 + (q + 2 < len && s[q + 2] == '\n');
                    break;
                }
            }
            if (!m) return lex_fail(lx, "Missing end of comment tag");
            line_starting = s[m - 1] == '\n';
            lex_adv(lx, m);
        } else {
            if (!lex_push(lx, kind == '%' ? T_BBEGIN : T_VBEGIN, p, tag_end - p)) return -1;
            lex_adv(lx, tag_end);
            if (lex_tag(lx, kind == '%', &line_starting) < 0) return -1;
        }
    }
    return lex_push(lx, T_EOF, lx->pos, 0) ? 0 : -1;
}

/* ------------------------------------------------------------------ parser -- */

struct parser {
    struct tok *t;
    size_t i, n;
    char *err;
    size_t errlen;
    int failed;
    int depth;
    int in_loop;
    const char *stack[JX_MAX_HEIGHT]; /* open block tags, for the end-of-template message */
    int nstack;
};

static int p_fail(struct parser *p, const struct tok *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int p_fail(struct parser *p, const struct tok *at, const char *fmt, ...)
{
    if (!at) at = &p->t[p->i];
    va_list ap;
    va_start(ap, fmt);
    int rc = jx_vfail(&p->failed, p->err, p->errlen, at->line, at->col, fmt, ap);
    va_end(ap);
    return rc;
}

static struct tok *cur(struct parser *p)
{
    return &p->t[p->i];
}
static struct tok *peek(struct parser *p, size_t k)
{
    return p->i + k < p->n ? &p->t[p->i + k] : &p->t[p->n - 1];
}
static void next(struct parser *p)
{
    if (p->i + 1 < p->n) p->i++;
}
static int is_op(const struct tok *t, const char *op)
{
    return t->t == T_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}
static int is_name(const struct tok *t, const char *name)
{
    return t->t == T_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}

static const char *describe(const struct tok *t, char *buf, size_t n)
{
    switch (t->t) {
    case T_EOF:
        return "end of template";
    case T_VEND:
        return "end of print statement";
    case T_BEND:
        return "end of statement block";
    case T_VBEGIN:
        return "begin of print statement";
    case T_BBEGIN:
        return "begin of statement block";
    case T_DATA:
        return "template data";
    default:
        snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
        return buf;
    }
}

static int expect_op(struct parser *p, const char *op)
{
    if (is_op(cur(p), op)) {
        next(p);
        return 0;
    }
    char b[64];
    return p_fail(p, NULL, "expected token '%s', got %s", op, describe(cur(p), b, sizeof(b)));
}

static int expect_type(struct parser *p, int type, const char *what)
{
    if (cur(p)->t == type) {
        next(p);
        return 0;
    }
    char b[64];
    return p_fail(p, NULL, "expected token '%s', got %s", what, describe(cur(p), b, sizeof(b)));
}

static struct jnode *mk(struct parser *p, int kind, const struct tok *at)
{
    struct jnode *n = calloc(1, sizeof(*n));
    if (!n) {
        p_fail(p, at, "out of memory");
        return NULL;
    }
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static char *dup_tok(struct parser *p, const struct tok *t)
{
    char *s = malloc(t->n + 1);
    if (!s) {
        p_fail(p, t, "out of memory");
        return NULL;
    }
    memcpy(s, t->s, t->n);
    s[t->n] = '\0';
    return s;
}

void jx_node_free(struct jnode *n)
{
    if (!n) return;
    for (int i = 0; i < 5; i++) jx_node_free(n->k[i]);
    for (int i = 0; i < n->nkids; i++) jx_node_free(n->kids[i]);
    for (int i = 0; i < n->nkw; i++) {
        free(n->kwn[i]);
        jx_node_free(n->kwv[i]);
    }
    free(n->kids);
    free(n->kwn);
    free(n->kwv);
    free(n->ops);
    free(n->str);
    free(n->attr);
    free(n);
}

/* height = 1 + the tallest child; refuses a tree the evaluator could not walk safely */
static struct jnode *fin(struct parser *p, struct jnode *n)
{
    if (!n) return NULL;
    int h = 0;
    for (int i = 0; i < 5; i++)
        if (n->k[i] && n->k[i]->height > h) h = n->k[i]->height;
    for (int i = 0; i < n->nkids; i++)
        if (n->kids[i]->height > h) h = n->kids[i]->height;
    for (int i = 0; i < n->nkw; i++)
        if (n->kwv[i]->height > h) h = n->kwv[i]->height;
    n->height = h + 1;
    if (n->height > JX_MAX_HEIGHT) {
        struct tok at = {0};
        at.line = n->line;
        at.col = n->col;
        p_fail(p, &at, "the template nests too deeply (over %d levels)", JX_MAX_HEIGHT);
        jx_node_free(n);
        return NULL;
    }
    return n;
}

static int add_kid(struct parser *p, struct jnode *n, struct jnode *kid)
{
    if (!kid) return -1;
    if ((n->nkids & (n->nkids - 1)) == 0) { /* grow at powers of two */
        size_t cap = n->nkids ? (size_t)n->nkids * 2 : 1;
        struct jnode **k = realloc(n->kids, cap * sizeof(*k));
        if (!k) {
            jx_node_free(kid);
            return p_fail(p, NULL, "out of memory");
        }
        n->kids = k;
    }
    n->kids[n->nkids++] = kid;
    return 0;
}

int jx_is_python_keyword(const char *w)
{
    static const char *const kw[] = {
        "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
        "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
        "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
        "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield"};
    for (size_t i = 0; i < sizeof(kw) / sizeof(kw[0]); i++)
        if (!strcmp(w, kw[i])) return 1;
    return 0;
}

static int add_kw(struct parser *p, struct jnode *n, char *name, struct jnode *v)
{
    if (!name || !v) {
        free(name);
        jx_node_free(v);
        return -1;
    }
    if ((n->nkw & (n->nkw - 1)) == 0) {
        size_t cap = n->nkw ? (size_t)n->nkw * 2 : 1;
        char **kn = realloc(n->kwn, cap * sizeof(*kn));
        if (kn) n->kwn = kn;
        struct jnode **kv = realloc(n->kwv, cap * sizeof(*kv));
        if (kv) n->kwv = kv;
        if (!kn || !kv) {
            free(name);
            jx_node_free(v);
            return p_fail(p, NULL, "out of memory");
        }
    }
    n->kwn[n->nkw] = name;
    n->kwv[n->nkw++] = v;
    return 0;
}

static int enter(struct parser *p)
{
    if (++p->depth > JX_MAX_HEIGHT)
        return p_fail(p, NULL, "the template nests too deeply (over %d levels)", JX_MAX_HEIGHT);
    return 0;
}

static struct jnode *parse_expression(struct parser *p, int with_condexpr);
static struct jnode *parse_tuple(struct parser *p, int simplified, int with_condexpr,
                                 const char *extra_end, int explicit_parens);
static struct jnode *parse_primary(struct parser *p);
static struct jnode *parse_postfix(struct parser *p, struct jnode *n);
static struct jnode *parse_filter_expr(struct parser *p, struct jnode *n);
static struct jnode *parse_filter(struct parser *p, struct jnode *n, int start_inline);
static struct jnode *parse_or(struct parser *p);
static struct jnode *subparse(struct parser *p, const char *const *end_tags);

static struct jnode *binary(struct parser *p, int kind, int op, const struct tok *at,
                            struct jnode *a, struct jnode *b)
{
    if (!a || !b) {
        jx_node_free(a);
        jx_node_free(b);
        return NULL;
    }
    struct jnode *n = mk(p, kind, at);
    if (!n) {
        jx_node_free(a);
        jx_node_free(b);
        return NULL;
    }
    n->op = op;
    n->k[0] = a;
    n->k[1] = b;
    return fin(p, n);
}

static struct jnode *parse_unary(struct parser *p, int with_filter)
{
    struct tok *t = cur(p);
    struct jnode *n;
    if (enter(p) < 0) return NULL;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(p);
        struct jnode *a = parse_unary(p, 0);
        if (!a) {
            p->depth--;
            return NULL;
        }
        n = mk(p, is_op(t, "-") ? E_NEG : E_POS, t);
        if (!n) {
            jx_node_free(a);
            p->depth--;
            return NULL;
        }
        n->k[0] = a;
        n = fin(p, n);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static struct jnode *parse_pow(struct parser *p)
{
    struct jnode *n = parse_unary(p, 1);
    while (n && is_op(cur(p), "**")) {
        struct tok *t = cur(p);
        next(p);
        n = binary(p, E_BINOP, B_POW, t, n, parse_unary(p, 1));
    }
    return n;
}

static struct jnode *parse_math2(struct parser *p)
{
    struct jnode *n = parse_pow(p);
    for (;;) {
        struct tok *t = cur(p);
        int op = is_op(t, "*")    ? B_MUL
                 : is_op(t, "/")  ? B_DIV
                 : is_op(t, "//") ? B_FLOORDIV
                 : is_op(t, "%")  ? B_MOD
                                  : -1;
        if (!n || op < 0) return n;
        next(p);
        n = binary(p, E_BINOP, op, t, n, parse_pow(p));
    }
}

static struct jnode *parse_concat(struct parser *p)
{
    struct tok *t0 = cur(p);
    struct jnode *n = parse_math2(p);
    if (!n || !is_op(cur(p), "~")) return n;
    struct jnode *c = mk(p, E_CONCAT, t0);
    if (!c || add_kid(p, c, n) < 0) {
        if (!c) jx_node_free(n);
        jx_node_free(c);
        return NULL;
    }
    while (is_op(cur(p), "~")) {
        next(p);
        if (add_kid(p, c, parse_math2(p)) < 0) {
            jx_node_free(c);
            return NULL;
        }
    }
    return fin(p, c);
}

static struct jnode *parse_math1(struct parser *p)
{
    struct jnode *n = parse_concat(p);
    for (;;) {
        struct tok *t = cur(p);
        int op = is_op(t, "+") ? B_ADD : is_op(t, "-") ? B_SUB : -1;
        if (!n || op < 0) return n;
        next(p);
        n = binary(p, E_BINOP, op, t, n, parse_concat(p));
    }
}

static struct jnode *parse_compare(struct parser *p)
{
    struct tok *t0 = cur(p);
    struct jnode *n = parse_math1(p);
    struct jnode *c = NULL;
    for (;;) {
        struct tok *t = cur(p);
        int op;
        if (is_op(t, "=="))
            op = C_EQ;
        else if (is_op(t, "!="))
            op = C_NE;
        else if (is_op(t, "<"))
            op = C_LT;
        else if (is_op(t, "<="))
            op = C_LE;
        else if (is_op(t, ">"))
            op = C_GT;
        else if (is_op(t, ">="))
            op = C_GE;
        else if (is_name(t, "in"))
            op = C_IN;
        else if (is_name(t, "not") && is_name(peek(p, 1), "in"))
            op = C_NOTIN;
        else
            break;
        if (!n) break;
        next(p);
        if (op == C_NOTIN) next(p);
        if (!c) {
            c = mk(p, E_COMPARE, t0);
            if (!c) {
                jx_node_free(n);
                return NULL;
            }
            c->k[0] = n;
        }
        struct jnode *r = parse_math1(p);
        if (!r) {
            jx_node_free(c);
            return NULL;
        }
        uint8_t *ops = realloc(c->ops, (size_t)c->nkids + 1);
        if (!ops) {
            jx_node_free(r);
            jx_node_free(c);
            p_fail(p, t, "out of memory");
            return NULL;
        }
        c->ops = ops;
        c->ops[c->nkids] = (uint8_t)op;
        if (add_kid(p, c, r) < 0) {
            jx_node_free(c);
            return NULL;
        }
    }
    if (!n) return NULL;
    return c ? fin(p, c) : n;
}

static struct jnode *parse_not(struct parser *p)
{
    struct tok *t = cur(p);
    if (is_name(t, "not")) {
        next(p);
        if (enter(p) < 0) return NULL;
        struct jnode *a = parse_not(p);
        p->depth--;
        if (!a) return NULL;
        struct jnode *n = mk(p, E_NOT, t);
        if (!n) {
            jx_node_free(a);
            return NULL;
        }
        n->k[0] = a;
        return fin(p, n);
    }
    return parse_compare(p);
}

static struct jnode *parse_and(struct parser *p)
{
    struct jnode *n = parse_not(p);
    while (n && is_name(cur(p), "and")) {
        struct tok *t = cur(p);
        next(p);
        n = binary(p, E_AND, 0, t, n, parse_not(p));
    }
    return n;
}

static struct jnode *parse_or(struct parser *p)
{
    struct jnode *n = parse_and(p);
    while (n && is_name(cur(p), "or")) {
        struct tok *t = cur(p);
        next(p);
        n = binary(p, E_OR, 0, t, n, parse_and(p));
    }
    return n;
}

static struct jnode *parse_condexpr(struct parser *p)
{
    struct jnode *n = parse_or(p);
    while (n && is_name(cur(p), "if")) {
        struct tok *t = cur(p);
        next(p);
        struct jnode *test = parse_or(p);
        struct jnode *els = NULL;
        if (test && is_name(cur(p), "else")) {
            next(p);
            if (enter(p) < 0) {
                jx_node_free(test);
                jx_node_free(n);
                return NULL;
            }
            els = parse_condexpr(p);
            p->depth--;
            if (!els) {
                jx_node_free(test);
                jx_node_free(n);
                return NULL;
            }
        }
        if (!test) {
            jx_node_free(n);
            return NULL;
        }
        struct jnode *c = mk(p, E_COND, t);
        if (!c) {
            jx_node_free(n);
            jx_node_free(test);
            jx_node_free(els);
            return NULL;
        }
        c->k[0] = n;
        c->k[1] = test;
        c->k[2] = els;
        n = fin(p, c);
    }
    return n;
}

static struct jnode *parse_expression(struct parser *p, int with_condexpr)
{
    if (enter(p) < 0) return NULL;
    struct jnode *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    p->depth--;
    return n;
}

static int is_tuple_end(struct parser *p, const char *extra_end)
{
    struct tok *t = cur(p);
    if (t->t == T_VEND || t->t == T_BEND || is_op(t, ")")) return 1;
    return extra_end && is_name(t, extra_end);
}

static struct jnode *parse_tuple(struct parser *p, int simplified, int with_condexpr,
                                 const char *extra_end, int explicit_parens)
{
    struct tok *t0 = cur(p);
    struct jnode *tup = mk(p, E_TUPLE, t0);
    if (!tup) return NULL;
    int is_tuple = 0;
    for (;;) {
        if (tup->nkids && expect_op(p, ",") < 0) goto fail;
        if (is_tuple_end(p, extra_end)) break;
        struct jnode *e = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        if (add_kid(p, tup, e) < 0) goto fail;
        if (is_op(cur(p), ","))
            is_tuple = 1;
        else
            break;
    }
    if (!is_tuple) {
        if (tup->nkids) {
            struct jnode *only = tup->kids[0];
            tup->nkids = 0;
            jx_node_free(tup);
            return only;
        }
        if (!explicit_parens) {
            char b[64];
            p_fail(p, NULL, "Expected an expression, got %s", describe(cur(p), b, sizeof(b)));
            goto fail;
        }
    }
    return fin(p, tup);
fail:
    jx_node_free(tup);
    return NULL;
}

static struct jnode *parse_list_or_dict(struct parser *p, int dict)
{
    struct tok *t0 = cur(p);
    next(p);
    struct jnode *n = mk(p, dict ? E_DICT : E_LIST, t0);
    if (!n) return NULL;
    if (enter(p) < 0) goto fail;
    const char *close = dict ? "}" : "]";
    while (!is_op(cur(p), close)) {
        if (n->nkids && expect_op(p, ",") < 0) goto fail;
        if (is_op(cur(p), close)) break;
        if (add_kid(p, n, parse_expression(p, 1)) < 0) goto fail;
        if (dict) {
            if (expect_op(p, ":") < 0) goto fail;
            if (add_kid(p, n, parse_expression(p, 1)) < 0) goto fail;
        }
    }
    if (expect_op(p, close) < 0) goto fail;
    p->depth--;
    return fin(p, n);
fail:
    jx_node_free(n);
    return NULL;
}

static struct jnode *parse_primary(struct parser *p)
{
    struct tok *t = cur(p);
    struct jnode *n;
    char b[64];
    switch (t->t) {
    case T_NAME:
        n = mk(p, E_CONST, t);
        if (!n) return NULL;
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") ||
            is_name(t, "False")) {
            n->op = 1;
            n->i = t->s[0] == 't' || t->s[0] == 'T';
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n->op = 0;
        } else {
            n->kind = E_NAME;
            if (!(n->str = dup_tok(p, t))) {
                jx_node_free(n);
                return NULL;
            }
            n->len = t->n;
        }
        next(p);
        return fin(p, n);
    case T_STR: { /* adjacent literals concatenate */
        n = mk(p, E_CONST, t);
        if (!n) return NULL;
        n->op = 4;
        struct ls_strbuf sb = {0};
        ls_strbuf_put(&sb, "", 0);
        while (cur(p)->t == T_STR) {
            ls_strbuf_put(&sb, cur(p)->v, cur(p)->vlen);
            next(p);
        }
        if (sb.oom) {
            free(sb.p);
            jx_node_free(n);
            p_fail(p, t, "out of memory");
            return NULL;
        }
        n->str = sb.p;
        n->len = sb.n;
        return fin(p, n);
    }
    case T_INT:
    case T_FLOAT:
        n = mk(p, E_CONST, t);
        if (!n) return NULL;
        n->op = t->t == T_INT ? 2 : 3;
        n->i = t->i;
        n->f = t->f;
        next(p);
        return fin(p, n);
    case T_OP:
        if (is_op(t, "(")) {
            next(p);
            if (enter(p) < 0) return NULL;
            n = parse_tuple(p, 0, 1, NULL, 1);
            p->depth--;
            if (n && expect_op(p, ")") < 0) {
                jx_node_free(n);
                return NULL;
            }
            return n;
        }
        if (is_op(t, "[")) return parse_list_or_dict(p, 0);
        if (is_op(t, "{")) return parse_list_or_dict(p, 1);
        break;
    default:
        break;
    }
    p_fail(p, t, "unexpected %s", describe(t, b, sizeof(b)));
    return NULL;
}

static struct jnode *parse_subscribed(struct parser *p)
{
    struct tok *t0 = cur(p);
    struct jnode *args[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), ":")) {
        next(p);
    } else {
        struct jnode *e = parse_expression(p, 1);
        if (!e || !is_op(cur(p), ":")) return e;
        next(p);
        args[0] = e;
    }
    if (!is_op(cur(p), ":") && !is_op(cur(p), "]") && !is_op(cur(p), ",")) {
        if (!(args[1] = parse_expression(p, 1))) goto fail;
    }
    if (is_op(cur(p), ":")) {
        next(p);
        if (!is_op(cur(p), "]") && !is_op(cur(p), ",")) {
            if (!(args[2] = parse_expression(p, 1))) goto fail;
        }
    }
    struct jnode *n = mk(p, E_SLICE, t0);
    if (!n) goto fail;
    for (int i = 0; i < 3; i++) n->k[i] = args[i];
    return fin(p, n);
fail:
    for (int i = 0; i < 3; i++) jx_node_free(args[i]);
    return NULL;
}

static int parse_call_args(struct parser *p, struct jnode *n)
{
    if (expect_op(p, "(") < 0) return -1;
    int need_comma = 0;
    while (!is_op(cur(p), ")")) {
        if (need_comma) {
            if (expect_op(p, ",") < 0) return -1;
            if (is_op(cur(p), ")")) break;
        }
        struct tok *t = cur(p);
        if (is_op(t, "*") || is_op(t, "**"))
            return p_fail(p, t, "unsupported: *args and **kwargs in calls");
        if (t->t == T_NAME && is_op(peek(p, 1), "=")) {
            char *name = dup_tok(p, t);
            next(p);
            next(p);
            if (add_kw(p, n, name, parse_expression(p, 1)) < 0) return -1;
        } else {
            if (n->nkw) return p_fail(p, t, "invalid syntax for function call expression");
            if (add_kid(p, n, parse_expression(p, 1)) < 0) return -1;
        }
        need_comma = 1;
    }
    /* jinja2 writes a call's keywords into a Python call, where a repeated one does not compile;
     * with a keyword named after a Python keyword they all go through a dict instead, where the
     * last wins. A filter's or test's may be folded into a constant first: only calls here. */
    int via_dict = 0;
    for (int i = 0; n->kind == E_CALL && i < n->nkw; i++)
        via_dict |= jx_is_python_keyword(n->kwn[i]);
    for (int i = 0; n->kind == E_CALL && !via_dict && i < n->nkw; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(n->kwn[i], n->kwn[j]))
                return p_fail(p, cur(p), "keyword argument repeated: %s", n->kwn[i]);
    return expect_op(p, ")");
}

static struct jnode *parse_call(struct parser *p, struct jnode *callee)
{
    struct jnode *n = mk(p, E_CALL, cur(p));
    if (!n) {
        jx_node_free(callee);
        return NULL;
    }
    n->k[0] = callee;
    if (enter(p) < 0 || parse_call_args(p, n) < 0) {
        jx_node_free(n);
        return NULL;
    }
    p->depth--;
    return fin(p, n);
}

static struct jnode *parse_postfix(struct parser *p, struct jnode *n)
{
    while (n) {
        struct tok *t = cur(p);
        if (is_op(t, ".")) {
            next(p);
            struct tok *a = cur(p);
            struct jnode *g;
            if (a->t == T_NAME) {
                g = mk(p, E_GETATTR, t);
                if (g && !(g->str = dup_tok(p, a))) {
                    jx_node_free(g);
                    g = NULL;
                }
                if (g) g->len = a->n;
            } else if (a->t == T_INT) {
                g = mk(p, E_GETITEM, t);
                struct jnode *k = g ? mk(p, E_CONST, a) : NULL;
                if (k) {
                    k->op = 2;
                    k->i = a->i;
                    g->k[1] = fin(p, k);
                } else {
                    jx_node_free(g);
                    g = NULL;
                }
            } else {
                p_fail(p, a, "expected name or number");
                g = NULL;
            }
            if (!g) {
                jx_node_free(n);
                return NULL;
            }
            next(p);
            g->k[0] = n;
            n = fin(p, g);
        } else if (is_op(t, "[")) {
            next(p);
            struct jnode *g = mk(p, E_GETITEM, t);
            if (!g || enter(p) < 0) {
                jx_node_free(g);
                jx_node_free(n);
                return NULL;
            }
            g->k[0] = n;
            struct jnode *tup = mk(p, E_TUPLE, t);
            if (!tup) {
                jx_node_free(g);
                return NULL;
            }
            while (!is_op(cur(p), "]")) {
                if (tup->nkids && expect_op(p, ",") < 0) break;
                if (add_kid(p, tup, parse_subscribed(p)) < 0) break;
            }
            p->depth--;
            if (p->failed || expect_op(p, "]") < 0) {
                jx_node_free(tup);
                jx_node_free(g);
                return NULL;
            }
            if (tup->nkids == 1) {
                g->k[1] = tup->kids[0];
                tup->nkids = 0;
                jx_node_free(tup);
            } else {
                g->k[1] = fin(p, tup);
                if (!g->k[1]) {
                    jx_node_free(g);
                    return NULL;
                }
            }
            n = fin(p, g);
        } else if (is_op(t, "(")) {
            n = parse_call(p, n);
        } else {
            break;
        }
    }
    return n;
}

/* a dotted filter or test name into buf */
static int parse_dotted(struct parser *p, char *buf, size_t n)
{
    struct tok *t = cur(p);
    if (t->t != T_NAME) return p_fail(p, t, "expected a filter or test name");
    size_t k = 0;
    for (;;) {
        t = cur(p);
        if (k + t->n + 2 > n) return p_fail(p, t, "name too long");
        memcpy(buf + k, t->s, t->n);
        k += t->n;
        next(p);
        if (!is_op(cur(p), ".") || peek(p, 1)->t != T_NAME) break;
        buf[k++] = '.';
        next(p);
    }
    buf[k] = '\0';
    return 0;
}

static struct jnode *parse_filter(struct parser *p, struct jnode *n, int start_inline)
{
    while (is_op(cur(p), "|") || start_inline) {
        if (!start_inline) next(p);
        start_inline = 0;
        struct tok *t = cur(p);
        char name[128];
        if (parse_dotted(p, name, sizeof(name)) < 0) goto fail;
        int id = jx_filter_id(name); /* unknown ones are checked by check_names */
        struct jnode *f = mk(p, E_FILTER, t);
        if (!f) goto fail;
        f->op = id;
        if (id < 0 && !(f->str = strdup(name))) {
            jx_node_free(f);
            p_fail(p, t, "out of memory");
            goto fail;
        }
        f->k[0] = n;
        n = f;
        if (is_op(cur(p), "(") && parse_call_args(p, f) < 0) goto fail;
        if (!(n = fin(p, f))) return NULL;
    }
    return n;
fail:
    jx_node_free(n);
    return NULL;
}

static struct jnode *parse_test(struct parser *p, struct jnode *n)
{
    next(p); /* is */
    int negated = 0;
    if (is_name(cur(p), "not")) {
        next(p);
        negated = 1;
    }
    struct tok *t = cur(p);
    char name[128];
    if (parse_dotted(p, name, sizeof(name)) < 0) goto fail;
    int id = jx_test_id(name);
    struct jnode *tn = mk(p, E_TEST, t);
    if (!tn) goto fail;
    tn->op = id;
    if (id < 0 && !(tn->str = strdup(name))) {
        jx_node_free(tn);
        p_fail(p, t, "out of memory");
        goto fail;
    }
    tn->i = negated;
    tn->k[0] = n;
    n = tn;
    struct tok *c = cur(p);
    if (is_op(c, "(")) {
        if (parse_call_args(p, tn) < 0) goto fail;
    } else if ((c->t == T_NAME || c->t == T_STR || c->t == T_INT || c->t == T_FLOAT ||
                is_op(c, "(") || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) {
            p_fail(p, c, "You cannot chain multiple tests with is");
            goto fail;
        }
        if (enter(p) < 0) goto fail;
        struct jnode *arg = parse_postfix(p, parse_primary(p));
        p->depth--;
        if (add_kid(p, tn, arg) < 0) goto fail;
    }
    return fin(p, tn);
fail:
    jx_node_free(n);
    return NULL;
}

static struct jnode *parse_filter_expr(struct parser *p, struct jnode *n)
{
    while (n) {
        struct tok *t = cur(p);
        if (is_op(t, "|"))
            n = parse_filter(p, n, 0);
        else if (is_name(t, "is"))
            n = parse_test(p, n);
        else if (is_op(t, "("))
            n = parse_call(p, n);
        else
            break;
    }
    return n;
}

/* ------------------------------------------------------------ statements --- */

/* a for/set target: a name, names in a tuple, or (with_ns) ns.attr */
static struct jnode *parse_assign_target(struct parser *p, const char *extra_end, int with_ns)
{
    struct tok *t = cur(p);
    if (with_ns && t->t == T_NAME && is_op(peek(p, 1), ".") && peek(p, 2)->t == T_NAME) {
        struct jnode *n = mk(p, E_NSREF, t);
        if (!n) return NULL;
        n->str = dup_tok(p, t);
        n->attr = dup_tok(p, peek(p, 2));
        next(p);
        next(p);
        next(p);
        if (!n->str || !n->attr) {
            jx_node_free(n);
            return NULL;
        }
        return fin(p, n);
    }
    struct jnode *n = parse_tuple(p, 1, 1, extra_end, 0);
    if (!n) return NULL;
    int ok = n->kind == E_NAME;
    if (n->kind == E_TUPLE) {
        ok = 1;
        for (int i = 0; i < n->nkids; i++) ok &= n->kids[i]->kind == E_NAME;
    }
    if (!ok) {
        struct tok at = {0};
        at.line = n->line;
        at.col = n->col;
        jx_node_free(n);
        p_fail(p, &at, "can't assign to this expression");
        return NULL;
    }
    return n;
}

/* parse_statements: ':'? block_end, a body up to one of end_tags (not consumed) */
static struct jnode *parse_statements(struct parser *p, const char *const *end_tags, int drop)
{
    if (is_op(cur(p), ":")) next(p);
    if (expect_type(p, T_BEND, "end of statement block") < 0) return NULL;
    struct jnode *body = subparse(p, end_tags);
    if (!body) return NULL;
    if (cur(p)->t == T_EOF) {
        char want[256] = "";
        for (int i = 0; end_tags[i]; i++)
            snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s'%s'", i ? " or " : "",
                     end_tags[i]);
        p_fail(p, NULL,
               "Unexpected end of template. Jinja was looking for the following tags: %s. The "
               "innermost block that needs to be closed is '%s'.",
               want, p->nstack ? p->stack[p->nstack - 1] : "?");
        jx_node_free(body);
        return NULL;
    }
    if (drop) next(p);
    return body;
}

static struct jnode *stmt_for(struct parser *p, struct tok *t)
{
    struct jnode *n = mk(p, N_FOR, t);
    if (!n) return NULL;
    static const char *const ends1[] = {"endfor", "else", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    if (!(n->k[0] = parse_assign_target(p, "in", 0))) goto fail;
    if (!is_name(cur(p), "in")) {
        p_fail(p, NULL, "expected 'in'");
        goto fail;
    }
    next(p);
    if (!(n->k[1] = parse_tuple(p, 0, 0, "recursive", 0))) goto fail;
    if (is_name(cur(p), "if")) {
        next(p);
        if (!(n->k[4] = parse_expression(p, 1))) goto fail;
    }
    if (is_name(cur(p), "recursive")) {
        p_fail(p, NULL, "unsupported: recursive for loops");
        goto fail;
    }
    int saved = p->in_loop;
    p->in_loop = 1;
    n->k[2] = parse_statements(p, ends1, 0);
    p->in_loop = saved;
    if (!n->k[2]) goto fail;
    if (is_name(cur(p), "else")) {
        next(p);
        if (!(n->k[3] = parse_statements(p, ends2, 1))) goto fail;
    } else {
        next(p);
    }
    return fin(p, n);
fail:
    jx_node_free(n);
    return NULL;
}

static struct jnode *stmt_if(struct parser *p, struct tok *t)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    struct jnode *n = mk(p, N_IF, t);
    if (!n) return NULL;
    if (!(n->k[0] = parse_tuple(p, 0, 0, NULL, 0))) goto fail;
    if (!(n->k[1] = parse_statements(p, ends, 0))) goto fail;
    struct tok *e = cur(p);
    next(p);
    if (is_name(e, "elif")) {
        if (enter(p) < 0) goto fail;
        n->k[2] = stmt_if(p, e);
        p->depth--;
        if (!n->k[2]) goto fail;
    } else if (is_name(e, "else")) {
        if (!(n->k[2] = parse_statements(p, ends2, 1))) goto fail;
    }
    return fin(p, n);
fail:
    jx_node_free(n);
    return NULL;
}

static struct jnode *stmt_set(struct parser *p, struct tok *t)
{
    static const char *const ends[] = {"endset", NULL};
    struct jnode *target = parse_assign_target(p, NULL, 1);
    if (!target) return NULL;
    struct jnode *n;
    if (is_op(cur(p), "=")) {
        next(p);
        n = mk(p, N_SET, t);
        if (!n) {
            jx_node_free(target);
            return NULL;
        }
        n->k[0] = target;
        if (!(n->k[1] = parse_tuple(p, 0, 1, NULL, 0))) goto fail;
        return fin(p, n);
    }
    n = mk(p, N_SETBLOCK, t);
    if (!n) {
        jx_node_free(target);
        return NULL;
    }
    n->k[0] = target;
    if (is_op(cur(p), "|")) {
        if (!(n->k[2] = parse_filter(p, NULL, 0))) goto fail;
    }
    if (!(n->k[1] = parse_statements(p, ends, 1))) goto fail;
    return fin(p, n);
fail:
    jx_node_free(n);
    return NULL;
}

static struct jnode *stmt_macro(struct parser *p, struct tok *t)
{
    static const char *const ends[] = {"endmacro", NULL};
    struct jnode *n = mk(p, N_MACRO, t);
    if (!n) return NULL;
    if (cur(p)->t != T_NAME) {
        p_fail(p, NULL, "expected a macro name");
        goto fail;
    }
    if (!(n->str = dup_tok(p, cur(p)))) goto fail;
    next(p);
    if (expect_op(p, "(") < 0) goto fail;
    while (!is_op(cur(p), ")")) {
        if (n->nkids && expect_op(p, ",") < 0) goto fail;
        struct tok *a = cur(p);
        if (a->t != T_NAME) {
            p_fail(p, a, "expected an argument name");
            goto fail;
        }
        struct jnode *arg = mk(p, E_NAME, a);
        if (!arg || !(arg->str = dup_tok(p, a))) {
            jx_node_free(arg);
            goto fail;
        }
        arg->len = a->n;
        for (int i = 0; i < n->nkids; i++)
            if (!strcmp(n->kids[i]->str, arg->str)) { /* a Python def's, in jinja2's code */
                p_fail(p, a, "duplicate argument '%s' in macro definition", arg->str);
                jx_node_free(arg);
                goto fail;
            }
        next(p);
        if (is_op(cur(p), "=")) {
            next(p);
            if (!(arg->k[0] = parse_expression(p, 1))) {
                jx_node_free(arg);
                goto fail;
            }
        } else if (n->nkids && n->kids[n->nkids - 1]->k[0]) {
            jx_node_free(arg);
            p_fail(p, a, "non-default argument follows default argument");
            goto fail;
        }
        if (add_kid(p, n, fin(p, arg)) < 0) goto fail;
    }
    next(p);
    int saved = p->in_loop;
    p->in_loop = 0;
    n->k[0] = parse_statements(p, ends, 1);
    p->in_loop = saved;
    if (!n->k[0]) goto fail;
    return fin(p, n);
fail:
    jx_node_free(n);
    return NULL;
}

static struct jnode *stmt_with(struct parser *p, struct tok *t)
{
    static const char *const ends[] = {"endwith", NULL};
    struct jnode *n = mk(p, N_WITH, t);
    if (!n) return NULL;
    while (cur(p)->t != T_BEND) {
        if (n->nkids && expect_op(p, ",") < 0) goto fail;
        struct jnode *target = parse_assign_target(p, NULL, 0);
        if (add_kid(p, n, target) < 0) goto fail;
        if (expect_op(p, "=") < 0) goto fail;
        if (add_kw(p, n, strdup(""), parse_expression(p, 1)) < 0) goto fail;
    }
    if (!(n->k[0] = parse_statements(p, ends, 1))) goto fail;
    return fin(p, n);
fail:
    jx_node_free(n);
    return NULL;
}

static struct jnode *stmt_body_in_scope(struct parser *p, struct tok *t, const char *end)
{
    const char *ends[] = {end, NULL};
    struct jnode *n = mk(p, N_SCOPE, t);
    if (!n) return NULL;
    int saved = p->in_loop;
    p->in_loop = 0; /* a function body in jinja2: break cannot leave it */
    n->k[0] = parse_statements(p, ends, 1);
    p->in_loop = saved;
    if (!n->k[0]) {
        jx_node_free(n);
        return NULL;
    }
    return fin(p, n);
}

static struct jnode *parse_statement(struct parser *p)
{
    struct tok *t = cur(p);
    if (t->t != T_NAME) {
        p_fail(p, t, "tag name expected");
        return NULL;
    }
    if (p->nstack >= JX_MAX_HEIGHT || enter(p) < 0) {
        p_fail(p, t, "the template nests too deeply (over %d levels)", JX_MAX_HEIGHT);
        return NULL;
    }
    static const char *const names[] = {"for",        "if",    "set",   "macro", "filter",  "with",
                                        "generation", "block", "print", "break", "continue"};
    const char *tag = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (is_name(t, names[i])) tag = names[i];
    p->stack[p->nstack++] = tag ? tag : "?";
    struct jnode *n = NULL;
    char b[64];
    if (tag) next(p);
    if (!tag) {
        static const char *const unsup[] = {"extends", "include",    "import", "from",
                                            "call",    "autoescape", "do",     "trans"};
        int known = 0;
        for (size_t i = 0; i < sizeof(unsup) / sizeof(unsup[0]); i++) known |= is_name(t, unsup[i]);
        if (known)
            p_fail(p, t, "unsupported tag %s", describe(t, b, sizeof(b)));
        else
            p_fail(p, t, "Encountered unknown tag %s.", describe(t, b, sizeof(b)));
    } else if (!strcmp(tag, "for")) {
        n = stmt_for(p, t);
    } else if (!strcmp(tag, "if")) {
        n = stmt_if(p, t);
    } else if (!strcmp(tag, "set")) {
        n = stmt_set(p, t);
    } else if (!strcmp(tag, "macro")) {
        n = stmt_macro(p, t);
    } else if (!strcmp(tag, "with")) {
        n = stmt_with(p, t);
    } else if (!strcmp(tag, "generation")) {
        n = stmt_body_in_scope(p, t, "endgeneration");
    } else if (!strcmp(tag, "block")) {
        if (cur(p)->t != T_NAME) {
            p_fail(p, NULL, "expected a block name");
        } else {
            next(p);
            n = stmt_body_in_scope(p, t, "endblock");
            if (n && cur(p)->t == T_NAME) next(p); /* {% endblock name %} */
        }
    } else if (!strcmp(tag, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        n = mk(p, N_FILTERBLOCK, t);
        if (n &&
            (!(n->k[0] = parse_filter(p, NULL, 1)) || !(n->k[1] = parse_statements(p, ends, 1)))) {
            jx_node_free(n);
            n = NULL;
        }
        n = fin(p, n);
    } else if (!strcmp(tag, "print")) {
        n = mk(p, N_OUTPUT, t);
        if (n && !(n->k[0] = parse_tuple(p, 0, 1, NULL, 0))) {
            jx_node_free(n);
            n = NULL;
        }
        n = fin(p, n);
    } else { /* break, continue */
        if (!p->in_loop)
            p_fail(p, t, "'%s' outside of a loop", tag);
        else
            n = fin(p, mk(p, tag[0] == 'b' ? N_BREAK : N_CONTINUE, t));
    }
    p->nstack--;
    p->depth--;
    return n;
}

static struct jnode *subparse(struct parser *p, const char *const *end_tags)
{
    struct jnode *body = mk(p, N_BODY, cur(p));
    if (!body) return NULL;
    for (;;) {
        struct tok *t = cur(p);
        if (t->t == T_EOF) break;
        if (t->t == T_DATA) {
            struct jnode *n = mk(p, N_TEXT, t);
            if (n) {
                n->str = t->v;
                n->len = t->vlen;
                t->v = NULL;
            }
            if (add_kid(p, body, fin(p, n)) < 0) goto fail;
            next(p);
        } else if (t->t == T_VBEGIN) {
            next(p);
            struct jnode *n = mk(p, N_OUTPUT, t);
            if (!n) goto fail;
            if (!(n->k[0] = parse_tuple(p, 0, 1, NULL, 0))) {
                jx_node_free(n);
                goto fail;
            }
            if (add_kid(p, body, fin(p, n)) < 0) goto fail;
            if (expect_type(p, T_VEND, "end of print statement") < 0) goto fail;
        } else if (t->t == T_BBEGIN) {
            next(p);
            if (end_tags)
                for (int i = 0; end_tags[i]; i++)
                    if (is_name(cur(p), end_tags[i])) return fin(p, body);
            if (add_kid(p, body, parse_statement(p)) < 0) goto fail;
            if (expect_type(p, T_BEND, "end of statement block") < 0) goto fail;
        } else {
            char b[64];
            p_fail(p, t, "unexpected %s", describe(t, b, sizeof(b)));
            goto fail;
        }
    }
    return fin(p, body);
fail:
    jx_node_free(body);
    return NULL;
}

/* jinja2 resolves filters and tests when it compiles, except inside {% if %} and inline if
 * expressions ("soft" frames), where an unknown one fails only when it runs. */
static int check_names(struct parser *p, const struct jnode *n, int soft)
{
    if (!n) return 0;
    if ((n->kind == E_FILTER || n->kind == E_TEST) && n->op < 0 && !soft) {
        struct tok at = {0};
        at.line = n->line;
        at.col = n->col;
        const char *what = n->kind == E_FILTER ? "filter" : "test";
        if (n->op == -2) return p_fail(p, &at, "unsupported %s '%s'", what, n->str);
        return p_fail(p, &at, "No %s named '%s'.", what, n->str);
    }
    int ks[5] = {soft, soft, soft, soft, soft};
    switch (n->kind) {
    case N_IF:
    case E_COND:
        ks[0] = ks[1] = ks[2] = 1;
        break;
    case N_FOR: /* jinja2 compiles a loop's body, else and filter in a frame of their own */
        ks[2] = ks[3] = ks[4] = 0;
        break;
    case N_MACRO:
    case N_SCOPE:
    case N_FILTERBLOCK:
        ks[0] = ks[1] = 0;
        break;
    case N_SETBLOCK:
        ks[1] = ks[2] = 0;
        break;
    case N_WITH:
        ks[0] = 0;
        break;
    default:
        break;
    }
    int kid_soft = n->kind == N_MACRO ? 0 : n->kind == E_COND ? 1 : soft;
    for (int i = 0; i < 5; i++)
        if (check_names(p, n->k[i], ks[i]) < 0) return -1;
    for (int i = 0; i < n->nkids; i++)
        if (check_names(p, n->kids[i], kid_soft) < 0) return -1;
    for (int i = 0; i < n->nkw; i++)
        if (check_names(p, n->kwv[i], soft) < 0) return -1;
    return 0;
}

struct ls_jinja *ls_jinja_parse(const char *tmpl, size_t tlen, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!tmpl && tlen) {
        if (err && errlen) snprintf(err, errlen, "template: no text");
        return NULL;
    }
    size_t bad;
    if (!ls_utf8_valid(tmpl, tlen, &bad)) {
        if (err && errlen) snprintf(err, errlen, "template: not valid UTF-8 at byte %zu", bad);
        return NULL;
    }
    /* newlines to \n, one trailing newline dropped (keep_trailing_newline off) */
    char *src = malloc(tlen + 1);
    if (!src) {
        if (err && errlen) snprintf(err, errlen, "template: out of memory");
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < tlen; i++) {
        if (tmpl[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < tlen && tmpl[i + 1] == '\n') i++;
        } else {
            src[n++] = tmpl[i];
        }
    }
    if (n && src[n - 1] == '\n') n--;
    src[n] = '\0';
    struct lexer lx = {.src = src, .len = n, .line = 1, .col = 1, .err = err, .errlen = errlen};
    struct ls_jinja *t = NULL;
    if (lex_all(&lx) == 0) {
        struct parser *p = calloc(1, sizeof(*p));
        if (p) {
            p->t = lx.toks;
            p->n = lx.ntok;
            p->err = err;
            p->errlen = errlen;
            struct jnode *root = subparse(p, NULL);
            if (root && check_names(p, root, 0) < 0) {
                jx_node_free(root);
                root = NULL;
            }
            if (root) {
                t = malloc(sizeof(*t));
                if (t)
                    t->root = root;
                else
                    jx_node_free(root);
            }
            if (!t && !p->failed && err && errlen) snprintf(err, errlen, "template: out of memory");
            free(p);
        } else if (err && errlen) {
            snprintf(err, errlen, "template: out of memory");
        }
    }
    for (size_t i = 0; i < lx.ntok; i++) free(lx.toks[i].v);
    free(lx.toks);
    free(src);
    return t;
}

void ls_jinja_free(struct ls_jinja *t)
{
    if (!t) return;
    jx_node_free(t->root);
    free(t);
}
