#!/usr/bin/env bash
# NUMA tests in a real 2-node NUMA guest (qemu TCG, Debian's cloud kernel, see tools/numa-vm):
#  - remote_access samples (task_numa_fault, fentry or kprobe as the guest kernel allows) of a
#    worker on node 1 scanning a buffer held on node 0 land in scan_remote_buffer;
#  - placement shows that buffer's pages on node 0 while the worker runs on node 1;
#  - a process started on node 1 whose threads then run on node 0 has its .bss on the remote
#    node, reported as a finding.
# usage: tests/numa/run.sh [AGENT_BINARY]   (default: builds target/release/bimodal-agent)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/numa-test
rm -rf "$out" && mkdir -p "$out/bin"

agent=${1:-}
if [ -z "$agent" ]; then
	cargo build --release -p bimodal-agent --quiet
	agent=target/release/bimodal-agent
fi
cp "$agent" "$out/bin/bimodal-agent"
strip --strip-debug "$out/bin/bimodal-agent"
gcc -O1 -g -fno-omit-frame-pointer -pthread -Wall -o "$out/bin/numa_scan" testdata/fixtures/numa_scan.c

tools/numa-vm/run.sh -q --retry-on-lockup --nodes 2 --cpus-per-node 1 --mem-per-node 768M --timeout 600 \
	--copy "$out/bin/bimodal-agent:/opt/bimodal/bimodal-agent" \
	--copy "$out/bin/numa_scan:/opt/bimodal/numa_scan" \
	--copy tests/numa/guest.sh:/opt/bimodal/guest.sh \
	--out-dir "$out/guest" -- sh /opt/bimodal/guest.sh >"$out/guest.log" 2>&1 || {
	echo "numa: the guest run failed:" >&2
	tail -40 "$out/guest.log" >&2
	exit 1
}
# A guest kernel lockup retried (tools/numa-vm/run.sh --retry-on-lockup): its report, for the record.
sed -n '/numa-vm: LOCKUP/,/numa-vm: ----/p' "$out/guest.log" >&2

python3 tests/numa/check.py "$out/guest"
