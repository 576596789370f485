#!/usr/bin/env bash
# Runs every fuzz target of the module, one after the other, for the given
# duration each (default 60s):
#
#   scripts/fuzz.sh [duration] [package-pattern]
#
# Targets are discovered, not listed here: every package whose tests
# declare a `func Fuzz...` is asked for its targets with `go test -list`, so
# a new target is covered the day it is written. The optional pattern
# (a regular expression on the import path) narrows the run, e.g.
# `scripts/fuzz.sh 10s core/config`. FUZZ_FLAGS is passed to each
# `go test` (e.g. FUZZ_FLAGS=-parallel=1 on a shared machine).
#
# A crash is written by `go test` under <package>/testdata/fuzz/<Target>/;
# commit such files as regression seeds together with the fix, and every
# plain `go test` run replays them from then on.
#
# Runs so far (docs/fuzzing.md keeps the record, with exec counts):
#   2026-12-03, 60s per target, FUZZ_FLAGS=-parallel=1, 2-core machine:
#   all 36 targets (34 in core/wire, FuzzLoad in core/config,
#   FuzzTransportFrames, now in plugins/host); no crash, no hang, no new testdata.
#   FuzzDeliver's first run ended in "context deadline exceeded" (the
#   engine was minimising an input when time ran out, nothing written);
#   its second 60s run passed.
set -euo pipefail

duration="${1:-60s}"
only="${2:-}"
cd "$(dirname "$0")/.." # module root

pkgs=$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u |
	sed 's#^\./##' | { if [ -n "$only" ]; then grep -E -- "$only" || true; else cat; fi })
if [ -z "$pkgs" ]; then
	echo "no package with fuzz targets${only:+ matching $only}" >&2
	exit 1
fi

failed=()
total=0
for pkg in $pkgs; do
	targets=$(go test -list '^Fuzz' "./$pkg" | grep '^Fuzz' || true)
	for t in $targets; do
		total=$((total + 1))
		echo "=== $pkg $t ($duration)"
		if ! go test -run='^$' -fuzz="^${t}\$" -fuzztime="$duration" ${FUZZ_FLAGS:-} "./$pkg"; then
			failed+=("$pkg.$t")
		fi
	done
done

if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "all $total fuzz targets passed ($duration each)"
