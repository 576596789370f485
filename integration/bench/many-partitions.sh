#!/usr/bin/env bash
# Does spreading the load cost throughput? One build of Fibril (the work
# tree, or REV) measured with three layouts in the same run, alternating,
# each on a fresh broker: the goal of issue 15 is that 1x12 and 100x1 reach
# at least 0.8 of 1x1. See README.md beside this file.
#
#   integration/bench/many-partitions.sh [REV] [--reps 2] [--duration 10s] [--warmup 2s] [--scenarios publish,e2e]
#
# Layouts (fibrilctl bench --queues Q --partitions P):
#   1x1    one queue of one partition
#   1x12   one queue of 12 partitions
#   100x1  100 queues of one partition
# Scenarios, each 1 KiB messages, window 256, prefetch 256, fsync always
# (the default), every producer spreading its messages round-robin over
# every partition of every queue:
#   publish  confirmed publish, 1 producer, no consumer
#   e2e      confirmed publish, 4 producers + 4 consumers (manual ack)
# Each run starts a fresh broker with an empty data directory on
# 127.0.0.1 only; every process is stopped by its PID, also on failure,
# and the temporary directory is removed.
#
# One line per run: msgs/s (confirmed for publish, delivered for e2e), p99
# (confirm for publish, publish->deliver for e2e), and the broker's CPU
# (user + system, /proc/PID/stat) per confirmed message, over the measured
# window ("cpu", read by the bench: --server-pid) and over the whole bench
# ("all": logins, declarations, subscriptions, warmup and drain included,
# as before-after.sh counts it). Then the means per layout and their
# ratios to 1x1.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

die() { echo "many-partitions.sh: $*" >&2; exit 1; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
usage="usage: many-partitions.sh [REV] [--reps N] [--duration D] [--warmup D] [--scenarios publish,e2e] [--port P] [--admin-port P]"
REV=""
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then REV=$1; shift; fi
REPS=2
DURATION=10s
WARMUP=2s
SCENARIOS=publish,e2e
PORT=19896
ADMIN_PORT=18096
LAYOUTS=(1x1 1x12 100x1)
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || die "$1 needs a value; $usage"
	case "$1" in
	--reps) REPS=$2 ;;
	--duration) DURATION=$2 ;;
	--warmup) WARMUP=$2 ;;
	--scenarios) SCENARIOS=$2 ;;
	--port) PORT=$2 ;;
	--admin-port) ADMIN_PORT=$2 ;;
	*) die "unknown option $1; $usage" ;;
	esac
	shift 2
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
for sc in ${SCENARIOS//,/ }; do
	case "$sc" in publish | e2e) ;; *) die "unknown scenario $sc (publish, e2e)" ;; esac
done

# Bound on one bench: its duration, warmup, 10 s drain, and 60 s for the
# connections, the declarations and the subscriptions.
BENCH_LIMIT=$(($(secs "$DURATION") + $(secs "$WARMUP") + 70))

work_dir many-partitions # BPID: the bench (its timeout process)
echo "== building ${REV:-the work tree} in $WORK" >&2
build_fibril "$WORK/bin" "$REV"
help=$("$WORK/bin/fibrilctl" bench --help 2>&1 || true)
grep -q -- --queues <<<"$help" || die "fibrilctl of ${REV:-the work tree} has no bench --queues"

# run SCENARIO LAYOUT: one fresh broker, one bench; writes "msgs/s p99_ms
# cpu_us_per_msg all_us_per_msg" to $WORK/line. It runs in this shell, not in a
# subshell, so that the EXIT trap knows the PIDs it started.
run() {
	local sc=$1 layout=$2 data=$WORK/data log=$WORK/broker.log
	local queues=${layout%x*} parts=${layout#*x}
	rm -rf "$data"
	start_broker "$WORK/bin/fibril" "$data" "$log" 30
	# The broker's CPU time (user + system clock ticks, /proc/PID/stat
	# fields 14 and 15) from here to the end of the bench, as
	# before-after.sh reads it: the logins, the declarations, the
	# subscriptions, the warmup, the measured window and the drain. The
	# bench reads the same over its measured window (--server-pid).
	local ticks0 ticks1
	ticks0=$(awk '{print $14 + $15}' "/proc/$PID/stat")
	local -a load=(--producers 1 --consumers 0)
	[ "$sc" = e2e ] && load=(--producers 4 --consumers 4)
	timeout "$BENCH_LIMIT" "$WORK/bin/fibrilctl" --addr "127.0.0.1:$PORT" bench --topic "mp-$layout" \
		--queues "$queues" --partitions "$parts" --size 1024 --window 256 --prefetch 256 --confirmed "${load[@]}" \
		--duration "$DURATION" --warmup "$WARMUP" --server-pid "$PID" --json --progress=false \
		>"$WORK/out.json" 2>"$WORK/bench.err" &
	BPID=$!
	local rc=0
	wait "$BPID" || rc=$?
	BPID=""
	ticks1=$(awk '{print $14 + $15}' "/proc/$PID/stat")
	stop_pid "$PID"
	PID=""
	rm -rf "$data"
	if [ "$rc" != 0 ]; then
		cat "$WORK/bench.err" >&2
		die "bench failed with exit $rc ($sc $layout)"
	fi
	# publish: confirmed msgs/s and confirm p99; e2e: delivered msgs/s and
	# publish->deliver p99; both: the broker's CPU µs per confirmed
	# message, over the measured window (cpu) and over the whole bench
	# (all: per message confirmed in the whole run). Losses, duplicates
	# and errors are reported on stderr.
	python3 - "$sc" "$layout" "$WORK/out.json" "$((ticks1 - ticks0))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
sc, layout = sys.argv[1], sys.argv[2]
r = json.load(open(sys.argv[3]))
all_us = int(sys.argv[4]) / int(sys.argv[5]) * 1e6 / max(r["confirmed"], 1)
cpu_us = r.get("server_cpu_per_msg_us", 0)
bad = {k: r[k] for k in ("lost", "duplicates", "publish_errors", "ack_errors", "consume_errors") if r.get(k)}
if bad:
    print(f"many-partitions.sh: {sc} {layout}: {bad} {r.get('error_samples', [])}", file=sys.stderr)
if sc == "publish":
    print(f"{r['publish_msgs_per_sec']:.0f} {r['confirm_p99_us'] / 1000:.1f} {cpu_us:.2f} {all_us:.2f}")
else:
    print(f"{r['deliver_msgs_per_sec']:.0f} {r['e2e_p99_us'] / 1000:.1f} {cpu_us:.2f} {all_us:.2f}")
PY
} >"$WORK/line"

printf '%-8s %-4s %-7s %10s %8s %11s %11s\n' scenario rep layout "msgs/s" "p99 ms" "cpu µs/msg" "all µs/msg" | tee "$WORK/results"
for sc in ${SCENARIOS//,/ }; do
	for rep in $(seq 1 "$REPS"); do
		order=("${LAYOUTS[@]}")
		if [ $((rep % 2)) = 0 ]; then order=(100x1 1x12 1x1); fi
		for layout in "${order[@]}"; do
			run "$sc" "$layout"
			read -r rate p99 cpu all <"$WORK/line"
			printf '%-8s %-4s %-7s %10s %8s %11s %11s\n' "$sc" "$rep" "$layout" "$rate" "$p99" "$cpu" "$all" | tee -a "$WORK/results"
		done
	done
done
# The summary: per scenario and layout, the mean msgs/s and its ratio to
# 1x1 (the goal: >= 0.80), the median over the reps of each rep's own
# ratio (the three layouts of a rep run back to back, so this one holds
# up when the machine's disk or CPU drifts during the run: trust it over
# the ratio of means when they differ), and the mean broker CPU µs per
# message over the measured window and its ratio to 1x1.
echo
python3 - "$WORK/results" <<'PY'
import collections, statistics, sys
rates = collections.defaultdict(list)
cpus = collections.defaultdict(list)
per_rep = {}
for line in open(sys.argv[1]).read().splitlines()[1:]:
    sc, rep, layout, rate, _, cpu, _ = line.split()
    rates[(sc, layout)].append(float(rate))
    cpus[(sc, layout)].append(float(cpu))
    per_rep[(sc, rep, layout)] = float(rate)
mean = lambda v: sum(v) / len(v)
def paired(sc, layout):
    rs = [v / per_rep[(s, rep, "1x1")] for (s, rep, l), v in per_rep.items()
          if s == sc and l == layout and per_rep.get((s, rep, "1x1"))]
    return statistics.median(rs) if rs else 0
print(f"{'scenario':8} {'layout':7} {'msgs/s':>10} {'/ 1x1':>6} {'median':>6} {'cpu µs/msg':>11} {'/ 1x1':>6}")
for sc in ("publish", "e2e"):
    if not rates[(sc, "1x1")]:
        continue
    base, cbase = mean(rates[(sc, "1x1")]), mean(cpus[(sc, "1x1")])
    for layout in ("1x1", "1x12", "100x1"):
        r, c = mean(rates[(sc, layout)]), mean(cpus[(sc, layout)])
        print(f"{sc:8} {layout:7} {r:10.0f} {r / base if base else 0:6.2f} {paired(sc, layout):6.2f} {c:11.2f} {c / cbase if cbase else 0:6.2f}")
PY
