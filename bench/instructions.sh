#!/usr/bin/env bash
# Instructions per call, counted by callgrind: deterministic on a noisy machine.
#
# Runs redis-server (with the release module) under `valgrind --tool=callgrind`, counts
# only inside Redis's `call()` (the command itself: lookups, the module, replies and
# propagation; not socket I/O or protocol parsing), and prints instructions per call for
# INCR, each RL command and the Lua script of the same algorithm, plus the most expensive
# functions for RL.TOKENBUCKET. Usage: bench/instructions.sh [module.so] [calls]
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
measure "RL.SLIDING (admitted)" RL.SLIDING sw:__rand_int__ 1000000 86400 1
measure "RL.FIXED (admitted)" RL.FIXED fw:__rand_int__ 1000000 86400 1
measure "RL.SLIDINGLOG (admitted)" RL.SLIDINGLOG sl:__rand_int__ 10000 86400 1
measure "CL.THROTTLE (admitted)" CL.THROTTLE cl:__rand_int__ 1000 1 86400
measure "Lua token bucket (EVALSHA)" EVALSHA @token_bucket@ 1 ltb:__rand_int__ 1000000 0.001 1
measure "Lua fixed window (EVALSHA)" EVALSHA @fixed_window@ 1 lfw:__rand_int__ 1000000 86400 1
echo
echo "Where RL.TOKENBUCKET's instructions go (inclusive, per call; the 14 largest):"
echo
# The filter reads all of its input and stops printing after 14 lines itself: cutting the
# pipe with `head` instead makes a writer fail with a broken pipe, which pipefail turns into
# this script's exit status after every figure was printed.
callgrind_annotate --inclusive=yes "$dir/token_bucket.out" 2>/dev/null |
  python3 -c '
import re, sys
calls = int(sys.argv[1])
wanted = re.compile(r"RM_Replicate$|RM_ReplyWith|RM_OpenKey$|RM_SetAbsExpire$|RM_CloseKey$|"
                    r"lookupCommandByCString$|RedisModuleCommandDispatcher$|redis_ratelimit::")
seen = set()
for line in sys.stdin:
    match = re.match(r"\s*([0-9,]+) \([^)]*\)\s+\S*?:(\S+)", line)
    if match and wanted.search(match.group(2)) and match.group(2) not in seen and len(seen) < 14:
        seen.add(match.group(2))
        print("  %8.0f  %s" % (int(match.group(1).replace(",", "")) / calls, match.group(2)[:80]))
' "$calls"
