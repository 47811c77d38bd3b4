#!/bin/sh
# python/tests/run.sh - the Python tests (python/tests, standard unittest)
# against one lunar-proxy of their own: started here on a socket in a
# temporary directory, its lifetime bounded by timeout(1), always stopped.
# Run from anywhere; BUILD (default build) names the build directory.
# Exit: 0 pass, 1 fail, 77 skipped (no python3 >= 3.8 with ctypes).
# Set MOONCAKE_TESTS_DIR to run Mooncake's published tests too.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
PROXY=$BUILD/bin/lunar-proxy
PY_LIMIT=${LUNAR_PY_TIMEOUT:-200}  # seconds; below test_python's own bound

if ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP: python3 is not installed"
	exit 77
fi
if ! python3 -c 'import sys, ctypes; sys.exit(sys.version_info < (3, 8))' 2>/dev/null; then
	echo "SKIP: python3 is older than 3.8 or has no ctypes"
	exit 77
fi
if [ ! -x "$PROXY" ]; then
	echo "run.sh: $PROXY is missing; build first" >&2
	exit 1
fi
case $BUILD in /*) lib=$BUILD/lib/liblunar.so ;; *) lib=$PWD/$BUILD/lib/liblunar.so ;; esac
export BUILD LUNAR_LIB=${LUNAR_LIB:-$lib}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lunar-pytest.XXXXXX") || exit 1
sock=$tmp/proxy.sock
timeout -s KILL $((PY_LIMIT + 30)) "$PROXY" --embedded-master --socket "$sock" \
	--data-port 0 --http-port 0 --segment-size 256MiB >"$tmp/proxy.log" 2>&1 &
pid=$!
cleanup() {
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

i=0
while [ ! -S "$sock" ]; do
	if ! kill -0 "$pid" 2>/dev/null || [ $i -ge 200 ]; then
		echo "run.sh: lunar-proxy did not start:" >&2
		cat "$tmp/proxy.log" >&2
		exit 1
	fi
	sleep 0.05
	i=$((i + 1))
done

LUNAR_TEST_SOCKET=$sock timeout -s KILL "$PY_LIMIT" python3 -m unittest discover -s python/tests
rc=$?
if [ $rc -ne 0 ]; then
	echo "run.sh: python tests failed ($rc); proxy log tail:" >&2
	tail -n 40 "$tmp/proxy.log" >&2
	exit 1
fi
exit 0
