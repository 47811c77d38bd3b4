#!/usr/bin/env bash
# bench-procs.sh - many application processes on one standalone proxy: for
# each size and process count, that many lunar-bench processes (one thread
# each, their own keys) start every phase together (--sync-file); every
# byte read back is checked.
# Prints a markdown table: aggregate put and get ops/s = all operations of
# the cell / the span from the first process's phase start to the last
# one's phase end (gets include checking the bytes), and the median of the
# processes' p50 latencies.
# Run from anywhere: bash tools/bench-procs.sh [> procs.md]. Env: BUILD.
set -euo pipefail

cd "$(dirname "$0")/.."
. tools/bench/lib.sh

SIZES=(4KiB 64KiB)
PROCS=(1 8 16)
declare -A TOTAL=([4KiB]=200000 [64KiB]=20000)
CELL_SECS=120

# span_s DIR PHASE - seconds from the earliest PHASE_start_ns to the latest
# PHASE_end_ns over DIR/p*.out.
span_s() {
	awk -F= -v s="$2_start_ns" -v e="$2_end_ns" '
		$1 == s && (lo == "" || $2 < lo) { lo = $2 }
		$1 == e && $2 > hi { hi = $2 }
		END { printf "%.6f", (hi - lo) / 1e9 }' "$1"/p*.out
}

# median_kv DIR KEY - the median KEY=... over DIR/p*.out.
median_kv() {
	awk -F= -v k="$2" '$1 == k { print $2 }' "$1"/p*.out | sort -g |
		awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "-" }'
}

bl_need lunar-bench lunar-proxy lunarctl
bl_init lunar-procs
sock=$BL_TMP/lunar.sock
bl_start_proxy proxy "$sock" --embedded-master --segment-size 2GiB

rows=()
for size in "${SIZES[@]}"; do
	for n in "${PROCS[@]}"; do
		dir=$BL_TMP/$size-$n
		count=$((TOTAL[$size] / n))
		mkdir -p "$dir"
		bl_record "$BIN/lunar-bench" --socket "$sock" --size "$size" --count "$count" \
			--threads 1 --baseline-size 0 --sync-file "$dir/sync" --sync-procs "$n"
		BL_CMDS[-1]+="   # x $n processes"
		pids=()
		for i in $(seq "$n"); do
			timeout --kill-after=5 "$CELL_SECS" "$BIN/lunar-bench" --socket "$sock" \
				--size "$size" --count "$count" --threads 1 --baseline-size 0 \
				--sync-file "$dir/sync" --sync-procs "$n" \
				>"$dir/p$i.out" 2>"$dir/p$i.err" &
			pids+=($!)
		done
		for p in "${pids[@]}"; do
			wait "$p" || { BL_FAILED=$((BL_FAILED + 1)); bl_log "bench-procs: a process failed ($size x $n)"; }
		done
		ops=$((count * n))
		errs=$(awk -F= '$1 == "errors" { s += $2 } END { print s + 0 }' "$dir"/p*.out)
		rows+=("| $size | $n | $ops | $(bl_div "$ops" "$(span_s "$dir" put)" 0) | $(bl_div "$ops" "$(span_s "$dir" get)" 0) | $(bl_fmt "$(median_kv "$dir" put_p50_us)" 1) | $(bl_fmt "$(median_kv "$dir" get_p50_us)" 1) | $errs |")
	done
done
bl_stop_all

echo "# Many processes on one proxy"
echo
bl_machine
echo
echo "One standalone proxy (embedded master, 2 GiB segment); N lunar-bench processes of"
echo "one thread each, each with its share of the objects and its own keys, start"
echo "every phase together (a barrier in a shared file: --sync-file). ops/s: all"
echo "operations of the cell over the span from the first process's phase start to"
echo "the last one's phase end (a get phase includes checking every byte); p50: the"
echo "median of the processes' p50 latencies."
echo
echo "| size | processes | objects | put ops/s | get ops/s | put p50 µs | get p50 µs | errors |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
bl_cmds_flush
[ "$BL_FAILED" -eq 0 ]
