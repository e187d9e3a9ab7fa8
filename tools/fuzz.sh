#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ (cargo-fuzz, libFuzzer, the nightly toolchain) for SECONDS each
# (default 20; `make fuzz` runs them longer), starting from the committed corpus in
# fuzz/corpus/TARGET. Inputs found along the way go to a scratch directory, not the committed
# corpus. A crash fails the run; its input is kept in fuzz/artifacts/TARGET for `cargo fuzz run
# TARGET FILE` to replay.
set -euo pipefail
seconds=${1:-20}
die() { echo "fuzz: $*" >&2; exit 1; }
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null || die "cargo-fuzz is not installed: run tools/setup.sh"
rustup run nightly rustc --version >/dev/null 2>&1 || die "no nightly toolchain: rustup toolchain install nightly"
targets=$(cargo +nightly fuzz list)
[ -n "$targets" ] || die "no fuzz targets in fuzz/fuzz_targets"
# One build for all targets (debug assertions on, optimized).
cargo +nightly fuzz build --release
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in $targets; do
	mkdir -p "$scratch/$target" "corpus/$target"
	echo "fuzz: $target for ${seconds}s from $(ls "corpus/$target" | wc -l) committed inputs"
	cargo +nightly fuzz run --release "$target" "$scratch/$target" "corpus/$target" -- \
		-max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1 2>"$scratch/$target.log" ||
		{ tail -n 40 "$scratch/$target.log" >&2; die "$target failed; the input is in fuzz/artifacts/$target"; }
	grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$scratch/$target.log" | sed "s/^/fuzz: $target /"
done
