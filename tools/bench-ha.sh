#!/usr/bin/env bash
# bench-ha.sh - high availability figures (SPEC §14) on loopback, with a
# one-member etcd (Debian's etcd-server), two lunar-masters electing through
# it and one lunar-proxy following the leader (--master etcd://). Keyless:
# every daemon listens on 127.0.0.1 only.
#   bash tools/bench-ha.sh failover [RUNS]    kill -9 the leader RUNS times (10):
#        the time from the kill to the first put that succeeds (lunarctl put in
#        a loop through the proxy), p50 and max; the killed master comes back
#        as a standby before the next run
#   bash tools/bench-ha.sh rebuild [N]        fill the leader with N objects
#        (100000; 64 bytes, lunar-bench --keep), kill it: the new leader's
#        rebuild from the proxy's report, objects per second
#   bash tools/bench-ha.sh throughput [ROUNDS]  lunar-bench put/get (4 KiB,
#        20000 objects, 2 threads, depth 8) with HA off (a plain master) and
#        on, ROUNDS (5) each, in pairs (which goes first alternates), each
#        run 3.5 s after its proxy's start; placed as two nodes are (with 2
#        CPUs or more: the proxy and lunar-bench on the first half, the
#        masters and etcd on the second): the medians, and the median of
#        the pairs' on/off ratios
# Env: BUILD (build), TTL (--etcd-lease-ttl, 2s), ETCD (/usr/bin/etcd).
# Prints key=value lines. Needs curl.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD:-build}/bin
ETCD=${ETCD:-/usr/bin/etcd}
TTL=${TTL:-2s}
mode=${1:-failover}
base=$(mktemp -d -p /var/tmp lunar-ha.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || :; done
	wait 2>/dev/null || :
	[ -n "${KEEP:-}" ] && echo "kept $base" >&2 || rm -rf "$base"
}
trap cleanup EXIT
export LUNAR_TEST_KEYLESS=1
unset LUNAR_CLUSTER_KEY_FILE

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

EPORT=$(port) EPEER=$(port)
declare -A MPORT MHTTP MPID
# Placement (throughput): the client's node and the control plane's, as
# taskset lists; empty: anywhere.
NCPU=$(nproc)
CLIENT_CPUS= SERVER_CPUS=
# on CPUS CMD... - CMD (in the array CMD) confined to CPUS; "$!" of a
# background "${CMD[@]}" is then the command's own pid.
on() {
	local cpus=$1
	shift
	CMD=("$@")
	[ -z "$cpus" ] || CMD=(taskset -c "$cpus" "$@")
}

start_etcd() {
	on "$SERVER_CPUS" "$ETCD" --name e0 --data-dir "$base/etcd" --listen-client-urls "http://127.0.0.1:$EPORT" \
		--advertise-client-urls "http://127.0.0.1:$EPORT" \
		--listen-peer-urls "http://127.0.0.1:$EPEER" \
		--initial-advertise-peer-urls "http://127.0.0.1:$EPEER" \
		--initial-cluster "e0=http://127.0.0.1:$EPEER"
	"${CMD[@]}" >"$base/etcd.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$EPORT/health" | grep -q true && return; sleep 0.1; done
	echo "bench-ha: etcd did not start" >&2
	exit 1
}
# start_master I [ha]: master I on its ports, electing when ha is given.
start_master() {
	local i=$1 ha=${2:-ha} args=()
	[ -n "${MPORT[$i]:-}" ] || { MPORT[$i]=$(port); MHTTP[$i]=$(port); }
	[ "$ha" = ha ] && args=(--etcd "http://127.0.0.1:$EPORT" --cluster-id b
		--advertise "tcp://127.0.0.1:${MPORT[$i]}" --etcd-lease-ttl "$TTL")
	on "$SERVER_CPUS" "$BIN/lunar-master" --listen 127.0.0.1 --port "${MPORT[$i]}" \
		--http-port "${MHTTP[$i]}" "${args[@]}"
	"${CMD[@]}" >>"$base/master$i.log" 2>&1 &
	MPID[$i]=$!
	pids+=($!)
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:${MHTTP[$i]}/health" >/dev/null && return; sleep 0.05; done
}
role() { curl -s "http://127.0.0.1:${MHTTP[$1]}/admin/ha" | grep -o '"role":"[a-z]*"' | cut -d'"' -f4; }
leader() {
	for _ in $(seq 200); do
		for i in 0 1; do [ "$(role $i 2>/dev/null)" = leader ] && { echo "$i"; return; }; done
		sleep 0.05
	done
	echo "bench-ha: no leader" >&2
	exit 1
}
# start_proxy MASTER SEGMENT
start_proxy() {
	on "$CLIENT_CPUS" "$BIN/lunar-proxy" --socket "$base/p.sock" --master "$1" \
		--host 127.0.0.1 --data-port 0 --http-port 0 --segment-size "$2" \
		--ping-interval 200ms --rpc-timeout 2s
	"${CMD[@]}" >"$base/proxy.log" 2>&1 &
	PPID_=$!
	pids+=($!)
	for _ in $(seq 300); do "$BIN/lunarctl" --socket "$base/p.sock" status >/dev/null 2>&1 && return; sleep 0.1; done
	echo "bench-ha: the proxy did not start" >&2
	exit 1
}
metric() { curl -s "http://127.0.0.1:${MHTTP[$1]}/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
pct() { sort -n | awk -v p="$1" '{v[NR]=$1} END {i=int((NR*p+99)/100); if (i<1) i=1; print v[i]}'; }

failover() {
	local runs=${1:-10} lead t0 t1 n=0
	head -c 4096 /dev/urandom >"$base/v"
	start_etcd
	start_master 0
	start_master 1
	lead=$(leader)
	start_proxy "etcd://127.0.0.1:$EPORT/b" 64MiB
	sleep 3.5 # the first leader waits for the proxy's report
	for r in $(seq "$runs"); do
		lead=$(leader)
		"$BIN/lunarctl" --socket "$base/p.sock" put "warm-$r" "$base/v" >/dev/null
		kill -9 "${MPID[$lead]}"
		t0=$(now_ms)
		wait "${MPID[$lead]}" 2>/dev/null || :
		until "$BIN/lunarctl" --socket "$base/p.sock" --timeout-ms 1000 put "k-$r-$((n++))" \
			"$base/v" >/dev/null 2>&1; do
			[ $(($(now_ms) - t0)) -lt 30000 ] || { echo "bench-ha: no put for 30 s" >&2; exit 1; }
		done
		t1=$(now_ms)
		echo "run=$r failover_ms=$((t1 - t0))"
		echo $((t1 - t0)) >>"$base/ms"
		start_master "$lead" # back as a standby
		sleep 1
	done
	echo "failover_runs=$runs lease_ttl=$TTL"
	echo "failover_p50_ms=$(pct 50 <"$base/ms") failover_max_ms=$(pct 100 <"$base/ms")"
}

rebuild() {
	local n=${1:-100000} lead next t0 done_=0
	start_etcd
	start_master 0
	start_master 1
	lead=$(leader)
	start_proxy "etcd://127.0.0.1:$EPORT/b" 512MiB # 64-byte ranges: 1M objects take 64 MiB
	sleep 3.5
	t0=$(now_ms)
	"$BIN/lunar-bench" --socket "$base/p.sock" --size 64 --count "$n" --threads 2 --depth 16 \
		--keep --check sampled --baseline-size 0 >"$base/fill.out" || :
	# Its gets may be refused (BUSY: one client's read leases are capped);
	# the rebuild needs its puts only.
	[ "$(sed -n 's/^put_errors=//p' "$base/fill.out")" = 0 ] ||
		{ echo "bench-ha: the fill's puts failed" >&2; exit 1; }
	echo "fill_objects=$n fill_get_errors=$(sed -n 's/^get_errors=//p' "$base/fill.out")" \
		"fill_s=$(awk -v t=$(($(now_ms) - t0)) 'BEGIN {printf "%.1f", t / 1000}')"
	kill -9 "${MPID[$lead]}"
	wait "${MPID[$lead]}" 2>/dev/null || :
	next=$((1 - lead))
	for _ in $(seq 1200); do
		[ "$(metric "$next" lunar_master_rebuild_proxies_done)" = 1 ] && { done_=1; break; }
		sleep 0.05
	done
	[ "$done_" = 1 ] || { echo "bench-ha: the rebuild did not finish" >&2; exit 1; }
	local objs secs
	objs=$(metric "$next" lunar_master_rebuild_objects_total)
	secs=$(metric "$next" lunar_master_rebuild_seconds)
	echo "rebuild_objects=$objs rebuild_s=$secs" \
		"rebuild_objects_per_s=$(awk -v o="$objs" -v s="$secs" 'BEGIN {printf "%.0f", (s > 0 ? o / s : 0)}')"
	echo "rebuild_reported=$(metric "$next" lunar_master_rebuild_reported_total)" \
		"rebuild_merged=$(metric "$next" lunar_master_rebuild_merged_total)" \
		"rebuild_refused=$(metric "$next" lunar_master_rebuild_refused_total)"
	grep -o 'reported [0-9]* object(s) to the leader in [0-9]* ms' "$base/proxy.log" | tail -1
}

# One lunar-bench run through the proxy: "put_ops get_ops".
bench_once() {
	on "$CLIENT_CPUS" "$BIN/lunar-bench" --socket "$base/p.sock" --size 4KiB --count 20000 \
		--threads 2 --depth 8 --baseline-size 0
	"${CMD[@]}" | awk -F= '$1 == "put_ops_per_s" {p=$2} $1 == "get_ops_per_s" {g=$2}
		END {print p, g}'
}

throughput() {
	local rounds=${1:-5} order m p g
	if [ "$NCPU" -ge 2 ]; then
		CLIENT_CPUS=0-$((NCPU / 2 - 1))
		SERVER_CPUS=$((NCPU / 2))-$((NCPU - 1))
	fi
	start_etcd
	start_master 0 plain
	start_master 1
	sleep 1
	for r in $(seq "$rounds"); do
		order="off on"
		[ $((r % 2)) = 0 ] && order="on off"
		for m in $order; do
			if [ "$m" = off ]; then
				start_proxy "tcp://127.0.0.1:${MPORT[0]}" 256MiB
			else
				start_proxy "etcd://127.0.0.1:$EPORT/b" 256MiB
			fi
			sleep 3.5 # the leader waits for the proxy's report; the segment is resident
			read -r p g < <(bench_once)
			echo "round=$r ha=$m put_ops_per_s=$p get_ops_per_s=$g"
			echo "$p" >>"$base/put_$m"
			echo "$g" >>"$base/get_$m"
			kill "$PPID_"
			wait "$PPID_" 2>/dev/null || :
		done
	done
	for m in off on; do
		echo "ha_$m: put_ops_per_s_median=$(pct 50 <"$base/put_$m")" \
			"get_ops_per_s_median=$(pct 50 <"$base/get_$m")"
	done
	echo "ha_on_over_off: put_ratio_median=$(paste "$base/put_on" "$base/put_off" |
		awk '{printf "%.3f\n", $1 / $2}' | pct 50)" \
		"get_ratio_median=$(paste "$base/get_on" "$base/get_off" |
			awk '{printf "%.3f\n", $1 / $2}' | pct 50)" \
		"placed=${CLIENT_CPUS:-any}/${SERVER_CPUS:-any}"
}

case "$mode" in
failover) failover "${2:-10}" ;;
rebuild) rebuild "${2:-100000}" ;;
throughput) throughput "${2:-5}" ;;
*) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
