# kernels/: CUDA C kernel families, each with an extern "C" launcher in a C header.
if HAVE_CUDA
liblockstep_a_SOURCES += kernels/selftest.cu kernels/selftest.h
endif
