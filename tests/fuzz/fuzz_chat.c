/* libFuzzer target for chat_render_json (runtime/chat.h): what a batch line brings to the chat
 * template. The input's first byte picks the content format (auto, string, openai) and the
 * turn's options, its first line is the messages (any JSON: a batch line's "messages" is
 * untrusted), the rest the template. Rendering must never crash, leak or read out of bounds: a
 * success is NUL-terminated text of the length returned, a failure -1, no text and a message.
 * Messages with content parts, developer roles and odd values reach the content-format
 * detection, the joining of parts and the developer-to-system merge. Build with configure
 * --enable-fuzz CC=clang; run as tests/fuzz/fuzz_chat tests/fuzz/corpus/chat */
#include "chat.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    const uint8_t opt = data[0];
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    const char *nl = memchr(text, '\n', n);
    if (!nl) return 0;
    json_t *msgs = json_loadb(text, (size_t)(nl - text), JSON_DECODE_ANY, NULL);
    if (!msgs) return 0;
    size_t tlen = n - (size_t)(nl + 1 - text);
    char *tmpl = malloc(tlen + 1);
    if (!tmpl) abort();
    memcpy(tmpl, nl + 1, tlen);
    tmpl[tlen] = 0; /* the template is text: it ends at its first NUL, as a file read stops */
    struct chat_env env = {
        .template_text = tmpl, .bos_token = "<s>", .now = 1718452800, .content_format = opt % 3};
    json_t *tools =
        json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", 0, NULL);
    struct chat_turn turn = {.add_generation_prompt = (opt >> 2) & 1,
                             .continue_final_message = (opt >> 3) & 1,
                             .tools = (opt >> 4) & 1 ? tools : NULL};
    char *out = (char *)1, err[512];
    err[0] = 0;
    int len = chat_render_json(&env, msgs, &turn, &out, err, sizeof err);
    if (len >= 0 && (!out || out[len] != '\0')) abort();
    if (len < 0 && (len != -1 || out || !err[0])) abort();
    free(len >= 0 ? out : NULL);
    json_decref(tools);
    json_decref(msgs);
    free(tmpl);
    return 0;
}
