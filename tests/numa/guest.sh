#!/bin/sh
# Runs inside the 2-node NUMA guest (busybox sh), driven by tests/numa/run.sh.
# Leaves its results in /out for the host to check.
A=/opt/bimodal/bimodal-agent
F=/opt/bimodal/numa_scan

# pid_of LOG: waits until the fixture printed its pid (and started scanning), prints it
pid_of() {
	i=0
	until grep -q 'numa_scan: progress' "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -gt 600 ] && break
		usleep 100000
	done
	sed -n 's/.*numa_scan: pid=\([0-9]*\).*/\1/p' "$1" | head -n1
}

"$A" probe --json >/out/probe.json 2>/out/probe.err
"$A" probe >/out/probe.txt 2>&1

# 1. a worker on node 1 scans a buffer held on node 0: remote accesses in scan_remote_buffer
"$F" 14 --bind --linger 5 >/out/scan.log 2>&1 &
fixture=$!
pid=$(pid_of /out/scan.log)
# Both from the start of the scan until they have the samples check.py wants (a fixed window saw
# too few hint faults on a slow, cold guest: NUMA balancing scans less often as a task runs on),
# at most while the scan lasts.
"$A" record --event numa_hint_fault --duration 13s --until-samples 300 --pid "$pid" -o /out/hint.folded 2>/out/hint.err &
hint=$!
"$A" record --event remote_access --duration 13s --until-samples 300 --pid "$pid" -o /out/remote.folded 2>/out/remote.err
wait $hint
"$A" placement --pid "$pid" --json >/out/scan.placement.json 2>/out/scan.placement.err
wait $fixture

# 2. a process started on node 1 whose threads then run on node 0: its .bss is remote
"$F" 8 --bss --bind --linger 5 >/out/bss.log 2>&1 &
fixture=$!
pid=$(pid_of /out/bss.log)
"$A" placement --pid "$pid" --json >/out/bss.placement.json 2>/out/bss.placement.err
wait $fixture
echo guest-done
