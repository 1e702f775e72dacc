# shard/: the tensor-parallel shard plan (who holds which heads, FFN columns and vocab rows, and
# what it costs in bytes) and the `lockstep plan` subcommand that prints it.
liblockstep_a_SOURCES += shard/plan.c shard/plan.h shard/plan_cli.c

check_PROGRAMS += tests/unit/test_plan
tests_unit_test_plan_SOURCES = tests/unit/test_plan.c tests/unit/cunit_tap.c \
	tests/unit/cunit_tap.h shard/plan.c shard/plan.h runtime/log.c runtime/log.h
tests_unit_test_plan_LDADD = $(CUNIT_LIBS)
tests_unit_test_plan_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
TESTS += tests/unit/test_plan tests/integration/plan.sh
EXTRA_DIST += tests/integration/plan.sh
