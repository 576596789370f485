#!/bin/bash
# Direct vs forwarded confirmed publish (the cost docs/cluster.md reports): a 2-broker
# `fibril dev` cluster on loopback where node-2 owns a 1-partition queue.
# "direct": both brokers public, the client talks to node-2. "forwarded":
# node-2 is private and the client talks to node-1, which forwards every
# frame. Runs `fibrilctl bench` in throughput and rtt mode (1 KiB, window
# 256, prefetch 256) and reports msgs/s, confirm and end-to-end p50/p99 and
# the brokers' CPU ticks (1/100 s) over each run.
#
#   go build -o /tmp/fibril ./cmd/fibril && go build -o /tmp/fibrilctl ./cmd/fibrilctl
#   integration/bench/forward-vs-direct.sh tcp direct
#   integration/bench/forward-vs-direct.sh tcp forwarded     # likewise quic
#
# Uses ports 29876-29877, 28081-28082, 27946-27947 on 127.0.0.1 and
# /tmp/benchdev-*; FIBRIL_BIN and FIBRILCTL_BIN override the binaries.
# usage: forward-vs-direct.sh tcp|quic direct|forwarded
set -u
FIBRIL=${FIBRIL_BIN:-/tmp/fibril}
FIBRILCTL=${FIBRILCTL_BIN:-/tmp/fibrilctl}
TR=$1; KIND=$2
D=/tmp/benchdev-$TR-$KIND; rm -rf $D; mkdir -p $D
EXTRA=(); CTLTLS=""
if [ "$TR" = quic ]; then
  EXTRA=(-- --transport.backend=quic --tls.enabled --tls.auto_self_signed --tls.peer_ca_path=$D/cluster-ca.pem --tls.admin_enabled=false)
  CTLTLS="--tls --insecure"
fi
PRIVATE=0; ADDR=127.0.0.1:29877   # direct: the owner node-2 is public, the client talks to it
if [ "$KIND" = forwarded ]; then PRIVATE=1; ADDR=127.0.0.1:29876; fi  # node-2 private, the client talks to node-1
$FIBRIL dev --nodes 2 --private $PRIVATE --dir $D --client-port 29876 --admin-port 28081 --raft-port 27946 "${EXTRA[@]}" > $D/dev.out 2>&1 &
DEV=$!
trap 'kill $DEV 2>/dev/null; wait $DEV 2>/dev/null' EXIT # by PID, also on failure or Ctrl-C
sleep 7
CTL="$FIBRILCTL --addr $ADDR --admin 127.0.0.1:28081 $CTLTLS"
T=""
for i in 1 2 3 4 5 6 7 8; do
  $CTL declare --topic q$i --partitions 1 >/dev/null
  sleep 0.5
  if $CTL topology --owners | awk -v t=q$i '$2==t {print $5}' | grep -q node-2; then T=q$i; break; fi
done
PIDS=$(ps -o pid= --ppid $DEV | tr '\n' ' ')
cpu() { local s=0; for p in $PIDS; do set -- $(cut -d' ' -f14,15 /proc/$p/stat); s=$((s+$1+$2)); done; echo $s; }
for MODE in throughput rtt; do
  c0=$(cpu)
  out=$($CTL bench --topic $T --partitions 1 --size 1024 --producers 1 --consumers 1 --window 256 --confirmed --prefetch 256 --duration 10s --warmup 2s --mode $MODE --json --progress=false 2>/dev/null)
  c1=$(cpu)
  echo "$TR $KIND $MODE topic=$T broker_cpu_ticks=$((c1-c0)) $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("msgs/s=%.0f confirm_p50=%.0fus confirm_p99=%.0fus e2e_p50=%.0fus e2e_p99=%.0fus delivered=%d lost=%d dup=%d" % (d["msgs_per_sec"], d["confirm_p50_us"], d["confirm_p99_us"], d["e2e_p50_us"], d["e2e_p99_us"], d["delivered"], d["lost"], d["duplicates"]))')"
done
