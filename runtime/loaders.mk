# runtime/loaders.mk: GGUF reader (gguf.c) and ggml block dequantization (quant.c).
liblockstep_a_SOURCES += \
	runtime/gguf.c runtime/gguf.h \
	runtime/quant.c runtime/quant.h

check_PROGRAMS += tests/unit/test_quant tests/unit/test_gguf
tests_unit_test_quant_SOURCES = tests/unit/test_quant.c tests/unit/cunit_tap.c runtime/quant.c \
	runtime/log.c
tests_unit_test_quant_LDADD = $(CUNIT_LIBS) -lm
tests_unit_test_quant_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
tests_unit_test_gguf_SOURCES = tests/unit/test_gguf.c tests/unit/cunit_tap.c runtime/gguf.c \
	runtime/quant.c runtime/log.c
tests_unit_test_gguf_LDADD = $(CUNIT_LIBS) -lm
tests_unit_test_gguf_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
TESTS += tests/unit/test_quant tests/unit/test_gguf

# fixtures: regenerate with tests/fixtures/make_quant_fixtures.py (needs `pip install gguf`)
EXTRA_DIST += tests/fixtures/make_quant_fixtures.py tests/fixtures/quant tests/fuzz/corpus/gguf

# libFuzzer target: configure --enable-fuzz CC=clang CFLAGS="-g -O1 -fsanitize=fuzzer-no-link,address"
# then `make tests/fuzz/fuzz_gguf && tests/fuzz/fuzz_gguf -max_total_time=60 tests/fuzz/corpus/gguf`
if ENABLE_FUZZ
check_PROGRAMS += tests/fuzz/fuzz_gguf
tests_fuzz_fuzz_gguf_SOURCES = tests/fuzz/fuzz_gguf.c runtime/gguf.c runtime/quant.c runtime/log.c
tests_fuzz_fuzz_gguf_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_gguf_LDADD = -lm
endif
