# The two set-up commands of the README: `make demo` and `make test`.
# Each installs what it needs (scripts/install-deps.sh, idempotent).
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DCL_WERROR=ON

.PHONY: all deps build demo test test-sanitize format clean

all: build

deps:
	bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-sanitize: deps
	cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DCL_WERROR=ON \
	  -DCL_SANITIZE=ON >/dev/null
	cmake --build build-sanitize -j $(JOBS)
	ctest --test-dir build-sanitize --output-on-failure -j $(JOBS) -LE slow

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-sanitize

# libFuzzer targets over every parser (clang, ASan+UBSan), then a short run
# of each on its corpus: FUZZ_SECONDS per target (tests/fuzz/ci.sh).
FUZZ_SECONDS ?= 20
.PHONY: fuzz
fuzz: deps
	bash tests/fuzz/ci.sh $(FUZZ_SECONDS)
