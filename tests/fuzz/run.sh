#!/usr/bin/env bash
# run.sh - build and run the libFuzzer targets under ASan+UBSan: decode (the
# proxy's shared-memory validator), meta (the SSD tier's bucket metadata
# decoder, disk/scan.c), http (the embedded HTTP server's request parsing,
# common/http.c), frame (the data port's plain and keyed frames and the RDMA
# connect body, engine/wire.c and rdma_wire.c), envelope (the master
# RPC's authenticated envelope and framed requests, proto/rpc_auth.c and
# rpc.c) and sprep (the master's RPC server reading nng's sp-tcp framing,
# proto/sp_rep.c). The targets run side by side, each for $FUZZ_SECONDS.
#
#   tests/fuzz/run.sh            build, then fuzz every target at once, each for
#                                $FUZZ_SECONDS (default 45)
#   tests/fuzz/run.sh --probe    exit 0 when clang links libFuzzer, else 77
#   tests/fuzz/run.sh --build    build only
#   tests/fuzz/run.sh FILE...    replay inputs (crash reproducers) with
#                                $FUZZ_TARGET (default decode) and exit
#
# Exits 77 with "fuzz: skipped: <reason>" when clang or libFuzzer is missing
# (tests/run.sh counts that as skipped). The fuzzers are built with clang from
# the sources directly, never from the gcc-built archives. Output goes under
# $BUILD (default build): tests/fuzz/ for binaries, fuzz/ for the corpus,
# fuzz/crash-<target>-* for reproducers, fuzz/<target>.log for the last run's
# log. Environment: FUZZ_CC (clang), FUZZ_SECONDS (per target), FUZZ_JOBS (1;
# parallel workers per target), FUZZ_TARGETS ("decode meta http frame
# envelope sprep").
set -u
cd "$(dirname "$0")/../.." || exit 1

BUILD=${BUILD:-build}
CC=${FUZZ_CC:-clang}
SECONDS_TO_RUN=${FUZZ_SECONDS:-45}
JOBS=${FUZZ_JOBS:-1}
# Absolute: with FUZZ_JOBS > 1 libFuzzer runs in $WORK (it writes fuzz-N.log).
OUT=$(realpath -m "$BUILD/tests/fuzz")
WORK=$(realpath -m "$BUILD/fuzz")
TARGETS=${FUZZ_TARGETS:-decode meta http frame envelope sprep}
SEEDS=$OUT/fuzz_seeds
SAN="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS="-std=gnu11 -g -O1 -Wall -Wextra -Wshadow -Wno-unused-parameter -D_GNU_SOURCE -pthread"
# What each target links besides tests/fuzz/fuzz_<target>.c: fuzz_decode the
# validator and the common code it calls; fuzz_meta includes disk/scan.c and
# links the rest of disk/ (and liburing); fuzz_http includes common/http.c,
# fuzz_sprep proto/sp_rep.c.
# The cryptography the frame and envelope readers use (not the HTTP gate).
AUTH_SRC="auth/mac.c auth/cap.c auth/key.c auth/handshake.c"
# The checksum, with the streaming copy its copy-and-checksum calls.
CRC_SRC="common/crc32c.c common/copy.c"
lib_src() {
	case $1 in
	decode) echo "proxy/decode.c common/ring.c common/key.c $CRC_SRC" ;;
	meta)
		echo $(ls disk/*.c | grep -v '^disk/scan.c$') $CRC_SRC common/key.c \
			common/log.c
		;;
	http) echo "common/log.c" ;;
	sprep) echo "proto/sp_wire.c common/parse.c common/log.c" ;;
	frame) echo engine/wire.c engine/rdma_wire.c $AUTH_SRC common/log.c $CRC_SRC ;;
	envelope) echo proto/rpc_auth.c proto/rpc.c "$BUILD/proto/lunar.pb-c.c" $AUTH_SRC \
		common/log.c common/errors.c ;;
	esac
}
lib_link() {
	case $1 in
	meta) pkg-config --libs liburing ;;
	frame) pkg-config --libs libsodium ;;
	envelope) pkg-config --libs libsodium libprotobuf-c ;;
	esac
}
# The longest input that means anything: decode's header plus a full arena;
# a metadata file of a few records; an HTTP head and a little more.
max_len() {
	case $1 in
	decode) echo 65824 ;;
	meta) echo 16384 ;;
	http) echo 16384 ;;
	frame) echo 512 ;;
	sprep) echo 8192 ;;
	envelope) echo 16384 ;;
	esac
}

# The include flags of a source's layer, as the Makefile gives them
# ($BUILD/layers.txt, made by `make layers`); the fuzz sources are tests.
layer_flags() {
	local layer
	case $1 in
	tests/*) layer=tests ;;
	"$BUILD"/proto/*) layer=proto ;;
	*) layer=${1%%/*} ;;
	esac
	awk -v l="$layer" '$1 == l { $1 = ""; print; f = 1 } END { exit !f }' "$BUILD/layers.txt" ||
		{ echo "fuzz: no layer $layer in $BUILD/layers.txt" >&2; exit 1; }
}

skip() {
	echo "fuzz: skipped: $*"
	exit 77
}

probe() {
	local tmp rc
	command -v "$CC" >/dev/null 2>&1 || skip "$CC not found (apt-get install clang)"
	tmp=$(mktemp -d) || skip "mktemp failed"
	printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
		'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return (int)(d && n) * 0; }' \
		>"$tmp/p.c"
	$CC $SAN -o "$tmp/p" "$tmp/p.c" >"$tmp/log" 2>&1
	rc=$?
	if [ $rc -ne 0 ]; then
		echo "fuzz: $CC -fsanitize=fuzzer,address,undefined does not link:" >&2
		sed -n 1,5p "$tmp/log" >&2
		rm -rf "$tmp"
		skip "$CC cannot link libFuzzer (on Debian: apt-get install libclang-rt-dev or" \
			"clang's matching libclang-rt-NN-dev)"
	fi
	rm -rf "$tmp"
}

# Rebuild when any source or header is newer than the binary.
stale() {
	local out=$1
	shift
	[ -x "$out" ] || return 0
	[ -n "$(find "$@" common/*.h shmlib/include/lunar.h proxy/decode.h tests/fuzz/*.h \
		disk/*.h engine/*.h auth/*.h proto/*.h -newer "$out" 2>/dev/null | head -1)" ]
}

# Build fuzz_<target> (objects under $OUT/<target>/) and seed its corpus.
build_one() {
	local t=$1 bin=$OUT/fuzz_$1 dir=$OUT/$1 corpus=$WORK/corpus-$1 src objs=()
	local lib
	lib=$(lib_src "$t")
	mkdir -p "$dir" "$corpus" || exit 1
	if stale "$bin" "tests/fuzz/fuzz_$t.c" $lib disk/scan.c common/http.c proto/sp_rep.c; then
		echo "  CLANG   $bin"
		# Only our own file is -Werror: a clang-only warning in code built
		# with gcc elsewhere is not a fuzzing failure. Each source compiles
		# with its layer's include flags, as in the gcc build.
		$CC $CFLAGS $(layer_flags tests/fuzz) $SAN -Werror -c -o "$dir/fuzz_$t.o" \
			"tests/fuzz/fuzz_$t.c" || exit 1
		for src in $lib; do
			objs+=("$dir/$(basename "$src" .c).o")
			$CC $CFLAGS $(layer_flags "$src") $SAN -c -o "${objs[-1]}" "$src" || exit 1
		done
		$CC $CFLAGS $SAN -o "$bin" "$dir/fuzz_$t.o" "${objs[@]}" $(lib_link "$t") || exit 1
	fi
	case $t in
	decode)
		if stale "$SEEDS" tests/fuzz/fuzz_seeds.c; then
			echo "  CLANG   $SEEDS"
			$CC $CFLAGS $(layer_flags tests/fuzz) -Werror -o "$SEEDS" \
				tests/fuzz/fuzz_seeds.c || exit 1
		fi
		"$SEEDS" "$corpus" || exit 1
		;;
	meta) FUZZ_SEEDS_DIR=$corpus "$bin" || exit 1 ;;
	http)
		printf 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n' >"$corpus/seed-metrics"
		printf 'GET /admin/keys?tenant=a%%20b&pattern=%%5Ex&limit=3 HTTP/1.0\r\n%s%s' \
			'Authorization: Bearer 0123abcd' $'\r\n\r\n' >"$corpus/seed-admin"
		printf 'HEAD /404 HTTP/1.1\n\n' >"$corpus/seed-head"
		printf 'POST / HTTP/2.0\r\nX: y\r\n\r\n' >"$corpus/seed-post"
		;;
	sprep)
		# The opening header, then requests: one with its one-word
		# backtrace and a body, one whose backtrace has two words.
		printf '\0SP\0\0\060\0\0\0\0\0\0\0\0\0\011\200\0\0\001hello\0\0\0\0\0\0\0\011\0\0\0\002\200\0\0\003x' \
			>"$corpus/seed-two"
		printf '\0SP\0\0\060\0\0\0\0\0\0\0\0\0\004\200\0\0\007' >"$corpus/seed-empty"
		;;
	esac
}

build() {
	mkdir -p "$OUT" || exit 1
	if [ ! -r "$BUILD/layers.txt" ]; then
		${MAKE:-make} --no-print-directory -s BUILD="$BUILD" layers || exit 1
	fi
	# The targets build side by side, each into a folder of its own.
	local pids=() failed=0
	for t in $TARGETS; do
		build_one "$t" &
		pids+=($!)
	done
	for pid in "${pids[@]}"; do
		wait "$pid" || failed=1
	done
	[ "$failed" = 0 ] || exit 1
}

case "${1:-}" in
--probe)
	probe
	exit 0
	;;
--build)
	probe
	build
	exit 0
	;;
esac

probe
build
if [ $# -gt 0 ]; then
	exec "$OUT/fuzz_${FUZZ_TARGET:-decode}" "$@"
fi

# The corpus grows across runs.
fuzz_one() {
	local t=$1 rc args
	echo "fuzz: fuzz_$t for ${SECONDS_TO_RUN}s ($JOBS job(s)), corpus $WORK/corpus-$t"
	args=(-max_total_time="$SECONDS_TO_RUN" -max_len="$(max_len "$t")" -timeout=10
		-rss_limit_mb=2048 -use_value_profile=1 -print_final_stats=1
		-artifact_prefix="$WORK/crash-$t-")
	if [ "$JOBS" -gt 1 ]; then
		args+=(-jobs="$JOBS" -workers="$JOBS")
	fi
	(cd "$WORK" &&
		ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
		UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
		"$OUT/fuzz_$t" "${args[@]}" "$WORK/corpus-$t" >"$WORK/$t.log" 2>&1)
	rc=$?
	tail -n 25 "$WORK/$t.log"
	if [ $rc -ne 0 ]; then
		echo "fuzz: fuzz_$t FAILED (exit $rc); full log $WORK/$t.log;" \
			"reproduce with: BUILD=$BUILD FUZZ_TARGET=$t tests/fuzz/run.sh" \
			"$WORK/crash-$t-<id>"
		return 1
	fi
	echo "fuzz: fuzz_$t: no findings in ${SECONDS_TO_RUN}s"
}

# Side by side: on a small machine each gets a share of the CPUs for its
# $FUZZ_SECONDS, and the whole run takes that long, not that times the
# targets.
pids=()
for t in $TARGETS; do
	fuzz_one "$t" >"$WORK/$t.summary" 2>&1 &
	pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || failed=1
done
for t in $TARGETS; do
	cat "$WORK/$t.summary"
done
exit $failed
