#!/usr/bin/env bash
# Builds the release artifacts: static binaries of the broker, the CLI and
# the plugin binaries for every release platform, one archive per
# platform, and SHA256SUMS over the archives.
#
#   scripts/release.sh [--version V] [--out DIR] [--targets "OS/ARCH ..."]
#
#   --version  the version to stamp (default: `git describe --tags --always
#              --dirty`, or "dev" outside a git checkout)
#   --out      where the artifacts go (default: dist/<version>)
#   --targets  the platforms (default: linux/amd64 linux/arm64 darwin/arm64
#              windows/amd64)
#
# Every binary is built with CGO_ENABLED=0 (static, runs on any Linux,
# including a `FROM scratch` image), -trimpath (no build paths inside) and
# the version, commit and date stamped into core/buildinfo, so `fibril
# version` and `fibrilctl version` name the release. The date is the
# commit's (or SOURCE_DATE_EPOCH when set), so building the same commit
# twice gives the same stamps.
#
# An archive fibril_<version>_<os>_<arch>.tar.gz (a .zip for windows)
# holds a directory of the same name with:
#   fibril, fibrilctl                        the broker and the CLI
#   fibril-coord-raft, fibril-coord-consul   the coordination backends as
#                                            external plugin binaries
#   fibril-transport-tcpwrap                 the example external transport
#   LICENSE, NOTICE, README.md, fibril.example.toml
# (".exe" on windows). CI runs it for linux/amd64
# (integration/release_test.go); the other platforms are checked with
# `go build` only.
set -euo pipefail
cd "$(dirname "$0")/.."

version="" out="" targets="linux/amd64 linux/arm64 darwin/arm64 windows/amd64"
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "release.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

revision="" date=""
if git rev-parse --git-dir >/dev/null 2>&1; then
  revision=$(git rev-parse HEAD)
  [ -n "$version" ] || version=$(git describe --tags --always --dirty)
  date=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
fi
[ -n "$version" ] || version=dev
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
fi
[ -n "$date" ] || date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
[ -n "$out" ] || out="dist/$version"
case "$version" in
  */*|*' '*) echo "release.sh: --version $version: no '/' or spaces" >&2; exit 2 ;;
esac

pkg=github.com/fibrilgo/fibril/core/buildinfo
ldflags="-s -w -X $pkg.version=$version -X $pkg.revision=$revision -X $pkg.date=$date"

# The binaries: name and main package.
binaries=(
  "fibril ./cmd/fibril"
  "fibrilctl ./cmd/fibrilctl"
  "fibril-coord-raft ./coordination/raft/cmd/fibril-coord-raft"
  "fibril-coord-consul ./coordination/consul/cmd/fibril-coord-consul"
  "fibril-transport-tcpwrap ./contrib/transport-tcpwrap"
)

mkdir -p "$out"
out=$(cd "$out" && pwd)
archives=()
for target in $targets; do
  goos=${target%/*} goarch=${target#*/}
  name="fibril_${version}_${goos}_${goarch}"
  stage="$out/$name"
  rm -rf "$stage"
  mkdir -p "$stage"
  ext=""
  [ "$goos" = windows ] && ext=.exe
  for b in "${binaries[@]}"; do
    set -- $b
    echo "build $target $1"
    CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$stage/$1$ext" "$2"
  done
  cp LICENSE NOTICE README.md fibril.example.toml "$stage/"
  if [ "$goos" = windows ]; then
    (cd "$out" && rm -f "$name.zip" && zip -qrX "$name.zip" "$name")
    archives+=("$name.zip")
  else
    # Fixed owner and times, sorted names: the same input gives the same archive.
    tar -C "$out" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$date" -cf - "$name" | gzip -n > "$out/$name.tar.gz"
    archives+=("$name.tar.gz")
  fi
  rm -rf "$stage"
done
(cd "$out" && sha256sum "${archives[@]}" > SHA256SUMS)
echo "artifacts in $out:"
(cd "$out" && cat SHA256SUMS)
