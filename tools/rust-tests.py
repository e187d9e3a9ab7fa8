#!/usr/bin/env python3
"""Runs the workspace's Rust tests from one build, each test binary as `cargo test` would (from
its package's directory), with as many tests at once as suits it, and every binary even when
one fails (`--no-fail-fast`).

  tools/rust-tests.py [--build-only]

Why not `cargo test` twice with other options: selecting packages (`-p`, `--exclude`) changes
which features of the dependencies cargo unifies, and rebuilt half of them (2026-12-06). One
`cargo test --workspace --no-run` builds everything once; this script then runs what it built.

The build's profile is $BIMODAL_PROFILE (default `dev`; `make test` gives `ci`, the profile its
images and guests use too, so the workspace is built once).

The server's integration tests mostly wait (for ClickHouse, agents, deadlines): four at a time.
Every other binary keeps libtest's default (one per CPU): the agent's tests sample real
workloads and share the machine's CPUs with them.
"""
import json
import os
import subprocess
import sys
import time

PROFILE = os.environ.get("BIMODAL_PROFILE", "dev")

# (package folder, test target) -> --test-threads
THREADS = {("server", "integration"): 4}


def build():
    """Builds every test target; returns (package folder, target, kind, executable, package dir)."""
    cmd = ["cargo", "test", "--workspace", "--no-run", f"--profile={PROFILE}", "--message-format=json-render-diagnostics"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    found = []
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable") or not msg["profile"]["test"]:
            continue
        directory = os.path.dirname(msg["manifest_path"])
        target = msg["target"]
        found.append((os.path.basename(directory), target["name"], target["kind"][0], msg["executable"], directory))
    return sorted(set(found))


def main(argv):
    binaries = build()
    if "--build-only" in argv:
        return 0
    failed = []
    for package, target, kind, executable, directory in binaries:
        args = [executable]
        threads = THREADS.get((package, target))
        if threads:
            args += ["--test-threads", str(threads)]
        print(f"rust-tests: {package} {kind} {target}" + (f" ({threads} at a time)" if threads else ""), flush=True)
        started = time.monotonic()
        rc = subprocess.run(args, cwd=directory).returncode
        print(f"rust-tests: {package} {kind} {target}: exit {rc} in {time.monotonic() - started:.0f} s", flush=True)
        if rc != 0:
            failed.append(f"{package} {kind} {target}")
    # Documentation examples are compiled and run by rustdoc, not by the binaries above.
    rc = subprocess.run(["cargo", "test", "--workspace", "--doc", f"--profile={PROFILE}"]).returncode
    if rc != 0:
        failed.append("doc tests")
    for f in failed:
        print(f"rust-tests: FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
