# bimodal's entry points. `make demo` and `make test` work on a fresh Debian 12 machine as root.
SHELL := /bin/bash
CARGO ?= cargo
CLANG_FORMAT ?= clang-format-19
# Each step of lint and test notes its time in target/ci-steps.tsv (.ci/run prints them).
STEP := tools/step.sh
# The one build `make test` runs everything from: its tests, images and guests (Cargo.toml).
TEST_PROFILE ?= ci
TEST_BIN := target/$(if $(filter dev,$(TEST_PROFILE)),debug,$(TEST_PROFILE))
C_SOURCES := $(wildcard bpf/*.c bpf/include/*.h testdata/fixtures/*.c)

.PHONY: all setup web build release demo test bench fuzz lint fmt clean images manifests

all: build

## setup: install the system packages and web tools bimodal needs (idempotent)
setup:
	$(STEP) setup tools/setup.sh

## web: build the web UI into web/dist (embedded into the server at build time)
web: setup
	$(STEP) web-build bash -c 'cd web && npm run build --silent'

## build: debug builds of the agent and server
build: web
	$(CARGO) build --workspace

## release: optimized binaries in target/release
release: web
	$(CARGO) build --release --workspace --bins

## demo: server with a managed ClickHouse and a fleet of eight agents on this machine (three slow); prints the UI URL and the comparison
demo: release
	tools/demo.sh

## images: OCI images of the agent and the server, built by buildah without a Docker daemon
##         (tools/images.sh; IMAGE_TAG, default dev): local storage and target/images/*.tar
images: setup
	tools/images.sh

## manifests: render deploy/kubernetes/ from the Helm chart deploy/helm/bimodal
manifests: setup
	tools/deploy-check.sh --write

## test: every test: Rust suites (BPF, ClickHouse 18.16, gRPC, browser; the fuzz targets' committed
##       corpora replayed through their checks), the web UI on its mock API, modern SQL in chdb,
##       the Helm chart and manifests (tools/deploy-check.sh), the agent's image under its
##       DaemonSet's confinement in podman (tests/deploy/podman_agent.py), the NUMA guest, the
##       kernel matrix (every program loaded and sampling on Debian's 5.10, 6.1 and 6.12 in guests
##       and on the host, tests/kernels), a fleet of eight NUMA guests compared. Live fuzzing is
##       `make fuzz`'s.
test: web
	$(STEP) rust-build env BIMODAL_PROFILE=$(TEST_PROFILE) python3 tools/rust-tests.py --build-only
	$(STEP) rust-tests env BIMODAL_PROFILE=$(TEST_PROFILE) python3 tools/rust-tests.py
	$(STEP) web-tests bash -c 'cd web && npm run test:unit --silent && npm run test:e2e-mock --silent'
	$(STEP) modern-sql python3 tests/modern_sql.py $(TEST_BIN)/bimodal-server
	$(STEP) deploy-check tools/deploy-check.sh
	$(STEP) podman-agent env IMAGE_PROFILE=$(TEST_PROFILE) python3 tests/deploy/podman_agent.py
	$(STEP) numa-guest tests/numa/run.sh $(TEST_BIN)/bimodal-agent
	$(STEP) kernel-matrix tests/kernels/run.sh $(TEST_BIN)/bimodal-agent
	$(STEP) numa-fleet tests/numa/fleet.sh $(TEST_BIN)/bimodal-agent

## bench: cost of bimodal-agent record vs perf record under a page-fault-heavy workload (BENCH_SECONDS=30),
##        frame-pointer against .eh_frame unwinding (tools/bench-unwind.sh), the agent's cost on the oldest
##        kernel it supports, 5.10, in a qemu guest (tools/bench-agent-kernel.sh), the agent's memory while it
##        uploads a 280 MiB image (tools/bench-upload.sh) and while short processes come and go
##        (tools/bench-cache.sh), then storage and ingest
##        of simulated fleets of 100 to 10,000 nodes (tools/bench_storage.py, BENCH_FLEETS=100,1000,10000),
##        then every API read over a fleet of 100,000 nodes against its budget, with the server's
##        peak RSS per read (tools/bench_fleet_reads.py, BENCH_READS_NODES=100000),
##        then band detection on seeded synthetic fleets (server/examples/bands_bench.rs),
##        then a soak: 1,000 simulated agents for 10 minutes while the server and its ClickHouse are
##        killed (tools/soak.py, SOAK_NODES, SOAK_MINUTES, SOAK_INTERVAL, SOAK_SCALE): lost and
##        duplicated data, peak memory
bench: release
	tools/bench.sh
	tools/bench-unwind.sh
	tools/bench-agent-kernel.sh --suite bullseye target/release/bimodal-agent
	tools/bench-upload.sh
	tools/bench-cache.sh
	python3 tools/bench_storage.py --nodes $${BENCH_FLEETS:-100,1000,10000}
	python3 tools/bench_fleet_reads.py --nodes $${BENCH_READS_NODES:-100000}
	cargo run --release -q -p bimodal-server --example bands_bench $${BENCH_BAND_TRIALS:-200}
	cargo run --release -q -p bimodal-proto --example naming_digests -- /lib/x86_64-linux-gnu/libc.so.6 \
		target/release/bimodal-server target/release/bimodal-agent
	python3 tools/soak.py

## fuzz: every fuzz target (fuzz/fuzz_targets: ingest messages, selectors, alert rules) for
##       FUZZ_SECONDS (600) each, from the committed corpus
fuzz: setup
	tools/fuzz.sh $${FUZZ_SECONDS:-600}

## lint: rustfmt, clippy (warnings denied), clang-format for BPF and fixture C, the server's layers
##       (tools/layers.py: every module imports only from the layers below it), eslint
lint: setup
	$(STEP) rustfmt $(CARGO) fmt --all -- --check
	$(STEP) clippy $(CARGO) clippy --workspace --all-targets -- -D warnings
	$(STEP) clang-format $(CLANG_FORMAT) --dry-run -Werror $(C_SOURCES)
	$(STEP) layers python3 tools/layers.py
	$(STEP) eslint bash -c 'cd web && npm run lint --silent'

## fmt: format Rust and C in place
fmt:
	$(CARGO) fmt --all
	$(CLANG_FORMAT) -i $(C_SOURCES)

clean:
	$(CARGO) clean
	rm -rf web/dist .demo
