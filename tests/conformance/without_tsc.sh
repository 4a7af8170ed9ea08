#!/usr/bin/env bash
# Runs a program (a server) with the processor's constant_tsc flag hidden from it.
#
# Why: a server built to read the x86 TSC as its monotonic clock (Valkey 9.1 by default)
# takes its wall clock from gettimeofday() only about once a millisecond and adds TSC time
# in between, so the conformance suite's preloaded clock (fake_clock.c) no longer sets its
# instant exactly. Such a server uses the TSC only when /proc/cpuinfo lists constant_tsc;
# here the program sees a copy of /proc/cpuinfo without it, bind-mounted in a private mount
# namespace (nothing outside the namespace changes; it vanishes with the process), and so
# falls back to clock_gettime, which the shim answers.
#
# The program is exec'd (unshare without --fork execs too), so its pid is this script's.
# Needs root (a mount namespace and a bind mount). Fails, saying why, when it cannot hide
# the flag.
#
# Usage: without_tsc.sh PROGRAM [ARGUMENTS...]
set -euo pipefail

if [[ ${RL_WITHOUT_TSC_INSIDE:-} != 1 ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "without_tsc.sh: hiding constant_tsc needs root (a private mount namespace over" \
      "/proc/cpuinfo); running as uid $(id -u)" >&2
    exit 77
  fi
  command -v unshare >/dev/null ||
    { echo "without_tsc.sh: unshare (util-linux) is not installed" >&2; exit 77; }
  RL_WITHOUT_TSC_INSIDE=1 exec unshare --mount --propagation private -- bash "$0" "$@"
fi
unset RL_WITHOUT_TSC_INSIDE

copy=$(mktemp "${TMPDIR:-/tmp}/cpuinfo.XXXXXX")
trap 'rm -f "$copy"' EXIT
sed -E 's/ constant_tsc( |$)/\1/' /proc/cpuinfo >"$copy"
mount --bind "$copy" /proc/cpuinfo ||
  { echo "without_tsc.sh: cannot bind-mount a copy over /proc/cpuinfo" >&2; exit 77; }
if grep -q ' constant_tsc' /proc/cpuinfo; then
  echo "without_tsc.sh: /proc/cpuinfo still lists constant_tsc after the bind mount" >&2
  exit 77
fi
# The mount holds the copy's inode; the name is no longer needed (exec skips the trap).
rm -f "$copy"
exec "$@"
