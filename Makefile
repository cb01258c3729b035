# Thin wrapper over CMake: the two commands of the README.
#   make test    build (CUDA when the toolkit is there; no GPU needed) and run every test;
#                GPU tests skip with their reason where there is no GPU
#   make bench   the main job: on a GPU the benchmarks; otherwise the dry backend and a small
#                CPU run, saying so
#   make sanitize  ASan+UBSan build (CPU-only, build-asan) of the cpu and cli tests
#   make fuzz      libFuzzer harnesses of every parser (clang, build-fuzz): every committed seed,
#                  then FUZZ_SECONDS of fuzzing per harness (CI runs both after make test)
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# nvcc is often installed outside PATH.
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CMAKE_FLAGS ?=
ifneq ($(NVCC),)
CMAKE_FLAGS += -DCMAKE_CUDA_COMPILER=$(NVCC)
else
CMAKE_FLAGS += -DMEMOPT_CUDA=OFF
endif

.PHONY: test bench build deps deps-bench deps-fuzz sanitize fuzz clean

deps:
	@bash tools/install-deps.sh test

deps-bench:
	@bash tools/install-deps.sh bench

deps-fuzz:
	@bash tools/install-deps.sh fuzz

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

bench: deps-bench build
	bash bench/run_bench.sh $(BUILD)

# The fault-injection test tries every 7th allocation here (each run is ~5x slower under ASan).
sanitize: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMOPT_CUDA=OFF -DMEMOPT_SANITIZE=ON
	cmake --build build-asan -j $(JOBS)
	MEMOPT_TEST_FAULT_STRIDE=7 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-asan --output-on-failure -j $(JOBS) -L 'cpu|cli'

FUZZ_SECONDS ?= 20
fuzz: deps-fuzz
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMOPT_CUDA=OFF -DMEMOPT_SANITIZE=ON -DMEMOPT_FUZZ=ON \
	  -DMEMOPT_FUZZ_SECONDS=$(FUZZ_SECONDS)
	cmake --build build-fuzz -j $(JOBS) --target fuzz_cli fuzz_grid fuzz_catalog fuzz_csv
	ctest --test-dir build-fuzz --output-on-failure -j $(JOBS) -L fuzz

clean:
	rm -rf $(BUILD) build-asan build-fuzz
