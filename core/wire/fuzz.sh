#!/usr/bin/env bash
# Runs every fuzz target of core/wire, one after the other, for the given
# duration each (default 60s): ./core/wire/fuzz.sh [duration]
# Any crash is written by `go test` under core/wire/testdata/fuzz/<Target>/;
# keep such files as regression seeds once the bug is fixed.
set -euo pipefail

duration="${1:-60s}"
cd "$(dirname "$0")/../.." # module root

targets=$(go test -list '^Fuzz' ./core/wire | grep '^Fuzz' || true)
if [ -z "$targets" ]; then
	echo "no fuzz targets found" >&2
	exit 1
fi

failed=()
for t in $targets; do
	echo "=== $t ($duration)"
	if ! go test -run='^$' -fuzz="^${t}\$" -fuzztime="$duration" ${FUZZ_FLAGS:-} ./core/wire; then
		failed+=("$t")
	fi
done

if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "all $(echo "$targets" | wc -l) fuzz targets passed ($duration each)"
