#!/usr/bin/env bash
# bench-trace.sh - the Mooncake trace as a KV cache, in one run, as markdown:
#  1. DRAM only, at 2/5/10/25 % of the trace's unique blocks: hit ratio with
#     the default eviction, with Mooncake's (--eviction-high-watermark-ratio
#     0.90 --eviction-ratio 0.05), an exact LRU and a prefix-aware LRU (a
#     request's blocks used last to first); blocks/s (leases 20 ms).
#  2. DRAM + SSD tier of 10x DRAM, --offload on_evict, --kv-lease-ttl 1s: hit
#     ratio next to the infinite cache's and an exact LRU of DRAM + SSD;
#     puts refused, objects evicted uncopied (the disk fell behind), blocks
#     matched but gone before the read; blocks/s; offload write GB/s.
#  3. The offload path writing 64 KiB objects (bench-offload.sh, --offload
#     on_put) next to fio's 64 KiB O_DIRECT sequential writes in DIR.
#   bash tools/bench-trace.sh [DIR]     (DIR: disk tiers and fio's file; /var/tmp)
# Env: BUILD (build), TRACE (the trace; ../shared/traces/synthetic_trace.jsonl),
# PCTS ("2 5 10 25"). Needs curl; fio for table 3 (skipped without it).
# Throughput figures depend on what else runs on the machine: hit ratios and
# counts of refused puts do not.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/bench/lib.sh
DIR=${1:-/var/tmp}
PCTS=${PCTS:-2 5 10 25}
TRACE=${TRACE:-../shared/traces/synthetic_trace.jsonl}
RUN_SECS=300
bl_need lunar-proxy lunar-bench
[ -f "$TRACE" ] || { bl_log "bench-trace: no trace at $TRACE (set TRACE)"; exit 1; }
bl_init bench-trace

unique=
# The replay of one cell: out file $1, capacity in blocks $2, proxy flags after.
replay() {
	local out=$1 cap=$2 sock=$BL_TMP/p.sock port
	shift 2
	bl_start_proxy proxy "$sock" --embedded-master --http-port 0 \
		--segment-size "$((cap * 65536))" "$@"
	bl_run "$out" "$RUN_SECS" "$BIN/lunar-bench" --trace "$TRACE" --block-size 64KiB \
		--capacity-blocks "$cap" --socket "$sock" || true
	port=$(grep -o 'HTTP on http://[0-9.]*:[0-9]*' "$BL_TMP/proxy.log" | grep -o '[0-9]*$' || true)
	if [ -n "$port" ]; then
		curl -s "http://127.0.0.1:$port/metrics" >"$out.metrics" || true
		curl -s "http://127.0.0.1:$port/disk/status" >"$out.disk" || true
	fi
	bl_stop_all
}

# A counter from a saved /metrics: $1 file, $2 a grep -F pattern.
metric() { grep -F "$2" "$1" 2>/dev/null | grep -v '^#' | awk '{print $NF}' | tail -n 1; }
# A number from a saved /disk/status.
dstat() { grep -o "\"$2\":[0-9]*" "$1" 2>/dev/null | grep -o '[0-9]*$' || echo -; }
# The LRU's hit ratio at $1 blocks.
lru_at() {
	"$BIN/lunar-bench" --trace "$TRACE" --block-size 64KiB --simulate-only \
		--capacity-blocks "$1" | sed -n 's/^lru_hit_ratio=//p'
}

table_dram() {
	local pct cap f g
	echo "### DRAM only (leases 20 ms)"
	echo
	echo "| DRAM | blocks | hit ratio, defaults | hit ratio, 0.90 / 0.05 | exact LRU | prefix-aware LRU | infinite | blocks/s, defaults | blocks/s, 0.90 / 0.05 |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for pct in $PCTS; do
		cap=$(((unique * pct + 50) / 100))
		f=$BL_TMP/dram-$pct.out g=$BL_TMP/moon-$pct.out
		replay "$f" "$cap" --kv-lease-ttl 20ms
		replay "$g" "$cap" --kv-lease-ttl 20ms --eviction-high-watermark-ratio 0.90 \
			--eviction-ratio 0.05
		echo "| $pct % | $cap | $(bl_kv "$f" hit_ratio) | $(bl_kv "$g" hit_ratio) |" \
			"$(bl_kv "$f" lru_hit_ratio) | $(bl_kv "$f" prefix_lru_hit_ratio) |" \
			"$(bl_kv "$f" infinite_hit_ratio) | $(bl_fmt "$(bl_kv "$f" blocks_per_s)" 0) |" \
			"$(bl_fmt "$(bl_kv "$g" blocks_per_s)" 0) |"
	done
	echo
}

table_ssd() {
	local pct cap f inf hit
	echo "### DRAM + SSD tier of 10x DRAM (\`--offload on_evict\`, leases 1 s)"
	echo
	echo "| DRAM | hit ratio | infinite | share of infinite | LRU of DRAM + SSD | puts refused | evicted uncopied | matched, gone at read | blocks/s | offload write GB/s |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	for pct in $PCTS; do
		cap=$(((unique * pct + 50) / 100))
		f=$BL_TMP/ssd-$pct.out
		replay "$f" "$cap" --kv-lease-ttl 1s --disk-dir "$DIR/bench-trace-disk.$$" \
			--disk-capacity "$((cap * 65536 * 10))" --offload on_evict
		rm -rf "$DIR/bench-trace-disk.$$"
		inf=$(bl_kv "$f" infinite_hit_ratio) hit=$(bl_kv "$f" hit_ratio)
		echo "| $pct % | $hit | $inf | $(bl_div "$hit" "$inf" 3) | $(lru_at $((cap * 11))) |" \
			"$(bl_kv "$f" put_soft_errors) |" \
			"$(metric "$f.metrics" 'event="dropped_queue_full"') |" \
			"$(bl_kv "$f" get_soft_errors) | $(bl_fmt "$(bl_kv "$f" blocks_per_s)" 0) |" \
			"$(bl_div "$(dstat "$f.disk" offload_bytes)" "$(dstat "$f.disk" offload_write_us)e3" 2) |"
	done
	echo
}

# fio's 64 KiB O_DIRECT sequential write GB/s at queue depth $1.
fio_gbps() {
	fio --name=w --rw=write --bs=64k --direct=1 --ioengine=io_uring --iodepth="$1" \
		--size=1G --filename="$DIR/bench-trace-fio.$$" --output-format=terse \
		--terse-version=3 2>/dev/null | awk -F';' '{ printf "%.2f", $48 * 1024 / 1e9 }'
	rm -f "$DIR/bench-trace-fio.$$"
}

table_offload() {
	local f=$BL_TMP/offload.out q1 q32 q32b
	echo "### Offload of 64 KiB objects next to fio"
	echo
	if ! command -v fio >/dev/null; then
		echo "Skipped: no fio."
		return 0
	fi
	q1=$(fio_gbps 1)
	q32=$(fio_gbps 32)
	SIZE=65536 COUNT=16384 bash tools/bench-offload.sh "$DIR" >"$f" || true
	q32b=$(fio_gbps 32)
	echo "| | write GB/s |"
	echo "|---|---|"
	echo "| offload path, 64 KiB objects (time in its disk writes) | $(bl_kv "$f" offload_write_gb_per_s) |"
	echo "| offload path, 64 KiB objects (first SSD record to last) | $(bl_kv "$f" offload_steady_gb_per_s) |"
	echo "| fio 64 KiB O_DIRECT sequential, io_uring, iodepth 1 | $q1 |"
	echo "| fio 64 KiB O_DIRECT sequential, io_uring, iodepth 32 (before, after) | $q32, $q32b |"
	echo
}

bl_run "$BL_TMP/info.out" 60 "$BIN/lunar-bench" --trace "$TRACE" --block-size 64KiB \
	--simulate-only --capacity-ratio 0
unique=$(bl_kv "$BL_TMP/info.out" trace_unique_blocks)
echo "## Mooncake trace replay: $(bl_kv "$BL_TMP/info.out" trace_requests) requests," \
	"$(bl_kv "$BL_TMP/info.out" trace_blocks) blocks, $unique unique blocks of 64 KiB"
echo
bl_machine
echo "- Load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
table_dram
table_ssd
table_offload
[ "$BL_FAILED" -eq 0 ]
