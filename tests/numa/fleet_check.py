"""Checks what tests/numa/fleet.sh left: every guest's batches, and `bimodal compare`'s answer
over them. Prints one line per check and a closing `N passed, N failed` line; exits 1 when any
check failed."""
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}")


fleet = dict(line.split() for line in (out / "fleet.txt").read_text().splitlines())
remote = sorted(n for n, p in fleet.items() if p == "remote")
local = sorted(n for n, p in fleet.items() if p == "local")

for node in fleet:
    batches = list((out / node / "batches").glob("batch-*.pb"))
    log = (out / node / "agent.log").read_text(errors="replace") if (out / node / "agent.log").exists() else ""
    check(f"{node} wrote batches and its agent stopped cleanly", len(batches) >= 3 and "agent exit 0" in log,
          f"{len(batches)} batches; {log[-400:]}")

try:
    answer = json.loads((out / "compare.json").read_text())
except (OSError, json.JSONDecodeError) as e:
    answer = {"error": str(e)}
print((out / "compare.txt").read_text(errors="replace") if (out / "compare.txt").exists() else "")

check("compare saw all eight nodes", sorted(answer.get("nodes", [])) == sorted(fleet), json.dumps(answer.get("nodes")))
bands = answer.get("bands") or {}
slow = bands.get(bands.get("slow") or "", [])
check("compare finds bands", bool(bands), answer.get("verdict", json.dumps(answer)[:400]))
check("the slow band is exactly the nodes whose .bss is remote", sorted(slow) == remote,
      f"slow={slow} remote={remote} metric={bands.get('metric')}")

explanation = answer.get("explanation") or {}
placement = explanation.get("placement") or []
first = placement[0] if placement else {}
check("the first placement difference is numa_scan's remote .bss, on all slow nodes and no fast one",
      "bss of numa_scan" in first.get("finding", "")
      and (first.get("high_with"), first.get("low_with")) == (len(remote), 0)
      and bands.get("slow") == "high",
      json.dumps(placement)[:600])

def placement_of(node):
    """What the server holds of `node`'s newest placement, and what its guest logged around it."""
    lines = []
    try:
        held = json.loads((out / node / "placement.json").read_text())
        for p in held.get("processes", []):
            lines.append(f"  pid {p.get('pid')} {p.get('comm')} at {p.get('time')}: threads per node "
                         f"{p.get('threads_per_node')}")
            lines += [f"    {m.get('kind')} {m.get('start'):#x}-{m.get('end'):#x} {m.get('permissions')} "
                      f"pages per node {m.get('pages_per_node')}" for m in p.get("mappings", [])
                      if m.get("kind") in ("bss", "data", "heap", "anon")]
        lines += [f"  finding: {f.get('text')}" for f in held.get("findings", [])]
    except (OSError, json.JSONDecodeError, TypeError, ValueError) as e:
        lines.append(f"  no placement answer: {e}")
    for name in ("fixture.log", "agent.log"):
        path = out / node / name
        if path.exists():
            lines += [f"  {name}: {line}" for line in path.read_text(errors="replace").splitlines()[-6:]]
    return "\n".join(lines)


if placement and first.get("high_with") != len(remote):
    for node in remote:
        print(f"{node} (remote .bss):\n{placement_of(node)}")

code = explanation.get("code") or []
remote_code = [d for d in code if d.get("event") == "remote_access"]
check("the first remote_access difference is scan_bss_table",
      bool(remote_code) and remote_code[0].get("function") == "scan_bss_table", json.dumps(code)[:800])

failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
