#!/usr/bin/env bash
# bench-start.sh - how soon a proxy serves whatever its segment's size: for
# each size, a proxy with an embedded master starts; `lunarctl put` is tried
# every 10 ms from the moment of the exec until one succeeds (start -> first
# put); then a 4 KiB put/get run of lunar-bench goes on while the segment is
# still being made resident beside it (its put and get p99 show whether the
# loop stalls); then the wait for the proxy's "segment resident (N ms)",
# and the same run again once it is, to compare.
# Prints markdown: a table, and the commands.
#   bash tools/bench-start.sh          Env: BUILD (build), SIZES ("2GiB 8GiB")
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/bench/lib.sh
SIZES=${SIZES:-2GiB 8GiB}
bl_init lunar-start
echo "hello" >"$BL_TMP/value"

echo "| segment | start -> first put ms | resident after ms | run began before residency |" \
	"4 KiB put / get p99 µs then | once resident |"
echo "|---|---|---|---|---|---|"
for size in $SIZES; do
	sock="$BL_TMP/p-$size.sock" log="$BL_TMP/p-$size.log" out="$BL_TMP/bench-$size.out"
	t0=$(date +%s%N)
	bl_spawn "$log" "$BIN/lunar-proxy" --embedded-master --socket "$sock" \
		--segment-size "$size" --data-port 0 --http-port 0
	until "$BIN/lunarctl" --socket "$sock" put first "$BL_TMP/value" >/dev/null 2>&1; do
		[ $(($(date +%s%N) - t0)) -lt 30000000000 ] || { bl_log "no put within 30 s"; exit 1; }
		sleep 0.01
	done
	first_ms=$((($(date +%s%N) - t0) / 1000000))
	bl_record "$BIN/lunarctl" --socket "$sock" put first "$BL_TMP/value"
	during=yes
	grep -q "segment resident" "$log" && during=no
	bl_run "$out" 120 "$BIN/lunar-bench" --socket "$sock" --size 4KiB --count 5000 \
		--baseline-size 0
	for _ in $(seq 600); do grep -q "segment resident" "$log" && break; sleep 0.1; done
	resident=$(sed -n 's/.*segment resident (\([0-9]*\) ms).*/\1/p' "$log")
	bl_run "$out.after" 120 "$BIN/lunar-bench" --socket "$sock" --size 4KiB --count 5000 \
		--baseline-size 0
	echo "| $size | $first_ms | ${resident:--} | $during |" \
		"$(bl_kv "$out" put_p99_us) / $(bl_kv "$out" get_p99_us) |" \
		"$(bl_kv "$out.after" put_p99_us) / $(bl_kv "$out.after" get_p99_us) |"
	bl_stop_all
done
bl_cmds_flush
[ "$BL_FAILED" -eq 0 ]
