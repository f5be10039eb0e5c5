# Makefile: builds ./train (CPU backend always; the CUDA backend when nvcc is found and kernels/cuda exists),
# the tests (make test), the fuzz harnesses (make fuzz, make fuzz-ci) and the datasets (make data, make data-code).
# SANITIZE=1 builds the trainer and the CPU tests with AddressSanitizer + UndefinedBehaviorSanitizer into build-san/
# (CPU only), and make test runs the suite on those.

CC      ?= gcc
SANITIZE ?= 0
ifeq ($(SANITIZE),1)
  override USE_CUDA := 0
  BUILD     := build-san
  TRAIN_BIN := $(BUILD)/train
  CFLAGS    := -O2 -g -march=native -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  # The runtimes linked statically: only then does UBSan (beside ASan) write its reports to UBSAN_OPTIONS' log_path.
  LDLIBS    += -static-libasan -static-libubsan
else
  BUILD     := build
  TRAIN_BIN := train
endif
CFLAGS  ?= -O3 -march=native
CFLAGS  += -std=c11 -fopenmp -pthread -Wall -Wextra -Wno-unused-parameter -I. -D_GNU_SOURCE
LDLIBS  += -lcjson -lz -lm -fopenmp -pthread
PYTHON  ?= python3
SHARED  ?= ../shared/data

# The CUDA backend is built when nvcc is on PATH and its sources exist (USE_CUDA=0 forces a CPU-only build): the
# unfused table (kernels/cuda), the GEMM-epilogue engine (kernels/cuda/gemm) and the fused table (kernels/cuda/fused).
NVCC    ?= nvcc
CUDA_SRC := $(wildcard kernels/cuda/*.cu kernels/cuda/*/*.cu)
USE_CUDA ?= $(if $(and $(shell command -v $(NVCC) 2>/dev/null),$(CUDA_SRC)),1,0)

# The library, lowest layer first (tests/test_layout.sh checks the include direction): util/ (file-system helpers),
# data/ (shards, tokenizer, meta.json), kernels/ (the operation API's host helpers) and kernels/cpu/, model/
# (config, model, optimizer, sampler, the training step), persist/ (checkpoints, state.bin, safetensors, Hugging
# Face import/export, the run directory). The C files under kernels/cuda/*/ are host arithmetic that every build
# has (the GEMM engine's config, which the CPU tests check).
LIB_SRC := $(wildcard util/*.c) $(wildcard data/*.c) $(wildcard kernels/*.c) $(wildcard kernels/cpu/*.c) \
           $(wildcard kernels/cuda/*/*.c) $(wildcard model/*.c) $(wildcard persist/*.c)
LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))
# The program's parts beside train.c (--help, --generate): linked into the trainer only, not into the library that
# the tests link, so nothing in the library can call them.
CLI_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard cli/*.c))
ifeq ($(USE_CUDA),1)
  # Hopper only (sm_90a); the libraries come from the toolkit next to nvcc.
  CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC))))
  NVCCFLAGS ?= -O3 -gencode arch=compute_90a,code=sm_90a -std=c++20 -lineinfo
  NVCCFLAGS += -I. -DWITH_CUDA -Xcompiler -Wall -Xptxas -warn-spills
  CFLAGS  += -DWITH_CUDA
  LIB_OBJ += $(patsubst %.cu,$(BUILD)/%.o,$(CUDA_SRC))
  LDLIBS  += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib \
             -lcudart -lcublas -lcublasLt -lcurand -lstdc++
  # The C GPU programs that call the CUDA runtime themselves (tests/gpu/bench_timing.h's users) need its headers.
  GPU_TEST_CFLAGS := -I$(CUDA_HOME)/include
endif

TEST_SRC  := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
# Programs the shell tests call (not tests themselves).
TEST_TOOLS := $(BUILD)/tests/verify_checkpoints
GPU_TEST_SRC  := $(wildcard tests/gpu/*.c)
GPU_TEST_BINS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(GPU_TEST_SRC))
# The engine's own GPU test and benchmark (CUDA C++ that instantiates the engine with its test programs).
ifeq ($(USE_CUDA),1)
  GPU_TEST_BINS += $(patsubst tests/gpu/%.cu,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/*.cu))
endif

.PHONY: all test test-gpu gpu-tests bench-decode fuzz fuzz-ci fuzz-build fuzz-seeds data data-code deps clean
all: $(TRAIN_BIN)

# The C compiler and its flags (with -DWITH_CUDA or not) as the C objects were built with: rewritten when they change,
# so that e.g. `make USE_CUDA=0 test` followed by `make` rebuilds them instead of linking a CPU-only ./train.
C_CONFIG := $(BUILD)/c-config
C_CONFIG_NOW := $(CC) $(CFLAGS)
$(shell mkdir -p $(BUILD); [ "$$(cat $(C_CONFIG) 2>/dev/null)" = "$(C_CONFIG_NOW)" ] || echo "$(C_CONFIG_NOW)" > $(C_CONFIG))

$(BUILD)/%.o: %.c $(C_CONFIG) $(wildcard */*.h */*/*.h */*/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu $(wildcard kernels/*.h kernels/cuda/*.h kernels/cuda/*.cuh kernels/cuda/*/*.h kernels/cuda/*/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/libtrainer.a: $(LIB_OBJ)
	ar rcs $@ $^

$(TRAIN_BIN): $(BUILD)/train.o $(CLI_OBJ) $(BUILD)/libtrainer.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libtrainer.a $(wildcard tests/*.h)
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) $< $(BUILD)/libtrainer.a -o $@ $(LDLIBS)

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(BUILD)/libtrainer.a $(wildcard tests/*.h) $(wildcard tests/gpu/*.h)
	@mkdir -p $(BUILD)/tests/gpu
	$(CC) $(CFLAGS) $(GPU_TEST_CFLAGS) $< $(BUILD)/libtrainer.a -o $@ $(LDLIBS)

$(BUILD)/tests/gpu/%: tests/gpu/%.cu $(BUILD)/libtrainer.a $(wildcard kernels/cuda/*.cuh kernels/cuda/*/*.cuh kernels/cuda/*/*.h) tests/test_util.h $(wildcard tests/gpu/*.h)
	@mkdir -p $(BUILD)/tests/gpu
	$(NVCC) $(NVCCFLAGS) $< $(BUILD)/libtrainer.a -o $@ -Xlinker -rpath,$(CUDA_HOME)/lib64:$(CUDA_HOME)/lib -lcublas -lcurand

# Every CPU test; the last line is "N passed, N failed". With SANITIZE=1 the suite runs the sanitized binaries: the
# runner counts each sanitizer report as a failure, and the scripts shorten their long runs (saying so).
test: $(TRAIN_BIN) $(TEST_BINS) $(TEST_TOOLS)
	TRAIN=$(TRAIN_BIN) BUILD_DIR=$(BUILD) SANITIZE=$(SANITIZE) bash tests/run_cpu_tests.sh

# The GPU tests and benchmark programs, built without running them (what CI can do without a GPU).
gpu-tests: $(TRAIN_BIN) $(GPU_TEST_BINS)
ifneq ($(USE_CUDA),1)
	@echo "gpu-tests: no CUDA build (nvcc not found or USE_CUDA=0)"; exit 1
endif

# Every GPU test, on a machine with a Hopper GPU; the last line is "N passed, N failed".
test-gpu: gpu-tests
	bash tests/gpu/run_gpu_tests.sh

# The time of a generated token at positions 32 and 240 of the tiny config (context 256) on the CPU, through the KV
# cache and through a full recompute (tests/bench_decode.c): a table, and results/bench_decode_cpu.json.
bench-decode: $(BUILD)/tests/bench_decode
	$(BUILD)/tests/bench_decode configs/llama3_tiny.json cpu results/bench_decode_cpu.json 32 240

# The fuzz harnesses (tests/fuzz): libFuzzer with ASan and UBSan, on the CPU sources built again with clang (and its
# OpenMP; the harnesses run with one thread).
# make fuzz runs each for FUZZ_SECONDS (or FUZZ_RUNS executions, when set, if sooner), one at a time; make fuzz-ci
# is CI's short run. Both fail on any finding (a crash, a leak, undefined behaviour, a broken property) and leave it
# in build/fuzz/findings.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CI_SECONDS ?= 20
FUZZ_CFLAGS  := -g -O1 -fno-omit-frame-pointer -std=c11 -Wall -Wextra -Wno-unused-parameter -Wno-pass-failed -fopenmp \
                -I. -D_GNU_SOURCE -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_HARNESSES := config flags safetensors hf_import state state_crc dataloader tokenizer encode log
FUZZ_BINS := $(patsubst %,build/fuzz/fuzz_%,$(FUZZ_HARNESSES))
FUZZ_LIB_OBJ := $(patsubst %.c,build/fuzz/obj/%.o,$(LIB_SRC))
FUZZ_HEADERS := $(wildcard tests/fuzz/*.h tests/*.h)

build/fuzz/obj/%.o: %.c $(wildcard */*.h */*/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

build/fuzz/libtrainer.a: $(FUZZ_LIB_OBJ)
	ar rcs $@ $^

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c build/fuzz/libtrainer.a $(FUZZ_HEADERS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< build/fuzz/libtrainer.a -o $@ -lcjson -lz -lm

# The state harness once more, fixing the CRCs of its input before it reads it.
build/fuzz/fuzz_state_crc: tests/fuzz/fuzz_state.c build/fuzz/libtrainer.a $(FUZZ_HEADERS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -DFUZZ_FIX_CRCS -fsanitize=fuzzer $< build/fuzz/libtrainer.a -o $@ -lcjson -lz -lm

# The seed generator is a normal program on the normal library.
build/fuzz/fuzz_seeds: tests/fuzz/fuzz_seeds.c build/libtrainer.a $(FUZZ_HEADERS)
	@mkdir -p build/fuzz
	$(CC) $(CFLAGS) $< build/libtrainer.a -o $@ $(LDLIBS)

fuzz-build: $(FUZZ_BINS)

# The seed corpora, from real files: checkpoints of the fuzz model, configs/*.json, token shards that
# scripts/prepare_data.py makes from the start of TinyShakespeare (byte and Llama 3), the log and config of a 3-step
# ./train run on them, the Llama 3 tokenizer.
fuzz-seeds: build/fuzz/fuzz_seeds train
	SHARED=$(SHARED) PYTHON=$(PYTHON) bash tests/fuzz/make_seeds.sh

fuzz: fuzz-build fuzz-seeds
	SHARED=$(SHARED) FUZZ_RUNS=$(FUZZ_RUNS) bash tests/fuzz/run_fuzzers.sh $(FUZZ_SECONDS) $(FUZZ_HARNESSES)

fuzz-ci: fuzz-build fuzz-seeds
	SHARED=$(SHARED) bash tests/fuzz/run_fuzzers.sh $(FUZZ_CI_SECONDS) $(FUZZ_HARNESSES)

# Build and test dependencies on a fresh Debian/Ubuntu machine.
deps:
	bash scripts/install_deps.sh

# The default dataset: TinyShakespeare, byte-level (the tiny config) and Llama 3 tokens (the 1B config).
# Takes the local copies in $(SHARED) when they exist; otherwise the script downloads the text. --overwrite: prepared
# again each time, over whatever an earlier version of the script left there.
data:
	$(PYTHON) scripts/prepare_data.py --tokenizer byte --out data/tinyshakespeare_byte --overwrite \
	    $(if $(wildcard $(SHARED)/tinyshakespeare.txt),--text $(SHARED)/tinyshakespeare.txt)
	@if [ -f "$(SHARED)/llama3_tokenizer.model" ] || [ -n "$(TOKENIZER)" ]; then \
	    $(PYTHON) scripts/prepare_data.py --tokenizer $(or $(TOKENIZER),$(SHARED)/llama3_tokenizer.model) \
	        --out data/tinyshakespeare_llama3 --overwrite \
	        $(if $(wildcard $(SHARED)/tinyshakespeare.txt),--text $(SHARED)/tinyshakespeare.txt); \
	else echo "no Llama 3 tokenizer file (set TOKENIZER=path/to/tokenizer.model): skipped the Llama 3 shards"; fi

# The second built-in dataset, of code: the sources of Python's standard library on this machine (the .py files under
# $(PYTHON)'s stdlib directory, its site-packages left out), each file one document of Llama 3 tokens (BOS, the file,
# EOS), 10% of the files drawn at random for validation (seed 0), the files that are not UTF-8 left out and listed. On
# this project's 2-core machine (Python 3.11.7: 1,790 files, 34 MB; 4 not UTF-8) it took 2.4-2.7 s and made 1,758
# documents, 6,787,074 train tokens and 871,601 val: a 300-step 1B run at 4 x 2048 (2.46 M tokens) reads none twice.
STDLIB = $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
CODE_OUT ?= data/pystdlib_llama3
data-code:
	$(PYTHON) scripts/prepare_data.py --tokenizer $(or $(TOKENIZER),$(SHARED)/llama3_tokenizer.model) \
	    --out $(CODE_OUT) --overwrite --format txt --doc-per-file --eos --val-split random --skip-invalid \
	    --text $$(find $(STDLIB) \( -name site-packages -o -name dist-packages \) -prune -o -name '*.py' -print | LC_ALL=C sort)

clean:
	rm -rf build build-san train
