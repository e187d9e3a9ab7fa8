#!/usr/bin/env bash
# `make bench` (third part): the agent's memory while it uploads a large image for the server to
# name frames from. A headless Chromium (its executable is ~300 MB and exports a few functions,
# so it is uploaded whole) is sampled by `bimodal-agent run --pid` against a fresh server; the run
# ends once the agent logs the upload. Reports the agent's peak RSS (GNU time), the image's size
# and the time to upload, for this build and, side by side, for BIMODAL_AGENT_B when given (an
# older build, e.g. one that read images whole). Prints a Markdown table, also written to
# $BENCH_OUT/upload.md.
set -euo pipefail
cd "$(dirname "$0")/.."

agent_a=${BIMODAL_AGENT:-target/release/bimodal-agent}
agent_b=${BIMODAL_AGENT_B:-}
server=${BIMODAL_SERVER:-target/release/bimodal-server}
image=${BENCH_IMAGE:-/usr/lib/chromium/chromium}
out=${BENCH_OUT:-target/bench}
runs=$out/upload
mkdir -p "$runs"
say() { echo "bench-upload: $*" >&2; }
die() {
	say "error: $*"
	exit 1
}
[ "$(id -u)" = 0 ] || die "needs root (BPF)"
[ -x "$agent_a" ] && [ -x "$server" ] || die "run make release first"
[ -x "$image" ] || die "$image is missing (apt-get install chromium)"
[ -x /usr/bin/time ] || die "GNU time is missing (apt-get install time)"

# shellcheck source=tools/lib/server.sh
. tools/lib/server.sh
pids=()
cleanup() {
	stop_server
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

rm -rf "$runs/profile"
"$image" --headless --no-sandbox --disable-gpu --user-data-dir="$runs/profile" --remote-debugging-port=0 about:blank \
	>"$runs/chromium.log" 2>&1 &
browser=$!
pids+=("$browser")
sleep 3
kill -0 "$browser" || die "$image did not stay up: $runs/chromium.log"

# One measurement: a fresh server (it has stored nothing), the agent until it logs the upload.
measure() {
	local agent=$1 label=$2
	local data=$runs/server-$label port
	rm -rf "$data"
	port=$(free_port)
	start_server "$server" "127.0.0.1:$port" "$runs/server-$label.log" --data-dir "$data" || die "no server"
	local start=$SECONDS
	RUST_LOG=info /usr/bin/time -f '%M %e' -o "$runs/time-$label" "$agent" run --server-url "http://127.0.0.1:$port" \
		--node-name "upload-$label" --pid "$browser" --event cpu --cpu-frequency 499 --interval 1s \
		2>"$runs/agent-$label.log" &
	local ag=$!
	for _ in $(seq 1 600); do
		grep -q "uploaded for symbolization.*$(basename "$image")" "$runs/agent-$label.log" && break
		sleep 0.2
	done
	local took=$((SECONDS - start))
	# GNU time ignores SIGINT while it waits: the agent is its child.
	pkill -INT -P "$ag" || true
	wait "$ag" || true
	stop_server
	grep -q "uploaded for symbolization.*$(basename "$image")" "$runs/agent-$label.log" || die "$label never uploaded $image: $runs/agent-$label.log"
	read -r peak _ <"$runs/time-$label"
	printf '| %s | %s | %d MiB | ≤ %d s |\n' "$label" "$agent" $((peak / 1024)) "$took"
}

size=$(stat -c %s "$image")
{
	echo "Agent uploading $image ($((size / 1048576)) MiB) for the server to name its frames:"
	echo
	echo "| build | binary | agent peak RSS | until uploaded |"
	echo "| --- | --- | --- | --- |"
	# The server started in a run is the group's own (a subshell): stopped there if it fails.
	trap stop_server EXIT
	measure "$agent_a" a
	if [ -n "$agent_b" ]; then measure "$agent_b" b; fi
} | tee "$runs/../upload.md"
