# tests/: TAP everywhere. Unit tests are CUnit programs that link only the sources they test
# (plus tests/unit/cunit_tap.c); integration tests are shell scripts run through mpirun on CPUs.
EXTRA_DIST += tests/integration/lib.sh tests/fixtures
TESTS += tests/integration/info.sh tests/integration/cli_errors.sh tests/integration/faults.sh \
	tests/integration/spills.sh

check_PROGRAMS += tests/unit/test_bootstrap
tests_unit_test_bootstrap_SOURCES = tests/unit/test_bootstrap.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h runtime/bootstrap.c runtime/args.c runtime/log.c runtime/check.c runtime/gpu.c
tests_unit_test_bootstrap_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
tests_unit_test_bootstrap_LDADD = $(CUNIT_LIBS) $(MPI_LIBS) $(HWLOC_LIBS) $(CUDA_LIBS) -lm
TESTS += tests/unit/test_bootstrap

check_PROGRAMS += tests/unit/test_watchdog
tests_unit_test_watchdog_SOURCES = tests/unit/test_watchdog.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h runtime/watchdog.c runtime/log.c
tests_unit_test_watchdog_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
tests_unit_test_watchdog_LDADD = $(CUNIT_LIBS) -lpthread
TESTS += tests/unit/test_watchdog

check_PROGRAMS += tests/unit/test_decode_form
tests_unit_test_decode_form_SOURCES = tests/unit/test_decode_form.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h runtime/decode_form.h
tests_unit_test_decode_form_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
tests_unit_test_decode_form_LDADD = $(CUNIT_LIBS)
TESTS += tests/unit/test_decode_form

check_PROGRAMS += tests/unit/test_bulk_shape
tests_unit_test_bulk_shape_SOURCES = tests/unit/test_bulk_shape.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h kernels/bulk_shape.h
tests_unit_test_bulk_shape_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
tests_unit_test_bulk_shape_LDADD = $(CUNIT_LIBS)
TESTS += tests/unit/test_bulk_shape

check_PROGRAMS += tests/unit/test_ktrace
tests_unit_test_ktrace_SOURCES = tests/unit/test_ktrace.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h runtime/ktrace.c runtime/ktrace.h
tests_unit_test_ktrace_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
tests_unit_test_ktrace_LDADD = $(CUNIT_LIBS)
TESTS += tests/unit/test_ktrace

check_PROGRAMS += tests/unit/test_sampler
tests_unit_test_sampler_SOURCES = tests/unit/test_sampler.c tests/unit/cunit_tap.c runtime/sampler.c \
	kernels/ref.c
tests_unit_test_sampler_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
tests_unit_test_sampler_LDADD = $(CUNIT_LIBS) $(OPENMP_CFLAGS) -lm
TESTS += tests/unit/test_sampler
TESTS += tests/integration/tiny_models.sh
TESTS += tests/integration/smollm2.sh tests/integration/generate.sh tests/integration/chat.sh
TESTS += tests/integration/bench.sh tests/integration/logprobs.sh tests/integration/perplexity.sh
