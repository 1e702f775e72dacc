/* Chat prompts: the few chat-template families our models use, rendered in C to exactly the text
 * transformers' apply_chat_template gives for them (no Jinja interpreter here). The family is
 * recognised from markers in the model's template text (tokenizer.chat_template).
 *
 * The rendered text carries its own BOS where the template writes one ("<|begin_of_text|>",
 * "<s>"): encode it with add_special = 0 and parse_special = 1, as transformers does. */
#ifndef LOCKSTEP_CHAT_H
#define LOCKSTEP_CHAT_H

#include <stddef.h>

enum chat_format {
    CHAT_UNKNOWN = 0,
    CHAT_CHATML,         /* <|im_start|>role\ncontent<|im_end|>\n ... */
    CHAT_CHATML_SMOLLM2, /* ChatML, with SmolLM2's default system prompt when none is given */
    CHAT_LLAMA3,         /* <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n... */
    CHAT_LLAMA2,         /* <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s> */
    CHAT_MISTRAL,        /* <s>[INST] user [/INST]answer</s> ... (no system role) */
};

struct chat_msg {
    const char *role; /* "system", "user", "assistant", or any other for ChatML / Llama-3 */
    const char *content;
};

/* the family of a template text; CHAT_UNKNOWN for NULL or unrecognised text */
enum chat_format chat_detect(const char *template_text);
const char *chat_format_name(enum chat_format f);
/* "chatml", "smollm2", "llama3", "llama2", "mistral" -> format; CHAT_UNKNOWN otherwise */
enum chat_format chat_format_from_name(const char *name);

/* Renders n messages into *out (malloc'd, NUL-terminated; the caller frees) and returns its
 * length; -1 with err set when the template itself would raise (roles not alternating for
 * Llama-2 / Mistral, a role Mistral does not know) or on bad arguments. */
int chat_render(enum chat_format f, const struct chat_msg *msgs, int n, int add_generation_prompt,
                char **out, char *err, size_t errlen);

#endif
