#!/usr/bin/env bash
# Instructions per call, counted by callgrind: deterministic on a noisy machine.
#
# Runs redis-server (with the release module) under `valgrind --tool=callgrind`, counts
# only inside Redis's `call()` (the command itself: lookups, the module, replies and
# propagation; not socket I/O or protocol parsing), and prints instructions per call for
# INCR, each RL command and the Lua script of the same algorithm, plus the most expensive
# functions for RL.TOKENBUCKET and RL.MULTI. Usage: bench/instructions.sh [module.so] [calls]
set -euo pipefail

module=${1:-target/release/libredis_ratelimit.so}
calls=${2:-20000}
module=$(realpath "$module")
command -v valgrind >/dev/null || { echo "valgrind is needed: apt-get install -y valgrind" >&2; exit 1; }
command -v callgrind_annotate >/dev/null || { echo "callgrind_annotate is needed (valgrind)" >&2; exit 1; }

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
pid=""
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

cli() { redis-cli -p "$port" "$@"; }

# Lua equivalents (bench/lua), loaded by SHA.
declare -A sha
for script in bench/lua/*.lua; do
  name=$(basename "$script" .lua)
  sha[$name]=""
done

measure() { # label, command words...
  local label=$1; shift
  local out="$dir/cg.$RANDOM"
  valgrind --tool=callgrind --callgrind-out-file="$out" --instr-atstart=no --collect-atstart=no \
    --toggle-collect=call redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" \
    --loadmodule "$module" --daemonize no --logfile "$dir/log" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 150); do cli ping >/dev/null 2>&1 && break; sleep 0.2; done
  local words=("$@")
  for name in "${!sha[@]}"; do
    local s
    s=$(cli script load "$(cat "bench/lua/$name.lua")")
    words=("${words[@]//@$name@/$s}")
  done
  # Warm up (create the 1000 keys), then count only the measured calls.
  redis-benchmark -p "$port" -n 20000 -r 1000 -P 16 -c 4 -q "${words[@]}" >/dev/null 2>&1
  callgrind_control -i on "$pid" >/dev/null 2>&1
  redis-benchmark -p "$port" -n "$calls" -r 1000 -P 16 -c 4 -q "${words[@]}" >/dev/null 2>&1
  callgrind_control -i off "$pid" >/dev/null 2>&1
  cli shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
  pid=""
  local total
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  printf '| %-40s | %8d |\n' "$label" $((total / calls))
  echo "$out" >"$dir/last"
}

echo "Instructions per call inside call() (callgrind; 1000 keys, -P 16, $calls calls):"
echo
echo "| command | instructions |"
echo "|---|--:|"
measure "INCR" INCR key:__rand_int__
measure "RL.TOKENBUCKET (admitted)" RL.TOKENBUCKET tb:__rand_int__ 1000000 0.001 1
cp "$(cat "$dir/last")" "$dir/token_bucket.out"
measure "RL.TOKENBUCKET (denied, hot key)" RL.TOKENBUCKET hot 1 0.001 1
measure "RL.TOKENBUCKET PARTIAL (admitted)" RL.TOKENBUCKET tbp:__rand_int__ 1000000 0.001 1 PARTIAL
measure "RL.SLIDING (admitted)" RL.SLIDING sw:__rand_int__ 1000000 86400 1
measure "RL.FIXED (admitted)" RL.FIXED fw:__rand_int__ 1000000 86400 1
measure "RL.SLIDINGLOG (admitted)" RL.SLIDINGLOG sl:__rand_int__ 10000 86400 1
measure "CL.THROTTLE (admitted)" CL.THROTTLE cl:__rand_int__ 1000 1 86400
measure "Lua token bucket (EVALSHA)" EVALSHA @token_bucket@ 1 ltb:__rand_int__ 1000000 0.001 1
measure "Lua fixed window (EVALSHA)" EVALSHA @fixed_window@ 1 lfw:__rand_int__ 1000000 86400 1
# Three buckets per call. Each __rand_int__ gets its own random number, so a call names
# three independent keys among the 1000 of each position: all exist after the warm-up.
bucket=(TOKENBUCKET 1000000 0.001)
measure "RL.MULTI, 3 token buckets (admitted)" RL.MULTI 3 \
  "{mb:__rand_int__}:1" "{mb:__rand_int__}:2" "{mb:__rand_int__}:3" \
  "${bucket[@]}" "${bucket[@]}" "${bucket[@]}"
cp "$(cat "$dir/last")" "$dir/multi.out"
measure "Lua multi, 3 buckets (EVALSHA)" EVALSHA @multi_token_bucket@ 3 \
  "{lm:__rand_int__}:1" "{lm:__rand_int__}:2" "{lm:__rand_int__}:3" \
  1000000 0.001 1000000 0.001 1000000 0.001 1

breakdown() { # label, callgrind output, lines: the costliest functions of interest
  echo
  echo "Where $1's instructions go (inclusive, per call):"
  echo
  callgrind_annotate --inclusive=yes "$2" 2>/dev/null | python3 -c '
import re, sys
calls = int(sys.argv[1])
wanted = re.compile(r"RM_Replicate$|RM_ReplyWith|RM_OpenKey$|RM_SetAbsExpire$|RM_CloseKey$|"
                    r"RM_CreateString$|RM_FreeString$|RedisAlloc as .*::(alloc|dealloc)$|"
                    r"lookupCommandByCString$|RedisModuleCommandDispatcher$|redis_ratelimit::")
lines = int(sys.argv[2])
seen = {}
for line in sys.stdin:
    match = re.match(r"\s*([0-9,]+) \([^)]*\)\s+\S*?:(.+?)(?: \[.*)?$", line)
    if match and wanted.search(match.group(2)):
        seen.setdefault(match.group(2), int(match.group(1).replace(",", "")))
# The list is cut here, not by `| head`: head closing the pipe made this print raise
# BrokenPipeError, and pipefail then failed the script after every figure was printed.
for name, total in list(seen.items())[:lines]:
    print("  %8.0f  %s" % (total / calls, name[:80]))
' "$calls" "$3"
}
breakdown RL.TOKENBUCKET "$dir/token_bucket.out" 14
breakdown RL.MULTI "$dir/multi.out" 20
