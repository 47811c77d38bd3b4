#!/usr/bin/env bash
# bench-vs-peers.sh - Lunar next to Redis and memcached on this node, all over
# UNIX sockets: SET/GET (put/get) of 4 KiB, 64 KiB and 1 MiB values from 1 and 8
# clients. Redis is driven by redis-benchmark, memcached by our memc-bench
# (ASCII protocol), Lunar by lunar-bench against a standalone proxy, from
# registered memory (the table with the ratios) and from ordinary memory
# through the staging arena (a second table). Lunar's C clients are C
# threads of one client, each with one call in flight, and, for C > 1, also
# one thread keeping C calls in flight (lunar-bench --depth C, the
# asynchronous calls: redis-benchmark likewise drives its C connections from
# one thread); the ratios take the better of the two (a table shows both).
# redis-benchmark checks no value
# it reads; memc-bench and lunar-bench run with --check sampled: their get
# phases compare a few words of each value, and a verify phase after them
# gets every value again and compares every byte (its rates: a third
# table). Both count only the time in calls, never the compares.
# Prints markdown tables with ops/s and the ratios lunar/redis and
# lunar/memcached. Runs ROUNDS rounds (default 3),
# each starting every system afresh and driving it through every cell, one
# system after the other; each figure is the median over the rounds, so one
# slow spell of a shared machine does not decide a cell.
# Every system runs in each placement of PLACEMENTS (default "shared own";
# "shared" alone on one CPU): shared, server and clients wherever the
# scheduler puts them; own, the server confined to the last CPU and its
# clients to the others (a sidecar given a CPU of its own). The first
# tables take, for each system and cell, the better of its placements; the
# tables of each placement follow. Installs redis-server, redis-tools and
# memcached with apt-get when missing and run as root. Each cell ~1-2 s, a
# round ~1 min per placement.
# Run from anywhere: bash tools/bench-vs-peers.sh [> peers.md]. Env: BUILD,
# ROUNDS, PLACEMENTS.
set -euo pipefail

cd "$(dirname "$0")/.."
. tools/bench/lib.sh

SIZES=(4KiB 64KiB 1MiB)
CLIENTS=(1 8)
declare -A BYTES=([4KiB]=4096 [64KiB]=65536 [1MiB]=1048576)
declare -A COUNT=([4KiB]=100000 [64KiB]=25000 [1MiB]=1000)
CELL_SECS=120
ROUNDS=${ROUNDS:-3}
case $ROUNDS in
'' | *[!0-9]* | 0) echo "bench-vs-peers: ROUNDS must be a positive number" >&2; exit 2 ;;
esac
# The CPUs this script may use, in order (its Cpus_allowed_list expanded).
mapfile -t CPUS < <(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status |
	tr ',' '\n' | awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }')
if [ "${#CPUS[@]}" -ge 2 ] && command -v taskset >/dev/null; then
	read -r -a PLACEMENTS <<<"${PLACEMENTS:-shared own}"
else
	read -r -a PLACEMENTS <<<"${PLACEMENTS:-shared}"
fi
[ "${#PLACEMENTS[@]}" -gt 0 ] || { echo "bench-vs-peers: PLACEMENTS is empty" >&2; exit 2; }
for p in "${PLACEMENTS[@]}"; do
	case $p in
	shared) ;;
	own)
		[ "${#CPUS[@]}" -ge 2 ] || { echo "bench-vs-peers: own needs 2 CPUs" >&2; exit 2; }
		command -v taskset >/dev/null || { echo "bench-vs-peers: own needs taskset" >&2; exit 2; }
		;;
	*) echo "bench-vs-peers: PLACEMENTS: shared and/or own, not $p" >&2; exit 2 ;;
	esac
done

install_peers() {
	local missing=()
	command -v redis-server >/dev/null || missing+=(redis-server)
	command -v redis-benchmark >/dev/null || missing+=(redis-tools)
	command -v memcached >/dev/null || missing+=(memcached)
	[ "${#missing[@]}" -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
		bl_log "bench-vs-peers: missing ${missing[*]}; install them (apt-get as root)"
		exit 1
	fi
	bl_log "bench-vs-peers: installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
}

wait_sock() {
	for _ in $(seq 100); do
		[ -S "$1" ] && return 0
		kill -0 "$BL_PID" 2>/dev/null || break
		sleep 0.1
	done
	bl_log "bench-vs-peers: $1 did not appear"
	return 1
}

# redis-benchmark --csv: "test","rps",... ; the rps of test $2 in file $1.
redis_rps() {
	sed -n "s/^\"$2\",\"\([0-9.]*\)\".*/\1/p" "$1" 2>/dev/null | head -n 1 || true
}

# redis-benchmark --csv p50 in ms -> µs.
redis_p50_us() {
	awk -F'","' -v t="\"$2" '$1 == t { gsub(/"/, "", $5); printf "%.1f", $5 * 1000 }' "$1" 2>/dev/null || printf -- '-'
}

# median V... - the median of the numbers given ("-" and empty ones left
# out; of an even count, the lower middle one), or "-".
median() {
	printf '%s\n' "$@" | awk '$1 != "-" && $1 != ""' | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
}

# rounds PATTERN FN ARGS... - FN FILE ARGS for each round's FILE (PATTERN with
# @ for the round number), one result a line.
rounds() {
	local pat=$1 fn=$2 r
	shift 2
	for r in $(seq "$ROUNDS"); do
		"$fn" "${pat/@/$r}" "$@"
		echo
	done
}

# place P - run what follows in placement P (BL_SERVER_CPUS, BL_CLIENT_CPUS):
# own, the server on the last CPU (on an SMT machine perhaps a sibling of a
# client's), its clients on the others.
place() {
	local rest

	BL_SERVER_CPUS= BL_CLIENT_CPUS=
	if [ "$1" = own ]; then
		rest=("${CPUS[@]:0:${#CPUS[@]}-1}")
		BL_SERVER_CPUS=${CPUS[-1]}
		BL_CLIENT_CPUS=$(IFS=,; echo "${rest[*]}")
	fi
}

# One round in placement P: each system started afresh and driven through
# every cell, one system after the other; files $P-SYSTEM-SIZE-CLIENTS-R.out.
run_round() {
	local r=$1 p=$2 size c sock=$BL_TMP/lunar.sock
	local memc=(memcached -s "$BL_TMP/memc.sock" -m 4096 -I 8m -t 4)

	# Redis: no persistence, UNIX socket only.
	rm -f "$BL_TMP/redis.sock"
	bl_spawn "$BL_TMP/redis.log" redis-server --port 0 --unixsocket "$BL_TMP/redis.sock" \
		--save '' --appendonly no --daemonize no
	wait_sock "$BL_TMP/redis.sock"
	for size in "${SIZES[@]}"; do
		for c in "${CLIENTS[@]}"; do
			bl_run "$BL_TMP/$p-redis-$size-$c-$r.out" "$CELL_SECS" redis-benchmark \
				-s "$BL_TMP/redis.sock" -t set,get -d "${BYTES[$size]}" -c "$c" \
				-n "${COUNT[$size]}" -P 1 --csv || true
		done
	done
	bl_stop_all

	# memcached: -I raises the largest item (default 1 MiB, which a 1 MiB
	# value plus its header would exceed).
	[ "$(id -u)" -eq 0 ] && memc+=(-u root)
	rm -f "$BL_TMP/memc.sock"
	bl_spawn "$BL_TMP/memc.log" "${memc[@]}"
	wait_sock "$BL_TMP/memc.sock"
	for size in "${SIZES[@]}"; do
		for c in "${CLIENTS[@]}"; do
			bl_run "$BL_TMP/$p-memc-$size-$c-$r.out" "$CELL_SECS" "$BIN/memc-bench" --socket \
				"$BL_TMP/memc.sock" --size "$size" --count "${COUNT[$size]}" \
				--threads "$c" --check sampled || true
		done
	done
	bl_stop_all

	rm -f "$sock"
	bl_start_proxy proxy "$sock" --embedded-master --segment-size 2GiB
	for size in "${SIZES[@]}"; do
		for c in "${CLIENTS[@]}"; do
			bl_run "$BL_TMP/$p-lunar-$size-$c-$r.out" "$CELL_SECS" "$BIN/lunar-bench" \
				--socket "$sock" --size "$size" --count "${COUNT[$size]}" --threads "$c" \
				--baseline-size 0 --zero-copy --check sampled || true
			bl_run "$BL_TMP/$p-staged-$size-$c-$r.out" "$CELL_SECS" "$BIN/lunar-bench" \
				--socket "$sock" --size "$size" --count "${COUNT[$size]}" --threads "$c" \
				--baseline-size 0 --check sampled || true
			[ "$c" -gt 1 ] || continue
			bl_run "$BL_TMP/$p-inflight-$size-$c-$r.out" "$CELL_SECS" "$BIN/lunar-bench" \
				--socket "$sock" --size "$size" --count "${COUNT[$size]}" --threads 1 \
				--depth "$c" --baseline-size 0 --zero-copy --check sampled || true
		done
	done
	bl_stop_all
}

# max A B - the larger number, "-" counting as none.
max() {
	LC_ALL=C awk -v a="$1" -v b="$2" \
		'BEGIN { if (a == "-") print b; else if (b == "-" || a + 0 >= b + 0) print a; else print b }'
}

# fig PATTERN FN ARGS... - the figure FN FILE ARGS over the rounds of
# PATTERN's runs (PLACE in it standing for the placement): the median of
# the rounds in placement PICK, or with PICK=best the highest such median
# over PLACEMENTS.
fig() {
	local pat=$1 p best=-
	shift
	if [ "$PICK" != best ]; then
		median $(rounds "${pat/PLACE/$PICK}" "$@")
		return
	fi
	for p in "${PLACEMENTS[@]}"; do
		best=$(max "$best" "$(median $(rounds "${pat/PLACE/$p}" "$@"))")
	done
	echo "$best"
}

# each_cell FN KIND... - FN SIZE CLIENTS R M L... for every cell: R, M and
# L... the file patterns (for fig) of Redis, memcached and Lunar's runs of
# each KIND (lunar: from registered memory, a call in flight per thread;
# inflight: from registered memory, one thread with CLIENTS in flight;
# staged: through the staging arena).
each_cell() {
	local fn=$1 size c k l
	shift

	for size in "${SIZES[@]}"; do
		for c in "${CLIENTS[@]}"; do
			l=()
			for k in "$@"; do
				l+=("$BL_TMP/PLACE-$k-$size-$c-@.out")
			done
			"$fn" "$size" "$c" "$BL_TMP/PLACE-redis-$size-$c-@.out" \
				"$BL_TMP/PLACE-memc-$size-$c-@.out" "${l[@]}"
		done
	done
}

# figs KEY L... - the better of fig L bl_kv KEY over the patterns L.
figs() {
	local key=$1 l best=-
	shift
	for l in "$@"; do
		best=$(max "$best" "$(fig "$l" bl_kv "$key")")
	done
	echo "$best"
}

# gbps OPS SIZE - OPS values of SIZE a second, in GB/s.
gbps() {
	bl_div "$(LC_ALL=C awk -v n="$1" -v b="${BYTES[$2]}" \
		'BEGIN { if (n == "-") print "-"; else print n * b }')" 1000000000 2
}

# ratio_row SIZE CLIENTS R M L... - throughput next to the peers, Lunar's
# the better of its runs L...
ratio_row() {
	local r=$3 m=$4 rs rg ms mg ls lg

	rs=$(fig "$r" redis_rps SET)
	rg=$(fig "$r" redis_rps GET)
	ms=$(fig "$m" bl_kv set_ops_per_s)
	mg=$(fig "$m" bl_kv get_ops_per_s)
	ls=$(figs put_ops_per_s "${@:5}")
	lg=$(figs get_ops_per_s "${@:5}")
	echo "| $1 | $2 | $(bl_fmt "$rs" 0) | $(bl_fmt "$ms" 0) | $(bl_fmt "$ls" 0) |" \
		"$(gbps "$ls" "$1") |" \
		"$(bl_div "$ls" "$rs" 2) | $(bl_div "$ls" "$ms" 2) | $(bl_fmt "$rg" 0) |" \
		"$(bl_fmt "$mg" 0) | $(bl_fmt "$lg" 0) |" \
		"$(gbps "$lg" "$1") |" \
		"$(bl_div "$lg" "$rg" 2) | $(bl_div "$lg" "$mg" 2) |"
}

# forms_row SIZE CLIENTS R M L A - Lunar's two ways of keeping CLIENTS
# calls in flight: L, a thread each; A, one thread (clients > 1 only).
forms_row() {
	[ "$2" -gt 1 ] || return 0
	echo "| $1 | $2 | $(bl_fmt "$(fig "$5" bl_kv put_ops_per_s)" 0) |" \
		"$(bl_fmt "$(fig "$6" bl_kv put_ops_per_s)" 0) |" \
		"$(bl_fmt "$(fig "$5" bl_kv get_ops_per_s)" 0) |" \
		"$(bl_fmt "$(fig "$6" bl_kv get_ops_per_s)" 0) |"
}

forms_table() {
	echo "| size | clients | put/s, a thread each | put/s, one thread | get/s, a thread each | get/s, one thread |"
	echo "|---|---|---|---|---|---|"
	each_cell forms_row lunar inflight
}

# ratio_table KIND... - the throughput table of Lunar's runs of the better KIND.
ratio_table() {
	echo "| size | clients | redis SET/s | memcached set/s | lunar put/s | lunar put GB/s | lunar/redis put | lunar/memcached put | redis GET/s | memcached get/s | lunar get/s | lunar get GB/s | lunar/redis get | lunar/memcached get |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	each_cell ratio_row "$@"
}

# verify_row SIZE CLIENTS R M L - gets with every byte compared after each
# call (the verify phases) next to Redis's GET, which compares none.
verify_row() {
	local rg mv lv

	rg=$(fig "$3" redis_rps GET)
	mv=$(fig "$4" bl_kv verify_ops_per_s)
	lv=$(fig "$5" bl_kv verify_ops_per_s)
	echo "| $1 | $2 | $(bl_fmt "$rg" 0) | $(bl_fmt "$mv" 0) | $(bl_fmt "$lv" 0) |" \
		"$(bl_div "$lv" "$rg" 2) | $(bl_div "$lv" "$mv" 2) |"
}

verify_table() {
	echo "| size | clients | redis GET/s | memcached get/s, checked | lunar get/s, checked | lunar/redis get | lunar/memcached get |"
	echo "|---|---|---|---|---|---|---|"
	each_cell verify_row lunar
}

# p50_row SIZE CLIENTS R M L - p50 latency per call (one placement).
p50_row() {
	echo "| $1 | $2 | $(fig "$3" redis_p50_us SET) |" \
		"$(bl_fmt "$(fig "$4" bl_kv set_p50_us)" 1) |" \
		"$(bl_fmt "$(fig "$5" bl_kv put_p50_us)" 1) |" \
		"$(fig "$3" redis_p50_us GET) |" \
		"$(bl_fmt "$(fig "$4" bl_kv get_p50_us)" 1) |" \
		"$(bl_fmt "$(fig "$5" bl_kv get_p50_us)" 1) |"
}

p50_table() {
	echo "| size | clients | redis SET | memcached set | lunar put | redis GET | memcached get | lunar get |"
	echo "|---|---|---|---|---|---|---|---|"
	each_cell p50_row lunar
}

# placement_name P - how placement P is described in headings.
placement_name() {
	case $1 in
	shared) echo "shared: servers and clients wherever the scheduler puts them" ;;
	own) echo "own: each server confined to CPU ${CPUS[-1]}, its clients to the others" ;;
	esac
}

install_peers
make -s BUILD="$BUILD" "$BIN/memc-bench" >&2
bl_need lunar-bench lunar-proxy lunarctl memc-bench
bl_init lunar-peers
for r in $(seq "$ROUNDS"); do
	for p in "${PLACEMENTS[@]}"; do
		bl_log "bench-vs-peers: round $r of $ROUNDS, placement $p"
		place "$p"
		run_round "$r" "$p"
	done
done

echo "# Lunar next to Redis and memcached"
echo
bl_machine
echo "- $(redis-server --version | cut -d' ' -f1-3), memcached $(memcached -V | cut -d' ' -f2)"
echo
echo "All three on this node over UNIX sockets. Redis: redis-benchmark (no pipelining,"
echo "one key; one thread drives its C connections). memcached: memc-bench, ASCII"
echo "set/get, a thread and a connection per client. Lunar: lunar-bench against a"
echo "standalone proxy, one client (session) whose C clients are C threads with a"
echo "call in flight each or, for C > 1, one thread with C calls in flight"
echo "(--depth C: lunar_put_async, lunar_get_async); the better of the two counts,"
echo "and a table shows both. The proxy has an embedded master and a 2 GiB segment;"
echo "values and get buffers are in registered memory (lunar_alloc, --zero-copy;"
echo "the staged table: in ordinary memory, through the staging arena, a thread per"
echo "client). redis-benchmark checks no value it reads; memc-bench and"
echo "lunar-bench (--check sampled) compare a few words of each value read in their"
echo "get phase, then get every value again comparing every byte (the third table)."
echo "ops/s: Redis's own figure; memc-bench and lunar-bench count ops over the"
echo "busiest client's time in calls (the compares are outside it)."
echo "Each figure is the median of $ROUNDS rounds; a round runs Redis, memcached and"
echo "Lunar one after the other, each started afresh, in each placement in turn:"
for p in "${PLACEMENTS[@]}"; do
	echo "- $(placement_name "$p")."
done
echo "Ratios are of the medians; > 1 means Lunar is faster."
echo
PICK=best
if [ "${#PLACEMENTS[@]}" -gt 1 ]; then
	echo "## Each system in its better placement"
	echo
	echo "For each system and cell, the better median of its placements (the tables"
	echo "of each placement follow)."
else
	PICK=${PLACEMENTS[0]}
	echo "## Placement $(placement_name "$PICK")"
fi
echo
ratio_table lunar inflight
echo
echo "Lunar's two forms of C clients (registered memory): C threads with a call"
echo "in flight each, one thread with C calls in flight:"
echo
forms_table
echo
echo "Lunar from ordinary memory (through the staging arena: one more copy per call;"
echo "a thread per client):"
echo
ratio_table staged
echo
echo "Gets with every byte compared after each call (the verify phases; Lunar"
echo "registered), next to Redis's GET, which compares none:"
echo
verify_table
for PICK in "${PLACEMENTS[@]}"; do
	echo
	if [ "${#PLACEMENTS[@]}" -gt 1 ]; then
		echo "## Placement $(placement_name "$PICK")"
		echo
		ratio_table lunar inflight
		echo
		forms_table
		echo
	fi
	echo "p50 latency per call, µs (SET/put, GET/get; medians over the rounds; Lunar registered):"
	echo
	p50_table
done
bl_cmds_flush
if [ "$BL_FAILED" -gt 0 ]; then
	echo
	echo "**$BL_FAILED run(s) failed**; their cells show \`-\`."
	exit 1
fi
