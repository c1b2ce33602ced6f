# Entry points: `make demo` (local server + two workers) and `make test` (every test);
# `make bench` and `make frontier` (loss against bytes per method, ~12 min; SETTING=llama-10m
# TEXT=corpus for a LLaMA on BPE tokens, tables under bench/results/SETTING) are benchmarks.
# Both install missing Debian packages first and build in ./build.
BUILD ?= build
JOBS ?= $(shell nproc)
CCACHE := $(shell command -v ccache 2>/dev/null)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

.PHONY: deps build test demo bench frontier clean
deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

bench: build
	bench/run.sh $(BUILD)

SETTING ?= gpt-bytes
frontier: build
	/usr/bin/python3 bench/frontier.py --build $(BUILD) --setting $(SETTING) $(if $(TEXT),--text $(TEXT))

clean:
	rm -rf $(BUILD)
