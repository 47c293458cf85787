# vitc build. `make` builds the CLI; `make test` installs test deps and runs every test;
# `make demo` installs deps, builds and trains a small ViT on Fashion-MNIST;
# `make install [PREFIX=/usr/local] [DESTDIR=]` installs the CLI, libvitc.so/.a, the public headers and vitc.pc;
# `make docs` writes the API reference (Doxygen) to build/docs/html.
# ompi-c: OpenMPI for data-parallel training (`mpirun -np N vitc train`); MPI_Init is called only under mpirun.
PKGS      := openblas libcjson stb zlib libpng libjpeg ompi-c
CC        ?= cc
# `make CC=clang` builds too. -Wno-pass-failed there: clang's vectoriser declines a few `omp simd` loops that gcc
# vectorises, and says so (an optimiser remark, not a defect); gcc is the compiler vitc's speed is measured with.
CC_CLANG  := $(shell $(CC) --version 2>/dev/null | grep -q clang && echo 1)
WARN      := -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L $(if $(CC_CLANG),-Wno-pass-failed)
# Each package's flags alone: one missing (e.g. ompi-c on a machine that builds only the library, `make shared`) must
# not drop the others' include paths (pkg-config prints nothing when any package of a list is missing).
PKG_CFLAGS = $(foreach p,$(PKGS),$(shell pkg-config --cflags $(p) 2>/dev/null))
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# -O3 but never -Ofast: finite differences and NaN checks need IEEE semantics. -fno-math-errno keeps them (sqrtf
# still returns NaN for x < 0; only errno is not set) and lets loops with sqrtf vectorise (AdamW's ran scalar).
# -fno-trapping-math (values unchanged; vitc never unmasks FP exceptions) lets gcc vectorise loops whose float
# math sits under a condition (the clamps of vt_expf in softmax over other axes and in the scalar fallbacks of
# mathfn.h): without AVX-512's masked instructions it would not, and GELU, then scalar code, ran 13.6 instead of
# 1.5 ns per element on an AVX2 Zen 3 (2026-11-26).
OPT       ?= -O3 -march=native
FP_FLAGS  := -fno-math-errno -fno-trapping-math
CFLAGS    := $(WARN) $(OPT) $(FP_FLAGS) -fopenmp -Iinclude $(PKG_CFLAGS)
# oneDNN (libdnnl-dev) has no pkg-config file in Debian 12.
LDLIBS     = $(PKG_LIBS) -ldnnl -lm -fopenmp

NPROC     := $(shell nproc 2>/dev/null || echo 1)
SRC       := $(wildcard src/*/*.c)
OBJ       := $(SRC:%.c=build/%.o)
# The installed libraries: position-independent objects with hidden symbols; only the API (VITC_API in api.h) is
# exported. The API runs inference, so the trainer (and with it OpenMPI) stays out of them: they need no libmpi.
TRAIN_SRC := src/train/trainer.c src/train/rundir.c src/train/data.c src/train/dist.c src/train/recipe.c
PIC_OBJ   := $(filter-out $(TRAIN_SRC:%.c=build-pic/%.o),$(SRC:%.c=build-pic/%.o))
LIB_PKGS  := $(filter-out ompi-c,$(PKGS))
LIB_LIBS   = $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null) -ldnnl -lm -fopenmp
# The version lives in one place, include/vitc/api.h (VITC_VERSION_*); the SONAME follows its major number.
HASH := \#
api_version = $(shell sed -n 's/^$(HASH)[ \t]*define[ \t][ \t]*VITC_VERSION_$(1)[ \t][ \t]*\([0-9][0-9]*\).*/\1/p' include/vitc/api.h)
SOVERSION := $(call api_version,MAJOR)
VERSION   := $(SOVERSION).$(call api_version,MINOR).$(call api_version,PATCH)
ifneq ($(words $(subst ., ,$(VERSION))),3)
$(error cannot read VITC_VERSION_MAJOR, _MINOR and _PATCH from include/vitc/api.h)
endif
SHLIB     := build/libvitc.so.$(VERSION)
PUBLIC_H  := include/vitc/vitc.h include/vitc/api.h
PREFIX    ?= /usr/local
DESTDIR   ?=
BINDIR    ?= $(PREFIX)/bin
LIBDIR    ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
TEST_SRC  := $(wildcard tests/*.c)
# The CLI: main and the command table (tools/vitc.c), the commands and their shared parts (tools/cli/).
CLI_SRC   := tools/vitc.c $(wildcard tools/cli/*.c)
CLI_H     := $(wildcard tools/cli/*.h)
TEST_OBJ  := $(TEST_SRC:%.c=build/%.o)
ASAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
# Two builds under ASan + UBSan: build-asan/ for the target's baseline ISA (the scalar code, as on a CPU without AVX2)
# and build-asan-vec/ with -march=native (the AVX2 / AVX-512 kernels users run).
ASAN_OBJ  := $(SRC:%.c=build-asan/%.o) $(TEST_SRC:%.c=build-asan/%.o)
ASAN_VEC_OBJ := $(ASAN_OBJ:build-asan/%=build-asan-vec/%)
ASAN_CC    = $(CC) $(WARN) $(ASAN_FLAGS) $(FP_FLAGS) -fopenmp -Iinclude -Itests $(PKG_CFLAGS)
# Every source compiled (not linked or run) for the two vector ISAs vitc has kernels for, AVX2 (x86-64-v3) and
# AVX-512 (x86-64-v4), under -Werror: the paths of the ISA this machine lacks are compiled too. x86-64 hosts only.
ISA_LEVELS := v3 v4
ISA_OBJ   := $(foreach v,$(ISA_LEVELS),$(SRC:%.c=build-isa/$(v)/%.o) $(TEST_SRC:%.c=build-isa/$(v)/%.o))
ISA_CHECK := $(if $(filter x86_64,$(shell uname -m)),isa-check)
# The same sources compiled with clang for both levels (its own warnings, e.g. unused static inline functions of
# the other ISA's path), for `make test`; x86-64 hosts only. At -O0: clang's warnings come from its front end (the
# optimiser's remarks are -Wno-pass-failed's), and code generation still runs; it took 14 s instead of -O3's 48.
CLANG_OBJ := $(foreach v,$(ISA_LEVELS),$(SRC:%.c=build-clang/$(v)/%.o) $(TEST_SRC:%.c=build-clang/$(v)/%.o) \
               $(CLI_SRC:%.c=build-clang/$(v)/%.o))
CLANG_CHECK := $(if $(filter x86_64,$(shell uname -m)),clang-check)

# Debian packages needed to build, to run the tests, and to train (installed only when missing).
DEB_BUILD := build-essential pkg-config libopenblas-openmp-dev libdnnl-dev libcjson-dev libstb-dev zlib1g-dev \
             libpng-dev libjpeg62-turbo-dev libopenmpi-dev
DEB_TEST  := $(DEB_BUILD) openmpi-bin clang libclang-rt-14-dev libomp-14-dev python3-torch python3-numpy python3-pil \
             python3-torchvision dataset-fashion-mnist gnuplot-nox doxygen procps
DEB_DEMO  := $(DEB_BUILD) openmpi-bin dataset-fashion-mnist gnuplot-nox
DEB_DOCS  := doxygen

.PHONY: all deps deps-test deps-demo deps-docs test unit asan fuzz demo clean bench compare link-flags shared install \
        uninstall docs isa-check clang-check print-version
all: vitc

vitc: $(CLI_SRC:%.c=build/%.o) build/libvitc.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The CLI's objects also depend on its own header (the pattern rules below compile them).
$(CLI_SRC:%.c=build/%.o) $(CLI_SRC:%.c=build-asan/%.o): $(CLI_H)

# The vendor-rule benchmark (bench/vendor_rules.c); `make test` builds and runs it once (tests/cli/test_gemm.sh).
build/vendor_rules: bench/vendor_rules.c build/libvitc.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# hMHSA's fused attention against the plain one, op by op (bench/attn_ops.c); `make test` builds and runs it once
# (tests/cli/test_gemm.sh).
build/attn_ops: bench/attn_ops.c bench/bench_graph.h build/libvitc.a
	$(CC) $(CFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

# CSwin's attention core as one op against the op chain it replaces (bench/stripe_attn.c); `make test` builds and
# runs it once (tests/cli/test_gemm.sh).
build/stripe_attn: bench/stripe_attn.c bench/bench_graph.h build/libvitc.a
	$(CC) $(CFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

build/libvitc.a: $(OBJ)
	rm -f $@ && ar rcs $@ $^ # rebuilt whole: no stale members of renamed or removed sources

build/%.o: %.c $(wildcard include/vitc/*.h) $(wildcard src/*/*.h) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -c -o $@ $<

build-pic/%.o: %.c $(wildcard include/vitc/*.h) $(wildcard src/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

# libvitc.so.VERSION with SONAME libvitc.so.SOVERSION (and the two links), every dependency resolved at link time,
# its symbols versioned by src/api/libvitc.map.
$(SHLIB): $(PIC_OBJ) src/api/libvitc.map
	@mkdir -p build
	$(CC) -shared -Wl,-soname,libvitc.so.$(SOVERSION) -Wl,-z,defs -Wl,--version-script=src/api/libvitc.map -o $@ \
	  $(PIC_OBJ) $(LIB_LIBS)
	ln -sf libvitc.so.$(VERSION) build/libvitc.so.$(SOVERSION)
	ln -sf libvitc.so.$(SOVERSION) build/libvitc.so

# The installed static library: the PIC objects linked into one object whose hidden symbols are made local, so a
# program linking it statically sees the API only (build/libvitc.a keeps every symbol for the CLI and the tests).
build/dist/libvitc.a: $(PIC_OBJ)
	@mkdir -p build/dist
	ld -r -o build/dist/vitc_all.o $^
	objcopy --localize-hidden build/dist/vitc_all.o
	rm -f $@ && ar rcs $@ build/dist/vitc_all.o

# vitc.pc for PREFIX (written at install time, so each PREFIX gets its own): static linking needs Requires.private
# and Libs.private (oneDNN has no .pc file in Debian).
PC_LINES = 'prefix=$(PREFIX)' 'exec_prefix=$${prefix}' 'libdir=$(patsubst $(PREFIX)%,$${prefix}%,$(LIBDIR))' \
  'includedir=$(patsubst $(PREFIX)%,$${prefix}%,$(INCLUDEDIR))' '' 'Name: vitc' \
  'Description: Vision transformers in C: classify images, get features (libvitc embedding API)' \
  'Version: $(VERSION)' 'Requires.private: $(LIB_PKGS)' 'Libs: -L$${libdir} -lvitc' 'Libs.private: -ldnnl -lm -fopenmp' \
  'Cflags: -I$${includedir}'

shared: $(SHLIB) build/dist/libvitc.a

# The library version (api.h's VITC_VERSION_*), for scripts.
print-version:
	@echo $(VERSION)

# install and uninstall refuse install folders with blanks (the recipes and vitc.pc cannot quote them) before any
# command runs: a PREFIX "/opt/my vitc" had made /opt/my and ./vitc/... in the source tree
INSTALL_PATHS_OK = $(if $(filter 1,$(words x$(DESTDIR)$(PREFIX)$(BINDIR)$(LIBDIR)$(INCLUDEDIR)$(PKGCONFIGDIR))),,\
  $(error PREFIX, DESTDIR and the install folders must not hold blanks))

install: vitc $(SHLIB) build/dist/libvitc.a
	$(INSTALL_PATHS_OK)install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/vitc $(DESTDIR)$(PKGCONFIGDIR)
	install -m 755 vitc $(DESTDIR)$(BINDIR)/vitc
	install -m 644 build/dist/libvitc.a $(DESTDIR)$(LIBDIR)/libvitc.a
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/libvitc.so.$(VERSION)
	ln -sf libvitc.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libvitc.so.$(SOVERSION)
	ln -sf libvitc.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libvitc.so
	install -m 644 $(PUBLIC_H) $(DESTDIR)$(INCLUDEDIR)/vitc/
	printf '%s\n' $(PC_LINES) > $(DESTDIR)$(PKGCONFIGDIR)/vitc.pc
	@# the dynamic linker's cache, for programs linked with libvitc.so (a system prefix, as root, not staged)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

uninstall:
	$(INSTALL_PATHS_OK)rm -f $(DESTDIR)$(BINDIR)/vitc $(DESTDIR)$(LIBDIR)/libvitc.a $(DESTDIR)$(LIBDIR)/libvitc.so \
	  $(DESTDIR)$(LIBDIR)/libvitc.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libvitc.so.$(VERSION) \
	  $(addprefix $(DESTDIR)$(INCLUDEDIR)/vitc/,$(notdir $(PUBLIC_H))) $(DESTDIR)$(PKGCONFIGDIR)/vitc.pc
	-rmdir $(DESTDIR)$(INCLUDEDIR)/vitc 2>/dev/null

# The API reference from the public headers' comments (docs/Doxyfile); any Doxygen warning fails the build.
docs: deps-docs
	@mkdir -p build/docs
	{ cat docs/Doxyfile; echo 'PROJECT_NUMBER = $(VERSION)'; } | doxygen - # the version from one place

build-asan/%.o: %.c $(wildcard include/vitc/*.h) $(wildcard src/*/*.h) $(wildcard tests/*.h) $(wildcard tests/faults/*.h)
	@mkdir -p $(dir $@)
	$(ASAN_CC) -c -o $@ $<

# build-isa/LEVEL/path.o: path.c for -march=x86-64-LEVEL.
define isa_rule
build-isa/$(1)/%.o: %.c $(wildcard include/vitc/*.h) $(wildcard src/*/*.h) $(wildcard tests/*.h)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(WARN) -O3 -march=x86-64-$(1) $$(FP_FLAGS) -fopenmp -Iinclude -Itests $$(PKG_CFLAGS) -c -o $$@ $$<
endef
$(foreach v,$(ISA_LEVELS),$(eval $(call isa_rule,$(v))))

isa-check: $(ISA_OBJ)

# build-clang/LEVEL/path.o: path.c compiled by clang for -march=x86-64-LEVEL.
define clang_rule
build-clang/$(1)/%.o: %.c $(wildcard include/vitc/*.h) $(wildcard src/*/*.h) $(wildcard tests/*.h) $(CLI_H)
	@mkdir -p $$(dir $$@)
	clang $$(WARN) -Wno-pass-failed -O0 -march=x86-64-$(1) $$(FP_FLAGS) -fopenmp -Iinclude -Itests $$(PKG_CFLAGS) \
	  -c -o $$@ $$<
endef
$(foreach v,$(ISA_LEVELS),$(eval $(call clang_rule,$(v))))

clang-check: $(CLANG_OBJ)

build-asan-vec/%.o: %.c $(wildcard include/vitc/*.h) $(wildcard src/*/*.h) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(ASAN_CC) -march=native -c -o $@ $<

build/unit: $(TEST_OBJ) build/libvitc.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The CLI under ASan + UBSan, for tests/cli/test_asan.sh (a short training run and the main commands).
build-asan/vitc: $(CLI_SRC:%.c=build-asan/%.o) $(SRC:%.c=build-asan/%.o)
	$(CC) $(ASAN_FLAGS) -o $@ $^ $(LDLIBS)

build-asan/unit: $(ASAN_OBJ)
	$(CC) $(ASAN_FLAGS) -o $@ $^ $(LDLIBS)

build-asan-vec/unit: $(ASAN_VEC_OBJ)
	$(CC) $(ASAN_FLAGS) -o $@ $^ $(LDLIBS)

# Allocation failures through the API and the trainer, under ASan + UBSan (tests/faults/alloc.c): the linker sends
# vitc's own malloc, calloc, realloc and aligned_alloc calls to the test's wrappers, which fail each one in turn.
build-asan/alloc_faults: build-asan/tests/faults/alloc.o build-asan/tests/faults/faults.o build-asan/tests/shrink.o \
	  $(SRC:%.c=build-asan/%.o)
	$(CC) $(ASAN_FLAGS) -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc -o $@ $^ $(LDLIBS)

# Write failures in every file vitc writes, under ASan + UBSan (tests/faults/io.c): the linker sends vitc's mkstemp,
# fflush, fsync, fclose and rename calls to the test's wrappers, which fail each one in turn, and its pread calls to
# one that can poison a weights file's second reading.
build-asan/io_faults: build-asan/tests/faults/io.o build-asan/tests/faults/faults.o $(SRC:%.c=build-asan/%.o)
	$(CC) $(ASAN_FLAGS) -Wl,--wrap=mkstemp,--wrap=fflush,--wrap=fsync,--wrap=fclose,--wrap=rename,--wrap=pread -o $@ $^ \
	  $(LDLIBS)

# Installs Debian packages from the list given in PKGLIST when any is not installed (a package removed with its
# configuration kept counts as missing); as root, or through sudo with the non-interactive front end kept.
define apt_install
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; fi
endef

deps:
	$(call apt_install,$(DEB_BUILD))
deps-test:
	$(call apt_install,$(DEB_TEST))
deps-demo:
	$(call apt_install,$(DEB_DEMO))
deps-docs:
	$(call apt_install,$(DEB_DOCS))

unit: build/unit
	./build/unit

asan: build-asan/unit build-asan-vec/unit
	ASAN_OPTIONS=detect_leaks=1 ./build-asan/unit
	ASAN_OPTIONS=detect_leaks=1 ./build-asan-vec/unit

# The build on every core (make test alone would run one compiler at a time); the parts: tests/run_all.sh.
test: deps-test
	$(MAKE) --no-print-directory -j$(NPROC) vitc build/unit build-asan/unit build-asan-vec/unit build-asan/vitc \
	  build-asan/alloc_faults build-asan/io_faults fuzz-build shared \
	  build/vendor_rules build/attn_ops build/stripe_attn $(ISA_CHECK) $(CLANG_CHECK)
	@bash tests/run_all.sh

demo: deps-demo
	$(MAKE) --no-print-directory -j$(NPROC) vitc
	bash tools/demo.sh

# Trains the small Fashion-MNIST hosts (plain ViT, 2-stage Swin) with each block; writes runs/compare/compare.md
# (~30 min on 2 cores).
compare: deps-test
	$(MAKE) --no-print-directory vitc
	/usr/bin/python3 bench/compare_blocks.py --epochs 3 --train-subset 15000

# PyTorch vs vitc throughput, DeiT-T/S and the hierarchical hosts (Swin-T, FLatten-Swin-T, PVTv2-b1, FLatten-PVTv2-b1,
# CSwin-T, Next-ViT-S and its hMHSA + cFFN variant), batch 1 and 16, inference and training (over an hour on 2 cores).
bench: deps-test
	$(MAKE) --no-print-directory vitc
	/usr/bin/python3 bench/compare_torch.py

clean:
	rm -rf build build-asan build-asan-vec build-isa build-clang build-pic build-fuzz vitc

# The compiler and linker flags a C program needs with build/libvitc.a (the reference tests' C drivers use them).
link-flags:
	@echo $(PKG_CFLAGS) $(LDLIBS)

# Fuzzing with libFuzzer (clang; ASan+UBSan): the strict safetensors reader, the image path (decoders +
# preprocessing), and the model options weight files record (parsed, configured, the model's shapes built: the library
# compiled for libFuzzer into build-fuzz/, without the trainer). `make fuzz` (or one target: `make fuzz-safetensors`,
# `make fuzz-image`, `make fuzz-model-options`) runs each target
# FUZZ_SECONDS (default 20) s on a seed corpus in build/fuzz_corpus_* and prints "fuzz <target>: ok (N runs)" or
# "fuzz <target>: FAILED ..." (exit 1). FUZZ_SECONDS=3600 for a long run.
FUZZ_SECONDS ?= 20
FUZZ_CC := clang $(WARN) -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Iinclude $(PKG_CFLAGS)
# -Wno-pass-failed: at -O1 under the sanitizers clang cannot vectorise the `omp simd` loops (an optimiser remark)
FUZZ_LIB_CC := clang $(WARN) -Wno-pass-failed -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
  -fno-sanitize-recover=all $(FP_FLAGS) -fopenmp -Iinclude $(PKG_CFLAGS)
FUZZ_LIB_OBJ := $(filter-out $(TRAIN_SRC:%.c=build-fuzz/%.o),$(SRC:%.c=build-fuzz/%.o))
.PHONY: fuzz-build fuzz-safetensors fuzz-image fuzz-model-options
fuzz-build: build/fuzz_safetensors build/fuzz_image build/fuzz_model_options

build-fuzz/%.o: %.c $(wildcard include/vitc/*.h) $(wildcard src/*/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_LIB_CC) -c -o $@ $<

build/fuzz_model_options: fuzz/fuzz_model_options.c $(FUZZ_LIB_OBJ)
	@mkdir -p build
	$(FUZZ_CC) -fopenmp -o $@ $^ $(LIB_LIBS)

build/fuzz_safetensors: fuzz/fuzz_safetensors.c src/io/safetensors.c src/io/fileio.c src/core/error.c include/vitc/*.h
	@mkdir -p build
	$(FUZZ_CC) -o $@ fuzz/fuzz_safetensors.c src/io/safetensors.c src/io/fileio.c src/core/error.c $(PKG_LIBS) -lm

build/fuzz_image: fuzz/fuzz_image.c src/io/decode.c src/io/image.c src/io/fileio.c src/core/error.c include/vitc/*.h
	@mkdir -p build
	$(FUZZ_CC) -o $@ fuzz/fuzz_image.c src/io/decode.c src/io/image.c src/io/fileio.c src/core/error.c $(PKG_LIBS) -lm

build/image_seeds: fuzz/image_seeds.c
	@mkdir -p build
	$(CC) -O1 $(PKG_CFLAGS) -o $@ $< $(PKG_LIBS)

# Runs build/fuzz_$(1) on corpus $(2) with extra libFuzzer flags $(3).
define run_fuzz
	@mkdir -p build/fuzz_artifacts
	@if ./build/fuzz_$(1) -max_total_time=$(FUZZ_SECONDS) $(3) -artifact_prefix=build/fuzz_artifacts/$(1)- \
	    $(2) > build/fuzz_$(1).log 2>&1; then \
	  runs=$$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' build/fuzz_$(1).log | tail -n 1); \
	  echo "fuzz $(1): ok ($${runs:-?} runs)"; \
	else \
	  tail -n 30 build/fuzz_$(1).log; echo "fuzz $(1): FAILED (log: build/fuzz_$(1).log, crash inputs: build/fuzz_artifacts/)"; exit 1; \
	fi
endef

fuzz: fuzz-safetensors fuzz-image fuzz-model-options

# Seeds: every 7th model (the first byte) with options of the forms vitc records.
fuzz-model-options: build/fuzz_model_options
	@mkdir -p build/fuzz_corpus_model_options && i=0 && while [ $$i -lt 96 ]; do \
	  printf "\\$$(printf %03o $$i)--img-size 64 --num-classes 3 --depths 2 --dims 32 --heads 2" \
	    > build/fuzz_corpus_model_options/seed$$i; i=$$((i + 7)); done
	$(call run_fuzz,model_options,build/fuzz_corpus_model_options,-dict=fuzz/model_options.dict -max_len=256)

fuzz-safetensors: build/fuzz_safetensors
	@sh fuzz/make_corpus.sh build/fuzz_corpus
	$(call run_fuzz,safetensors,build/fuzz_corpus,-dict=fuzz/safetensors.dict)

fuzz-image: build/fuzz_image build/image_seeds
	@mkdir -p build/fuzz_corpus_image && ./build/image_seeds build/fuzz_corpus_image
	$(call run_fuzz,image,build/fuzz_corpus_image,-max_len=65536)
