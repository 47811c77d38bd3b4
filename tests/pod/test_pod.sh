#!/usr/bin/env bash
# test_pod.sh - the proxy and an application in two containers of one podman
# pod, sharing only the socket directory (no host or shared IPC, no shared
# pid or network namespace): the application runs as uid 4242, puts and gets
# with lunarctl and runs a short lunar-bench --zero-copy through the memfd
# the proxy passes over the socket; uid 4243, not allow-listed, is refused.
# Builds the image first (deploy/image.sh; quick once its base is cached).
# Exit 0 pass, 77 skipped (the reason printed: no podman, not root, no
# Debian archive, containers cannot run here, a sanitizer's build), else
# fail. Removes its pod.
set -u

BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.."
skip() {
	echo "skipped: $*"
	exit 77
}
fail() {
	echo "FAIL: $*"
	[ -n "${pod:-}" ] && podman logs "$pod-proxy" 2>&1 | sed 's/^/  proxy: /' | tail -20
	exit 1
}

# The image is the release artifact: make test checks it, built from the
# release build; a sanitizer's build would replace it under the same tag.
[ -z "${LUNAR_TEST_SANITIZER:-}" ] ||
	skip "built with a sanitizer ($LUNAR_TEST_SANITIZER): the image would ship it as" \
		"localhost/lunar:VERSION (make test builds and runs the release image)"
[ "$(id -u)" = 0 ] || skip "needs root (podman with runc, as set up here)"
for t in podman buildah mmdebstrap runc; do
	command -v $t >/dev/null ||
		skip "$t not installed (apt-get install podman buildah mmdebstrap runc)"
done
version=$("$BUILD"/bin/lunar-proxy --version | awk '{print $2}') || fail "no $BUILD/bin/lunar-proxy"
image=localhost/lunar:$version

tmp=$(mktemp -d /tmp/lunar-pod-XXXXXX)
pod=lunar-pod-$$
cleanup() {
	podman pod rm -f -t 0 "$pod" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

BUILD=$BUILD bash deploy/image.sh >"$tmp/image.log" 2>&1
case $? in
0) ;;
3) skip "$(grep 'cannot run here' "$tmp/image.log" | head -1)" ;;
*) cat "$tmp/image.log"; fail "deploy/image.sh failed" ;;
esac

# This machine's cgroups need runc, and setrlimit needs explicit limits
# that a container may take: at most ours (nproc lower still, as runc may
# not set even our own here).
nofile=$(ulimit -Hn) nproc=4096
[ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
run=(podman run --runtime runc --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc"
	--network none --ipc private --pid private)
if ! out=$("${run[@]}" --rm "$image" true 2>&1); then
	skip "podman cannot run a container here: $(echo "$out" | tail -1)"
fi

# The socket directory, as the DaemonSet's init container leaves it: owned
# by the image's user lunar, whom the proxy runs as.
lunar_id=$("${run[@]}" --rm "$image" id -u) || fail "no uid in the image"
mkdir -m 0755 "$tmp/sock" && chown "$lunar_id:$lunar_id" "$tmp/sock"
vol=(-v "$tmp/sock:/run/lunar")

podman pod create --name "$pod" --share none --infra=false >/dev/null ||
	fail "podman pod create --share none"
"${run[@]}" -d --pod "$pod" --name "$pod-proxy" "${vol[@]}" "$image" \
	lunar-proxy --embedded-master --socket /run/lunar/proxy.sock --segment-size 128MiB \
	--socket-mode 0666 --allow-uid 4242 >/dev/null || fail "the proxy container did not start"
for _ in $(seq 100); do
	[ -S "$tmp/sock/proxy.sock" ] && break
	[ "$(podman inspect -f '{{.State.Running}}' "$pod-proxy")" = true ] || fail "the proxy exited"
	sleep 0.1
done
[ -S "$tmp/sock/proxy.sock" ] || fail "no socket after 10 s"

app() { "${run[@]}" --rm --pod "$pod" --user "$1" "${vol[@]}" "$image" sh -c "$2"; }

# uid 4242, allow-listed: put, get, a zero-copy run; and it sees neither the
# proxy's processes nor its IPC namespace.
out=$(app 4242:4242 '
	set -e
	printf "hello from 4242" | lunarctl put pod-key -
	lunarctl get pod-key -; echo
	lunar-bench --zero-copy --size 64KiB --count 200 --threads 2 --baseline-size 0
	echo "procs: $(cat /proc/[0-9]*/comm 2>/dev/null | grep -c lunar-proxy)"
	echo "ipc: $(readlink /proc/self/ns/ipc)"' 2>&1) || { echo "$out"; fail "the app (uid 4242) failed"; }
echo "$out" | sed 's/^/  app: /' | grep -E 'hello|_ops_per_s|errors|procs|ipc'
echo "$out" | grep -qx 'hello from 4242' || fail "get did not return the value"
echo "$out" | grep -qx 'errors=0' || fail "lunar-bench reported errors"
echo "$out" | grep -qx 'procs: 0' || fail "the app sees the proxy's processes"
proxy_ipc=$(podman exec "$pod-proxy" readlink /proc/self/ns/ipc) || fail "podman exec"
app_ipc=$(echo "$out" | sed -n 's/^ipc: //p')
[ -n "$app_ipc" ] && [ "$app_ipc" != "$proxy_ipc" ] && [ "$app_ipc" != "$(readlink /proc/self/ns/ipc)" ] ||
	fail "IPC namespace shared (app $app_ipc, proxy $proxy_ipc)"

# uid 4243 reaches the socket (0666) but is not on the allow-list.
if out=$(app 4243:4243 'printf x | lunarctl put other-key -' 2>&1); then
	fail "uid 4243 was served"
fi
podman logs "$pod-proxy" 2>&1 | grep -q 'uid 4243 refused: UNAUTHORIZED' ||
	fail "no refusal of uid 4243 in the proxy's log: $out"
echo "  uid 4243 refused: $(echo "$out" | tail -1)"

podman stop -t 10 "$pod-proxy" >/dev/null || fail "podman stop"
[ "$(podman inspect -f '{{.State.ExitCode}}' "$pod-proxy")" = 0 ] || fail "the proxy did not exit 0"
[ ! -e "$tmp/sock/proxy.sock" ] || fail "the proxy left its socket"
echo "pod test passed ($image)"
