/* See strbuf.h. Capacity doubles from 256 bytes, so appends are amortised O(1). */
#include "config.h"
#include "strbuf.h"

#include <stdlib.h>
#include <string.h>

void ls_strbuf_put(struct ls_strbuf *b, const char *s, size_t len)
{
    if (b->oom) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = '\0';
}
