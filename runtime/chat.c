/* Chat templates as code. Each renderer mirrors one Jinja template line by line (the template
 * texts are kept in tests/fixtures/tokenizer/chat_expected.json with transformers' output for a
 * set of conversations), including its quirks: Llama-2 strips message content with Python's
 * str.strip(), Llama-3 with Jinja's trim (the same set of whitespace), ChatML and Mistral keep it
 * as given; Llama-2 and Mistral raise when roles do not alternate user/assistant. */
#include "chat.h"
#include "strbuf.h"
#include "log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SMOLLM2_SYSTEM[] = "You are a helpful AI assistant named SmolLM, trained by "
                                     "Hugging Face";

enum chat_format chat_detect(const char *t)
{
    if (!t || !*t) return CHAT_UNKNOWN;
    if (strstr(t, "<|im_start|>"))
        return strstr(t, SMOLLM2_SYSTEM) ? CHAT_CHATML_SMOLLM2 : CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>")) return CHAT_LLAMA3;
    if (strstr(t, "[INST]")) return strstr(t, "<<SYS>>") ? CHAT_LLAMA2 : CHAT_MISTRAL;
    return CHAT_UNKNOWN;
}

static const char *const names[] = {"unknown", "chatml", "smollm2", "llama3", "llama2", "mistral"};

const char *chat_format_name(enum chat_format f)
{
    return (unsigned)f < sizeof(names) / sizeof(names[0]) ? names[f] : "unknown";
}

enum chat_format chat_format_from_name(const char *name)
{
    for (unsigned i = 1; name && i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(names[i], name) == 0) return (enum chat_format)i;
    return CHAT_UNKNOWN;
}

static void puts_(struct ls_strbuf *b, const char *s)
{
    ls_strbuf_put(b, s, strlen(s));
}

/* Python's str.isspace() for one code point */
static int py_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* code point at s (UTF-8, trusted to be well formed enough) and its length */
static uint32_t cp_at(const unsigned char *s, size_t n, int *len)
{
    unsigned char c = s[0];
    int l = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if ((size_t)l > n) l = 1;
    *len = l;
    if (l == 1) return c;
    uint32_t cp = c & (0x7F >> l);
    for (int i = 1; i < l; i++) cp = (cp << 6) | (s[i] & 0x3F);
    return cp;
}

/* str.strip(): appends s without leading and trailing whitespace */
static void put_stripped(struct ls_strbuf *b, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), a = 0, z = n;
    while (a < n) {
        int l;
        if (!py_space(cp_at(u + a, n - a, &l))) break;
        a += (size_t)l;
    }
    /* scan forward remembering the end of the last non-space character */
    size_t last = a;
    for (size_t i = a; i < n;) {
        int l;
        uint32_t c = cp_at(u + i, n - i, &l);
        i += (size_t)l;
        if (!py_space(c)) last = i;
    }
    z = last;
    ls_strbuf_put(b, s + a, z - a);
}

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static int is_role(const struct chat_msg *m, const char *role)
{
    return m->role && strcmp(m->role, role) == 0;
}

static void render_chatml(struct ls_strbuf *b, const struct chat_msg *m, int n, int gen,
                          const char *default_system)
{
    for (int i = 0; i < n; i++) {
        if (i == 0 && default_system && !is_role(&m[0], "system")) {
            puts_(b, "<|im_start|>system\n");
            puts_(b, default_system);
            puts_(b, "<|im_end|>\n");
        }
        puts_(b, "<|im_start|>");
        puts_(b, str_or_empty(m[i].role));
        puts_(b, "\n");
        puts_(b, str_or_empty(m[i].content));
        puts_(b, "<|im_end|>\n");
    }
    if (gen) puts_(b, "<|im_start|>assistant\n");
}

static void render_llama3(struct ls_strbuf *b, const struct chat_msg *m, int n, int gen)
{
    for (int i = 0; i < n; i++) {
        if (i == 0) puts_(b, "<|begin_of_text|>");
        puts_(b, "<|start_header_id|>");
        puts_(b, str_or_empty(m[i].role));
        puts_(b, "<|end_header_id|>\n\n");
        put_stripped(b, str_or_empty(m[i].content));
        puts_(b, "<|eot_id|>");
    }
    if (gen) puts_(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static const char ALTERNATE[] =
    "Conversation roles must alternate user/assistant/user/assistant/...";

static int render_llama2(struct ls_strbuf *b, const struct chat_msg *m, int n, char *err,
                         size_t errlen)
{
    const char *system = NULL;
    if (n > 0 && is_role(&m[0], "system")) {
        system = str_or_empty(m[0].content);
        m++;
        n--;
    }
    for (int i = 0; i < n; i++) {
        if (is_role(&m[i], "user") != (i % 2 == 0)) {
            ls_errf(err, errlen, "llama2 chat template: %s (message %d has role \"%s\")",
                      ALTERNATE, i + (system != NULL), str_or_empty(m[i].role));
            return -1;
        }
        struct ls_strbuf content = {0};
        if (i == 0 && system) {
            puts_(&content, "<<SYS>>\n");
            puts_(&content, system);
            puts_(&content, "\n<</SYS>>\n\n");
        }
        puts_(&content, str_or_empty(m[i].content));
        if (content.oom) {
            free(content.p);
            b->oom = 1;
            return 0;
        }
        if (is_role(&m[i], "user")) {
            puts_(b, "<s>[INST] ");
            put_stripped(b, content.p);
            puts_(b, " [/INST]");
        } else if (is_role(&m[i], "assistant")) {
            puts_(b, " ");
            put_stripped(b, content.p);
            puts_(b, " </s>");
        }
        free(content.p);
    }
    return 0;
}

static int render_mistral(struct ls_strbuf *b, const struct chat_msg *m, int n, char *err,
                          size_t errlen)
{
    puts_(b, "<s>");
    for (int i = 0; i < n; i++) {
        if (is_role(&m[i], "user") != (i % 2 == 0)) {
            ls_errf(err, errlen, "mistral chat template: %s (message %d has role \"%s\")",
                      ALTERNATE, i, str_or_empty(m[i].role));
            return -1;
        }
        if (is_role(&m[i], "user")) {
            puts_(b, "[INST] ");
            puts_(b, str_or_empty(m[i].content));
            puts_(b, " [/INST]");
        } else if (is_role(&m[i], "assistant")) {
            puts_(b, str_or_empty(m[i].content));
            puts_(b, "</s> ");
        } else {
            ls_errf(err, errlen,
                      "mistral chat template: Only user and assistant roles are supported! "
                      "(message %d has role \"%s\")",
                      i, str_or_empty(m[i].role));
            return -1;
        }
    }
    return 0;
}

int chat_render(enum chat_format f, const struct chat_msg *msgs, int n, int add_generation_prompt,
                char **out, char *err, size_t errlen)
{
    if (!out || n < 0 || (n > 0 && !msgs)) {
        ls_errf(err, errlen, "chat_render: invalid arguments");
        return -1;
    }
    *out = NULL;
    struct ls_strbuf b = {0};
    int rc = 0;
    puts_(&b, "");
    switch (f) {
    case CHAT_CHATML:
        render_chatml(&b, msgs, n, add_generation_prompt, NULL);
        break;
    case CHAT_CHATML_SMOLLM2:
        render_chatml(&b, msgs, n, add_generation_prompt, SMOLLM2_SYSTEM);
        break;
    case CHAT_LLAMA3:
        render_llama3(&b, msgs, n, add_generation_prompt);
        break;
    case CHAT_LLAMA2:
        rc = render_llama2(&b, msgs, n, err, errlen);
        break;
    case CHAT_MISTRAL:
        rc = render_mistral(&b, msgs, n, err, errlen);
        break;
    default:
        ls_errf(err, errlen,
                "no chat template to render: the model's (chat_template in tokenizer_config.json, "
                "tokenizer.chat_template in a GGUF) is missing or of no known family (chatml, "
                "smollm2, llama3, llama2, mistral); give the prompt templated, as plain text");
        rc = -1;
    }
    if (rc == 0 && b.oom) {
        ls_errf(err, errlen, "chat_render: out of memory");
        rc = -1;
    }
    if (rc != 0 || b.n > (size_t)INT32_MAX) {
        free(b.p);
        return -1;
    }
    *out = b.p;
    return (int)b.n;
}
