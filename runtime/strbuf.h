/* A growing, NUL-terminated byte buffer for text assembled piece by piece (chat renders,
 * decoded tokens, generated text). An allocation failure sets oom and drops later pieces, so
 * callers check once at the end instead of after every append. */
#ifndef LOCKSTEP_STRBUF_H
#define LOCKSTEP_STRBUF_H

#include <stddef.h>

struct ls_strbuf {
    char *p;  /* NUL-terminated once anything was appended; NULL before */
    size_t n; /* bytes, without the NUL */
    size_t cap;
    int oom;
};

void ls_strbuf_put(struct ls_strbuf *b, const char *s, size_t len);

#endif
