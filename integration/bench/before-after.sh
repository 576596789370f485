#!/usr/bin/env bash
# Fibril against itself: two git revisions (or a revision and the work tree)
# measured in the same run, alternating, so that a change can show it costs
# no throughput on this noisy machine. See README.md beside this file.
#
#   integration/bench/before-after.sh BEFORE_REV [AFTER_REV] [--reps 2] [--duration 10s] [--warmup 2s] [--scenarios publish,e2e]
#
# AFTER_REV defaults to the work tree. Two scenarios, each 1 KiB messages,
# window 256, prefetch 256, fsync always (the default):
#   publish  confirmed publish, 1 producer, no consumer
#   e2e      confirmed publish, 4 producers + 4 consumers (manual ack)
# Each run starts a fresh broker with an empty data directory on
# 127.0.0.1 only; every process is stopped by its PID, also on failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

die() { echo "before-after.sh: $*" >&2; exit 1; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
[ $# -ge 1 ] || die "usage: before-after.sh BEFORE_REV [AFTER_REV] [--reps N] [--duration D] [--warmup D] [--scenarios publish,e2e]"
BEFORE=$1; shift
AFTER=""
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then AFTER=$1; shift; fi
REPS=2
DURATION=10s
WARMUP=2s
SCENARIOS=publish,e2e
PORT=19886
ADMIN_PORT=18091
while [ $# -gt 0 ]; do
	case "$1" in
	--reps) REPS=$2; shift 2 ;;
	--duration) DURATION=$2; shift 2 ;;
	--warmup) WARMUP=$2; shift 2 ;;
	--scenarios) SCENARIOS=$2; shift 2 ;;
	*) die "unknown option $1" ;;
	esac
done

work_dir before-after
echo "== building before ($BEFORE) and after (${AFTER:-work tree}) in $WORK" >&2
build_fibril "$WORK/before" "$BEFORE"
build_fibril "$WORK/after" "$AFTER"

run() { # run NAME SCENARIO: one fresh broker, one bench, prints "msgs/s p99_ms"
	local bin=$WORK/$1 data=$WORK/data-$1-$2 log=$WORK/$1-$2.log
	rm -rf "$data"
	start_broker "$bin/fibril" "$data" "$log" 30
	local -a load=(--producers 1 --consumers 0)
	[ "$2" = e2e ] && load=(--producers 4 --consumers 4)
	local out
	out=$(timeout 120 "$bin/fibrilctl" --addr "127.0.0.1:$PORT" bench --topic "ba-$2" --size 1024 --window 256 \
		--prefetch 256 --confirmed "${load[@]}" --duration "$DURATION" --warmup "$WARMUP" --json --progress=false)
	# The broker's CPU time (user + system clock ticks) over the whole run.
	local ticks
	ticks=$(awk '{print $14 + $15}' "/proc/$PID/stat")
	stop_pid "$PID"; PID=""
	# publish: confirmed msgs/s and confirm p99; e2e: delivered msgs/s and
	# publish->deliver p99; both: the broker's CPU µs per confirmed message
	# (warmup and drain included), steadier than the rate on a noisy machine.
	python3 - "$2" "$out" "$ticks" "$(getconf CLK_TCK)" <<'PY'
import json, sys
r = json.loads(sys.argv[2])
cpu_us = int(sys.argv[3]) / int(sys.argv[4]) * 1e6 / max(r['confirmed'], 1)
if sys.argv[1] == "publish":
    print(f"{r['publish_msgs_per_sec']:.0f} {r['confirm_p99_us'] / 1000:.1f} {cpu_us:.2f}")
else:
    print(f"{r['deliver_msgs_per_sec']:.0f} {r['e2e_p99_us'] / 1000:.1f} {cpu_us:.2f}")
PY
}

printf '%-8s %-4s %-8s %12s %10s %12s\n' scenario rep build "msgs/s" "p99 ms" "cpu µs/msg" | tee "$WORK/results"
for sc in ${SCENARIOS//,/ }; do
	for rep in $(seq 1 "$REPS"); do
		if [ $((rep % 2)) = 1 ]; then order=(before after); else order=(after before); fi
		for b in "${order[@]}"; do
			read -r rate p99 cpu < <(run "$b" "$sc")
			printf '%-8s %-4s %-8s %12s %10s %12s\n' "$sc" "$rep" "$b" "$rate" "$p99" "$cpu" | tee -a "$WORK/results"
		done
	done
done
# The summary: mean msgs/s of each build per scenario, and after / before.
python3 - "$WORK/results" <<'PY'
import collections, sys
runs = collections.defaultdict(list)
cpus = collections.defaultdict(list)
for line in open(sys.argv[1]).read().splitlines()[1:]:
    sc, _, build, rate, _, cpu = line.split()
    runs[(sc, build)].append(float(rate))
    cpus[(sc, build)].append(float(cpu))
for sc in ("publish", "e2e"):
    if not runs[(sc, "before")]:
        continue
    b = sum(runs[(sc, "before")]) / len(runs[(sc, "before")])
    a = sum(runs[(sc, "after")]) / len(runs[(sc, "after")])
    cb = sum(cpus[(sc, "before")]) / len(cpus[(sc, "before")])
    ca = sum(cpus[(sc, "after")]) / len(cpus[(sc, "after")])
    print(f"{sc:8} before {b:9.0f}  after {a:9.0f}  after/before {a / b:.2f}   "
          f"cpu µs/msg before {cb:.2f} after {ca:.2f} after/before {ca / cb:.2f}")
PY
