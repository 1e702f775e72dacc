# runtime/tokenizer.mk: tokenizer (byte-level and SentencePiece BPE, from GGUF metadata or a
# tokenizer.json) and chat templates.
TOKENIZER_SRC = runtime/tokenizer.c runtime/tokenizer.h runtime/tok_internal.h runtime/utf8.h \
	runtime/unicode_hf.h \
	runtime/tok_decode.c runtime/tok_spec.c runtime/tok_json.c \
	runtime/strbuf.c runtime/strbuf.h runtime/json_util.c runtime/json_util.h
liblockstep_a_SOURCES += $(TOKENIZER_SRC) runtime/chat.c runtime/chat.h

check_PROGRAMS += tests/unit/test_tokenizer tests/unit/test_chat
TESTS += tests/unit/test_tokenizer tests/unit/test_chat

tests_unit_test_tokenizer_SOURCES = tests/unit/test_tokenizer.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h $(TOKENIZER_SRC) runtime/log.c
tests_unit_test_tokenizer_LDADD = $(CUNIT_LIBS) $(JANSSON_LIBS) $(PCRE2_LIBS) $(UTF8PROC_LIBS)
tests_unit_test_tokenizer_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)

tests_unit_test_chat_SOURCES = tests/unit/test_chat.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h runtime/chat.c runtime/chat.h $(JINJA_SRC) $(TOKENIZER_SRC) \
	runtime/log.c
tests_unit_test_chat_LDADD = $(CUNIT_LIBS) $(JANSSON_LIBS) $(PCRE2_LIBS) $(UTF8PROC_LIBS) -lm
tests_unit_test_chat_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)

# fixtures: regenerate with tests/fixtures/make_tokenizer_fixtures.py, make_tokenizer_random.py,
# make_chat_fixtures.py, make_chat_random.py and make_developer_fixtures.py (pip requirements
# inside);
# runtime/unicode_hf.h with runtime/make_unicode_hf.py
EXTRA_DIST += tests/fixtures/make_tokenizer_fixtures.py tests/fixtures/tokenizer \
	tests/fixtures/make_tokenizer_random.py tests/fixtures/tokenizer_reference.py \
	runtime/make_unicode_hf.py \
	tests/fixtures/make_chat_fixtures.py tests/fixtures/make_chat_random.py \
	tests/fixtures/make_developer_fixtures.py \
	tests/fixtures/chat \
	tests/fuzz/corpus/tokenizer_json tests/fuzz/corpus/chat

if ENABLE_FUZZ
# libFuzzer target on tok_load_json_buf (configure --enable-fuzz CC=clang); built by make check,
# run by hand: tests/fuzz/fuzz_tokenizer_json -max_total_time=60 tests/fuzz/corpus/tokenizer_json
check_PROGRAMS += tests/fuzz/fuzz_tokenizer_json
tests_fuzz_fuzz_tokenizer_json_SOURCES = tests/fuzz/fuzz_tokenizer_json.c $(TOKENIZER_SRC) runtime/log.c
tests_fuzz_fuzz_tokenizer_json_CFLAGS = $(FUZZ_COMPILE_FLAGS)
tests_fuzz_fuzz_tokenizer_json_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_tokenizer_json_LDADD = $(JANSSON_LIBS) $(PCRE2_LIBS) $(UTF8PROC_LIBS)
# libFuzzer target on chat_render_json: a batch line's messages through a template
check_PROGRAMS += tests/fuzz/fuzz_chat
tests_fuzz_fuzz_chat_SOURCES = tests/fuzz/fuzz_chat.c runtime/chat.c runtime/chat.h \
	$(TOKENIZER_SRC) $(JINJA_SRC) runtime/log.c
tests_fuzz_fuzz_chat_CFLAGS = $(FUZZ_COMPILE_FLAGS)
tests_fuzz_fuzz_chat_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_chat_LDADD = $(JANSSON_LIBS) $(PCRE2_LIBS) $(UTF8PROC_LIBS) -lm
endif

if ENABLE_FUZZ
# libFuzzer target on encoding and decoding with the two real tokenizers of
# tests/fixtures/tokenizer (round trips, the stream against the whole decode)
check_PROGRAMS += tests/fuzz/fuzz_tokenize
tests_fuzz_fuzz_tokenize_SOURCES = tests/fuzz/fuzz_tokenize.c $(TOKENIZER_SRC) runtime/log.c
tests_fuzz_fuzz_tokenize_CPPFLAGS = $(AM_CPPFLAGS) \
	-DFIXTURE_DIR='"$(abs_top_srcdir)/tests/fixtures/tokenizer"'
tests_fuzz_fuzz_tokenize_CFLAGS = $(FUZZ_COMPILE_FLAGS)
tests_fuzz_fuzz_tokenize_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_tokenize_LDADD = $(JANSSON_LIBS) $(PCRE2_LIBS) $(UTF8PROC_LIBS)
endif
EXTRA_DIST += tests/fuzz/corpus/tokenize
