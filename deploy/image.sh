#!/usr/bin/env bash
# image.sh - build the container image localhost/lunar:VERSION offline: a
# Debian bookworm base made by mmdebstrap from Debian's archive (the mirror
# this machine's apt uses; no registry is pulled from), holding only the
# shared libraries the binaries load, then `make install` of this tree and a
# non-root user `lunar`. The base is cached under $BUILD/image/, so a second
# run only copies the binaries. Run by `make image` after `make all`.
#
# Exit status: 0 built, 1 failed (the step is named), 3 cannot run here
# (tools missing and not root, or the archive unreachable; the reason said).
set -euo pipefail

BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
IMAGE=${IMAGE:-localhost/lunar}
SUITE=bookworm
LUNAR_UID=${LUNAR_UID:-1001} # the image's user `lunar`, uid and gid
cd "$(dirname "$0")/.."
out=$BUILD/image

step=starting
say() { echo "image: $*"; }
cannot() {
	echo "image: cannot run here: $*" >&2
	exit 3
}
trap 'rc=$?; [ $rc -eq 0 ] || [ $rc -eq 3 ] || echo "image: failed while $step (exit $rc)" >&2' EXIT
trap 'exit 1' INT TERM

# The tools, from Debian, when missing.
step="looking for podman, buildah and mmdebstrap"
need=()
command -v podman >/dev/null || need+=(podman)
command -v buildah >/dev/null || need+=(buildah)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v runc >/dev/null || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || cannot "missing ${need[*]}; as root: apt-get install ${need[*]}"
	step="installing ${need[*]} with apt-get"
	say "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null ||
		{ apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; } ||
		cannot "apt-get could not install ${need[*]}"
fi
[ "$(id -u)" = 0 ] || cannot "podman import and mmdebstrap need root here (rootless podman is not set up)"

step="reading the version"
bins=("$BUILD"/bin/lunar-master "$BUILD"/bin/lunar-proxy "$BUILD"/bin/lunarctl "$BUILD"/bin/lunar-bench)
for b in "${bins[@]}" "$BUILD"/lib/liblunar.so; do
	[ -e "$b" ] || { echo "image: $b missing: run make first" >&2; exit 1; }
done
version=$("$BUILD"/bin/lunar-proxy --version | awk '{print $2}')
[ -n "$version" ] || { echo "image: no version from lunar-proxy --version" >&2; exit 1; }

# The runtime packages: whichever Debian package holds each library the
# binaries load (libc6 is in every base).
step="finding the runtime packages (ldd, dpkg -S)"
pkgs=()
while read -r lib; do
	# dpkg knows a file by the path its package ships, before or after
	# merged /usr: try the path as ldd gives it, resolved, and unmerged.
	real=$(readlink -f "$lib")
	pkg=$(dpkg -S "$lib" "$real" "${real#/usr}" 2>/dev/null | head -1 | cut -d: -f1) || true
	[ -n "$pkg" ] || { echo "image: no Debian package holds $lib" >&2; exit 1; }
	[ "$pkg" = libc6 ] || pkgs+=("$pkg")
done < <(ldd "${bins[@]}" "$BUILD"/lib/liblunar.so | awk '$3 ~ /^\// {print $3}' | sort -u)
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)

# The mirror apt uses here (deb822 or one-line sources), else deb.debian.org.
step="reading the apt sources"
mirror=${MIRROR:-} secmirror=${SECURITY_MIRROR:-}
if [ -z "$mirror" ]; then
	srcs=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	mirror=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ && $2 !~ /security/ {print $2; exit}' <<<"$srcs")
	secmirror=$(awk '/^URIs:/ && $2 ~ /debian-security/ {print $2; exit}' <<<"$srcs")
	lines=$(grep -h '^deb ' /etc/apt/sources.list 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=$(awk '$2 !~ /security/ && $3 ~ /^bookworm/ {print $2; exit}' <<<"$lines")
	[ -n "$secmirror" ] || secmirror=$(awk '$2 ~ /security/ {print $2; exit}' <<<"$lines")
fi
mirror=${mirror:-http://deb.debian.org/debian}
secmirror=${secmirror:-http://deb.debian.org/debian-security}
sources=("deb $mirror $SUITE main" "deb $mirror $SUITE-updates main"
	"deb $secmirror $SUITE-security main")

# The base: variant essential (no apt), the runtime packages, the user.
key=$(printf '%s\n' "$SUITE" "${sources[@]}" "${pkgs[@]}" "$LUNAR_UID" v2 | sha256sum | cut -c1-12)
base_tar=$out/base-$key.tar
base_img=localhost/lunar-base:$key
mkdir -p "$out"
if [ ! -s "$base_tar" ]; then
	step="making the Debian base with mmdebstrap (${pkgs[*]}) from $mirror"
	say "base: mmdebstrap $SUITE, variant essential, with ${pkgs[*]} from $mirror"
	hook='set -e; r="$1"
	echo "lunar:x:'"$LUNAR_UID"':" >>"$r/etc/group"
	echo "lunar:x:'"$LUNAR_UID:$LUNAR_UID"':Lunar:/nonexistent:/usr/sbin/nologin" >>"$r/etc/passwd"
	[ ! -e "$r/etc/shadow" ] || echo "lunar:!:19000::::::" >>"$r/etc/shadow"
	mkdir -p "$r/run/lunar" "$r/var/lib/lunar"
	chown '"$LUNAR_UID:$LUNAR_UID"' "$r/run/lunar" "$r/var/lib/lunar"
	chmod 0750 "$r/run/lunar" "$r/var/lib/lunar"
	rm -rf "$r"/var/cache/* "$r"/var/log/*.log "$r"/usr/share/doc/* "$r"/usr/share/man/*'
	if ! mmdebstrap --quiet --format=tar --variant=essential --include="$(IFS=,; echo "${pkgs[*]}")" \
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
		--dpkgopt='path-exclude=/usr/share/{doc,man,info,locale}/*' \
		--customize-hook="$hook" "$SUITE" "$base_tar.tmp" "${sources[@]}" >"$out/mmdebstrap.log" 2>&1; then
		rm -rf "$base_tar.tmp"
		tail -5 "$out/mmdebstrap.log" >&2
		if grep -qiE 'could not resolve|connection failed|unable to connect|failed to fetch|temporary failure' "$out/mmdebstrap.log"; then
			cannot "the Debian archive ($mirror) is unreachable (log: $out/mmdebstrap.log)"
		fi
		exit 1
	fi
	mv "$base_tar.tmp" "$base_tar"
else
	say "base: cached $base_tar"
fi
if ! podman image exists "$base_img"; then
	step="importing the base ($base_tar) with podman import"
	podman import --quiet "$base_tar" "$base_img" >/dev/null
fi

# The tree `make install` lays out, on top of the base.
step="installing into the image tree (make install DESTDIR=$out/root PREFIX=/usr)"
rm -rf "$out/root"
$MAKE --no-print-directory -s install BUILD="$BUILD" DESTDIR="$PWD/$out/root" PREFIX=/usr >/dev/null

step="building $IMAGE:$version with buildah"
ctr=$(buildah from --quiet --pull-never "$base_img")
trap 'rc=$?; buildah rm "$ctr" >/dev/null 2>&1 || true
	[ $rc -eq 0 ] || [ $rc -eq 3 ] || echo "image: failed while $step (exit $rc)" >&2' EXIT
buildah copy --quiet "$ctr" "$out/root/" / >/dev/null
buildah config --user "$LUNAR_UID:$LUNAR_UID" --workingdir /var/lib/lunar \
	--env LUNAR_SOCKET=/run/lunar/proxy.sock --entrypoint '[]' --cmd '["lunar-proxy", "--help"]' \
	--port 12345 --port 9300 --port 50051 --port 9003 \
	--label org.opencontainers.image.title=lunar \
	--label org.opencontainers.image.version="$version" \
	--label org.opencontainers.image.description="Lunar KV-cache store: lunar-master, lunar-proxy, lunarctl, lunar-bench, liblunar" \
	--label lunar.base="$SUITE essential from $mirror: ${pkgs[*]}" "$ctr"
buildah commit --quiet --rm "$ctr" "$IMAGE:$version" >/dev/null
ctr=
buildah tag "$IMAGE:$version" "$IMAGE:latest"
# The builds this one replaced, untagged now (ours only, by their label).
podman image prune -f --filter label=org.opencontainers.image.title=lunar >/dev/null || true
say "built $IMAGE:$version ($(podman image inspect --format '{{.Size}}' "$IMAGE:$version" | awk '{printf "%.1f MB", $1/1e6}')), user lunar ($LUNAR_UID)"
