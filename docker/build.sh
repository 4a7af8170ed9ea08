#!/usr/bin/env bash
# Builds the user image redis-ratelimit:latest (and :VERSION) from the release module:
#
# 1. the base: BASE_IMAGE if present or pullable (by default the official Redis image);
#    otherwise (no registry) a local base from this machine's redis-server
#    (docker/local-base.sh). It says which base it used and why;
# 2. checks the module runs on that base: same C library family (glibc) and a glibc at least
#    as new as the newest GLIBC_x.y symbol version the module needs;
# 3. `docker build` with a context of just the module and the config file;
# 4. a smoke test: a container of the image answers PING, lists the module in MODULE LIST
#    and admits an RL.TOKENBUCKET call. The container is removed however this ends.
#
# Usage: docker/build.sh MODULE.so VERSION
# Environment: BASE_IMAGE; IMAGE_TAGS (default "redis-ratelimit:latest redis-ratelimit:VERSION");
# LOCAL_BASE (the local base's name, default redis-ratelimit-base:local).
set -euo pipefail
cd "$(dirname "$0")/.."

module=${1:?usage: docker/build.sh MODULE.so VERSION}
version=${2:?usage: docker/build.sh MODULE.so VERSION}
base=${BASE_IMAGE:-redis:7.4-bookworm}
read -r -a tags <<<"${IMAGE_TAGS:-redis-ratelimit:latest redis-ratelimit:$version}"
local_base=${LOCAL_BASE:-redis-ratelimit-base:local}
[[ -f $module ]] || { echo "docker: $module is missing (make build)" >&2; exit 1; }
started=$SECONDS

# 1. The base.
if docker image inspect "$base" >/dev/null 2>&1; then
  why="present locally"
elif pull_error=$(timeout 120 docker pull -q "$base" 2>&1); then
  why="pulled"
else
  echo "docker: cannot pull $base ($(tail -1 <<<"$pull_error")): building a local base" >&2
  docker/local-base.sh "$local_base" "$module"
  why="$base could not be pulled; built from this machine's redis-server"
  base=$local_base
fi

# 2. Same C library family, new enough. Running the base's libc.so.6 prints its version.
libc=$(ldd "$module" | awk '$1 == "libc.so.6" {print $3}')
needed=$(objdump -T "$module" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V |
  tail -1)
base_glibc=$(docker run --rm --entrypoint "$libc" "$base" 2>/dev/null |
  sed -n 's/.*release version \([0-9][0-9.]*[0-9]\).*/\1/p' || true)
if [[ -z $base_glibc ]]; then
  echo "docker: $base has no glibc at $libc: the module built here needs glibc $needed;" \
    "use a Debian-based base (BASE_IMAGE=redis:7.4-bookworm)" >&2
  exit 1
fi
if [[ $(printf '%s\n' "$needed" "$base_glibc" | sort -V | tail -1) != "$base_glibc" ]]; then
  echo "docker: the module needs glibc $needed but $base has $base_glibc:" \
    "build the module on an older system or use a newer base" >&2
  exit 1
fi

# 3. The image, from a context holding only what the Dockerfile copies.
context=$(mktemp -d)
smoke=""
cleanup() {
  [[ -n $smoke ]] && docker rm -f -v "$smoke" >/dev/null 2>&1
  rm -rf "$context"
}
trap cleanup EXIT
mkdir -p "$context/target/release" "$context/docker"
cp Dockerfile "$context/"
cp "$module" "$context/target/release/libredis_ratelimit.so"
cp docker/redis-ratelimit.conf "$context/docker/"
tag_args=()
for tag in "${tags[@]}"; do tag_args+=(-t "$tag"); done
if ! docker build -q --build-arg "BASE_IMAGE=$base" "${tag_args[@]}" "$context" \
  >"$context/build.log" 2>&1; then
  cat "$context/build.log" >&2
  exit 1
fi

# 4. Smoke test.
smoke=redis-ratelimit-smoke-$$
docker run -d --name "$smoke" --label redis-ratelimit.smoke=1 "${tags[0]}" >/dev/null
cli() { docker exec "$smoke" redis-cli "$@"; }
for _ in $(seq 100); do
  [[ $(cli PING 2>/dev/null) == PONG ]] && break
  sleep 0.1
done
modules=$(cli MODULE LIST)
admitted=$(cli RL.TOKENBUCKET smoke 10 1 | sed -n 1p || true)
if ! grep -qx ratelimit <<<"$modules" || [[ $admitted != 1 ]]; then
  echo "docker: smoke test failed: MODULE LIST: $modules; RL.TOKENBUCKET: $admitted" >&2
  docker logs "$smoke" 2>&1 | tail -20 >&2
  exit 1
fi
echo "docker: built ${tags[*]} in $((SECONDS - started)) s"
echo "  base: $base ($why)"
echo "  glibc: the module needs $needed, the base has $base_glibc"
echo "  smoke test: MODULE LIST shows ratelimit, RL.TOKENBUCKET admits"
