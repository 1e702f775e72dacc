# GPU kernel tests and benchmarks: built by `make check` in CUDA builds, never run by it (CI has
# no GPU). Run tests/gpu/test_kernels on a GPU machine; --quick under compute-sanitizer.
if HAVE_CUDA
check_PROGRAMS += tests/gpu/test_kernels
tests_gpu_test_kernels_SOURCES = tests/gpu/test_kernels.cu
tests_gpu_test_kernels_LDADD = $(LOCKSTEP_LIBS)
endif
