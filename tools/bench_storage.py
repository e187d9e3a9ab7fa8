#!/usr/bin/env python3
"""Storage and ingest of simulated fleets (`make bench`, tools/bench-storage.sh).

For each fleet size: a fresh release bimodal-server with its managed ClickHouse (Debian's 18.16),
bimodal-loadgen playing that many agents over real gRPC for a window of history (batches drawn
from real records, testdata/loadgen), then:

- ingest: acked samples/s and rows/s, the CPU seconds of bimodal-server and of ClickHouse, and
  so samples per server-core-second and per ClickHouse-core-second; ack latency;
- bytes on disk per stored sample, all tables, after merges (OPTIMIZE FINAL: the steady state);
- queries: the ingested window is copied forward in ClickHouse to span the query window (an hour;
  10 minutes for the largest fleet), the 10-minute tables rebuilt from the minute tables, and the
  API's flame graph, per-node totals and per-node functions over every node are timed over HTTP.

The same minute tables are then loaded into chdb (ClickHouse 26.x in-process) with the modern
schema, copied forward the same way, and the same SQL timed there, with its bytes on disk.

With `--history SECONDS` long enough to hold the query window and two minutes (3720 for an
hour), nothing is copied: the reads cover the span from the first minute every node reported
whole, a range that, like a user's "last hour", is rarely aligned to the 10-minute tables.

usage: tools/bench_storage.py [--nodes 100,1000,10000] [--runs 10] [--history S] [--out target/bench/storage]
Writes results.md in --out and prints it.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Other builds (an A/B against an older commit) through the environment.
SERVER = os.environ.get("BIMODAL_SERVER", os.path.join(ROOT, "target/release/bimodal-server"))
LOADGEN = os.environ.get("BIMODAL_LOADGEN", os.path.join(ROOT, "target/release/bimodal-loadgen"))
HZ = os.sysconf("SC_CLK_TCK")

# Fleet size -> (seconds of history ingested for real, seconds the query window spans).
PLANS = {100: (300, 3600), 1000: (60, 3600), 10000: (10, 3600)}
# Tables exported to chdb: the per-minute fact tables of the ingested window, and the dimensions.
MINUTE_TABLES = ["samples", "function_samples", "node_totals", "node_totals_by_hour", "fleet_samples",
                 "fleet_function_samples", "data_samples"]
DIMENSIONS = ["stacks", "frames", "functions", "processes", "nodes", "event_sources", "rollups"]
# The 10-minute tables the query window reads, each filled from its per-minute table.
COARSE = {"samples_10m": "samples", "function_samples_10m": "function_samples",
          "function_nodes_10m": "function_samples", "function_nodes_by_id_10m": "function_samples",
          "data_objects_10m": "data_samples",
          "fleet_samples_10m": "fleet_samples", "fleet_function_samples_10m": "fleet_function_samples"}
# Columns a 10-minute table derives from its minute table's (function_nodes_by_id_10m keys the
# series and the node by their hash).
DERIVED = {"series": "cityHash64(event, source)", "node_id": "cityHash64(node)"}
# Columns holding counts or values (scaled when a bucket holds several copies of the window).
VALUES = {"count", "value", "self_count", "self_value", "total_count", "total_value"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def status_mib(pid, field):
    """A size field of /proc/PID/status (VmHWM, VmRSS) in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mib(pid):
    return status_mib(pid, "VmHWM")


def pid_of(needle):
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd and "clickhouse" in cmd:
            return int(entry)
    raise RuntimeError(f"no clickhouse-server for {needle}")


def http(url, data=None, timeout=600):
    req = urllib.request.Request(url, data=data.encode() if isinstance(data, str) else data)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: {e.code}: {e.read()[:500]!r} (for {str(data)[:300]})") from None


class Fleet:
    """A bimodal-server and its managed ClickHouse under `dir`."""

    def __init__(self, dir, extra=(), keep=False, log="server.log"):
        """A new store in `dir`, or with `keep` the store a bench left there (logging to `log`)."""
        if not keep:
            shutil.rmtree(dir, ignore_errors=True)
            os.makedirs(dir)
        self.dir = dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(dir, log), "w")
        self.proc = subprocess.Popen(
            # Unthrottled: the bench measures what the server stores, not the per-node rate limit.
            [SERVER, "--listen", f"127.0.0.1:{self.port}", "--data-dir", dir,
             "--node-batch-rate", "1000000", "--node-batch-burst", "1000000",
             # One load generator plays every node from one address.
             "--max-streams-per-address", "20000", *extra],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 120
        while True:
            try:
                if http(self.url + "/healthz", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the server did not start: see {self.log.name}")
            time.sleep(0.5)
        self.clickhouse = pid_of(os.path.abspath(dir))
        with open(os.path.join(dir, "clickhouse/config.xml")) as f:
            config = f.read()
        http_port = config.split("<http_port>")[1].split("<")[0]
        self.ch = f"http://127.0.0.1:{http_port}/?database=bimodal"

    def sql(self, query, fmt=None):
        _, body = http(self.ch, query + (f" FORMAT {fmt}" if fmt else ""), timeout=3600)
        return body

    def rows(self, query):
        return [json.loads(l) for l in self.sql(query, "JSONEachRow").decode().splitlines() if l]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def wait_merges(fleet):
    while int(fleet.rows("SELECT count() AS n FROM system.merges")[0]["n"]) > 0:
        time.sleep(1)


def disk(fleet):
    return fleet.rows(
        "SELECT table, sum(rows) AS r, sum(bytes_on_disk) AS b FROM system.parts "
        "WHERE database = 'bimodal' AND active GROUP BY table ORDER BY b DESC")


def optimize(fleet):
    tables = [r["name"] for r in fleet.rows(
        "SELECT name FROM system.tables WHERE database = 'bimodal' AND engine LIKE '%MergeTree'")]
    for t in tables:
        fleet.sql(f"OPTIMIZE TABLE {t} FINAL")


def aligned(start):
    """The query window starts at the first 10-minute boundary of the ingested history."""
    return (start + 599) // 600 * 600


def copy_forward(sql, window, span, start):
    """Statements filling the query window from the ingested one, as if the fleet had kept
    running: per-minute node totals and node counters copied forward minute by minute, and each 10-minute bucket
    of the 10-minute tables holding the window's rows with their values scaled to 10 minutes
    (what their views would have written had the window repeated). The per-minute stack and
    function tables are not copied: 10-minute-aligned reads of an hour do not touch them."""
    # Enough copies to reach the query window's end: it starts at the first 10-minute boundary
    # after `start`, up to 540 s later (before, the last minutes of the window had no node totals
    # and counters while the 10-minute tables were full).
    copies = (aligned(start) + span - start) // window + 2
    # The ingested history's rows: its `window` seconds lie in up to one minute more of the
    # per-minute tables (a 60 s history from 12:00:30 has rows at 12:00 and 12:01, and a node's
    # first batch may fall in either). Copies `window` apart then give every minute a whole
    # window of every node. Before, the rows of the first `window` seconds only were copied: in a
    # 1,000-node run 594 nodes had none there, and compare saw 406.
    end = start + window + 60
    out = []
    # Node counters too: compare divides them, and CPU time, by the seconds each node reported
    # (the `reported_ms` counter); without copies only the ingested window would have them.
    for table in ("node_totals", "counters"):
        cols = [c for c in columns(sql, table) if c != "time"]
        out.append(
            f"INSERT INTO {table} (time, {', '.join(cols)}) "
            f"SELECT toDateTime(toUInt32(time) + k * {window}), {', '.join(cols)} FROM {table} "
            f"ARRAY JOIN arrayMap(x -> x + 1, range({copies - 1})) AS k "
            f"WHERE time < toDateTime({end})")
    # The ledger of a fleet that has run for a day before the window's end (the server keeps
    # two): compare reads which sources each node sampled with, and a read that cannot skip the
    # ledger's other hours shows only when it holds them (design 024). Copies of the ingested
    # batches with new ids, `window` apart, capped at 20 M rows (the 10,000-node fleet holds
    # fewer hours); the views on the ledger fill `node_sources` from them.
    ledger_rows = int(sql("SELECT count() AS n FROM ledger")[0]["n"])
    day = min(86400 // window, 20_000_000 // max(ledger_rows, 1))
    shift = aligned(start) + span - day * window - start
    cols = [c for c in columns(sql, "ledger") if c not in ("batch_id", "start_time", "end_time")]
    out.append("CREATE TABLE ledger_seed ENGINE = Memory AS SELECT * FROM ledger")
    for first in range(0, day, 60):
        out.append(
            f"INSERT INTO ledger (batch_id, start_time, end_time, {', '.join(cols)}) "
            "SELECT CAST(concat(reinterpretAsString(cityHash64(batch_id, k)), "
            "reinterpretAsString(cityHash64(k, batch_id))) AS FixedString(16)), "
            f"toDateTime(toUInt32(start_time) + {shift} + k * {window}), "
            f"toDateTime(toUInt32(end_time) + {shift} + k * {window}), {', '.join(cols)} FROM ledger_seed "
            f"ARRAY JOIN arrayMap(x -> x + {first}, range({min(60, day - first)})) AS k")
    out.append("DROP TABLE ledger_seed")
    # The nodes report through the window too (compare lists the nodes seen in its range). The
    # copied rows' version is above any the server writes later: its idle refresh rewrites a
    # node's row up to a minute after the node's last batch, with the ingested last_seen; with
    # version + 1 the refresh won at the next merge, and when the window began after that
    # last_seen the node left it (compare with bands saw 8 of 100 nodes in one run, and no
    # bands in another).
    out.append(
        "INSERT INTO nodes (node, first_seen, last_seen, label_keys, label_values, agent_version, facts, version) "
        f"SELECT node, first_seen, toDateTime({aligned(start) + span - 1}), label_keys, label_values, "
        "agent_version, facts, version + 1000000000000 FROM nodes")
    # The totals keyed by hour hold the same rows as `node_totals` (their views both read the
    # samples' INSERTs).
    if columns(sql, "node_totals_by_hour"):
        out.append("TRUNCATE TABLE node_totals_by_hour")
        out.append("INSERT INTO node_totals_by_hour SELECT * FROM node_totals")
    # The counter rollups as their views would have written them from the copies.
    for rollup, bucket in (("counters_1m", 60), ("counters_10m", 600)):
        if not columns(sql, rollup):
            continue  # an older schema (an A/B against an older build)
        out.append(f"TRUNCATE TABLE {rollup}")
        out.append(
            f"INSERT INTO {rollup} (time, node, name, value) "
            f"SELECT toDateTime(intDiv(toUInt32(time), {bucket}) * {bucket}) AS t, node, name, sum(value) "
            "FROM counters GROUP BY t, node, name")
    scale = max(1, 600 // window)
    for coarse, minute in COARSE.items():
        if not columns(sql, coarse):
            continue  # an older schema (an A/B against an older build)
        # The minute table's columns that the 10-minute one keeps (data_objects_10m drops the
        # process and stack of data_samples).
        kept = set(columns(sql, coarse))
        cols = [c for c in columns(sql, minute) if c != "time" and c in kept]
        picked = [f"{c} * {scale}" if c in VALUES else c for c in cols]
        derived = [c for c in DERIVED if c in kept]
        cols += derived
        picked += [DERIVED[c] for c in derived]
        out.append(f"TRUNCATE TABLE {coarse}")
        for bucket in range(aligned(start), aligned(start) + span, 600):
            out.append(
                f"INSERT INTO {coarse} (time, {', '.join(cols)}) "
                f"SELECT toDateTime({bucket}), {', '.join(picked)} FROM {minute} "
                f"WHERE time < toDateTime({end})")
    return out


def columns(sql, table):
    return [r["name"] for r in sql(
        f"SELECT name FROM system.columns WHERE database = currentDatabase() AND table = '{table}'")]


def rejected_batches(fleet):
    """The server's refusals during ingest by reason (its /metrics): `slow` counts streams cut
    off because a Hello or an admitted batch stopped arriving in time."""
    _, body = http(fleet.url + "/metrics", timeout=60)
    counts = {}
    for line in body.decode().splitlines():
        if line.startswith("bimodal_ingest_rejected_batches_total{"):
            labels, value = line.rsplit(" ", 1)
            reason = labels.split('reason="', 1)[1].split('"', 1)[0]
            counts[reason] = counts.get(reason, 0) + float(value)
    return counts


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def time_api(fleet, path, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        status, body = http(fleet.url + path)
        times.append(time.perf_counter() - t)
        assert status == 200, body[:300]
    return times, body


def run_fleet(nodes, runs, out, history=None):
    window, span = PLANS[nodes]
    window = history or window
    # A history that holds the query window is read as ingested; a shorter one is copied forward,
    # which fills each 10-minute bucket with whole copies of it.
    real = window >= span + 120
    if not real and (window > 600 or 600 % window):
        raise SystemExit(f"--history {window}: copied forward a history must divide 600 s; "
                         f"to read it as ingested it must hold {span + 120} s")
    dir = os.path.join(out, str(nodes))
    print(f"== {nodes} nodes: ingest {window} s of history, query {span} s", file=sys.stderr)
    fleet = Fleet(dir)
    result = {"nodes": nodes, "window": window, "span": span}
    try:
        s0, c0 = cpu_seconds(fleet.proc.pid), cpu_seconds(fleet.clickhouse)
        t0 = time.time()
        lg = subprocess.run(
            [LOADGEN, "--server-url", fleet.url, "--nodes", str(nodes), "--backfill", f"{window}s",
             "--in-flight", "4", "--connections", str(min(nodes, 200)), "--progress", "30s"],
            capture_output=True, text=True)
        if lg.returncode != 0:
            raise RuntimeError(f"loadgen failed: {lg.stderr[-2000:]}")
        wall = time.time() - t0
        s1, c1 = cpu_seconds(fleet.proc.pid), cpu_seconds(fleet.clickhouse)
        wait_merges(fleet)
        c2 = cpu_seconds(fleet.clickhouse)
        report = json.loads(lg.stdout)
        result.update(
            samples=report["samples_acked"], rows=report["sample_rows_acked"],
            batches=report["batches_acked"], wall=wall,
            server_cpu=s1 - s0, clickhouse_cpu=c1 - c0, clickhouse_cpu_merges=c2 - c0,
            ack_p50=report["ack_latency_p50_ms"], ack_p95=report["ack_latency_p95_ms"],
            server_rss=peak_rss_mib(fleet.proc.pid), loadgen_rss=report["peak_rss_bytes"] / 2**20,
            retried=report["batches_retried"], rejected=rejected_batches(fleet))
        optimize(fleet)
        tables = disk(fleet)
        result["bytes"] = sum(int(t["b"]) for t in tables)
        result["tables"] = tables
        start = int(fleet.rows("SELECT toUInt32(min(time)) AS t FROM samples")[0]["t"])
        export = nodes == 1000 and not real
        if export:
            for table in MINUTE_TABLES + DIMENSIONS:
                with open(os.path.join(dir, f"{table}.native"), "wb") as f:
                    f.write(fleet.sql(f"SELECT * FROM {table} WHERE 1", "Native"))
        result["start"] = start
        if real:
            # Each node's first minute is partial (its first batch falls anywhere in it, and the
            # nodes start up to an interval apart): the window starts after the last of them.
            start = 60 + int(fleet.rows(
                "SELECT max(t) AS t FROM (SELECT node, toUInt32(min(time)) AS t FROM node_totals GROUP BY node)")[0]["t"])
        else:
            for statement in copy_forward(fleet.rows, window, span, start):
                fleet.sql(statement)
            optimize(fleet)
            wait_merges(fleet)
            start = aligned(start)
        result["real"] = real
        result["scope"] = {"from": start, "to": start + span}
        result["api"] = {}
        result["sql"] = {}
        for name, path, selector, reach, listed in queries(nodes, start, span):
            times, body = time_api(fleet, path, runs)
            result["api"][name] = {"first": times[0], "p50": statistics.median(times[1:] or times),
                                   "p95": percentile(times[1:] or times, 95), "bytes": len(body)}
            if name.split(",")[0] in READ_OF:
                result["sql"][name] = reads(selector, reach, listed, start, span)[READ_OF[name.split(",")[0]]]
        # Bands: a tenth of the nodes (names ending in 0) fault four times as often in every
        # function (their page-fault rows doubled, twice); compare then also explains them.
        # The per-minute function table too: a range not aligned to 10 minutes reads its edges there.
        for table in ("node_totals", "node_totals_by_hour", "function_samples", "function_samples_10m",
                      "function_nodes_10m", "function_nodes_by_id_10m"):
            cols = ", ".join(c for c in columns(fleet.rows, table))
            if not cols:
                continue
            page_faults = ("series IN (SELECT cityHash64(event, source) FROM event_sources WHERE event = 'page_fault')"
                           if "series" in cols else "event = 'page_fault'")
            for _ in range(2):
                fleet.sql(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {table} "
                          f"WHERE {page_faults} AND node LIKE '%0'")
        optimize(fleet)
        path = "/api/v1/compare?" + urllib.parse.urlencode(
            {"from": str(start), "to": str(start + span), "selector": '{node=~"loadgen-.*"}'})
        times, body = time_api(fleet, path, runs)
        answer = json.loads(body)
        result["api"]["compare, a tenth 4x the page faults"] = {
            "first": times[0], "p50": statistics.median(times[1:] or times),
            "p95": percentile(times[1:] or times, 95), "bytes": len(body),
            "verdict": answer.get("verdict"),
            "slow": len((answer.get("bands") or {}).get("high") or []),
            "code": len((answer.get("explanation") or {}).get("code") or []),
            # What each metric's test said (why there are no bands, when there are none).
            "metrics": {m.get("name"): (m.get("bands") or {}).get("reason") or "two bands"
                        for m in answer.get("metrics") or []}}
    finally:
        fleet.stop()
    # A history read as ingested took an hour to make: its store is kept to be read again
    # (`bimodal-server --data-dir DIR`).
    if not export and not real:
        shutil.rmtree(os.path.join(dir, "clickhouse"), ignore_errors=True)
    return result


# Which of `bimodal-server sql`'s reads (flame graph, totals, functions) each query is.
READ_OF = {"flame graph": 0, "per-node totals": 1, "per-node functions": 2}


def queries(nodes, start, span):
    """(name, API path, selector, reach the server picks) of the reads timed: every node (the
    fleet rollups), a tenth of the nodes (per-node rows) and nine tenths (the rollups minus a
    tenth), as the two bands of a comparison would read them."""
    out = []
    scope = lambda selector, **kw: urllib.parse.urlencode(
        {"from": str(start), "to": str(start + span), "selector": selector, **kw})
    every, tenth, rest = '{node=~"loadgen-.*"}', '{node=~".*0"}', '{node!~".*0"}'
    # The nodes `bimodal-server sql` is given for the per-node reads, as the server finds them.
    names = [f"loadgen-{i:05}" for i in range(nodes)]
    tenth_names = ",".join(n for n in names if n.endswith("0"))
    out.append(("flame graph", f"/api/v1/flamegraph?{scope(every, event='cpu', source='cpu-clock')}", every, "fleet", ""))
    out.append(("flame graph, a tenth of the nodes",
                f"/api/v1/flamegraph?{scope(tenth, event='cpu', source='cpu-clock')}", tenth, "matching", tenth_names))
    out.append(("flame graph, nine tenths of the nodes",
                f"/api/v1/flamegraph?{scope(rest, event='cpu', source='cpu-clock')}", rest, "fleet-minus", tenth_names))
    out.append(("per-node totals", f"/api/v1/totals?{scope(every, event='cpu')}", every, "fleet", ""))
    out.append(("per-node functions", f"/api/v1/functions?{scope(every, event='cpu', source='cpu-clock', limit='200')}",
                every, "fleet", ""))
    # Bands over every metric and, when found, the explanation (issue 16: p95 under 1 s at 1,000).
    out.append(("compare", f"/api/v1/compare?{scope(every)}", every, "fleet", ""))
    return out


def reads(selector, reach, listed, start, span):
    """The SQL of `bimodal-server sql` for one scope, modern dialect."""
    text = subprocess.run(
        [SERVER, "sql", "--clickhouse-version", "26.9", "--event", "cpu", "--source", "cpu-clock",
         "--selector", selector, "--from", str(start), "--to", str(start + span), "--reach", reach, "--nodes", listed],
        capture_output=True, text=True, check=True).stdout
    return [x.strip() for x in text.split(";\n") if x.strip()]


def run_chdb(result, runs, out):
    """The 1000-node minute tables in chdb's modern schema: bytes and query times."""
    import chdb
    from chdb import session
    dir = os.path.join(out, str(result["nodes"]))
    schema = subprocess.run([SERVER, "sql", "--clickhouse-version", "26.9"], capture_output=True,
                            text=True, check=True).stdout
    path = os.path.join(out, "chdb")
    shutil.rmtree(path, ignore_errors=True)
    s = session.Session(path)
    s.query("CREATE DATABASE IF NOT EXISTS bimodal")
    s.query("USE bimodal")
    for statement in [x.strip() for x in schema.split(";\n") if x.strip()]:
        if statement.startswith(("CREATE", "ALTER")):
            s.query(statement)
    for table in MINUTE_TABLES + DIMENSIONS:
        s.query(f"INSERT INTO {table} SELECT * FROM file('{os.path.join(dir, table + '.native')}', Native)")
    rows = lambda q: [json.loads(l) for l in s.query(q, "JSONEachRow").data().splitlines() if l]
    merge = lambda: [s.query(f"OPTIMIZE TABLE {r['name']} FINAL") for r in rows(
        "SELECT name FROM system.tables WHERE database = 'bimodal' AND engine LIKE '%MergeTree'")]
    # The window as the views would have stored it: its 10-minute rows from its minute rows.
    for coarse, minute in COARSE.items():
        kept = set(columns(rows, coarse))
        if not kept:
            continue  # an older schema (an A/B against an older build)
        cols = [c for c in columns(rows, minute) if c != "time" and c in kept]
        derived = [c for c in DERIVED if c in kept]
        s.query(f"INSERT INTO {coarse} (time, {', '.join(cols + derived)}) "
                "SELECT toDateTime(intDiv(toUInt32(time), 600) * 600), "
                f"{', '.join(cols + [DERIVED[c] for c in derived])} FROM {minute}")
    merge()
    size = rows("SELECT sum(bytes_on_disk) AS b FROM system.parts WHERE database = 'bimodal' AND active")
    for statement in copy_forward(rows, result["window"], result["span"], result["start"]):
        s.query(statement)
    merge()
    timings = {}
    for name, statement in result["sql"].items():
        times = []
        for _ in range(runs + 1):
            t = time.perf_counter()
            s.query(statement, "Null")
            times.append(time.perf_counter() - t)
        timings[name] = {"p50": statistics.median(times[1:]), "p95": percentile(times[1:], 95)}
    return {"bytes": int(size[0]["b"]), "queries": timings}


def markdown(results, chdb_result):
    ms = lambda s: f"{s * 1000:.0f} ms"
    lines = ["| fleet | history ingested | samples (rows) | acked samples/s (rows/s) | server CPU | samples per server core·s | ClickHouse CPU (with merges) | samples per ClickHouse core·s | ack p50 / p95 | server peak RSS |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(
            f"| {r['nodes']:,} nodes | {r['window']} s × {r['nodes']:,} | {r['samples']:,} ({r['rows']:,}) | "
            f"{r['samples'] / r['wall']:,.0f} ({r['rows'] / r['wall']:,.0f}) | {r['server_cpu']:.1f} s | "
            f"**{r['samples'] / r['server_cpu']:,.0f}** | {r['clickhouse_cpu']:.1f} s ({r['clickhouse_cpu_merges']:.1f} s) | "
            f"{r['samples'] / r['clickhouse_cpu_merges']:,.0f} | {r['ack_p50'] / 1000:.1f} / {r['ack_p95'] / 1000:.1f} s | {r['server_rss']:.0f} MiB |")
    lines += ["", "| fleet | batches retried (loadgen) | refused by the server, by reason |", "| --- | --- | --- |"]
    for r in results:
        refused = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(r.get("rejected", {}).items())) or "none"
        lines.append(f"| {r['nodes']:,} nodes | {r['retried']:,} | {refused} |")
    lines += ["", "| fleet | bytes on disk, all tables | per sample | per wire sample row | largest tables |",
              "| --- | --- | --- | --- | --- |"]
    for r in results:
        top = ", ".join(f"{t['table']} {int(t['b']) / 2**20:.1f} MiB" for t in r["tables"][:4])
        lines.append(f"| {r['nodes']:,} nodes | {r['bytes'] / 2**20:.1f} MiB | **{r['bytes'] / r['samples']:.2f} B** | "
                     f"{r['bytes'] / r['rows']:.2f} B | {top} |")
    names = list(results[0]["api"])
    lines += ["", "| read (p50 / **p95**, first) | " + " | ".join(
        f"{r['nodes']:,} nodes × {r['span'] // 60} min" for r in results) + " |",
        "| --- |" + " --- |" * len(results)]
    for name in names:
        cells = []
        for r in results:
            a = r["api"][name]
            cells.append(f"{ms(a['p50'])} / **{ms(a['p95'])}**, {ms(a['first'])} ({a['bytes'] / 2**20:.1f} MiB)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if chdb_result:
        r1000 = next(r for r in results if r["nodes"] == 1000)
        lines += ["", "Modern dialect (chdb, ClickHouse 26.x in-process), the same 1,000-node rows, the SQL the API sends "
                  "(without the HTTP answer and naming):", "",
                  f"bytes on disk, all tables: {chdb_result['bytes'] / 2**20:.1f} MiB, "
                  f"**{chdb_result['bytes'] / r1000['samples']:.2f} B per sample** "
                  f"(18.16: {r1000['bytes'] / r1000['samples']:.2f} B)", "",
                  "| read | chdb p50 / p95 |", "| --- | --- |"]
        for name, q in chdb_result["queries"].items():
            lines.append(f"| {name} | {ms(q['p50'])} / {ms(q['p95'])} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="100,1000,10000")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--out", default=os.path.join(ROOT, "target/bench/storage"))
    p.add_argument("--history", type=int, help="seconds of history every fleet ingests (default: its plan)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    for n in args.nodes.split(","):
        results.append(run_fleet(int(n), args.runs, args.out, args.history))
        # Written after each fleet: a later, larger fleet failing keeps the earlier figures.
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
    chdb_result = None
    if any(r["nodes"] == 1000 and not r["real"] for r in results):
        chdb_result = run_chdb(next(r for r in results if r["nodes"] == 1000), args.runs, args.out)
    md = markdown(results, chdb_result)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
