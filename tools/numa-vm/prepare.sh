#!/usr/bin/env bash
# Prepare everything needed to boot a throw-away NUMA guest under qemu TCG.
#
#   tools/numa-vm/prepare.sh [CACHE_DIR]        (default: <repo>/target/numa-vm)
#
# Idempotent and cheap on re-run:
#   * apt-get installs qemu-system-x86 and cpio if they are missing
#     (--no-install-recommends; `apt-get update` is run only when a lookup fails);
#   * downloads the real kernel package that linux-image-cloud-amd64 depends on
#     (e.g. linux-image-6.1.0-56-cloud-amd64) with `apt-get download` and keeps
#     only /boot/vmlinuz-* and /boot/config-* in CACHE_DIR/kernel/<pkg>_<version>/;
#   * downloads busybox-static with `apt-get download` (nothing is installed, so
#     it does not fight with a dynamic busybox the host may have);
#   * builds the base initramfs (busybox + guest-init.sh) in
#     CACHE_DIR/initramfs/base-<hash>.cpio.gz, padded to a multiple of 4 bytes so
#     that run.sh can append an uncompressed overlay cpio to it;
#   * writes CACHE_DIR/current.env that run.sh sources.
#
# No kernel modules are needed: the guest talks to the host over the built-in
# 8250 serial ports (ttyS0..ttyS3) and a built-in NVMe disk (CONFIG_BLK_DEV_NVME=y).
# virtio (pci, console, blk) is modular in the cloud kernel and 9p is not built at all.
#
# Environment:
#   NUMA_VM_SUITE        take the kernel (and busybox) from this Debian suite, e.g. bullseye,
#                        bookworm, trixie, through an apt source list and state directory of
#                        the cache's own (CACHE_DIR/apt): the machine's sources are untouched.
#                        Default: the machine's own apt sources.
#   NUMA_VM_MIRROR       Debian mirror for NUMA_VM_SUITE (default: the machine's, else
#                        http://deb.debian.org/debian); security updates come from the mirror's
#                        sibling debian-security
#   NUMA_VM_KERNEL_META  metapackage to follow       (default linux-image-cloud-amd64)
#   NUMA_VM_KERNEL_PKG   pin the versioned package   (default: what the meta depends on)
#   NUMA_VM_OFFLINE=1    never touch apt; use what is cached
#   NUMA_VM_REFRESH=1    (or --refresh) look the packages up even if apt's lists did not change
#   NUMA_VM_QUIET=1      (or --quiet) less chatter
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# Bump when the layout of the base initramfs changes in a way the hash below misses.
LAYOUT_VERSION=4

QUIET="${NUMA_VM_QUIET:-0}"
CACHE=""
for a in "$@"; do
  case "$a" in
    -q|--quiet) QUIET=1 ;;
    --refresh) NUMA_VM_REFRESH=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "prepare.sh: unknown option $a" >&2; exit 2 ;;
    *) CACHE="$a" ;;
  esac
done
CACHE="${CACHE:-${NUMA_VM_CACHE:-$REPO/target/numa-vm}}"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
# One preparation at a time per cache: guests booted side by side on a fresh machine each run
# this, and two apt-gets at once fail on dpkg's lock (and two writers race on current.env).
# The later one waits, then finds the cache current.
exec 9>"$CACHE/.prepare.lock"
flock 9

log() { [ "$QUIET" = 1 ] || echo "numa-vm prepare: $*" >&2; }
die() { echo "numa-vm prepare: error: $*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; fi
fi

# apt's options: the machine's configuration, or a suite's own list and state (NUMA_VM_SUITE).
APT_OPTS=()
APT_LISTS=/var/lib/apt/lists
SUITE="${NUMA_VM_SUITE:-}"
if [ -n "$SUITE" ]; then
  case "$SUITE" in *[!a-z0-9-]*|"") die "NUMA_VM_SUITE: '$SUITE' is not a Debian suite name" ;; esac
  mirror="${NUMA_VM_MIRROR:-}"
  if [ -z "$mirror" ]; then
    # the machine's main Debian mirror (deb822 or one-line sources), not its security one
    mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' \
      | grep -E '/debian/?$' | head -n1)"
    [ -n "$mirror" ] || mirror="$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
      /etc/apt/sources.list 2>/dev/null | grep -E '/debian/?$' | head -n1)"
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  fi
  mirror="${mirror%/}"
  APT_DIR="$CACHE/apt"
  APT_LISTS="$APT_DIR/lists"
  mkdir -p "$APT_LISTS/partial" "$APT_DIR/cache/archives/partial"
  key=/usr/share/keyrings/debian-archive-keyring.gpg
  {
    echo "deb [signed-by=$key] $mirror $SUITE main"
    echo "deb [signed-by=$key] ${mirror}-security $SUITE-security main"
  } > "$APT_DIR/sources.list.new"
  if ! cmp -s "$APT_DIR/sources.list.new" "$APT_DIR/sources.list" 2>/dev/null; then
    mv "$APT_DIR/sources.list.new" "$APT_DIR/sources.list"
    rm -f "$APT_LISTS"/*_Packages* "$APT_LISTS"/*Release* 2>/dev/null || true
  else
    rm -f "$APT_DIR/sources.list.new"
  fi
  APT_OPTS=(-o "Dir::Etc::SourceList=$APT_DIR/sources.list" -o Dir::Etc::SourceParts=/nonexistent
            -o "Dir::State::Lists=$APT_LISTS" -o "Dir::Cache=$APT_DIR/cache" -o Dir::State::Status=/dev/null
            -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
fi

APT_UPDATED=0
apt_update_once() {
  [ "$APT_UPDATED" = 1 ] && return 0
  [ "${NUMA_VM_OFFLINE:-0}" = 1 ] && return 1
  log "apt-get update${SUITE:+ ($SUITE)}"
  $SUDO apt-get "${APT_OPTS[@]}" update -qq >&2 || return 1
  APT_UPDATED=1
}

# ---------------------------------------------------------------- host tools
need_pkgs=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need_pkgs+=(qemu-system-x86)
command -v cpio >/dev/null 2>&1 || need_pkgs+=(cpio)
command -v gzip >/dev/null 2>&1 || need_pkgs+=(gzip)
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found: this script expects a Debian host"
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  [ "${NUMA_VM_OFFLINE:-0}" = 1 ] && die "missing ${need_pkgs[*]} and NUMA_VM_OFFLINE=1"
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >"$CACHE/apt-install.log" 2>&1; then
    # the machine's own lists, whatever suite the guest's kernel comes from
    $SUDO apt-get update -qq >&2 || die "apt-get update failed"
    $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >"$CACHE/apt-install.log" 2>&1 \
      || { tail -n 30 "$CACHE/apt-install.log" >&2; die "apt-get install ${need_pkgs[*]} failed"; }
  fi
fi

# ------------------------------------------------------------ fast path
# Nothing to do when current.env is complete, was made for this guest-init.sh and
# these settings, and apt's package lists have not changed since (the candidate
# kernel can only move after an `apt-get update`). apt-cache is slow here
# (~0.6 s a call: Docker-style images disable apt's binary cache).
SETTINGS="${NUMA_VM_KERNEL_META:-linux-image-cloud-amd64}|${NUMA_VM_KERNEL_PKG:-}|$LAYOUT_VERSION|$SUITE"
INIT_SHA_NOW="$(sha256sum "$HERE/guest-init.sh" | cut -c1-16)"
if [ -f "$CACHE/current.env" ] && [ "${NUMA_VM_REFRESH:-0}" != 1 ]; then
  (
    . "$CACHE/current.env"
    [ "${NUMA_VM_SETTINGS:-}" = "$SETTINGS" ] && [ "${NUMA_VM_INIT_SHA:-}" = "$INIT_SHA_NOW" ] \
      && [ -f "$NUMA_VM_KERNEL" ] && [ -f "$NUMA_VM_INITRD" ] || exit 1
    [ "${NUMA_VM_OFFLINE:-0}" = 1 ] && exit 0
    [ -z "$(find "$APT_LISTS" -maxdepth 1 -newer "$CACHE/current.env" -print -quit 2>/dev/null)" ]
  ) && { [ "${NUMA_VM_FROM_RUN:-0}" = 1 ] || log "up to date ($CACHE/current.env)"; exit 0; }
fi

# ------------------------------------------------------------ apt helpers
# candidate_version PKG -> prints the candidate version or nothing
candidate_version() {
  apt-cache "${APT_OPTS[@]}" policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2; exit}' | grep -v '(none)' || true
}

# apt_download PKG DIR: downloads PKG's candidate .deb into DIR, prints its path
apt_download() {
  local pkg="$1" dir="$2" f
  mkdir -p "$dir"
  # apt warns when root downloads into a directory _apt cannot write; harmless.
  if ! (cd "$dir" && apt-get "${APT_OPTS[@]}" download -qq "$pkg" >/dev/null 2>&1); then
    apt_update_once || return 1
    (cd "$dir" && apt-get "${APT_OPTS[@]}" download -qq "$pkg" >&2) || return 1
  fi
  f="$(ls -t "$dir"/"${pkg}"_*.deb 2>/dev/null | head -n1)"
  [ -n "$f" ] && echo "$f"
}

# resolve_pkg PKG: prints "NAME VERSION" of the package to use (following a
# metapackage to the versioned package it depends on) or nothing when offline.
resolve_kernel_pkg() {
  local meta="${NUMA_VM_KERNEL_META:-linux-image-cloud-amd64}" pkg="${NUMA_VM_KERNEL_PKG:-}" ver
  if [ -z "$pkg" ]; then
    pkg="$(apt-cache "${APT_OPTS[@]}" depends "$meta" 2>/dev/null | awk '$1=="Depends:" && $2 ~ /^linux-image-/ {print $2; exit}')"
    if [ -z "$pkg" ]; then
      apt_update_once || return 0
      pkg="$(apt-cache "${APT_OPTS[@]}" depends "$meta" 2>/dev/null | awk '$1=="Depends:" && $2 ~ /^linux-image-/ {print $2; exit}')"
    fi
  fi
  [ -n "$pkg" ] || return 0
  ver="$(candidate_version "$pkg")"
  if [ -z "$ver" ]; then apt_update_once || true; ver="$(candidate_version "$pkg")"; fi
  echo "$pkg $ver"
}

# newest complete cache entry under DIR (for offline use)
newest_cached() { ls -td "$1"/*/ 2>/dev/null | while read -r d; do [ -e "$d/.complete" ] && { echo "${d%/}"; break; }; done; }

# ---------------------------------------------------------------- kernel
KDIR=""
KPKG="" KPKG_VER=""
if [ "${NUMA_VM_OFFLINE:-0}" != 1 ]; then
  read -r KPKG KPKG_VER < <(resolve_kernel_pkg || true) || true
fi
if [ -n "$KPKG" ] && [ -n "$KPKG_VER" ] && [ -e "$CACHE/kernel/${KPKG}_${KPKG_VER//:/%}/.complete" ]; then
  KDIR="$CACHE/kernel/${KPKG}_${KPKG_VER//:/%}"
elif [ -n "$KPKG" ]; then
  log "downloading $KPKG ${KPKG_VER:-}"
  tmp="$CACHE/kernel/.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  deb="$(apt_download "$KPKG" "$tmp")" || die "apt-get download $KPKG failed"
  # key the cache by what was actually downloaded (apt-get update may have moved the candidate)
  KPKG_VER="$(dpkg-deb -f "$deb" Version)"
  KDIR="$CACHE/kernel/${KPKG}_${KPKG_VER//:/%}"
  mkdir -p "$tmp/x"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" --wildcards './boot/vmlinuz-*' './boot/config-*'
  rm -rf "$KDIR"; mkdir -p "$KDIR"
  cp "$tmp"/x/boot/vmlinuz-* "$KDIR/vmlinuz"
  cp "$tmp"/x/boot/config-* "$KDIR/config"
  basename "$tmp"/x/boot/vmlinuz-* | sed 's/^vmlinuz-//' > "$KDIR/release"
  echo "$KPKG $KPKG_VER" > "$KDIR/package"
  rm -rf "$tmp"
  touch "$KDIR/.complete"
  # keep only the kernel in use
  for d in "$CACHE"/kernel/*/; do [ "${d%/}" = "$KDIR" ] || rm -rf "$d"; done
else
  KDIR="$(newest_cached "$CACHE/kernel")"
  [ -n "$KDIR" ] || die "cannot resolve the kernel package (offline?) and nothing is cached in $CACHE/kernel"
  log "warning: apt lookup unavailable, using cached kernel $(cat "$KDIR/package")"
fi
read -r KPKG KPKG_VER < "$KDIR/package"
KREL="$(cat "$KDIR/release")"

# The guest relies on these being built in; fail early if a future kernel changes that.
for opt in CONFIG_NUMA CONFIG_NUMA_BALANCING CONFIG_ACPI_NUMA CONFIG_BLK_DEV_INITRD CONFIG_RD_GZIP \
           CONFIG_DEVTMPFS CONFIG_SERIAL_8250 CONFIG_SERIAL_8250_CONSOLE CONFIG_BLK_DEV_NVME CONFIG_TMPFS \
           CONFIG_DEBUG_FS CONFIG_TRACING CONFIG_BPF_SYSCALL CONFIG_DEBUG_INFO_BTF CONFIG_CGROUPS; do
  grep -qx "$opt=y" "$KDIR/config" || die "$KPKG: $opt is not built in (=y); the guest init cannot work without modules"
done

# ---------------------------------------------------------------- busybox
BBDIR=""
bbver=""
if [ "${NUMA_VM_OFFLINE:-0}" != 1 ]; then
  bbver="$(candidate_version busybox-static)"
  if [ -z "$bbver" ]; then apt_update_once || true; bbver="$(candidate_version busybox-static)"; fi
fi
if [ -n "$bbver" ] && [ -e "$CACHE/busybox/${bbver//:/%}/.complete" ]; then
  BBDIR="$CACHE/busybox/${bbver//:/%}"
elif [ -n "$bbver" ]; then
  log "downloading busybox-static $bbver"
  tmp="$CACHE/busybox/.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  deb="$(apt_download busybox-static "$tmp")" || die "apt-get download busybox-static failed"
  bbver="$(dpkg-deb -f "$deb" Version)"
  BBDIR="$CACHE/busybox/${bbver//:/%}"
  dpkg-deb -x "$deb" "$tmp/x"
  rm -rf "$BBDIR"; mkdir -p "$BBDIR"
  # /bin before merged-/usr suites (trixie ships it in /usr/bin)
  bb="$tmp/x/bin/busybox"; [ -f "$bb" ] || bb="$tmp/x/usr/bin/busybox"
  cp "$bb" "$BBDIR/busybox"
  rm -rf "$tmp"
  touch "$BBDIR/.complete"
else
  BBDIR="$(newest_cached "$CACHE/busybox")"
  [ -n "$BBDIR" ] || die "cannot resolve busybox-static (offline?) and nothing is cached"
fi
BUSYBOX="$BBDIR/busybox"

# ---------------------------------------------------------------- base initramfs
INIT_SRC="$HERE/guest-init.sh"
[ -f "$INIT_SRC" ] || die "missing $INIT_SRC"
INIT_SHA="$(sha256sum "$INIT_SRC" | cut -c1-16)"
bbsha="$(sha256sum "$BUSYBOX" | cut -c1-16)"
cfgsha="$(sha256sum "$KDIR/config" | cut -c1-16)"
base_key="$(printf '%s\n' "$LAYOUT_VERSION" "$INIT_SHA" "$bbsha" "$KREL" "$cfgsha" | sha256sum | cut -c1-16)"
INITRD="$CACHE/initramfs/base-$base_key.cpio.gz"
if [ ! -s "$INITRD" ]; then
  log "building base initramfs"
  mkdir -p "$CACHE/initramfs"
  st="$CACHE/initramfs/.staging.$$"
  rm -rf "$st"; mkdir -p "$st"
  (
    cd "$st"
    mkdir -p bin sbin usr/bin usr/sbin usr/local/bin lib lib64 etc dev proc sys tmp run root out vmrun \
             sys/kernel/debug sys/kernel/tracing sys/fs/bpf sys/fs/cgroup
    cp "$BUSYBOX" bin/busybox
    chmod 755 bin/busybox
    # applet symlinks, resolved at build time so boot does not pay for --install
    "$BUSYBOX" --list-full | while read -r p; do
      [ "$p" = bin/busybox ] && continue
      [ -e "$p" ] || [ -L "$p" ] || ln -s /bin/busybox "$p"
    done
    cp "$INIT_SRC" init
    # libbpf (__kconfig externs) and bpftool look for /boot/config-$(uname -r);
    # the cloud kernel has no /proc/config.gz (CONFIG_IKCONFIG is off).
    mkdir -p boot
    cp "$KDIR/config" "boot/config-$KREL"
    chmod 755 init
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > etc/passwd
    printf 'root:x:0:\nnogroup:x:65534:\n' > etc/group
    printf '127.0.0.1 localhost numa-vm\n::1 localhost\n' > etc/hosts
    printf 'passwd: files\ngroup: files\nhosts: files\n' > etc/nsswitch.conf
    : > etc/fstab
    echo numa-vm > etc/hostname
    chmod 1777 tmp
    # An initial console for the kernel to hand to /init; only root can mknod.
    # (/init re-opens /dev/console from devtmpfs anyway.)
    if [ "$(id -u)" = 0 ]; then mknod -m 600 dev/console c 5 1; mknod -m 666 dev/null c 1 3; fi
    find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet
  ) | gzip -6 > "$INITRD.tmp"
  # The kernel wants every appended archive to start 4-byte aligned.
  truncate -s %4 "$INITRD.tmp"
  mv "$INITRD.tmp" "$INITRD"
  rm -rf "$st"
  find "$CACHE/initramfs" -maxdepth 1 -name 'base-*.cpio.gz' ! -name "$(basename "$INITRD")" -delete
fi

# ---------------------------------------------------------------- env for run.sh
cat > "$CACHE/current.env.tmp" <<EOF
# written by tools/numa-vm/prepare.sh
NUMA_VM_KERNEL='$KDIR/vmlinuz'
NUMA_VM_KCONFIG='$KDIR/config'
NUMA_VM_KREL='$KREL'
NUMA_VM_KPKG='$KPKG'
NUMA_VM_KPKG_VERSION='$KPKG_VER'
NUMA_VM_INITRD='$INITRD'
NUMA_VM_INIT_SHA='$INIT_SHA'
NUMA_VM_BUSYBOX='$BUSYBOX'
NUMA_VM_SETTINGS='$SETTINGS'
EOF
mv "$CACHE/current.env.tmp" "$CACHE/current.env"
log "ready: $KPKG $KPKG_VER ($KREL), initrd $(basename "$INITRD") in $CACHE"
