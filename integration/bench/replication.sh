#!/usr/bin/env bash
# What replication costs (issue 16): confirmed publish, 1 KiB, window 256,
# one producer, fsync always on every broker, to a new one-partition queue
# per run, on two three-broker local clusters (fibril dev, embedded raft,
# 127.0.0.1 only):
#   - replication.target_followers 2, node-3 private: local_durable,
#     the default majority_durable, replica_durable:2 and replica_durable:3
#     with the owner on a public broker (the client goes straight to it),
#     and majority_durable with the owner on the private node-3, served
#     through the public node-1, which forwards;
#   - replication.target_followers 0: local_durable (one copy);
# and, beside them, NATS JetStream on a three-node loopback cluster, with
# a 3-replica (R3) and a 1-replica (R1) stream (context, not like for
# like: JetStream does not fsync per message). The rows alternate within
# each rep (reversed on even reps); at the end, every row's median and the
# ratios the issue asks for, per rep and as medians over the reps. See
# README.md beside this file.
#
#   integration/bench/replication.sh [--reps 3] [--duration 8s] [--warmup 2s] [--no-jetstream]
#
# The brokers, the nats-servers and the load generator share this
# machine's cores, so followers take CPU from the owner here that they
# would not on hosts of their own: read the per-server CPU beside the
# rates. Every process it starts is stopped by its PID at exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

die() { echo "replication.sh: $*" >&2; exit 1; }
warn() { echo "replication.sh: $*" >&2; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
REPS=3
DURATION=8s
WARMUP=2s
JS=1
PORT=19930 # the first broker's client port; +1, +2 for the others; +10 for cluster 1
ADMIN_PORT=18130
RAFT_PORT=17930
NATS_PORT=14230         # nats-i listens on +i
NATS_CLUSTER_PORT=16230 # and routes on +i
while [ $# -gt 0 ]; do
	case "$1" in
	--reps) REPS=$2; shift 2 ;;
	--duration) DURATION=$2; shift 2 ;;
	--warmup) WARMUP=$2; shift 2 ;;
	--no-jetstream) JS=0; shift ;;
	-h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown option $1" ;;
	esac
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
RUN_BOUND=$(($(secs "$DURATION") + $(secs "$WARMUP") + 60)) # a load generator gets this long, then is killed
if [ "$JS" = 1 ] && ! command -v nats-server >/dev/null; then
	die "nats-server not on PATH: run $HERE/install-nats.sh, or pass --no-jetstream"
fi
PORTS=()
for n in 0 1; do
	for i in 0 1 2; do
		PORTS+=($((PORT + 10 * n + i)) $((ADMIN_PORT + 10 * n + i)) $((RAFT_PORT + 10 * n + i)))
	done
done
[ "$JS" = 0 ] || PORTS+=($((NATS_PORT + 1)) $((NATS_PORT + 2)) $((NATS_PORT + 3)) \
	$((NATS_CLUSTER_PORT + 1)) $((NATS_CLUSTER_PORT + 2)) $((NATS_CLUSTER_PORT + 3)))
for p in "${PORTS[@]}"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "port 127.0.0.1:$p is in use"; fi
done

work_dir replication
PIDS=()    # the fibril dev supervisors, by cluster
NATS_PIDS=() # nats-1, nats-2, nats-3
stop_all() {
	local p
	for p in "${NATS_PIDS[@]}" "${PIDS[@]}"; do stop_pid "$p"; done
}
trap 'stop_all; work_cleanup' EXIT

echo "== building fibril, fibrilctl and jsbench" >&2
build_fibril "$WORK/bin"
[ "$JS" = 0 ] || (cd "$HERE/jsbench" && go build -o "$WORK/bin/jsbench" .)

# Two clusters side by side, one per follower setting, so that neither
# run pays for the other: flipping the setting on one cluster would make
# the followers catch up, during the next run, everything published
# without them. Each run publishes to a new queue.
start_dev() { # start_dev N [FLAG...]: cluster N on ports +10N
	local n=$1 log="$WORK/dev$1.log"
	shift
	"$WORK/bin/fibril" dev --nodes 3 --dir "$WORK/dev$n" --client-port $((PORT + 10 * n)) \
		--admin-port $((ADMIN_PORT + 10 * n)) --raft-port $((RAFT_PORT + 10 * n)) "$@" >"$log" 2>&1 &
	PIDS[n]=$!
	for _ in $(seq 1 600); do
		grep -q 'cluster ready' "$log" 2>/dev/null && return 0
		kill -0 "${PIDS[n]}" 2>/dev/null || { tail -20 "$log" >&2; die "fibril dev exited"; }
		sleep 0.1
	done
	die "cluster $n was not ready in 60 s"
}
ctl() { local n=$1 cmd=$2; shift 2; "$WORK/bin/fibrilctl" "$cmd" --addr "127.0.0.1:$((PORT + 10 * n))" --admin "127.0.0.1:$((ADMIN_PORT + 10 * n))" "$@"; }
echo "== starting two fibril dev clusters (3 brokers each; cluster 1's node-3 private)" >&2
start_dev 0
start_dev 1 --private 1
ctl 0 settings set replication.target_followers=0 replication.durability=local_durable >/dev/null
ctl 1 settings set replication.target_followers=2 >/dev/null

# A JetStream cluster of three nats-servers on 127.0.0.1 (each its own
# store directory, name and route port, routes to the other two), ready
# once a metadata leader is elected and an R3 stream can be created.
start_nats() {
	local i j routes log
	for i in 1 2 3; do
		routes=""
		for j in 1 2 3; do
			[ "$j" = "$i" ] || routes="$routes${routes:+,}nats://127.0.0.1:$((NATS_CLUSTER_PORT + j))"
		done
		mkdir -p "$WORK/nats$i"
		nats-server -js -sd "$WORK/nats$i" -a 127.0.0.1 -p $((NATS_PORT + i)) -n "nats-$i" \
			--cluster_name fibrilbench -cluster "nats://127.0.0.1:$((NATS_CLUSTER_PORT + i))" \
			-routes "$routes" >"$WORK/nats$i.log" 2>&1 &
		NATS_PIDS+=($!)
	done
	for _ in $(seq 1 300); do
		grep -q 'metadata leader' "$WORK"/nats[123].log 2>/dev/null && break
		for i in 0 1 2; do
			kill -0 "${NATS_PIDS[i]}" 2>/dev/null || { tail -20 "$WORK/nats$((i + 1)).log" >&2; return 1; }
		done
		sleep 0.1
	done
	grep -q 'metadata leader' "$WORK"/nats[123].log 2>/dev/null || { tail -5 "$WORK"/nats[123].log >&2; return 1; }
	for _ in $(seq 1 10); do # an R3 stream needs the three servers known to the leader
		if timeout -k 5 30 "$WORK/bin/jsbench" --url "nats://127.0.0.1:$((NATS_PORT + 1))" --replicas 3 --confirmed \
			--producers 1 --consumers 0 --duration 1s --warmup 0s --json --progress=false >/dev/null 2>"$WORK/js-probe.err"; then
			return 0
		fi
		sleep 1
	done
	tail -3 "$WORK/js-probe.err" >&2
	return 1
}
if [ "$JS" = 1 ]; then
	echo "== starting a 3-node NATS JetStream cluster ($(nats-server --version 2>&1 | head -1))" >&2
	if ! start_nats; then
		warn "the JetStream cluster did not form; its rows are left out"
		for p in "${NATS_PIDS[@]}"; do stop_pid "$p"; done
		NATS_PIDS=()
		JS=0
	fi
fi

# CPU ticks (1/100 s) of the brokers of cluster N, in node order, or of the nats-servers.
cpu() {
	local k
	if [ "$1" = js ]; then
		for k in "${NATS_PIDS[@]}"; do awk -v p="$k" '{print p, $14+$15}' "/proc/$k/stat"; done
	else
		for k in $(pgrep -P "${PIDS[$1]}"); do awk -v p="$k" '{print p, $14+$15}' "/proc/$k/stat"; done
	fi
}
# Confirms the brokers of cluster N relayed from owners (a gateway's forwards).
fwd_confirms() {
	local i
	for i in 0 1 2; do
		{ curl -s --max-time 5 "http://127.0.0.1:$((ADMIN_PORT + 10 * $1 + i))/metrics" || true; } |
			awk '$1 == "fibril_forward_confirms_total" {print $2}'
	done | awk '{s += $1} END {print s + 0}'
}


RESULTS=$WORK/results.tsv # rep, row, msgs/s, p99 ms
: >"$RESULTS"
# run_row REP ROW...: one run; prints its line and appends to RESULTS.
run_row() {
	local rep=$1 kind=$2 n="" durability="" place="" replicas="" label cmd bpid_rc=0 fwd0=0 fwd1=0 owner=-
	shift 2
	if [ "$kind" = fibril ]; then
		read -r n durability place <<<"$*"
		label="fibril $((2 * n))f $durability $([ "$place" = private ] && echo forwarded || echo direct)"
		ctl "$n" settings set "replication.durability=$durability" >/dev/null
		new_queue "$n" "$place" "r$rep-$((2 * n))f-${durability//[:_]/}-$place"
		owner=$OWNER
		[ "$GATEWAY" = "$OWNER" ] || owner="$OWNER<$GATEWAY"
		sleep 0.5 # the followers placed with the owner start copying
		cmd=("$WORK/bin/fibrilctl" --addr "127.0.0.1:$((PORT + 10 * n))" bench --topic "$TOPIC")
		fwd0=$(fwd_confirms "$n")
	else
		replicas=$1
		n=js
		label="jetstream R$replicas"
		cmd=("$WORK/bin/jsbench" --url "nats://127.0.0.1:$((NATS_PORT + 1))" --replicas "$replicas")
	fi
	cmd+=(--size 1024 --window 256 --confirmed --producers 1 --consumers 0
		--duration "$DURATION" --warmup "$WARMUP" --json --progress=false)
	# Write back what the previous run left dirty (JetStream's unsynced
	# writes above all), so that the kernel does not flush it in the
	# middle of this run and stall whoever fsyncs there.
	sync
	cpu "$n" >"$WORK/cpu0"
	timeout -k 5 "$RUN_BOUND" "${cmd[@]}" >"$WORK/r.json" 2>"$WORK/r.err" &
	BPID=$!
	wait "$BPID" || bpid_rc=$?
	BPID=""
	cpu "$n" >"$WORK/cpu1"
	[ "$kind" != fibril ] || fwd1=$(fwd_confirms "$n")
	if [ "$bpid_rc" != 0 ]; then
		printf '%-4s %-36s %-13s FAILED (exit %s): %s\n' "$rep" "$label" "$owner" "$bpid_rc" "$(tail -2 "$WORK/r.err" | tr '\n' ' ')"
		return 0
	fi
	python3 - "$rep" "$label" "$owner" "$WORK" "$((fwd1 - fwd0))" "$kind" <<'PY'
import json, sys
rep, label, owner, work, fwd, kind = sys.argv[1:]
r = json.load(open(work + "/r.json"))
n = max(r["confirmed"], 1)
if kind != "fibril":
    owner = r.get("stream_leader") or "-"  # nats-<i>
a = dict(l.split() for l in open(work + "/cpu0"))
b = dict(l.split() for l in open(work + "/cpu1"))
# clock ticks (100/s) per confirmed message, in µs, of the i-th server
# (node-<i>, nats-<i>); the owner (stream leader) first, then a
# forwarding gateway ("node-3<node-2": node-3 owns, node-2 forwards)
per = [(int(b[k]) - int(a[k])) * 10000 / n for k in a]
first = []
for name in owner.split("<"):
    tail = name.split("-")[-1]
    if tail.isdigit() and 0 < int(tail) <= len(per) and int(tail) - 1 not in first:
        first.append(int(tail) - 1)
per = [per[i] for i in first] + [x for i, x in enumerate(per) if i not in first]
fwdpct = f"{100 * int(fwd) / n:.0f}" if kind == "fibril" else "-"
bad = r["lost"] + r["duplicates"] + r["publish_errors"]
print(f"{rep:<4} {label:<36} {owner:<13} {r['publish_msgs_per_sec']:>9.0f} {r['confirm_p99_us'] / 1000:>8.1f} {fwdpct:>5}  "
      + " ".join(f"{x:.1f}" for x in per) + (f"  (lost+dup+errors {bad})" if bad else ""))
with open(work + "/results.tsv", "a") as f:
    f.write(f"{rep}\t{label}\t{r['publish_msgs_per_sec']}\t{r['confirm_p99_us'] / 1000}\n")
PY
}

# The rows of a rep, Fibril and JetStream interleaved; even reps run them
# in reverse, so that a slow drift of the machine favours no row.
ROWS=(
	"fibril 1 local_durable public"
	"js 3"
	"fibril 1 majority_durable public"
	"fibril 0 local_durable any"
	"fibril 1 replica_durable:2 public"
	"js 1"
	"fibril 1 replica_durable:3 public"
	"fibril 1 majority_durable private"
)
echo "== $REPS reps of ${#ROWS[@]} rows, $DURATION each (+$WARMUP warmup)" >&2
printf '%-4s %-36s %-13s %9s %8s %5s  %s\n' rep row owner msgs/s p99_ms fwd% "server cpu µs/msg (owner or stream leader first, then a gateway)"
for rep in $(seq 1 "$REPS"); do
	order=("${ROWS[@]}")
	if [ $((rep % 2)) = 0 ]; then
		order=()
		for ((i = ${#ROWS[@]} - 1; i >= 0; i--)); do order+=("${ROWS[i]}"); done
	fi
	for row in "${order[@]}"; do
		# shellcheck disable=SC2086 # the row's words are its arguments
		case "$row" in js*) [ "$JS" = 0 ] || run_row "$rep" $row ;; *) run_row "$rep" $row ;; esac
	done
done

python3 - "$RESULTS" <<'PY'
import statistics, sys
from collections import defaultdict
runs = defaultdict(dict)  # rep -> row -> (msgs/s, p99 ms)
for line in open(sys.argv[1]):
    rep, row, rate, p99 = line.rstrip("\n").split("\t")
    runs[int(rep)][row] = (float(rate), float(p99))
rows = []
for rep in sorted(runs):
    rows += [r for r in runs[rep] if r not in rows]
print("\nmedian over reps [min-max]")
print(f"{'row':<36} {'msgs/s':>9} {'[min-max]':>17} {'p99_ms':>8}  reps")
for row in rows:
    v = [runs[rep][row] for rep in sorted(runs) if row in runs[rep]]
    rates = [x[0] for x in v]
    print(f"{row:<36} {statistics.median(rates):>9.0f} {f'[{min(rates):.0f}-{max(rates):.0f}]':>17} "
          f"{statistics.median([x[1] for x in v]):>8.1f}  {len(v)}")
M = "fibril 2f majority_durable direct"
ratios = [
    ("majority_durable / local_durable, 2 followers", M, "fibril 2f local_durable direct", "floor >= 0.5"),
    ("majority_durable / local_durable, 0 followers", M, "fibril 0f local_durable direct", "floor >= 0.5"),
    ("majority_durable / JetStream R3", M, "jetstream R3", "stretch >= 1"),
    ("majority_durable forwarded / direct", "fibril 2f majority_durable forwarded", M, ""),
    ("replica_durable:2 / majority_durable", "fibril 2f replica_durable:2 direct", M, ""),
    ("replica_durable:3 / majority_durable", "fibril 2f replica_durable:3 direct", M, ""),
    ("majority_durable / JetStream R1", M, "jetstream R1", ""),
]
print("\nratios of msgs/s, each rep's own, then their median")
for name, a, b, goal in ratios:
    per = [runs[rep][a][0] / runs[rep][b][0] for rep in sorted(runs)
           if a in runs[rep] and b in runs[rep] and runs[rep][b][0] > 0]
    if not per:
        print(f"{name:<46} n/a")
        continue
    print(f"{name:<46} " + " ".join(f"{x:.2f}" for x in per)
          + f"   median {statistics.median(per):.2f}" + (f"   ({goal})" if goal else ""))
PY
