/* See hostfile.h. The parser is strict where Open MPI is lenient or fails late: a bad line is
 * reported here with its file, line and text instead of as a mapping error after mpirun has
 * contacted every node. Anything accepted here is also valid for Open MPI 4 and 5, except the
 * "host:N" form and CRLF line ends, which only --host survives (Open MPI's hostfile parser
 * calls a CR outside a comment a parse error): a file with either is passed to mpirun as a
 * --host list, every other file as --hostfile, unchanged.
 *
 * The composer never reads the environment or the machine; every fact arrives in
 * struct ls_launch_site, so the same inputs always give the same command line. */
#include "config.h"
#include "hostfile.h"
#include "runtime/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---------------------------------------------------------------- hostfile ---- */

static const char blanks[] = " \t\r\v\f";

/* "hostfile F line L: problem (expected E, found 'X')", X cut to a readable length */
static int line_error(char *err, size_t errlen, const char *name, int line, const char *problem,
                      const char *expected, const char *found)
{
    int cut = strlen(found) > 60;
    snprintf(err, errlen, "hostfile %s line %d: %s (expected %s, found '%.60s%s')", name, line,
             problem, expected, found, cut ? "..." : "");
    return -1;
}

/* a whole-string decimal in 1..LS_HOST_SLOTS_MAX; no sign, no blanks, no suffix */
static int parse_count(const char *s, int *out)
{
    long v = 0;
    if (!*s) return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10 + (*s - '0');
        if (v > LS_HOST_SLOTS_MAX) return -1;
    }
    if (v < 1) return -1;
    *out = (int)v;
    return 0;
}

/* DNS names and IPv4 addresses; '_' too, which some clusters use in node names */
static int valid_host_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > LS_HOST_NAME_MAX || !isalnum((unsigned char)s[0])) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '.' && *s != '_') return 0;
    return 1;
}

#define COUNT_EXPECTED "a positive integer up to 1048576"
#define KEYS_EXPECTED  "slots=N or max_slots=N"

/* One line, comment already cut off and not blank. Fills h or writes err. */
static int parse_line(char *text, const char *name, int line, struct ls_host *h, char *err,
                      size_t errlen)
{
    char *save = NULL;
    char *host = strtok_r(text, blanks, &save);
    memset(h, 0, sizeof *h);
    h->line = line;

    char *colon = strchr(host, ':');
    if (colon) {
        *colon = 0;
        if (parse_count(colon + 1, &h->slots) != 0)
            return line_error(err, errlen, name, line, "bad slot count after ':'", COUNT_EXPECTED,
                              colon + 1);
        h->colon_form = 1;
    }
    if (!valid_host_name(host))
        return line_error(err, errlen, name, line, "bad host name",
                          "letters, digits, '-', '.', '_', starting with a letter or digit, "
                          "at most 255 characters",
                          host);
    snprintf(h->name, sizeof h->name, "%s", host);

    for (char *tok; (tok = strtok_r(NULL, blanks, &save));) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return line_error(err, errlen, name, line, "field without a value", KEYS_EXPECTED, tok);
        *eq = 0;
        const char *val = eq + 1;
        int *dst;
        if (!strcmp(tok, "slots"))
            dst = &h->slots;
        else if (!strcmp(tok, "max_slots") || !strcmp(tok, "max-slots"))
            dst = &h->max_slots;
        else {
            *eq = '=';
            return line_error(err, errlen, name, line, "unknown field", KEYS_EXPECTED, tok);
        }
        if (*dst) {
            *eq = '=';
            return line_error(err, errlen, name, line,
                              dst == &h->slots ? "slot count given twice" : "max_slots given twice",
                              h->colon_form && dst == &h->slots ? "host:N or slots=N, not both"
                                                                : "one count per host",
                              tok);
        }
        if (parse_count(val, dst) != 0) {
            char what[48];
            snprintf(what, sizeof what, "bad %s value", tok);
            return line_error(err, errlen, name, line, what, COUNT_EXPECTED, val);
        }
    }
    if (h->max_slots && h->slots > h->max_slots) {
        char found[64];
        snprintf(found, sizeof found, "slots=%d max_slots=%d", h->slots, h->max_slots);
        return line_error(err, errlen, name, line, "max_slots below slots", "max_slots >= slots",
                          found);
    }
    return 0;
}

void ls_hostfile_free(struct ls_hostfile *hf)
{
    free(hf->path);
    free(hf->hosts);
    memset(hf, 0, sizeof *hf);
}

int ls_hostfile_parse_string(const char *text, const char *name, struct ls_hostfile *out, char *err,
                             size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->path = strdup(name);
    if (!out->path) goto oom;
    int cap = 0, line = 0;
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        line++;
        char *buf = strndup(p, len);
        if (!buf) goto oom;
        p += len + (end ? 1 : 0);

        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        if (strchr(buf, '\r')) out->cr_line_ends = 1;
        if (buf[strspn(buf, blanks)] == 0) {
            free(buf);
            continue;
        }
        struct ls_host h;
        int rc = parse_line(buf, name, line, &h, err, errlen);
        free(buf);
        if (rc != 0) goto fail;
        for (int i = 0; i < out->nhosts; i++) {
            if (strcasecmp(out->hosts[i].name, h.name) == 0) {
                char expected[64];
                snprintf(expected, sizeof expected, "each host once; it is already on line %d",
                         out->hosts[i].line);
                line_error(err, errlen, name, line, "duplicate host", expected, h.name);
                goto fail;
            }
        }
        if (out->nhosts == cap) {
            cap = cap ? 2 * cap : 8;
            struct ls_host *grown = realloc(out->hosts, (size_t)cap * sizeof *grown);
            if (!grown) goto oom;
            out->hosts = grown;
        }
        out->hosts[out->nhosts++] = h;
    }
    if (out->nhosts == 0) {
        snprintf(err, errlen,
                 "hostfile %s: no hosts (expected at least one line 'hostname slots=N', found %s)",
                 name, line ? "only comments and blank lines" : "an empty file");
        goto fail;
    }
    return 0;
oom:
    snprintf(err, errlen, "hostfile %s: out of memory", name);
fail:
    ls_hostfile_free(out);
    return -1;
}

int ls_hostfile_parse(const char *path, struct ls_hostfile *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    /* a regular file only: mpirun opens it again, so a pipe (<(...)) would be empty by then;
     * and a FIFO with no writer must not block the open */
    char why[512];
    const int fd = ls_open_input(path, NULL, why, sizeof why);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) {
            snprintf(why, sizeof why, "%s: cannot open: %s", path, strerror(errno));
            close(fd);
        }
        snprintf(err, errlen, "hostfile %s", why);
        return -1;
    }
    char *buf = malloc((size_t)LS_HOSTFILE_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        snprintf(err, errlen, "hostfile %s: out of memory", path);
        return -1;
    }
    size_t n = fread(buf, 1, (size_t)LS_HOSTFILE_MAX_BYTES + 1, f);
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    int rc = -1;
    if (rerr) {
        snprintf(err, errlen, "hostfile %s: cannot read it: %s", path, strerror(rerr));
    } else if (n > (size_t)LS_HOSTFILE_MAX_BYTES) {
        snprintf(err, errlen, "hostfile %s: too large (expected at most %d bytes, found more)",
                 path, LS_HOSTFILE_MAX_BYTES);
    } else if (memchr(buf, 0, n)) {
        const char *nul = memchr(buf, 0, n);
        int line = 1;
        for (const char *q = buf; q < nul; q++) line += *q == '\n';
        snprintf(err, errlen,
                 "hostfile %s line %d: NUL byte (expected a text file, found binary data)", path,
                 line);
    } else {
        buf[n] = 0;
        rc = ls_hostfile_parse_string(buf, path, out, err, errlen);
    }
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------- words ---- */

struct strv {
    char **v; /* NULL-terminated while oom == 0 */
    int n, cap, oom;
};

static void strv_push(struct strv *s, const char *str)
{
    if (s->oom) return;
    if (s->n + 2 > s->cap) {
        int cap = s->cap ? 2 * s->cap : 32;
        char **grown = realloc(s->v, (size_t)cap * sizeof *grown);
        if (!grown) {
            s->oom = 1;
            return;
        }
        s->v = grown;
        s->cap = cap;
    }
    char *dup = strdup(str);
    if (!dup) {
        s->oom = 1;
        return;
    }
    s->v[s->n++] = dup;
    s->v[s->n] = NULL;
}

static void strv_pushf(struct strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void strv_pushf(struct strv *s, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof buf) {
        s->oom = 1; /* only ever used for short flags; longer means a bug, not a cut word */
        return;
    }
    strv_push(s, buf);
}

void ls_words_free(char **words)
{
    if (!words) return;
    for (char **w = words; *w; w++) free(*w);
    free(words);
}

int ls_split_words(const char *s, char ***words, int *n, char *err, size_t errlen)
{
    struct strv out = {0};
    char *cur = malloc(strlen(s) + 1);
    if (!cur) goto oom;
    size_t len = 0;
    int inword = 0;
    for (const char *p = s;; p++) {
        char c = *p;
        if (c == 0 || strchr(blanks, c) || c == '\n') {
            if (inword) {
                cur[len] = 0;
                strv_push(&out, cur);
                len = 0;
                inword = 0;
            }
            if (c == 0) break;
        } else if (c == '\'') {
            const char *close = strchr(p + 1, '\'');
            if (!close) {
                snprintf(err, errlen,
                         "unterminated ' (expected a closing ', found the end of '%s')", s);
                goto fail;
            }
            memcpy(cur + len, p + 1, (size_t)(close - p - 1));
            len += (size_t)(close - p - 1);
            p = close;
            inword = 1;
        } else if (c == '"') {
            for (p++; *p != '"'; p++) {
                if (!*p) {
                    snprintf(err, errlen,
                             "unterminated \" (expected a closing \", found the end of '%s')", s);
                    goto fail;
                }
                if (*p == '\\' && (p[1] == '"' || p[1] == '\\')) p++;
                cur[len++] = *p;
            }
            inword = 1;
        } else if (c == '\\') {
            if (!p[1]) {
                snprintf(err, errlen,
                         "trailing \\ (expected a character after it, found the end of '%s')", s);
                goto fail;
            }
            cur[len++] = *++p;
            inword = 1;
        } else {
            cur[len++] = c;
            inword = 1;
        }
    }
    free(cur);
    if (out.oom) goto oom;
    if (!out.v) { /* no words: still a valid empty list */
        out.v = calloc(1, sizeof *out.v);
        if (!out.v) goto oom;
    }
    *words = out.v;
    *n = out.n;
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    free(cur);
    ls_words_free(out.v);
    return -1;
}

/* ----------------------------------------------------------------- compose ---- */

/* Variables every rank needs on every node. Open MPI copies the whole environment only to
 * ranks on the launching node; remote ranks get what -x names. */
static const char *const export_prefixes[] = {"NCCL_", "CUDA_", "LOCKSTEP_", "OMP_"};
static const char *const export_names[] = {"LD_LIBRARY_PATH", "PATH"};

static int exported(const char *entry, size_t namelen)
{
    for (size_t i = 0; i < sizeof export_prefixes / sizeof export_prefixes[0]; i++) {
        size_t pl = strlen(export_prefixes[i]);
        if (namelen > pl && !strncmp(entry, export_prefixes[i], pl)) return 1;
    }
    for (size_t i = 0; i < sizeof export_names / sizeof export_names[0]; i++)
        if (namelen == strlen(export_names[i]) && !strncmp(entry, export_names[i], namelen))
            return 1;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names of the variables to forward, sorted so the command line is reproducible. */
static void push_exports(struct strv *argv, char *const *envp)
{
    struct strv names = {0};
    int have_nvls = 0;
    for (char *const *e = envp; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || eq == *e || !exported(*e, (size_t)(eq - *e))) continue;
        char name[256];
        if ((size_t)(eq - *e) >= sizeof name) continue;
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = 0;
        int dup = 0; /* an environment may hold a name twice; -x it once */
        for (int i = 0; i < names.n; i++) dup |= !strcmp(names.v[i], name);
        if (dup) continue;
        have_nvls |= !strcmp(name, "NCCL_NVLS_ENABLE");
        strv_push(&names, name);
    }
    if (names.oom) {
        argv->oom = 1;
    } else if (names.n) {
        qsort(names.v, (size_t)names.n, sizeof *names.v, cmp_str);
        for (int i = 0; i < names.n; i++) {
            strv_push(argv, "-x");
            strv_push(argv, names.v[i]);
        }
    }
    ls_words_free(names.v);
    /* NVLink multicast (NVLS) is never used by lockstep's collectives, and a job that turns
     * it on can leave a shared machine's GPUs unusable: off unless the user set it. */
    if (!have_nvls) {
        strv_push(argv, "-x");
        strv_push(argv, "NCCL_NVLS_ENABLE=0");
    }
}

/* Ranks per node of each host, which ppr mapping needs to be one number. */
static int hostfile_per_node(const struct ls_launch_opts *o, const struct ls_hostfile *hf,
                             int *per_node, char *err, size_t errlen)
{
    int first = 0;
    for (int i = 0; i < hf->nhosts; i++) {
        const struct ls_host *h = &hf->hosts[i];
        int r = h->slots;
        if (o->gpus_per_node && (!r || o->gpus_per_node < r)) r = o->gpus_per_node;
        if (!r) {
            snprintf(err, errlen,
                     "hostfile %s line %d: no slot count for host '%s' (expected slots=N on "
                     "the line or --gpus-per-node G, found neither)",
                     hf->path, h->line, h->name);
            return -1;
        }
        if (i == 0) {
            first = r;
        } else if (r != first) {
            snprintf(err, errlen,
                     "hostfile %s: hosts take different rank counts (line %d '%s': %d, line %d "
                     "'%s': %d); ranks are placed with --map-by ppr, which needs one count per "
                     "node: make the slots equal or pass --gpus-per-node %d",
                     hf->path, hf->hosts[0].line, hf->hosts[0].name, first, h->line, h->name, r,
                     r < first ? r : first);
            return -1;
        }
    }
    *per_node = first;
    return 0;
}

/* shell-safe without quotes: letters, digits and _@%+=:,./- */
static int shell_safe(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_@%+=:,./-", *s)) return 0;
    return 1;
}

int ls_launch_compose(const struct ls_launch_opts *o, const struct ls_hostfile *hf,
                      const struct ls_launch_site *site, struct ls_launch_cmd *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (o->nargs < 1) {
        snprintf(err, errlen,
                 "nothing to run (expected the lockstep command after '--', e.g. '-- info', "
                 "found no arguments)");
        return -1;
    }
    int np, per_node, nnodes;
    if (hf) {
        if (hostfile_per_node(o, hf, &per_node, err, errlen) != 0) return -1;
        long long total = (long long)per_node * hf->nhosts;
        if (!o->tp && total > LS_LAUNCH_RANKS_MAX) {
            snprintf(err, errlen,
                     "hostfile %s has %lld ranks (%d host%s x %d ranks per node), more than a "
                     "job can have (expected at most %d, as --tp takes); pass --tp N",
                     hf->path, total, hf->nhosts, hf->nhosts == 1 ? "" : "s", per_node,
                     LS_LAUNCH_RANKS_MAX);
            return -1;
        }
        np = o->tp ? o->tp : (int)total;
        if (np > total) {
            snprintf(err, errlen,
                     "--tp %d needs %d ranks but hostfile %s has %lld (%d host%s x %d ranks per "
                     "node%s)",
                     np, np, hf->path, total, hf->nhosts, hf->nhosts == 1 ? "" : "s", per_node,
                     o->cpu ? "" : ", one per GPU");
            return -1;
        }
        nnodes = (np + per_node - 1) / per_node;
    } else if (o->cpu) {
        np = o->tp ? o->tp : 1;
        per_node = np;
        nnodes = 1;
    } else {
        int g = o->gpus_per_node ? o->gpus_per_node : site->gpus_visible;
        if (site->gpus_visible == 0) {
            snprintf(err, errlen,
                     "no GPU visible on this node (expected at least one for one rank per GPU, "
                     "found 0); pass --cpu to run the ranks on CPUs, or --hostfile for GPU nodes");
            return -1;
        }
        if (g > site->gpus_visible) {
            snprintf(err, errlen,
                     "--gpus-per-node %d but this node has %d GPU%s visible; pass --hostfile to "
                     "run on other nodes",
                     g, site->gpus_visible, site->gpus_visible == 1 ? "" : "s");
            return -1;
        }
        np = o->tp ? o->tp : g;
        if (np > g) {
            snprintf(err, errlen,
                     "--tp %d needs %d GPUs but this node has %d (one rank per GPU); pass "
                     "--hostfile for more nodes, or --cpu to run the ranks on CPUs",
                     np, np, g);
            return -1;
        }
        per_node = np;
        nnodes = 1;
    }

    struct strv a = {0};
    strv_push(&a, o->mpirun);
    strv_push(&a, "-np");
    strv_pushf(&a, "%d", np);
    if (hf) {
        int host_list = hf->cr_line_ends;
        for (int i = 0; i < hf->nhosts; i++) host_list |= hf->hosts[i].colon_form;
        if (host_list) {
            /* Open MPI's hostfile parser rejects "host:N" and CRs; --host takes the same list */
            size_t len = 1;
            for (int i = 0; i < hf->nhosts; i++) len += strlen(hf->hosts[i].name) + 16;
            char *list = malloc(len), *w = list;
            if (!list) {
                a.oom = 1;
            } else {
                for (int i = 0; i < hf->nhosts; i++)
                    w += sprintf(w, "%s%s:%d", i ? "," : "", hf->hosts[i].name, per_node);
                strv_push(&a, "--host");
                strv_push(&a, list);
                free(list);
            }
        } else {
            strv_push(&a, "--hostfile");
            strv_push(&a, hf->path);
        }
    }
    strv_push(&a, "--map-by");
    strv_pushf(&a, "ppr:%d:node", per_node);
    strv_push(&a, "--rank-by");
    strv_push(&a, "slot");
    strv_push(&a, "--bind-to");
    strv_push(&a, "none");
    /* Open MPI counts a node's slots as its cores and refuses more ranks than that */
    if (!hf && np > site->cores) strv_push(&a, "--oversubscribe");
    if (site->is_root) strv_push(&a, "--allow-run-as-root");
    push_exports(&a, site->envp);
    if (o->extra_mpi_args) {
        char **extra = NULL;
        int nextra = 0;
        char why[256];
        if (ls_split_words(o->extra_mpi_args, &extra, &nextra, why, sizeof why) != 0) {
            snprintf(err, errlen, "--extra-mpi-args: %s", why);
            ls_words_free(a.v);
            return -1;
        }
        for (int i = 0; i < nextra; i++) strv_push(&a, extra[i]);
        ls_words_free(extra);
    }
    strv_push(&a, o->lockstep);
    int has_cpu = 0;
    for (int i = 0; i < o->nargs; i++) has_cpu |= !strcmp(o->args[i], "--cpu");
    for (int i = 0; i < o->nargs; i++) {
        strv_push(&a, o->args[i]);
        if (i == 0 && o->cpu && !has_cpu) strv_push(&a, "--cpu");
    }

    struct strv env = {0};
    if (site->is_root) {
        strv_push(&env, "OMPI_ALLOW_RUN_AS_ROOT=1");
        strv_push(&env, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
    }
    if (!env.v && !env.oom) env.v = calloc(1, sizeof *env.v);
    if (a.oom || env.oom || !env.v) {
        ls_words_free(a.v);
        ls_words_free(env.v);
        snprintf(err, errlen, "out of memory composing the mpirun command");
        return -1;
    }
    out->argv = a.v;
    out->argc = a.n;
    out->setenv = env.v;
    out->np = np;
    out->per_node = per_node;
    out->nnodes = nnodes;
    return 0;
}

/* a growing string; oom sticks so callers check once at the end */
struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
};

static void sbuf_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = 2 * (b->len + n + 1);
        char *grown = realloc(b->p, cap);
        if (!grown) {
            b->oom = 1;
            return;
        }
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sbuf_quoted(struct sbuf *b, const char *s)
{
    if (shell_safe(s)) {
        sbuf_add(b, s, strlen(s));
        return;
    }
    sbuf_add(b, "'", 1);
    for (const char *p = s; *p; p++) {
        if (*p == '\'')
            sbuf_add(b, "'\\''", 4);
        else
            sbuf_add(b, p, 1);
    }
    sbuf_add(b, "'", 1);
}

char *ls_launch_cmd_string(const struct ls_launch_cmd *c)
{
    struct sbuf b = {0};
    for (char **e = c->setenv; e && *e; e++) {
        /* NAME=value: the name stays bare for the shell to read an assignment */
        const char *eq = strchr(*e, '=');
        if (b.len) sbuf_add(&b, " ", 1);
        sbuf_add(&b, *e, (size_t)(eq - *e) + 1);
        sbuf_quoted(&b, eq + 1);
    }
    for (int i = 0; i < c->argc; i++) {
        if (b.len) sbuf_add(&b, " ", 1);
        sbuf_quoted(&b, c->argv[i]);
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p ? b.p : strdup(""); /* no words: an empty line, not "out of memory" */
}

void ls_launch_cmd_free(struct ls_launch_cmd *c)
{
    ls_words_free(c->argv);
    ls_words_free(c->setenv);
    memset(c, 0, sizeof *c);
}
