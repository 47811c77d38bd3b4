#!/usr/bin/env bash
# bench-all.sh - regenerate every Lunar benchmark figure and print them as one
# markdown document: `bash tools/bench-all.sh > bench-abcd.md (one section of docs/bench.md)`. Runs from the
# repo root against $BUILD (default build): (a) a standalone node, (b) a
# 3-process cluster, (c) the master's RPC alone, (d) the Mooncake trace replayed
# at four capacities next to an exact LRU. Every daemon is started in a
# temporary directory and always stopped; every run is bounded by a timeout.
#   --quick        the master bench at 100k objects instead of 1M
#   --only a,b,..  run only these sections
# Environment: BUILD, TRACE (the trace file). Exit 1 if any run failed.
set -euo pipefail

cd "$(dirname "$0")/.."
. tools/bench/lib.sh

QUICK=0
ONLY=a,b,c,d
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--only) ONLY=$2; shift ;;
	--only=*) ONLY=${1#--only=} ;;
	-h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) bl_log "bench-all: unknown argument '$1'"; exit 2 ;;
	esac
	shift
done
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }

if [ -z "${TRACE:-}" ]; then
	for t in ../shared/traces/synthetic_trace.jsonl /work/shared/traces/synthetic_trace.jsonl; do
		[ -f "$t" ] && TRACE=$t && break
	done
fi
bl_need lunar-bench lunar-proxy lunar-master lunarctl
bl_init lunar-bench-all

SIZES=(4KiB 64KiB 1MiB 4MiB)
# Counts for ~1-3 s a run on a small machine; the largest sizes are capped by
# the 2 GiB segment instead (at most ~1.5 GiB resident per run).
declare -A COUNT=([4KiB]=20000 [64KiB]=15000 [1MiB]=1400 [4MiB]=360)
# Through the cluster, small objects cost a master round trip each: fewer of them.
declare -A COUNT_LOCAL COUNT_CLUSTER=([4KiB]=5000 [64KiB]=4000 [1MiB]=1400 [4MiB]=360)
for k in "${!COUNT[@]}"; do COUNT_LOCAL[$k]=${COUNT[$k]}; done
use_counts() {
	local -n from=$1
	local k
	for k in "${!from[@]}"; do COUNT[$k]=${from[$k]}; done
}
THREADS=(1 4)
MASTER_N=1000000
[ "$QUICK" -eq 1 ] && MASTER_N=100000
RUN_SECS=600

# One lunar-bench put/get run into $BL_TMP/$1.out; the copy baseline only for
# one thread (it is single-threaded and the same for any thread count).
node_run() {
	local tag=$1 sock=$2 size=$3 threads=$4
	shift 4
	local base=256MiB
	[ "$threads" -eq 1 ] || base=0
	bl_run "$BL_TMP/$tag.out" "$RUN_SECS" "$BIN/lunar-bench" --socket "$sock" --size "$size" \
		--count "${COUNT[$size]}" --threads "$threads" --baseline-size "$base" "$@" || true
}

# Zero-copy runs (values and buffers in lunar_alloc memory), one thread, with
# the best single-thread copy of the same run (cold at both ends) as the
# yardstick, and memcpy into a cached destination beside it.
zc_table() {
	local pre=$1 f size best hot
	echo "| size | put GB/s | get GB/s | exists p50 µs | put p50 µs | get p50 µs | memcpy GB/s | nt copy GB/s | memcpy, cached dst GB/s | put / best copy | get / best copy | get / memcpy, cached dst |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for size in "${SIZES[@]}"; do
		f=$BL_TMP/$pre-$size-1.out
		best=$(awk -v a="$(bl_kv "$f" memcpy_gb_per_s)" -v b="$(bl_kv "$f" nt_copy_gb_per_s)" \
			'BEGIN { print (a > b ? a : b) }')
		hot=$(bl_kv "$f" memcpy_hot_dst_gb_per_s)
		echo "| $size | $(bl_fmt "$(bl_kv "$f" put_gb_per_s)" 2) | $(bl_fmt "$(bl_kv "$f" get_gb_per_s)" 2) |" \
			"$(bl_fmt "$(bl_kv "$f" exists_p50_us)" 2) | $(bl_fmt "$(bl_kv "$f" put_p50_us)" 1) |" \
			"$(bl_fmt "$(bl_kv "$f" get_p50_us)" 1) | $(bl_fmt "$(bl_kv "$f" memcpy_gb_per_s)" 2) |" \
			"$(bl_fmt "$(bl_kv "$f" nt_copy_gb_per_s)" 2) | $(bl_fmt "$hot" 2) |" \
			"$(bl_div "$(bl_kv "$f" put_gb_per_s)" "$best" 2) | $(bl_div "$(bl_kv "$f" get_gb_per_s)" "$best" 2) |" \
			"$(bl_div "$(bl_kv "$f" get_gb_per_s)" "$hot" 2) |"
	done
}

# A table of the put/get runs tagged $1-<size>-<threads>.
node_table() {
	local pre=$1 f size t
	echo "| size | threads | objects | put GB/s | put ops/s | put p50 µs | put p99 µs | get GB/s | get ops/s | get p50 µs | get p99 µs | errors | memcpy GB/s | nt copy GB/s |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	for size in "${SIZES[@]}"; do
		for t in "${THREADS[@]}"; do
			f=$BL_TMP/$pre-$size-$t.out
			echo "| $size | $t | ${COUNT[$size]} | $(bl_fmt "$(bl_kv "$f" put_gb_per_s)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" put_ops_per_s)" 0) | $(bl_fmt "$(bl_kv "$f" put_p50_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" put_p99_us)" 1) | $(bl_fmt "$(bl_kv "$f" get_gb_per_s)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" get_ops_per_s)" 0) | $(bl_fmt "$(bl_kv "$f" get_p50_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" get_p99_us)" 1) | $(bl_kv "$f" errors) |" \
				"$(bl_fmt "$(bl_kv "$BL_TMP/$pre-$size-1.out" memcpy_gb_per_s)" 2) |" \
				"$(bl_fmt "$(bl_kv "$BL_TMP/$pre-$size-1.out" nt_copy_gb_per_s)" 2) |"
		done
	done
}

node_sweep() {
	local pre=$1 sock=$2 size t
	shift 2
	for size in "${SIZES[@]}"; do
		for t in "${THREADS[@]}"; do
			node_run "$pre-$size-$t" "$sock" "$size" "$t" "$@"
		done
	done
}

section_a() {
	local sock=$BL_TMP/a.sock size
	echo
	echo "## (a) Standalone node"
	echo
	echo "One \`lunar-proxy --embedded-master\` with a 2 GiB segment; \`lunar-bench\` on the"
	echo "same node puts every object, reads each back checking every byte, and removes"
	echo "them. ops/s and GB/s count the time inside liblunar calls (the busiest thread's);"
	echo "latencies are per call. The copy baselines are one thread copying blocks of the"
	echo "same size from a cold 256 MiB source set into a cold 256 MiB destination set"
	echo "(memcpy, and non-temporal stores), as a read block is cold and goes to a buffer"
	echo "bound for the GPU."
	echo
	bl_start_proxy proxy-a "$sock" --embedded-master --segment-size 2GiB
	node_sweep a "$sock"
	for size in "${SIZES[@]}"; do
		node_run "az-$size-1" "$sock" "$size" 1 --zero-copy
	done
	bl_stop_all
	node_table a
	echo
	echo "### Registered memory (\`--zero-copy\`: \`lunar_alloc\` buffers, one thread)"
	echo
	echo "The value goes from the app's shared buffer to the segment in one copy"
	echo "(checksummed in the same pass) and back the same way. exists is measured"
	echo "right after the puts, before any get leased the key: the full app → proxy →"
	echo "(embedded) master → app round trip."
	echo
	zc_table az
	bl_cmds_flush
}

section_b() {
	local sa=$BL_TMP/b-a.sock sb=$BL_TMP/b-b.sock
	echo
	echo "## (b) Three-process cluster"
	echo
	echo "\`lunar-master\` + proxies A and B on loopback, each with a 2 GiB segment. The client"
	echo "runs on A with \`--replicas 2\`: every put writes one copy in A's segment and one in"
	echo "B's over the TCP data plane. Then the same sweep with A contributing no memory"
	echo "(\`--segment-size 0\`), so every put and every get crosses TCP to B."
	echo
	use_counts COUNT_CLUSTER
	bl_start_master master-b
	bl_start_proxy proxy-b-a "$sa" --master "$BL_MASTER_URL" --segment-size 2GiB
	bl_start_proxy proxy-b-b "$sb" --master "$BL_MASTER_URL" --segment-size 2GiB
	node_sweep b2 "$sa" --replicas 2
	bl_stop_all
	echo "### Two replicas (client on A; one copy local, one on B)"
	echo
	node_table b2
	bl_cmds_flush

	bl_start_master master-b
	bl_start_proxy proxy-r-a "$sa" --master "$BL_MASTER_URL" --segment-size 0
	bl_start_proxy proxy-r-b "$sb" --master "$BL_MASTER_URL" --segment-size 2GiB
	node_sweep br "$sa"
	bl_stop_all
	echo
	echo "### All bytes remote (client on A, which has no segment; data on B)"
	echo
	node_table br
	bl_cmds_flush
	use_counts COUNT_LOCAL
}

section_c() {
	local r f lvl
	echo
	echo "## (c) Master control plane"
	echo
	echo "\`lunar-bench --master\` drives a fresh \`lunar-master\` over its real RPC as one"
	echo "fake proxy (a 1 TiB segment that never moves a byte, pinged every second), from"
	echo "R requester threads, each call on a pooled connection. At each level it fills the master"
	echo "to that many objects with PutStart+PutEnd pairs (4 KiB objects), then measures"
	echo "10,000 more pairs, 10,000 GetReplicaList calls on random resident keys and 1,000"
	echo "BatchExistKey calls of 128 random resident keys. Rates are over wall-clock time,"
	echo "all requesters together; latencies are per call (a pair is two calls)."
	echo "Bytes/object: the master's VmRSS growth over the run / objects resident."
	echo
	for r in 1 4 16; do
		bl_start_master master-c-$r
		bl_run "$BL_TMP/c-$r.out" 1800 "$BIN/lunar-bench" --master "$BL_MASTER_URL" \
			--requesters "$r" --objects "$MASTER_N" --master-pid "$BL_PID" || true
		bl_stop_all
	done
	echo "| requesters | objects resident | fill pairs/s | PutStart+PutEnd pairs/s | pair p50 µs | pair p99 µs | GetReplicaList/s | get p50 µs | get p99 µs | BatchExistKey keys/s | batch p50 µs | batch p99 µs | errors |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	for r in 1 4 16; do
		f=$BL_TMP/c-$r.out
		for lvl in 10000 "$MASTER_N"; do
			echo "| $r | $lvl | $(bl_fmt "$(bl_kv "$f" fill_to_${lvl}_pairs_per_s)" 0) |" \
				"$(bl_fmt "$(bl_kv "$f" put_at_${lvl}_pairs_per_s)" 0) |" \
				"$(bl_fmt "$(bl_kv "$f" put_at_${lvl}_p50_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" put_at_${lvl}_p99_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" get_at_${lvl}_ops_per_s)" 0) |" \
				"$(bl_fmt "$(bl_kv "$f" get_at_${lvl}_p50_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" get_at_${lvl}_p99_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" exist_at_${lvl}_keys_per_s)" 0) |" \
				"$(bl_fmt "$(bl_kv "$f" exist_at_${lvl}_p50_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" exist_at_${lvl}_p99_us)" 1) | $(bl_kv "$f" errors) |"
		done
	done
	echo
	echo "Flatness (figure at $MASTER_N objects / figure at 10,000; 1.0 is flat) and memory:"
	echo
	echo "| requesters | pairs/s ratio | pair p99 ratio | gets/s ratio | get p99 ratio | exist keys/s ratio | master bytes/object | eviction round |"
	echo "|---|---|---|---|---|---|---|---|"
	for r in 1 4 16; do
		f=$BL_TMP/c-$r.out
		echo "| $r | $(bl_kv "$f" flatness_put_per_s_ratio) | $(bl_kv "$f" flatness_put_p99_ratio) |" \
			"$(bl_kv "$f" flatness_get_per_s_ratio) | $(bl_kv "$f" flatness_get_p99_ratio) |" \
			"$(bl_kv "$f" flatness_exist_keys_per_s_ratio) |" \
			"$(bl_fmt "$(bl_kv "$f" master_bytes_per_object)" 0) | $(bl_kv "$f" eviction_round_ms) |"
	done
	echo
	echo "Eviction round: \`lunar-bench --evict-round N\` fills an in-process master (the same"
	echo "library) whose one segment holds exactly N objects of 4 KiB; the next PutStart"
	echo "fails its allocation and runs a synchronous round (census of all shards,"
	echo "quickselect, evict 5 %), then retries. That call's time is the round."
	echo
	echo "| objects resident | eviction round ms | objects evicted | in-process fill pairs/s |"
	echo "|---|---|---|---|"
	for lvl in 10000 "$MASTER_N"; do
		bl_run "$BL_TMP/ev-$lvl.out" 600 "$BIN/lunar-bench" --evict-round "$lvl" || true
		f=$BL_TMP/ev-$lvl.out
		echo "| $lvl | $(bl_kv "$f" eviction_round_ms) | $(bl_kv "$f" evicted) |" \
			"$(bl_fmt "$(bl_kv "$f" fill_pairs_per_s)" 0) |"
	done
	bl_cmds_flush
}

# One replay table: runs tagged $1-<pct> with master flags $2, titled $3.
d_table() {
	local tag=$1 flags=$2 title=$3 pct cap seg f sock=$BL_TMP/d.sock
	for pct in 2 5 10 25; do
		cap=$(((unique * pct + 50) / 100))
		seg=$((cap * 65536))
		# The trace spans ~1,022 s and replays in ~2 s: a 10 s lease in
		# trace time is ~20 ms here. A longer one would pin blocks the
		# trace's clock has long released.
		# shellcheck disable=SC2086 # flags are words
		bl_start_proxy proxy-$tag-$pct "$sock" --embedded-master --segment-size "$seg" \
			--kv-lease-ttl 20ms $flags
		bl_run "$BL_TMP/$tag-$pct.out" "$RUN_SECS" "$BIN/lunar-bench" --trace "$TRACE" \
			--block-size 64KiB --capacity-blocks "$cap" --socket "$sock" || true
		bl_stop_all
	done
	echo "### $title"
	echo
	echo "| capacity | blocks | segment MiB | hit ratio | LRU hit ratio | blocks/s | get batch p50 µs | get batch p99 µs | put batch p50 µs | put batch p99 µs | soft put errors | errors |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for pct in 2 5 10 25; do
		f=$BL_TMP/$tag-$pct.out
		cap=$(((unique * pct + 50) / 100))
		echo "| $pct % | $cap | $(bl_div "$((cap * 65536))" 1048576 1) | $(bl_kv "$f" hit_ratio) |" \
			"$(bl_kv "$f" lru_hit_ratio) | $(bl_fmt "$(bl_kv "$f" blocks_per_s)" 0) |" \
			"$(bl_fmt "$(bl_kv "$f" get_batch_p50_us)" 1) | $(bl_fmt "$(bl_kv "$f" get_batch_p99_us)" 1) |" \
			"$(bl_fmt "$(bl_kv "$f" put_batch_p50_us)" 1) | $(bl_fmt "$(bl_kv "$f" put_batch_p99_us)" 1) |" \
			"$(bl_kv "$f" put_soft_errors) | $(bl_kv "$f" errors) |"
	done
	echo
}

section_d() {
	local unique
	echo
	echo "## (d) Mooncake trace replay"
	echo
	if [ -z "${TRACE:-}" ] || [ ! -f "$TRACE" ]; then
		echo "Skipped: no trace file (set TRACE, or put shared/ beside the repo)."
		return 0
	fi
	bl_run "$BL_TMP/d-info.out" 60 "$BIN/lunar-bench" --trace "$TRACE" --block-size 64KiB \
		--simulate-only --capacity-ratio 0 || return 0
	unique=$(bl_kv "$BL_TMP/d-info.out" trace_unique_blocks)
	echo "\`$(basename "$TRACE")\`: $(bl_kv "$BL_TMP/d-info.out" trace_requests) requests,"
	echo "$(bl_kv "$BL_TMP/d-info.out" trace_blocks) blocks requested, $unique unique blocks of"
	echo "64 KiB. For each request in order: \`lunar_prefix_match\` over its blocks, read the"
	echo "matched ones (\`lunar_batch_get_into\`, every byte checked), put the rest"
	echo "(\`lunar_batch_put\`). A fresh standalone proxy per capacity, its segment exactly"
	echo "capacity × 64 KiB. hit ratio = blocks read / blocks requested; the LRU column is an"
	echo "exact LRU cache of the same capacity in blocks on the same trace with the same"
	echo "prefix semantics. Soft put errors are puts refused because the store was full."
	echo
	d_table d "" "Mooncake's defaults (\`--eviction-high-watermark-ratio 0.90 --eviction-ratio 0.05\`)"
	d_table dt "--eviction-high-watermark-ratio 1.0 --eviction-ratio 0.01" \
		"evicting on demand, in small rounds (\`--eviction-high-watermark-ratio 1.0 --eviction-ratio 0.01\`)"
	d_table df "--eviction-high-watermark-ratio 1.0 --eviction-ratio 0.001" \
		"evicting on demand, a few objects a round (\`--eviction-high-watermark-ratio 1.0 --eviction-ratio 0.001\`)"
	bl_cmds_flush
}

echo "# Lunar benchmarks"
echo
echo "Generated by \`bash tools/bench-all.sh$([ "$QUICK" -eq 1 ] && echo ' --quick')\`; every figure"
echo "below comes from the run that produced this file. \`\$TMP\` in the commands is the"
echo "run's temporary directory, \`\$MASTER\` the master's URL; \`lunar-bench\` prints its"
echo "configuration and one key=value line per figure (see \`lunar-bench --help\`)."
echo
bl_machine
if want a; then section_a; fi
if want b; then section_b; fi
if want c; then section_c; fi
if want d; then section_d; fi
if [ "$BL_FAILED" -gt 0 ]; then
	echo
	echo "**$BL_FAILED run(s) failed**; their cells show \`-\` (see the script's stderr)."
	exit 1
fi
