#!/usr/bin/env bash
# Installs what building, testing and running bimodal needs on Debian 12, skipping what is
# already there. Safe to run again. Used by `make setup` (and so by `make test` and `make demo`).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
want() { # want PACKAGE [COMMAND-OR-FILE]
	local pkg=$1 probe=${2:-}
	if [ -n "$probe" ]; then
		if command -v "$probe" >/dev/null 2>&1 || [ -e "$probe" ]; then return; fi
	elif dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
		return
	fi
	need_apt+=("$pkg")
}

want clang-19 clang-19
want clang-format-19 clang-format-19
want llvm-19 llvm-strip-19
want libelf-dev /usr/include/libelf.h
want zlib1g-dev /usr/include/zlib.h
want pkg-config pkg-config
want make make
want gcc cc
# objcopy, strip, nm: the stripped and split-debug fixtures
want binutils objcopy
# libc's debug file in /usr/lib/debug/.build-id: agents upload it so the server names libc's
# internal functions (the end-to-end test expects __libc_start_call_main)
want libc6-dbg
want bpftool /usr/sbin/bpftool
want clickhouse-server /usr/sbin/clickhouse-server
want clickhouse-client clickhouse-client
# zookeeper: the two-shard ClickHouse cluster of the server's tests (server/tests/suite/clickhouse_cluster.rs)
want zookeeper /usr/share/zookeeper/bin/zkServer.sh
# a real Alertmanager and Prometheus for the alerting tests (server/tests/suite/alerts.rs); the
# packages' services are not used: tests start their own on loopback
want prometheus-alertmanager /usr/bin/prometheus-alertmanager
want prometheus /usr/bin/prometheus
# buildah builds the OCI images without a Docker daemon (tools/images.sh); podman runs the agent's
# image under its DaemonSet's confinement (tests/deploy/podman_agent.py)
want buildah buildah
want podman podman
want runc runc
want chromium /usr/bin/chromium
want nodejs node
want npm npm
want curl curl
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then need_apt+=(golang-go); fi

if [ ${#need_apt[@]} -gt 0 ]; then
	echo "setup: installing ${need_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
	echo "setup: cargo is missing: install Rust with rustup (https://rustup.rs), then run this again" >&2
	exit 1
fi
for c in rustfmt clippy; do
	if ! cargo "$c" --version >/dev/null 2>&1; then rustup component add "$c"; fi
done

# Fuzz targets (fuzz/, tools/fuzz.sh) build with cargo-fuzz on the nightly toolchain (libFuzzer
# needs its sanitizer flags).
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
	echo "setup: rustup toolchain install nightly"
	rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
	echo "setup: cargo install cargo-fuzz"
	cargo install --locked cargo-fuzz
fi

# helm v3, built from its Go module (deploy/helm: tools/deploy-check.sh lints and renders the
# chart), and the manifest validator's modules (deploy/validate)
GO=$(command -v go || echo /usr/local/go/bin/go)
if [ ! -x target/tools/bin/helm ]; then
	echo "setup: go install helm.sh/helm/v3/cmd/helm@v3.22.0"
	GOBIN="$PWD/target/tools/bin" "$GO" install helm.sh/helm/v3/cmd/helm@v3.22.0
fi

# chdb runs a modern ClickHouse (26.x) in-process: the modern-dialect schema and queries are
# checked against it (tests/modern_sql.py); Debian only ships clickhouse-server 18.16.
if ! python3 -c 'import chdb' 2>/dev/null; then
	echo "setup: pip install chdb-core"
	python3 -m pip install --quiet chdb-core 2>/dev/null ||
		python3 -m pip install --quiet --break-system-packages chdb-core
fi

# The web UI's build and browser-test tools, pinned by package-lock.json. `npm install`, not
# `npm ci`: the registry mirror here lacks other platforms' optional rollup packages, which
# `npm ci` insists on finding in the lock file; `npm install` keeps the lock's versions.
if [ ! -d web/node_modules ] || [ web/package-lock.json -nt web/node_modules/.package-lock.json ]; then
	echo "setup: npm install (web/)"
	(cd web && npm install --no-audit --no-fund --loglevel=error)
fi
