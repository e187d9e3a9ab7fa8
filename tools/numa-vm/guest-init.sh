#!/bin/sh
# PID 1 of the numa-vm guest (busybox sh). Packed into the base initramfs by prepare.sh.
#
# Host <-> guest channels (all built into the Debian cloud kernel, no modules):
#   ttyS0  kernel console + messages of this script  -> host console.log
#   ttyS1  the command's stdout (raw, via a pipe)     -> host stdout
#   ttyS2  the command's stderr (raw, via a pipe)     -> host stderr
#   ttyS3  control lines: START / OUT / EXIT <token>  -> parsed by run.sh
#   /dev/nvme0n1 (only with --out-dir): a tar of /out is written to the raw disk
#
# run.sh puts /vmrun/env (VMRUN_* variables) and /vmrun/cmd.sh in an overlay cpio.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LANG=C LC_ALL=C

mount -t devtmpfs -o mode=0755 devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1

say() { echo "numa-vm-init: $*"; }
mnt() { mount "$@" || say "warning: mount $* failed"; }

mnt -t proc proc /proc
mnt -t sysfs sysfs /sys
mnt -t debugfs debugfs /sys/kernel/debug
mnt -t tracefs tracefs /sys/kernel/tracing
mnt -t bpf bpf /sys/fs/bpf
mnt -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /dev/pts /dev/shm /dev/mqueue
mnt -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mnt -t tmpfs -o mode=1777 tmpfs /dev/shm
mnt -t tmpfs -o mode=0755 tmpfs /run
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
# /tmp becomes a tmpfs; keep whatever the overlay cpio put there.
mkdir -p /.tmpfs
mnt -t tmpfs -o mode=1777 tmpfs /.tmpfs
if [ -n "$(ls -A /tmp 2>/dev/null)" ]; then cp -a /tmp/. /.tmpfs/ && rm -rf /tmp/* /tmp/.[!.]* 2>/dev/null; fi
mount --move /.tmpfs /tmp || say "warning: could not move tmpfs to /tmp"
rmdir /.tmpfs 2>/dev/null

hostname numa-vm
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up 2>/dev/null
ulimit -l unlimited 2>/dev/null
echo 1 > /proc/sys/kernel/numa_balancing || say "warning: cannot enable numa_balancing"

VMRUN_TOKEN=none VMRUN_OUT=0 VMRUN_CWD=/
[ -f /vmrun/env ] && . /vmrun/env

# Control / output channels. Keep them open in this shell so their termios stick.
exec 3>/dev/ttyS1 4>/dev/ttyS2 5>/dev/ttyS3
for fd in 3 4 5; do stty -F /proc/self/fd/$fd raw -echo -opost -onlcr 2>/dev/null \
  || say "warning: stty on fd $fd failed"; done
ctl() { echo "$*" >&5; echo "numa-vm-init: $*"; }

read -r up _ < /proc/uptime
ctl "BIMODAL_NUMA_VM_START $VMRUN_TOKEN uptime=$up"

rc=127
if [ -f /vmrun/cmd.sh ]; then
  rm -f /run/vmrun.o /run/vmrun.e
  mkfifo /run/vmrun.o /run/vmrun.e
  cat /run/vmrun.o >&3 & po=$!
  cat /run/vmrun.e >&4 & pe=$!
  ( cd "$VMRUN_CWD" && exec sh /vmrun/cmd.sh ) </dev/null >/run/vmrun.o 2>/run/vmrun.e
  rc=$?
  # Give the relays a moment to drain; a daemon the command left behind may hold the pipes.
  i=0
  while [ $i -lt 30 ] && { kill -0 $po 2>/dev/null || kill -0 $pe 2>/dev/null; }; do
    usleep 100000; i=$((i + 1))
  done
  kill $po $pe 2>/dev/null
else
  say "no /vmrun/cmd.sh"
fi
read -r up _ < /proc/uptime
ctl "BIMODAL_NUMA_VM_CMDEND $VMRUN_TOKEN uptime=$up"

if [ "$VMRUN_OUT" = 1 ]; then
  i=0
  while [ ! -b /dev/nvme0n1 ] && [ $i -lt 100 ]; do usleep 100000; i=$((i + 1)); done
  if [ -b /dev/nvme0n1 ]; then
    ( cd /out && tar -cf /dev/nvme0n1 . ); orc=$?
    sync
    blockdev --flushbufs /dev/nvme0n1 2>/dev/null
  else
    say "no /dev/nvme0n1 for --out-dir"; orc=2
  fi
  ctl "BIMODAL_NUMA_VM_OUT $VMRUN_TOKEN $orc"
fi

ctl "BIMODAL_NUMA_VM_EXIT $VMRUN_TOKEN $rc"
# closing a serial tty waits until its output has drained
exec 3>&- 4>&- 5>&-
sync
poweroff -f
echo o > /proc/sysrq-trigger
sleep 5
