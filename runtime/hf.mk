# runtime/hf.mk: Hugging Face checkpoints: safetensors (single or sharded) and config.json.
liblockstep_a_SOURCES += \
	runtime/safetensors.c runtime/safetensors.h \
	runtime/hfconfig.c runtime/hfconfig.h

check_PROGRAMS += tests/unit/test_safetensors tests/unit/test_hfconfig
TESTS += tests/unit/test_safetensors tests/unit/test_hfconfig

tests_unit_test_safetensors_SOURCES = tests/unit/test_safetensors.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h runtime/safetensors.c runtime/safetensors.h runtime/json_util.c runtime/log.c
tests_unit_test_safetensors_LDADD = $(CUNIT_LIBS) $(JANSSON_LIBS) -lm
tests_unit_test_safetensors_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)

tests_unit_test_hfconfig_SOURCES = tests/unit/test_hfconfig.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h runtime/hfconfig.c runtime/hfconfig.h runtime/model_config.h \
	runtime/log.c shard/plan.c shard/plan.h
tests_unit_test_hfconfig_LDADD = $(CUNIT_LIBS) $(JANSSON_LIBS) -lm
tests_unit_test_hfconfig_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)

# fixtures: tiny random-weight models and transformers' reference outputs (see the scripts)
EXTRA_DIST += tests/fixtures/make_tiny_models.py tests/fixtures/make_smollm2_reference.py \
	tests/fixtures/tiny-llama tests/fixtures/tiny-qwen2 \
	tests/fixtures/tiny-qwen3 tests/fixtures/smollm2

if ENABLE_FUZZ
# libFuzzer target on the safetensors header parser (configure --enable-fuzz CC=clang); built
# by make check, run by hand: tests/fuzz/fuzz_safetensors -max_total_time=60 CORPUS_DIR
check_PROGRAMS += tests/fuzz/fuzz_safetensors
tests_fuzz_fuzz_safetensors_SOURCES = tests/fuzz/fuzz_safetensors.c runtime/safetensors.c \
	runtime/safetensors.h runtime/json_util.c runtime/log.c
tests_fuzz_fuzz_safetensors_CFLAGS = $(FUZZ_COMPILE_FLAGS)
tests_fuzz_fuzz_safetensors_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_safetensors_LDADD = $(JANSSON_LIBS)
# and on the config.json reader (seed corpus: tests/fuzz/corpus/hfconfig)
check_PROGRAMS += tests/fuzz/fuzz_hfconfig
tests_fuzz_fuzz_hfconfig_SOURCES = tests/fuzz/fuzz_hfconfig.c runtime/hfconfig.c \
	runtime/hfconfig.h runtime/model_config.h runtime/log.c shard/plan.c shard/plan.h
tests_fuzz_fuzz_hfconfig_CFLAGS = $(FUZZ_COMPILE_FLAGS)
tests_fuzz_fuzz_hfconfig_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_hfconfig_LDADD = $(JANSSON_LIBS) -lm
endif
EXTRA_DIST += tests/fuzz/corpus/hfconfig tests/fuzz/hfconfig.dict
