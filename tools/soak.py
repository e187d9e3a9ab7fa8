#!/usr/bin/env python3
"""Soak: simulated agents stream to a bimodal-server in real time while the server is killed
(SIGKILL) and restarted, and then its ClickHouse is killed (SIGKILL) and restarted by its
supervisor; afterwards what ClickHouse holds is compared with what the agents were told.

bimodal-loadgen plays the agents (SOAK_NODES, 1,000, for SOAK_MINUTES, 10), each sending one batch
every SOAK_INTERVAL (30 s) at SOAK_SCALE (0.1) of the sample rate of the recorded 2-CPU node the
batches come from. A soak is about restarts, not saturation, and this 2-core machine (server,
ClickHouse and loadgen on it) stores about 60 batches/s: 1,000 agents at the agent's default 10 s
would need 100/s and only grow a backlog (tools/bench_storage.py measures that ceiling). Like
real agents they they keep each batch until it is acknowledged, resend after a broken stream
and honour "retry". The server under test reads and writes a ClickHouse that a second, managed
bimodal-server keeps running (its supervisor restarts ClickHouse when it dies), so that the
server under test can be killed alone.

Reported, with the goal beside each:
- lost: batches the agents were told are stored that ClickHouse does not hold (goal 0);
- duplicated: samples ClickHouse holds beyond those of the acknowledged batches (goal 0);
- unacked and rejected batches at the end (goal 0);
- the peak memory (VmHWM) of each incarnation of the server under test, and of ClickHouse.

Usage: tools/soak.py [--nodes N] [--minutes M] [--interval D] [--scale S] [--out DIR]; exit status 1 when a goal is missed.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_storage import LOADGEN, ROOT, SERVER, Fleet, free_port, http, peak_rss_mib, pid_of  # noqa: E402


class Target:
    """The bimodal-server under test, on a fixed port so that agents find it after a restart."""

    def __init__(self, dir, clickhouse):
        self.dir, self.clickhouse = dir, clickhouse
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.peaks = []
        self.proc = None
        self.start()

    def start(self):
        log = open(os.path.join(self.dir, f"target-{len(self.peaks)}.log"), "w")
        self.proc = subprocess.Popen(
            [SERVER, "--listen", f"127.0.0.1:{self.port}", "--clickhouse-url", self.clickhouse,
             "--data-dir", os.path.join(self.dir, "target")],
            stdout=log, stderr=log)
        self.peaks.append(0.0)
        deadline = time.time() + 120
        while True:
            try:
                if http(self.url + "/healthz", timeout=5)[0] == 200:
                    return
            except (OSError, RuntimeError):
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the server under test did not start: see {log.name}")
            time.sleep(0.2)

    def sample_peak(self):
        try:
            self.peaks[-1] = max(self.peaks[-1], peak_rss_mib(self.proc.pid))
        except OSError:
            pass

    def kill(self):
        self.sample_peak()
        self.proc.kill()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=int(os.environ.get("SOAK_NODES", 1000)))
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 10)))
    ap.add_argument("--interval", default=os.environ.get("SOAK_INTERVAL", "30s"))
    ap.add_argument("--scale", type=float, default=float(os.environ.get("SOAK_SCALE", 0.1)))
    ap.add_argument("--out", default=os.path.join(ROOT, "target/soak"))
    args = ap.parse_args()
    for binary in (SERVER, LOADGEN):
        if not os.access(binary, os.X_OK):
            sys.exit(f"soak: {binary} is missing: make release")
    span = args.minutes * 60

    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    holder = Fleet(os.path.join(args.out, "holder"))  # owns ClickHouse; never killed
    clickhouse_url = holder.ch.split("/?")[0]
    target = Target(args.out, clickhouse_url)
    loadgen = subprocess.Popen(
        [LOADGEN, "--server-url", target.url, "--nodes", str(args.nodes), "--duration", f"{int(span)}s",
         "--interval", args.interval, "--scale", str(args.scale), "--progress", "30s", "--drain-timeout", "300s"],
        stdout=subprocess.PIPE, stderr=open(os.path.join(args.out, "loadgen.log"), "w"), text=True)
    report = {}
    reader = threading.Thread(target=lambda: report.update(json.loads(loadgen.stdout.read() or "{}")))
    reader.start()

    events = []
    clickhouse_peak = 0.0
    killed_server = killed_clickhouse = False
    start = time.time()
    while loadgen.poll() is None:
        elapsed = time.time() - start
        target.sample_peak()
        try:
            clickhouse_peak = max(clickhouse_peak, peak_rss_mib(pid_of(os.path.abspath(holder.dir))))
        except (OSError, RuntimeError):
            pass
        if not killed_server and elapsed > span / 3:
            target.kill()
            events.append(f"{elapsed:.0f} s: bimodal-server killed (SIGKILL)")
            time.sleep(2)
            target.start()
            events.append(f"{time.time() - start:.0f} s: bimodal-server healthy again")
            killed_server = True
        if not killed_clickhouse and elapsed > 2 * span / 3:
            os.kill(pid_of(os.path.abspath(holder.dir)), signal.SIGKILL)
            events.append(f"{elapsed:.0f} s: ClickHouse killed (SIGKILL)")
            killed_clickhouse = True
        time.sleep(1)
    reader.join()
    target.sample_peak()
    time.sleep(3)  # the last flush

    # The holder's ClickHouse is new (its directory is made afresh): everything it holds is this
    # soak's. (Rows are kept per minute: a time filter would cut the first minute's.)
    stored_samples = int(holder.rows("SELECT sum(count) AS n FROM bimodal.samples WHERE node LIKE 'loadgen-%'")[0]["n"])
    stored_batches = int(holder.rows(
        "SELECT uniqExact(batch_id) AS n FROM bimodal.ledger WHERE state = 2 AND node LIKE 'loadgen-%'")[0]["n"])
    acked_batches, acked_samples = report.get("batches_acked", 0), report.get("samples_acked", 0)
    result = {
        "nodes": args.nodes,
        "minutes": args.minutes,
        "interval": args.interval,
        "scale": args.scale,
        "events": events,
        "batches_planned": report.get("batches_planned"),
        "batches_acked": acked_batches,
        "batches_stored": stored_batches,
        "batches_unacked": report.get("batches_unacked"),
        "batches_rejected": report.get("batches_rejected"),
        "batches_resent": report.get("batches_resent"),
        "stream_failures": report.get("stream_failures"),
        "samples_acked": acked_samples,
        "samples_stored": stored_samples,
        "lost_batches": max(0, acked_batches - stored_batches),
        "duplicated_samples": max(0, stored_samples - acked_samples),
        "missing_samples": max(0, acked_samples - stored_samples),
        "server_peak_rss_mib": [round(p, 1) for p in target.peaks],
        "clickhouse_peak_rss_mib": round(clickhouse_peak, 1),
        "loadgen_peak_rss_mib": round(report.get("peak_rss_bytes", 0) / 2**20, 1),
    }
    target.kill()
    holder.stop()
    print(json.dumps(result, indent=2))
    print(f"""
| soak: {args.nodes} agents (a batch every {args.interval}, {args.scale:g}x samples), {args.minutes:g} min, server and ClickHouse killed | measured | goal |
| --- | --- | --- |
| batches acknowledged / stored in ClickHouse | {acked_batches} / {stored_batches} | equal |
| lost (acknowledged, not stored) | {result['lost_batches']} batches, {result['missing_samples']} samples | 0 |
| duplicated (stored beyond the acknowledged) | {result['duplicated_samples']} samples | 0 |
| unacknowledged / rejected at the end | {result['batches_unacked']} / {result['batches_rejected']} | 0 / 0 |
| resent batches, broken streams | {result['batches_resent']}, {result['stream_failures']} | |
| server peak RSS per incarnation | {', '.join(f'{p:.0f} MiB' for p in target.peaks)} | |
| ClickHouse peak RSS | {clickhouse_peak:.0f} MiB | |""")
    ok = (result["lost_batches"] == 0 and result["duplicated_samples"] == 0 and result["missing_samples"] == 0
          and not result["batches_unacked"] and not result["batches_rejected"] and acked_batches > 0)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
