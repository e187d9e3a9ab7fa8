#!/usr/bin/env bash
# `make bench`: what profiling costs. One page-fault-heavy workload (testdata/fixtures/workload.c,
# `fault` mode) runs for BENCH_SECONDS (default 30) alone and under each profiler in turn:
#
#   baseline              the workload alone, before and after every profiled run (the
#                         throughput drifts: each run is compared with its two neighbours)
#   bimodal page_fault    bimodal-agent record --event page_fault   (1 in 100 faults, system-wide)
#   bimodal cpu           bimodal-agent record --event cpu          (99 Hz per CPU)
#   bimodal run           one `bimodal-agent run` with every kind this machine offers (its
#                         default), batches written to a directory (--output-dir: frames named
#                         by the agent, nothing sent), stopped by --duration
#   perf -F 4000          perf record -e page-faults -g -a          (perf's default: 4000 Hz)
#   perf -c 100           perf record -e page-faults -c 100 -g -a   (bimodal's period)
#
# For each: the profiler's CPU time (user+sys, children included) as % of one core over the
# duration, its peak RSS, the workload's faults/s against the baseline, samples taken and lost,
# and the output's size. Prints a Markdown table and writes it to target/bench/results.md.
#
# Environment: BENCH_SECONDS (default 30), BIMODAL_AGENT (default target/release/bimodal-agent),
# PERF (default: perf on PATH), BENCH_OUT (default target/bench).
# Needs root (BPF, system-wide perf). Run it on an otherwise idle machine: it warns if not.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-30}
agent=${BIMODAL_AGENT:-target/release/bimodal-agent}
out=${BENCH_OUT:-target/bench}
runs=$out/run

die() {
	echo "bench: error: $*" >&2
	exit 1
}
say() { echo "bench: $*" >&2; }

# ---- every process this script starts is a process-group leader (setsid); cleanup kills those
groups=()
cleanup() {
	local status=$?
	trap - INT TERM EXIT
	local g
	for g in "${groups[@]}"; do
		# the group, or the process itself if it has not yet become a group leader
		kill -TERM -- "-$g" 2>/dev/null || kill -TERM "$g" 2>/dev/null || true
	done
	for g in "${groups[@]}"; do wait "$g" 2>/dev/null || true; done
	exit "$status"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM

# start NAME CMD...: runs CMD under /usr/bin/time, itself under `timeout` (a safety net: the
# duration plus two minutes), in a process group of its own, in the background. Its stdout and
# stderr go to $runs/NAME.out/.err, "wall user sys maxrss-KiB" to $runs/NAME.time.
# Sets $started to the pid (= process group id) of the `timeout` process.
started=
start() {
	local name=$1
	shift
	setsid timeout -k 10 $((seconds + 120)) "$time_bin" -f '%e %U %S %M' -o "$runs/$name.time" "$@" \
		>"${start_stdout:-$runs/$name.out}" 2>"$runs/$name.err" &
	started=$!
	groups+=("$started")
}

# child_of PID: the first child of PID, once it has one.
child_of() {
	local parent=$1 c
	for _ in $(seq 1 500); do
		c=$(pgrep -P "$parent" | head -n 1 || true)
		if [ -n "$c" ]; then
			echo "$c"
			return 0
		fi
		kill -0 "$parent" 2>/dev/null || return 1
		sleep 0.01
	done
	return 1
}

# measured_pid PID: the measured command of a `start`ed process (timeout -> time -> command).
measured_pid() {
	local t
	t=$(child_of "$1") && child_of "$t"
}

# ready KIND PID NAME: waits until the profiler is sampling.
#   bimodal: Sampler::start builds the ring buffer's epoll instance after every program is
#            attached, and `record` starts its clock right after.
#   perf:    perf enables its events and then lets its `sleep` child exec.
ready() {
	local kind=$1 tpid=$2 name=$3 pid c deadline=$((SECONDS + 60))
	pid=$(measured_pid "$tpid") || fail_start "$name"
	while [ $SECONDS -lt $deadline ]; do
		kill -0 "$pid" 2>/dev/null || fail_start "$name"
		case $kind in
		bimodal | bimodal-run)
			if find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 -lname 'anon_inode:\[eventpoll\]' 2>/dev/null | grep -q .; then
				return 0
			fi
			;;
		perf)
			for c in $(pgrep -P "$pid" || true); do
				if [ "$(cat "/proc/$c/comm" 2>/dev/null)" = sleep ]; then return 0; fi
			done
			;;
		esac
		sleep 0.02
	done
	die "$name did not start sampling within 60 s; its stderr ($runs/$name.err):$(printf '\n')$(cat "$runs/$name.err")"
}

fail_start() {
	die "$1 exited before it started sampling; its stderr ($runs/$1.err):$(printf '\n')$(cat "$runs/$1.err")"
}

# finish NAME PID: waits for a `start`ed process and checks that it succeeded.
finish() {
	local name=$1 pid=$2 status=0
	wait "$pid" || status=$?
	case $status in
	0) ;;
	124 | 137) die "$name did not finish within $((seconds + 120))s and was stopped; stderr ($runs/$name.err):$(printf '\n')$(tail -n 20 "$runs/$name.err")" ;;
	*) die "$name failed (exit status $status); stderr ($runs/$name.err):$(printf '\n')$(tail -n 20 "$runs/$name.err")" ;;
	esac
	[ -s "$runs/$name.time" ] || die "$name: /usr/bin/time wrote no measurement ($runs/$name.time)"
}

# time_field NAME N: field N (1 wall, 2 user, 3 sys, 4 maxrss KiB) of the last line of NAME.time.
time_field() { tail -n 1 "$runs/$1.time" | awk -v n="$2" '{print $n}'; }

# ---- checks
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || die "BENCH_SECONDS must be a positive whole number of seconds, not \`$seconds\`"
[ "$(id -u)" -eq 0 ] || die "needs root: the agent loads BPF programs and perf samples system-wide"
[ -x "$agent" ] || die "no agent binary at $agent: run \`make release\` (or set BIMODAL_AGENT)"
command -v cc >/dev/null || die "no C compiler (cc): run \`make setup\`"

apt_install() {
	say "installing $*"
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }; then
		die "apt-get install $* failed"
	fi
}

time_bin=/usr/bin/time
if ! "$time_bin" -f '%M' true >/dev/null 2>&1; then
	apt_install time
	"$time_bin" -f '%M' true >/dev/null 2>&1 || die "$time_bin (GNU time) does not work"
fi

# Debian's /usr/bin/perf can be a wrapper that insists on a perf matching the running kernel;
# any perf_X.Y binary records fine on a newer kernel.
find_perf() {
	local p
	local candidates
	mapfile -t candidates < <(printf '%s\n' /usr/bin/perf_* | grep -v '\*' | sort -rV)
	for p in ${PERF:-} perf "${candidates[@]}"; do
		if "$p" --version >/dev/null 2>&1; then
			command -v "$p"
			return 0
		fi
	done
	return 1
}
perf_bin=$(find_perf) || {
	apt_install linux-perf
	perf_bin=$(find_perf) || die "perf does not run here even after installing linux-perf (try PERF=/usr/bin/perf_X.Y)"
}

mkdir -p "$runs"
rm -f "$runs"/*

cpus=$(nproc)
cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
kernel=$(uname -r)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if ! git diff --quiet HEAD 2>/dev/null; then commit="$commit with uncommitted changes"; fi
agent_version=$("$agent" --version 2>/dev/null || echo "bimodal-agent (version unknown)")
agent_built=$(date -u -r "$agent" '+%Y-%m-%d %H:%M UTC')

# How busy the machine is without us, over one second: others' load skews every number.
busy_percent() {
	local a b
	read -ra a </proc/stat
	sleep 1
	read -ra b </proc/stat
	awk -v u1="${a[1]}" -v n1="${a[2]}" -v s1="${a[3]}" -v i1="${a[4]}" -v w1="${a[5]}" -v q1="${a[6]}" -v sq1="${a[7]}" -v st1="${a[8]}" \
		-v u2="${b[1]}" -v n2="${b[2]}" -v s2="${b[3]}" -v i2="${b[4]}" -v w2="${b[5]}" -v q2="${b[6]}" -v sq2="${b[7]}" -v st2="${b[8]}" \
		'BEGIN { busy = (u2+n2+s2+q2+sq2+st2) - (u1+n1+s1+q1+sq1+st1); idle = (i2+w2) - (i1+w1);
		         printf "%.0f", ((busy + idle) > 0 ? 100 * busy / (busy + idle) : 0) }'
}
# Busy CPU time of the whole machine so far, in seconds (USER_HZ ticks of /proc/stat).
busy_seconds() {
	awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" {print ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit}' /proc/stat
}
busy_before=$(busy_percent)
if [ "$busy_before" -gt 10 ]; then
	say "warning: the machine is ${busy_before}% busy before the benchmark starts (of $cpus CPUs); the numbers will be skewed"
	ps -eo pcpu,pid,comm --sort=-pcpu | awk 'NR>1 && $1 > 5 {print "bench:   " $0}' >&2 || true
fi

# ---- the workload
workload=$out/workload
cc -O1 -g -fno-omit-frame-pointer -o "$workload" testdata/fixtures/workload.c ||
	die "failed to compile testdata/fixtures/workload.c"

# ---- the event kinds this machine can sample
probe_json=$("$agent" probe --json 2>"$runs/probe.err") ||
	die "\`$agent probe --json\` failed: $(cat "$runs/probe.err")"
mapfile -t kinds < <(printf '%s\n' "$probe_json" | awk '
	/^    \{/ { event = "" }
	/^      "event": / { gsub(/[",]/, "", $2); event = $2 }
	/^      "chosen": \{/ && event != "" { print event }')
[ ${#kinds[@]} -gt 0 ] || die "\`$agent probe --json\` lists no available event kind:$(printf '\n')$probe_json"
say "event kinds available here: ${kinds[*]}"

# ---- scenarios
# Each result is one line of $results:
#   name|cpu_s|rss_kib|faults|others_cpu_s|samples|lost|bytes|procs|max_rss_kib
results=$runs/results.tsv
: >"$results"

# measure NAME TYPE [PROFILER...]: TYPE is none, bimodal or perf; each PROFILER is one
# command line (a string, word-split) started concurrently.
measure() {
	local name=$1 type=$2
	shift 2
	local i=0 tpids=() names=() cmd
	say "$name (${seconds}s)"
	for cmd in "$@"; do
		i=$((i + 1))
		# shellcheck disable=SC2086
		start "$name.p$i" $cmd
		tpids+=("$started")
		names+=("$name.p$i")
	done
	for i in "${!tpids[@]}"; do ready "$type" "${tpids[$i]}" "${names[$i]}"; done

	local busy0 busy1
	busy0=$(busy_seconds)
	start "$name.workload" "$workload" fault "$seconds"
	finish "$name.workload" "$started"
	busy1=$(busy_seconds)
	for i in "${!tpids[@]}"; do finish "${names[$i]}" "${tpids[$i]}"; done

	local faults
	faults=$(awk '/^faults / {print $2}' "$runs/$name.workload.out")
	[ -n "$faults" ] || die "the workload printed no \`faults N\` line ($runs/$name.workload.out)"

	local cpu=0 rss=0 maxrss=0 samples=0 lost=0 bytes=0 n
	for n in "${names[@]}"; do
		cpu=$(awk -v a="$cpu" -v u="$(time_field "$n" 2)" -v s="$(time_field "$n" 3)" 'BEGIN {print a + u + s}')
		local r
		r=$(time_field "$n" 4)
		rss=$((rss + r))
		if [ "$r" -gt "$maxrss" ]; then maxrss=$r; fi
		local s l f
		case $type in
		bimodal)
			# bimodal-agent: wrote FILE (N samples of EVENT, M lost; ...)
			f='' s='' l=''
			read -r f s l < <(sed -n 's/^bimodal-agent: wrote \(.*\) (\([0-9]*\) samples of [a-z_]*, \([0-9]*\) lost;.*$/\1 \2 \3/p' "$runs/$n.err") || true
			[ -n "${s:-}" ] || die "$n printed no \`wrote FILE (N samples of EVENT, M lost)\` line ($runs/$n.err)"
			;;
		bimodal-run)
			# bimodal-agent: ran Ns: B batches (S samples of KINDS, L lost), D batches dropped
			s=$(sed -n 's/^bimodal-agent: ran .*: [0-9]* batches (\([0-9]*\) samples of .*, [0-9]* lost).*$/\1/p' "$runs/$n.err")
			l=$(sed -n 's/^bimodal-agent: ran .*: [0-9]* batches ([0-9]* samples of .*, \([0-9]*\) lost).*$/\1/p' "$runs/$n.err")
			[ -n "$s" ] || die "$n printed no \`ran …: B batches (S samples of …, L lost)\` line ($runs/$n.err)"
			f=$runs/bimodal-run
			;;
		perf)
			# [ perf record: Captured and wrote 1.561 MB FILE (16786 samples) ]
			s=$(sed -n 's/.*Captured and wrote .* (\([0-9]*\) samples) \]$/\1/p' "$runs/$n.err")
			[ -n "$s" ] || die "$n printed no \`Captured and wrote … (N samples)\` line ($runs/$n.err)"
			f=$(sed -n 's/.*Captured and wrote [0-9.]* [A-Za-z]* \(.*\) ([0-9]* samples) \]$/\1/p' "$runs/$n.err")
			# Lost samples: PERF_RECORD_LOST records (ring buffer full) and the kernel's
			# lost-sample count (PERF_RECORD_LOST_SAMPLES); take the larger, they overlap.
			l=$("$perf_bin" report -D -i "$f" 2>/dev/null | awk '
				/PERF_RECORD_LOST:/ { sub(/.*lost:/, ""); a += $1 }
				/PERF_RECORD_LOST_SAMPLES:/ { sub(/.*lost samples :/, ""); b += $1 }
				END { print (a > b ? a : b) + 0 }')
			;;
		esac
		samples=$((samples + s))
		lost=$((lost + l))
		bytes=$((bytes + $(du -sb "$f" | cut -f1)))
	done
	# Everything else that ran meanwhile (kernel threads included): the machine's busy time
	# while the workload ran, less the workload's and (roughly: it ran a bit longer) the profilers'.
	local others
	others=$(awk -v b0="$busy0" -v b1="$busy1" -v u="$(time_field "$name.workload" 2)" -v s="$(time_field "$name.workload" 3)" \
		-v p="$cpu" 'BEGIN {o = (b1 - b0) - u - s - p; print (o > 0 ? o : 0)}')
	echo "$name|$cpu|$rss|$faults|$others|$samples|$lost|$bytes|${#names[@]}|$maxrss" >>"$results"
}

bimodal_record() { # EVENT -> one profiler command line
	echo "$agent record --event $1 --duration ${seconds}s --format folded -o $runs/bimodal-$1.folded"
}
perf_record() { # NAME [perf record options]
	local name=$1
	shift
	echo "$perf_bin record -e page-faults $* -g -a -o $runs/$name.data -- sleep $seconds"
}

bimodal_run() { # one profiler command line: every kind, batches to files
	echo "$agent run --duration ${seconds}s --node-name bench --output-dir $runs/bimodal-run"
}

# A baseline before and after every profiled run: this machine's throughput drifts by several
# per cent over minutes, so each run is compared with the mean of its two neighbours.
baselines_run=0
run_baseline() {
	baselines_run=$((baselines_run + 1))
	measure "baseline $baselines_run" none
}
run_baseline
measure "bimodal page_fault" bimodal "$(bimodal_record page_fault)"
run_baseline
measure "bimodal cpu" bimodal "$(bimodal_record cpu)"
run_baseline
measure "bimodal run" bimodal-run "$(bimodal_run)"
run_baseline
measure "perf -F 4000" perf "$(perf_record perf-F4000)"
run_baseline
measure "perf -c 100" perf "$(perf_record perf-c100 -c 100)"
run_baseline

# What symbolizing perf's -c 100 data costs afterwards (bimodal symbolizes while it records).
say "perf script on the perf -c 100 data (after the runs, not concurrent)"
start_stdout=/dev/null start "perf-script" "$perf_bin" script -i "$runs/perf-c100.data"
perf_script_tpid=$started
finish "perf-script" "$perf_script_tpid"
perf_script_cpu=$(awk -v u="$(time_field perf-script 2)" -v s="$(time_field perf-script 3)" 'BEGIN {printf "%.2f", u + s}')
perf_script_rss=$(awk -v k="$(time_field perf-script 4)" 'BEGIN {printf "%.0f", k / 1024}')

busy_after=$(busy_percent)

# ---- the table
baseline=$(awk -F'|' -v d="$seconds" '$1 ~ /^baseline/ {s += $4 / d; n++} END {printf "%.0f", s / n}' "$results")
baseline_lo=$(awk -F'|' -v d="$seconds" '$1 ~ /^baseline/ {r = $4 / d; if (n++ == 0 || r < lo) lo = r} END {printf "%.0f", lo}' "$results")
baseline_hi=$(awk -F'|' -v d="$seconds" '$1 ~ /^baseline/ {r = $4 / d; if (r > hi) hi = r} END {printf "%.0f", hi}' "$results")
baseline_n=$(grep -c '^baseline' "$results")
spread=$(awk -v lo="$baseline_lo" -v hi="$baseline_hi" 'BEGIN {printf "%.1f", (lo > 0 ? 100 * (hi - lo) / lo : 0)}')
kinds_list=$(printf '%s, ' "${kinds[@]}")
kinds_list=${kinds_list%, }

table=$(
	echo "| run | profiler CPU s | % of one core | peak RSS MiB | workload faults/s | vs baseline | samples | lost | output bytes | others' CPU |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	awk -F'|' -v d="$seconds" -v n="$baseline_n" -v lo="$baseline_lo" -v hi="$baseline_hi" -v mean="$baseline" '
		{ row[NR] = $0 }
		END {
			others = 0
			for (i = 1; i <= NR; i++) {
				split(row[i], f, "|")
				if (f[9] == 0) { others += f[5]; if (f[5] > maxothers) maxothers = f[5] }
			}
			printf "| baseline: the workload alone, %d runs (min–max) | – | – | – | %.0f (%.0f–%.0f) | – | – | – | – | %.1f%% (mean)%s |\n",
				n, mean, lo, hi, 100 * others / n / d, (100 * maxothers / d >= 10 ? " ⚠" : "")
			for (i = 1; i <= NR; i++) {
				split(row[i], f, "|")
				if (f[9] == 0) continue
				# the neighbouring baselines
				split(row[i - 1], p, "|"); split(row[i + 1], q, "|")
				base = (p[4] + q[4]) / 2 / d
				rate = f[4] / d
				name = f[1]
				if (f[9] > 1) name = name " (" f[9] " processes, sums)"
				# skewed: others used a tenth of a core or more during this row or a neighbouring baseline
				skew = (100 * f[5] / d >= 10 || 100 * p[5] / d >= 10 || 100 * q[5] / d >= 10) ? " ⚠" : ""
				printf "| %s | %.2f | %.2f%% | %.1f | %.0f | %+.1f%% | %.0f | %.0f | %.0f | %.1f%%%s |\n",
					name, f[2], 100 * f[2] / d, f[3] / 1024, rate, 100 * (rate / base - 1), f[6], f[7], f[8], 100 * f[5] / d, skew
			}
		}' "$results"
)

report=$(
	cat <<EOF
## bimodal benchmark: ${seconds}s of \`workload fault\`

- machine: $cpus CPUs, $cpu_model, Linux $kernel; $("$perf_bin" --version)
- bimodal: \`$agent\` ($agent_version, built $agent_built; work tree at $commit); event kinds available here: $kinds_list
- date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine busy before/after the runs: ${busy_before}% / ${busy_after}% of all CPUs

$table

- **% of one core**: the profiler's user+sys CPU time (children included) over the ${seconds}s
  sampling window; it includes the profiler's start-up and writing the output. Work done in the
  kernel on behalf of the sampled task (BPF programs, perf's sample copies) is charged to the
  workload and shows up as lost throughput in **vs baseline** instead.
- **vs baseline**: the workload's faults/s against the mean of the two baseline runs just
  before and after it. The $baseline_n baselines spread over $spread% (min to max): differences
  within that are noise.
- **samples / lost**: bimodal's count from \`wrote FILE (N samples of EVENT, M lost)\`; perf's
  from \`Captured and wrote … (N samples)\` and its PERF_RECORD_LOST records.
- **output**: bimodal writes a symbolized, aggregated folded profile; perf writes raw,
  unsymbolized samples. Symbolizing the perf -c 100 data afterwards (\`perf script\`) took
  ${perf_script_cpu} s of CPU and ${perf_script_rss} MiB.
- **others' CPU**: what the rest of the machine (other processes, kernel threads) used while
  the workload ran, as % of one core: /proc/stat's busy time less the workload's and the
  profilers' CPU time. ⚠ marks a row where others used ≥ 10% of a core during it or during one
  of its two baselines: someone else's load skewed that row; run again on an idle machine.
- "bimodal run" is one agent with every kind this machine offers (${kinds_list%, }), as a node
  runs it, its batches written to files instead of sent (\`run --output-dir\`: frames named by
  the agent); samples and lost from its \`ran …: B batches (S samples of …, L lost)\` line,
  output the batch files' bytes.
EOF
)

echo "$report" >"$out/results.md"
echo "$report"
say "wrote $out/results.md (raw logs in $runs/)"
