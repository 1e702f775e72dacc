# CUDA kernel families of the decode and prefill paths: one .cu per family with its extern "C"
# launchers, declared in the C header beside it. Included from Makefile.am.
if HAVE_CUDA
liblockstep_a_SOURCES += \
	kernels/pdl.cuh kernels/attention.cu kernels/attention.h \
	kernels/bandwidth.cu kernels/bandwidth.h \
	kernels/elementwise.cu kernels/elementwise.h \
	kernels/gemm.cu kernels/gemm.h \
	kernels/gemv.cu kernels/gemv.h \
	kernels/norm.cu kernels/norm.h \
	kernels/rope.cu kernels/rope.h \
	kernels/sample.cu kernels/sample.h
endif
# kernel experiments: built and run by hand on a GPU machine (kernels/lab/run.sh)
EXTRA_DIST += kernels/lab/README.md kernels/lab/run.sh kernels/lab/gemv_lab.cu
