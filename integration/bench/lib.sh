# shellcheck shell=bash
# Shell functions shared by the scripts beside it (sourced, not run). The
# caller defines die, ROOT (the repository), PORT and ADMIN_PORT; for
# new_queue also ctl N CMD [ARG...] (fibrilctl against cluster N).

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

# secs D: a Go duration (500ms, 10s, 2m, 1m30s, or a bare number of
# seconds) in whole seconds, rounded up.
secs() {
	python3 - "$1" <<'PY' || die "bad duration $1 (use e.g. 8s, 500ms, 2m, 1m30s)"
import math, re, sys
d = sys.argv[1]
if d.isdigit():
    print(d)
    sys.exit(0)
parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", d)
if not parts or "".join(a + b for a, b in parts) != d:
    sys.exit(1)
unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
print(math.ceil(sum(float(a) * unit[b] for a, b in parts)))
PY
}

# new_queue N WANT NAME: declares one-partition queues NAME-1, NAME-2, … on
# the three-broker cluster N (client ports PORT+10N …) until one is owned
# by a broker of the kind wanted (public: node-1 or node-2; private:
# node-3; any), at most 8; sets TOPIC, OWNER and GATEWAY (the broker whose
# client endpoint the topology gives for it: the owner, or for a private
# owner the public broker that forwards). The controller places a new
# partition on the least loaded broker, so a wrong owner is followed by
# another.
new_queue() {
	local n=$1 want=$2 name=$3 try endpoint
	for try in $(seq 1 8); do
		TOPIC=$name-$try
		ctl "$n" declare --topic "$TOPIC" --partitions 1 >/dev/null
		OWNER=""
		for _ in $(seq 1 100); do
			read -r OWNER endpoint < <(ctl "$n" topology --owners |
				awk -v t="$TOPIC" '$2 == t && $5 ~ /^node-/ {print $5, $NF}') || true
			[ -n "$OWNER" ] && break
			sleep 0.1
		done
		[ -n "$OWNER" ] || die "cluster $n placed no owner for $TOPIC in 10 s"
		GATEWAY=$OWNER
		if [[ ${endpoint##*:} =~ ^[0-9]+$ ]]; then GATEWAY=node-$((${endpoint##*:} - PORT - 10 * n + 1)); fi
		case "$want:$OWNER" in
		any:* | public:node-1 | public:node-2 | private:node-3) return 0 ;;
		esac
	done
	die "cluster $n: no $want owner in 8 declarations"
}
