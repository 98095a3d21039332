# cleave build. `make` builds build/libcleave.a, build/cleave and the tests;
# `make test` runs the suite; `make SAN=1 test` builds into build-san with
# AddressSanitizer and UndefinedBehaviorSanitizer and runs the suite there.
# Optional parts (oneDNN, zlib, MPI) are detected and reported; the build
# works without each of them.

CC      ?= cc
# `make install` puts everything under $(DESTDIR)$(PREFIX).
PREFIX  ?= /usr/local
datadir  = $(PREFIX)/share/cleave
SAN     ?= 0
ifeq ($(SAN),1)
BUILD   ?= build-san
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT      = -O1
else
BUILD   ?= build
SANFLAGS =
OPT      = -O2
endif

# -fopenmp: kernels split their loops over the rank's threads (kernels/simd.h)
CFLAGS  = -std=c11 $(OPT) -g -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -Isrc $(SANFLAGS) -pthread -fopenmp
LDLIBS  = -lm -pthread -fopenmp

have = $(shell printf '#include <$(1)>\nint main(void){return 0;}\n' | $(CC) -x c - -o /dev/null $(2) 2>/dev/null && echo yes || echo no)
HAVE_DNNL := $(call have,oneapi/dnnl/dnnl.h,-ldnnl)
HAVE_ZLIB := $(call have,zlib.h,-lz)
# MPI (OpenMPI's mpicc --showme); `make MPI=0` builds without it.
ifeq ($(MPI),0)
HAVE_MPI  := no
else
HAVE_MPI  := $(shell command -v mpicc >/dev/null 2>&1 && mpicc --showme:compile >/dev/null 2>&1 && echo yes || echo no)
endif

ifeq ($(HAVE_DNNL),yes)
CFLAGS += -DCL_HAVE_DNNL
LDLIBS += -ldnnl -lgomp
endif
ifeq ($(HAVE_ZLIB),yes)
CFLAGS += -DCL_HAVE_ZLIB
LDLIBS += -lz
endif
ifeq ($(HAVE_MPI),yes)
CFLAGS += -DCL_HAVE_MPI $(shell mpicc --showme:compile)
LDLIBS += $(shell mpicc --showme:link)
endif

LIB_SRC  := $(sort $(wildcard src/*/*.c))
LIB_OBJ  := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRC))
CLI_SRC  := $(sort $(wildcard cli/*.c))
CLI_OBJ  := $(patsubst cli/%.c,$(BUILD)/obj/cli/%.o,$(CLI_SRC))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_COMMON := $(wildcard tests/common/*.c)
EX_SRC   := $(sort $(wildcard examples/*.c))
EX_BIN   := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EX_SRC))
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
HDRS     := $(wildcard include/cleave/*.h src/*/*.h tests/common/*.h)

all: config $(BUILD)/cleave $(TEST_BIN) $(EX_BIN) $(BENCH_BIN)

config:
	@echo "cleave build ($(BUILD)): oneDNN: $(HAVE_DNNL), zlib: $(HAVE_ZLIB), MPI: $(HAVE_MPI), sanitizers: $(if $(filter 1,$(SAN)),yes,no)"

$(BUILD)/obj/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The installed data directory is compiled into the data lookup; a new PREFIX rebuilds it.
$(BUILD)/obj/data/datadir.o: src/data/datadir.c $(HDRS) $(BUILD)/prefix.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DCL_DATADIR='"$(datadir)"' -c $< -o $@

$(BUILD)/prefix.txt: FORCE
	@mkdir -p $(dir $@)
	@[ "$$(cat $@ 2>/dev/null)" = "$(PREFIX)" ] || echo "$(PREFIX)" > $@

$(BUILD)/obj/cli/%.o: cli/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libcleave.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/cleave: $(CLI_OBJ) $(BUILD)/libcleave.a
	$(CC) $(CFLAGS) $(CLI_OBJ) $(BUILD)/libcleave.a $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/%.c $(TEST_COMMON) $(BUILD)/libcleave.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(TEST_COMMON) $(BUILD)/libcleave.a $(LDLIBS) -o $@

$(BUILD)/examples/%: examples/%.c $(BUILD)/libcleave.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libcleave.a $(LDLIBS) -o $@

$(BUILD)/bench/%: bench/%.c $(BUILD)/libcleave.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libcleave.a $(LDLIBS) -o $@

test: all
	BUILD=$(BUILD) bash tests/run.sh

clean:
	rm -rf build build-san

.PHONY: all config test clean FORCE
