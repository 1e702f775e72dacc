/* libFuzzer target for the Jinja interpreter (runtime/jinja.h). The input's first line is the
 * render variables as JSON (any other first line: the whole input is the template and the
 * variables are a small fixed conversation); the rest is the template. Parsing and rendering
 * must never crash, leak, hang or read out of bounds; a success gives NUL-terminated text of
 * the length reported and within the output limit, a failure a NULL text and a message. A
 * parsed template renders twice to the same bytes. Build with configure --enable-fuzz
 * CC=clang; run as tests/fuzz/fuzz_jinja -dict=tests/fuzz/jinja.dict tests/fuzz/corpus/jinja */
#include "jinja.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char default_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", "
    "\"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"<think>x</think>yo\", "
    "\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1.5}}}]}], "
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"tools\": [{\"type\": "
    "\"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nl = memchr(text, '\n', size);
    json_t *vars = NULL;
    const char *tmpl = text;
    size_t tlen = size;
    if (nl) {
        vars = json_loadb(text, (size_t)(nl - text), JSON_ALLOW_NUL, NULL);
        if (vars && !json_is_object(vars)) {
            json_decref(vars);
            vars = NULL;
        }
        if (vars) {
            tmpl = nl + 1;
            tlen = size - (size_t)(nl + 1 - text);
        }
    }
    if (!vars) vars = json_loads(default_vars, 0, NULL);
    struct ls_jinja_opts opts = {0};
    opts.now = 1718452800;
    opts.max_output = 1 << 20;
    opts.max_steps = 2000000;
    char err[512];
    struct ls_jinja *t = ls_jinja_parse(tmpl, tlen, err, sizeof(err));
    if (!t) {
        if (!err[0]) abort();
    } else {
        char *out[2] = {(char *)1, (char *)1};
        size_t len[2] = {7, 7};
        int rc[2];
        for (int i = 0; i < 2; i++) {
            rc[i] = ls_jinja_render_parsed(t, vars, &opts, &out[i], &len[i], err, sizeof(err));
            if (rc[i] == 0 && (!out[i] || len[i] > opts.max_output || out[i][len[i]] != '\0'))
                abort();
            if (rc[i] != 0 && (rc[i] != -1 || out[i] || len[i] || !err[0])) abort();
        }
        if (rc[0] != rc[1]) abort();
        /* strftime_now is pinned, so two renders are the same text */
        if (rc[0] == 0 && (len[0] != len[1] || memcmp(out[0], out[1], len[0]))) abort();
        free(out[0]);
        free(out[1]);
        /* the content-format detection walks the same tree: an answer, never a crash */
        int f = ls_jinja_loops_over_content(t);
        if (f != 0 && f != 1) abort();
        ls_jinja_free(t);
    }
    json_decref(vars);
    return 0;
}
