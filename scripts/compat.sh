#!/usr/bin/env bash
# `make compat`: the integration, conformance, client and service suites against the newest
# Redis 8.x and Valkey 9.x, each built from Debian's own source package, with one summary
# table at the end. Not part of `make test` (which runs the machine's redis-server).
#
# For each pinned (package, version) below, unless a build of it is already in the cache:
# - Debian's source index is read with a private apt state and sources list (deb-src lines
#   for unstable and experimental on this machine's own Debian mirror) in a temporary
#   directory: the machine's apt lists, sources and installed packages are not touched;
# - `apt-get source --download-only` fetches the package (apt checks every file against the
#   signed index), `dpkg-source -x` unpacks it with Debian's patches, and upstream's
#   `make BUILD_TLS=yes` builds it offline from the bundled dependencies (the service
#   tests need TLS);
# - the server, its -cli and -check-rdb are copied to $RL_COMPAT_CACHE/<name>/bin.
# Then each suite runs as `REDIS_SERVER=<that server> make <suite>`, logged to
# target/compat/<run>/. Nothing fetched or built enters the repository.
#
# Environment:
#   RL_COMPAT_CACHE    where builds are kept and reused (default /tmp/rl-compat-cache)
#   RL_COMPAT_SERVERS  which of the pinned servers to run (default: all), e.g. "valkey-9.1.2"
#   RL_COMPAT_SUITES   which suites (default: integration conformance client-test service-test;
#                      set and empty: build the servers only)
#   RL_COMPAT_MIRROR   the Debian mirror (default: the one this machine's apt sources use)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${RL_COMPAT_CACHE:-/tmp/rl-compat-cache}
read -r -a suites <<<"${RL_COMPAT_SUITES-integration conformance client-test service-test}"

# The pins: Debian source package, its exact version, the suite that carries it, and the
# program prefix of its binaries. Newest first; the table's columns follow this order.
pins=(
  "redis 5:8.6.3-1 experimental redis"
  "valkey 9.1.2-1 unstable valkey"
  "redis 5:8.0.6-3 unstable redis"
)
# The suites whose Sources indices are read, for every pin.
debian_suites=(unstable experimental)

work=$(mktemp -d "${TMPDIR:-/tmp}/rl-compat.XXXXXX")
trap 'rm -rf "$work"' EXIT

say() { echo "compat: $*"; }
fail() {
  echo "compat: FAILED: $*" >&2
  exit 1
}

# "5:8.6.3-1" -> "8.6.3": the upstream version, without epoch or Debian revision.
upstream_of() {
  local version=${1#*:}
  echo "${version%-*}"
}

# The Debian archive this machine's apt already uses, so that no mirror is named here.
debian_mirror() {
  if [[ -n ${RL_COMPAT_MIRROR:-} ]]; then
    echo "${RL_COMPAT_MIRROR%/}"
    return
  fi
  local uri
  uri=$(apt-get indextargets --format '$(ORIGIN)|$(LABEL)|$(REPO_URI)' 2>/dev/null |
    awk -F'|' '$1 == "Debian" && $2 == "Debian" {print $3; exit}')
  if [[ -z $uri ]]; then
    # No lists yet (apt-get update never ran): the sources files themselves.
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
      /etc/apt/sources.list.d/*.sources 2>/dev/null |
      grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ')
  fi
  [[ -n $uri ]] || fail "no Debian archive found in this machine's apt sources (apt-get \
indextargets, /etc/apt/sources.list*); set RL_COMPAT_MIRROR to a Debian mirror's URI"
  echo "${uri%/}"
}

# apt with a private state, cache and sources list under $work/apt.
apt_dir=$work/apt
apt_private() {
  local tool=$1
  shift
  "$tool" -o Dir::State="$apt_dir/state" -o Dir::State::Lists="$apt_dir/state/lists" \
    -o Dir::State::status=/dev/null -o Dir::Cache="$apt_dir/cache" \
    -o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts="$apt_dir/parts" \
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$apt_dir/parts" \
    -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)" "$@"
}

indices_read=""
read_debian_indices() {
  [[ -z $indices_read ]] || return 0
  local mirror keyring=/usr/share/keyrings/debian-archive-keyring.gpg suite
  mirror=$(debian_mirror)
  [[ -r $keyring ]] || fail "$keyring is missing (package debian-archive-keyring): \
cannot check Debian's source indices"
  mkdir -p "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts"
  for suite in "${debian_suites[@]}"; do
    echo "deb-src [signed-by=$keyring] $mirror $suite main"
  done >"$apt_dir/sources.list"
  say "reading Debian's source indices (${debian_suites[*]}) from $mirror, private apt state"
  if ! apt_private apt-get -q update >"$work/apt-update.log" 2>&1 ||
    grep -qE '^(E:|W: Failed to fetch|W: GPG error)' "$work/apt-update.log"; then
    sed 's/^/    | /' "$work/apt-update.log" >&2
    fail "cannot read Debian's source indices (deb-src $mirror ${debian_suites[*]} main); \
apt-get update said the above"
  fi
  indices_read=1
}

# The versions of a source package that the indices offer, newest first.
offered_versions() {
  apt_private apt-cache showsrc --only-source "$1" 2>/dev/null |
    awk '/^Version:/ {print $2}' | sort -u | sort -rV
}

# Tools the builds need; as root on Debian, installed from the machine's own apt sources.
check_build_tools() {
  local missing=()
  command -v cc >/dev/null || missing+=(gcc)
  command -v make >/dev/null || missing+=(make)
  command -v dpkg-source >/dev/null || missing+=(dpkg-dev)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  [[ -e /usr/include/openssl/ssl.h ]] || missing+=(libssl-dev)
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "installing build dependencies: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${missing[@]}" >"$work/apt-install.log" 2>&1 || {
      sed 's/^/    | /' "$work/apt-install.log" >&2
      fail "cannot install the build dependencies ${missing[*]} (apt-get said the above)"
    }
  else
    fail "building the servers needs ${missing[*]} (not installed; run as root to install \
them, or apt-get install ${missing[*]})"
  fi
}

# build PACKAGE VERSION SUITE PREFIX DEST: fetch, unpack, build, copy the binaries to DEST.
build() {
  local package=$1 version=$2 suite=$3 prefix=$4 dest=$5 offered series newest src log
  read_debian_indices
  offered=$(offered_versions "$package")
  local where
  where=$(IFS=/ && echo "${debian_suites[*]}")
  [[ -n $offered ]] || fail "Debian's $where offer no source package '$package'"
  if ! grep -qxF "$version" <<<"$offered"; then
    fail "Debian's $where no longer offer $package $version (they offer: \
$(paste -sd' ' <<<"$offered")); update the pin in scripts/compat.sh"
  fi
  # A newer release of the pinned one's series (8.6.x for 8.6.3) is worth a new pin.
  series=$(upstream_of "$version" | cut -d. -f1-2)
  newest=$(awk -v series="$series" '{ v = $0; sub(/^[0-9]+:/, "", v) }
    index(v, series ".") == 1 { print; exit }' <<<"$offered")
  [[ $newest == "$version" ]] ||
    say "note: Debian offers $package $newest, newer than the pinned $version"
  check_build_tools
  src=$work/src-$package-$(upstream_of "$version")
  mkdir -p "$src"
  log=$cache/$(basename "$dest").build.log
  mkdir -p "$cache"
  say "fetching $package $version (Debian $suite) and building it (log: $log)"
  (cd "$src" && apt_private apt-get -q source --download-only "$package=$version") >"$log" 2>&1 || {
    tail -20 "$log" | sed 's/^/    | /' >&2
    fail "cannot fetch the source package $package $version (apt-get source said the above)"
  }
  (cd "$src" && dpkg-source -x ./*.dsc tree) >>"$log" 2>&1 || {
    tail -20 "$log" | sed 's/^/    | /' >&2
    fail "cannot unpack $package $version (dpkg-source said the above)"
  }
  local started=$SECONDS
  make -C "$src/tree" -j"$(nproc)" BUILD_TLS=yes >>"$log" 2>&1 || {
    tail -30 "$log" | sed 's/^/    | /' >&2
    fail "building $package $version failed (make BUILD_TLS=yes; the end of $log above)"
  }
  rm -rf "$dest.partial"
  mkdir -p "$dest.partial/bin"
  local program
  for program in server cli check-rdb; do
    [[ -x $src/tree/src/$prefix-$program ]] ||
      fail "the build of $package $version made no src/$prefix-$program"
    cp "$src/tree/src/$prefix-$program" "$dest.partial/bin/"
  done
  {
    echo "package=$package"
    echo "version=$version"
    echo "debian_suite=$suite"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - started)) s"
    echo "make=make BUILD_TLS=yes"
  } >"$dest.partial/build-info"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
  rm -rf "$src"
  say "built $package $version in $((SECONDS - started)) s: $dest/bin"
}

# One server: reuse its cached build (same package and version) or build it.
ensure_built() {
  local package=$1 version=$2 suite=$3 prefix=$4 dest=$5
  local info=$dest/build-info
  if [[ -x $dest/bin/$prefix-server ]] && grep -qxF "version=$version" "$info" 2>/dev/null &&
    grep -qxF "package=$package" "$info"; then
    say "using the cached build of $package $version: $dest/bin \
($(sed -n 's/^built=//p' "$info"))"
    return
  fi
  build "$@"
}

# cargo's "test result: ok. 85 passed; 0 failed; ..." lines of a log, summed: "passed failed".
count_tests() {
  awk '/^test result:/ {
         for (i = 1; i <= NF; i++) {
           if ($(i) ~ /^passed;?$/) passed += $(i-1)
           if ($(i) ~ /^failed;?$/) failed += $(i-1)
         }
       }
       END { print passed + 0, failed + 0 }' "$1"
}

# --- which servers -----------------------------------------------------------------------
selected=()
for pin in "${pins[@]}"; do
  read -r package version suite prefix <<<"$pin"
  name=$package-$(upstream_of "$version")
  if [[ -z ${RL_COMPAT_SERVERS:-} || " $RL_COMPAT_SERVERS " == *" $name "* ]]; then
    selected+=("$pin")
  fi
done
((${#selected[@]})) ||
  fail "RL_COMPAT_SERVERS='${RL_COMPAT_SERVERS:-}' names none of the pinned servers"
say "servers (Debian source packages, pinned in scripts/compat.sh):"
for pin in "${selected[@]}"; do
  read -r package version suite prefix <<<"$pin"
  echo "    $package $version (Debian $suite)"
done

# --- build (or reuse) each ---------------------------------------------------------------
servers=() names=()
for pin in "${selected[@]}"; do
  read -r package version suite prefix <<<"$pin"
  name=$package-$(upstream_of "$version")
  ensure_built "$package" "$version" "$suite" "$prefix" "$cache/$name"
  servers+=("$cache/$name/bin/$prefix-server")
  names+=("$name")
done

if ((${#suites[@]} == 0)); then
  say "RL_COMPAT_SUITES is empty: servers built, no suite run"
  exit 0
fi

# --- run the suites on each --------------------------------------------------------------
logs=$repo/target/compat/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$logs"
declare -A cell
green=1
for index in "${!servers[@]}"; do
  server=${servers[$index]} name=${names[$index]}
  say "== $name: $("$server" --version)"
  for suite_target in "${suites[@]}"; do
    log=$logs/$name-$suite_target.log
    started=$SECONDS
    status=0
    REDIS_SERVER=$server make -C "$repo" --no-print-directory "$suite_target" >"$log" 2>&1 ||
      status=$?
    read -r passed failed < <(count_tests "$log")
    skipped=$(grep -c 'TESTS SKIPPED:' "$log" || true)
    total=$((passed + failed))
    if ((status == 0 && failed == 0 && skipped == 0 && total > 0)); then
      cell[$name,$suite_target]="$passed/$total"
    elif ((status == 0 && failed == 0 && total > 0)); then
      cell[$name,$suite_target]="$((passed - skipped))/$total, $skipped SKIPPED"
      green=0
    else
      cell[$name,$suite_target]="FAILED $passed/$total (exit $status)"
      green=0
    fi
    say "   $suite_target: ${cell[$name,$suite_target]} in $((SECONDS - started)) s ($log)"
  done
done

# --- the table ---------------------------------------------------------------------------
echo
commit=$(git -C "$repo" rev-parse --short HEAD)
git -C "$repo" diff --quiet HEAD || commit+=" with uncommitted changes"
echo "compat: $(date -u +%Y-%m-%d), the module at $commit, logs in $logs"
header="| suite |" rule="|---|"
for name in "${names[@]}"; do
  header+=" $name |"
  rule+="--:|"
done
echo "$header"
echo "$rule"
for suite_target in "${suites[@]}"; do
  row="| \`make $suite_target\` |"
  for name in "${names[@]}"; do
    row+=" ${cell[$name,$suite_target]} |"
  done
  echo "$row"
done
echo
if ((green)); then
  echo "compat: all green"
else
  echo "compat: NOT green: see the logs above (grep -E 'FAILED|panicked|TESTS SKIPPED' in them)"
  exit 1
fi
