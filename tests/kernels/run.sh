#!/usr/bin/env bash
# The kernel matrix: the agent's programs loaded and sampling (cpu and page_fault, a fixture
# built without frame pointers, chains checked) on Debian's cloud kernels 5.10 (bullseye), 6.1
# (bookworm) and 6.12 (trixie) in qemu guests (tools/numa-vm, each suite's kernel fetched
# through an apt list of its own), and on the host's kernel. tests/kernels/check.py judges
# every run and prints the verifier's figures per program and kernel.
# usage: tests/kernels/run.sh [AGENT_BINARY]   (default: builds target/release/bimodal-agent)
#   KERNEL_SUITES   suites to boot (default "bullseye bookworm trixie"); "" for the host only
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/kernel-matrix
rm -rf "$out" && mkdir -p "$out/bin"

agent=${1:-}
if [ -z "$agent" ]; then
	cargo build --release -p bimodal-agent --quiet
	agent=target/release/bimodal-agent
fi
cp "$agent" "$out/bin/bimodal-agent"
strip --strip-debug "$out/bin/bimodal-agent"
gcc -O2 -g -fomit-frame-pointer -Wall -Werror -o "$out/bin/workload-nofp" testdata/fixtures/workload.c
gcc -O1 -Wall -Werror -o "$out/bin/least_privilege" testdata/fixtures/least_privilege.c

# Each guest runs its vCPUs on one host thread (--tcg-single-thread): two guests at a time keep
# both of a 2-core machine's cores busy, where one at a time left one idle: 191 s for the whole
# matrix one at a time, 121 s two at a time (2026-12-07).
boot() {
	local suite=$1
	tools/numa-vm/run.sh -q --retry-on-lockup --tcg-single-thread --suite "$suite" --nodes 1 --cpus-per-node 2 \
		--mem-per-node 1G --timeout 600 --copy "$out/bin:/opt/bimodal" \
		--copy tests/kernels/smoke.sh:/opt/bimodal/smoke.sh \
		--out-dir "$out/$suite" -- sh /opt/bimodal/smoke.sh /opt/bimodal /out >"$out/$suite.log" 2>&1
}
# Kernels fetched (and qemu installed) one suite at a time: two apt-gets at once fail on dpkg's
# lock. Each boot's own preparation then finds its cache current.
for suite in ${KERNEL_SUITES-bullseye bookworm trixie}; do
	NUMA_VM_SUITE=$suite tools/numa-vm/prepare.sh -q "target/numa-vm-$suite"
done
runs=()
declare -A booting=()
failed=()
# Waits for one guest and notes it if it failed.
reap() {
	local pid
	wait -n -p pid "${!booting[@]}" || failed+=("${booting[$pid]}")
	unset "booting[$pid]"
}
for suite in ${KERNEL_SUITES-bullseye bookworm trixie}; do
	[ "${#booting[@]}" -lt 2 ] || reap
	boot "$suite" &
	booting[$!]=$suite
	runs+=("$out/$suite")
done
while [ "${#booting[@]}" -gt 0 ]; do reap; done
for suite in "${failed[@]}"; do
	echo "kernels: the $suite guest failed:" >&2
	tail -40 "$out/$suite.log" >&2
done
[ "${#failed[@]}" -eq 0 ] || exit 1
sh tests/kernels/smoke.sh "$PWD/$out/bin" "$out/host" >"$out/host.log" 2>&1
runs+=("$out/host")

python3 tests/kernels/check.py "${runs[@]}"
