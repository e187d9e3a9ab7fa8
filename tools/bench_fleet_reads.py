#!/usr/bin/env python3
"""Every read of the API over a fleet of 100,000 nodes (issue 49; `make bench`).

A fresh release bimodal-server with its managed ClickHouse (Debian's 18.16); bimodal-loadgen
plays the fleet over real gRPC, each node sending a short history of small batches (the whole
fleet's Hellos, node rows and per-node rows are what a read of this size has to handle; the
samples per node are few, as in a fleet whose nodes idle). Then every API a reader or the UI
calls is timed over HTTP against its budget: its wall time (first call and the median of the
rest), the bytes it answered, whether it said it left anything out, the server's peak RSS while
it ran (the kernel's high-water mark, reset before each call through /proc/PID/clear_refs) and
its RSS after. `/healthz` is timed while the heaviest read runs (a reader must not lock out a
health check).

usage: tools/bench_fleet_reads.py [--nodes 100000] [--runs 3] [--history 120] [--out target/bench/fleet-reads]
Writes results.md and results.json in --out and prints the table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_storage import LOADGEN, Fleet, http, peak_rss_mib, status_mib, wait_merges  # noqa: E402

MIB = 2**20
# Nodes the load generator plays at once.
WAVE = 2_000
# /healthz's slowest answer while the heaviest read runs, at most.
HEALTHZ_BUDGET = 1.0


def reads(nodes, start, end):
    """(name, path and query, budget in seconds, budget in MiB answered) of every read: what a
    reader of a 100,000-node fleet may wait for and take in. The bounds that keep each answer
    under its budget at any fleet size are in SECURITY.md ("Reads at any fleet size")."""
    every = '{node=~"loadgen-.*"}'
    tenth, rest = '{node=~".*0"}', '{node!~".*0"}'
    one = f"loadgen-{nodes // 2:05}"
    q = lambda **kw: urllib.parse.urlencode({"from": str(start), "to": str(end), **kw})
    return [
        ("nodes (a page)", f"/api/v1/nodes?{q()}", 10, 16),
        ("labels", f"/api/v1/labels?{q()}", 10, 1),
        ("sources", "/api/v1/sources", 1, 1),
        ("per-node totals", f"/api/v1/totals?{q(event='cpu')}", 10, 16),
        ("per-node functions (default limit)", f"/api/v1/functions?{q(event='cpu', source='cpu-clock')}", 30, 16),
        ("flame graph, every node", f"/api/v1/flamegraph?{q(event='cpu', source='cpu-clock', selector=every)}", 30, 32),
        ("flame graph, a tenth", f"/api/v1/flamegraph?{q(event='cpu', source='cpu-clock', selector=tenth)}", 30, 32),
        ("diff, a tenth against the rest",
         f"/api/v1/diff?{q(event='page_fault', source='page-faults', a=rest, b=tenth)}", 60, 16),
        ("compare", f"/api/v1/compare?{q(selector=every)}", 60, 32),
        ("one node's counters", f"/api/v1/counters?{q(node=one)}", 5, 4),
        ("one node's placement", f"/api/v1/placement?{q(node=one)}", 5, 4),
        ("metrics", "/metrics", 5, 4),
    ]


def rss_mib(pid):
    return status_mib(pid, "VmRSS")


def reset_peak(pid):
    """The kernel's high-water mark of RSS back to the current RSS (proc(5), clear_refs 5)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def truncation(body):
    """What an answer says it left out: any `truncated*` field, at any depth, that is set."""
    found = {}

    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                if k.startswith("truncated") and x not in (None, False, 0, [], {}):
                    found[f"{path}{k}"] = x if not isinstance(x, (dict, list)) else json.dumps(x)[:80]
                elif isinstance(x, dict):
                    walk(x, f"{path}{k}.")
    try:
        answer = json.loads(body)
    except ValueError:
        return {}
    walk(answer, "")
    if isinstance(answer, dict):
        # A page of nodes, and functions cut to the pairs an answer holds.
        if answer.get("next") is not None:
            found["nodes listed"] = f"{len(answer.get('nodes') or []):,} of {answer.get('total', 0):,}"
        limit = answer.get("limit")
        if isinstance(limit, dict) and limit.get("applied", 0) < limit.get("asked", 0):
            found["functions listed"] = f"{limit['applied']:,} of {limit['asked']:,} asked"
            found.pop("truncated", None)
    return found


def time_read(fleet, path, runs):
    pid = fleet.proc.pid
    times, peaks, status, body = [], [], None, b""
    for _ in range(runs):
        reset_peak(pid)
        t = time.perf_counter()
        try:
            status, body = http(fleet.url + path, timeout=900)
        except RuntimeError as e:
            status, body = str(e).split(": ")[1] if ": " in str(e) else "error", str(e).encode()
        times.append(time.perf_counter() - t)
        peaks.append(peak_rss_mib(pid))
    return {"first": times[0], "p50": statistics.median(times[1:] or times), "status": status,
            "bytes": len(body), "peak_rss": max(peaks), "rss_after": rss_mib(pid),
            "truncated": truncation(body) if status == 200 else {}, "error": body[:300].decode(errors="replace") if status != 200 else ""}


def healthz_during(fleet, path):
    """/healthz's slowest answer while `path` is read."""
    done, worst = threading.Event(), [0.0]

    def probe():
        while not done.is_set():
            t = time.perf_counter()
            try:
                http(fleet.url + "/healthz", timeout=60)
            except (OSError, RuntimeError):
                worst[0] = float("inf")
            worst[0] = max(worst[0], time.perf_counter() - t)
            time.sleep(0.2)
    th = threading.Thread(target=probe)
    th.start()
    try:
        http(fleet.url + path, timeout=900)
    except RuntimeError:
        pass
    done.set()
    th.join()
    return worst[0]


def run(nodes, runs, history, out):
    dir = os.path.join(out, str(nodes))
    print(f"== {nodes} nodes: {history} s of history each", file=sys.stderr)
    # New node names are bounded per token and address (issue 49): the load generator is one
    # address playing the whole fleet, so the bench lifts that bound, as an operator would for
    # a fleet's first start behind one NAT.
    fleet = Fleet(dir, ["--new-node-rate", "100000000", "--new-node-burst", "1000000"])
    result = {"nodes": nodes, "history": history}
    try:
        t0 = time.time()
        batches = samples = 0
        # In waves of WAVE nodes, each wave's history backfilled as fast as the server acks it:
        # a real fleet's agents send one batch per interval, spread over it; 100,000 streams
        # opened at once on this 2-core machine would be 100,000 backfills at once, most told
        # to retry (the server serves --max-streams at once).
        for first in range(0, nodes, WAVE):
            lg = subprocess.run(
                [LOADGEN, "--server-url", fleet.url, "--first-node", str(first), "--nodes", str(min(WAVE, nodes - first)),
                 "--backfill", f"{history}s", "--interval", "60s", "--scale", "0.01", "--in-flight", "1",
                 "--connections", "100", "--progress", "60s"],
                capture_output=True, text=True)
            if lg.returncode != 0:
                raise RuntimeError(f"loadgen failed: {lg.stderr[-2000:]}")
            report = json.loads(lg.stdout)
            batches += report["batches_acked"]
            samples += report["samples_acked"]
            print(f"   {first + WAVE} nodes played, {time.time() - t0:.0f} s", file=sys.stderr)
        result.update(ingest_wall=time.time() - t0, batches=batches, samples=samples,
                      ingest_rss=peak_rss_mib(fleet.proc.pid))
        wait_merges(fleet)
        span = fleet.rows("SELECT toUInt32(min(time)) AS a, toUInt32(max(time)) AS b FROM node_totals")[0]
        start, end = int(span["a"]), int(span["b"]) + 60
        result["stored_nodes"] = int(fleet.rows("SELECT uniqExact(node) AS n FROM node_totals")[0]["n"])
        result["rss_before_reads"] = rss_mib(fleet.proc.pid)
        result["reads"] = {}
        for name, path, budget, mib in reads(nodes, start, end):
            print(f"   {name}", file=sys.stderr)
            r = time_read(fleet, path, runs)
            r.update(budget=budget, budget_mib=mib)
            result["reads"][name] = r
        heaviest = max(result["reads"], key=lambda n: result["reads"][n]["p50"])
        path = next(p for n, p, _, _ in reads(nodes, start, end) if n == heaviest)
        result["healthz_during"] = {"read": heaviest, "worst": healthz_during(fleet, path)}
    finally:
        fleet.stop()
    return result


def markdown(r):
    ms = lambda s: f"{s * 1000:,.0f} ms" if s < 10 else f"{s:,.1f} s"
    lines = [f"{r['nodes']:,} nodes ({r['stored_nodes']:,} stored), {r['history']} s of history each: "
             f"ingest {r['ingest_wall']:,.0f} s, {r['batches']:,} batches, {r['samples']:,} samples, "
             f"server peak RSS while ingesting {r['ingest_rss']:,.0f} MiB, RSS before the reads "
             f"{r['rss_before_reads']:,.0f} MiB.", "",
             "| read | p50 (first) | budget | answered | budget | left out, as stated | server peak RSS in the read | RSS after |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, a in r["reads"].items():
        ok = a["status"] == 200 and a["p50"] <= a["budget"] and a["bytes"] <= a["budget_mib"] * MIB
        left = ", ".join(f"{k} {v}" for k, v in a["truncated"].items()) or "nothing"
        if a["status"] != 200:
            left = f"answered {a['status']}: {a['error'][:120]}"
        lines.append(
            f"| {name} | {ms(a['p50'])} ({ms(a['first'])}) | {a['budget']} s | {a['bytes'] / MIB:,.2f} MiB | "
            f"{a['budget_mib']} MiB | {left} | {a['peak_rss']:,.0f} MiB | {a['rss_after']:,.0f} MiB | "
            + ("✓" if ok else "**over**") + " |")
    lines[2] = lines[2].replace("RSS after |", "RSS after | within |")
    lines[3] += " --- |"
    h = r["healthz_during"]
    lines += ["", f"`/healthz` while `{h['read']}` ran: slowest answer {ms(h['worst'])} "
              f"(budget {ms(HEALTHZ_BUDGET)}): " + ("✓" if h["worst"] <= HEALTHZ_BUDGET else "**over**") + "."]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--history", type=int, default=60)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                               "target/bench/fleet-reads"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    result = run(args.nodes, args.runs, args.history, args.out)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    md = markdown(result)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
