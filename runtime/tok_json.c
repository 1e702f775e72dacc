/* tok_load_json: a Hugging Face tokenizer.json (jansson), plus tokenizer_config.json from the same
 * folder when there is one.
 *
 * Supported, because the models we serve use them: model BPE (vocab, merges as "a b" strings or
 * [a, b] pairs, byte_fallback, fuse_unk, unk_token, ignore_merges); added_tokens with their
 * flags; normalizers Sequence, Prepend, Replace, NFC, NFD, NFKC and NFKD (the normal forms are
 * utf8proc's, see unicode_form in tokenizer.c); pre-tokenizers Sequence, ByteLevel, Split (String
 * or Regex, all five behaviours, invert), Digits, Metaspace; post-processors TemplateProcessing,
 * ByteLevel, RobertaProcessing, BertProcessing, Sequence; decoders ByteLevel, Metaspace, Sequence
 * of Replace, ByteFallback, Fuse, Strip. Anything else is refused with its JSON path, rather than
 * giving ids that silently differ from the reference.
 *
 * The file is untrusted: every field is type-checked before use and every id range-checked, and
 * no input makes this code exit or abort. Messages read "<file>: <json path>: expected X, found Y".
 */
#include "tok_internal.h"
#include "json_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

struct jctx {
    const char *name;
    char *err;
    size_t errlen;
};

static int jfail(struct jctx *c, const char *path, const char *expected, const json_t *found)
{
    if (found && json_is_string(found))
        ls_errf(c->err, c->errlen, "%s: %s: expected %s, found \"%.80s\"", c->name, path, expected,
                 json_string_value(found));
    else if (found && json_is_integer(found))
        ls_errf(c->err, c->errlen, "%s: %s: expected %s, found %lld", c->name, path, expected,
                (long long)json_integer_value(found));
    else
        ls_errf(c->err, c->errlen, "%s: %s: expected %s, found %s", c->name, path, expected,
                 ls_json_type_name(found));
    return -1;
}

/* optional boolean member; absent or null gives def */
static int jbool(struct jctx *c, const json_t *obj, const char *key, const char *path, int def,
                 int *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) {
        char p[160];
        snprintf(p, sizeof(p), "%s.%s", path, key);
        return jfail(c, p, "true or false", v);
    }
    *out = json_is_true(v);
    return 0;
}

static const char *jstr(struct jctx *c, const json_t *obj, const char *key, const char *path,
                        size_t *len)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v)) {
        char p[160];
        snprintf(p, sizeof(p), "%s.%s", path, key);
        jfail(c, p, "a string", v);
        return NULL;
    }
    if (len) *len = json_string_length(v);
    return json_string_value(v);
}

static int jid(struct jctx *c, const json_t *v, const char *path, int32_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= TOK_MAX_IDS) {
        char want[64];
        snprintf(want, sizeof(want), "an id in 0..%d", TOK_MAX_IDS - 1);
        return jfail(c, path, want, v);
    }
    *out = (int32_t)json_integer_value(v);
    return 0;
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static int oom(struct jctx *c)
{
    ls_errf(c->err, c->errlen, "%s: out of memory", c->name);
    return -1;
}

/* pattern: {"String": s} or {"Regex": r}; sets exactly one of *re and (*lit, *litlen) */
static int parse_pattern(struct jctx *c, const json_t *pat, const char *path, pcre2_code **re,
                         char **lit, size_t *litlen)
{
    *re = NULL;
    *lit = NULL;
    const json_t *s = json_object_get(pat, "String"), *r = json_object_get(pat, "Regex");
    if (json_is_string(s)) {
        *litlen = json_string_length(s);
        if (!(*lit = dup_n(json_string_value(s), *litlen))) return oom(c);
        return 0;
    }
    if (json_is_string(r)) {
        char msg[300];
        *re = tok_compile_regex(json_string_value(r), json_string_length(r), msg, sizeof(msg));
        if (!*re) {
            ls_errf(c->err, c->errlen, "%s: %s.Regex: %s", c->name, path, msg);
            return -1;
        }
        return 0;
    }
    return jfail(c, path, "{\"String\": ...} or {\"Regex\": ...}", pat);
}

/* ------------------------------------------------------------------ normalizer */

static int parse_normalizer(struct jctx *c, struct tokenizer *tok, const json_t *n,
                            const char *path)
{
    if (!n || json_is_null(n)) return 0;
    const char *type = json_is_object(n) ? json_string_value(json_object_get(n, "type")) : NULL;
    if (!type) return jfail(c, path, "an object with a \"type\"", n);
    char p[160];
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "normalizers");
        snprintf(p, sizeof(p), "%s.normalizers", path);
        if (!json_is_array(list)) return jfail(c, p, "an array", list);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(p, sizeof(p), "%s.normalizers[%zu]", path, i);
            if (parse_normalizer(c, tok, json_array_get(list, i), p)) return -1;
        }
        return 0;
    }
    static const struct {
        const char *name;
        enum tok_norm_type type;
    } types[] = {{"Prepend", TOK_NORM_PREPEND}, {"Replace", TOK_NORM_REPLACE},
                 {"NFC", TOK_NORM_NFC},         {"NFD", TOK_NORM_NFD},
                 {"NFKC", TOK_NORM_NFKC},       {"NFKD", TOK_NORM_NFKD}};
    size_t k = 0;
    while (k < sizeof(types) / sizeof(types[0]) && strcmp(type, types[k].name) != 0) k++;
    if (k == sizeof(types) / sizeof(types[0])) {
        snprintf(p, sizeof(p), "%s.type", path);
        return jfail(c, p, "Sequence, Prepend, Replace, NFC, NFD, NFKC or NFKD",
                     json_object_get(n, "type"));
    }
    if (tok->n_norm == TOK_MAX_STEPS) {
        ls_errf(c->err, c->errlen, "%s: %s: more than %d normalizer steps", c->name, path,
                 TOK_MAX_STEPS);
        return -1;
    }
    struct tok_norm *nm = &tok->norm[tok->n_norm++];
    memset(nm, 0, sizeof(*nm));
    nm->type = types[k].type;
    if (nm->type != TOK_NORM_PREPEND && nm->type != TOK_NORM_REPLACE) return 0; /* no fields */
    size_t len;
    if (nm->type == TOK_NORM_PREPEND) {
        const char *s = jstr(c, n, "prepend", path, &len);
        if (!s) return -1;
        if (!(nm->a = dup_n(s, len))) return oom(c);
        nm->alen = len;
        return 0;
    }
    snprintf(p, sizeof(p), "%s.pattern", path);
    if (parse_pattern(c, json_object_get(n, "pattern"), p, &nm->re, &nm->a, &nm->alen)) return -1;
    const char *s = jstr(c, n, "content", path, &len);
    if (!s) return -1;
    if (!(nm->b = dup_n(s, len))) return oom(c);
    nm->blen = len;
    return 0;
}

/* ------------------------------------------------------------------ pre-tokenizer */

static int parse_replacement(struct jctx *c, const json_t *obj, const char *path, char *out,
                             int *outlen)
{
    size_t len;
    const char *s = jstr(c, obj, "replacement", path, &len);
    if (!s) return -1;
    if (len == 0 || len > 4 || ls_utf8_len((const uint8_t *)s, len) != (int)len) {
        char p[160];
        snprintf(p, sizeof(p), "%s.replacement", path);
        return jfail(c, p, "one character", json_object_get(obj, "replacement"));
    }
    memcpy(out, s, len);
    *outlen = (int)len;
    return 0;
}

static int parse_prepend_scheme(struct jctx *c, const json_t *obj, const char *path, int *out)
{
    const json_t *ps = json_object_get(obj, "prepend_scheme");
    const json_t *aps = json_object_get(obj, "add_prefix_space");
    *out = TOK_PREPEND_ALWAYS;
    if (ps && !json_is_null(ps)) {
        const char *s = json_string_value(ps);
        char p[160];
        snprintf(p, sizeof(p), "%s.prepend_scheme", path);
        if (!s) return jfail(c, p, "\"always\", \"first\" or \"never\"", ps);
        if (strcmp(s, "always") == 0)
            *out = TOK_PREPEND_ALWAYS;
        else if (strcmp(s, "first") == 0)
            *out = TOK_PREPEND_FIRST;
        else if (strcmp(s, "never") == 0)
            *out = TOK_PREPEND_NEVER;
        else
            return jfail(c, p, "\"always\", \"first\" or \"never\"", ps);
    }
    if (json_is_false(aps)) *out = TOK_PREPEND_NEVER; /* the older spelling */
    return 0;
}

static int parse_pre(struct jctx *c, struct tokenizer *tok, const json_t *n, const char *path)
{
    if (!n || json_is_null(n)) return 0;
    const char *type = json_is_object(n) ? json_string_value(json_object_get(n, "type")) : NULL;
    if (!type) return jfail(c, path, "an object with a \"type\"", n);
    char p[160];
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "pretokenizers");
        snprintf(p, sizeof(p), "%s.pretokenizers", path);
        if (!json_is_array(list)) return jfail(c, p, "an array", list);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(p, sizeof(p), "%s.pretokenizers[%zu]", path, i);
            if (parse_pre(c, tok, json_array_get(list, i), p)) return -1;
        }
        return 0;
    }
    if (tok->bytelevel) {
        ls_errf(c->err, c->errlen,
                 "%s: %s: expected ByteLevel to be the last pre-tokenizer, found %s after it",
                 c->name, path, type);
        return -1;
    }
    if (tok->n_pre == TOK_MAX_STEPS) {
        ls_errf(c->err, c->errlen, "%s: %s: more than %d pre-tokenizer steps", c->name, path,
                 TOK_MAX_STEPS);
        return -1;
    }
    struct tok_pre *pr = &tok->pre[tok->n_pre];
    memset(pr, 0, sizeof(*pr));
    if (strcmp(type, "ByteLevel") == 0) {
        int use_regex;
        pr->type = TOK_PRE_BYTELEVEL;
        if (jbool(c, n, "add_prefix_space", path, 1, &pr->add_prefix_space) ||
            jbool(c, n, "use_regex", path, 1, &use_regex))
            return -1;
        if (use_regex) {
            static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+"
                                       "| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
            if (!(pr->re = tok_compile_regex(gpt2, strlen(gpt2), c->err, c->errlen))) return -1;
        }
        tok->bytelevel = 1;
    } else if (strcmp(type, "Split") == 0) {
        pr->type = TOK_PRE_SPLIT;
        snprintf(p, sizeof(p), "%s.pattern", path);
        if (parse_pattern(c, json_object_get(n, "pattern"), p, &pr->re, &pr->literal,
                          &pr->literal_len))
            return -1;
        tok->n_pre++; /* owned from here: tok_free releases the pattern */
        const json_t *b = json_object_get(n, "behavior");
        const char *bs = json_string_value(b);
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                            "MergedWithNext", "Contiguous"};
        pr->behavior = -1;
        for (int i = 0; bs && i < 5; i++)
            if (strcmp(bs, names[i]) == 0) pr->behavior = i;
        if (pr->behavior < 0) {
            snprintf(p, sizeof(p), "%s.behavior", path);
            return jfail(c, p,
                         "Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous", b);
        }
        return jbool(c, n, "invert", path, 0, &pr->invert);
    } else if (strcmp(type, "Digits") == 0) {
        int individual;
        if (jbool(c, n, "individual_digits", path, 0, &individual)) return -1;
        pr->type = TOK_PRE_SPLIT;
        pr->behavior = individual ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS;
        if (!(pr->re = tok_compile_regex("\\p{N}", 5, c->err, c->errlen))) return -1;
    } else if (strcmp(type, "Metaspace") == 0) {
        pr->type = TOK_PRE_METASPACE;
        if (parse_replacement(c, n, path, pr->repl, &pr->repl_len) ||
            parse_prepend_scheme(c, n, path, &pr->prepend_scheme) ||
            jbool(c, n, "split", path, 1, &pr->split))
            return -1;
    } else {
        snprintf(p, sizeof(p), "%s.type", path);
        return jfail(c, p, "Sequence, ByteLevel, Split, Digits or Metaspace",
                     json_object_get(n, "type"));
    }
    tok->n_pre++;
    return 0;
}

/* ------------------------------------------------------------------ decoder */

static int parse_decoder(struct jctx *c, struct tokenizer *tok, const json_t *n, const char *path,
                         int *fused)
{
    if (!n || json_is_null(n)) return 0;
    const char *type = json_is_object(n) ? json_string_value(json_object_get(n, "type")) : NULL;
    if (!type) return jfail(c, path, "an object with a \"type\"", n);
    char p[160];
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "decoders");
        snprintf(p, sizeof(p), "%s.decoders", path);
        if (!json_is_array(list)) return jfail(c, p, "an array", list);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(p, sizeof(p), "%s.decoders[%zu]", path, i);
            if (parse_decoder(c, tok, json_array_get(list, i), p, fused)) return -1;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        tok->dec_bytelevel = 1;
        *fused = 1;
    } else if (strcmp(type, "ByteFallback") == 0) {
        tok->dec_byte_fallback = 1;
    } else if (strcmp(type, "Fuse") == 0) {
        *fused = 1;
    } else if (strcmp(type, "Replace") == 0) {
        if (tok->n_dec_replace == TOK_MAX_REPLACES) {
            ls_errf(c->err, c->errlen, "%s: %s: more than %d Replace decoders", c->name, path,
                     TOK_MAX_REPLACES);
            return -1;
        }
        const json_t *pat = json_object_get(n, "pattern");
        const json_t *s = json_object_get(pat, "String");
        snprintf(p, sizeof(p), "%s.pattern", path);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return jfail(c, p, "{\"String\": a non-empty string}", pat);
        size_t tl;
        const char *to = jstr(c, n, "content", path, &tl);
        if (!to) return -1;
        struct tok_replace *r = &tok->dec_replace[tok->n_dec_replace++];
        r->from = dup_n(json_string_value(s), json_string_length(s));
        r->to = dup_n(to, tl);
        if (!r->from || !r->to) return oom(c);
        r->flen = json_string_length(s);
        r->tlen = tl;
    } else if (strcmp(type, "Strip") == 0) {
        size_t cl;
        const char *content = jstr(c, n, "content", path, &cl);
        if (!content) return -1;
        const json_t *start = json_object_get(n, "start"), *stop = json_object_get(n, "stop");
        if (cl != 1) {
            snprintf(p, sizeof(p), "%s.content", path);
            return jfail(c, p, "one ASCII character", json_object_get(n, "content"));
        }
        if (!json_is_integer(start) || json_integer_value(start) < 0 ||
            json_integer_value(start) > 64) {
            snprintf(p, sizeof(p), "%s.start", path);
            return jfail(c, p, "an integer in 0..64", start);
        }
        if (!json_is_integer(stop) || json_integer_value(stop) != 0) {
            snprintf(p, sizeof(p), "%s.stop", path);
            return jfail(c, p, "0 (stripping the end is not supported)", stop);
        }
        if (!*fused) {
            ls_errf(c->err, c->errlen, "%s: %s: expected Strip after Fuse, found it before",
                     c->name, path);
            return -1;
        }
        tok->dec_strip_start = (int)json_integer_value(start);
        tok->dec_strip_char = content[0];
    } else if (strcmp(type, "Metaspace") == 0) {
        int scheme;
        if (parse_replacement(c, n, path, tok->dec_ms_repl, &tok->dec_ms_repl_len) ||
            parse_prepend_scheme(c, n, path, &scheme))
            return -1;
        tok->dec_metaspace_first = scheme != TOK_PREPEND_NEVER;
        *fused = 1;
    } else {
        snprintf(p, sizeof(p), "%s.type", path);
        return jfail(c, p, "Sequence, ByteLevel, ByteFallback, Fuse, Replace, Strip or Metaspace",
                     json_object_get(n, "type"));
    }
    return 0;
}

/* ------------------------------------------------------------------ post-processor */

static int affix_push(struct jctx *c, int32_t *list, int *n, int32_t id, const char *path)
{
    if (*n == TOK_MAX_AFFIX) {
        ls_errf(c->err, c->errlen, "%s: %s: more than %d special ids around the text", c->name,
                 path, TOK_MAX_AFFIX);
        return -1;
    }
    list[(*n)++] = id;
    return 0;
}

/* ["<s>", 1] as Roberta/Bert processors write a token */
static int parse_pair_token(struct jctx *c, const json_t *v, const char *path, int32_t *id)
{
    if (!json_is_array(v) || json_array_size(v) != 2) return jfail(c, path, "[token, id]", v);
    return jid(c, json_array_get(v, 1), path, id);
}

static int parse_post(struct jctx *c, struct tokenizer *tok, const json_t *n, const char *path)
{
    if (!n || json_is_null(n)) return 0;
    const char *type = json_is_object(n) ? json_string_value(json_object_get(n, "type")) : NULL;
    if (!type) return jfail(c, path, "an object with a \"type\"", n);
    char p[200];
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "processors");
        snprintf(p, sizeof(p), "%s.processors", path);
        if (!json_is_array(list)) return jfail(c, p, "an array", list);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(p, sizeof(p), "%s.processors[%zu]", path, i);
            if (parse_post(c, tok, json_array_get(list, i), p)) return -1;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) return 0; /* offsets only */
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        int32_t cls, sep;
        snprintf(p, sizeof(p), "%s.cls", path);
        if (parse_pair_token(c, json_object_get(n, "cls"), p, &cls)) return -1;
        snprintf(p, sizeof(p), "%s.sep", path);
        if (parse_pair_token(c, json_object_get(n, "sep"), p, &sep)) return -1;
        tok->n_prefix = tok->n_suffix = 0;
        tok->prefix[tok->n_prefix++] = cls;
        tok->suffix[tok->n_suffix++] = sep;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") != 0) {
        snprintf(p, sizeof(p), "%s.type", path);
        return jfail(c, p,
                     "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing or "
                     "Sequence",
                     json_object_get(n, "type"));
    }
    const json_t *single = json_object_get(n, "single");
    const json_t *specials = json_object_get(n, "special_tokens");
    snprintf(p, sizeof(p), "%s.single", path);
    if (!json_is_array(single)) return jfail(c, p, "an array", single);
    tok->n_prefix = tok->n_suffix = 0;
    int seen_seq = 0;
    for (size_t i = 0; i < json_array_size(single); i++) {
        const json_t *item = json_array_get(single, i);
        snprintf(p, sizeof(p), "%s.single[%zu]", path, i);
        if (json_is_object(json_object_get(item, "Sequence"))) {
            seen_seq = 1;
            continue;
        }
        const json_t *st = json_object_get(item, "SpecialToken");
        const char *name = json_string_value(json_object_get(st, "id"));
        if (!name)
            return jfail(c, p, "{\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}", item);
        const json_t *def = json_object_get(json_object_get(specials, name), "ids");
        snprintf(p, sizeof(p), "%s.special_tokens[\"%.40s\"].ids", path, name);
        if (!json_is_array(def)) return jfail(c, p, "an array of ids", def);
        for (size_t k = 0; k < json_array_size(def); k++) {
            int32_t id;
            if (jid(c, json_array_get(def, k), p, &id)) return -1;
            if (seen_seq ? affix_push(c, tok->suffix, &tok->n_suffix, id, p)
                         : affix_push(c, tok->prefix, &tok->n_prefix, id, p))
                return -1;
        }
    }
    if (tok->n_prefix > 0 && tok->bos_id < 0) tok->bos_id = tok->prefix[0];
    return 0;
}

/* ------------------------------------------------------------------ model */

/* keys may hold NUL bytes ("\u0000" is a fine token): take their length from jansson */
static size_t key_len(void *it)
{
#if JANSSON_VERSION_HEX >= 0x020e00
    return json_object_iter_key_len(it);
#else
    return strlen(json_object_iter_key(it));
#endif
}

static const json_t *object_getn(const json_t *obj, const char *key, size_t len)
{
#if JANSSON_VERSION_HEX >= 0x020e00
    return json_object_getn(obj, key, len);
#else
    return strlen(key) == len ? json_object_get(obj, key) : NULL;
#endif
}

static int parse_model_vocab(struct jctx *c, struct tokenizer *tok, const json_t *vocab)
{
    json_t *obj = (json_t *)vocab;
    for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it)) {
        /* ids were range-checked when counting */
        int32_t id = (int32_t)json_integer_value(json_object_iter_value(it));
        if (tok_set_vocab(tok, id, json_object_iter_key(it), key_len(it))) return oom(c);
    }
    return tok_index_vocab(tok) ? oom(c) : 0;
}

static int parse_merges(struct jctx *c, struct tokenizer *tok, const json_t *merges)
{
    size_t n = json_array_size(merges);
    if (n > (size_t)TOK_MAX_IDS * 4) {
        ls_errf(c->err, c->errlen, "%s: model.merges: expected at most %d merges, found %zu",
                 c->name, TOK_MAX_IDS * 4, n);
        return -1;
    }
    if (tok_merges_reserve(tok, (int)n)) return oom(c);
    char *cat = NULL;
    size_t cat_cap = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t la, lb;
        char p[64];
        snprintf(p, sizeof(p), "model.merges[%zu]", i);
        if (json_is_string(m)) {
            a = json_string_value(m);
            size_t len = json_string_length(m);
            const char *sep = memchr(a, ' ', len);
            if (!sep || memchr(sep + 1, ' ', len - (size_t)(sep - a) - 1)) {
                free(cat);
                return jfail(c, p, "\"a b\" (two tokens and one space)", m);
            }
            la = (size_t)(sep - a);
            b = sep + 1;
            lb = len - la - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            lb = json_string_length(json_array_get(m, 1));
        } else {
            free(cat);
            return jfail(c, p, "\"a b\" or [\"a\", \"b\"]", m);
        }
        if (la + lb + 1 > cat_cap) {
            cat_cap = la + lb + 64;
            char *q = realloc(cat, cat_cap);
            if (!q) {
                free(cat);
                return oom(c);
            }
            cat = q;
        }
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        int32_t ia = tok_vocab_lookup(tok, a, la), ib = tok_vocab_lookup(tok, b, lb);
        int32_t im = tok_vocab_lookup(tok, cat, la + lb);
        if (ia < 0 || ib < 0 || im < 0) {
            ls_errf(c->err, c->errlen,
                     "%s: %s: expected both tokens and their concatenation in model.vocab, "
                     "found \"%.*s\" missing",
                     c->name, p,
                     (int)(ia < 0   ? (la > 60 ? 60 : la)
                           : ib < 0 ? (lb > 60 ? 60 : lb)
                                    : (la + lb > 60 ? 60 : la + lb)),
                     ia < 0   ? a
                     : ib < 0 ? b
                              : cat);
            free(cat);
            return -1;
        }
        if (tok_add_merge_ids(tok, ia, ib, im, (int32_t)i)) {
            free(cat);
            return oom(c);
        }
    }
    free(cat);
    return 0;
}

static int parse_model_opts(struct jctx *c, struct tokenizer *tok, const json_t *model)
{
    if (jbool(c, model, "byte_fallback", "model", 0, &tok->byte_fallback) ||
        jbool(c, model, "fuse_unk", "model", 0, &tok->fuse_unk) ||
        jbool(c, model, "ignore_merges", "model", 0, &tok->ignore_merges))
        return -1;
    const json_t *d = json_object_get(model, "dropout");
    if (d && !json_is_null(d) && !(json_is_number(d) && json_number_value(d) == 0.0))
        return jfail(c, "model.dropout", "null or 0 (dropout is for training)", d);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0)) {
            char p[64];
            snprintf(p, sizeof(p), "model.%s", affixes[i]);
            return jfail(c, p, "null or \"\"", v);
        }
    }
    const json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk)) return jfail(c, "model.unk_token", "a string or null", unk);
        tok->unk_id = tok_vocab_lookup(tok, json_string_value(unk), json_string_length(unk));
        if (tok->unk_id < 0) return jfail(c, "model.unk_token", "a token of model.vocab", unk);
    }
    return 0;
}

/* ------------------------------------------------------------------ tokenizer_config.json */

/* bos_token / eos_token: null (none), "text" or {"content": "text", ...} (an AddedToken), naming
 * a token of tokenizer.json; -1 into *id for null. transformers refuses other types, and would
 * add an unknown text as a new token past the model's vocabulary. */
static int config_token(struct jctx *c, const struct tokenizer *tok, const json_t *cfg,
                        const char *key, int32_t *id)
{
    const json_t *v = json_object_get(cfg, key);
    *id = -1;
    if (!v || json_is_null(v)) return 0;
    const json_t *s = json_is_object(v) ? json_object_get(v, "content") : v;
    char p[64];
    snprintf(p, sizeof(p), json_is_object(v) ? "%s.content" : "%s", key);
    if (!json_is_string(s))
        return jfail(c, p, json_is_object(v) ? "a string" : "a string, {\"content\": ...} or null",
                     s);
    *id = tok_id(tok, json_string_value(s));
    if (*id < 0) return jfail(c, p, "a token of tokenizer.json", s);
    return 0;
}

static int parse_config(struct jctx *c, struct tokenizer *tok, const json_t *cfg)
{
    if (!json_is_object(cfg)) return jfail(c, "(top level)", "an object", cfg);
    int32_t bos, eos;
    if (config_token(c, tok, cfg, "bos_token", &bos) ||
        config_token(c, tok, cfg, "eos_token", &eos))
        return -1;
    if (bos >= 0) tok->bos_id = bos;
    if (eos >= 0) tok->eos_id = eos;
    const json_t *ab = json_object_get(cfg, "add_bos_token");
    const json_t *ae = json_object_get(cfg, "add_eos_token");
    if (ab && !json_is_null(ab) && !json_is_boolean(ab))
        return jfail(c, "add_bos_token", "true, false or null", ab);
    if (ae && !json_is_null(ae) && !json_is_boolean(ae))
        return jfail(c, "add_eos_token", "true, false or null", ae);
    if (json_is_boolean(ab)) {
        /* transformers rebuilds the post-processor from this flag */
        if (json_is_true(ab) && tok->bos_id >= 0) {
            int has = tok->n_prefix > 0 && tok->prefix[0] == tok->bos_id;
            if (!has) {
                if (tok->n_prefix == TOK_MAX_AFFIX) return jfail(c, "add_bos_token", "room", ab);
                memmove(tok->prefix + 1, tok->prefix, (size_t)tok->n_prefix * sizeof(int32_t));
                tok->prefix[0] = tok->bos_id;
                tok->n_prefix++;
            }
        } else if (json_is_false(ab) && tok->n_prefix > 0 && tok->prefix[0] == tok->bos_id) {
            memmove(tok->prefix, tok->prefix + 1, (size_t)(tok->n_prefix - 1) * sizeof(int32_t));
            tok->n_prefix--;
        }
    }
    if (json_is_boolean(ae)) {
        int has = tok->n_suffix > 0 && tok->suffix[tok->n_suffix - 1] == tok->eos_id;
        if (json_is_true(ae) && tok->eos_id >= 0 && !has) {
            if (tok->n_suffix == TOK_MAX_AFFIX) return jfail(c, "add_eos_token", "room", ae);
            tok->suffix[tok->n_suffix++] = tok->eos_id;
        } else if (json_is_false(ae) && has) {
            tok->n_suffix--;
        }
    }
    const json_t *ct = json_object_get(cfg, "chat_template");
    const char *tmpl = NULL, *tmpl_tools = NULL;
    if (json_is_string(ct)) {
        tmpl = json_string_value(ct);
    } else if (json_is_array(ct)) {
        /* [{"name": "default", "template": ...}, ...]: transformers renders the one named
         * "tool_use" for requests with tools, "default" for the others, and raises when the one
         * it wants is missing, so no other is taken */
        for (size_t i = 0; i < json_array_size(ct); i++) {
            const json_t *e = json_array_get(ct, i);
            char p[64];
            snprintf(p, sizeof(p), "chat_template[%zu]", i);
            if (!json_is_object(e)) return jfail(c, p, "an object {name, template}", e);
            const char *name = jstr(c, e, "name", p, NULL);
            const char *t = name ? jstr(c, e, "template", p, NULL) : NULL;
            if (!t) return -1;
            if (strcmp(name, "default") == 0) tmpl = t;
            if (strcmp(name, "tool_use") == 0) tmpl_tools = t;
        }
    } else if (ct && !json_is_null(ct)) {
        return jfail(c, "chat_template", "a string or a list of {name, template}", ct);
    }
    if (tmpl) {
        free(tok->chat_template);
        if (!(tok->chat_template = strdup(tmpl))) return oom(c);
    }
    if (tmpl_tools) {
        free(tok->chat_template_tool_use);
        if (!(tok->chat_template_tool_use = strdup(tmpl_tools))) return oom(c);
    }
    return 0;
}

/* ------------------------------------------------------------------ top level */

static struct tokenizer *load_root(struct jctx *c, const json_t *root, const json_t *cfg,
                                   const char *cfg_name)
{
    if (!json_is_object(root)) {
        jfail(c, "(top level)", "an object", root);
        return NULL;
    }
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) {
        jfail(c, "model", "an object", model);
        return NULL;
    }
    const json_t *mtype = json_object_get(model, "type");
    if (mtype && !(json_is_string(mtype) && strcmp(json_string_value(mtype), "BPE") == 0)) {
        jfail(c, "model.type", "\"BPE\"", mtype);
        return NULL;
    }
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) {
        jfail(c, "model.vocab", "an object of token: id", vocab);
        return NULL;
    }
    const json_t *merges = json_object_get(model, "merges");
    if (merges && !json_is_array(merges)) {
        jfail(c, "model.merges", "an array", merges);
        return NULL;
    }
    const json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added)) {
        jfail(c, "added_tokens", "an array", added);
        return NULL;
    }
    /* the vocabulary size is one past the largest id anywhere */
    int32_t max_id = -1;
    json_t *vobj = (json_t *)vocab;
    for (void *it = json_object_iter(vobj); it; it = json_object_iter_next(vobj, it)) {
        int32_t id;
        char p[200];
        snprintf(p, sizeof(p), "model.vocab[\"%.60s\"]", json_object_iter_key(it));
        if (jid(c, json_object_iter_value(it), p, &id)) return NULL;
        if (id > max_id) max_id = id;
    }
    /* Added tokens take their ids as HF's AddedVocabulary gives them, whatever the file says:
     * the id of the same text in model.vocab (or of an earlier added token), else the next
     * one after the model's vocabulary. Real files agree with this; edited ones may not. */
    size_t n_added = json_array_size(added);
    int32_t *added_ids = malloc((n_added ? n_added : 1) * sizeof(*added_ids));
    if (!added_ids) {
        oom(c);
        return NULL;
    }
    int64_t next_id = (int64_t)json_object_size(vocab);
    for (size_t i = 0; i < n_added; i++) {
        const json_t *a = json_array_get(added, i);
        int32_t id;
        char p[64];
        snprintf(p, sizeof(p), "added_tokens[%zu].id", i);
        if (!json_is_object(a)) {
            snprintf(p, sizeof(p), "added_tokens[%zu]", i);
            jfail(c, p, "an object", a);
            goto fail_ids;
        }
        if (jid(c, json_object_get(a, "id"), p, &id)) goto fail_ids;
        const json_t *content = json_object_get(a, "content");
        snprintf(p, sizeof(p), "added_tokens[%zu].content", i);
        if (!json_is_string(content)) {
            jfail(c, p, "a string", content);
            goto fail_ids;
        }
        added_ids[i] = -1; /* empty: HF ignores it */
        if (json_string_length(content) == 0) continue;
        for (size_t k = 0; k < i && added_ids[i] < 0; k++) {
            const json_t *ck = json_object_get(json_array_get(added, k), "content");
            if (json_string_length(ck) == json_string_length(content) &&
                memcmp(json_string_value(ck), json_string_value(content),
                       json_string_length(content)) == 0)
                added_ids[i] = added_ids[k];
        }
        if (added_ids[i] < 0) {
            const json_t *mid =
                object_getn(vocab, json_string_value(content), json_string_length(content));
            if (mid) {
                added_ids[i] = (int32_t)json_integer_value(mid); /* range-checked above */
            } else if (next_id >= TOK_MAX_IDS) {
                jfail(c, p, "fewer tokens", content);
                goto fail_ids;
            } else {
                added_ids[i] = (int32_t)next_id++;
            }
        }
        if (added_ids[i] > max_id) max_id = added_ids[i];
    }
    if (max_id < 0) {
        ls_errf(c->err, c->errlen, "%s: model.vocab: expected at least one token, found none",
                c->name);
        goto fail_ids;
    }
    char msg[256];
    struct tokenizer *tok = tok_new(max_id + 1, msg, sizeof(msg));
    if (!tok) {
        ls_errf(c->err, c->errlen, "%s: %s", c->name, msg);
        goto fail_ids;
    }
    if (parse_model_vocab(c, tok, vocab)) goto fail;
    if (merges && parse_merges(c, tok, merges)) goto fail;
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        char p[64];
        snprintf(p, sizeof(p), "added_tokens[%zu]", i);
        size_t len;
        const char *content = jstr(c, a, "content", p, &len);
        int special, normalized, lstrip, rstrip, single_word;
        if (!content || jbool(c, a, "special", p, 0, &special) ||
            jbool(c, a, "normalized", p, !special, &normalized) ||
            jbool(c, a, "lstrip", p, 0, &lstrip) || jbool(c, a, "rstrip", p, 0, &rstrip) ||
            jbool(c, a, "single_word", p, 0, &single_word))
            goto fail;
        int32_t id = added_ids[i];
        if (id < 0) continue;
        if (tok_add_added(tok, id, content, len, special, normalized, lstrip, rstrip,
                          single_word)) {
            oom(c);
            goto fail;
        }
    }
    if (parse_model_opts(c, tok, model)) goto fail;
    if (parse_normalizer(c, tok, json_object_get(root, "normalizer"), "normalizer")) goto fail;
    if (parse_pre(c, tok, json_object_get(root, "pre_tokenizer"), "pre_tokenizer")) goto fail;
    int fused = 0;
    const json_t *dec = json_object_get(root, "decoder");
    if (parse_decoder(c, tok, dec, "decoder", &fused)) goto fail;
    if (!dec || json_is_null(dec)) tok->dec_join_space = 1;
    if (parse_post(c, tok, json_object_get(root, "post_processor"), "post_processor")) goto fail;
    tok->kind = tok->bytelevel ? TOK_KIND_BPE : TOK_KIND_SPM;
    if (cfg) {
        struct jctx cc = {cfg_name, c->err, c->errlen};
        if (parse_config(&cc, tok, cfg)) goto fail;
    }
    if (tok_finalize(tok, msg, sizeof(msg))) {
        ls_errf(c->err, c->errlen, "%s: %s", c->name, msg);
        goto fail;
    }
    free(added_ids);
    return tok;
fail:
    tok_free(tok);
fail_ids:
    free(added_ids);
    return NULL;
}

static json_t *parse_json(const char *name, const char *buf, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    json_t *j = json_loadb(buf, len, JSON_ALLOW_NUL, &je);
    if (!j)
        ls_errf(err, errlen, "%s:%d:%d: not valid JSON: %s", name, je.line, je.column, je.text);
    return j;
}

struct tokenizer *tok_load_json_buf(const char *buf, size_t len, const char *name,
                                    const char *config_buf, size_t config_len, char *err,
                                    size_t errlen)
{
    const char *nm = name ? name : "tokenizer.json";
    if (!buf) {
        ls_errf(err, errlen, "%s: no data", nm);
        return NULL;
    }
    json_t *root = parse_json(nm, buf, len, err, errlen);
    if (!root) return NULL;
    json_t *cfg = NULL;
    if (config_buf &&
        !(cfg = parse_json("tokenizer_config.json", config_buf, config_len, err, errlen))) {
        json_decref(root);
        return NULL;
    }
    struct jctx c = {nm, err, errlen};
    struct tokenizer *tok = load_root(&c, root, cfg, "tokenizer_config.json");
    json_decref(root);
    json_decref(cfg);
    return tok;
}

static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    const int fd = ls_open_input(path, NULL, err, errlen);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        ls_errf(err, errlen, "%s: cannot open: %m", path);
        close(fd);
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *q = realloc(buf, cap + 1);
            if (!q) {
                free(buf);
                fclose(f);
                ls_errf(err, errlen, "%s: out of memory reading %zu bytes", path, n);
                return NULL;
            }
            buf = q;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        ls_errf(err, errlen, "%s: read error", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* a template file's text (a NUL ends a C string early: refused), or NULL with err set */
static char *read_template(const char *path, char *err, size_t errlen)
{
    size_t n = 0;
    char *t = read_file(path, &n, err, errlen);
    if (t && memchr(t, 0, n)) {
        ls_errf(err, errlen, "%s: holds a NUL byte, not a template text", path);
        free(t);
        return NULL;
    }
    return t;
}

/* transformers' chat template files beside tokenizer.json (what save_pretrained writes since
 * transformers 4.47): chat_template.jinja is the default template and
 * additional_chat_templates/NAME.jinja the named ones. When any exists they replace
 * tokenizer_config.json's chat_template, as transformers' loader does; of the named ones, only
 * "tool_use" is ever rendered (for requests with tools). 1: none there, 0: taken, -1: error. */
static int template_files(struct tokenizer *tok, const char *path, size_t dir, char *err,
                          size_t errlen)
{
    char *p = malloc(dir + sizeof("additional_chat_templates/") + 256);
    if (!p) return ls_errf(err, errlen, "%s: out of memory", path);
    char *def = NULL, *tools = NULL;
    int found = 0, rc = 0;
    struct stat sb;
    memcpy(p, path, dir);
    strcpy(p + dir, "chat_template.jinja");
    if (lstat(p, &sb) == 0) {
        found = 1;
        if (!(def = read_template(p, err, errlen))) rc = -1;
    }
    strcpy(p + dir, "additional_chat_templates");
    DIR *d = rc == 0 ? opendir(p) : NULL;
    for (struct dirent *e; d && rc == 0 && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n <= 6 || n > 255 || strcmp(e->d_name + n - 6, ".jinja") != 0) continue;
        found = 1;
        if (strcmp(e->d_name, "tool_use.jinja") != 0) continue;
        snprintf(p + dir, sizeof("additional_chat_templates/") + 256,
                 "additional_chat_templates/%s", e->d_name);
        if (!(tools = read_template(p, err, errlen))) rc = -1;
    }
    if (d) closedir(d);
    free(p);
    if (rc == 0 && found) {
        free(tok->chat_template);
        free(tok->chat_template_tool_use);
        tok->chat_template = def;
        tok->chat_template_tool_use = tools;
        return 0;
    }
    free(def);
    free(tools);
    return rc ? -1 : 1;
}

struct tokenizer *tok_load_json(const char *path, char *err, size_t errlen)
{
    if (!path) {
        ls_errf(err, errlen, "tokenizer.json: no path given");
        return NULL;
    }
    size_t len, clen = 0;
    char *buf = read_file(path, &len, err, errlen);
    if (!buf) return NULL;
    json_t *root = parse_json(path, buf, len, err, errlen);
    free(buf);
    if (!root) return NULL;

    /* tokenizer_config.json beside it, when there is one */
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
    char *cpath = malloc(dir + sizeof("tokenizer_config.json"));
    json_t *cfg = NULL;
    int rc = 0;
    if (!cpath) {
        ls_errf(err, errlen, "%s: out of memory", path);
        rc = -1;
    } else {
        memcpy(cpath, path, dir);
        strcpy(cpath + dir, "tokenizer_config.json");
        struct stat sb; /* optional; anything by that name must be readable */
        if (lstat(cpath, &sb) == 0) {
            char *cbuf = read_file(cpath, &clen, err, errlen);
            if (!cbuf || !(cfg = parse_json(cpath, cbuf, clen, err, errlen))) rc = -1;
            free(cbuf);
        }
    }
    struct tokenizer *tok = NULL;
    if (rc == 0) {
        struct jctx c = {path, err, errlen};
        tok = load_root(&c, root, cfg, cpath);
    }
    if (tok && template_files(tok, path, dir, err, errlen) < 0) {
        tok_free(tok);
        tok = NULL;
    }
    json_decref(root);
    json_decref(cfg);
    free(cpath);
    return tok;
}
