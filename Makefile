# The front door. `make test` is what CI runs.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_GEN  := -G Ninja

.PHONY: all deps configure build test bench check demo demo-sim format clean

all: build

deps:
	@./scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

bench: build
	@$(BUILD)/bench/sched_bench --benchmark_counters_tabular=true
	@$(BUILD)/bench/sim_bench --benchmark_counters_tabular=true
	@$(BUILD)/bench/server_bench --all
	@$(BUILD)/bench/agent_bench --all
	@$(BUILD)/bench/cli_bench --all
	@$(BUILD)/bench/migration_bench --sizes 256,1024,4096 || echo "migration_bench: not run (it needs root and a working CRIU)"
	@scripts/agent-migration-bench.sh $(BUILD) 256,1024,4096
	@if [ -x $(BUILD)/bench/vgpu_bench ]; then $(BUILD)/bench/vgpu_bench --all; else echo "vgpu_bench: not built (no CUDA headers)"; fi

check: deps
	@cmake -S . -B $(BUILD_ASAN) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DCNLAB_SANITIZE=ON -DCNLAB_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS)

TRACES ?= ../shared/data/alibaba-openb-2023

# CNLab end to end on this machine: `cnlab dev` in the background, `cnlab run examples/train.py
# --gpu h100-25` with its output streamed and its artifacts downloaded, the cluster shown, then
# stopped. Simulated GPUs where the machine has none (announced as such).
demo: build
	@./scripts/demo.sh

# The scheduler against a real cluster trace: CNLab's placement beside BestFit and FGD on the
# Alibaba openb workload.
demo-sim: build
	@if [ -f $(TRACES)/openb_pod_list_default.csv ]; then \
	  $(BUILD)/cnlab sim alloc --nodes $(TRACES)/openb_node_list_gpu_node.csv \
	    --pods $(TRACES)/openb_pod_list_default.csv --policies bestfit,fgd,cnlab --seeds 42-45 --out out/demo-sim; \
	  echo "Chart: out/demo-sim/allocation.svg"; \
	else \
	  echo "make demo-sim: the trace $(TRACES)/openb_pod_list_default.csv is not here; set TRACES=<dir>."; \
	  exit 1; \
	fi

format:
	@find src tests bench -name '*.h' -o -name '*.cpp' | xargs clang-format -i

clean:
	@rm -rf $(BUILD) $(BUILD_ASAN)
