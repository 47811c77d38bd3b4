#!/usr/bin/env bash
# deps.sh - install the Debian packages the build needs, when they are missing.
# Run by make before the first compile. As root it installs with apt-get;
# otherwise it names what is missing and fails.
set -euo pipefail

need=()
have_hdr() { [ -e "/usr/include/$1" ] || [ -e "/usr/include/x86_64-linux-gnu/$1" ]; }
have_hdr nng/nng.h || need+=(libnng-dev)
have_hdr protobuf-c/protobuf-c.h || need+=(libprotobuf-c-dev)
command -v protoc-c >/dev/null || need+=(protobuf-c-compiler)
have_hdr liburing.h || need+=(liburing-dev)
have_hdr cmocka.h || need+=(libcmocka-dev)
have_hdr xxhash.h || need+=(libxxhash-dev)
have_hdr sodium.h || need+=(libsodium-dev)
# Headers only: the proxy dlopen()s libibverbs.so.1 at run time (engine/ibv.c).
have_hdr infiniband/verbs.h || need+=(libibverbs-dev)
have_hdr curl/curl.h || need+=(libcurl4-openssl-dev)
# Headers only: test_crc32c_avx512's plain-C AVX-512 (tests/unit/avx512_emulated.h).
have_hdr simde/x86/avx512.h || need+=(libsimde-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v cc >/dev/null || need+=(gcc)
command -v python3 >/dev/null || need+=(python3)

[ ${#need[@]} -eq 0 ] && exit 0
echo "deps: missing Debian packages: ${need[*]}"
if [ "$(id -u)" != 0 ]; then
	echo "deps: run as root to install them, or: sudo apt-get install ${need[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
echo "deps: installed ${need[*]}"
