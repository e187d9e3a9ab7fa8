#!/usr/bin/env python3
"""Times compare on a store a bench kept, without ingesting it again.

`tools/bench_storage.py` and `tools/bench_fleet_reads.py` leave their server's data directory
(its managed ClickHouse) under their `--out`. This starts a server (BIMODAL_SERVER, or
target/release/bimodal-server) on such a directory and asks `/api/v1/compare` for the whole
stored range, or for --from/--to, --runs times. It prints p50 and p95 over the runs after the
first, the server's peak RSS, and the server's own step timings (its debug log). Run two
builds in alternation on the same directory for an A/B: this machine's run-to-run noise is
larger than many changes.

With `--a S --b S`, compare is asked for those two groups (`?a=&b=`) instead of bands over
`--selector`: the explanation's path (functions, data objects, labels) at the store's size.

usage: python3 tools/bench_compare_kept.py DATA_DIR [--from S --to S] [--runs N] [--a S --b S]
       [--explained-nodes N] [--save FILE]
"""

import argparse
import json
import os
import re
import statistics
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_fleet_reads import reset_peak  # noqa: E402
from bench_storage import Fleet, http, peak_rss_mib  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data_dir")
    p.add_argument("--from", dest="start", type=int)
    p.add_argument("--to", dest="end", type=int)
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--selector", default='{node=~"loadgen-.*"}')
    p.add_argument("--a", help="a group's selector (with --b): compare these two groups")
    p.add_argument("--b")
    p.add_argument("--explained-nodes", help="compare's explained_nodes (nodes per group read for the explanation)")
    p.add_argument("--save", help="write the last answer's body to this file")
    args = p.parse_args()
    # The server's step timings are debug lines of its log.
    os.environ["RUST_LOG"] = "info,bimodal_server::window=debug"
    log_name = "compare-kept.log"
    fleet = Fleet(args.data_dir, keep=True, log=log_name)
    url, proc = fleet.url, fleet.proc
    try:
        start, end = args.start, args.end
        if start is None or end is None:
            span = fleet.rows("SELECT toUInt32(min(time)) AS a, toUInt32(max(time)) AS b FROM node_totals")[0]
            start, end = int(span["a"]), int(span["b"]) + 60
        asked = {"a": args.a, "b": args.b} if args.a and args.b else {"selector": args.selector}
        if args.explained_nodes:
            asked["explained_nodes"] = args.explained_nodes
        q = urllib.parse.urlencode({"from": str(start), "to": str(end), **asked})
        times, peaks = [], []
        for i in range(args.runs):
            reset_peak(proc.pid)
            t = time.perf_counter()
            status, body = http(url + "/api/v1/compare?" + q, timeout=900)
            times.append(time.perf_counter() - t)
            peaks.append(peak_rss_mib(proc.pid))
            print(f"run {i}: {status}, {times[-1] * 1000:,.0f} ms, {len(body) / 2**20:.2f} MiB", file=sys.stderr)
        rest = sorted(times[1:] or times)
        p95 = rest[min(len(rest) - 1, round(0.95 * (len(rest) - 1)))]
        steps = {}
        with open(os.path.join(args.data_dir, log_name)) as f:
            for line in f:
                m = re.search(r'compare step step="([^"]+)" ms=(\d+)', re.sub(r"\x1b\[[0-9;]*m", "", line))
                if m:
                    steps.setdefault(m.group(1), []).append(int(m.group(2)))
        answer = json.loads(body)
        if args.save:
            with open(args.save, "wb") as f:
                f.write(body)
        print(json.dumps({"from": start, "to": end, "first_ms": times[0] * 1000,
                          "p50_ms": statistics.median(rest) * 1000, "p95_ms": p95 * 1000,
                          "peak_rss_mib": max(peaks), "verdict": answer.get("verdict"),
                          "steps_ms": {k: sorted(v) for k, v in steps.items()}}, indent=1))
    finally:
        fleet.stop()


if __name__ == "__main__":
    main()
