#!/bin/sh
# One node of the NUMA fleet (tests/numa/fleet.sh), inside a 2-node guest (busybox sh).
# NODE_NAME names the node; PLACEMENT=remote holds the fixture's .bss on node 1 while its
# threads run on node 0, PLACEMENT=local keeps both on node 0. The agent writes its batches to
# /out/batches for the host to import; it runs until the fixture has scanned for SECONDS.
A=/opt/bimodal/bimodal-agent
F=/opt/bimodal/numa_scan
SECONDS_=${SECONDS_:-14}

# wait_for FILE TEXT [TENTHS]: until TEXT is in FILE (at most TENTHS tenths of a second, 600)
wait_for() {
	i=0
	until grep -q "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -gt "${3:-600}" ] && return 1
		usleep 100000
	done
}

# Only the remote case binds the .bss (MPOL_BIND | MPOL_F_NUMA_BALANCING): bound to the node its
# threads run on, the 6.1 guest kernel once livelocked in numa_scan's page faults (a soft lockup
# of 500 s in CI); first-touched by a thread pinned there, the pages are local without a bind.
case "$PLACEMENT" in
remote) nodes="--bind --home-node 0 --remote-node 1" ;;
local) nodes="--home-node 0 --remote-node 0" ;;
*) echo "PLACEMENT must be remote or local, not '$PLACEMENT'" >&2; exit 2 ;;
esac
mkdir -p /out/batches
# shellcheck disable=SC2086 # $nodes is several options
"$F" "$SECONDS_" --bss $nodes --linger 4 >/out/fixture.log 2>&1 &
fixture=$!
wait_for /out/fixture.log 'numa_scan: scanning' || { echo "the fixture did not start" >&2; exit 1; }
pid=$(sed -n 's/.*numa_scan: pid=\([0-9]*\).*/\1/p' /out/fixture.log | head -n1)
"$A" run --output-dir /out/batches --node-name "$NODE_NAME" --pid "$pid" \
	--event cpu --event remote_access --interval 2s --placement-every 1 >/out/agent.log 2>&1 &
agent=$!
# The agent ships what it has when it is stopped; it is stopped once the scan is over (the
# fixture lingers, so the last placement still sees its pages).
wait_for /out/fixture.log 'numa_scan: scan-done' $((SECONDS_ * 10 + 600)) || echo "the fixture did not finish" >&2
# ... and once it has written the batches the check wants (three): on a loaded host a TCG
# guest's intervals stretch, and 14 s of scanning once gave two (CI, stop 52). Waited for, not
# timed: at most 60 s more.
i=0
while [ "$(ls /out/batches | grep -c '^batch-.*\.pb$')" -lt 3 ] && [ $i -lt 600 ]; do
	i=$((i + 1))
	usleep 100000
done
kill -TERM "$agent"
wait "$agent"
echo "agent exit $?" >>/out/agent.log
wait "$fixture"
ls /out/batches | wc -l >/out/batch-count
echo guest-done
