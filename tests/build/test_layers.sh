#!/usr/bin/env bash
# test_layers.sh - the build enforces the layers: a probe file that includes
# a header across a layer boundary must not compile with that layer's flags
# (from $BUILD/layers.txt, written by make), and one that includes what the
# layer may use must. Exits 0 pass, 1 fail, 77 skip (no layers.txt yet).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
CC=${CC:-cc}
LAYERS=$BUILD/layers.txt
[ -r "$LAYERS" ] || { echo "SKIP: no $LAYERS (run make first)"; exit 77; }

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

# check LAYER ok|fail HEADER: compile '#include "HEADER"' with LAYER's flags.
check() {
	local layer=$1 want=$2 hdr=$3 flags got
	flags=$(awk -v l="$layer" '$1 == l { $1 = ""; print; f = 1 } END { exit !f }' "$LAYERS") ||
		{ echo "FAIL: layer $layer not in $LAYERS"; failed=1; return; }
	printf '#include "%s"\nint probe_%s;\n' "$hdr" "$layer" >"$tmp/probe.c"
	# shellcheck disable=SC2086 # flags are words
	if $CC -std=gnu11 -D_GNU_SOURCE -fsyntax-only $flags "$tmp/probe.c" >"$tmp/log" 2>&1; then
		got=ok
	else
		got=fail
	fi
	if [ "$got" != "$want" ]; then
		echo "FAIL: $layer including \"$hdr\": expected $want, got $got"
		sed -n 1,5p "$tmp/log"
		failed=1
	fi
}

# shmlib -> common only (and its own public header).
check shmlib ok lunar.h
check shmlib ok ring.h
for h in px_int.h mst_int.h eng_int.h dsk_int.h proxy/px_int.h master/mst_int.h \
	engine/engine.h disk/disk.h master/master.h rpc.h lunar.pb-c.h; do
	check shmlib fail "$h"
done
# common -> libc, and lunar.h for the error codes.
check common ok lunar.h
for h in shm_int.h shmlib/shm_int.h engine/engine.h rpc.h; do check common fail "$h"; done
# engine -> common; disk -> common.
check engine ok log.h
for h in disk/disk.h master/master.h rpc.h dsk_int.h px_int.h; do check engine fail "$h"; done
check disk ok crc32c.h
for h in engine/engine.h master/master.h rpc.h eng_int.h; do check disk fail "$h"; done
# master -> proto, common.
check master ok rpc.h
check master ok lunar.pb-c.h
for h in engine/engine.h disk/disk.h px_int.h eng_int.h proxy/px_int.h; do
	check master fail "$h"
done
# proxy -> engine, disk, proto, common, and the master through master.h only.
for h in engine/engine.h disk/disk.h master/master.h rpc.h lunar.pb-c.h; do
	check proxy ok "$h"
done
for h in mst_int.h master/mst_int.h master/mst_obj.h master/rpc_server.h eng_int.h \
	engine/eng_int.h dsk_int.h disk/dsk_int.h shm_int.h shmlib/shm_int.h; do
	check proxy fail "$h"
done
# tools -> liblunar's public header and common; lunar-bench also the master's RPC.
check tools ok lunar.h
for h in master/master.h rpc.h shm_int.h px_int.h; do check tools fail "$h"; done
check bench ok master/master.h
for h in master/mst_int.h px_int.h shm_int.h; do check bench fail "$h"; done

[ "$failed" -eq 0 ] && echo "layers: every boundary holds"
exit "$failed"
