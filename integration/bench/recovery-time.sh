#!/usr/bin/env bash
# How long a broker takes to come back after kill -9 with a given amount of
# data spread over many queues, with the write-ahead log on and off.
#
#   integration/bench/recovery-time.sh [--queues 100] [--fill 30s] [--producers 4] [--cold] [--wal true,false]
#
# For each --wal setting: a fresh broker on 127.0.0.1, confirmed publishes of
# 1 KiB over --queues single-partition queues for --fill, then SIGKILL (the
# page cache survives: a process crash), optionally a dropped page cache
# (--cold: needs root; closer to a power loss, where recovery reads from the
# disk), then a restart; it prints the data size and the time from the
# restart until the broker logs "broker ready", and the recovery lines the
# broker logged. Every process is stopped by its PID, also on failure; the
# data directory is removed at the end.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
die() { echo "recovery-time.sh: $*" >&2; exit 1; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"

QUEUES=100
FILL=30s
PRODUCERS=4
COLD=false
WALS=true,false
PORT=19906
ADMIN_PORT=18106
while [ $# -gt 0 ]; do
	case "$1" in
	--queues) QUEUES=$2; shift 2 ;;
	--fill) FILL=$2; shift 2 ;;
	--producers) PRODUCERS=$2; shift 2 ;;
	--cold) COLD=true; shift ;;
	--wal) WALS=$2; shift 2 ;;
	*) die "unknown option $1" ;;
	esac
done

work_dir recovery-time
echo "== building the work tree in $WORK" >&2
build_fibril "$WORK/bin"

start() { # start DATA WAL LOG: a broker in the background (PID), waits until ready; sets SECS to the seconds it took
	local t0
	t0=$(date +%s.%N)
	start_broker "$WORK/bin/fibril" "$1" "$3" 300 --storage.wal.enabled="$2"
	SECS=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.3f", a - b }')
}

printf '%-6s %10s %10s %12s\n' wal data "queues" "ready s"
for wal in ${WALS//,/ }; do
	data=$WORK/data-$wal
	rm -rf "$data"
	start "$data" "$wal" "$WORK/fill-$wal.log"
	timeout 600 "$WORK/bin/fibrilctl" --addr "127.0.0.1:$PORT" bench --topic rt --queues "$QUEUES" --size 1024 \
		--window 256 --confirmed --producers "$PRODUCERS" --consumers 0 --duration "$FILL" --warmup 0s \
		--json --progress=false >"$WORK/fill-$wal.json"
	kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=""
	if [ "$COLD" = true ]; then
		sync
		echo 3 >/proc/sys/vm/drop_caches || die "--cold needs root (writes /proc/sys/vm/drop_caches)"
	fi
	size=$(du -sh "$data" | cut -f1)
	start "$data" "$wal" "$WORK/restart-$wal.log"
	printf '%-6s %10s %10s %12.2f\n' "$wal" "$size" "$QUEUES" "$SECS"
	grep -E "write-ahead log|written back|torn|quarantin" "$WORK/restart-$wal.log" | head -5 >&2 || true
	stop_pid "$PID"; PID=""
	rm -rf "$data"
done
