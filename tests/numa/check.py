"""Checks what tests/numa/guest.sh left in the guest's /out. Prints one line per check and a
closing `N passed, N failed` line; exits 1 when any check failed."""
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}")


def text(name):
    p = out / name
    return p.read_text(errors="replace") if p.exists() else ""


def folded(name):
    rows = {}
    for line in text(name).splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            rows[stack] = rows.get(stack, 0) + int(n)
    return rows


def placement(name):
    try:
        return json.loads(text(name))
    except json.JSONDecodeError as e:
        return {"error": str(e), "text": text(name)[:500]}


probe = placement("probe.json")
sources = {e["event"]: e for e in probe.get("events", [])}
remote_src = (sources.get("remote_access") or {}).get("chosen") or {}
check("probe picks task_numa_fault for remote_access in the NUMA guest",
      remote_src.get("attach") in ("fentry", "kprobe"), json.dumps(sources.get("remote_access"))[:400])

remote = folded("remote.folded")
total = sum(remote.values())
scan = sum(v for k, v in remote.items() if "scan_remote_buffer" in k)
check("remote_access samples recorded", total > 100, f"total={total}; stderr: {text('remote.err')[-400:]}")
check("remote accesses are attributed to scan_remote_buffer", total > 0 and scan / total >= 0.8,
      f"{scan} of {total}: {list(remote.items())[:5]}")

hint = folded("hint.folded")
check("numa_hint_fault samples recorded", sum(hint.values()) > 100, text("hint.err")[-400:])

scan_p = placement("scan.placement.json")
region = [m for m in scan_p.get("mappings", []) if m.get("kind") == "anon"
          and sum(m.get("pages_per_node", {}).values()) >= 16384]
on_n0 = sum(m["pages_per_node"].get("0", 0) for m in region)
all_pages = sum(sum(m["pages_per_node"].values()) for m in region)
check("numa_maps placement shows the scanned buffer on node 0", all_pages > 0 and on_n0 / all_pages >= 0.9,
      f"{json.dumps(region)[:400]} {text('scan.placement.err')[-300:]}")

bss_p = placement("bss.placement.json")
threads = bss_p.get("threads_per_node", {})
bss = [m for m in bss_p.get("mappings", []) if m.get("kind") == "bss"]
bss_n1 = sum(m["pages_per_node"].get("1", 0) for m in bss)
check("the --bss fixture's threads run on node 0", set(threads) == {"0"}, json.dumps(threads))
check("its .bss pages are on node 1", bss_n1 >= 8192, json.dumps(bss)[:400])
findings = bss_p.get("findings", [])
check("placement reports the remote .bss as a finding",
      any(f.get("kind") == "bss" and f.get("node") == 1 for f in findings), json.dumps(findings)[:400])

failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
