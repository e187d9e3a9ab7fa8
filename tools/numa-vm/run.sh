#!/usr/bin/env bash
# Boot a throw-away multi-node NUMA Linux guest under qemu (TCG) and run one command in it.
#
# usage: tools/numa-vm/run.sh [options] [--copy HOST_PATH[:GUEST_PATH]]... -- GUEST_COMMAND [ARG]...
#
#   --nodes N              NUMA nodes (default 2)
#   --cpus-per-node N      vCPUs per node (default 1); node i gets CPUs i*N..i*N+N-1
#   --mem-per-node SIZE    memory per node, e.g. 512M, 1G (default 512M)
#   --timeout SECS         wall-clock limit for the whole VM (default 300); exit 124 when hit
#   --copy SRC[:DST]       put a host file or directory into the guest at DST (default: the
#                          same absolute path). DST ending in / means "into that directory".
#                          Dynamically linked ELF files get their ldd libraries and loader too.
#   --out-dir DIR          after the command, the guest's /out is copied back into DIR
#   --out-size SIZE        size of the raw disk that carries /out back (default 256M, sparse)
#   --env NAME=VALUE       export a variable to the command (repeatable)
#   --cwd DIR              working directory of the command in the guest (default /)
#   --append ARGS          extra kernel command-line arguments
#   --cpu MODEL            qemu -cpu (default qemu64; "max" works but is ~8x slower)
#   --qemu-arg ARG         extra qemu argument (repeatable)
#   --suite NAME           boot the cloud kernel of this Debian suite (bullseye: 5.10, bookworm:
#                          6.1, trixie: 6.12), fetched through an apt list of its own (see
#                          prepare.sh); default: the one the machine's apt sources give
#   --cache DIR            cache made by prepare.sh (default <repo>/target/numa-vm, or
#                          <repo>/target/numa-vm-SUITE with --suite)
#   --console              also stream the guest's kernel console to stderr
#   --keep                 keep the work directory (console.log, initrd, ...) and print its path
#   --retry-on-lockup      when the guest kernel locks up (exit 126), boot a fresh guest once
#   --tcg-single-thread    run every vCPU on one host thread (TCG's thread=single): slower, but
#                          the guest's CPUs never run at once. Under multi-threaded TCG a 6.12
#                          guest twice took an int3 Oops in do_user_addr_fault (a jump label
#                          patched by text_poke_bp while the agent enabled its perf events,
#                          the other CPU still running the breakpoint), 2026-12-06
#   -q, --quiet            no numa-vm status lines on stderr
#
# GUEST_COMMAND runs exec-style (each argument is quoted; use `sh -c '...'` for shell syntax)
# as root with stdin=/dev/null, PATH including /usr/local/bin:/usr/bin:/bin (busybox applets).
# Its stdout/stderr are pipes streamed to this script's stdout/stderr, separate from the
# kernel console. The guest has proc, sysfs, debugfs (/sys/kernel/debug), tracefs
# (/sys/kernel/tracing), bpffs (/sys/fs/bpf), cgroup2 (/sys/fs/cgroup), tmpfs /tmp, and
# kernel.numa_balancing=1.
#
# Exit status: the guest command's exit status; 124 on timeout (qemu is killed);
# 125 when the VM failed before reporting an exit status (console tail is printed);
# 126 when the guest kernel locked up (a soft lockup or an RCU stall: it panics at once, and
# the report with its backtrace is printed). Seen twice in CI in a fleet guest running only
# numa_scan and the agent, never here in 10 such guests nor in 120 attach/detach cycles of the
# agent beside numa_scan: callers may boot a fresh guest once (--retry-on-lockup), and the
# report stays in their output to tell whose fault it is.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

NODES=2 CPN=1 MEM=512M TIMEOUT=300 OUT_DIR="" OUT_SIZE=256M CWD=/ APPEND="" CPU=qemu64 TCG_THREAD=""
CACHE="${NUMA_VM_CACHE:-}" CONSOLE=0 KEEP=0 QUIET=0 SUITE="${NUMA_VM_SUITE:-}"
COPIES=() ENVS=() QEMU_EXTRA=()

usage() { sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "numa-vm: error: $*" >&2; exit 125; }
say() { [ "$QUIET" = 1 ] || echo "numa-vm: $*" >&2; }

ARGS=("$@") RETRY_LOCKUP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --retry-on-lockup) RETRY_LOCKUP=1; shift ;;
    --tcg-single-thread) TCG_THREAD=",thread=single"; shift ;;
    --nodes) NODES="$2"; shift 2 ;;
    --cpus-per-node) CPN="$2"; shift 2 ;;
    --mem-per-node) MEM="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --copy) COPIES+=("$2"); shift 2 ;;
    --out-dir) OUT_DIR="$2"; shift 2 ;;
    --out-size) OUT_SIZE="$2"; shift 2 ;;
    --env) ENVS+=("$2"); shift 2 ;;
    --cwd) CWD="$2"; shift 2 ;;
    --append) APPEND="$2"; shift 2 ;;
    --cpu) CPU="$2"; shift 2 ;;
    --qemu-arg) QEMU_EXTRA+=("$2"); shift 2 ;;
    --cache) CACHE="$2"; shift 2 ;;
    --suite) SUITE="$2"; shift 2 ;;
    --console) CONSOLE=1; shift ;;
    --keep) KEEP=1; shift ;;
    -q|--quiet) QUIET=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "numa-vm: unknown option '$1' (the guest command goes after --)" >&2; usage >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "numa-vm: missing -- GUEST_COMMAND" >&2; usage >&2; exit 2; }

if [ "$RETRY_LOCKUP" = 1 ]; then
  # The same run without the option (only options before -- are looked at), twice at most.
  once=() in_cmd=0
  for a in "${ARGS[@]}"; do
    if [ "$in_cmd" = 0 ] && [ "$a" = --retry-on-lockup ]; then continue; fi
    [ "$a" = -- ] && in_cmd=1
    once+=("$a")
  done
  rc=0; "$0" "${once[@]}" || rc=$?
  if [ "$rc" = 126 ]; then
    echo "numa-vm: the guest kernel locked up (report above); booting a fresh guest once" >&2
    rc=0; "$0" "${once[@]}" || rc=$?
  fi
  exit "$rc"
fi

to_mib() {  # 512M, 1G, 1024 (MiB) -> MiB
  local v="$1" n
  case "$v" in
    *[gG]|*[gG][iI][bB]|*[gG][bB]) n="${v%%[gG]*}"; echo $((n * 1024)) ;;
    *[mM]|*[mM][iI][bB]|*[mM][bB]) n="${v%%[mM]*}"; echo $((n)) ;;
    *[!0-9]*) return 1 ;;
    *) echo $((v)) ;;
  esac
}
isnum() { case "$1" in ''|*[!0-9]*) return 1 ;; esac; }
isnum "$NODES" && [ "$NODES" -ge 1 ] || { echo "numa-vm: bad --nodes $NODES" >&2; exit 2; }
isnum "$CPN" && [ "$CPN" -ge 1 ] || { echo "numa-vm: bad --cpus-per-node $CPN" >&2; exit 2; }
isnum "$TIMEOUT" && [ "$TIMEOUT" -ge 1 ] || { echo "numa-vm: bad --timeout $TIMEOUT" >&2; exit 2; }
MEM_MIB="$(to_mib "$MEM")" && [ "$MEM_MIB" -ge 64 ] || { echo "numa-vm: bad --mem-per-node $MEM (>= 64M)" >&2; exit 2; }
OUT_MIB="$(to_mib "$OUT_SIZE")" && [ "$OUT_MIB" -ge 1 ] || { echo "numa-vm: bad --out-size $OUT_SIZE" >&2; exit 2; }

# ------------------------------------------------------------------ cache
[ -n "$CACHE" ] || CACHE="$REPO/target/numa-vm${SUITE:+-$SUITE}"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
export NUMA_VM_SUITE="$SUITE"
# prepare.sh returns in ~30 ms when its cache is current.
NUMA_VM_FROM_RUN=1 NUMA_VM_QUIET="$QUIET" "$HERE/prepare.sh" "$CACHE" >&2 || die "prepare.sh failed"
. "$CACHE/current.env"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (run prepare.sh)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/numa-vm.XXXXXX")"
QPID=""
cleanup() {
  [ -n "$QPID" ] && kill "$QPID" 2>/dev/null || true
  if [ "$KEEP" = 1 ]; then echo "numa-vm: work dir kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ overlay cpio
OV="$WORK/overlay"
mkdir -p "$OV/vmrun"
declare -A SEEN_LIB=()
LD_EXTRA=""

is_elf() { [ -f "$1" ] && [ "$(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' \n')" = '177ELF' ]; }
add_file() {  # host-file guest-abs-path
  local dst="$OV$2"
  mkdir -p "$(dirname "$dst")"
  cp -L --preserve=mode,timestamps "$1" "$dst"
}
add_libs() {  # host ELF file: copy what ldd resolves
  local f="$1" line lib out
  out="$(LC_ALL=C ldd "$f" 2>/dev/null)" || return 0   # static or not loadable here
  while IFS= read -r line; do
    lib=""
    case "$line" in
      *"=> not found"*) echo "numa-vm: warning: $f: ${line# *}" >&2; continue ;;
      *"=> /"*) lib="${line#*=> }"; lib="${lib%% (*}" ;;
      [[:space:]]/*) lib="${line#"${line%%[![:space:]]*}"}"; lib="${lib%% (*}" ;;
    esac
    [ -n "$lib" ] && [ -f "$lib" ] || continue
    [ -n "${SEEN_LIB[$lib]:-}" ] && continue
    SEEN_LIB[$lib]=1
    add_file "$lib" "$lib"
    case "$(dirname "$lib")" in
      /lib|/lib64|/usr/lib|/usr/lib64|/lib/x86_64-linux-gnu|/usr/lib/x86_64-linux-gnu) ;;
      *) LD_EXTRA="${LD_EXTRA:+$LD_EXTRA:}$(dirname "$lib")" ;;
    esac
  done <<< "$out"
}

for spec in "${COPIES[@]+"${COPIES[@]}"}"; do
  src="${spec%%:*}"
  if [ "$src" = "$spec" ]; then dst=""; else dst="${spec#*:}"; fi
  [ -e "$src" ] || die "--copy: $src does not exist"
  [ -n "$dst" ] || dst="$(realpath -s "$src")"
  case "$dst" in /*) ;; *) dst="/$dst" ;; esac
  case "$dst" in */) dst="$dst$(basename "$src")" ;; esac
  if [ -d "$src" ]; then
    mkdir -p "$OV$dst"
    cp -a "$src/." "$OV$dst/"
  else
    add_file "$src" "$dst"
  fi
done
# Shared libraries of every copied ELF file (directories included).
while IFS= read -r -d '' f; do
  is_elf "$f" && add_libs "$f"
done < <(find "$OV" -path "$OV/vmrun" -prune -o -type f -print0)

TOKEN="$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
q() { local s="${1//\'/\'\\\'\'}"; printf "'%s'" "$s"; }
{
  echo "VMRUN_TOKEN=$TOKEN"
  echo "VMRUN_OUT=$([ -n "$OUT_DIR" ] && echo 1 || echo 0)"
  echo "VMRUN_CWD=$(q "$CWD")"
} > "$OV/vmrun/env"
{
  echo '#!/bin/sh'
  [ -n "$LD_EXTRA" ] && echo "export LD_LIBRARY_PATH=$(q "$LD_EXTRA")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  echo "export NUMA_VM_NODES=$NODES NUMA_VM_CPUS_PER_NODE=$CPN"
  for e in "${ENVS[@]+"${ENVS[@]}"}"; do
    case "$e" in [A-Za-z_]*=*) ;; *) die "--env wants NAME=VALUE, got '$e'" ;; esac
    echo "export ${e%%=*}=$(q "${e#*=}")"
  done
  printf 'exec'
  for a in "$@"; do printf ' %s' "$(q "$a")"; done
  echo
} > "$OV/vmrun/cmd.sh"
chmod 755 "$OV/vmrun/cmd.sh"

(cd "$OV" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) > "$WORK/overlay.cpio" \
  || die "cpio failed"
cat "$NUMA_VM_INITRD" "$WORK/overlay.cpio" > "$WORK/initrd"
rm -f "$WORK/overlay.cpio"
[ "$KEEP" = 1 ] || rm -rf "$OV"

# ------------------------------------------------------------------ qemu
: > "$WORK/console.log"; : > "$WORK/stdout"; : > "$WORK/stderr"; : > "$WORK/ctl"
NCPU=$((NODES * CPN))
QEMU=(qemu-system-x86_64 -accel "tcg$TCG_THREAD" -cpu "$CPU" -M pc -nodefaults -no-user-config
      -display none -vga none -no-reboot
      -m "$((NODES * MEM_MIB))M" -smp "$NCPU,sockets=$NODES,cores=$CPN,threads=1")
for ((i = 0; i < NODES; i++)); do
  QEMU+=(-object "memory-backend-ram,id=ram$i,size=${MEM_MIB}M"
         -numa "node,nodeid=$i,cpus=$((i * CPN))-$((i * CPN + CPN - 1)),memdev=ram$i")
done
QEMU+=(-kernel "$NUMA_VM_KERNEL" -initrd "$WORK/initrd"
       -append "console=ttyS0 quiet loglevel=5 tsc=reliable panic=-1 softlockup_panic=1 rdinit=/init numa_balancing=enable $APPEND"
       -chardev "file,id=con,path=$WORK/console.log,append=on" -serial chardev:con
       -chardev "file,id=out,path=$WORK/stdout,append=on" -serial chardev:out
       -chardev "file,id=err,path=$WORK/stderr,append=on" -serial chardev:err
       -chardev "file,id=ctl,path=$WORK/ctl,append=on" -serial chardev:ctl)
if [ -n "$OUT_DIR" ]; then
  truncate -s "${OUT_MIB}M" "$WORK/out.img"
  QEMU+=(-drive "if=none,id=outdisk,format=raw,file=$WORK/out.img"
         -device "nvme,drive=outdisk,serial=numavmout")
fi
QEMU+=("${QEMU_EXTRA[@]+"${QEMU_EXTRA[@]}"}")

say "booting $NODES node(s) x $CPN cpu(s) x ${MEM_MIB}M, $NUMA_VM_KPKG $NUMA_VM_KPKG_VERSION, timeout ${TIMEOUT}s"
t0=$(date +%s.%N)
timeout --kill-after=5 "$TIMEOUT" "${QEMU[@]}" > "$WORK/qemu.log" 2>&1 &
QPID=$!
# Stream the guest's stdout/stderr live (tail exits once qemu has gone).
tail -q -c +1 -s 0.2 --pid="$QPID" -f "$WORK/stdout" &
T1=$!
tail -q -c +1 -s 0.2 --pid="$QPID" -f "$WORK/stderr" >&2 &
T2=$!
T3=""
if [ "$CONSOLE" = 1 ]; then tail -q -c +1 -s 0.2 --pid="$QPID" -f "$WORK/console.log" >&2 & T3=$!; fi
set +e
wait "$QPID"; qrc=$?
set -e
QPID=""
wait $T1 $T2 $T3 2>/dev/null || true
t1=$(date +%s.%N)
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')

ctl_val() { tr -d '\r' < "$WORK/ctl" | awk -v k="$1" -v t="$TOKEN" '$1 == k && $2 == t { print $3; exit }'; }
start_up="$(ctl_val BIMODAL_NUMA_VM_START | sed 's/uptime=//')"
end_up="$(ctl_val BIMODAL_NUMA_VM_CMDEND | sed 's/uptime=//')"
out_rc="$(ctl_val BIMODAL_NUMA_VM_OUT)"
rc="$(ctl_val BIMODAL_NUMA_VM_EXIT)"

dump_console() {
  echo "numa-vm: ---- last lines of the guest console ----" >&2
  tail -n 40 "$WORK/console.log" | tr -d '\r' >&2
  if [ -s "$WORK/qemu.log" ]; then echo "numa-vm: ---- qemu ----" >&2; tail -n 20 "$WORK/qemu.log" >&2; fi
  echo "numa-vm: ----" >&2
}

# A lockup report: the kernel panics on it (softlockup_panic=1) and the VM powers off.
if [ -z "$rc" ] && grep -qE 'BUG: soft lockup|rcu_preempt self-detected stall|rcu: INFO: rcu_preempt detected stalls' "$WORK/console.log"; then
  echo "numa-vm: LOCKUP: the guest kernel locked up (status ${rc:-none}, qemu $qrc); its report:" >&2
  tr -d '\r' < "$WORK/console.log" | grep -m1 -A 60 -E 'BUG: soft lockup|rcu_preempt self-detected stall|rcu: INFO: rcu_preempt detected stalls' >&2
  echo "numa-vm: ----" >&2
  exit 126
fi

if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
  echo "numa-vm: TIMEOUT: the VM did not finish within ${TIMEOUT}s; qemu was killed" >&2
  [ -n "$start_up" ] && echo "numa-vm: (the guest command had started at guest uptime ${start_up}s)" >&2
  dump_console
  exit 124
fi

if [ -n "$OUT_DIR" ]; then
  mkdir -p "$OUT_DIR"
  if [ "$out_rc" = 0 ]; then
    tar -x -f "$WORK/out.img" -C "$OUT_DIR" --no-same-owner 2>"$WORK/untar.log" \
      || { cat "$WORK/untar.log" >&2; echo "numa-vm: warning: extracting /out failed" >&2; }
  else
    echo "numa-vm: warning: the guest could not write /out (status ${out_rc:-none}); is --out-size big enough?" >&2
  fi
fi

if [ -z "$rc" ]; then
  echo "numa-vm: the VM stopped (qemu status $qrc) without reporting the command's exit status" >&2
  dump_console
  exit 125
fi
boot="${start_up:-?}"
cmd_s="$(awk -v a="${start_up:-0}" -v b="${end_up:-0}" 'BEGIN { printf "%.1f", b - a }')"
say "exit $rc; guest boot ${boot}s (uptime at command start), command ${cmd_s}s, wall ${wall}s"
exit "$rc"
