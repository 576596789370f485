#!/usr/bin/env bash
# Fibril vs NATS JetStream (2.9, file storage), in the same run, on this
# machine. See README.md beside this file.
#
#   integration/bench/compare.sh [--duration 10s] [--warmup 2s] [--drain 10s] [--reps 3]
#       [--scenarios a,b,c,d,fsync] [--rate 5000] [--size 1024] [--pin] [--rss] [--coalesce]
#       [--out FILE] [--workdir DIR] [--keep] [--bin DIR] [--no-build] [--rev REV]
#       [--nats-port 14222] [--fibril-port 19876] [--fibril-admin-port 18081]
#
# Every process it starts is stopped by its PID on exit, also on failure
# or Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

DURATION=10s
WARMUP=2s
DRAIN=10s
REPS=3
SCENARIOS=a,b,c,d,fsync
RATE=5000
SIZE=1024
PIN=0
RSS=0
COALESCE=0
OUT=""
WORKDIR=""
KEEP=0
BIN=""
BUILD=1
REV="" # build fibril and fibrilctl from this git revision instead of the work tree
NATS_PORT=14222
FIB_PORT=19876
FIB_ADMIN_PORT=18081

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "compare.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
	case "$1" in
	--duration) DURATION=$2; shift 2 ;;
	--warmup) WARMUP=$2; shift 2 ;;
	--drain) DRAIN=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--scenarios) SCENARIOS=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	--pin) PIN=1; shift ;;
	--rss) RSS=1; shift ;;
	--coalesce) COALESCE=1; shift ;;
	--out) OUT=$2; shift 2 ;;
	--workdir) WORKDIR=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	--bin) BIN=$2; shift 2 ;;
	--no-build) BUILD=0; shift ;;
	--rev) REV=$2; shift 2 ;;
	--nats-port) NATS_PORT=$2; shift 2 ;;
	--fibril-port) FIB_PORT=$2; shift 2 ;;
	--fibril-admin-port) FIB_ADMIN_PORT=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument $1" ;;
	esac
done

# secs DURATION: a Go-style duration (10s, 500ms, 2m, or a bare number
# of seconds) in whole seconds, rounded up.
secs() {
	local d=$1
	case "$d" in
	*ms) echo $(((${d%ms} + 999) / 1000)) ;;
	*s) echo "${d%s}" ;;
	*m) echo $((${d%m} * 60)) ;;
	*[!0-9]* | "") die "bad duration $d (use e.g. 10s, 500ms, 2m)" ;;
	*) echo "$d" ;;
	esac
}
norm() { case "$1" in *[!0-9]*) echo "$1" ;; *) echo "$1s" ;; esac; }
DURATION=$(norm "$DURATION"); WARMUP=$(norm "$WARMUP"); DRAIN=$(norm "$DRAIN")
RUN_BOUND=$(($(secs "$DURATION") + $(secs "$WARMUP") + $(secs "$DRAIN") + 60))
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
[ "$PIN" = 0 ] || [ "$(nproc --all)" -ge 2 ] || die "--pin needs 2 CPUs"
[ "$PIN" = 0 ] || command -v taskset >/dev/null || die "--pin needs taskset (util-linux)"
command -v nats-server >/dev/null || die "nats-server not on PATH: run $HERE/install-nats.sh"
for p in "$NATS_PORT" "$FIB_PORT" "$FIB_ADMIN_PORT"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		die "port 127.0.0.1:$p is in use; pick others (--nats-port, --fibril-port, --fibril-admin-port)"
	fi
done

STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$HERE/results"
[ -n "$OUT" ] || OUT="$HERE/results/compare-$STAMP.jsonl"
LOGS="${OUT%.jsonl}.logs"
mkdir -p "$LOGS" "$(dirname "$OUT")"
: >"$OUT"
if [ -z "$WORKDIR" ]; then
	WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/fibril-compare.XXXXXX")
else
	mkdir -p "$WORKDIR"
fi
[ -n "$BIN" ] || BIN="$WORKDIR/bin"
mkdir -p "$BIN"

# --- process bookkeeping: everything started here is stopped by PID ---------
NATS_PID=""
FIB_PID=""
CUR_PID=""
SAMPLER_PID=""
stop_pid() { # stop_pid PID NAME: TERM, wait up to 15 s, then KILL
	local pid=$1 name=$2
	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 150); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "compare.sh: $name ($pid) did not stop on TERM; killing" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_pid "$SAMPLER_PID" "rss sampler"
	stop_pid "$CUR_PID" "load generator"
	stop_pid "$FIB_PID" "fibril"
	stop_pid "$NATS_PID" "nats-server"
	if [ "$KEEP" = 1 ]; then
		echo "compare.sh: kept $WORKDIR" >&2
	else
		rm -rf "$WORKDIR"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

SRV_PIN=()
GEN_PIN=()
if [ "$PIN" = 1 ]; then
	SRV_PIN=(taskset -c 0)
	GEN_PIN=(taskset -c 1)
fi

# --- build ---------------------------------------------------------------------
if [ "$BUILD" = 1 ]; then
	echo "== building fibril, fibrilctl, jsbench, benchsum into $BIN" >&2
	SRC=$ROOT
	if [ -n "$REV" ]; then
		# A pristine tree of REV (git archive reads the repository, changes nothing).
		SRC="$WORKDIR/src"
		mkdir -p "$SRC"
		git -C "$ROOT" archive --format=tar "$REV" | tar -x -C "$SRC"
	fi
	(cd "$SRC" && go build -o "$BIN/fibril" ./cmd/fibril && go build -o "$BIN/fibrilctl" ./cmd/fibrilctl)
	(cd "$HERE/jsbench" && go build -o "$BIN/jsbench" . && go build -o "$BIN/benchsum" ./benchsum)
fi
for b in fibril fibrilctl jsbench benchsum; do
	[ -x "$BIN/$b" ] || die "$BIN/$b missing (build, or point --bin at a directory holding it)"
done

# --- servers -------------------------------------------------------------------
wait_log() { # wait_log FILE PATTERN PID NAME
	local _
	for _ in $(seq 1 300); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		kill -0 "$3" 2>/dev/null || { tail -20 "$1" >&2; die "$4 exited during startup"; }
		sleep 0.1
	done
	tail -20 "$1" >&2
	die "$4 not ready after 30 s"
}
mkdir -p "$WORKDIR/nats" "$WORKDIR/fibril"
echo "== starting nats-server (JetStream, file store in $WORKDIR/nats) on 127.0.0.1:$NATS_PORT" >&2
"${SRV_PIN[@]}" nats-server -js -sd "$WORKDIR/nats" -a 127.0.0.1 -p "$NATS_PORT" >"$LOGS/nats-server.log" 2>&1 &
NATS_PID=$!
wait_log "$LOGS/nats-server.log" "Server is ready" "$NATS_PID" nats-server
echo "== starting fibril (data in $WORKDIR/fibril) on 127.0.0.1:$FIB_PORT" >&2
"${SRV_PIN[@]}" "$BIN/fibril" --server.data_dir="$WORKDIR/fibril" \
	--broker.listener.bind="127.0.0.1:$FIB_PORT" --admin.listener.bind="127.0.0.1:$FIB_ADMIN_PORT" \
	>"$LOGS/fibril.log" 2>&1 &
FIB_PID=$!
wait_log "$LOGS/fibril.log" "broker ready" "$FIB_PID" fibril

NATS_VERSION=$(nats-server --version 2>&1 | head -1)
if [ "$BUILD" = 0 ]; then
	GIT_REV="prebuilt $BIN"
elif [ -n "$REV" ]; then
	GIT_REV=$(git -C "$ROOT" rev-parse --short "$REV")
else
	GIT_REV="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown) (work tree)"
fi
FS_TYPE=$(df -T "$WORKDIR" 2>/dev/null | awk 'NR==2{print $2" "$1}')
printf '{"kind":"meta","meta":{"started":"%s","fibril_rev":"%s","nats":"%s","pinned":%s,"rss":%s,"fibril_coalesce":%s,"reps":%s,"duration":"%s","warmup":"%s","drain":"%s","rate":%s,"size":%s,"cpus":%s,"fs":"%s","uptime_start":"%s"}}\n' \
	"$(date -Is)" "$GIT_REV" "$NATS_VERSION" "$([ "$PIN" = 1 ] && echo true || echo false)" \
	"$([ "$RSS" = 1 ] && echo true || echo false)" "$([ "$COALESCE" = 1 ] && echo true || echo false)" "$REPS" "$DURATION" "$WARMUP" "$DRAIN" "$RATE" "$SIZE" \
	"$(nproc)" "$FS_TYPE" "$(uptime | sed 's/^ *//')" >>"$OUT"

# --- RSS sampling ----------------------------------------------------------------
# VmHWM is reset through /proc/PID/clear_refs (5 = reset the peak RSS)
# before a run, so after it VmHWM is the peak of that run. A sampler also
# polls VmRSS every 100 ms, for kernels where the reset is not allowed.
status_kib() { # status_kib PID FIELD -> value in KiB (0 if unknown)
	local k v _
	while read -r k v _; do
		if [ "$k" = "$2:" ]; then echo "$v"; return; fi
	done <"/proc/$1/status" 2>/dev/null
	echo 0
}
rss_sampler() { # rss_sampler PID FILE
	local max=0 v
	while kill -0 "$1" 2>/dev/null; do
		v=$(status_kib "$1" VmRSS)
		if [ "$v" -gt "$max" ]; then max=$v; echo "$max" >"$2"; fi
		sleep 0.1
	done
}

# --- one run -----------------------------------------------------------------------
# run_one SYSTEM SCENARIO REP: runs the load generator, appends a JSON line.
run_one() {
	local sys=$1 sc=$2 rep=$3 pid="" name="$2-$1-rep$3"
	local -a cmd common
	common=(--duration "$DURATION" --warmup "$WARMUP" --drain "$DRAIN" --size "$SIZE" --json)
	case "$sys" in
	fibril)
		pid=$FIB_PID
		cmd=("$BIN/fibrilctl" --addr "127.0.0.1:$FIB_PORT" bench "${common[@]}")
		[ "$COALESCE" = 0 ] || cmd+=(--coalesce)
		;;
	jetstream) pid=$NATS_PID; cmd=("$BIN/jsbench" --url "nats://127.0.0.1:$NATS_PORT" --keep-stream "${common[@]}") ;;
	disk) cmd=("$BIN/fibrilctl" bench --mode fsync --fsync-dir "$WORKDIR" --duration "$DURATION" --size "$SIZE" --json) ;;
	esac
	if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
		die "$sys server ($pid) is gone; see $LOGS"
	fi
	case "$sc" in
	a) cmd+=(--producers 1 --consumers 0 --window 256 --confirmed) ;;
	b) cmd+=(--producers 1 --consumers 1 --window 256 --confirmed --prefetch 256 --max-ahead 1024) ;;
	c) cmd+=(--producers 1 --consumers 1 --window 256 --confirmed --prefetch 256 --rate "$RATE") ;;
	d) cmd+=(--mode rtt) ;;
	fsync) ;;
	esac
	cmd=(timeout -k 5 "$RUN_BOUND" "${GEN_PIN[@]}" "${cmd[@]}")

	local up hwm_ok=0 rss_hwm=0 rss_max=0 rc=0 res
	# Write back the dirty pages the previous run left (the other system's
	# unsynced writes above all), so the kernel does not flush them in the
	# middle of this run and stall whoever fsyncs there.
	sync
	up=$(uptime | sed 's/^ *//')
	echo "== [$(date +%T)] $name   (load: ${up##*load average: })" >&2
	if [ "$RSS" = 1 ] && [ -n "$pid" ]; then
		if echo 5 >"/proc/$pid/clear_refs" 2>/dev/null; then hwm_ok=1; fi
		rm -f "$WORKDIR/rss.max"
		rss_sampler "$pid" "$WORKDIR/rss.max" &
		SAMPLER_PID=$!
	fi
	"${cmd[@]}" >"$LOGS/$name.json" 2>"$LOGS/$name.stderr" &
	CUR_PID=$!
	wait "$CUR_PID" || rc=$?
	CUR_PID=""
	if [ -n "$SAMPLER_PID" ]; then
		stop_pid "$SAMPLER_PID" "rss sampler"
		SAMPLER_PID=""
		[ "$hwm_ok" = 1 ] && rss_hwm=$(status_kib "$pid" VmHWM)
		rss_max=$(cat "$WORKDIR/rss.max" 2>/dev/null || echo 0)
	fi
	res=$(head -c 1000000 "$LOGS/$name.json" | tr -d '\n')
	if [ "$rc" != 0 ] || [ "${res:0:1}" != "{" ]; then
		echo "   FAILED (exit $rc): $(tail -3 "$LOGS/$name.stderr" | tr '\n' ' ')" >&2
		[ "${res:0:1}" = "{" ] || res=null
		[ "$rc" != 0 ] || rc=1
	fi
	printf '{"kind":"run","system":"%s","scenario":"%s","rep":%d,"pinned":%s,"uptime":"%s","exit":%d,"server_rss_hwm_kib":%d,"server_rss_max_kib":%d,"result":%s}\n' \
		"$sys" "$sc" "$rep" "$([ "$PIN" = 1 ] && echo true || echo false)" "$up" "$rc" "$rss_hwm" "$rss_max" "$res" >>"$OUT"
	if [ "$res" != null ]; then
		local summary
		summary=$(printf '%s' "$res" | grep -oE '"(msgs_per_sec|confirm_p99_us|e2e_p99_us|rtt_p50_us|fsync_p50_us|lost|duplicates)":[0-9.e+-]+' | tr '\n' ' ')
		echo "   $summary rss_hwm=${rss_hwm}KiB rss_max=${rss_max}KiB" >&2
	fi
}

# --- the plan: reps × scenarios, systems alternating ------------------------------
IFS=, read -r -a SC_LIST <<<"$SCENARIOS"
for sc in "${SC_LIST[@]}"; do
	case "$sc" in a | b | c | d | fsync) ;; *) die "unknown scenario $sc (a, b, c, d, fsync)" ;; esac
done
echo "== $REPS repetitions of [$SCENARIOS], $DURATION each (+$WARMUP warmup), pinned=$PIN, rss=$RSS; results: $OUT" >&2
for rep in $(seq 1 "$REPS"); do
	# Odd repetitions run Fibril first, even ones JetStream first (ABBA…),
	# so slow drifts of the machine do not favour one system.
	if [ $((rep % 2)) = 1 ]; then ORDER=(fibril jetstream); else ORDER=(jetstream fibril); fi
	for sc in "${SC_LIST[@]}"; do
		if [ "$sc" = fsync ]; then
			run_one disk fsync "$rep"
			continue
		fi
		for sys in "${ORDER[@]}"; do
			run_one "$sys" "$sc" "$rep"
		done
	done
done

printf '{"kind":"end","uptime_end":"%s"}\n' "$(uptime | sed 's/^ *//')" >>"$OUT"
echo >&2
"$BIN/benchsum" "$OUT" | tee "${OUT%.jsonl}.txt"
echo
echo "results: $OUT  (table: ${OUT%.jsonl}.txt, logs: $LOGS)"
