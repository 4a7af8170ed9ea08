# redis-ratelimit: build, run, test, benchmark.   `make help` lists the targets.
SHELL := /bin/bash
CARGO ?= cargo
PORT ?= 6379
RELEASE_MODULE := target/release/libredis_ratelimit.so
# Integration tests load a debug build with test-only hooks (a settable clock offset).
TEST_FEATURES := redis-ratelimit/test-hooks

.PHONY: help prereqs build run test lint unit integration test-long bench bench-criterion bench-server bench-memory bench-instructions fuzz clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

prereqs: ## Check (and on Debian as root, install) redis-server, libclang, rustfmt, clippy
	@scripts/prereqs.sh

build: prereqs ## Build the release module (target/release/libredis_ratelimit.so)
	$(CARGO) build --release

run: build ## Build, then run redis-server with the module on 127.0.0.1:6379 (PORT=n to change)
	@if redis-cli -p $(PORT) ping >/dev/null 2>&1; then \
	  echo "Port $(PORT) is taken by a running server; try: make run PORT=6390"; exit 1; fi
	@echo "Starting redis-server with the ratelimit module on 127.0.0.1:$(PORT) (Ctrl-C stops it)."
	@echo "In another terminal:  redis-cli -p $(PORT) RL.TOKENBUCKET user:42 10 2"
	@echo "                      (10 tokens, refilled at 2 per second; replies allowed, remaining,"
	@echo "                       retry_after_ms, reset_after_ms, limit)"
	redis-server redis.conf.example --port $(PORT)

test: prereqs lint unit integration ## Everything CI runs: format, lints, unit and integration tests

lint: ## cargo fmt --check, clippy -D warnings, and the pure-core check
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --features $(TEST_FEATURES),redis-ratelimit/system-alloc -- -D warnings
	@! grep -rn 'redis_module' core/src src/args src/error.rs src/kinds.rs src/codec.rs src/value.rs \
	  || { echo "the pure layers must not use redis_module"; exit 1; }

unit: ## Unit and property tests of the pure core and the module's pure layers
	$(CARGO) test --workspace --lib --features $(TEST_FEATURES)

integration: ## Integration tests against real redis-server processes
	$(CARGO) build --features $(TEST_FEATURES)
	$(CARGO) test --test it --features $(TEST_FEATURES)

test-long: ## The integration tests with longer runs and more iterations (RL_TEST_LONG=1)
	$(CARGO) build --features $(TEST_FEATURES)
	RL_TEST_LONG=1 $(CARGO) test --test it --features $(TEST_FEATURES)

# Server benchmark knobs. BENCH_REQUESTS: per -P 16 run (-P 1 runs send a quarter).
# A quick run: make bench-server BENCH_ROUNDS=1 BENCH_REQUESTS=20000
BENCH_ROUNDS ?= 5
BENCH_REQUESTS ?= 40000
BENCH_ARGS ?=
BENCH_MODULE := $(or $(CARGO_TARGET_DIR),target)/release/libredis_ratelimit.so

bench: ## Criterion benches, then the server benchmark (target/bench/report.md)
	@$(MAKE) --no-print-directory bench-criterion
	@$(MAKE) --no-print-directory bench-server

bench-criterion: prereqs ## Criterion benches of the algorithms
	$(CARGO) bench --features system-alloc --bench algorithms

bench-server: prereqs ## Module vs Lua vs INCR on a private redis-server: target/bench/report.md
	$(CARGO) build --release
	python3 bench/server_bench.py --module $(BENCH_MODULE) --out target/bench \
	  --venv target/bench-venv --rounds $(BENCH_ROUNDS) --requests $(BENCH_REQUESTS) $(BENCH_ARGS)

# cargo-fuzz on the stable toolchain: without a sanitizer (-Zsanitizer needs nightly), the
# coverage instrumentation, debug assertions and overflow checks it adds are all stable
# flags. The fuzzed layers (src/args.rs, src/limiter.rs, src/core) have no unsafe code, so a
# sanitizer would add little there.
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

bench-instructions: build ## Instructions per call under callgrind (deterministic; needs valgrind)
	bench/instructions.sh $(RELEASE_MODULE)

clean: ## Remove build outputs
	$(CARGO) clean
