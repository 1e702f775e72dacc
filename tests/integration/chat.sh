#!/usr/bin/env bash
# --chat end to end on CPU ranks with SmolLM2: the model's own template and one given with
# --chat-template give the same ids, extra variables reach the template, batch messages reach it
# as given (tool calls, null content; content parts as vLLM takes them), and bad templates or flags end every rank with a message
# that names them. (The template language itself is checked against transformers in test_chat
# and test_jinja.)
. "$(dirname "$0")/lib.sh"
model=${LOCKSTEP_MODEL:-$SRCDIR/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
templates=$SRCDIR/tests/fixtures/chat/templates

# ---- flags checked before any model loads
run "$LOCKSTEP" generate -m x -p hi --chat-template "$templates/chatml.jinja"
check "--chat-template without --chat: a usage error" \
    eval '[ "$rc" -eq 2 ] && err_has "chat-template needs --chat"'
run "$LOCKSTEP" generate -m x -p hi --chat --chat-template-kwargs '{"a": 1'
check "--chat-template-kwargs that is not JSON: a usage error naming the flag" \
    eval '[ "$rc" -eq 2 ] && err_has "chat-template-kwargs: not JSON"'
run "$LOCKSTEP" generate -m x -p hi --chat --chat-template-kwargs '[1]'
check "--chat-template-kwargs that is not an object: expected and found named" \
    eval '[ "$rc" -eq 2 ] && err_has "chat-template-kwargs: expected a JSON object, found an array"'
run "$LOCKSTEP" generate -m x -p hi --chat --chat-template "$tmp/none.jinja"
check "--chat-template of a missing file: the file is named" \
    eval '[ "$rc" -eq 2 ] && err_has "$tmp/none.jinja: cannot open"'
run "$LOCKSTEP" generate -m x -p hi --chat --chat-template "$tmp"
check "--chat-template of a directory: said so" \
    eval '[ "$rc" -eq 2 ] && err_has "expected a regular file, found a directory"'
run "$LOCKSTEP" generate -m x -p hi --tools "$tmp/tools.json"
check "--tools without --chat: a usage error" eval '[ "$rc" -eq 2 ] && err_has "tools needs --chat"'
run "$LOCKSTEP" generate -m x -p hi --chat --tools "$tmp/none.json"
check "--tools of a missing file: the file is named" \
    eval '[ "$rc" -eq 2 ] && err_has "$tmp/none.json: cannot open"'
printf '%s' '{"type": "function"}' >"$tmp/tool1.json"
run "$LOCKSTEP" generate -m x -p hi --chat --tools "$tmp/tool1.json"
check "--tools holding one object, not a list: expected and found named" \
    eval '[ "$rc" -eq 2 ] && err_has "tools $tmp/tool1.json: expected a list of tool objects, found an object"'
printf '%s' '[{"type": "function"}, "add"]' >"$tmp/tool2.json"
run "$LOCKSTEP" generate -m x -p hi --chat --tools "$tmp/tool2.json"
check "--tools with an element that is not an object: its index named" \
    eval '[ "$rc" -eq 2 ] && err_has "tool2.json\[1\]: expected an object, found a string"'
printf '%s' '[{"type": ' >"$tmp/tool3.json"
run "$LOCKSTEP" generate -m x -p hi --chat --tools "$tmp/tool3.json"
check "--tools that is not JSON: the file and the place named" \
    eval '[ "$rc" -eq 2 ] && err_has "tool3.json: not JSON"'
run "$LOCKSTEP" batch -m x --input x --output y --chat-template-kwargs 3
check "batch --chat-template-kwargs that is not an object: a usage error" \
    eval '[ "$rc" -eq 2 ] && err_has "expected a JSON object, found an integer"'
run "$LOCKSTEP" batch -m x --input x --output y --chat-template-content-format list
check "batch --chat-template-content-format of an unknown name: a usage error naming the choices" \
    eval '[ "$rc" -eq 2 ] && err_has "expected auto, string or openai, found '"'"'list'"'"'"'

if [ ! -f "$model" ]; then
    skip "chat on SmolLM2: model absent (launcher/fetch-model.sh fetches it)"
    done_testing
    exit
fi

ids() { jq -c .prompt_ids "$tmp/out"; }
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "What is 2+2?" --chat --system "Be brief." -n 1 --json --quiet
check "--chat with the model's template: runs" test "$rc" -eq 0
own=$(ids)
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "What is 2+2?" --chat --system "Be brief." -n 1 --json --quiet \
    --chat-template "$templates/smollm2.jinja"
check "--chat-template with the same text as the model's: the same prompt ids" test "$(ids)" = "$own"
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "What is 2+2?" --chat --system "Be brief." -n 1 --json --quiet \
    --chat-template "$templates/llama3.1.jinja"
check "--chat-template with another template: other prompt ids" \
    eval '[ "$rc" -eq 0 ] && [ "$(ids)" != "$own" ]'

# a template of our own: the kwargs' text and the message content, nothing else
printf '%s' '{{ greeting }}, {{ messages[-1].content }}{% if add_generation_prompt %}!{% endif %}' >"$tmp/t.jinja"
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "world" --chat --chat-template "$tmp/t.jinja" \
    --chat-template-kwargs '{"greeting": "Hello"}' -n 1 --json --quiet
kw=$(ids)
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "Hello, world!" -n 1 --json --quiet
check "--chat-template-kwargs reach the template: ids of 'Hello, world!'" \
    eval '[ -n "$kw" ] && [ "$kw" = "$(ids)" ]'

printf '%s' '{{ raise_exception("this template takes no system message") }}' >"$tmp/raise.jinja"
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "hi" --chat --chat-template "$tmp/raise.jinja" -n 1
check "a template that raises: non-zero on every rank, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "a template that raises: its message is quoted" err_has "this template takes no system message"
printf '%s' '{% for m in messages %}{{ m.content }' >"$tmp/syntax.jinja"
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "hi" --chat --chat-template "$tmp/syntax.jinja" -n 1
check "a template that is not valid Jinja: non-zero on every rank, no hang" test "$rc" -ne 0 -a "$rc" -ne 124
check "a template that is not valid Jinja: said with the template file named" err_has "chat template ($tmp/syntax.jinja): template 1:"

# ---- batch: messages reach the template as given
cat >"$tmp/tools.jinja" <<'EOF'
{%- for m in messages -%}
{{ m.role }}:{% if m.tool_calls %}{{ m.tool_calls[0].function.name }}({{ m.tool_calls[0].function.arguments | tojson }}){% else %}{{ m.content }}{% endif %};
{%- endfor -%}
EOF
cat >"$tmp/in.jsonl" <<'JSONL'
{"id": "t", "messages": [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}], "max_tokens": 1}
{"id": "p", "prompt": "user:weather?;assistant:get_weather({\"city\": \"Paris\"});", "max_tokens": 1}
{"id": "r", "messages": [{"role": "user"}], "max_tokens": 1}
JSONL
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/in.jsonl" --output "$tmp/res.jsonl" \
    --chat-template "$tmp/tools.jinja"
check "batch with --chat-template: the job succeeds" test "$rc" -eq 0
sel() { jq -c "select(.id == \"$1\")" "$tmp/res.jsonl"; }
check "batch: tool calls and null content reach the template (same token count as its text)" \
    eval '[ -n "$(sel t | jq -r ".prompt_tokens // empty")" ] && [ "$(sel t | jq .prompt_tokens)" = "$(sel p | jq .prompt_tokens)" ]'
check "batch: a message without content is named" \
    test "$(sel r | jq -r '.error // empty')" = 'line 3: field "messages"[0]: expected {"role": string, "content": string, list or null}, found "content": nothing'

# ---- batch: content as a list of parts, as vLLM takes it: passed as it is to templates that
# iterate over parts (Gemma 3's), joined with newlines for those that concatenate strings
# (SmolLM2's), unless --chat-template-content-format says which
cat >"$tmp/in3.jsonl" <<'JSONL'
{"id": "parts", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}], "max_tokens": 4, "temperature": 0}
{"id": "string", "messages": [{"role": "user", "content": "Hellothere"}], "max_tokens": 4, "temperature": 0}
{"id": "joined", "messages": [{"role": "user", "content": "Hello \nthere"}], "max_tokens": 4, "temperature": 0}
{"id": "image", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x.png"}}]}]}
JSONL
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/in3.jsonl" --output "$tmp/res3.jsonl" \
    --chat-template "$templates/gemma3.jinja"
sel3() { jq -c "select(.id == \"$1\")" "$tmp/res3.jsonl"; }
same3() { [ -n "$(sel3 "$1" | jq -r '.prompt_tokens // empty')" ] && [ "$(sel3 "$1" | jq -c '[.prompt_tokens, .text]')" = "$(sel3 "$2" | jq -c '[.prompt_tokens, .text]')" ]; }
check "batch: content parts through Gemma 3's template (it loops over them): the joined, trimmed text" \
    same3 parts string
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/in3.jsonl" --output "$tmp/res3.jsonl"
check "batch: content parts through SmolLM2's template (it concatenates): joined with a newline" \
    same3 parts joined
check "batch: a part that is not text is named for its line" \
    eval 'sel3 image | jq -e ".error | test(\"content part 0 is of type \\\"image_url\\\": lockstep runs text-only models\")" >/dev/null'
# ---- batch: OpenAI's "developer" role, as vLLM takes it for a template that does not know it
cat >"$tmp/in4.jsonl" <<'JSONL'
{"id": "dev", "messages": [{"role": "user", "content": "Hi"}, {"role": "developer", "content": "Be brief."}], "max_tokens": 2, "temperature": 0}
{"id": "sys", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
JSONL
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/in4.jsonl" --output "$tmp/res4.jsonl"
sel4() { jq -c "select(.id == \"$1\") | [.prompt_tokens, .text]" "$tmp/res4.jsonl"; }
check "batch: a developer message late in the chat becomes SmolLM2's first system message" \
    eval '[ -n "$(sel4 dev)" ] && [ "$(sel4 dev)" = "$(sel4 sys)" ] && [ "$(sel4 dev)" != "[null,null]" ]'
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/in3.jsonl" --output "$tmp/res3.jsonl" \
    --chat-template-content-format openai
check "batch --chat-template-content-format openai: the list as given, Python's error from SmolLM2's template" \
    eval 'sel3 parts | jq -e ".error | test(\"can only concatenate str \\\\(not \\\"list\\\"\\\\) to str\")" >/dev/null'
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/in3.jsonl" --output "$tmp/res3.jsonl" \
    --chat-template-content-format string --chat-template "$templates/gemma3.jinja"
check "batch --chat-template-content-format string: joined for Gemma 3's template too" \
    eval '[ "$(sel3 parts | jq .prompt_tokens)" = "$(sel3 joined | jq .prompt_tokens)" ]'

# ---- batch: tools, continue_final_message and per-line kwargs, as OpenAI-style requests carry them
cat >"$tmp/turn.jinja" <<'EOF'
{%- if tools %}{{ tools | map(attribute='function') | map(attribute='name') | join(',') }} | {% endif -%}
{%- for m in messages %}{{ m.role }}: {{ m.content }}{% if not loop.last %}; {% endif %}{% endfor -%}
{%- if add_generation_prompt %}; assistant:{% endif %}{{ suffix }}
EOF
cat >"$tmp/in2.jsonl" <<'JSONL'
{"id": "tools", "messages": [{"role": "user", "content": "weather?"}], "tools": [{"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "function": {"name": "add"}}], "max_tokens": 1}
{"id": "tools-text", "prompt": "get_weather,add | user: weather?; assistant:", "max_tokens": 1}
{"id": "cont", "messages": [{"role": "user", "content": "a story"}, {"role": "assistant", "content": "Once upon a  "}], "continue_final_message": true, "max_tokens": 1}
{"id": "cont-text", "prompt": "user: a story; assistant: Once upon a  ", "max_tokens": 1}
{"id": "kw", "messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false, "chat_template_kwargs": {"suffix": " (end)"}, "max_tokens": 1}
{"id": "kw-text", "prompt": "user: x (end)", "max_tokens": 1}
{"id": "both", "messages": [{"role": "user", "content": "x"}], "continue_final_message": true, "add_generation_prompt": true}
{"id": "badtools", "messages": [{"role": "user", "content": "x"}], "tools": {"name": "f"}}
{"id": "badtool", "messages": [{"role": "user", "content": "x"}], "tools": [3]}
{"id": "plain", "prompt": "x", "tools": []}
JSONL
run_mpi 2 "$LOCKSTEP" batch -m "$model" --input "$tmp/in2.jsonl" --output "$tmp/res2.jsonl" \
    --chat-template "$tmp/turn.jinja"
check "batch with chat fields: the job succeeds" test "$rc" -eq 0
printf '%s' '[{"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "function": {"name": "add"}}]' >"$tmp/tools.json"
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "weather?" --chat --chat-template "$tmp/turn.jinja" \
    --tools "$tmp/tools.json" -n 1 --json --quiet
tools_ids=$(ids)
run_mpi 2 "$LOCKSTEP" generate -m "$model" -p "get_weather,add | user: weather?; assistant:" -n 1 --json --quiet
check "generate --tools: the tools reach the template (the ids of its text)" \
    eval '[ -n "$tools_ids" ] && [ "$tools_ids" = "$(ids)" ]'
sel2() { jq -c "select(.id == \"$1\")" "$tmp/res2.jsonl"; }
same_tokens() { [ -n "$(sel2 "$1" | jq -r '.prompt_tokens // empty')" ] && [ "$(sel2 "$1" | jq .prompt_tokens)" = "$(sel2 "$1-text" | jq .prompt_tokens)" ]; }
check "batch: \"tools\" reach the template (the same tokens as its text)" same_tokens tools
check "batch: \"continue_final_message\" ends inside the last message, its trailing blanks kept" same_tokens cont
check "batch: \"chat_template_kwargs\" and \"add_generation_prompt\": false reach the template" same_tokens kw
check "batch: continue_final_message with add_generation_prompt is an error for that line" \
    eval 'sel2 both | jq -e ".error | test(\"not compatible\")" >/dev/null'
check "batch: \"tools\" that is not a list is named" \
    test "$(sel2 badtools | jq -r '.error // empty')" = 'line 8: field "tools": expected a list of tool objects, found an object'
check "batch: a tool that is not an object is named" \
    test "$(sel2 badtool | jq -r '.error // empty')" = 'line 9: field "tools"[0]: expected an object, found an integer'
check "batch: chat fields on a plain prompt line are refused" \
    test "$(sel2 plain | jq -r '.error // empty')" = 'line 10: field "tools": only for chat lines ("messages", or --chat)'

done_testing
