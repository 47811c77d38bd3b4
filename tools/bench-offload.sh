#!/usr/bin/env bash
# bench-offload.sh - the SSD tier's offload rate through the real path: a
# standalone proxy with --offload on_put and a disk tier; lunar-bench puts
# COUNT objects of 1 MiB (kept); the proxy's /disk/status is polled until every
# one has its SSD copy. Prints key=value figures: the steady rate from the
# first record to the last (when the puts outran the offload), the whole time from
# the first put, and the offload path's write rate (bytes over the time spent in
# its packed disk writes).
#   bash tools/bench-offload.sh [DIR]      (DIR: where the disk tier lives; /var/tmp)
# Env: BUILD (build), COUNT (1024). Needs curl.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD:-build}/bin
COUNT=${COUNT:-1024}
SIZE=${SIZE:-1048576}
base=$(mktemp -d -p "${1:-/var/tmp}" lunar-offload.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	[ -n "${KEEPB:-}" ] || rm -rf "$base"
}
trap cleanup EXIT

"$BIN/lunar-proxy" --embedded-master --socket "$base/p.sock" --segment-size 2GiB \
	--data-port 0 --http-port 0 --disk-dir "$base/disk" --disk-capacity 4GiB \
	--offload on_put 2>"$base/proxy.log" &
pid=$!
for _ in $(seq 300); do grep -q "segment resident" "$base/proxy.log" && break; sleep 0.1; done
port=$(grep -o 'HTTP on http://[0-9.]*:[0-9]*' "$base/proxy.log" | grep -o '[0-9]*$')
figure() { curl -s "http://127.0.0.1:$port/disk/status" | grep -o "\"$1\":[0-9]*" | grep -o '[0-9]*$'; }
records() { figure records; }

start=$(date +%s%N)
"$BIN/lunar-bench" --socket "$base/p.sock" --size "$SIZE" --count "$COUNT" --threads 1 \
	--zero-copy --keep --baseline-size 0 >"$base/bench.out"
first=0 r0=0 deadline=$((start + 120000000000))
while :; do
	r=$(records)
	now=$(date +%s%N)
	if [ "${r:-0}" -gt 0 ] && [ "$first" -eq 0 ]; then first=$now r0=$r; fi
	[ "${r:-0}" -ge "$COUNT" ] && break
	[ "$now" -lt "$deadline" ] || { echo "bench-offload: only ${r:-0} of $COUNT offloaded" >&2; exit 1; }
	sleep 0.01
done
awk -v n="$COUNT" -v z="$SIZE" -v r0="$r0" -v f="$first" -v s="$start" -v e="$now" \
	-v ob="$(figure offload_bytes)" -v ou="$(figure offload_write_us)" 'BEGIN {
	printf "objects=%d\nobject_bytes=%d\n", n, z
	if (e > f && n > r0)
		printf "offload_steady_gb_per_s=%.2f\n", (n - r0) * z / ((e - f) / 1e9) / 1e9
	else
		printf "offload_steady_gb_per_s=-\n"
	printf "offload_write_gb_per_s=%.2f\n", (ou > 0 ? ob / (ou / 1e6) / 1e9 : 0)
	printf "offload_all_after_first_put_ms=%.0f\n", (e - s) / 1e6
}'
