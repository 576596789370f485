#!/usr/bin/env bash
# What a repartition costs (issue 22), on a three-broker local cluster
# (fibril dev, embedded raft, 127.0.0.1 only, replication defaults,
# fsync always), 1 KiB messages, window 256, one producer:
#   1. throughput during a grow: keyed confirmed publish (and, in a second
#      row, end to end with one consumer that follows the count) to a new
#      2-partition queue, once steady and once with a grow 2 -> 4 requested
#      --at seconds into the run. From the bench's progress lines: the rate
#      before the request and after it, the slowest second after it; the
#      confirm latencies of the publishes that met the fence (the pause a
#      producer sees, fence_confirm_p99); the time from the request to
#      finalize; each rep runs the four, the grow first in even reps, and
#      the medians over the reps come last;
#   2. the time from the request to finalize with a backlog: a 1-partition
#      queue filled with --backlog-mb of messages, grown 1 -> 2 while one
#      consumer (fibrilctl consume, following the count) reads it all:
#      when the backlog was consumed and when the transition finalized.
#
#   integration/bench/repartition.sh [--reps 3] [--duration 16s] [--at 6s] [--backlog-mb 1024] [--keys 64] [--private]
#
# --private makes node-3 private (clients reach its partitions through the
# public brokers, which forward). Every process it starts is stopped by
# its PID at exit; the data directory is removed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

die() { echo "repartition.sh: $*" >&2; exit 1; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
DURATION=16s
AT=6s
REPS=3
BACKLOG_MB=1024
KEYS=64
PRIVATE=0
PORT=19960 # client ports of node-1..3: +0..2
ADMIN_PORT=18160
RAFT_PORT=17960
while [ $# -gt 0 ]; do
	case "$1" in
	--duration) DURATION=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--at) AT=$2; shift 2 ;;
	--backlog-mb) BACKLOG_MB=$2; shift 2 ;;
	--keys) KEYS=$2; shift 2 ;;
	--private) PRIVATE=1; shift ;;
	-h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown option $1" ;;
	esac
done
[[ $BACKLOG_MB =~ ^[0-9]+$ ]] || die "--backlog-mb must be a whole number of MiB (0 skips part 2)"
[[ $KEYS =~ ^[1-9][0-9]*$ ]] || die "--keys must be a positive integer"
[[ $REPS =~ ^[0-9]+$ ]] || die "--reps must be a whole number (0 skips part 1)"
DUR_S=$(secs "$DURATION")
AT_S=$(secs "$AT")
[ "$AT_S" -lt "$DUR_S" ] || die "--at must come before the end of --duration"
RUN_BOUND=$((DUR_S + 120))
for p in $PORT $((PORT + 1)) $((PORT + 2)) $ADMIN_PORT $((ADMIN_PORT + 1)) $((ADMIN_PORT + 2)) $RAFT_PORT $((RAFT_PORT + 1)) $((RAFT_PORT + 2)); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "port 127.0.0.1:$p is in use"; fi
done

work_dir repartition
DEV="" # the fibril dev supervisor
CPID="" # a consumer in the background
WATCH="" # the request trigger
stop_all() {
	local p
	for p in "$WATCH" "$CPID" "$DEV"; do [ -z "$p" ] || stop_pid "$p"; done
}
trap 'stop_all; work_cleanup' EXIT

echo "== building fibril and fibrilctl" >&2
build_fibril "$WORK/bin"
ctl() { local cmd=$1; shift; "$WORK/bin/fibrilctl" "$cmd" --addr "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN_PORT" --timeout 30s "$@"; }

echo "== starting fibril dev (3 brokers$([ "$PRIVATE" = 1 ] && echo ", node-3 private"))" >&2
flags=()
[ "$PRIVATE" = 0 ] || flags=(--private 1)
"$WORK/bin/fibril" dev --nodes 3 --dir "$WORK/dev" --client-port $PORT --admin-port $ADMIN_PORT \
	--raft-port $RAFT_PORT "${flags[@]}" >"$WORK/dev.log" 2>&1 &
DEV=$!
for _ in $(seq 1 600); do
	grep -q 'cluster ready' "$WORK/dev.log" 2>/dev/null && break
	kill -0 "$DEV" 2>/dev/null || { tail -20 "$WORK/dev.log" >&2; die "fibril dev exited"; }
	sleep 0.1
done
grep -q 'cluster ready' "$WORK/dev.log" || die "the cluster was not ready in 60 s"

# transitions TOPIC: how many transitions of TOPIC the topology lists (0 once finalized).
transitions() {
	curl -s --max-time 5 "http://127.0.0.1:$ADMIN_PORT/admin/api/topology" |
		python3 -c 'import json,sys; print(sum(1 for r in (json.load(sys.stdin).get("repartitions") or []) if r.get("topic") == sys.argv[1]))' "$1"
}
# await_finalized TOPIC T0: waits (at most 5 s) until TOPIC's transition
# shows, then (at most 180 s) until TOPIC has none, and prints the seconds
# since T0 (date +%s.%N); "never-seen-in-5s" when it did not show.
await_finalized() {
	local n seen=0
	for _ in $(seq 1 50); do # the admin view may not show the new marker at once
		n=$(transitions "$1" 2>/dev/null || echo 0)
		if [ "$n" != 0 ]; then seen=1 && break; fi
		sleep 0.1
	done
	if [ "$seen" = 0 ]; then
		echo "never-seen-in-5s"
		return 0
	fi
	for _ in $(seq 1 1800); do
		n=$(transitions "$1" 2>/dev/null || echo 1)
		if [ "$n" = 0 ]; then
			python3 -c 'import sys,time; print(f"{time.time() - float(sys.argv[1]):.1f}")' "$2"
			return 0
		fi
		sleep 0.1
	done
	echo "not-finalized-in-180s"
}
now() { date +%s.%N; }

# run_bench NAME CONSUMERS GROW: one bench run on a new 2-partition queue
# NAME; with GROW=1 a watcher requests the grow 2 -> 4 once the bench's
# progress reaches --at, then waits for it to finalize. Leaves
# $WORK/NAME.json, NAME.progress, NAME.req (the request's progress second
# and wall clock) and NAME.final (seconds from the request to finalize).
run_bench() {
	local name=$1 consumers=$2 grow=$3 rc=0
	: >"$WORK/$name.progress"
	if [ "$grow" = 1 ]; then
		(
			for _ in $(seq 1 $((RUN_BOUND * 20))); do
				t=$(awk -F'[[ s]+' '/^\[ *[0-9.]+s/ {t = $2} END {print t + 0}' "$WORK/$name.progress")
				if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$t" "$AT_S"; then
					t0=$(now)
					echo "$t $t0" >"$WORK/$name.req"
					ctl repartition --topic "$name" --partitions 4 >"$WORK/$name.reqout" 2>&1 || true
					# while the load runs: a publish-only run never
					# finalizes (nothing drains), and is stopped with the bench
					await_finalized "$name" "$t0" >"$WORK/$name.final"
					exit 0
				fi
				sleep 0.05
			done
		) &
		WATCH=$!
	fi
	timeout -k 5 "$RUN_BOUND" "$WORK/bin/fibrilctl" bench --addr "127.0.0.1:$PORT" --topic "$name" --partitions 2 \
		--keys "$KEYS" --size 1024 --window 256 --confirmed --producers 1 --consumers "$consumers" \
		--duration "$DURATION" --warmup 0s --drain 30s --json >"$WORK/$name.json" 2>"$WORK/$name.progress" || rc=$?
	[ "$rc" = 0 ] || { tail -5 "$WORK/$name.progress" >&2; die "bench $name failed (exit $rc)"; }
	if [ "$grow" = 1 ]; then
		[ -s "$WORK/$name.req" ] || die "$name: the grow was never requested"
		grep -q '^started' "$WORK/$name.reqout" || die "$name: the grow request failed: $(cat "$WORK/$name.reqout")"
		if [ "$consumers" = 0 ]; then # nothing consumes, so no source drains: the transition waits
			echo "n/a (no consumer)" >"$WORK/$name.final"
		else
			for _ in $(seq 1 1800); do [ -s "$WORK/$name.final" ] && break; sleep 0.1; done
		fi
	fi
	if [ -n "$WATCH" ]; then stop_pid "$WATCH"; WATCH=""; fi
	drop "$name"
}
# drop TOPIC: deletes the queue and its messages (the disk is not endless).
drop() { ctl queues delete "$1" --force --yes >/dev/null 2>&1 || echo "warning: could not delete queue $1" >&2; }

# report NAME STEADY: one line from NAME's run (grown) beside STEADY's.
report() {
	python3 - "$WORK" "$1" "$2" <<'PY'
import json, re, sys
work, name, steady = sys.argv[1:]
def load(n):
    r = json.load(open(f"{work}/{n}.json"))
    # [  6.0s run   ] sent … | pub 51234/s  del 50000/s | …
    secs = []
    for line in open(f"{work}/{n}.progress"):
        m = re.match(r"\[\s*([0-9.]+)s\s+(\S+)\s*\].*\| pub (\d+)/s\s+del (\d+)/s", line)
        if m and m.group(2) == "run":
            secs.append((float(m.group(1)), int(m.group(3)), int(m.group(4))))
    return r, secs
g, gs = load(name)
s, ss = load(steady)
e2e = g["consumers"] > 0
col = 2 if e2e else 1  # delivered rate end to end, else confirmed publish
req = float(open(f"{work}/{name}.req").read().split()[0])
before = [x[col] for x in gs[1:] if x[0] <= req]  # skip the first second (connect, declare)
after = [x[col] for x in gs if x[0] > req and x != gs[-1]]
mean = lambda v: sum(v) / len(v) if v else 0
sv = [x[col] for x in ss[1:-1]]
final = open(f"{work}/{name}.final").read().strip()
bad = g["lost"] + g["duplicates"] + g["publish_errors"] + s["lost"] + s["duplicates"] + s["publish_errors"]
print(f"{'end to end' if e2e else 'confirmed publish':<18} steady {mean(sv):>7.0f}/s (slowest {min(sv) if sv else 0:>6})"
      f" | grow: before {mean(before):>7.0f}/s  after {mean(after):>7.0f}/s  ratio {mean(after) / max(mean(before), 1):.2f}"
      f"  slowest after {min(after) if after else 0:>6}"
      f" | fence: {g.get('fence_samples', 0)} publishes, confirm p50 {g.get('fence_confirm_p50_us', 0) / 1000:.1f} ms"
      f" p99 {g.get('fence_confirm_p99_us', 0) / 1000:.1f} ms max {g.get('fence_confirm_max_us', 0) / 1000:.1f} ms"
      f" (all confirms p99 {g['confirm_p99_us'] / 1000:.1f} ms, steady {s['confirm_p99_us'] / 1000:.1f} ms)"
      f" | request->finalize {final} s" + (f"  LOST+DUP+ERRORS {bad}" if bad else ""))
with open(f"{work}/summary.tsv", "a") as f:
    fence = f"{g['fence_confirm_p99_us'] / 1000:.1f}" if g.get("fence_samples") else "-"
    f.write(f"{'end to end' if e2e else 'confirmed publish'}\t{mean(after) / max(mean(before), 1):.3f}\t{fence}\t{final.split()[0]}\n")
PY
}

echo "== a short run first, so that the first measured run does not pay for a cold cluster" >&2
timeout -k 5 120 "$WORK/bin/fibrilctl" bench --addr "127.0.0.1:$PORT" --topic warm --partitions 2 --keys "$KEYS" \
	--window 256 --confirmed --producers 1 --consumers 1 --duration 4s --warmup 0s --json --progress=false >/dev/null 2>&1 || true
drop warm
echo "== 1. throughput during a grow 2 -> 4 at ${AT_S}s of ${DURATION} (keys $KEYS), $REPS reps" >&2
: >"$WORK/summary.tsv"
for rep in $(seq 1 "$REPS"); do
	for kind in pub e2e; do
		consumers=0
		[ "$kind" = pub ] || consumers=1
		if [ $((rep % 2)) = 1 ]; then # even reps run the grow first
			run_bench "steady-$kind-$rep" "$consumers" 0
			run_bench "grow-$kind-$rep" "$consumers" 1
		else
			run_bench "grow-$kind-$rep" "$consumers" 1
			run_bench "steady-$kind-$rep" "$consumers" 0
		fi
		report "grow-$kind-$rep" "steady-$kind-$rep"
	done
done
python3 - "$WORK/summary.tsv" <<'PY'
import statistics, sys
from collections import defaultdict
rows = defaultdict(list)
for line in open(sys.argv[1]):
    kind, *vals = line.rstrip("\n").split("\t")
    rows[kind].append(vals)
med = lambda v: statistics.median(v) if v else float("nan")
print("\nmedian over the reps [each rep's own]")
for kind, v in rows.items():
    ratio = [float(x[0]) for x in v]
    fence = [float(x[1]) for x in v if x[1] != "-"]
    fin = [x[2] for x in v]
    print(f"{kind:<18} rate after / before {med(ratio):.2f} [{' '.join(f'{x:.2f}' for x in ratio)}]"
          f"  fence confirm p99 {med(fence):.1f} ms [{' '.join(f'{x:.1f}' for x in fence)}]"
          f"  request->finalize [{' '.join(fin)}] s")
PY

if [ "$BACKLOG_MB" -gt 0 ]; then
	echo "== 2. a ${BACKLOG_MB} MiB backlog grown 1 -> 2 while one consumer reads it" >&2
	Q=backlog
	ctl declare --topic "$Q" --partitions 1 >/dev/null
	want=$((BACKLOG_MB * 1024)) # 1 KiB messages
	have=0
	for _ in $(seq 1 20); do
		[ "$have" -lt "$want" ] || break
		timeout -k 5 300 "$WORK/bin/fibrilctl" bench --addr "127.0.0.1:$PORT" --topic "$Q" --partitions 1 --size 1024 \
			--window 256 --confirmed --producers 1 --consumers 0 --duration 4s --warmup 0s --json --progress=false \
			>"$WORK/fill.json" 2>"$WORK/fill.err" || { tail -3 "$WORK/fill.err" >&2; die "filling the backlog failed"; }
		have=$((have + $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["confirmed"])' "$WORK/fill.json")))
	done
	[ "$have" -ge "$want" ] || die "filled only $have of $want messages in 20 runs"
	echo "backlog: $have messages of 1 KiB ($((have / 1024)) MiB)" >&2
	sync
	t0=$(now)
	ctl repartition --topic "$Q" --partitions 2 >"$WORK/b.reqout" 2>&1 || die "repartition: $(cat "$WORK/b.reqout")"
	await_finalized "$Q" "$t0" >"$WORK/b.final" &
	WATCH=$!
	timeout -k 5 600 "$WORK/bin/fibrilctl" consume --addr "127.0.0.1:$PORT" --topic "$Q" --count "$have" --prefetch 256 \
		--wait 120s >/dev/null 2>"$WORK/consume.err" &
	CPID=$!
	rc=0
	wait "$CPID" || rc=$?
	CPID=""
	consumed=$(python3 -c 'import sys,time; print(f"{time.time() - float(sys.argv[1]):.1f}")' "$t0")
	[ "$rc" = 0 ] || { tail -3 "$WORK/consume.err" >&2; die "the consumer failed (exit $rc)"; }
	wait "$WATCH" || true
	WATCH=""
	final=$(cat "$WORK/b.final")
	drop "$Q"
	echo "backlog ${have} x 1 KiB: request -> all consumed ${consumed} s ($(python3 -c "print(f'{$have / float($consumed):.0f}')") msgs/s), request -> finalize ${final} s"
fi
