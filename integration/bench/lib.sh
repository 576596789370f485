# shellcheck shell=bash
# Shell functions shared by before-after.sh, many-partitions.sh,
# recovery-time.sh and replication.sh (sourced, not run). The caller
# defines die, ROOT (the repository), PORT and ADMIN_PORT.

# work_dir NAME: sets WORK to a new temporary directory, and traps that
# stop the bench ($BPID) and the broker ($PID), when set, and remove WORK
# when the script ends, also on a signal.
work_dir() {
	WORK=$(mktemp -d "/tmp/fibril-$1.XXXXXX")
	PID=""  # the broker
	BPID="" # a bench running in the background
	trap work_cleanup EXIT
	trap 'exit 130' INT TERM
}

work_cleanup() {
	if [ -n "$BPID" ]; then stop_pid "$BPID"; fi
	if [ -n "$PID" ]; then stop_pid "$PID"; fi
	rm -rf "$WORK"
}

# build_fibril DIR [REV]: builds fibril and fibrilctl into DIR, from REV
# (unpacked with git archive into DIR.src) or, without REV, from the work
# tree.
build_fibril() {
	local dir=$1 rev=${2:-} src=$ROOT
	if [ -n "$rev" ]; then
		src=$dir.src
		mkdir -p "$src"
		git -C "$ROOT" archive --format=tar "$rev" | tar -x -C "$src"
	fi
	mkdir -p "$dir"
	(cd "$src" && go build -o "$dir/fibril" ./cmd/fibril && go build -o "$dir/fibrilctl" ./cmd/fibrilctl)
}

# stop_pid PID: stop a process this script started, by its PID only, and
# reap it.
stop_pid() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# start_broker BIN DATA LOG LIMIT_S [FLAG...]: starts the broker BIN in the
# background on 127.0.0.1:$PORT (admin 127.0.0.1:$ADMIN_PORT) with its data
# in DATA and its output in LOG, sets PID, and returns once it has logged
# "broker ready"; dies (with the log's tail) if it exits first or is not
# ready after LIMIT_S seconds.
start_broker() {
	local bin=$1 data=$2 log=$3 limit=$4
	shift 4
	"$bin" --server.data_dir="$data" --broker.listener.bind="127.0.0.1:$PORT" \
		--admin.listener.bind="127.0.0.1:$ADMIN_PORT" "$@" >"$log" 2>&1 &
	PID=$!
	for _ in $(seq 1 $((limit * 20))); do
		grep -q "broker ready" "$log" 2>/dev/null && return 0
		kill -0 "$PID" 2>/dev/null || { tail -20 "$log" >&2; die "broker exited during startup ($log)"; }
		sleep 0.05
	done
	die "broker not ready after $limit s ($log)"
}
