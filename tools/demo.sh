#!/usr/bin/env bash
# demo.sh - a single-node Lunar store in a temporary directory: make a cluster
# key, start lunar-proxy with an embedded master and that key, store and read
# back a file with lunarctl, run lunar-bench twice, and stop everything. Run from the repo: BUILD=build bash tools/demo.sh
# (`make demo` does that). Exit 0 when every step worked, 1 otherwise.
set -euo pipefail

BUILD=${BUILD:-build}
BIN=$BUILD/bin
proxy_pid=
dir=

say() { printf '\n== %s\n' "$*"; }

stop_proxy() {
	[ -n "$proxy_pid" ] || return 0
	if kill -0 "$proxy_pid" 2>/dev/null; then
		kill -TERM "$proxy_pid" 2>/dev/null || true
		for _ in $(seq 30); do
			kill -0 "$proxy_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$proxy_pid" 2>/dev/null; then
			echo "demo: the proxy did not stop within 3 s of SIGTERM; killing it" >&2
			kill -KILL "$proxy_pid" 2>/dev/null || true
		fi
	fi
	wait "$proxy_pid" 2>/dev/null || true
	proxy_pid=
}

on_exit() {
	local rc=$?
	trap - EXIT
	set +e
	if [ "$rc" -ne 0 ]; then
		echo >&2
		echo "Demo FAILED (exit $rc)." >&2
		if [ -n "$dir" ] && [ -s "$dir/proxy.log" ]; then
			echo "--- last lines of the proxy log ---" >&2
			tail -n 40 "$dir/proxy.log" >&2
			echo "---" >&2
		fi
	fi
	stop_proxy
	[ -n "$dir" ] && rm -rf "$dir"
	[ "$rc" -eq 0 ] || exit 1
	exit 0
}
trap on_exit EXIT
trap 'exit 130' INT TERM HUP

for b in lunar-proxy lunarctl lunar-bench; do
	if [ ! -x "$BIN/$b" ]; then
		echo "demo: $BIN/$b is missing; build first (make, or BUILD=... to point elsewhere)" >&2
		exit 1
	fi
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/lunar-demo.XXXXXX")
sock=$dir/proxy.sock
ctl() { "$BIN/lunarctl" --socket "$sock" "$@"; }

say "Making a cluster key (every daemon and peer must prove it; see docs/operations.md)"
ctl keygen "$dir/cluster.key"

say "Starting lunar-proxy with an embedded master, the key and a 256 MiB memory segment"
"$BIN/lunar-proxy" --embedded-master --cluster-key "$dir/cluster.key" --socket "$sock" \
	--segment-size 256MiB --data-port 0 --http-port 0 >"$dir/proxy.log" 2>&1 &
proxy_pid=$!
echo "proxy pid $proxy_pid, socket $sock, log $dir/proxy.log"

ready=0
for _ in $(seq 100); do
	if ctl status >/dev/null 2>&1; then
		ready=1
		break
	fi
	if ! kill -0 "$proxy_pid" 2>/dev/null; then
		echo "demo: lunar-proxy exited during start-up" >&2
		exit 1
	fi
	sleep 0.1
done
if [ "$ready" -ne 1 ]; then
	echo "demo: lunar-proxy was not ready within 10 s; last status:" >&2
	ctl status >&2 || true
	exit 1
fi
ctl status

say "Storing a 3 MiB file of random bytes under the key demo-key"
head -c $((3 << 20)) /dev/urandom >"$dir/in.bin"
ctl put demo-key "$dir/in.bin"

say "Reading it back into another file and comparing the two"
ctl get demo-key "$dir/out.bin"
cmp "$dir/in.bin" "$dir/out.bin"
echo "The bytes read back are identical to the bytes stored."

say "Asking whether demo-key exists (1 = yes)"
ctl exists demo-key

say "Removing demo-key, and checking it is gone"
# The reads above leased the object; each lunarctl run is a client of its own,
# whose leases the proxy gives back as it exits. --force need not wait for that.
ctl rm --force demo-key
gone=$(ctl exists demo-key || true)
if [ "$gone" != 0 ]; then
	echo "demo: demo-key should be gone after rm, but exists says '$gone'" >&2
	exit 1
fi
echo "demo-key is gone."

say "Benchmark: 2000 objects of 64 KiB from 2 threads (put, get with every byte checked, rm)"
"$BIN/lunar-bench" --socket "$sock" --size 64KiB --count 2000 --threads 2 | sed 's/^/  /'

say "Benchmark: 200 objects of 1 MiB from 2 threads"
"$BIN/lunar-bench" --socket "$sock" --size 1MiB --count 200 --threads 2 | sed 's/^/  /'

say "Stopping the proxy"
stop_proxy
echo
echo "Demo finished: the proxy started, a 3 MiB file went in and came back identical," \
	"and both benchmarks read back every byte correctly."
