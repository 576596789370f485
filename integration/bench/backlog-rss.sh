#!/usr/bin/env bash
# The broker's memory with a 1 GiB backlog: start a fresh broker, publish
# 1 GiB of 1 KiB confirmed messages that nobody consumes, report its RSS
# (VmRSS now, VmHWM = peak since start) while the backlog is held, consume
# a few messages to show it still serves, restart it and measure again
# (recovery of a full data dir). See README.md beside this file.
#
#   integration/bench/backlog-rss.sh [--gib 1] [--size 1024] [--window 256] [--target-mib 200]
#       [--no-restart] [--pin] [--workdir DIR] [--keep] [--bin DIR] [--no-build] [--rev REV]
#       [--port 19886] [--admin-port 18091] [--max-time 900]
#
# Exit 0 when the held-backlog VmRSS is within --target-mib, 1 otherwise
# or on failure. Every process it starts is stopped by PID on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

GIB=1
SIZE=1024
WINDOW=256
TARGET_MIB=200
RESTART=1
PIN=0
WORKDIR=""
KEEP=0
BIN=""
BUILD=1
REV="" # build fibril and fibrilctl from this git revision instead of the work tree
PORT=19886
ADMIN_PORT=18091
MAX_TIME=900

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "backlog-rss.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case "$1" in
	--gib) GIB=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	--window) WINDOW=$2; shift 2 ;;
	--target-mib) TARGET_MIB=$2; shift 2 ;;
	--no-restart) RESTART=0; shift ;;
	--pin) PIN=1; shift ;;
	--workdir) WORKDIR=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	--bin) BIN=$2; shift 2 ;;
	--no-build) BUILD=0; shift ;;
	--rev) REV=$2; shift 2 ;;
	--port) PORT=$2; shift 2 ;;
	--admin-port) ADMIN_PORT=$2; shift 2 ;;
	--max-time) MAX_TIME=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument $1" ;;
	esac
done
for p in "$PORT" "$ADMIN_PORT"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "port 127.0.0.1:$p is in use (--port, --admin-port)"; fi
done
# Message count: GIB may be fractional (e.g. 0.1 for a quick check).
TOTAL_BYTES=$(awk -v g="$GIB" 'BEGIN{printf "%d", g*1073741824}')
TARGET_MSGS=$(((TOTAL_BYTES + SIZE - 1) / SIZE))
[ "$TARGET_MSGS" -gt 0 ] || die "--gib must be positive"

if [ -z "$WORKDIR" ]; then
	WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/fibril-backlog.XXXXXX")
else
	mkdir -p "$WORKDIR"
fi
[ -n "$BIN" ] || BIN="$WORKDIR/bin"
mkdir -p "$BIN"
DATA="$WORKDIR/data"
LOG="$WORKDIR/fibril.log"
DEADLINE=$(($(date +%s) + MAX_TIME))

BROKER_PID=""
CUR_PID=""
stop_pid() {
	local pid=$1
	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_pid "$CUR_PID"
	stop_pid "$BROKER_PID"
	if [ "$KEEP" = 1 ]; then echo "backlog-rss.sh: kept $WORKDIR" >&2; else rm -rf "$WORKDIR"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

SRV_PIN=()
GEN_PIN=()
if [ "$PIN" = 1 ]; then SRV_PIN=(taskset -c 0); GEN_PIN=(taskset -c 1); fi

if [ "$BUILD" = 1 ]; then
	echo "== building fibril and fibrilctl into $BIN" >&2
	SRC=$ROOT
	if [ -n "$REV" ]; then
		# A pristine tree of REV (git archive reads the repository, changes nothing).
		SRC="$WORKDIR/src"
		mkdir -p "$SRC"
		git -C "$ROOT" archive --format=tar "$REV" | tar -x -C "$SRC"
	fi
	(cd "$SRC" && go build -o "$BIN/fibril" ./cmd/fibril && go build -o "$BIN/fibrilctl" ./cmd/fibrilctl)
fi
for b in fibril fibrilctl; do [ -x "$BIN/$b" ] || die "$BIN/$b missing"; done

remaining() { echo $((DEADLINE - $(date +%s))); }
# bounded OUTFILE CMD...: runs CMD in the background (so that the trap can
# stop it by PID), stdout to OUTFILE, with a timeout of the time left.
bounded() {
	local left rc=0 out=$1
	shift
	left=$(remaining)
	[ "$left" -gt 5 ] || die "out of time (--max-time $MAX_TIME)"
	timeout -k 5 "$left" "$@" >"$out" &
	CUR_PID=$!
	wait "$CUR_PID" || rc=$?
	CUR_PID=""
	return "$rc"
}
kib() { # kib FIELD: the broker's /proc status field in KiB
	local k v _
	while read -r k v _; do
		if [ "$k" = "$1:" ]; then echo "$v"; return; fi
	done <"/proc/$BROKER_PID/status"
	echo 0
}
mib() { awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}'; }
start_broker() {
	local t0 _
	t0=$(date +%s%N)
	: >"$LOG"
	"${SRV_PIN[@]}" "$BIN/fibril" --server.data_dir="$DATA" \
		--broker.listener.bind="127.0.0.1:$PORT" --admin.listener.bind="127.0.0.1:$ADMIN_PORT" >>"$LOG" 2>&1 &
	BROKER_PID=$!
	for _ in $(seq 1 "$((10 * $(remaining)))"); do
		grep -q "broker ready" "$LOG" && break
		kill -0 "$BROKER_PID" 2>/dev/null || { tail -20 "$LOG" >&2; die "broker exited during startup"; }
		sleep 0.1
	done
	grep -q "broker ready" "$LOG" || die "broker not ready in time"
	READY_MS=$((($(date +%s%N) - t0) / 1000000))
}
report() { # report LABEL
	local rss hwm
	rss=$(kib VmRSS)
	hwm=$(kib VmHWM)
	printf '%-34s VmRSS %7s MiB   VmHWM %7s MiB   (RssAnon %s MiB, RssFile %s MiB)\n' "$1" \
		"$(mib "$rss")" "$(mib "$hwm")" "$(mib "$(kib RssAnon)")" "$(mib "$(kib RssFile)")"
	[ "$rss" -le "${HELD_RSS:-0}" ] || HELD_RSS=$rss
	[ "$hwm" -le "${PEAK_HWM:-0}" ] || PEAK_HWM=$hwm
}

TOPIC=backlog
CTL=("${GEN_PIN[@]}" "$BIN/fibrilctl" --addr "127.0.0.1:$PORT")
echo "== $(uptime | sed 's/^ *//')"
echo "== fresh broker, data in $DATA; target: $TARGET_MSGS × $SIZE B = $(mib $((TOTAL_BYTES / 1024))) MiB of payload"
start_broker
report "idle broker"
HELD_RSS=0 # the max VmRSS seen with the backlog held
PEAK_HWM=0

# Publish: rounds of confirmed windowed bench runs (no consumer) on one
# topic until the confirmed total reaches the target.
confirmed=0
t0=$(date +%s)
rate=80000 # first guess; each round measures it
round=0
while [ "$confirmed" -lt "$TARGET_MSGS" ]; do
	round=$((round + 1))
	left=$((TARGET_MSGS - confirmed))
	# Aim a little past the target at the last rate, between 2 s and 15 s.
	d=$(((left * 11 / 10) / rate + 1))
	[ "$d" -ge 2 ] || d=2
	[ "$d" -le 15 ] || d=15
	bounded "$WORKDIR/out" "${CTL[@]}" bench --topic "$TOPIC" --consumers 0 --producers 1 --confirmed --window "$WINDOW" \
		--size "$SIZE" --duration "${d}s" --json --progress=false || die "bench round $round failed: $(cat "$WORKDIR/out")"
	out=$(cat "$WORKDIR/out")
	n=$(printf '%s' "$out" | grep -oE '"confirmed":[0-9]+' | cut -d: -f2)
	r=$(printf '%s' "$out" | grep -oE '"publish_msgs_per_sec":[0-9.]+' | cut -d: -f2)
	errs=$(printf '%s' "$out" | grep -oE '"publish_errors":[0-9]+' | cut -d: -f2)
	[ -n "$n" ] && [ "$n" -gt 0 ] || die "bench round $round confirmed nothing: $out"
	confirmed=$((confirmed + n))
	rate=$(awk -v r="$r" 'BEGIN{r=int(r); print (r>1000)?r:1000}')
	echo "   round $round: ${d}s, confirmed $n (${r} msgs/s, publish errors ${errs:-0}); total $confirmed / $TARGET_MSGS"
done
pub_s=$(($(date +%s) - t0))
sleep 2 # let the group commit and any background work settle
echo "== backlog held: $confirmed confirmed messages ($(mib $((confirmed * SIZE / 1024))) MiB payload) in ${pub_s}s; data dir $(du -sh "$DATA" | cut -f1)"
report "backlog held (after publish)"

# Serve: consume a few messages from the head of the backlog.
t1=$(date +%s%N)
bounded "$WORKDIR/out" "${CTL[@]}" consume --topic "$TOPIC" --partitions 0 --count 10 --prefetch 10 --wait 10s --json || true
n=$(wc -l <"$WORKDIR/out")
echo "== consumed $n messages from the head of the backlog in $((($(date +%s%N) - t1) / 1000000)) ms (incl. connect)"
[ "$n" = 10 ] || die "expected 10 deliveries, got $n"
report "after consuming 10"

if [ "$RESTART" = 1 ]; then
	stop_pid "$BROKER_PID"
	BROKER_PID=""
	start_broker
	echo "== restarted on the full data dir: ready in ${READY_MS} ms"
	report "restarted, backlog held"
	t1=$(date +%s%N)
	bounded "$WORKDIR/out" "${CTL[@]}" consume --topic "$TOPIC" --partitions 0 --count 10 --prefetch 10 --wait 10s --json || true
n=$(wc -l <"$WORKDIR/out")
	echo "== consumed $n more after the restart in $((($(date +%s%N) - t1) / 1000000)) ms (incl. connect)"
	[ "$n" = 10 ] || die "expected 10 deliveries after the restart, got $n"
	report "restarted, after consuming 10"
fi

echo "== $(uptime | sed 's/^ *//')"
if [ "$HELD_RSS" -le $((TARGET_MIB * 1024)) ]; then
	echo "PASS: VmRSS with the backlog held ≤ $TARGET_MIB MiB (max $(mib "$HELD_RSS") MiB over the reports above; peak VmHWM incl. publishing $(mib "$PEAK_HWM") MiB)"
else
	echo "FAIL: VmRSS with the backlog held reached $(mib "$HELD_RSS") MiB > $TARGET_MIB MiB (peak VmHWM incl. publishing $(mib "$PEAK_HWM") MiB)"
	exit 1
fi
