#!/usr/bin/env bash
# run.sh - build and run the libFuzzer targets under ASan+UBSan.
#
#   tests/fuzz/run.sh            build, then fuzz for $FUZZ_SECONDS (default 45)
#   tests/fuzz/run.sh --probe    exit 0 when clang links libFuzzer, else 77
#   tests/fuzz/run.sh --build    build only
#   tests/fuzz/run.sh FILE...    replay inputs (crash reproducers) and exit
#
# Exits 77 with "fuzz: skipped: <reason>" when clang or libFuzzer is missing
# (tests/run.sh counts that as skipped). The fuzzers are built with clang from
# the sources directly, never from the gcc-built archives. Output goes under
# $BUILD (default build): tests/fuzz/ for binaries, fuzz/ for the corpus,
# fuzz/crash-* for reproducers, fuzz/decode.log for the last run's log.
# Environment: FUZZ_CC (clang), FUZZ_SECONDS, FUZZ_JOBS (1; parallel workers).
set -u
cd "$(dirname "$0")/../.." || exit 1

BUILD=${BUILD:-build}
CC=${FUZZ_CC:-clang}
SECONDS_TO_RUN=${FUZZ_SECONDS:-45}
JOBS=${FUZZ_JOBS:-1}
# Absolute: with FUZZ_JOBS > 1 libFuzzer runs in $WORK (it writes fuzz-N.log).
OUT=$(realpath -m "$BUILD/tests/fuzz")
WORK=$(realpath -m "$BUILD/fuzz")
BIN=$OUT/fuzz_decode
SEEDS=$OUT/fuzz_seeds
CORPUS=$WORK/corpus-decode
SAN="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS="-std=gnu11 -g -O1 -Wall -Wextra -Wshadow -Wno-unused-parameter -D_GNU_SOURCE -pthread"
# What fuzz_decode links: the validator and the common code it calls.
LIB_SRC="proxy/decode.c common/ring.c common/key.c"

# The include flags of a source's layer, as the Makefile gives them
# ($BUILD/layers.txt, made by `make layers`); the fuzz sources are tests.
layer_flags() {
	local layer
	case $1 in
	tests/*) layer=tests ;;
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
		-newer "$out" 2>/dev/null | head -1)" ]
}

build() {
	local src objs=()
	mkdir -p "$OUT" "$CORPUS" || exit 1
	if [ ! -r "$BUILD/layers.txt" ]; then
		${MAKE:-make} --no-print-directory -s BUILD="$BUILD" layers || exit 1
	fi
	if stale "$BIN" tests/fuzz/fuzz_decode.c $LIB_SRC; then
		echo "  CLANG   $BIN"
		# Only our own file is -Werror: a clang-only warning in code built
		# with gcc elsewhere is not a fuzzing failure. Each source compiles
		# with its layer's include flags, as in the gcc build.
		$CC $CFLAGS $(layer_flags tests/fuzz) $SAN -Werror -c -o "$OUT/fuzz_decode.o" \
			tests/fuzz/fuzz_decode.c || exit 1
		for src in $LIB_SRC; do
			objs+=("$OUT/$(basename "$src" .c).o")
			$CC $CFLAGS $(layer_flags "$src") $SAN -c -o "${objs[-1]}" "$src" || exit 1
		done
		$CC $CFLAGS $SAN -o "$BIN" "$OUT/fuzz_decode.o" "${objs[@]}" || exit 1
	fi
	if stale "$SEEDS" tests/fuzz/fuzz_seeds.c; then
		echo "  CLANG   $SEEDS"
		$CC $CFLAGS $(layer_flags tests/fuzz) -Werror -o "$SEEDS" tests/fuzz/fuzz_seeds.c || exit 1
	fi
	"$SEEDS" "$CORPUS" || exit 1
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
	exec "$BIN" "$@"
fi

# The corpus grows across runs; the header plus a full arena is the longest
# input that means anything.
echo "fuzz: fuzz_decode for ${SECONDS_TO_RUN}s ($JOBS job(s)), corpus $CORPUS"
args=(-max_total_time="$SECONDS_TO_RUN" -max_len=65824 -timeout=10 -rss_limit_mb=2048
	-use_value_profile=1 -print_final_stats=1 -artifact_prefix="$WORK/crash-")
if [ "$JOBS" -gt 1 ]; then
	args+=(-jobs="$JOBS" -workers="$JOBS")
fi
(cd "$WORK" &&
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
	"$BIN" "${args[@]}" "$CORPUS" >"$WORK/decode.log" 2>&1)
rc=$?
tail -n 25 "$WORK/decode.log"
if [ $rc -ne 0 ]; then
	echo "fuzz: fuzz_decode FAILED (exit $rc); full log $WORK/decode.log;" \
		"reproduce with: BUILD=$BUILD tests/fuzz/run.sh $WORK/crash-<id>"
	exit 1
fi
echo "fuzz: fuzz_decode: no findings in ${SECONDS_TO_RUN}s"
