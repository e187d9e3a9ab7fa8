#!/usr/bin/env python3
"""The server's layers point one way: checks every `crate::` path of server/src against them.

Each top-level module of the server's library (a file or folder of server/src) is in one layer,
listed from the bottom up in LAYERS. A module may name modules of lower layers only: storage is a
leaf under the use cases (window), which are under analysis' callers (alerts) and the API. Edges
within one module (storage::writer -> storage::queries) are that module's own business. Test
code (from a file's first `#[cfg(test)]` on) and comments are not dependencies.

  python3 tools/layers.py          # checks; exits 1 naming every edge that points up
  python3 tools/layers.py --graph  # also prints every edge between modules, with file:line

Run by `make lint`. docs/design/031 says why the layers are these.
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "server" / "src"

# Bottom up; a module may import from earlier layers only.
LAYERS = [
    # leaves: plain data and rules, no I/O of their own
    ["clock", "selector", "rate", "metrics", "analysis"],
    ["yaml", "validate"],
    # the database: rows in, rows out
    ["storage"],
    # the port: connections, TLS, who may do what
    ["tls"],
    ["serve"],
    ["auth"],
    # use cases over storage: a window's per-node figures, naming frames
    ["window", "debuginfo"],
    # what the server does with them: alerting, taking batches in
    ["alerts", "ingest"],
    # the HTTP API
    ["api"],
]

LAYER = {m: i for i, layer in enumerate(LAYERS) for m in layer}


def module_of(path):
    """The top-level module a file of server/src belongs to ('' for lib.rs and binaries)."""
    rel = path.relative_to(SRC)
    if rel.parts[0] in ("lib.rs", "main.rs", "bin"):
        return ""
    return rel.parts[0].removesuffix(".rs")


USE_GROUP = re.compile(r"\buse\s+crate::\{(.*?)\};", re.S)
PATH = re.compile(r"\bcrate::([A-Za-z_][A-Za-z0-9_]*)")


def top_names(group):
    """The first segment of every item of a `use crate::{...}` group: `a, b::{c, d}` -> a, b."""
    items, depth, item = [], 0, ""
    for ch in group:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += ch
    items.append(item)
    return [i.strip().split("::")[0].strip() for i in items if i.strip()]


def edges():
    """(from module, to module, file:line) for every crate path naming another top-level module."""
    found = []
    for path in sorted(SRC.rglob("*.rs")):
        source = module_of(path)
        if not source:
            continue
        text = path.read_text()
        cut = text.find("#[cfg(test)]")
        code = text if cut < 0 else text[:cut]
        # comments out, line numbers kept
        code = "\n".join(line.split("//", 1)[0] for line in code.split("\n"))
        where = lambda offset: f"server/src/{path.relative_to(SRC)}:{code.count(chr(10), 0, offset) + 1}"
        for m in USE_GROUP.finditer(code):
            for target in top_names(m.group(1)):
                found.append((source, target, where(m.start())))
        for m in PATH.finditer(code):
            found.append((source, m.group(1), where(m.start())))
    return [(s, t, w) for s, t, w in found if t in LAYER and t != s]


def main(argv):
    unknown = sorted({module_of(p) for p in SRC.rglob("*.rs")} - set(LAYER) - {""})
    if unknown:
        print(f"layers: modules in no layer (add them to LAYERS): {', '.join(unknown)}", file=sys.stderr)
        return 1
    all_edges = edges()
    by_pair = defaultdict(list)
    for source, target, where in all_edges:
        if where not in by_pair[(source, target)]:
            by_pair[(source, target)].append(where)
    if "--graph" in argv:
        for (source, target), wheres in sorted(by_pair.items(), key=lambda kv: (LAYER[kv[0][0]], kv[0])):
            print(f"{source} -> {target}: {', '.join(wheres)}")
    upward = [(s, t, w) for (s, t), w in by_pair.items() if LAYER[t] >= LAYER[s]]
    for source, target, wheres in sorted(upward):
        how = "the same layer" if LAYER[target] == LAYER[source] else "a higher layer"
        print(f"layers: {source} imports {target}, {how}: {', '.join(wheres)}", file=sys.stderr)
    if upward:
        print("layers: the server's modules, bottom up: " + " < ".join("/".join(l) for l in LAYERS), file=sys.stderr)
        return 1
    print(f"layers: {len(by_pair)} module edges, all pointing down: " + " < ".join("/".join(l) for l in LAYERS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
