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

.PHONY: all deps configure build demo test bench clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	$(BUILD_DIR)/bin/accel-host $(DEMO_ARGS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

bench: build
	bash bench/throughput.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
