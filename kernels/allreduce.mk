# Custom all-reduce over CUDA IPC peer memory (kernels/allreduce.cu, runtime/comm_custom.c; the
# latter compiles to stubs in CPU-only builds so callers need no #ifdef) and its multi-rank GPU
# test, which `make check` builds in CUDA builds but does not run: it needs GPUs and mpirun
# (mpirun -np 2 tests/gpu/test_allreduce).
liblockstep_a_SOURCES += runtime/comm_custom.c runtime/comm_custom.h
if HAVE_CUDA
liblockstep_a_SOURCES += kernels/allreduce.cu kernels/allreduce.h
check_PROGRAMS += tests/gpu/test_allreduce
tests_gpu_test_allreduce_SOURCES = tests/gpu/test_allreduce.c
tests_gpu_test_allreduce_LDADD = $(LOCKSTEP_LIBS)
endif
