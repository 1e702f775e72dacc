# runtime/jinja.mk: the Jinja interpreter that renders a model's own chat template
# (runtime/jinja.h), its unit tests against jinja2 / transformers / vLLM fixtures, and its fuzz
# target.
JINJA_SRC = runtime/jinja.h runtime/jinja_internal.h runtime/utf8.h runtime/jinja_parse.c \
	runtime/jinja_value.c runtime/jinja_builtins.c runtime/jinja_eval.c runtime/jinja_inspect.c
liblockstep_a_SOURCES += $(JINJA_SRC)

check_PROGRAMS += tests/unit/test_jinja
TESTS += tests/unit/test_jinja
tests_unit_test_jinja_SOURCES = tests/unit/test_jinja.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h $(JINJA_SRC) runtime/strbuf.c runtime/strbuf.h
tests_unit_test_jinja_LDADD = $(CUNIT_LIBS) $(JANSSON_LIBS) -lm
tests_unit_test_jinja_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)

# ls_jinja_loops_over_content against vLLM's content-format detection
check_PROGRAMS += tests/unit/test_jinja_inspect
TESTS += tests/unit/test_jinja_inspect
tests_unit_test_jinja_inspect_SOURCES = tests/unit/test_jinja_inspect.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h $(JINJA_SRC) runtime/strbuf.c runtime/strbuf.h
tests_unit_test_jinja_inspect_LDADD = $(CUNIT_LIBS) $(JANSSON_LIBS) -lm
tests_unit_test_jinja_inspect_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)

# fixtures: regenerate with tests/fixtures/make_jinja_fixtures.py and make_jinja_random.py
# (need transformers, jinja2) and make_content_format_fixtures.py (also the vLLM wheel, read for
# its detection code)
EXTRA_DIST += tests/fixtures/make_jinja_fixtures.py tests/fixtures/make_jinja_random.py \
	tests/fixtures/jinja tests/fuzz/corpus/jinja tests/fuzz/jinja.dict \
	tests/fixtures/make_content_format_fixtures.py tests/fixtures/chat/content_format.json

if ENABLE_FUZZ
# libFuzzer target on ls_jinja_render (configure --enable-fuzz CC=clang); built by make check,
# run by hand: tests/fuzz/fuzz_jinja -max_total_time=60 tests/fuzz/corpus/jinja
check_PROGRAMS += tests/fuzz/fuzz_jinja
tests_fuzz_fuzz_jinja_SOURCES = tests/fuzz/fuzz_jinja.c $(JINJA_SRC) runtime/strbuf.c
tests_fuzz_fuzz_jinja_CFLAGS = $(FUZZ_COMPILE_FLAGS)
tests_fuzz_fuzz_jinja_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_jinja_LDADD = $(JANSSON_LIBS) -lm
endif
