#!/usr/bin/env bash
# The crash demo with the settings of the recording in docs/demo/crash-demo:
# builds the broker and the demo program, then runs three brokers (one
# public, two private), a client of the public broker only, and the two
# crashes. Usage:
#
#   integration/demo/crash-demo.sh [OUT]     # OUT defaults to ./crash-demo-out
#
# OUT receives transcript.txt, summary.json, summary.md, throughput.csv and
# chart.svg; the brokers' data and logs go to a temporary directory that is
# removed at the end (pass --work DIR after OUT to keep them). Extra flags
# after OUT go to the program (go run ./integration/demo/crashdemo/cmd/crashdemo -h).
set -euo pipefail
out=${1:-crash-demo-out}
shift || true
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/fibril" ./cmd/fibril
go build -o "$bin/crashdemo" ./integration/demo/crashdemo/cmd/crashdemo
"$bin/crashdemo" --fibril "$bin/fibril" --out "$out" \
  --rate 1000 --window 500 --size 128 --partitions 12 \
  --steady 10s --private-down 10s --settle 10s --public-down 3s --after 12s --drain 30s \
  "$@"
