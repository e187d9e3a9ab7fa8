#!/usr/bin/env bash
# Smoke test of the NUMA guest harness: prepare, build testdata/fixtures/numa_scan.c,
# boot a 2-node guest, run the fixture and check that NUMA balancing really happens.
#
#   tools/numa-vm/smoke.sh [CACHE_DIR]      (default <repo>/target/numa-vm)
#
# Asserts: two nodes online; numa_hint_faults grows by > 1000 while a node-1 thread scans
# a buffer bound to node 0 (MPOL_BIND|MPOL_F_NUMA_BALANCING); /proc/PID/numa_maps shows
# every page of that buffer on N0 and none elsewhere; in --bss --bind mode the .bss table
# stays on N1 while node-0 threads touch it; the fixture exits 0.
# Prints "N passed, N failed" and exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${1:-${NUMA_VM_CACHE:-$REPO/target/numa-vm}}"
SECS="${NUMA_SMOKE_SECONDS:-8}"   # how long the bind-mode scan runs

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
T0=$(now)

# ---------------------------------------------------------------- prepare
t=$(now)
"$HERE/prepare.sh" "$CACHE"
PREP_S=$(since "$t")
CACHE="$(cd "$CACHE" && pwd)"

# ---------------------------------------------------------------- build the fixture
if ! command -v gcc >/dev/null 2>&1; then
  echo "smoke: installing gcc libc6-dev" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null; }
fi
BUILD="$CACHE/smoke"
mkdir -p "$BUILD"
CFLAGS=(-O1 -g -fno-omit-frame-pointer -pthread -Wall -Wextra)
# NUMA_SMOKE_LINK=dynamic forces the dynamic build (run.sh then copies libc and the loader).
if [ "${NUMA_SMOKE_LINK:-auto}" != dynamic ] && [ -f "$(gcc -print-file-name=libc.a)" ]; then
  LINK=static
  gcc "${CFLAGS[@]}" -static -o "$BUILD/numa_scan" "$REPO/testdata/fixtures/numa_scan.c"
else
  LINK=dynamic   # run.sh copies the ldd libraries and the loader
  gcc "${CFLAGS[@]}" -o "$BUILD/numa_scan" "$REPO/testdata/fixtures/numa_scan.c"
fi
echo "smoke: built $BUILD/numa_scan ($LINK)"

# ---------------------------------------------------------------- run in the guest
OUT="$BUILD/out"
rm -rf "$OUT"
t=$(now)
set +e
"$HERE/run.sh" --nodes 2 --cpus-per-node 1 --mem-per-node 512M --timeout 300 \
  --cache "$CACHE" \
  --copy "$BUILD/numa_scan:/opt/numa/numa_scan" \
  --copy "$HERE/smoke-guest.sh:/opt/numa/smoke-guest.sh" \
  --out-dir "$OUT" \
  -- sh /opt/numa/smoke-guest.sh /opt/numa/numa_scan "$SECS" 2> >(tee "$BUILD/run.stderr" >&2)
RUN_RC=$?
set -e
RUN_S=$(since "$t")
sleep 0.2   # let the tee of stderr finish

# ---------------------------------------------------------------- assertions
pass=0 fail=0
check() {  # name condition-result detail
  if [ "$2" = 0 ]; then pass=$((pass + 1)); echo "smoke: ok   $1 ($3)"
  else fail=$((fail + 1)); echo "smoke: FAIL $1 ($3)"; fi
}
val() { awk -v k="$2" '$1 == k { print $2; exit }' "$1" 2>/dev/null || true; }
delta() { local a b; a="$(val "$OUT/$1.vmstat.before" "$2")"; b="$(val "$OUT/$1.vmstat.after" "$2")"; echo $(( ${b:-0} - ${a:-0} )); }
# pages on node N in a numa_maps excerpt (sum over its lines)
on_node() { { grep -o " N[0-9]*=[0-9]*" "$1" 2>/dev/null || true; } | awk -F= -v n=" N$2" '$1 == n { s += $2 } END { print s + 0 }'; }
other_nodes() { { grep -o " N[0-9]*=[0-9]*" "$1" 2>/dev/null || true; } | awk -F= -v n=" N$2" '$1 != n { s += $2 } END { print s + 0 }'; }

check "run.sh exit status" "$([ "$RUN_RC" = 0 ] && echo 0 || echo 1)" "rc=$RUN_RC"
online="$(cat "$OUT/online" 2>/dev/null || true)"
check "2 nodes online" "$([ "$online" = 0-1 ] && echo 0 || echo 1)" "online=$online"

hint=$(delta bind numa_hint_faults)
hint_local=$(delta bind numa_hint_faults_local)
migrated=$(delta bind numa_pages_migrated)
check "numa_hint_faults grew by > 1000 (bind mode)" "$([ "$hint" -gt 1000 ] && echo 0 || echo 1)" \
  "delta=$hint, local=$hint_local, pages_migrated=$migrated"

pages=$(( 128 * 1024 / 4 ))
n0=$(on_node "$OUT/bind.numa_maps" 0); nx=$(other_nodes "$OUT/bind.numa_maps" 0)
check "buffer pages on N0 in /proc/PID/numa_maps (bind mode)" \
  "$([ "$n0" = "$pages" ] && [ "$nx" = 0 ] && echo 0 || echo 1)" "N0=$n0 of $pages, elsewhere=$nx"

bss_pages=$(( 64 * 1024 / 4 ))
b1=$(on_node "$OUT/bss.numa_maps" 1); bx=$(other_nodes "$OUT/bss.numa_maps" 1)
bhint=$(delta bss numa_hint_faults)
check ".bss table stays on N1 while node-0 threads touch it (--bss --bind)" \
  "$([ "$b1" = "$bss_pages" ] && [ "$bx" = 0 ] && [ "$bhint" -gt 1000 ] && echo 0 || echo 1)" \
  "N1=$b1 of $bss_pages, elsewhere=$bx, hint_faults=$bhint"

for f in btf_has_task_numa_fault kallsyms_task_numa_fault ftrace_task_numa_fault; do
  v="$(sed -n "s/^$f=//p" "$OUT/facts" 2>/dev/null)"
  check "$f" "$([ "$v" = yes ] && echo 0 || echo 1)" "$f=${v:-missing}"
done

boot="$(sed -n 's/.*guest boot \([0-9.]*\)s.*/\1/p' "$BUILD/run.stderr" 2>/dev/null | tail -n1 || true)"
echo "smoke: timings: prepare ${PREP_S}s, guest boot ${boot:-?}s (uptime at command start)," \
     "run.sh ${RUN_S}s, total $(since "$T0")s; fixture linked $LINK"
echo "smoke: $pass passed, $fail failed"
[ "$fail" = 0 ]
