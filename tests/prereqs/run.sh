#!/usr/bin/env bash
# Tests scripts/prereqs.sh (or the script given as $1) the way a new user meets it.
#
# The bug this guards against: on a machine whose LLVM runtime ships libclang-cpp.so.N but
# no libclang, an old check took libclang-cpp for libclang, installed nothing, and bindgen
# then panicked with "Unable to find libclang". To see that even on a machine where libclang
# IS installed, each scenario runs the script in a private mount namespace:
#
# - an overlay over /usr/lib (and /usr/local/lib, /usr/lib64) from which every file
#   clang-sys would load is removed, with a decoy /usr/lib/llvm-N/lib/libclang-cpp.so.N,
#   and a linker cache rebuilt from that view and bind-mounted over /etc/ld.so.cache;
# - `apt-get` is a stub, first on PATH, that records what it is asked and installs nothing
#   (except a fake redis-server when asked for one, so the script can go on);
# - prometheus and promtool are stand-ins on PATH, except where a scenario hides them.
#
# Nothing outside the namespace changes; the namespace and its tmpfs vanish with the
# process. Needs root (or unprivileged user namespaces) and overlayfs.
#
# Usage: tests/prereqs/run.sh [path/to/prereqs.sh]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
script=$(realpath "${1:-$here/../../scripts/prereqs.sh}")

# ---- inside the namespace: hide what the scenario wants hidden, then run the script ----
if [[ ${PREREQS_TEST_INSIDE:-} == 1 ]]; then
  scenario=$2 stubs=$3 scratch=$4
  mount -t tmpfs tmpfs "$scratch"
  # clang-sys's file names: libclang.so, libclang-N.so, libclang.so.N, libclang-N.so.N.
  is_libclang() { [[ $1 =~ ^libclang(-[0-9][0-9.]*)?\.so(\.[0-9][0-9.]*)?$ ]]; }
  overlay() { # overlay DIR: DIR becomes writable here, changes go to the tmpfs
    local dir=$1 name
    name=$(tr / _ <<<"$dir")
    mkdir -p "$scratch/$name/upper" "$scratch/$name/work"
    mount -t overlay overlay \
      -o "lowerdir=$dir,upperdir=$scratch/$name/upper,workdir=$scratch/$name/work" "$dir"
  }
  if [[ $scenario == no-headers ]]; then
    # libclang's runtime alone (libclang1-N): the library, but not clang's own headers.
    for dir in /usr/lib /usr/local/lib /usr/lib64; do
      [[ -d $dir && ! -L $dir ]] || continue
      overlay "$dir"
      find "$dir" -maxdepth 6 -path '*/clang/*/include/stddef.h' -delete
    done
  elif [[ $scenario != complete && $scenario != no-browser && $scenario != no-node ]]; then
    for dir in /usr/lib /usr/local/lib /usr/lib64; do
      [[ -d $dir && ! -L $dir ]] || continue
      overlay "$dir"
      while IFS= read -r -d '' file; do
        is_libclang "$(basename "$file")" && rm -f "$file"
      done < <(find "$dir" -maxdepth 4 -name 'libclang*' -print0)
    done
    # The decoy the old check fell for: LLVM's runtime library, which is not libclang.
    if ! compgen -G '/usr/lib/llvm-*/lib/libclang-cpp.so*' >/dev/null; then
      mkdir -p /usr/lib/llvm-14/lib
      : >/usr/lib/llvm-14/lib/libclang-cpp.so.14
    fi
    # only:DIR/NAME scenarios: one library under one of clang-sys's names (an empty file:
    # the script goes by names, as clang-sys does before it loads one).
    if [[ $scenario == only:* ]]; then
      mkdir -p "$(dirname "${scenario#only:}")"
      : >"${scenario#only:}"
    fi
    ldconfig -X -C "$scratch/ld.so.cache"
    mount --bind "$scratch/ld.so.cache" /etc/ld.so.cache
    if ldconfig -p | grep -E 'libclang(-[0-9.]+)?\.so' | grep -v libclang-cpp; then
      echo "setup: libclang is still in the linker cache" >&2
      exit 90
    fi
  fi
  if [[ $scenario == no-node ]]; then
    # Debian's Node.js packages of the Node client's tests: node-redis, node-express, tsc.
    overlay /usr/share/nodejs
    rm -rf /usr/share/nodejs/redis /usr/share/nodejs/express
    overlay /usr/bin
    rm -f /usr/bin/tsc
    if [[ -e /usr/share/nodejs/redis ]] || command -v tsc >/dev/null; then
      echo "setup: node-redis or tsc is still there" >&2
      exit 90
    fi
  fi
  if [[ $scenario == no-redis ]]; then
    overlay /usr/bin
    rm -f /usr/bin/redis-server
    if command -v redis-server >/dev/null; then
      echo "setup: redis-server is still on PATH at $(command -v redis-server)" >&2
      exit 90
    fi
  fi
  if [[ $scenario == no-browser ]]; then
    overlay /usr/bin
    rm -f /usr/bin/chromium /usr/bin/chromedriver
    if command -v chromium >/dev/null || command -v chromedriver >/dev/null; then
      echo "setup: chromium or chromedriver is still on PATH" >&2
      exit 90
    fi
  fi
  export PATH="$stubs:$PATH"
  if [[ $scenario == no-prometheus ]]; then
    overlay /usr/bin
    rm -f /usr/bin/prometheus /usr/bin/promtool
    for tool in prometheus promtool; do
      if command -v "$tool" >/dev/null; then
        echo "setup: $tool is still on PATH at $(command -v "$tool")" >&2
        exit 90
      fi
    done
  fi
  unset LIBCLANG_PATH PREREQS_LIB_DIRS
  export PREREQS_SKIP_RUST=1
  exec bash "$script"
fi

# ---- outside: one namespace per scenario, then check what apt-get was asked ----
run_dir=$(mktemp -d)
trap 'rm -rf "$run_dir"' EXIT
stubs=$run_dir/bin
mkdir -p "$stubs"
cat >"$stubs/apt-get" <<'EOF'
#!/usr/bin/env bash
# Records the call; "installs" redis-server as a fake 7.0.15 so the script can go on.
echo "$*" >>"$(dirname "$0")/../apt-get.log"
if [[ $1 == install && " $* " == *" redis-server "* ]]; then
  printf '#!/bin/sh\necho "Redis server v=7.0.15 sha=00000000:0 malloc=libc bits=64"\n' \
    >"$(dirname "$0")/redis-server"
  chmod +x "$(dirname "$0")/redis-server"
fi
EOF
chmod +x "$stubs/apt-get"

unshare_args=(--mount --propagation private)
[[ $(id -u) -eq 0 ]] || unshare_args=(--user --map-root-user "${unshare_args[@]}")

passed=0 failed=0
scenario() { # scenario NAME EXPECTED-PACKAGES...: expects `apt-get install` of exactly these
  # (NAME: complete | no-libclang | no-headers | no-node | no-redis | no-prometheus |
  # no-browser | only:PATH, see the inside part)
  local name=$1 scratch asked wanted status=0
  shift
  wanted="${*:-}"
  rm -f "$stubs/redis-server"
  # prometheus and promtool: stand-ins on PATH, so that only no-prometheus lacks them
  # whether or not this machine has them.
  for tool in prometheus promtool; do
    if [[ $name == no-prometheus ]]; then
      rm -f "$stubs/$tool"
    else
      printf '#!/bin/sh\nexit 0\n' >"$stubs/$tool" && chmod +x "$stubs/$tool"
    fi
  done
  : >"$run_dir/apt-get.log"
  scratch=$(mktemp -d "$run_dir/scratch.XXXX")
  PREREQS_TEST_INSIDE=1 unshare "${unshare_args[@]}" \
    bash "$0" "$script" "$name" "$stubs" "$scratch" >"$run_dir/out" 2>&1 || status=$?
  asked=$(sed -n 's/^install \(-[^ ]* \)*//p' "$run_dir/apt-get.log" | tr ' ' '\n' |
    sort | tr '\n' ' ' | sed 's/ $//')
  wanted=$(tr ' ' '\n' <<<"$wanted" | sort | tr '\n' ' ' | sed 's/ $//')
  if [[ $status -eq 0 && $asked == "$wanted" ]]; then
    echo "ok: $name: asked apt-get to install [${asked}]"
    passed=$((passed + 1))
  else
    echo "FAIL: $name: exit $status, asked apt-get to install [${asked}], expected [${wanted}]"
    sed 's/^/    | /' "$run_dir/out"
    failed=$((failed + 1))
  fi
}

# A complete machine: nothing to install.
scenario complete
# libclang hidden, libclang-cpp present (the reported bug): libclang-dev, nothing else.
scenario no-libclang libclang-dev
# libclang's runtime without clang's headers (libclang1-N alone): bindgen would fail on
# stddef.h, so libclang-dev.
scenario no-headers libclang-dev
# The Node client's test packages hidden (node itself stays): exactly those three.
scenario no-node node-redis node-express node-typescript
# A bare machine: both.
scenario no-redis libclang-dev redis-server
# No Prometheus (make ops-test's prometheus and promtool): Debian's package, installed
# without recommends (libclang-dev too: libclang is hidden here as in no-libclang).
scenario no-prometheus libclang-dev prometheus
# No browser: Debian's chromium and its driver, for the console's browser test.
scenario no-browser chromium chromium-driver
# Each of the names clang-sys loads counts as libclang, wherever the script looks.
scenario only:/usr/lib/llvm-14/lib/libclang.so
scenario only:/usr/lib/llvm-14/lib/libclang-14.so
scenario only:/usr/lib/x86_64-linux-gnu/libclang.so.1
scenario only:/usr/lib/x86_64-linux-gnu/libclang-14.so.13
scenario only:/usr/lib/libclang-14.0.6.so

echo "prereqs script tested: $script"
echo "prereqs: $passed passed, $failed failed"
((failed == 0))
