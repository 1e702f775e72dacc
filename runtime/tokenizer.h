/* Tokenizer: byte-level BPE (GPT-2, Llama-3, Qwen, SmolLM) and SentencePiece-style BPE (Llama-2,
 * Mistral: ▁ for spaces, <0xNN> byte fallback), built either from a model's GGUF metadata
 * (through the neutral struct tok_spec, so this module does not depend on the GGUF reader) or
 * from a Hugging Face tokenizer.json. The reference for every behaviour is Hugging Face's
 * `tokenizers` library: encode gives the same ids, decode the same text.
 *
 * A tokenizer is immutable once built and may be shared by threads; encode allocates its scratch
 * per call. Streaming decode keeps its state in a tok_stream made once per generation, so pushing
 * a token allocates nothing and never prints a broken UTF-8 sequence. */
#ifndef LOCKSTEP_TOKENIZER_H
#define LOCKSTEP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct tokenizer;

enum tok_kind {
    TOK_KIND_BPE = 1, /* GGUF tokenizer.ggml.model "gpt2": byte-level BPE */
    TOK_KIND_SPM = 2, /* GGUF tokenizer.ggml.model "llama": SentencePiece BPE with byte fallback */
};

/* GGUF token_type values (tokenizer.ggml.token_type) */
enum tok_type {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* A tokenizer as GGUF metadata describes it. Arrays are borrowed for the tok_build call only.
 * Any id field may be -1 for "none". */
struct tok_spec {
    enum tok_kind kind;         /* tokenizer.ggml.model */
    const char *pre;            /* tokenizer.ggml.pre; NULL = "default" */
    int n_tokens;               /* length of tokens, scores, types */
    const char *const *tokens;  /* [n_tokens] tokenizer.ggml.tokens, NUL-terminated */
    const uint32_t *token_lens; /* [n_tokens] byte lengths, or NULL to use strlen */
    const float *scores;        /* [n_tokens] tokenizer.ggml.scores, or NULL */
    const int32_t *types;       /* [n_tokens] tokenizer.ggml.token_type, or NULL (all normal) */
    int n_merges;               /* length of merges; 0 for SPM vocabularies that have none */
    const char *const *merges;  /* [n_merges] "a b" */
    int bos_id, eos_id, unk_id, pad_id;
    int add_bos;          /* tokenizer.ggml.add_bos_token; -1 = absent (SPM: yes, BPE: no) */
    int add_eos;          /* tokenizer.ggml.add_eos_token; -1 = absent (no) */
    int add_space_prefix; /* SPM: tokenizer.ggml.add_space_prefix; -1 = absent (yes) */
    /* SPM: 0 = every text segment between added tokens gets the ▁ prefix (sentencepiece,
     * llama.cpp, the hub's Llama-2 tokenizer.json); 1 = only a segment at the start of the text
     * (Metaspace prepend_scheme "first", what transformers builds from a GGUF) */
    int prefix_first_only;
    const char *chat_template; /* tokenizer.chat_template, copied; may be NULL */
    const char *chat_template_tool_use; /* tokenizer.chat_template.tool_use; may be NULL */
};

/* Every constructor returns NULL with a message in err (naming the file or field, what was
 * expected and what was found) on failure. */
struct tokenizer *tok_build(const struct tok_spec *spec, char *err, size_t errlen);
/* tokenizer.json; reads tokenizer_config.json from the same folder when present (bos, eos,
 * add_bos_token, add_eos_token, chat_template), and the template files transformers writes there
 * (chat_template.jinja, additional_chat_templates/tool_use.jinja), which replace the config's */
struct tokenizer *tok_load_json(const char *path, char *err, size_t errlen);
/* tokenizer.json held in memory; name is used in messages only; config may be NULL */
struct tokenizer *tok_load_json_buf(const char *buf, size_t len, const char *name,
                                    const char *config_buf, size_t config_len, char *err,
                                    size_t errlen);
void tok_free(struct tokenizer *tok);

/* Encodes len bytes of UTF-8 text. add_special adds the model's BOS (and EOS) where it asks for
 * them; parse_special matches special tokens written in the text (e.g. "<|im_end|>") as one id,
 * otherwise they are encoded as plain text. Returns the number of ids, or -1 with err set
 * (invalid UTF-8 names the byte offset; more than max_out ids names both counts). With out
 * NULL, only counts. */
int tok_encode(const struct tokenizer *tok, const char *text, size_t len, int add_special,
               int parse_special, int32_t *out, int max_out, char *err, size_t errlen);

/* Decodes n ids into out (NUL-terminated, cut at a character boundary if outlen is short) and
 * returns the length of the whole text, like snprintf; -1 with err set on an id out of range.
 * skip_special leaves special tokens out. Invalid UTF-8 from byte tokens becomes U+FFFD. */
int tok_decode(const struct tokenizer *tok, const int32_t *ids, int n, int skip_special, char *out,
               size_t outlen, char *err, size_t errlen);

/* Streaming decode: push one id at a time, get the complete UTF-8 characters ready so far. */
struct tok_stream;
struct tok_stream *tok_stream_new(const struct tokenizer *tok, int skip_special);
/* writes at most outlen bytes (no NUL) and returns the count; -1 on an id out of range or when
 * outlen < tok_stream_max_out(tok) */
int tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t outlen);
/* at end of generation: emits held bytes of an unfinished character as U+FFFD */
int tok_stream_flush(struct tok_stream *s, char *out, size_t outlen);
void tok_stream_reset(struct tok_stream *s);
void tok_stream_free(struct tok_stream *s);
size_t tok_stream_max_out(const struct tokenizer *tok);

/* id of a token written exactly as in the vocabulary or added tokens, or -1 */
int32_t tok_id(const struct tokenizer *tok, const char *text);
/* the token's text as stored (byte-level tokens in their mapped form); "" for a hole */
const char *tok_text(const struct tokenizer *tok, int32_t id);
int tok_n_vocab(const struct tokenizer *tok);
int32_t tok_bos(const struct tokenizer *tok); /* -1 when none */
int32_t tok_eos(const struct tokenizer *tok); /* -1 when none */
int tok_add_bos(const struct tokenizer *tok); /* whether add_special puts BOS first */
int tok_is_special(const struct tokenizer *tok, int32_t id);
enum tok_kind tok_get_kind(const struct tokenizer *tok);
const char *tok_chat_template(const struct tokenizer *tok); /* NULL when none */
/* the template named "tool_use", which transformers renders for requests with tools; NULL when
 * none */
const char *tok_chat_template_tool_use(const struct tokenizer *tok);

#endif
