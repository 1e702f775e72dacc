# CUDA kernel families of the decode and prefill paths: one .cu per family with its extern "C"
# launchers, declared in the C header beside it. Included from Makefile.am.
if HAVE_CUDA
liblockstep_a_SOURCES += \
	kernels/pdl.cuh kernels/device.cuh kernels/argmax.cuh kernels/att_split.cuh kernels/attention.cu kernels/attention.h kernels/attention_sm90.cu \
	kernels/bulk_shape.h \
	kernels/bandwidth.cu kernels/bandwidth.h \
	kernels/elementwise.cu kernels/elementwise.h \
	kernels/gemm.cu kernels/gemm.h \
	kernels/gemv.cu kernels/gemv.h \
	kernels/norm.cu kernels/norm.h \
	kernels/rope.cu kernels/rope.h kernels/rope.cuh \
	kernels/sample.cu kernels/sample.h
endif
# kernel experiments: run by hand on a GPU machine (kernels/lab/run.sh); `make check` in a CUDA
# build compiles the lab (it includes the kernel sources), so a change there cannot break it
EXTRA_DIST += kernels/lab/README.md kernels/lab/run.sh kernels/lab/gemv_lab.cu kernels/lab/persist_lab.cu \
	kernels/lab/lab.cuh
if HAVE_CUDA
# ... and the attention kernels for sm_80 too (--with-cuda-arch=sm_80 is offered; they use
# thread-block clusters where the device has them)
check_DATA = kernels/attention.sm80.o
CLEANFILES += kernels/attention.sm80.o kernels/*.o.ptxas
kernels/attention.sm80.o: $(top_srcdir)/kernels/attention.cu $(top_srcdir)/kernels/attention.h \
		$(top_srcdir)/kernels/bulk_shape.h $(top_srcdir)/kernels/pdl.cuh $(top_srcdir)/kernels/device.cuh \
		$(top_srcdir)/kernels/att_split.cuh
	@$(MKDIR_P) kernels
	$(AM_V_GEN)$(NVCC) $(subst $(CUDA_ARCH_FLAGS),,$(NVCC_FLAGS)) -gencode=arch=compute_80,code=sm_80 \
		-I$(top_srcdir) -I$(top_srcdir)/kernels -I$(top_builddir) $(CUDA_CFLAGS) -c $< -o $@
check_DATA += kernels/lab/gemv_lab.built
CLEANFILES += kernels/lab/gemv_lab.built
kernels/lab/gemv_lab.built: $(top_srcdir)/kernels/lab/gemv_lab.cu $(liblockstep_a_SOURCES)
	@$(MKDIR_P) kernels/lab
	$(AM_V_GEN)$(NVCC) $(NVCC_FLAGS) -Xcompiler -fopenmp -I$(top_srcdir) -I$(top_srcdir)/kernels \
		-I$(top_builddir) $(CUDA_CFLAGS) $(top_srcdir)/kernels/lab/gemv_lab.cu -o kernels/lab/gemv_lab -lgomp && touch $@
CLEANFILES += kernels/lab/gemv_lab
check_DATA += kernels/lab/persist_lab.built
CLEANFILES += kernels/lab/persist_lab.built kernels/lab/persist_lab
kernels/lab/persist_lab.built: $(top_srcdir)/kernels/lab/persist_lab.cu $(liblockstep_a_SOURCES)
	@$(MKDIR_P) kernels/lab
	$(AM_V_GEN)$(NVCC) $(NVCC_FLAGS) -I$(top_srcdir) -I$(top_srcdir)/kernels -I$(top_builddir) \
		$(CUDA_CFLAGS) $(top_srcdir)/kernels/lab/persist_lab.cu -o kernels/lab/persist_lab && touch $@
endif
