#!/bin/sh
# Runs inside the numa-vm guest (busybox sh), driven by tools/numa-vm/smoke.sh.
# usage: smoke-guest.sh FIXTURE SECONDS
# Prints everything to stdout and leaves machine-readable results in /out.
FIX="${1:-/opt/numa/numa_scan}"
SECS="${2:-8}"
rc=0

echo "== /sys/devices/system/node/online"
cat /sys/devices/system/node/online | tee /out/online
echo "== node distances"
for d in /sys/devices/system/node/node*/distance; do echo "$d: $(cat "$d")"; done | tee /out/distances

echo "== kernel facts"
{
  echo "uname=$(uname -r)"
  echo "numa_balancing=$(cat /proc/sys/kernel/numa_balancing)"
  if [ -e /sys/kernel/btf/vmlinux ]; then echo "btf_vmlinux_bytes=$(wc -c < /sys/kernel/btf/vmlinux)"; else echo "btf_vmlinux_bytes=0"; fi
  grep -qa task_numa_fault /sys/kernel/btf/vmlinux 2>/dev/null && echo "btf_has_task_numa_fault=yes" || echo "btf_has_task_numa_fault=no"
  grep -q ' task_numa_fault$' /proc/kallsyms && echo "kallsyms_task_numa_fault=yes" || echo "kallsyms_task_numa_fault=no"
  grep -q '^task_numa_fault$' /sys/kernel/tracing/available_filter_functions 2>/dev/null \
    && echo "ftrace_task_numa_fault=yes" || echo "ftrace_task_numa_fault=no"
  for m in /sys/kernel/debug /sys/kernel/tracing /sys/fs/bpf /sys/fs/cgroup /tmp; do
    echo "mount $m=$(awk -v m="$m" '$2 == m { print $3 }' /proc/mounts)"
  done
  echo "pmu=$(ls /sys/bus/event_source/devices | tr '\n' ' ')"
} | tee /out/facts

vm() { grep -E '^(numa_|pgmigrate_success)' /proc/vmstat; }

# run_fixture TAG ARGS...: runs the fixture, captures /proc/PID/numa_maps of its region
# while it lingers, and vmstat before/after, into /out/TAG.*
run_fixture() {
  tag="$1"; shift
  echo "== fixture $tag: $FIX $*"
  vm > "/out/$tag.vmstat.before"
  "$FIX" "$@" --linger 3 > "/out/$tag.log" 2>&1 &
  fpid=$!
  i=0
  while ! grep -q 'numa_scan: scan-done' "/out/$tag.log" 2>/dev/null; do
    if ! kill -0 "$fpid" 2>/dev/null; then break; fi
    i=$((i + 1)); [ $i -gt 2400 ] && break
    usleep 50000
  done
  pid="$(sed -n 's/.*numa_scan: pid=\([0-9]*\).*/\1/p' "/out/$tag.log" | head -n1)"
  start="$(sed -n 's/.*region=[a-z]* .* start=0x\([0-9a-f]*\) .*/\1/p' "/out/$tag.log" | head -n1)"
  end="$(sed -n 's/.*region=[a-z]* .* end=0x\([0-9a-f]*\) .*/\1/p' "/out/$tag.log" | head -n1)"
  : > "/out/$tag.numa_maps"
  if [ -n "$pid" ] && [ -r "/proc/$pid/numa_maps" ] && [ -n "$start" ]; then
    cp "/proc/$pid/numa_maps" "/out/$tag.numa_maps.full"
    s=$((0x$start)); e=$((0x$end)); best=0
    while read -r a _; do a=$((0x$a)); [ $a -le $s ] && [ $a -gt $best ] && best=$a; done < "/out/$tag.numa_maps.full"
    while read -r a rest; do
      v=$((0x$a))
      if [ $v -eq $best ] || { [ $v -gt $s ] && [ $v -lt $e ]; }; then echo "$a $rest"; fi
    done < "/out/$tag.numa_maps.full" > "/out/$tag.numa_maps"
  fi
  wait "$fpid"; frc=$?
  vm > "/out/$tag.vmstat.after"
  cat "/out/$tag.log"
  echo "-- /proc/$pid/numa_maps lines for the region 0x$start-0x$end"
  cat "/out/$tag.numa_maps"
  echo "-- /proc/vmstat: name before after delta"
  paste "/out/$tag.vmstat.before" "/out/$tag.vmstat.after" | awk '{ printf "%-26s %10d %10d %10d\n", $1, $2, $4, $4 - $2 }'
  echo "fixture $tag exit=$frc"
  [ "$frc" = 0 ] || rc=1
}

run_fixture bind "$SECS" --bind
run_fixture bss 4 --bss --bind
exit $rc
