#!/usr/bin/env bash
# test_liblunar_link.sh - an application builds against the build tree the
# way the README tells it to (-Ishmlib/include -L$BUILD/lib -llunar) and
# starts: liblunar.so.1, the soname, is there. The app asks for a socket that
# does not exist and checks the error code, and names a code.
# Exits 0 pass, 1 fail, 77 skip (liblunar not built). $CC and $LDFLAGS as
# make passes them (a sanitizer build needs its runtime in the app too).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
CC=${CC:-cc}
lib=$(realpath -m "$BUILD/lib")
if [ ! -e "$lib/liblunar.so" ] && [ ! -L "$lib/liblunar.so" ]; then
	echo "SKIP: no $lib/liblunar.so (run make first)"
	exit 77
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/app.c" <<'C'
#include <stdio.h>
#include <string.h>

#include "lunar.h"

int main(int argc, char **argv)
{
	struct lunar_opts opts;
	struct lunar_client *c = NULL;
	int rc;

	memset(&opts, 0, sizeof(opts));
	opts.socket_path = argv[1];
	opts.timeout_ms = 1000;
	rc = lunar_connect(&opts, &c);
	printf("lunar_connect(%s): %d %s\n", argv[1], rc, lunar_strerror(rc));
	return rc == LUNAR_ERR_PROXY_UNAVAILABLE && c == NULL ? 0 : 1;
}
C
# shellcheck disable=SC2086 # LDFLAGS are words
if ! $CC -std=gnu11 -Wall -Werror ${LDFLAGS:-} -o "$tmp/app" "$tmp/app.c" -Ishmlib/include \
	-L"$lib" -llunar -Wl,-rpath,"$lib"; then
	echo "FAIL: the app does not build against $lib"
	exit 1
fi
"$tmp/app" "$tmp/no-such.sock" || { echo "FAIL: the app did not run as expected"; exit 1; }
ldd "$tmp/app" | grep -q "$lib/liblunar.so.1" || { echo "FAIL: not loaded from $lib"; exit 1; }
echo "liblunar: an app links and starts against $lib"
