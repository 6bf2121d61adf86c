# Thin wrapper over CMake. `make run` and `make test` work on a fresh Debian 12 machine as root.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build build-nextn run test asan clean

deps:
	@if [ "$$(id -u)" = 0 ]; then scripts/install-deps.sh; else echo "note: not root; skipping scripts/install-deps.sh"; fi

# Each step prints its wall time (CI's log shows where its minutes go; dash
# has $$(( )) but no `time` keyword, hence date +%s).
configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	@t=$$(date +%s); cmake --build $(BUILD) -j $(JOBS); rc=$$?; \
	  echo "== make build: cmake --build took $$(( $$(date +%s) - t )) s"; exit $$rc

# Only the binary: `make run` needs no test executable.
build-nextn: configure
	@t=$$(date +%s); cmake --build $(BUILD) -j $(JOBS) --target nextn; rc=$$?; \
	  echo "== make build-nextn: cmake --build --target nextn took $$(( $$(date +%s) - t )) s"; exit $$rc

# The main job on the shipped default model (models/nextn-code-15m): a code
# prompt continued by plain greedy decoding, then by MTP speculative decoding
# (the same text; the stats line gives tokens/s and per-position acceptance).
PROMPT ?= def fibonacci(n):
run: build-nextn
	@echo "== prompt: $(PROMPT)"
	@echo "== greedy (--draft none)"
	@$(BUILD)/nextn generate --prompt "$(PROMPT)" -n 48 --draft none
	@echo "== MTP speculative decoding (--draft mtp --block-size 3)"
	@$(BUILD)/nextn generate --prompt "$(PROMPT)" -n 48 --draft mtp --block-size 3

test: build
	@t=$$(date +%s); cd $(BUILD) && ctest --output-on-failure -j $(JOBS); rc=$$?; \
	  echo "== make test: ctest took $$(( $$(date +%s) - t )) s"; exit $$rc

# The tests again under AddressSanitizer + UBSan (optimised, with line tables
# only (-g1: file:line in every report, far less to compile and link than -g),
# so the whole exactness sweep fits in CI's time; CPU code only: there is no
# GPU to run the CUDA backend on).
# Not rerun under the sanitizers: the sampling-distribution tests (about 20 s
# each in the release build, several minutes each sanitized): tens of
# thousands of seeded draws through the same code the other sampled tests
# cover once; `make test` runs them.
ASAN_SKIP ?= Distribution|AWrongAcceptanceRuleFailsTheSameTest
asan: deps
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
	  -DNEXTN_SANITIZE=ON -DNEXTN_CUDA=OFF $(CMAKE_FLAGS)
	@t=$$(date +%s); cmake --build $(BUILD)-asan -j $(JOBS); rc=$$?; \
	  echo "== make asan: cmake --build took $$(( $$(date +%s) - t )) s"; exit $$rc
	@t=$$(date +%s); cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS) -E '$(ASAN_SKIP)'; rc=$$?; \
	  echo "== make asan: ctest took $$(( $$(date +%s) - t )) s"; exit $$rc


clean:
	rm -rf $(BUILD) $(BUILD)-asan
