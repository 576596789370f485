#!/usr/bin/env bash
# What replication costs: confirmed publish to a one-partition queue of a
# three-broker local cluster (fibril dev, embedded raft, 127.0.0.1 only),
# with replication.target_followers 2 under three durability policies
# (local_durable, the default majority_durable, replica_durable:3) and with
# 0 followers, alternating in one run, and each broker's CPU per confirmed
# message. See README.md beside this file.
#
#   integration/bench/replication.sh [--reps 3] [--duration 8s] [--warmup 2s]
#
# 1 KiB messages, window 256, 1 producer, fsync always on every broker.
# The three brokers and the load generator share this machine's cores, so
# followers take CPU from the owner here that they would not on hosts of
# their own: read the per-broker CPU beside the rates.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

die() { echo "replication.sh: $*" >&2; exit 1; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
REPS=3
DURATION=8s
WARMUP=2s
PORT=19930 # the first broker's client port; +1, +2 for the others
ADMIN_PORT=18130
RAFT_PORT=17930
while [ $# -gt 0 ]; do
	case "$1" in
	--reps) REPS=$2; shift 2 ;;
	--duration) DURATION=$2; shift 2 ;;
	--warmup) WARMUP=$2; shift 2 ;;
	*) die "unknown option $1" ;;
	esac
done

work_dir replication
build_fibril "$WORK/bin"
# Two clusters side by side, one per setting, so that neither run pays
# for the other: flipping the setting on one cluster would make the
# followers catch up, during the next run, everything published without
# them. Each run publishes to a new queue.
PIDS=()
start_dev() { # start_dev N: cluster N on ports +10N
	local n=$1 log="$WORK/dev$1.log"
	"$WORK/bin/fibril" dev --nodes 3 --dir "$WORK/dev$n" --client-port $((PORT + 10 * n)) \
		--admin-port $((ADMIN_PORT + 10 * n)) --raft-port $((RAFT_PORT + 10 * n)) >"$log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 1 600); do
		grep -q 'cluster ready' "$log" 2>/dev/null && return 0
		kill -0 "${PIDS[-1]}" 2>/dev/null || { tail -20 "$log" >&2; die "fibril dev exited"; }
		sleep 0.1
	done
	die "cluster $n was not ready in 60 s"
}
stop_devs() { for p in "${PIDS[@]}"; do stop_pid "$p"; done; }
trap 'stop_devs; work_cleanup' EXIT
ctl() { local n=$1 cmd=$2; shift 2; "$WORK/bin/fibrilctl" "$cmd" --addr "127.0.0.1:$((PORT + 10 * n))" --admin "127.0.0.1:$((ADMIN_PORT + 10 * n))" "$@"; }
start_dev 0
start_dev 1
ctl 0 settings set replication.target_followers=0 >/dev/null
ctl 1 settings set replication.target_followers=2 >/dev/null
cpu() { for k in $(pgrep -P "${PIDS[$1]}"); do awk -v p="$k" '{print p, $14+$15}' "/proc/$k/stat"; done; }

printf '%-4s %-9s %-18s %10s %10s  %s\n' rep followers durability msgs/s p99_ms "broker cpu µs/msg (owner first)"
# Each run: "cluster durability". The durability policy changes on the
# running cluster between runs (it needs no catch-up: followers copy
# under every policy; only the confirms wait differently).
RUNS=("1 local_durable" "1 majority_durable" "1 replica_durable:3" "0 local_durable")
for rep in $(seq 1 "$REPS"); do
	for run in "${RUNS[@]}"; do
		read -r n durability <<<"$run"
		f=$((2 * n))
		ctl "$n" settings set "replication.durability=$durability" >/dev/null
		topic="repl$rep${durability%%[:_]*}"
		ctl "$n" declare --topic "$topic" --partitions 1 >/dev/null
		sleep 1 # placement and the followers' first checkpoint
		owner=$(ctl "$n" topology --owners | awk -v t="$topic" '$2 == t {print $5}')
		cpu "$n" >"$WORK/cpu0"
		"$WORK/bin/fibrilctl" --addr "127.0.0.1:$((PORT + 10 * n))" bench --topic "$topic" --size 1024 --window 256 --confirmed \
			--producers 1 --consumers 0 --duration "$DURATION" --warmup "$WARMUP" --json --progress=false >"$WORK/r.json"
		cpu "$n" >"$WORK/cpu1"
		python3 - "$rep" "$f" "$owner" "$WORK" "$durability" <<'PY'
import json, sys
rep, f, owner, work, durability = sys.argv[1:]
r = json.load(open(work + "/r.json"))
n = max(r["confirmed"], 1)
a = dict(l.split() for l in open(work + "/cpu0"))
b = dict(l.split() for l in open(work + "/cpu1"))
# clock ticks (100/s) per confirmed message, in µs; the owner is node-<i+1>
per = [(int(b[k]) - int(a[k])) * 10000 / n for k in a]
i = int(owner.split("-")[-1]) - 1 if owner.startswith("node-") else 0
per = [per[i]] + per[:i] + per[i + 1:]
print(f"{rep:<4} {f:<9} {durability:<18} {r['publish_msgs_per_sec']:>10.0f} {r['confirm_p99_us'] / 1000:>10.1f}  " + " ".join(f"{x:.1f}" for x in per))
PY
	done
done
