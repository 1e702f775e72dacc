# runtime/: CLI, bootstrap, communicators, logging, model, engine, sampler.
liblockstep_a_SOURCES += \
	runtime/log.c runtime/log.h \
	runtime/check.c runtime/check.h \
	runtime/args.c runtime/args.h \
	runtime/bootstrap.c runtime/bootstrap.h \
	runtime/gpu.c runtime/gpu.h \
	runtime/comm.c runtime/comm.h \
	runtime/info.c runtime/selftest.c runtime/commands.h \
	runtime/model_config.h runtime/model.c runtime/model.h \
	runtime/backend.h runtime/backend_cpu.c \
	runtime/engine.c runtime/engine.h \
	runtime/watchdog.c runtime/watchdog.h \
	runtime/sampler.c runtime/sampler.h \
	runtime/generate.c runtime/generate.h \
	runtime/run_common.c runtime/run_common.h \
	runtime/generate_cli.c runtime/batch.c runtime/bench.c runtime/perplexity.c \
	runtime/ktrace.c runtime/ktrace.h runtime/ktrace_cupti.c
