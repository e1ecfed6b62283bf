# Entry points. `make demo` and `make test` work on a fresh machine: both
# install whatever is missing first (scripts/install-deps.sh), then build.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
# Open MPI refuses to run as root without these; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1

DEMO_ARGS ?= --model gpt-tiny --data synthetic --steps 300 --batch-size 16 \
             --lr 3e-3 --warmup-steps 20 --lr-schedule cosine --log-every 25

.PHONY: all deps configure build demo test test-sanitize bench clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	$(BUILD_DIR)/bin/accel-host $(DEMO_ARGS)

# Each test's budget: a test without a limit of its own fails past
# TEST_BUDGET_S (the Python suites have theirs, tests/host/CMakeLists.txt).
# A fresh build directory gets the committed durations
# (tests/ctest_cost_data.txt), so ctest starts the longest tests first and
# both cores stay busy to the end; ctest keeps them current afterwards.
TEST_BUDGET_S ?= 120
test: build
	@mkdir -p $(BUILD_DIR)/Testing/Temporary
	@[ -f $(BUILD_DIR)/Testing/Temporary/CTestCostData.txt ] || \
	  cp tests/ctest_cost_data.txt $(BUILD_DIR)/Testing/Temporary/CTestCostData.txt
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout $(TEST_BUDGET_S)

# The whole suite once under AddressSanitizer + UndefinedBehaviorSanitizer,
# in its own build tree (not part of `make test` or CI: several times
# slower). Any report fails the test that triggered it: ASan aborts by
# default, UBSan is made to halt; LeakSanitizer skips only the third-party
# libraries listed (and justified) in tests/sanitize/lsan.supp. The options
# are exported to the build too, because gtest_discover_tests runs the test
# binaries while building. Figures: docs/benchmarks.md, "Sanitizer suite".
SANITIZE_DIR ?= build-asan
# -g1 (line tables only) is all a sanitizer report needs to name file and
# line, and it halves the build against -O2 -g's full debug information of
# LibTorch's headers; -O1 keeps the stacks honest. Time limits stretch 4x.
SANITIZE_OPT ?= -O1 -g1 -DNDEBUG
SANITIZE_ASAN := halt_on_error=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1
SANITIZE_ENV := ASAN_OPTIONS=$(SANITIZE_ASAN):detect_leaks=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitize/lsan.supp:print_suppressions=0
# Processes that initialise MPI run ASan and UBSan without LeakSanitizer:
# Open MPI 4.1 dlcloses the components it does not select while MPI_Init
# runs, so what they allocated is "<unknown module>" to the fast unwinder and no suppression can match it (the slow unwinder
# attributes every such leak to Open MPI but makes the suite 3.6x slower).
# docs/benchmarks.md, "Sanitizer suite", has the full-unwinding leak check
# of an accel-host run.
SANITIZE_ENV_RANKS := ACCEL_SANITIZED=1 ASAN_OPTIONS=$(SANITIZE_ASAN):detect_leaks=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The tests whose processes initialise MPI: the Python suites, the
# communication layer's tests under mpirun, the installed-SDK example run.
SANITIZE_RANK_TESTS := ^(python\.|comm\.mpi_n|comm\.collective_checks|sdk\.install_and_build_example)
test-sanitize: deps
	@cmake -S . -B $(SANITIZE_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DACCEL_SANITIZE=address,undefined \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_OPT)" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$(SANITIZE_OPT)" \
	  -DACCEL_TEST_TIMEOUT_SCALE=4 -DACCEL_BUILD_BENCH=OFF >/dev/null
	$(SANITIZE_ENV) nice -n 10 cmake --build $(SANITIZE_DIR) -j $(JOBS)
	cd $(SANITIZE_DIR) && $(SANITIZE_ENV) nice -n 10 ctest --output-on-failure -j $(JOBS) -E '$(SANITIZE_RANK_TESTS)' $(CTEST_ARGS)
	cd $(SANITIZE_DIR) && $(SANITIZE_ENV_RANKS) nice -n 10 ctest --output-on-failure -j $(JOBS) -R '$(SANITIZE_RANK_TESTS)' $(CTEST_ARGS)

bench: build
	bash bench/throughput.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
