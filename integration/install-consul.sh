#!/usr/bin/env bash
# Builds a Consul agent for the tests of the Consul coordination backend and
# prints its path on the last line. Idempotent: a binary already in the
# cache is reused, so reruns take well under a second.
#
#   integration/install-consul.sh            # -> $FIBRIL_CONSUL_CACHE/consul-<version>/consul
#
# Consul publishes no Debian package this machine can use and no image can
# be pulled, so the agent is compiled from its Go module (the module proxy
# serves it). Its go.mod carries replace directives, which `go install
# module@version` refuses; the build therefore happens in a scratch module
# that requires Consul and calls its command table. The cache lives outside
# the tree (default ~/.cache/fibril-test); the first build downloads a few
# hundred MB of modules and takes several minutes on two cores.
#
# Tests find the binary through FIBRIL_CONSUL_BIN, else this cache path
# (coordination/consul/consultest).
set -euo pipefail

version=${FIBRIL_CONSUL_VERSION:-v1.20.6}
cache=${FIBRIL_CONSUL_CACHE:-$HOME/.cache/fibril-test}
bin=$cache/consul-$version/consul

if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi

mkdir -p "$(dirname "$bin")"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
export GOFLAGS=-mod=mod GOWORK=off

src=$(go mod download -json "github.com/hashicorp/consul@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$src" ]; then
	echo "install-consul.sh: cannot download github.com/hashicorp/consul@$version" >&2
	exit 1
fi

# Consul's own requirements without its replace block, plus Consul itself.
awk '
	/^module / { print "module fibril-consul-agent"; next }
	/^replace \(/ { skip = 1; next }
	skip && /^\)/ { skip = 0; next }
	skip { next }
	/^replace / { next }
	{ print }
' "$src/go.mod" > go.mod
echo "require github.com/hashicorp/consul $version" >> go.mod
cp "$src/go.sum" go.sum
chmod u+w go.sum

cat > main.go <<'GO'
// Command consul runs Consul's own command table (agent, members, kv, ...).
package main

import (
	"fmt"
	"os"

	consulcli "github.com/hashicorp/consul/command/cli"
	"github.com/hashicorp/consul/command"
	_ "github.com/hashicorp/consul/service_os"
	mcli "github.com/mitchellh/cli"
)

func main() {
	ui := &consulcli.BasicUI{BasicUi: mcli.BasicUi{Writer: os.Stdout, ErrorWriter: os.Stderr}}
	app := &mcli.CLI{
		Name:        "consul",
		Args:        os.Args[1:],
		Commands:    command.RegisteredCommands(ui),
		HelpWriter:  os.Stdout,
		ErrorWriter: os.Stderr,
	}
	code, err := app.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}
GO

go mod tidy >/dev/null
go build -trimpath -o "$bin.tmp" .
"$bin.tmp" version >/dev/null
mv "$bin.tmp" "$bin"
echo "$bin"
