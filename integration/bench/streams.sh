#!/usr/bin/env bash
# Streams (issue 17's performance goals) on one standalone broker with its
# defaults (fsync always), 1 KiB, window 256, one producer, each rep in
# turn (reversed on even reps):
#   - queue publish:  confirmed publish to a new one-partition queue, no consumer;
#   - stream publish: the same to a new one-partition stream (goal: ≥ the queue's rate);
#   - stream fan-out: confirmed publish to a new stream read by --consumers
#     subscribers from the earliest record (every one reads every record;
#     delivered msgs/s is the total);
#   - JetStream fan-out (beside it, on one nats-server with JetStream, file
#     storage): one stream, one durable pull consumer per bench consumer
#     (goal: Fibril's fan-out ≥ 1.5× JetStream's delivered rate).
# At the end, every row's median and the ratios, per rep and as medians.
#
#   integration/bench/streams.sh [--reps 3] [--duration 8s] [--warmup 2s] [--consumers 4] [--no-jetstream]
#
# The broker, nats-server and the load generator share this machine's
# cores; each run prints the server's CPU per message. Every process it
# starts is stopped by its PID at exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

die() { echo "streams.sh: $*" >&2; exit 1; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
REPS=3
DURATION=8s
WARMUP=2s
CONSUMERS=4
JS=1
PORT=19995
ADMIN_PORT=18195
NATS_PORT=14299
while [ $# -gt 0 ]; do
	case "$1" in
	--reps) REPS=$2; shift 2 ;;
	--duration) DURATION=$2; shift 2 ;;
	--warmup) WARMUP=$2; shift 2 ;;
	--consumers) CONSUMERS=$2; shift 2 ;;
	--no-jetstream) JS=0; shift ;;
	-h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown option $1" ;;
	esac
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
[[ $CONSUMERS =~ ^[1-9][0-9]*$ ]] || die "--consumers must be a positive integer"
if [ "$JS" = 1 ] && ! command -v nats-server >/dev/null; then
	die "nats-server not on PATH: run $HERE/install-nats.sh, or pass --no-jetstream"
fi
for p in $PORT $ADMIN_PORT $NATS_PORT; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "port 127.0.0.1:$p is in use"; fi
done

work_dir streams
NATS_PID=""
trap '[ -z "$NATS_PID" ] || stop_pid "$NATS_PID"; work_cleanup' EXIT
echo "== building fibril, fibrilctl and jsbench" >&2
build_fibril "$WORK/bin"
[ "$JS" = 0 ] || (cd "$HERE/jsbench" && go build -o "$WORK/bin/jsbench" .)
start_broker "$WORK/bin/fibril" "$WORK/data" "$WORK/broker.log" 30 --config=
if [ "$JS" = 1 ]; then
	mkdir -p "$WORK/nats"
	nats-server -js -sd "$WORK/nats" -a 127.0.0.1 -p "$NATS_PORT" >"$WORK/nats.log" 2>&1 &
	NATS_PID=$!
	for _ in $(seq 1 100); do
		grep -q "Server is ready" "$WORK/nats.log" 2>/dev/null && break
		sleep 0.1
	done
	grep -q "Server is ready" "$WORK/nats.log" || die "nats-server did not start ($WORK/nats.log)"
fi
BOUND=$(($(secs "$DURATION") + $(secs "$WARMUP") + 90))

RESULTS=$WORK/results.tsv # rep, row, msgs/s, p99 ms, server µs/msg
: >"$RESULTS"
run_row() {
	local rep=$1 row=$2 pid=$PID cmd rc=0
	local common=(--size 1024 --window 256 --confirmed --producers 1 --duration "$DURATION" --warmup "$WARMUP" --json --progress=false)
	case "$row" in
	queue-publish) cmd=("$WORK/bin/fibrilctl" --addr "127.0.0.1:$PORT" bench --topic "q-$rep" --consumers 0 "${common[@]}") ;;
	stream-publish) cmd=("$WORK/bin/fibrilctl" --addr "127.0.0.1:$PORT" bench --stream --topic "s-$rep" --consumers 0 "${common[@]}") ;;
	stream-fanout) cmd=("$WORK/bin/fibrilctl" --addr "127.0.0.1:$PORT" bench --stream --topic "f-$rep" --consumers "$CONSUMERS" --prefetch 256 "${common[@]}") ;;
	jetstream-fanout)
		[ "$JS" = 1 ] || return 0
		pid=$NATS_PID
		cmd=("$WORK/bin/jsbench" --url "nats://127.0.0.1:$NATS_PORT" --fan-out --consumers "$CONSUMERS" --prefetch 256 "${common[@]}") ;;
	esac
	sync
	timeout -k 5 "$BOUND" "${cmd[@]}" --server-pid "$pid" >"$WORK/r.json" 2>"$WORK/r.err" || rc=$?
	if [ "$rc" != 0 ]; then
		printf '%-4s %-18s FAILED (exit %s): %s\n' "$rep" "$row" "$rc" "$(tail -2 "$WORK/r.err" | tr '\n' ' ')"
		return 0
	fi
	python3 - "$rep" "$row" "$WORK" <<'PY'
import json, sys
rep, row, work = sys.argv[1:]
r = json.load(open(work + "/r.json"))
bad = r["lost"] + r["duplicates"] + r["publish_errors"]
print(f"{rep:<4} {row:<18} {r['msgs_per_sec']:>10.0f} {r['publish_msgs_per_sec']:>10.0f} {r['confirm_p99_us'] / 1000:>8.1f} "
      f"{r.get('e2e_p99_us', 0) / 1000:>8.1f} {r.get('server_cpu_per_msg_us', 0):>8.1f}" + (f"  (lost+dup+errors {bad})" if bad else ""), flush=True)
with open(work + "/results.tsv", "a") as f:
    f.write(f"{rep}\t{row}\t{r['msgs_per_sec']}\t{r['confirm_p99_us'] / 1000}\t{r.get('server_cpu_per_msg_us', 0)}\n")
PY
}

ROWS=(queue-publish stream-publish stream-fanout jetstream-fanout)
echo "== $REPS reps of ${#ROWS[@]} rows, $DURATION each (+$WARMUP warmup), $CONSUMERS fan-out consumers" >&2
printf '%-4s %-18s %10s %10s %8s %8s %8s\n' rep row "msgs/s" "publish/s" "conf_p99" "e2e_p99" "srv_us"
for rep in $(seq 1 "$REPS"); do
	order=("${ROWS[@]}")
	if [ $((rep % 2)) = 0 ]; then
		order=()
		for ((i = ${#ROWS[@]} - 1; i >= 0; i--)); do order+=("${ROWS[i]}"); done
	fi
	for row in "${order[@]}"; do run_row "$rep" "$row"; done
done

python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    rep, row, *v = line.rstrip("\n").split("\t")
    rows.setdefault(row, {})[rep] = tuple(float(x) for x in v)
med = statistics.median
print("\nmedians over the reps (msgs/s is delivered in total for the fan-out rows)")
for row, reps in rows.items():
    cols = list(zip(*reps.values()))
    print(f"  {row:<18} {med(cols[0]):>10.0f} msgs/s  confirm p99 {med(cols[1]):.1f} ms  server {med(cols[2]):.1f} µs/msg")
def ratio(name, a, b, goal):
    if a in rows and b in rows:
        per = [rows[a][k][0] / rows[b][k][0] for k in rows[a] if k in rows[b] and rows[b][k][0] > 0]
        if per:
            print(f"  {name:<42} {med(per):.2f}  per rep: " + " ".join(f"{x:.2f}" for x in per) + f"   {goal}")
print("\nratios (median over the reps of each rep's own ratio)")
ratio("stream publish / queue publish", "stream-publish", "queue-publish", "goal >= 1")
ratio("Fibril fan-out / JetStream fan-out", "stream-fanout", "jetstream-fanout", "goal >= 1.5")
PY
