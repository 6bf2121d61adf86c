# Thin wrapper over CMake. `make run` and `make test` work on a fresh Debian 12 machine as root.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps build run test asan clean

deps:
	@if [ "$$(id -u)" = 0 ]; then scripts/install-deps.sh; else echo "note: not root; skipping scripts/install-deps.sh"; fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# The main job on the shipped default model (models/nextn-code-15m): a code
# prompt continued by plain greedy decoding, then by MTP speculative decoding
# (the same text; the stats line gives tokens/s and per-position acceptance).
PROMPT ?= def fibonacci(n):
run: build
	@echo "== prompt: $(PROMPT)"
	@echo "== greedy (--draft none)"
	@$(BUILD)/nextn generate --prompt "$(PROMPT)" -n 48 --draft none
	@echo "== MTP speculative decoding (--draft mtp --block-size 3)"
	@$(BUILD)/nextn generate --prompt "$(PROMPT)" -n 48 --draft mtp --block-size 3

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The tests again under AddressSanitizer + UBSan (optimised, with debug info,
# so the whole exactness sweep fits in CI's time; CPU code only: there is no
# GPU to run the CUDA backend on).
asan: deps
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEXTN_SANITIZE=ON -DNEXTN_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS)


clean:
	rm -rf $(BUILD) $(BUILD)-asan
