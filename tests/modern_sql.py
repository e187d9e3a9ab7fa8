"""Runs the server's schema and every query, rendered for a modern ClickHouse, in chdb (ClickHouse
26.x in-process; the only modern ClickHouse installable here). The integration tests cover the
legacy dialect against Debian's clickhouse-server 18.16.

usage: python3 tests/modern_sql.py path/to/bimodal-server
Prints one line per statement and a closing `N passed, N failed` line.
"""
import subprocess
import sys
import tempfile

import chdb
from chdb import session

server = sys.argv[1]
version = chdb.query("SELECT version()", "CSV").data().strip().strip('"')
sql = subprocess.run([server, "sql", "--clickhouse-version", version], check=True, capture_output=True, text=True).stdout
statements = [s.strip() for s in sql.split(";\n") if s.strip()]

passed = failed = 0
with tempfile.TemporaryDirectory() as path:
    s = session.Session(path)
    s.query("CREATE DATABASE IF NOT EXISTS bimodal")
    s.query("USE bimodal")
    for statement in statements:
        head = " ".join(statement.split())[:100]
        try:
            s.query(statement)
            passed += 1
            print(f"ok   {head}")
        except Exception as e:  # chdb raises its own error types
            failed += 1
            print(f"FAIL {head}\n     {str(e).splitlines()[0] if str(e) else e!r}")
    # The modern features must really be in the schema, not silently dropped.
    create = s.query("SHOW CREATE TABLE bimodal.samples", "TSVRaw").data()
    for feature in ("LowCardinality(String)", "CODEC(", "TTL "):
        ok = feature in create
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} samples uses {feature}")
    # A node counter that counted zero stays a zero (issue 48, design 035): here, where
    # SummingMergeTree drops a row whose summed columns are all zero as it inserts and merges,
    # the older tables lose it and the ones compare reads keep it.
    for value in (0, 0):
        s.query(
            "INSERT INTO counters_input (batch_id, time, node, name, value) VALUES "
            f"('aaaaaaaaaaaaaaaa', toDateTime(1795000000), 'zero-node', 'pgmajfault', {value}), "
            "('bbbbbbbbbbbbbbbb', toDateTime(1795000000), 'some-node', 'pgmajfault', 7)"
        )
    for table in ("counters", "counters_1m", "counters_10m", "counter_reports", "counter_reports_1m", "counter_reports_10m"):
        s.query(f"OPTIMIZE TABLE {table} FINAL")
        rows = s.query(f"SELECT node, sum(value) FROM {table} GROUP BY node ORDER BY node", "CSV").data().split()
        keeps = '"zero-node",0' in rows and '"some-node",14' in rows
        want = table.startswith("counter_reports")
        ok = keeps == want
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {table} {'keeps' if keeps else 'loses'} a counter of zero: {rows}")
print(f"ClickHouse {version}: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
