# kernels/: CPU reference kernels (the CPU backend) and CUDA C kernel families, each with an
# extern "C" launcher in a C header.
liblockstep_a_SOURCES += kernels/ref.c kernels/ref.h
if HAVE_CUDA
liblockstep_a_SOURCES += kernels/selftest.cu kernels/selftest.h kernels/step.cu kernels/step.h \
	runtime/backend_cuda.c runtime/decode_form.h
endif
