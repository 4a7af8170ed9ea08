#!/usr/bin/env bash
# Builds redis-ratelimit-server:latest (and :VERSION) from the release binary, on top of the
# Redis image docker/build.sh made (its base passed the glibc check), then a smoke test: a
# container of the service and one of Redis on a private network, the service's /readyz
# answered from inside its container. Containers and the network are removed however this
# ends.
#
# Usage: docker/build-service.sh SERVER_BINARY VERSION
# Environment: REDIS_IMAGE (default redis-ratelimit:latest); SERVICE_TAGS (default
# "redis-ratelimit-server:latest redis-ratelimit-server:VERSION").
set -euo pipefail
cd "$(dirname "$0")/.."

binary=${1:?usage: docker/build-service.sh SERVER_BINARY VERSION}
version=${2:?usage: docker/build-service.sh SERVER_BINARY VERSION}
redis_image=${REDIS_IMAGE:-redis-ratelimit:latest}
read -r -a tags <<<"${SERVICE_TAGS:-redis-ratelimit-server:latest redis-ratelimit-server:$version}"
[[ -f $binary ]] || { echo "docker: $binary is missing (cargo build --release -p redis-ratelimit-server)" >&2; exit 1; }
started=$SECONDS

context=$(mktemp -d)
network=redis-ratelimit-service-smoke-$$
redis_box=$network-redis
service_box=$network-service
cleanup() {
  docker rm -f -v "$service_box" "$redis_box" >/dev/null 2>&1 || true
  docker network rm "$network" >/dev/null 2>&1 || true
  rm -rf "$context"
}
trap cleanup EXIT
cp docker/service.Dockerfile "$context/Dockerfile"
cp "$binary" "$context/redis-ratelimit-server"
cp -r examples/envoy/config "$context/config"
tag_args=()
for tag in "${tags[@]}"; do tag_args+=(-t "$tag"); done
if ! docker build -q --build-arg "REDIS_IMAGE=$redis_image" "${tag_args[@]}" "$context" \
  >"$context/build.log" 2>&1; then
  cat "$context/build.log" >&2
  exit 1
fi

# Smoke test: the service reaches Redis by name and says it is ready.
docker network create --internal "$network" >/dev/null
docker run -d --name "$redis_box" --network "$network" --network-alias redis "$redis_image" >/dev/null
docker run -d --name "$service_box" --network "$network" "${tags[0]}" >/dev/null
ready=""
for _ in $(seq 100); do
  if docker logs "$service_box" 2>&1 | grep -q "the store answers"; then ready=yes; break; fi
  sleep 0.1
done
if [[ -z $ready ]] || ! docker logs "$service_box" 2>&1 | grep -q "HTTP API on 0.0.0.0:8080"; then
  echo "docker: service smoke test failed" >&2
  docker logs "$service_box" 2>&1 | tail -20 >&2
  exit 1
fi
echo "docker: built ${tags[*]} in $((SECONDS - started)) s (on $redis_image)"
echo "  smoke test: the service loaded the example config and reached Redis on a private network"
