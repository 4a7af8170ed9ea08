#!/usr/bin/env bash
# Instructions per call, counted by callgrind: deterministic on a noisy machine.
#
# Runs redis-server (with the release module) under `valgrind --tool=callgrind`, counts
# only inside Redis's `call()` (the command itself: lookups, the module, replies and
# propagation; not socket I/O or protocol parsing), and prints instructions per call for
# INCR, each RL command, the Lua script of the same algorithm and the Functions library's
# function (functions/ratelimit.lua, FCALL), plus the most expensive functions for
# RL.TOKENBUCKET, RL.MULTI, RL.ACQUIRE and RL.RELEASE.
# Usage: bench/instructions.sh [module.so] [calls]
# BENCH_ONLY=<regex> measures only the calls whose label matches (e.g. BENCH_ONLY='FCALL|Lua token'),
# and prints the breakdowns of those it measured.
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

start_server() { # starts redis-server under callgrind, counting nothing yet; sets $out
  out="$dir/cg.$RANDOM"
  valgrind --tool=callgrind --callgrind-out-file="$out" --instr-atstart=no --collect-atstart=no \
    --toggle-collect=call redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" \
    --loadmodule "$module" --daemonize no --logfile "$dir/log" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 150); do cli ping >/dev/null 2>&1 && break; sleep 0.2; done
  cli -x FUNCTION LOAD REPLACE <functions/ratelimit.lua >/dev/null
}

keep() { # name: keeps the last measure's callgrind output as $dir/<name>.out, if it ran
  if [[ -f $dir/last ]]; then cp "$(cat "$dir/last")" "$dir/$1.out"; fi
  rm -f "$dir/last"
}

selected() { # label: whether BENCH_ONLY (a regex, default all) selects it
  [[ -z ${BENCH_ONLY:-} || $1 =~ $BENCH_ONLY ]]
}

report() { # label: stops the server, prints instructions per measured call
  cli shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
  pid=""
  local total
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  printf '| %-40s | %8d |\n' "$1" $((total / calls))
  echo "$out" >"$dir/last"
}

measure() { # label, command words...
  local label=$1; shift
  selected "$label" || return 0
  start_server
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
  report "$label"
}

# In-flight limits need calls redis-benchmark cannot make (it repeats one command, and a
# release must name a holder that is there), so their calls come from bench/holders.py,
# sent with `redis-cli --pipe`: the semaphores and holders it lays out, then the measured
# calls (its last ECHO, which --pipe adds, is counted too: well under one instruction a call).
pipe() { # phase, implementation (module|lua): sends bench/holders.py's calls, fails on errors
  local result
  result=$(python3 bench/holders.py "$1" "$2" "$calls" "${sha[semaphore]}" "${sha[semaphore_release]}" \
    | redis-cli -p "$port" --pipe)
  [[ $result == *"errors: 0,"* ]] || { echo "$1 ($2): $result" >&2; exit 1; }
}

measure_holders() { # label, implementation (module|lua|functions), measured phase, phases before it...
  local label=$1 impl=$2 phase=$3; shift 3
  selected "$label" || return 0
  start_server
  sha[semaphore]=$(cli script load "$(cat bench/lua/semaphore.lua)")
  sha[semaphore_release]=$(cli script load "$(cat bench/lua/semaphore_release.lua)")
  for before in "$@"; do pipe "$before" "$impl"; done
  callgrind_control -i on "$pid" >/dev/null 2>&1
  pipe "$phase" "$impl"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  report "$label"
}

echo "Instructions per call inside call() (callgrind; 1000 keys, -P 16, $calls calls;"
echo "RL.ACQUIRE, RL.RELEASE and their Lua twins: 1000 semaphores of 100 holders, bench/holders.py):"
echo
echo "| command | instructions |"
echo "|---|--:|"
measure "INCR" INCR key:__rand_int__
measure "RL.TOKENBUCKET (admitted)" RL.TOKENBUCKET tb:__rand_int__ 1000000 0.001 1
keep token_bucket
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
keep multi
measure "Lua multi, 3 buckets (EVALSHA)" EVALSHA @multi_token_bucket@ 3 \
  "{lm:__rand_int__}:1" "{lm:__rand_int__}:2" "{lm:__rand_int__}:3" \
  1000000 0.001 1000000 0.001 1000000 0.001 1
# Pacing, 1 token per 500 s, so a bucket stays in debt however slowly valgrind runs: the
# warm-up's ~20 calls a key put each bucket ~10,000 s in debt, and every measured call is
# admitted with a wait (a day, MAXWAIT, is 172 calls a key). Denied: the drained hot
# key's next token is 1000 s away, beyond MAXWAIT 1 s.
measure "RL.TOKENBUCKET MAXWAIT (with a wait)" RL.TOKENBUCKET mw:__rand_int__ 1 0.002 1 MAXWAIT 86400000
keep maxwait
measure "RL.TOKENBUCKET MAXWAIT (denied, hot key)" RL.TOKENBUCKET hot 1 0.001 1 MAXWAIT 1000
measure "Lua reservation, with a wait (EVALSHA)" EVALSHA @reservation@ 1 lmw:__rand_int__ 1 0.002 1 86400000
measure "Lua reservation, denied (EVALSHA)" EVALSHA @reservation@ 1 hot 1 0.001 1 1000
# In-flight limits: 1000 semaphores of 100 holders each (bench/holders.py), then the
# measured calls: renewals of those holders; new holders (a key grows from 100 to 120);
# releases of those new holders (from 120 back to 100), in random order.
measure_holders "RL.ACQUIRE (renew, 100 holders)" module renew residents
keep renew
measure_holders "RL.ACQUIRE (new holder, 100+ holders)" module new residents
keep new
measure_holders "RL.RELEASE (100+ holders)" module release residents new
keep release
measure_holders "Lua semaphore, renew (EVALSHA)" lua renew residents
measure_holders "Lua semaphore, new holder (EVALSHA)" lua new residents
measure_holders "Lua semaphore release (EVALSHA)" lua release residents new

# The Functions library (functions/ratelimit.lua) through FCALL: the same calls, with
# parameters within the library's range (an empty bucket refills within 52 days). A
# sliding window of 1,000,000 a day makes count × window exceed 2^53 (the exact wide
# product); 1,000 a minute stays within it.
measure "rl_tokenbucket (FCALL, admitted)" FCALL rl_tokenbucket 1 ftb:__rand_int__ 1000000 1 1
measure "rl_tokenbucket (FCALL, denied, hot key)" FCALL rl_tokenbucket 1 fhot 1 0.001 1
measure "rl_tokenbucket PARTIAL (FCALL, admitted)" FCALL rl_tokenbucket 1 ftbp:__rand_int__ 1000000 1 1 PARTIAL
measure "rl_tokenbucket MAXWAIT (FCALL, with a wait)" FCALL rl_tokenbucket 1 fmw:__rand_int__ 1 0.002 1 MAXWAIT 86400000
measure "rl_sliding (FCALL, 1000000 a day)" FCALL rl_sliding 1 fsw:__rand_int__ 1000000 86400 1
measure "rl_sliding (FCALL, 1000 a minute)" FCALL rl_sliding 1 fsm:__rand_int__ 1000 60 1
measure "rl_fixed (FCALL, admitted)" FCALL rl_fixed 1 ffw:__rand_int__ 1000000 86400 1
measure "rl_slidinglog (FCALL, admitted)" FCALL rl_slidinglog 1 fsl:__rand_int__ 10000 86400 1
measure "cl_throttle (FCALL, admitted)" FCALL cl_throttle 1 fcl:__rand_int__ 1000 1 60
measure "rl_peek (FCALL)" FCALL rl_peek 1 fpk:__rand_int__ TOKENBUCKET 1000000 1
measure "rl_refund (FCALL)" FCALL rl_refund 1 frf:__rand_int__ TOKENBUCKET 1000000 1 1
fbucket=(TOKENBUCKET 1000000 1)
measure "rl_multi, 3 token buckets (FCALL, admitted)" FCALL rl_multi 3 \
  "{fm:__rand_int__}:1" "{fm:__rand_int__}:2" "{fm:__rand_int__}:3" \
  "${fbucket[@]}" "${fbucket[@]}" "${fbucket[@]}"
measure_holders "rl_acquire (FCALL, renew, 100 holders)" functions renew residents
measure_holders "rl_acquire (FCALL, new holder, 100+ holders)" functions new residents
measure_holders "rl_release (FCALL, 100+ holders)" functions release residents new

breakdown() { # label, callgrind output, lines: the costliest functions of interest
  echo
  echo "Where $1's instructions go (inclusive, per call):"
  echo
  callgrind_annotate --inclusive=yes "$2" 2>/dev/null | python3 -c '
import re, sys
calls = int(sys.argv[1])
# The functions of the holder list (redis_ratelimit_core::concurrency) and memcmp show
# what walking it costs: ids are found by comparing each stored id in turn.
wanted = re.compile(r"RM_Replicate$|RM_ReplyWith|RM_OpenKey$|RM_SetAbsExpire$|RM_CloseKey$|"
                    r"RM_CreateString$|RM_FreeString$|RedisAlloc as .*::(alloc|dealloc)$|"
                    r"lookupCommandByCString$|RedisModuleCommandDispatcher$|redis_ratelimit::|"
                    r"redis_ratelimit_core::concurrency|__memcmp")
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
# Each breakdown whose row was measured (all of them unless BENCH_ONLY left some out).
breakdowns=(
  "RL.TOKENBUCKET|token_bucket|14" "RL.MULTI|multi|20" "RL.TOKENBUCKET MAXWAIT|maxwait|14"
  "RL.ACQUIRE (renew)|renew|20" "RL.ACQUIRE (new holder)|new|20" "RL.RELEASE|release|20"
)
for entry in "${breakdowns[@]}"; do
  IFS='|' read -r label name lines <<<"$entry"
  [[ -f $dir/$name.out ]] && breakdown "$label" "$dir/$name.out" "$lines"
done
exit 0
