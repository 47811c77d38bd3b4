#!/usr/bin/env bash
# bench-remote.sh - remote puts and gets against the wire, in one run, as a
# markdown section for docs/bench.md: `bash tools/bench-remote.sh > remote.md`.
# A lunar-master and two proxies on loopback: A contributes no memory, B a
# 2 GiB segment, the client runs on A, so every byte crosses B's data port.
# For each mode (keyed: a cluster key, every frame MAC'd and capability-
# checked; keyless: --insecure, no key) and each size (4 KiB, 64 KiB, 1 MiB,
# 4 MiB) from 1 and 4 threads: put and get GB/s, and their share of plain
# TCP measured in the same run (lunar-bench --tcp-baseline, the better of
# its blocking and busy-poll styles, as many connections as threads), and
# 4 KiB p50/p99 (the wire measured just before and just after each cell,
# the share against their mean); then the batch calls engines make (lunar_batch_put and
# lunar_batch_get_into, BATCH keys a call, one thread) at 4 KiB, 64 KiB and
# 1 MiB. Placed as two nodes would be: the CPUs split in halves, A and its
# client on the first, B and the master on the second; the wire's
# client and server threads likewise. Unplaced, a proxy woken onto its
# peer's CPU takes turns with it, and a run's figures halve or not by that
# chance. Run from the repo root against $BUILD (default build).
#   --quick        fewer objects (noisy figures, for a smoke test)
#   --modes LIST   keyed,keyless (default both)
# Exit 1 if any run failed.
set -euo pipefail

cd "$(dirname "$0")/.."
. tools/bench/lib.sh

QUICK=0
MODES=keyed,keyless
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--modes) MODES=$2; shift ;;
	--modes=*) MODES=${1#--modes=} ;;
	-h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) bl_log "bench-remote: unknown argument '$1'"; exit 2 ;;
	esac
	shift
done

bl_need lunar-bench lunar-proxy lunar-master lunarctl
bl_init lunar-bench-remote

SIZES=(4KiB 64KiB 1MiB 4MiB)
THREADS=(1 4)
BATCH=16
BATCH_SIZES=(4KiB 64KiB 1MiB)
declare -A COUNT=([4KiB]=5000 [64KiB]=4000 [1MiB]=1400 [4MiB]=360)
if [ "$QUICK" -eq 1 ]; then
	COUNT=([4KiB]=1000 [64KiB]=800 [1MiB]=300 [4MiB]=80)
fi
RUN_SECS=600
# Node A's CPUs and node B's, as taskset lists; both empty on one CPU.
NCPU=$(nproc)
A_CPUS= B_CPUS=
if [ "$NCPU" -ge 2 ]; then
	A_CPUS=0-$((NCPU / 2 - 1))
	B_CPUS=$((NCPU / 2))-$((NCPU - 1))
fi

# The wire at one size and thread count, placed as the nodes are, into
# tcp-TAG.out. Each cell of a mode is measured between two of these: plain
# TCP on this machine drifts by a third between runs minutes apart (1 MiB
# p50 260 -> 370 us), and a share is fair only against the wire of its time.
wire_run() {
	local tag=$1 size=$2 t=$3
	local -a server=()
	[ -z "$B_CPUS" ] || server=(--server-cpus "$B_CPUS")
	BL_CLIENT_CPUS=$A_CPUS bl_run "$BL_TMP/tcp-$tag.out" "$RUN_SECS" "$BIN/lunar-bench" \
		--tcp-baseline --size "$size" --threads "$t" "${server[@]}" || true
}

# wire_kv MODE SIZE T KEY - the mean of KEY in the runs before and after
# the cell, or "-".
wire_kv() {
	local f=$BL_TMP/tcp-$1-$2-$3
	awk -v a="$(bl_kv "$f-before.out" "$4")" -v b="$(bl_kv "$f-after.out" "$4")" \
		'BEGIN { if (a == "-" || b == "-") print "-"; else print (a + b) / 2 }'
}

# The wire beside a cell: the better of the two receive styles, in GB/s.
wire_gbps() {
	awk -v a="$(wire_kv "$1" "$2" "$3" tcp_blocking_gbps)" \
		-v b="$(wire_kv "$1" "$2" "$3" tcp_busypoll_gbps)" \
		'BEGIN { if (a == "-") a = 0; if (b == "-") b = 0; print (a > b ? a : b) }'
}

# One mode: a master, A (no segment) and B (2 GiB), every size and thread count.
run_mode() {
	local mode=$1 sa=$BL_TMP/$1-a.sock sb=$BL_TMP/$1-b.sock size t
	local -a key=(--insecure)
	if [ "$mode" = keyed ]; then
		"$BIN/lunarctl" keygen "$BL_TMP/cluster.key" >/dev/null
		key=(--cluster-key "$BL_TMP/cluster.key")
	fi
	# The master on B's CPUs, off the client's node as on a cluster: left
	# anywhere, its threads hop between the two and a 4 KiB put's p50
	# went 160 -> 235 us by that chance alone.
	BL_SERVER_CPUS=$B_CPUS bl_start_master "master-$mode" "${key[@]}"
	# A removes what the runs put: a keyed master takes removals from ADMIN
	# sessions only.
	local -a admin=()
	[ "$mode" = keyed ] && admin=(--admin-calls)
	BL_SERVER_CPUS=$A_CPUS bl_start_proxy "proxy-$mode-a" "$sa" "${key[@]}" "${admin[@]}" \
		--master "$BL_MASTER_URL" --segment-size 0
	BL_SERVER_CPUS=$B_CPUS bl_start_proxy "proxy-$mode-b" "$sb" "${key[@]}" \
		--master "$BL_MASTER_URL" --segment-size 2GiB
	BL_CLIENT_CPUS=$A_CPUS
	# Warm up, as a node that has run a while: puts right after a start
	# find no reservation at hand yet and take the two master calls.
	bl_run "$BL_TMP/$mode-warm-up.out" "$RUN_SECS" "$BIN/lunar-bench" --socket "$sa" \
		--size 4KiB --count 500 --baseline-size 0 --check sampled || true
	sleep 1
	for size in "${SIZES[@]}"; do
		for t in "${THREADS[@]}"; do
			wire_run "$mode-$size-$t-before" "$size" "$t"
			bl_run "$BL_TMP/$mode-$size-$t.out" "$RUN_SECS" "$BIN/lunar-bench" --socket "$sa" \
				--size "$size" --count "${COUNT[$size]}" --threads "$t" \
				--baseline-size 0 --check sampled || true
			wire_run "$mode-$size-$t-after" "$size" "$t"
		done
	done
	for size in "${BATCH_SIZES[@]}"; do
		bl_run "$BL_TMP/$mode-$size-batch.out" "$RUN_SECS" "$BIN/lunar-bench" --socket "$sa" \
			--size "$size" --count "${COUNT[$size]}" --batch "$BATCH" \
			--baseline-size 0 --check sampled || true
	done
	bl_stop_all
}

# The batch calls of one mode, one thread, against the one-connection wire.
batch_table() {
	local mode=$1 f size wire
	echo
	echo "$mode, $BATCH keys a call (latencies are the call's):"
	echo
	echo "| size | put GB/s | put / wire | get GB/s | get / wire | put call p50 µs | get call p50 µs | errors |"
	echo "|---|---|---|---|---|---|---|---|"
	for size in "${BATCH_SIZES[@]}"; do
		f=$BL_TMP/$mode-$size-batch.out
		wire=$(wire_gbps "$mode" "$size" 1)
		echo "| $size | $(bl_fmt "$(bl_kv "$f" put_gb_per_s)" 2) |" \
			"$(bl_div "$(bl_kv "$f" put_gb_per_s)" "$wire" 2) |" \
			"$(bl_fmt "$(bl_kv "$f" get_gb_per_s)" 2) |" \
			"$(bl_div "$(bl_kv "$f" get_gb_per_s)" "$wire" 2) |" \
			"$(bl_fmt "$(bl_kv "$f" put_p50_us)" 1) | $(bl_fmt "$(bl_kv "$f" get_p50_us)" 1) |" \
			"$(bl_kv "$f" errors) |"
	done
}

# The wire beside each cell of a mode: the runs before and after it.
wire_table() {
	local mode=$1 size t f
	echo
	echo "The wire beside each cell (GB/s: the mean of the runs just before and just"
	echo "after it; p50: before -> after):"
	echo
	echo "| size | threads | blocking GB/s | busy-poll GB/s | p50 µs |"
	echo "|---|---|---|---|---|"
	for size in "${SIZES[@]}"; do
		for t in "${THREADS[@]}"; do
			f=$BL_TMP/tcp-$mode-$size-$t
			echo "| $size | $t | $(bl_fmt "$(wire_kv "$mode" "$size" "$t" tcp_blocking_gbps)" 2) |" \
				"$(bl_fmt "$(wire_kv "$mode" "$size" "$t" tcp_busypoll_gbps)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f-before.out" tcp_blocking_p50_us)" 1) ->" \
				"$(bl_fmt "$(bl_kv "$f-after.out" tcp_blocking_p50_us)" 1) |"
		done
	done
}

table() {
	local mode=$1 f size t wire
	echo
	echo "### $mode"
	wire_table "$mode"
	echo
	echo "| size | threads | wire GB/s | put GB/s | put / wire | get GB/s | get / wire | put p50 µs | put p99 µs | get p50 µs | get p99 µs | errors |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for size in "${SIZES[@]}"; do
		for t in "${THREADS[@]}"; do
			f=$BL_TMP/$mode-$size-$t.out
			wire=$(wire_gbps "$mode" "$size" "$t")
			echo "| $size | $t | $(bl_fmt "$wire" 2) | $(bl_fmt "$(bl_kv "$f" put_gb_per_s)" 2) |" \
				"$(bl_div "$(bl_kv "$f" put_gb_per_s)" "$wire" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" get_gb_per_s)" 2) |" \
				"$(bl_div "$(bl_kv "$f" get_gb_per_s)" "$wire" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" put_p50_us)" 1) | $(bl_fmt "$(bl_kv "$f" put_p99_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" get_p50_us)" 1) | $(bl_fmt "$(bl_kv "$f" get_p99_us)" 1) |" \
				"$(bl_kv "$f" errors) |"
		done
	done
}

echo "## Remote transfers against the wire"
echo
echo "\`lunar-master\` and two proxies on loopback; A has no segment, B 2 GiB; the client"
echo "runs on A, so every put and get crosses B's data port. wire: plain TCP in the same"
echo "run, just before and just after each cell (\`lunar-bench --tcp-baseline\`: 16-byte"
echo "request, SIZE-byte answer from a cold 256 MiB set into a cold set, 8 MiB socket"
echo "buffers, TCP_NODELAY; the mean of the two runs, the better of"
echo "blocking MSG_WAITALL and busy-poll receive; one connection per thread)."
if [ -n "$A_CPUS" ]; then
	echo "Placed as two nodes: A and its client on CPUs $A_CPUS, B and the master on"
	echo "$B_CPUS; the wire's clients on $A_CPUS, its servers on $B_CPUS."
fi
echo "4 KiB rows: the p50/p99 columns are the latency figures."
for mode in ${MODES//,/ }; do
	run_mode "$mode"
	table "$mode"
	batch_table "$mode"
done
bl_cmds_flush
[ "$BL_FAILED" -eq 0 ]
