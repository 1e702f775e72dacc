/* What the parsers of JSON files (config.json, safetensors headers, tokenizer.json) say they
 * found when a field has the wrong type; token ids as a JSON list for the commands' output. */
#ifndef LOCKSTEP_JSON_UTIL_H
#define LOCKSTEP_JSON_UTIL_H

#include <jansson.h>

/* "an object", "an array", "a string", "an integer", "a real number", "a boolean", "null";
 * "nothing" for NULL (a missing field) */
const char *ls_json_type_name(const json_t *v);

/* ids[0..n) as a JSON list of integers (a new reference) */
json_t *ls_json_ids(const int *ids, int n);

#endif
