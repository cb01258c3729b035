# Thin wrapper over CMake: the two commands of the README.
#   make test    build (CUDA when the toolkit is there; no GPU needed) and run every test;
#                GPU tests skip with their reason where there is no GPU
#   make bench   the main job: on a GPU the benchmarks; otherwise the dry backend and a small
#                CPU run, saying so
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

.PHONY: test bench build deps deps-bench clean

deps:
	@bash tools/install-deps.sh test

deps-bench:
	@bash tools/install-deps.sh bench

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

bench: deps-bench build
	bash bench/run_bench.sh $(BUILD)

clean:
	rm -rf $(BUILD)
