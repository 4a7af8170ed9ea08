#!/usr/bin/env bash
# Builds a minimal Redis base image from this machine's own redis-server, for when the
# official image cannot be pulled (no registry reachable): a root filesystem holding
# redis-server (with redis-check-rdb/-aof, which are the same program) and redis-cli, every
# shared library `ldd` lists for them and for the extra ELF files given (the module), the
# dynamic loader, /etc/passwd and /etc/group with a `redis` user (uid 999 like the official
# image), and /data owned by it; imported with `docker import`.
#
# The tar is reproducible (sorted, fixed mtimes): its sha256 is kept in the image's
# environment, and an image already holding the same files is reused instead of re-imported.
#
# Usage: docker/local-base.sh IMAGE [ELF...]
set -euo pipefail

image=${1:?usage: docker/local-base.sh IMAGE [ELF...]}
shift
server=$(command -v redis-server) || {
  echo "local-base: redis-server is not installed (make prereqs installs it)" >&2
  exit 1
}
cli=$(command -v redis-cli) || {
  echo "local-base: redis-cli is not installed (package redis-tools)" >&2
  exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root

place() { # place SOURCE PATH: copy SOURCE (links followed) to PATH inside the image
  mkdir -p "$root$(dirname "$2")"
  cp -L "$1" "$root$2"
}

place "$server" /usr/local/bin/redis-server
ln -s redis-server "$root/usr/local/bin/redis-check-rdb"
ln -s redis-server "$root/usr/local/bin/redis-check-aof"
place "$cli" /usr/local/bin/redis-cli
# Libraries by the absolute paths ldd resolves them to, and the loader by its own path.
ldd "$server" "$cli" "$@" |
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' |
  sort -u |
  while IFS= read -r library; do place "$library" "$library"; done

mkdir -p "$root/etc" "$root/tmp" "$root/data" "$root/usr/lib/redis/modules"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nredis:x:999:999:redis:/data:/sbin/nologin\n' \
  >"$root/etc/passwd"
printf 'root:x:0:\nredis:x:999:\n' >"$root/etc/group"

tar_options=(--sort=name --mtime=@0 --numeric-owner -C "$root")
tar "${tar_options[@]}" --owner=0 --group=0 --exclude=./data -cf "$work/rootfs.tar" .
tar "${tar_options[@]}" --owner=999 --group=999 -rf "$work/rootfs.tar" ./data
sha=$(sha256sum "$work/rootfs.tar" | cut -c1-64)

existing=$(docker image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$image" \
  2>/dev/null | sed -n 's/^RL_BASE_ROOTFS_SHA256=//p' || true)
version=$("$server" --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')
if [[ $existing == "$sha" ]]; then
  echo "local-base: $image is up to date (redis-server $version from this machine)"
  exit 0
fi
docker import \
  --change "ENV RL_BASE_ROOTFS_SHA256=$sha" \
  --change "ENV REDIS_VERSION=$version" \
  --change "ENV PATH=/usr/local/bin:/usr/bin:/bin" \
  --change "USER redis" \
  --change "WORKDIR /data" \
  --change 'CMD ["redis-server"]' \
  --message "redis-server $version from $(. /etc/os-release && echo "$PRETTY_NAME")" \
  "$work/rootfs.tar" "$image" >/dev/null
echo "local-base: imported $image: redis-server $version and its libraries from this machine" \
  "($(du -h "$work/rootfs.tar" | cut -f1) root filesystem)"
