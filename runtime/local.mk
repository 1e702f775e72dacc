# runtime/: CLI, bootstrap, communicators, logging.
liblockstep_a_SOURCES += \
	runtime/log.c runtime/log.h \
	runtime/check.c runtime/check.h \
	runtime/args.c runtime/args.h \
	runtime/bootstrap.c runtime/bootstrap.h \
	runtime/gpu.c runtime/gpu.h \
	runtime/comm.c runtime/comm.h \
	runtime/info.c runtime/selftest.c runtime/commands.h
