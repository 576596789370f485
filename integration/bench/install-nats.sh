#!/usr/bin/env bash
# Installs Debian's nats-server (2.9 on bookworm) when it is not on PATH,
# then prints its version. Idempotent. Needs root (or sudo) for apt-get.
set -euo pipefail

if ! command -v nats-server >/dev/null 2>&1; then
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || { echo "install-nats.sh: need root or sudo for apt-get" >&2; exit 1; }
		SUDO=sudo
	fi
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends nats-server >/dev/null
fi
command -v nats-server >/dev/null 2>&1 || { echo "install-nats.sh: nats-server still not on PATH" >&2; exit 1; }
nats-server --version
