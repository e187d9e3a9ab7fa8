#!/usr/bin/env python3
"""Merges `bimodal-agent record --format folded` files of one event into a bimodal-loadgen profile.

The loadgen draws one interval's samples from the merged stacks by weight, so the profile keeps
the records' per-interval sample count (`intervals` says how many records were merged) and the
stacks covering COVER of the samples; the rest, nearly all seen once, is kept as a count
(`tail`) from which the loadgen makes as many synthetic stacks. The header also carries what the
folded format loses and the loadgen needs: threads and pids per comm, executables, module paths.

    make_profile.py --event cpu --period 10101010 --comms comms.tsv --modules modules.txt \
        -o cpu.folded.gz cpu-1.folded ... cpu-6.folded
"""

import argparse
import collections
import gzip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--event", required=True)
    ap.add_argument("--period", type=int, required=True)
    ap.add_argument("--interval-seconds", type=int, default=10)
    ap.add_argument("--cover", type=float, default=0.99)
    ap.add_argument("--comms", required=True, help="event, comm, pids, threads, executable per line")
    ap.add_argument("--modules", required=True, help="one module path per line")
    ap.add_argument("--note", default="")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("records", nargs="+")
    args = ap.parse_args()

    stacks = collections.Counter()
    for path in args.records:
        with open(path) as f:
            for line in f:
                stack, value = line.rstrip("\n").rsplit(" ", 1)
                stacks[stack] += max(1, round(int(value) / args.period))
    total = sum(stacks.values())
    ordered = sorted(stacks.items(), key=lambda kv: (-kv[1], kv[0]))
    kept, covered = [], 0
    for stack, count in ordered:
        if covered >= args.cover * total:
            break
        kept.append((stack, count))
        covered += count
    tail_stacks = len(ordered) - len(kept)
    tail_samples = total - covered

    comms_in_profile = {stack.split(";", 1)[0] for stack in stacks}
    comm_lines = []
    with open(args.comms) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if fields[0] == args.event and fields[1] in comms_in_profile:
                comm_lines.append("\t".join(fields[1:]))
    with open(args.modules) as f:
        modules = [m.strip() for m in f if m.strip() and not m.startswith("#")]

    with gzip.open(args.output, "wt") as out:
        out.write("# bimodal-loadgen profile\n")
        if args.note:
            out.write(f"# note\t{args.note}\n")
        out.write(f"# event\t{args.event}\n")
        out.write(f"# period\t{args.period}\n")
        out.write(f"# intervals\t{len(args.records)}\n")
        out.write(f"# interval_seconds\t{args.interval_seconds}\n")
        out.write(f"# tail\t{tail_stacks}\t{tail_samples}\n")
        for c in comm_lines:
            out.write(f"# comm\t{c}\n")
        for m in modules:
            out.write(f"# module\t{m}\n")
        for stack, count in kept:
            out.write(f"{stack} {count * args.period}\n")
    print(
        f"{args.output}: {total} samples over {len(args.records)} intervals, {len(stacks)} stacks, "
        f"kept {len(kept)} covering {covered}, tail {tail_stacks} stacks / {tail_samples} samples"
    )


if __name__ == "__main__":
    main()
