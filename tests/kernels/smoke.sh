#!/bin/sh
# The kernel matrix's smoke test, on whatever kernel it runs on (a qemu guest of
# tests/kernels/run.sh, or the host): every program loaded alone with the verifier's figures,
# then cpu and page_fault samples of a fixture built without frame pointers, as root and as a
# least-privilege DaemonSet runs the agent (no CAP_SYS_RESOURCE, RLIMIT_MEMLOCK 8 MiB). Leaves
# its results in OUT_DIR for tests/kernels/check.py. POSIX sh: the guest has busybox only.
# usage: smoke.sh BIN_DIR OUT_DIR
B=$1
O=$2
A=$B/bimodal-agent
W=$B/workload-nofp
mkdir -p "$O"
uname -r >"$O/kernel"

"$A" probe --verifier --json >"$O/probe.json" 2>"$O/probe.err"
echo $? >"$O/probe.rc"

"$W" memset 300 >"$O/memset.log" 2>&1 &
spin=$!
"$W" fault 300 >"$O/fault.log" 2>&1 &
fault=$!

# record NAME EVENT PID [WRAPPER]: until it has the samples check.py wants, at most a minute
# (600: a process's first samples are unwound in user space while its tables are built)
record() {
	$4 "$A" record --event "$2" --pid "$3" --duration 60s --until-samples 600 -o "$O/$1.folded" 2>"$O/$1.err"
	echo $? >"$O/$1.rc"
}
record cpu cpu $spin
record page_fault page_fault $fault
record cpu-least-privilege cpu $spin "$B/least_privilege"
kill $spin $fault 2>/dev/null
wait
echo smoke-done
