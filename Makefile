# cleave build. `make` builds build/libcleave.a, build/cleave and the tests;
# `make test` runs the suite; `make SAN=1 test` builds into build-san with
# AddressSanitizer and UndefinedBehaviorSanitizer and runs the suite there.
# Optional parts (oneDNN, zlib, MPI) are detected and reported; the build
# works without each of them.

CC      ?= cc
# `make install` puts everything under $(DESTDIR)$(PREFIX); `make uninstall`
# removes it again (and the token caches, FILE.TOKENIZER.tok, that training
# on the installed data made beside it).
PREFIX  ?= /usr/local
bindir      = $(PREFIX)/bin
libdir      = $(PREFIX)/lib
includedir  = $(PREFIX)/include
mandir      = $(PREFIX)/share/man
datadir     = $(PREFIX)/share/cleave
VERSION  = 0.1.0
SOMAJOR  = 0
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
LDLIBS  = -lxxhash -lm -pthread -fopenmp

have = $(shell printf '#include <$(1)>\nint main(void){return 0;}\n' | $(CC) -x c - -o /dev/null $(2) 2>/dev/null && echo yes || echo no)
HAVE_DNNL := $(call have,oneapi/dnnl/dnnl.h,-ldnnl)
HAVE_ZLIB := $(call have,zlib.h,-lz)
HAVE_PCRE2 := $(call have,pcre2.h,-DPCRE2_CODE_UNIT_WIDTH=8 -lpcre2-8)
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
ifeq ($(HAVE_PCRE2),yes)
CFLAGS += -DCL_HAVE_PCRE2
LDLIBS += -lpcre2-8
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
# Drivers a shell test runs with arguments (not run alone by tests/run.sh, which runs test_*).
DRIVER_BIN := $(BUILD)/tests/llama_torch_driver $(BUILD)/tests/moe_torch_driver $(BUILD)/tests/bf16_torch_driver
TEST_COMMON := $(wildcard tests/common/*.c)
EX_SRC   := $(sort $(wildcard examples/*.c))
EX_BIN   := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EX_SRC)) $(BUILD)/examples/quickstart
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
HDRS     := $(wildcard include/cleave/*.h src/*/*.h tests/common/*.h)

# The library's objects are position-independent: the same objects make
# libcleave.a and the shared libcleave.so.
PIC = -fPIC -fno-semantic-interposition
SONAME := libcleave.so.$(SOMAJOR)
# Man pages: `cleave WORDS --man` prints each command's --help as a page.
MAN_PAGES := cleave cleave-train cleave-memory cleave-convert cleave-tokenize cleave-eval cleave-generate cleave-checkpoint-verify cleave-mesh cleave-schedule cleave-trace-render cleave-plot \
             cleave-bench-peak cleave-bench-gemm cleave-bench-step cleave-plan cleave-plan-calibrate
MAN_OUT  := $(patsubst %,$(BUILD)/man/%.1,$(MAN_PAGES))
PUB_HDRS := $(sort $(wildcard include/cleave/*.h))
# The prepared data (scripts/setup.sh) that is installed under share/cleave.
DATA_FILES := kjv.txt digits.csv.gz gpt2/encoder.json gpt2/vocab.bpe llama3/tokenizer.json

all: config $(BUILD)/cleave $(BUILD)/$(SONAME) $(BUILD)/cleave.pc $(MAN_OUT) $(TEST_BIN) $(DRIVER_BIN) $(EX_BIN) $(BENCH_BIN)

config:
	@echo "cleave build ($(BUILD)): oneDNN: $(HAVE_DNNL), zlib: $(HAVE_ZLIB), PCRE2: $(HAVE_PCRE2), MPI: $(HAVE_MPI), sanitizers: $(if $(filter 1,$(SAN)),yes,no)"

$(BUILD)/obj/%.o: src/%.c $(HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PIC) -c $< -o $@

# The installed data directory is compiled into the data lookup; a new PREFIX rebuilds it.
$(BUILD)/obj/data/datadir.o: src/data/datadir.c $(HDRS) Makefile $(BUILD)/prefix.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PIC) -DCL_DATADIR='"$(datadir)"' -c $< -o $@

# (kept equal to PREFIX as the Makefile is read, so it changes only with PREFIX)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(BUILD)/prefix.txt 2>/dev/null)" = "$(PREFIX)" ] || echo "$(PREFIX)" > $(BUILD)/prefix.txt; })

$(BUILD)/obj/cli/%.o: cli/%.c $(HDRS) $(wildcard cli/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libcleave.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/cleave: $(CLI_OBJ) $(BUILD)/libcleave.a
	$(CC) $(CFLAGS) $(CLI_OBJ) $(BUILD)/libcleave.a $(LDLIBS) -o $@

$(BUILD)/libcleave.so.$(VERSION): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) $(SANFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/$(SONAME): $(BUILD)/libcleave.so.$(VERSION)
	ln -sf libcleave.so.$(VERSION) $@

# pkg-config: a program links the shared library with Libs, the static one
# with --static (Libs.private: oneDNN, OpenMP, MPI, zlib as this build uses them).
$(BUILD)/cleave.pc: Makefile $(BUILD)/prefix.txt
	@mkdir -p $(dir $@)
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' \
	    'datadir=$${prefix}/share/cleave' '' 'Name: cleave' \
	    'Description: training neural networks split across ranks (threads or MPI)' 'Version: $(VERSION)' \
	    'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lcleave $(SANFLAGS)' 'Libs.private: $(LDLIBS)' > $@

$(BUILD)/man/%.1: $(BUILD)/cleave
	@mkdir -p $(dir $@)
	$(BUILD)/cleave $(wordlist 2,9,$(subst -, ,$*)) --man > $@.tmp && mv $@.tmp $@

install: all
	install -d $(DESTDIR)$(bindir) $(DESTDIR)$(libdir)/pkgconfig $(DESTDIR)$(includedir)/cleave \
	    $(DESTDIR)$(mandir)/man1 $(DESTDIR)$(datadir)/gpt2 $(DESTDIR)$(datadir)/llama3
	install -m 755 $(BUILD)/cleave $(DESTDIR)$(bindir)/cleave
	install -m 644 $(BUILD)/libcleave.a $(DESTDIR)$(libdir)/libcleave.a
	install -m 755 $(BUILD)/libcleave.so.$(VERSION) $(DESTDIR)$(libdir)/libcleave.so.$(VERSION)
	ln -sf libcleave.so.$(VERSION) $(DESTDIR)$(libdir)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(libdir)/libcleave.so
	install -m 644 $(BUILD)/cleave.pc $(DESTDIR)$(libdir)/pkgconfig/cleave.pc
	install -m 644 $(PUB_HDRS) $(DESTDIR)$(includedir)/cleave/
	install -m 644 $(MAN_OUT) $(DESTDIR)$(mandir)/man1/
	@for f in $(DATA_FILES); do \
	    if [ -f data/$$f ]; then install -m 644 data/$$f $(DESTDIR)$(datadir)/$$f || exit 1; \
	    else echo "make install: data/$$f is missing (run: bash scripts/setup.sh); not installed" >&2; fi; \
	done

uninstall:
	rm -f $(DESTDIR)$(bindir)/cleave $(DESTDIR)$(libdir)/libcleave.a $(DESTDIR)$(libdir)/libcleave.so.$(VERSION) \
	    $(DESTDIR)$(libdir)/$(SONAME) $(DESTDIR)$(libdir)/libcleave.so $(DESTDIR)$(libdir)/pkgconfig/cleave.pc \
	    $(patsubst include/cleave/%,$(DESTDIR)$(includedir)/cleave/%,$(PUB_HDRS)) \
	    $(patsubst %,$(DESTDIR)$(mandir)/man1/%.1,$(MAN_PAGES)) $(patsubst %,$(DESTDIR)$(datadir)/%,$(DATA_FILES)) \
	    $(DESTDIR)$(datadir)/*.tok
	-rmdir $(DESTDIR)$(includedir)/cleave $(DESTDIR)$(datadir)/gpt2 $(DESTDIR)$(datadir)/llama3 $(DESTDIR)$(datadir) 2>/dev/null

$(BUILD)/tests/%: tests/%.c $(TEST_COMMON) $(BUILD)/libcleave.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(TEST_COMMON) $(BUILD)/libcleave.a $(LDLIBS) -o $@

# test_args compiles cli/args.c into itself (the cli/ code is not in the library).
$(BUILD)/tests/test_args: cli/args.c cli/args.h

$(BUILD)/examples/%: examples/%.c $(BUILD)/libcleave.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libcleave.a $(LDLIBS) -o $@

# The worked example that opens include/cleave/cleave.h, built from there (one copy).
$(BUILD)/examples/quickstart.c: include/cleave/cleave.h
	@mkdir -p $(dir $@)
	sed -n '/^ \* ---- example begin ----$$/,/^ \* ---- example end ----$$/p' $< | sed '1d;$$d' > $@

$(BUILD)/examples/quickstart: $(BUILD)/examples/quickstart.c $(BUILD)/libcleave.a $(HDRS)
	$(CC) $(CFLAGS) $< $(BUILD)/libcleave.a $(LDLIBS) -o $@

$(BUILD)/bench/%: bench/%.c $(BUILD)/libcleave.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libcleave.a $(LDLIBS) -o $@

test: all
	BUILD=$(BUILD) bash tests/run.sh

clean:
	rm -rf build build-san

.PHONY: all config test clean install uninstall
