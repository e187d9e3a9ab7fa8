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
print(f"ClickHouse {version}: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
