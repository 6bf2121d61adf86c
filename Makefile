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

# The main job on the shipped default model: MTP speculative greedy decoding.
run: build
	$(BUILD)/nextn generate --prompt-ids 764,2009,1185,347,498,393,1093,1155,785,1252 -n 24 --draft mtp --block-size 3 --json

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
