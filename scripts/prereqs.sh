#!/usr/bin/env bash
# Checks (and on Debian, as root, installs) what building and testing the module needs:
# redis-server 7.0+ (with redis-cli, redis-benchmark, redis-check-rdb), libclang for bindgen,
# and the rustfmt/clippy components. Idempotent: installs only what is missing.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so' \
   && ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
  missing+=(libclang-dev)
fi

if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "prereqs: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "prereqs: missing ${missing[*]}. On Debian/Ubuntu run:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

version=$(redis-server --version | sed -n 's/.*v=\([0-9]*\)\.\([0-9]*\).*/\1\2/p')
if [[ -z $version || $version -lt 70 ]]; then
  echo "prereqs: redis-server 7.0 or newer is required ($(redis-server --version))" >&2
  exit 1
fi

for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$component" >/dev/null 2>&1 || {
      echo "prereqs: cargo $component is missing: rustup component add $component" >&2
      exit 1
    }
  fi
done
