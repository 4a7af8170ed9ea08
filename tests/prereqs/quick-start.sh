#!/usr/bin/env bash
# What a new user runs first, checked without building or starting anything:
# - every `docker run` the docs and the image's files show publishes Redis on loopback only
#   (the image's Redis has no password: `-p 6379:6379` opens it on every interface);
# - the compose file publishes every port on 127.0.0.1;
# - `make build` builds the module, rlctl and the service, in release (make -n: a dry run);
# - the MIT LICENSE is there, and the Python and Node.js packages ship the same text.
# Usage: tests/prereqs/quick-start.sh   (from anywhere; exits 1 naming each failure)
set -euo pipefail
cd "$(dirname "$0")/../.."

failures=0
fail() { echo "quick-start: $*" >&2; failures=$((failures + 1)); }

# `-p HOST:CONTAINER` or `-p CONTAINER` without a loopback address, in any docker run shown.
while IFS= read -r line; do
  if [[ $line =~ -p[[:space:]]+([^[:space:]]+) && ! ${BASH_REMATCH[1]} =~ ^127\.0\.0\.1: ]]; then
    fail "publishes beyond loopback: $line"
  fi
done < <(grep -rn --include='*.md' --include='Dockerfile' --include='*.conf' --include='*.sh' \
  -e 'docker run' README.md Dockerfile docker docs examples python/README.md client/README.md server 2>/dev/null)

while IFS= read -r line; do
  fail "docker-compose.yml publishes beyond loopback: $line"
done < <(sed -n '/ports:/,/^[^ ]/p' docker-compose.yml | grep -E '^\s+- "' | grep -v '"127\.0\.0\.1:' || true)

build=$(make -n build CARGO=cargo 2>/dev/null | grep -E '^cargo build' || true)
for wanted in --release '-p redis-ratelimit ' '-p redis-ratelimit-plans' '-p redis-ratelimit-server'; do
  [[ "$build " == *"$wanted"* ]] \
    || fail "make build does not run cargo build with '$wanted' (it runs: ${build:-nothing})"
done

if ! grep -q '^MIT License$' LICENSE 2>/dev/null; then
  fail "LICENSE is missing or not the MIT license"
elif ! cmp -s LICENSE python/LICENSE; then
  fail "python/LICENSE differs from LICENSE (the Python package ships python/LICENSE)"
elif ! cmp -s LICENSE node/LICENSE; then
  fail "node/LICENSE differs from LICENSE (the Node.js package ships node/LICENSE)"
fi
grep -q '^license-files = \["LICENSE"\]' python/pyproject.toml \
  || fail "python/pyproject.toml does not name LICENSE in license-files"

if ((failures)); then
  echo "quick-start: $failures failure(s)" >&2
  exit 1
fi
echo "quick-start: docker commands on loopback, make build builds the module, rlctl and the service, LICENSE present"
