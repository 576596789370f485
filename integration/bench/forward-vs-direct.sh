#!/usr/bin/env bash
# What forwarding costs, per inter-broker transport (issue 15, goal 2):
# confirmed publish, 1 KiB (--size), window 256 (--window), one producer, fsync always, to a
# new one-partition queue per run, on three local clusters of three
# brokers each (fibril dev, embedded raft, 127.0.0.1 only, node-3
# private, no followers, local_durable), one per transport:
#   - tcp:  plain TCP between the brokers and from the client;
#   - tls:  TCP with TLS 1.3, between the brokers (mutual node
#           certificates) and from the client;
#   - quic: QUIC between the brokers (TLS 1.3 inside), TLS from the client.
# "direct": the queue's owner is public and the client talks to it;
# "forwarded": the owner is the private node-3 and the client talks to a
# public broker, which forwards every frame over the transport.
# The six rows alternate within each rep (reversed on even reps). Each
# line gives msgs/s, confirm p99 and the CPU per confirmed message of the
# load generator, the owner and the gateway; at the end, every row's
# median and the ratios the issue asks for, per rep and as medians over
# the reps. See README.md beside this file.
#
#   integration/bench/forward-vs-direct.sh [--reps 3] [--duration 8s] [--warmup 2s] [--window 256] [--size 1024]
#
# The brokers and the load generator share this machine's cores: read
# the CPU per message beside the rates. Every process it starts is
# stopped by its PID at exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

die() { echo "forward-vs-direct.sh: $*" >&2; exit 1; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
REPS=3
DURATION=8s
WARMUP=2s
WINDOW=256
SIZE=1024
PORT=19960 # cluster n's first client port is PORT+10n; +1, +2 for the others
ADMIN_PORT=18160
RAFT_PORT=17960
while [ $# -gt 0 ]; do
	case "$1" in
	--reps) REPS=$2; shift 2 ;;
	--duration) DURATION=$2; shift 2 ;;
	--warmup) WARMUP=$2; shift 2 ;;
	--window) WINDOW=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	-h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown option $1" ;;
	esac
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
[[ $WINDOW =~ ^[1-9][0-9]*$ ]] || die "--window must be a positive integer"
[[ $SIZE =~ ^[1-9][0-9]*$ ]] || die "--size must be a positive integer"
RUN_BOUND=120 # a load generator gets this long, then is killed
TRANSPORTS=(tcp tls quic)
for n in 0 1 2; do
	for i in 0 1 2; do
		for p in $((PORT + 10 * n + i)) $((ADMIN_PORT + 10 * n + i)) $((RAFT_PORT + 10 * n + i)); do
			if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "port 127.0.0.1:$p is in use"; fi
		done
	done
done

work_dir forward
PIDS=() # the fibril dev supervisors, by cluster
stop_all() {
	local p
	for p in "${PIDS[@]}"; do stop_pid "$p"; done
}
trap 'stop_all; work_cleanup' EXIT

echo "== building fibril and fibrilctl" >&2
build_fibril "$WORK/bin"

# start_dev N TRANSPORT: cluster N on ports +10N.
start_dev() {
	local n=$1 tr=$2 log="$WORK/dev$1.log" extra=()
	case "$tr" in
	tcp) ;;
	tls) extra=(-- --transport.backend=tcp --tls.enabled --tls.auto_self_signed
		--tls.peer_ca_path="$WORK/dev$n/cluster-ca.pem" --tls.admin_enabled=false) ;;
	quic) extra=(-- --transport.backend=quic --tls.enabled --tls.auto_self_signed
		--tls.peer_ca_path="$WORK/dev$n/cluster-ca.pem" --tls.admin_enabled=false) ;;
	esac
	"$WORK/bin/fibril" dev --nodes 3 --private 1 --dir "$WORK/dev$n" --client-port $((PORT + 10 * n)) \
		--admin-port $((ADMIN_PORT + 10 * n)) --raft-port $((RAFT_PORT + 10 * n)) "${extra[@]}" >"$log" 2>&1 &
	PIDS[n]=$!
	for _ in $(seq 1 600); do
		grep -q 'cluster ready' "$log" 2>/dev/null && return 0
		kill -0 "${PIDS[n]}" 2>/dev/null || { tail -20 "$log" >&2; die "fibril dev ($tr) exited"; }
		sleep 0.1
	done
	die "cluster $n ($tr) was not ready in 60 s"
}
# ctl N CMD [ARG...]: fibrilctl against cluster N's node-1 (TLS without
# verification where the cluster serves TLS: the bench measures, it does
# not pin).
ctl() {
	local n=$1 cmd=$2 tls=()
	shift 2
	[ "${TRANSPORTS[n]}" = tcp ] || tls=(--tls --insecure)
	"$WORK/bin/fibrilctl" "$cmd" --addr "127.0.0.1:$((PORT + 10 * n))" --admin "127.0.0.1:$((ADMIN_PORT + 10 * n))" "${tls[@]}" "$@"
}
for n in 0 1 2; do
	echo "== starting cluster $n: ${TRANSPORTS[n]} (3 brokers, node-3 private)" >&2
	start_dev "$n" "${TRANSPORTS[n]}"
	ctl "$n" settings set replication.target_followers=0 replication.durability=local_durable >/dev/null
done

# CPU ticks (1/100 s) of the brokers of cluster N, as "node-<i> ticks".
cpu() {
	local i
	for i in 1 2 3; do
		awk -v n="node-$i" '{print n, $14+$15}' "/proc/$(cat "$WORK/dev$1/node-$i/pid")/stat"
	done
}


RESULTS=$WORK/results.tsv # rep, row, msgs/s, p99 ms, client, owner, gateway µs/msg
: >"$RESULTS"
# run_row REP N KIND: one run on cluster N (direct or forwarded); prints
# its line and appends to RESULTS.
run_row() {
	local rep=$1 n=$2 kind=$3 label rc=0 port
	label="${TRANSPORTS[n]} $kind"
	local want=public # direct: the client's broker owns it
	[ "$kind" = direct ] || want=private # forwarded: node-3 owns it, a public broker forwards
	new_queue "$n" "$want" "f$rep-${TRANSPORTS[n]}-$kind"
	port=$((PORT + 10 * n + ${GATEWAY#node-} - 1))
	local cmd=("$WORK/bin/fibrilctl" --addr "127.0.0.1:$port")
	[ "${TRANSPORTS[n]}" = tcp ] || cmd+=(--tls --insecure)
	cmd+=(bench --topic "$TOPIC" --size "$SIZE" --window "$WINDOW" --confirmed --producers 1 --consumers 0
		--duration "$DURATION" --warmup "$WARMUP" --json --progress=false)
	sync # write back what the previous run left dirty, so that it does not stall this one
	cpu "$n" >"$WORK/cpu0"
	timeout -k 5 "$RUN_BOUND" "${cmd[@]}" >"$WORK/r.json" 2>"$WORK/r.err" &
	BPID=$!
	wait "$BPID" || rc=$?
	BPID=""
	cpu "$n" >"$WORK/cpu1"
	if [ "$rc" != 0 ]; then
		printf '%-4s %-15s %-11s FAILED (exit %s): %s\n' "$rep" "$label" "$OWNER" "$rc" "$(tail -2 "$WORK/r.err" | tr '\n' ' ')"
		return 0
	fi
	python3 - "$rep" "$label" "$OWNER" "$GATEWAY" "$WORK" <<'PY'
import json, sys
rep, label, owner, gateway, work = sys.argv[1:]
r = json.load(open(work + "/r.json"))
n = max(r["confirmed"], 1)
a = dict(l.split() for l in open(work + "/cpu0"))
b = dict(l.split() for l in open(work + "/cpu1"))
us = lambda node: (int(b[node]) - int(a[node])) * 10000 / n  # 100 ticks/s -> µs per message
own = us(owner)
gw = us(gateway) if gateway != owner else 0.0
bad = r["lost"] + r["duplicates"] + r["publish_errors"]
where = owner if gateway == owner else f"{owner}<{gateway}"
print(f"{rep:<4} {label:<15} {where:<11} {r['publish_msgs_per_sec']:>9.0f} {r['confirm_p99_us'] / 1000:>8.1f} "
      f"{r['cpu_per_msg_us']:>8.1f} {own:>8.1f} {gw:>8.1f}" + (f"  (lost+dup+errors {bad})" if bad else ""), flush=True)
with open(work + "/results.tsv", "a") as f:
    f.write(f"{rep}\t{label}\t{r['publish_msgs_per_sec']}\t{r['confirm_p99_us'] / 1000}\t{r['cpu_per_msg_us']}\t{own}\t{gw}\n")
PY
}

ROWS=("0 direct" "1 forwarded" "2 direct" "0 forwarded" "1 direct" "2 forwarded")
echo "== $REPS reps of ${#ROWS[@]} rows, $DURATION each (+$WARMUP warmup), window $WINDOW, $SIZE-byte messages" >&2
printf '%-4s %-15s %-11s %9s %8s %8s %8s %8s\n' rep row owner msgs/s p99_ms "client" "owner" "gateway"
printf '%-4s %-15s %-11s %9s %8s %26s\n' "" "" "" "" "" "(CPU µs per confirmed message)"
for rep in $(seq 1 "$REPS"); do
	order=("${ROWS[@]}")
	if [ $((rep % 2)) = 0 ]; then
		order=()
		for ((i = ${#ROWS[@]} - 1; i >= 0; i--)); do order+=("${ROWS[i]}"); done
	fi
	for row in "${order[@]}"; do
		# shellcheck disable=SC2086 # the row's words are its arguments
		run_row "$rep" $row
	done
done

python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = {}  # label -> rep -> (msgs/s, p99, client, owner, gateway)
for line in open(sys.argv[1]):
    rep, label, *v = line.rstrip("\n").split("\t")
    rows.setdefault(label, {})[rep] = tuple(float(x) for x in v)
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("\nmedians over the reps")
print(f"{'row':<15} {'msgs/s':>9} {'p99_ms':>8} {'client':>8} {'owner':>8} {'gateway':>8}")
for label, reps in rows.items():
    cols = list(zip(*reps.values()))
    print(f"{label:<15} {med(cols[0]):>9.0f} {med(cols[1]):>8.1f} {med(cols[2]):>8.1f} {med(cols[3]):>8.1f} {med(cols[4]):>8.1f}")
def ratio(name, a, b, col=0, target=""):
    if a not in rows or b not in rows:
        return
    per = [rows[a][k][col] / rows[b][k][col] for k in rows[a] if k in rows[b] and rows[b][k][col] > 0]
    if per:
        print(f"{name:<44} {med(per):>5.2f}   per rep: " + " ".join(f"{x:.2f}" for x in per) + f"   {target}")
print("\nratios (median over the reps of each rep's own ratio)")
ratio("quic forwarded / tls forwarded, msgs/s", "quic forwarded", "tls forwarded", 0, "goal >= 0.85")
ratio("quic / tls gateway CPU per forwarded msg", "quic forwarded", "tls forwarded", 4, "goal <= 1.2")
ratio("quic forwarded / quic direct", "quic forwarded", "quic direct", 0, "goal >= 0.5, stretch 0.6")
ratio("tcp forwarded / tcp direct", "tcp forwarded", "tcp direct", 0, "goal >= 0.7, stretch 0.8")
ratio("tls forwarded / tls direct", "tls forwarded", "tls direct", 0)
ratio("tls direct / tcp direct", "tls direct", "tcp direct", 0)
PY
