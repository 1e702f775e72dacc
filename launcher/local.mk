# launcher/: `lockstep launch` (compose and exec mpirun), its hostfile parser, the lockstep-run
# wrapper, the Slurm batch script and the example hostfiles.
liblockstep_a_SOURCES += launcher/hostfile.c launcher/hostfile.h launcher/launch.c
dist_bin_SCRIPTS += launcher/lockstep-run
EXTRA_DIST += launcher/slurm/lockstep.sbatch hostfiles launcher/fetch-model.sh

check_PROGRAMS += tests/unit/test_hostfile
tests_unit_test_hostfile_SOURCES = tests/unit/test_hostfile.c tests/unit/cunit_tap.c \
	launcher/hostfile.c launcher/hostfile.h runtime/log.c
tests_unit_test_hostfile_LDADD = $(CUNIT_LIBS)
tests_unit_test_hostfile_CFLAGS = $(AM_CFLAGS) $(CUNIT_CFLAGS)
TESTS += tests/unit/test_hostfile

TESTS += tests/integration/launcher.sh
EXTRA_DIST += tests/integration/launcher.sh

if ENABLE_FUZZ
# libFuzzer target on the hostfile parser, the --extra-mpi-args splitting and the composed
# mpirun line (configure --enable-fuzz CC=clang; seed corpus: tests/fuzz/corpus/hostfile)
check_PROGRAMS += tests/fuzz/fuzz_hostfile
tests_fuzz_fuzz_hostfile_SOURCES = tests/fuzz/fuzz_hostfile.c launcher/hostfile.c \
	launcher/hostfile.h runtime/log.c
tests_fuzz_fuzz_hostfile_CFLAGS = $(FUZZ_COMPILE_FLAGS)
tests_fuzz_fuzz_hostfile_LDFLAGS = $(FUZZ_LINK_FLAGS)
endif
EXTRA_DIST += tests/fuzz/corpus/hostfile
