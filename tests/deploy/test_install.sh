#!/usr/bin/env bash
# test_install.sh - `make install` into a temporary prefix gives a library a
# program can load: soname link, lunar.pc with an rpath (not a system
# prefix), a tiny C program built with `pkg-config --cflags --libs lunar`
# runs without LD_LIBRARY_PATH; a system prefix under DESTDIR gets no rpath;
# `make uninstall` leaves no file behind. Exit 0 pass, 77 skipped (no cc or
# pkg-config), 1 fail.
set -u
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
cd "$(dirname "$0")/../.."
for t in cc pkg-config readelf; do
	command -v $t >/dev/null || { echo "skipped: no $t"; exit 77; }
done
tmp=$(mktemp -d /tmp/lunar-install-XXXXXX) && trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() {
	echo "FAIL: $*"
	exit 1
}
mk() { $MAKE --no-print-directory -s BUILD="$BUILD" "$@" >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log"; fail "make $*"; }; }

mk install PREFIX="$prefix"
[ "$(readlink "$prefix/lib/liblunar.so.1")" = liblunar.so.1.0.0 ] || fail "no soname link liblunar.so.1"
[ "$(readlink "$prefix/lib/liblunar.so")" = liblunar.so.1 ] || fail "no link liblunar.so"
readelf -d "$prefix/lib/liblunar.so.1.0.0" | grep -q 'SONAME.*\[liblunar.so.1\]' || fail "soname is not liblunar.so.1"

cat >"$tmp/app.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <lunar.h>

int main(void)
{
	struct lunar_opts o = {.socket_path = "/nonexistent/lunar.sock", .timeout_ms = 100};
	struct lunar_client *c = NULL;
	int rc = lunar_connect(&o, &c);

	printf("%s; connect to nothing: %s\n", lunar_strerror(LUNAR_ERR_UNAUTHORIZED),
	       lunar_strerror(rc));
	return rc == 0 || c != NULL || !strlen(lunar_strerror(rc));
}
C
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs lunar) || fail "pkg-config --cflags --libs lunar"
echo "  pkg-config: $flags"
case $flags in *"-Wl,-rpath,$prefix/lib"*) ;; *) fail "no rpath to $prefix/lib in lunar.pc" ;; esac
# $LDFLAGS as `make test` passes them: a sanitizer's library needs its
# runtime in the program (make asan, make tsan).
# shellcheck disable=SC2086
cc ${LDFLAGS:-} -o "$tmp/app" "$tmp/app.c" $flags || fail "cc with pkg-config's flags"
out=$(env -u LD_LIBRARY_PATH "$tmp/app") || fail "the app failed: $out"
echo "  app: $out"
ldd "$tmp/app" | grep -q "liblunar.so.1 => $prefix/lib/liblunar.so.1" || fail "app loads $(ldd "$tmp/app" | grep lunar)"

mk uninstall PREFIX="$prefix"
left=$(find "$prefix" ! -type d)
[ -z "$left" ] || fail "left after uninstall: $left"

# A system prefix, staged: no rpath, and no ldconfig (DESTDIR is given).
mk install PREFIX=/usr/local DESTDIR="$tmp/stage"
grep -q '^Libs: -L${libdir} -llunar$' "$tmp/stage/usr/local/lib/pkgconfig/lunar.pc" ||
	fail "lunar.pc for /usr/local: $(grep ^Libs "$tmp/stage/usr/local/lib/pkgconfig/lunar.pc")"
mk uninstall PREFIX=/usr/local DESTDIR="$tmp/stage"
left=$(find "$tmp/stage" ! -type d)
[ -z "$left" ] || fail "left after uninstall: $left"
echo "install, build with pkg-config, run, uninstall: ok"
