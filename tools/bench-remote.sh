#!/usr/bin/env bash
# bench-remote.sh - remote puts and gets against the wire, in one run, as a
# markdown section for docs/bench.md: `bash tools/bench-remote.sh > remote.md`.
# A lunar-master and two proxies on loopback: A contributes no memory, B a
# 2 GiB segment, the client runs on A, so every byte crosses B's data port.
# For each mode (keyed: a cluster key, every frame MAC'd and capability-
# checked; keyless: --insecure, no key), each size (4 KiB, 64 KiB, 1 MiB,
# 4 MiB) from 1 and 4 threads, on the app's own buffers (staged through
# liblunar's arena) and, at 1 and 4 MiB, on registered ones (--zero-copy,
# as engines register theirs): put and get GB/s, their share of plain TCP
# measured just before and just after each cell (lunar-bench
# --tcp-baseline, the better of its blocking and busy-poll styles, as many
# connections as threads; the share is against the two runs' mean): in a
# get's direction, SIZE-byte answers, for both (the baseline the goals
# name), and in a put's, SIZE-byte requests, for puts too, plain and with
# the per-byte work a put's sending side does before its send (the put's
# ceiling: --send staged or crc); and p50/p99, and the exists p50 (one
# master round trip through A, against which the put p50 is judged);
# then the batch calls engines make (lunar_batch_put and
# lunar_batch_get_into, BATCH keys a call, one thread) at 4 KiB, 64 KiB and
# 1 MiB. The modes' clusters run side by side, and each cell is measured
# for one mode right after the other, so they are compared at the same
# minutes. Placed as two nodes would be: the CPUs split in halves, A and its
# client on the first, B and the master on the second; the wire's
# client and server threads likewise. Unplaced, a proxy woken onto its
# peer's CPU takes turns with it, and a run's figures halve or not by that
# chance. With --rounds N, each cell of 1 MiB and more is measured N times,
# each time between two wire runs (the run after one round is the run
# before the next), and its row gives medians over the rounds: of each
# figure, of the wire beside each round, and of each round's share of it.
# Run from the repo root against $BUILD (default build).
#   --quick        fewer objects (noisy figures, for a smoke test)
#   --modes LIST   keyed,keyless (default both)
#   --rounds N     rounds of each cell of 1 MiB and more, 1..9 (default 1)
# Exit 1 if any run failed.
set -euo pipefail

cd "$(dirname "$0")/.."
. tools/bench/lib.sh

QUICK=0
MODES=keyed,keyless
ROUNDS=1
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--modes) MODES=$2; shift ;;
	--modes=*) MODES=${1#--modes=} ;;
	--rounds) ROUNDS=${2:-}; shift ;;
	--rounds=*) ROUNDS=${1#--rounds=} ;;
	-h | --help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) bl_log "bench-remote: unknown argument '$1'"; exit 2 ;;
	esac
	shift
done
case $ROUNDS in
[1-9]) ;;
*) bl_log "bench-remote: --rounds is 1..9, not '$ROUNDS'"; exit 2 ;;
esac

bl_need lunar-bench lunar-proxy lunar-master lunarctl
bl_init lunar-bench-remote

SIZES=(4KiB 64KiB 1MiB 4MiB)
THREADS=(1 4)
BATCH=16
ZC_SIZES=(1MiB 4MiB)
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
# tcp-TAG.out. Each round of a cell is measured between two of these: plain
# TCP on this machine drifts by a third between runs minutes apart (1 MiB
# p50 260 -> 370 us), and a share is fair only against the wire of its time.
# With SEND (staged or crc), also the put's ceiling into ceil-TAG.out: the
# put's direction with the sending side's per-byte work in front of each
# send, as a Lunar put of that kind has it on A's CPUs.
wire_run() {
	local tag=$1 size=$2 t=$3 send=${4:-}
	local -a server=()
	[ -z "$B_CPUS" ] || server=(--server-cpus "$B_CPUS")
	BL_CLIENT_CPUS=$A_CPUS bl_run "$BL_TMP/tcp-$tag.out" "$RUN_SECS" "$BIN/lunar-bench" \
		--tcp-baseline --size "$size" --threads "$t" "${server[@]}" || true
	[ -z "$send" ] ||
		BL_CLIENT_CPUS=$A_CPUS bl_run "$BL_TMP/ceil-$tag.out" "$RUN_SECS" "$BIN/lunar-bench" \
			--tcp-baseline --size "$size" --threads "$t" "${server[@]}" \
			--direction put --send "$send" || true
}

# rounds_of SIZE - how many rounds a cell of SIZE gets.
rounds_of() {
	case $1 in
	1MiB | 4MiB) echo "$ROUNDS" ;;
	*) echo 1 ;;
	esac
}

# median VALUE... - the median of the numbers given ("-" skipped; the mean
# of the middle two of an even count), or "-".
median() {
	printf '%s\n' "$@" | LC_ALL=C awk '$1 != "-" && $1 != ""' | LC_ALL=C sort -g |
		LC_ALL=C awk '{ v[NR] = $1 } END {
			if (!NR) print "-"
			else if (NR % 2) print v[(NR + 1) / 2]
			else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# wire_kv CELL KEY - the median of KEY over CELL's wire runs, or "-".
wire_kv() {
	local r n
	local -a v=()
	n=$(rounds_of "$(cell_size "$1")")
	for r in $(seq 0 "$n"); do
		v+=("$(bl_kv "$BL_TMP/tcp-$1-w$r.out" "$2")")
	done
	median "${v[@]}"
}

# cell_size CELL - the size in a cell's tag (MODE-KIND-SIZE-T).
cell_size() {
	local c=${1%-*}
	echo "${c##*-}"
}

# round_wire CELL R [put_ [ceil]] - the wire beside round R of CELL, in
# GB/s: of the runs just before and just after it, the mean of each receive
# style, and the better of the two; in a get's direction or (put_) a put's,
# and (ceil) of the put's ceiling.
round_wire() {
	local d=${3:-} w=${4:-tcp}
	local b=$BL_TMP/$w-$1-w$(($2 - 1)).out a=$BL_TMP/$w-$1-w$2.out
	LC_ALL=C awk -v bb="$(bl_kv "$b" "tcp_${d}blocking_gbps")" \
		-v ab="$(bl_kv "$a" "tcp_${d}blocking_gbps")" \
		-v bp="$(bl_kv "$b" "tcp_${d}busypoll_gbps")" \
		-v ap="$(bl_kv "$a" "tcp_${d}busypoll_gbps")" '
		function mean(x, y) { return x == "-" || y == "-" ? 0 : (x + y) / 2 }
		BEGIN { s = mean(bb, ab); p = mean(bp, ap); w = s > p ? s : p
			if (w > 0) print w; else print "-" }'
}

# cell_sum TAG - TAG.out from TAG's rounds: the median of each figure, of
# the wire beside each round (wire_gbps, put_wire_gbps) and of each round's
# share of it (get_share, put_share; put_pshare of the put wire,
# put_cshare of the put's ceiling); errors summed.
cell_sum() {
	local tag=$1 r n k f w pw cw e=0
	local -a v=() ws=() pws=() cws=() gs=() ps=() pps=() cps=()
	n=$(rounds_of "$(cell_size "$tag")")
	for k in put_gb_per_s get_gb_per_s put_p50_us put_p99_us get_p50_us get_p99_us exists_p50_us; do
		v=()
		for r in $(seq 1 "$n"); do
			v+=("$(bl_kv "$BL_TMP/$tag-r$r.out" "$k")")
		done
		echo "$k=$(median "${v[@]}")"
	done >"$BL_TMP/$tag.out"
	for r in $(seq 1 "$n"); do
		f=$BL_TMP/$tag-r$r.out
		w=$(round_wire "$tag" "$r")
		pw=$(round_wire "$tag" "$r" put_)
		cw=$(round_wire "$tag" "$r" put_ ceil)
		ws+=("$w")
		pws+=("$pw")
		cws+=("$cw")
		gs+=("$(bl_div "$(bl_kv "$f" get_gb_per_s)" "$w" 4)")
		ps+=("$(bl_div "$(bl_kv "$f" put_gb_per_s)" "$w" 4)")
		pps+=("$(bl_div "$(bl_kv "$f" put_gb_per_s)" "$pw" 4)")
		cps+=("$(bl_div "$(bl_kv "$f" put_gb_per_s)" "$cw" 4)")
		k=$(bl_kv "$f" errors)
		if [ "$k" = - ] || [ "$e" = - ]; then e=-; else e=$((e + k)); fi
	done
	{
		echo "errors=$e"
		echo "wire_gbps=$(median "${ws[@]}")"
		echo "put_wire_gbps=$(median "${pws[@]}")"
		echo "get_share=$(median "${gs[@]}")"
		echo "put_share=$(median "${ps[@]}")"
		echo "put_pshare=$(median "${pps[@]}")"
		echo "ceil_gbps=$(median "${cws[@]}")"
		echo "put_cshare=$(median "${cps[@]}")"
	} >>"$BL_TMP/$tag.out"
}

# The sizes of a kind of cell: staged (the app's own buffers, copied
# through liblunar's arena) at every size; registered (--zero-copy, values
# and get buffers in lunar_alloc memory, as engines register theirs) at the
# sizes of KV blocks.
kind_sizes() {
	if [ "$1" = zc ]; then echo "${ZC_SIZES[@]}"; else echo "${SIZES[@]}"; fi
}

# A's socket in MODE's cluster.
sock_of() {
	echo "$BL_TMP/$1-a.sock"
}

# One cell, each round between two wire runs: MODE KIND SIZE T.
cell() {
	local mode=$1 kind=$2 size=$3 t=$4 tag=$1-$2-$3-$4 r send=staged
	local -a zc=()
	[ "$kind" = zc ] && zc=(--zero-copy) && send=crc
	wire_run "$tag-w0" "$size" "$t" "$send"
	for r in $(seq 1 "$(rounds_of "$size")"); do
		bl_run "$BL_TMP/$tag-r$r.out" "$RUN_SECS" "$BIN/lunar-bench" \
			--socket "$(sock_of "$mode")" --size "$size" --count "${COUNT[$size]}" \
			--threads "$t" "${zc[@]}" --baseline-size 0 --check sampled || true
		wire_run "$tag-w$r" "$size" "$t" "$send"
	done
	cell_sum "$tag"
}

# One mode's cluster: a master, A (no segment) and B (2 GiB), warmed up.
start_mode() {
	local mode=$1 sa sb=$BL_TMP/$1-b.sock
	local -a key=(--insecure)
	sa=$(sock_of "$mode")
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
}

# Every cell, the modes' side by side: both clusters run (idle but for the
# one measured), and each cell of one mode is followed by the same cell of
# the next, so the modes are compared at the same minutes.
run_all() {
	local mode kind size t
	for mode in ${MODES//,/ }; do
		start_mode "$mode"
	done
	sleep 1
	for kind in staged zc; do
		for size in $(kind_sizes "$kind"); do
			for t in "${THREADS[@]}"; do
				for mode in ${MODES//,/ }; do
					cell "$mode" "$kind" "$size" "$t"
				done
			done
		done
	done
	for size in "${BATCH_SIZES[@]}"; do
		for mode in ${MODES//,/ }; do
			bl_run "$BL_TMP/$mode-$size-batch.out" "$RUN_SECS" "$BIN/lunar-bench" \
				--socket "$(sock_of "$mode")" --size "$size" --count "${COUNT[$size]}" \
				--batch "$BATCH" --baseline-size 0 --check sampled || true
		done
	done
	bl_stop_all
}

# The batch calls of one mode, one thread, against the one-connection wire.
batch_table() {
	local mode=$1 f size wire pwire
	echo
	echo "$mode, $BATCH keys a call (latencies are the call's; wire: the one beside"
	echo "the one-thread staged cell of the same size):"
	echo
	echo "| size | put GB/s | put / wire | put / put wire | get GB/s | get / wire | put call p50 µs | get call p50 µs | errors |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for size in "${BATCH_SIZES[@]}"; do
		f=$BL_TMP/$mode-$size-batch.out
		wire=$(bl_kv "$BL_TMP/$mode-staged-$size-1.out" wire_gbps)
		pwire=$(bl_kv "$BL_TMP/$mode-staged-$size-1.out" put_wire_gbps)
		echo "| $size | $(bl_fmt "$(bl_kv "$f" put_gb_per_s)" 2) |" \
			"$(bl_div "$(bl_kv "$f" put_gb_per_s)" "$wire" 2) |" \
			"$(bl_div "$(bl_kv "$f" put_gb_per_s)" "$pwire" 2) |" \
			"$(bl_fmt "$(bl_kv "$f" get_gb_per_s)" 2) |" \
			"$(bl_div "$(bl_kv "$f" get_gb_per_s)" "$wire" 2) |" \
			"$(bl_fmt "$(bl_kv "$f" put_p50_us)" 1) | $(bl_fmt "$(bl_kv "$f" get_p50_us)" 1) |" \
			"$(bl_kv "$f" errors) |"
	done
}

# One direction's columns of the wire table: GB/s of both styles (medians
# over the cell's wire runs), and the blocking p50 first -> last.
wire_styles() {
	local c=$1 d=$2
	echo "$(bl_fmt "$(wire_kv "$c" "tcp_${d}blocking_gbps")" 2) |" \
		"$(bl_fmt "$(wire_kv "$c" "tcp_${d}busypoll_gbps")" 2) |" \
		"$(bl_fmt "$(bl_kv "$BL_TMP/tcp-$c-w0.out" "tcp_${d}blocking_p50_us")" 1) ->" \
		"$(bl_fmt "$(bl_kv "$BL_TMP/tcp-$c-w$(rounds_of "$(cell_size "$c")").out" \
			"tcp_${d}blocking_p50_us")" 1) |"
}

# The wire beside each cell of a mode: the runs before and after it.
wire_table() {
	local mode=$1 kind size t c
	echo
	echo "The wire beside each cell (GB/s: the median of its runs, one before the"
	echo "cell and one after each round; p50: first -> last run), in a get's"
	echo "direction and in a put's:"
	echo
	echo "| cell | size | threads | blocking GB/s | busy-poll GB/s | p50 µs | put: blocking GB/s | busy-poll GB/s | p50 µs |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for kind in staged zc; do
		for size in $(kind_sizes "$kind"); do
			for t in "${THREADS[@]}"; do
				c=$mode-$kind-$size-$t
				echo "| $kind | $size | $t | $(wire_styles "$c" "")" \
					"$(wire_styles "$c" put_)"
			done
		done
	done
}

# A mode's cells of one kind against their wire.
table() {
	local mode=$1 kind=$2 f size t
	echo
	echo "| size | threads | wire GB/s | put GB/s | put / wire | put wire GB/s | put / put wire | put ceiling GB/s | put / ceiling | get GB/s | get / wire | put p50 µs | put p99 µs | get p50 µs | get p99 µs | exists p50 µs | errors |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	for size in $(kind_sizes "$kind"); do
		for t in "${THREADS[@]}"; do
			f=$BL_TMP/$mode-$kind-$size-$t.out
			echo "| $size | $t | $(bl_fmt "$(bl_kv "$f" wire_gbps)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" put_gb_per_s)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" put_share)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" put_wire_gbps)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" put_pshare)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" ceil_gbps)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" put_cshare)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" get_gb_per_s)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" get_share)" 2) |" \
				"$(bl_fmt "$(bl_kv "$f" put_p50_us)" 1) | $(bl_fmt "$(bl_kv "$f" put_p99_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" get_p50_us)" 1) | $(bl_fmt "$(bl_kv "$f" get_p99_us)" 1) |" \
				"$(bl_fmt "$(bl_kv "$f" exists_p50_us)" 1) |" \
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
if [ "$ROUNDS" -gt 1 ]; then
	echo "Cells of 1 MiB and 4 MiB: $ROUNDS rounds each, each between two wire runs (the"
	echo "run after one round is the run before the next); their rows give the medians"
	echo "over the rounds of each figure, of the wire beside each round, and of each"
	echo "round's share of it."
fi
echo "\"put wire\": the same in a put's direction, the client sending a 16-byte"
echo "header and SIZE bytes, the server answering 16 bytes once they are in."
echo "\"put ceiling\": the put wire with the per-byte work a put's sending side does"
echo "before its send (\`--send staged\`: a copy taking the CRC32C into a buffer of"
echo "the sender's, as the client's into its arena; \`--send crc\` for registered"
echo "cells: a CRC32C pass), run beside the wire: the most a put can reach here."
if [ -n "$A_CPUS" ]; then
	echo "Placed as two nodes: A and its client on CPUs $A_CPUS, B and the master on"
	echo "$B_CPUS; the wire's clients on $A_CPUS, its servers on $B_CPUS."
fi
echo "Both modes' clusters run side by side; each cell is measured for one mode"
echo "right after the other."
echo "4 KiB rows: the p50/p99 columns are the latency figures. Each run puts its"
echo "keys, asks whether each exists, then gets each: an exists is one master round"
echo "trip from the app through A (the replica-list lookup that leases the key to A), a"
echo "get one data round trip (A's lease cache holds the key's replicas by then),"
echo "so a put's p50 is measured against the sum of the two p50s beside it."
run_all
for mode in ${MODES//,/ }; do
	echo
	echo "### $mode"
	wire_table "$mode"
	echo
	echo "Staged: lunar_put and lunar_get_into on the app's own buffers."
	table "$mode" staged
	echo
	echo "Registered (\`--zero-copy\`): values and get buffers in lunar_alloc memory,"
	echo "as engines register theirs; no copy through the arena."
	table "$mode" zc
	batch_table "$mode"
done
bl_cmds_flush
[ "$BL_FAILED" -eq 0 ]
