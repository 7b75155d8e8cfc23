# The two set-up commands of the README: `make demo` and `make test`.
# Each installs what it needs (scripts/install-deps.sh, idempotent).
BUILD ?= build
JOBS ?= 2
# ARCH=x86-64-v2 (or x86-64-v3) builds a binary for other x86-64 CPUs
# instead of this one's (native).  WERROR=ON turns warnings into errors, as
# CI does; a user's build only prints them.
ARCH ?= native
WERROR ?= OFF
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DCL_WERROR=$(WERROR) \
  -DCL_ARCH=$(ARCH)

.PHONY: all deps build demo test test-sanitize format format-check clean \
  install

all: build

deps:
	bash scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# Installs the headers, libclassic.a and libclassic.so, the classic binary,
# classic.pc and the Python module under PREFIX (include/classic/, lib/,
# lib/python3/dist-packages/, bin/).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: build
	bash scripts/demo.sh $(BUILD)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The suite under ASan + UBSan in $(SAN_BUILD), optimized with debug info
# (-O2 -g: the sanitizers see the same accesses, and the suite runs in
# minutes instead of the Debug build's most of an hour); docs/reliability.md
# says what runs and why.  Left out: amp.o2_learns_like_o0, four resnet18
# trainings whose bf16 paths the onednn.amp_* tests run sanitized in
# seconds; train.fashion_mnist_subset_accuracy, 3 epochs of 4096 images
# (9-10 minutes sanitized) through the same training loop that
# train.overfit_smoke and the resume tests run sanitized, and whose number
# `make test` checks.  The mpi tests run in a second pass with leak detection off:
# Open MPI never frees what MPI_Init allocates, and LeakSanitizer reports it
# (no frame in classic).  Address and UB checks stay.
SAN_BUILD ?= build-sanitize
SAN_TYPE ?= RelWithDebInfo
test-sanitize: deps
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=$(SAN_TYPE) \
	  -DCL_WERROR=$(WERROR) -DCL_ARCH=$(ARCH) -DCL_SANITIZE=ON >/dev/null
	cmake --build $(SAN_BUILD) -j $(JOBS)
	ctest --test-dir $(SAN_BUILD) --output-on-failure -j $(JOBS) -LE mpi \
	  -E '^amp\.|^train\.fashion_mnist_subset_accuracy$$'
	ASAN_OPTIONS=detect_leaks=0 ctest --test-dir $(SAN_BUILD) \
	  --output-on-failure -j $(JOBS) -L mpi

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

# Fails, naming the lines, if a C file is not as `make format` leaves it.
format-check: deps
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(SAN_BUILD)

# libFuzzer targets over every parser (clang, ASan+UBSan), then a short run
# of each on its corpus: FUZZ_SECONDS per target (tests/fuzz/ci.sh).
FUZZ_SECONDS ?= 20
.PHONY: fuzz
fuzz: deps
	bash tests/fuzz/ci.sh $(FUZZ_SECONDS)
