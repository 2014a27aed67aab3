# minke build.
#   make            CPU build of ./minke (CUDA added with CUDA=1 or `make cuda`)
#   make test       build and run every CPU test (tests/run.sh)
#   make asan       ASan+UBSan build of ./minke-asan and the test binaries
#   make cuda       ./minke with the CUDA backend (needs nvcc)
#   make test-cuda  CUDA checks (run on a GPU machine)
#   make fuzz       libFuzzer harness for the GGUF reader (clang)
# Sources are discovered: src/*/*.c into libminke, tools/*.c into the CLI,
# tests/test_*.c into one test binary each, src/cuda/*.cu with CUDA=1.

CC      ?= cc
CUDA    ?= 0
NVCC    ?= nvcc
CUDA_HOME ?= /usr/local/cuda
OPT     ?= -O2
CFLAGS  += -std=gnu11 $(OPT) -g -Wall -Wextra -Wno-unused-parameter -pthread -Iinclude -Isrc -MMD -MP
ARCH_FLAGS ?= -march=x86-64-v2 -mavx2 -mfma -mf16c
LDLIBS  += -ljansson -lmicrohttpd -ledit -lm -lpthread

BUILD   ?= build
BIN     ?= minke
ifeq ($(CUDA),1)
BUILD   := build/cuda
CFLAGS  += -DMINKE_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS  += -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart -lstdc++ -ldl -lrt
# --threads 0: nvcc compiles the three targets of a file in parallel (cu_mmq.cu, the
# longest file, 157 s -> 84 s on 2 cores)
NVCCFLAGS ?= -O3 -std=c++17 -Iinclude -Isrc -DMINKE_CUDA=1 -lineinfo --threads 0 \
  -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80 \
  -gencode arch=compute_80,code=compute_80 -Xcompiler -Wall,-Wno-unused-parameter
endif

LIB_SRC   := $(sort $(wildcard src/*/*.c))
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(sort $(wildcard tests/test_*.c))
CU_SRC    := $(if $(filter 1,$(CUDA)),$(sort $(wildcard src/cuda/*.cu)),)

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/%.o)
CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
CUDA_TEST_BIN := $(patsubst tests/cuda/%.c,$(BUILD)/tests/cuda/%,$(sort $(wildcard tests/cuda/*.c)))
LIB       := $(BUILD)/libminke.a

.PHONY: all test asan cuda test-cuda fuzz clean tests cuda-tests
all: $(BIN)

$(BIN): $(TOOL_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $(TOOL_OBJ) $(LIB) $(LDLIBS)

$(LIB): $(LIB_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ARCH_FLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/tests/%: tests/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ARCH_FLAGS) -o $@ $< $(LIB) $(LDLIBS)

tests: $(BIN) $(TEST_BIN)

test: tests
	MINKE_BUILD=$(BUILD) MINKE_BIN=$(abspath $(BIN)) ./tests/run.sh

asan:
	$(MAKE) BUILD=build/asan BIN=minke-asan OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined" tests

cuda:
	$(MAKE) CUDA=1 BIN=$(BIN) $(BIN) cuda-tests

# CUDA check programs (tests/cuda/*.c), built only in CUDA=1 builds
cuda-tests: $(CUDA_TEST_BIN)
$(BUILD)/tests/cuda/%: tests/cuda/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ARCH_FLAGS) -o $@ $< $(LIB) $(LDLIBS)

test-cuda: cuda
	MINKE_BUILD=build/cuda MINKE_BIN=$(abspath $(BIN)) ./tests/run-cuda.sh

FUZZ_SRC := src/gguf/gguf.c src/model/config.c src/model/layout.c $(wildcard src/quant/*.c)
fuzz:
	$(MAKE) -C . build/fuzz/fuzz_gguf build/fuzz/make_seeds
build/fuzz/fuzz_gguf: tests/fuzz/fuzz_gguf.c $(FUZZ_SRC)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -Iinclude -Isrc -fsanitize=fuzzer,address,undefined $(ARCH_FLAGS) -o $@ tests/fuzz/fuzz_gguf.c $(FUZZ_SRC) -lm
build/fuzz/make_seeds: tests/fuzz/make_seeds.c $(FUZZ_SRC)
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -g -O1 -Iinclude -Isrc $(ARCH_FLAGS) -o $@ tests/fuzz/make_seeds.c $(FUZZ_SRC) -lm

clean:
	rm -rf build minke minke-asan

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(CU_OBJ:.o=.d)
