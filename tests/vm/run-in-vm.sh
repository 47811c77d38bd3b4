#!/usr/bin/env bash
# run-in-vm.sh - run a command as root inside a throwaway virtual machine
# whose kernel has soft-RoCE, so the RDMA paths run against a real verbs
# stack on a host without an RDMA device or kernel modules.
#
#   BUILD=build bash tests/vm/run-in-vm.sh SCRIPT
#
# The machine boots Debian's own kernel (linux-image-amd64, downloaded once
# with apt-get into $BUILD/vm/ and unpacked there, never installed) under
# qemu's software emulation (TCG: no KVM needed; this machine kind's nested
# KVM boots nothing), with this host's root file system shared read-only
# over 9p, so the
# guest runs the binaries just built and the host's libibverbs and rxe
# provider. /tmp, /run and /dev/shm are fresh tmpfs; there is no network
# device: the guest makes a veth pair (10.77.0.1 - 10.77.0.2), soft-RoCE
# devices rxe0 and rxe1 on its two ends, then runs SCRIPT (an absolute
# path on this host, read-only in the guest) with bash in the repository.
# SCRIPT's output is this script's; its exit status is this script's.
# The test environment (BUILD, LUNAR_TEST_SANITIZER and the sanitizers'
# options) goes along. Bounded by VM_TIMEOUT seconds (280); qemu stays in
# the caller's process group, so a timeout around this script ends it too.
# Exit 77 with the reason when the host cannot run the machine (no
# qemu-system-x86_64, no static busybox, the kernel not to be had).
set -u
BUILD=${BUILD:-build}
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
repo=$PWD
script=${1:?usage: run-in-vm.sh SCRIPT}
case $script in /*) ;; *) script=$repo/$script ;; esac
case $BUILD in /*) build=$BUILD ;; *) build=$repo/$BUILD ;; esac
vm=$build/vm
skip() {
	echo "skipped: $*"
	exit 77
}
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64 (package qemu-system-x86)"
busybox=$(command -v busybox) || skip "no busybox (package busybox-static)"
ldd "$busybox" 2>&1 | grep -q 'not a dynamic' ||
	skip "busybox is not static (package busybox-static)"
for t in depmod modprobe cpio; do
	command -v $t >/dev/null || skip "no $t (packages kmod, cpio)"
done

# The kernel and an initramfs of busybox, the modules the guest loads (in
# load order) and init; made once, again when this script changes.
if [ ! -e "$vm/initrd.img" ] || [ "$self" -nt "$vm/initrd.img" ]; then
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
	[ -n "$pkg" ] || skip "apt knows no linux-image-amd64"
	ver=${pkg#linux-image-}
	k=$vm/kernel rd=$vm/initrd
	rm -rf "$vm" && mkdir -p "$k" "$rd"/{bin,proc,sys,dev,root,modules} || {
		echo "vm: cannot make $vm"
		exit 1
	}
	(cd "$vm" && apt-get download "$pkg" >/dev/null 2>&1) || skip "apt-get download $pkg failed"
	dpkg-deb -x "$vm/${pkg}"_*.deb "$k" && rm -f "$vm"/*.deb || skip "cannot unpack $pkg"
	depmod -b "$k" "$ver" || skip "depmod failed"
	cp "$busybox" "$rd/bin/busybox"
	n=0
	for ko in $(modprobe -d "$k" -S "$ver" --show-depends -a virtio_pci 9pnet_virtio 9p veth \
		ib_uverbs rdma_rxe crc32_generic | awk '$1 == "insmod" && !seen[$2]++ {print $2}'); do
		n=$((n + 1))
		cp "$ko" "$rd/modules/$(printf %02d $n)-$(basename "$ko")"
	done
	compgen -G "$rd/modules/*-rdma_rxe.ko" >/dev/null || skip "$pkg has no uncompressed rdma_rxe module"
	cat >"$rd/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in /modules/*.ko; do insmod "$m" || echo "vm: insmod $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /root || echo "vm: no root"
arg() { sed -n "s/.*lunar.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
# The repository and the build directory stay visible where they are, even
# under /tmp, which a fresh tmpfs covers below.
n=0
for d in $(arg repo) $(arg build); do
	n=$((n + 1))
	mkdir -p /keep/$n && mount --bind "/root$d" /keep/$n
done
mount -t proc proc /root/proc
mount -t sysfs sys /root/sys
mount -t devtmpfs dev /root/dev
mkdir -p /root/dev/shm /root/dev/pts
mount -t tmpfs -o mode=1777 shm /root/dev/shm
mount -t devpts pts /root/dev/pts
mount -t tmpfs -o mode=1777 tmp /root/tmp
mount -t tmpfs run /root/run
n=0
for d in $(arg repo) $(arg build); do
	n=$((n + 1))
	mkdir -p "/root$d" && mount --bind /keep/$n "/root$d"
done
chroot /root /bin/bash "$(arg run)"
echo "lunar-vm-exit=$?"
poweroff -f
INIT
	chmod +x "$rd/init"
	cp "$k/boot/vmlinuz-$ver" "$vm/vmlinuz"
	(set -o pipefail && cd "$rd" && find . | cpio -o -H newc 2>/dev/null | gzip -1) \
		>"$vm/initrd.img.tmp" && mv "$vm/initrd.img.tmp" "$vm/initrd.img" || {
		echo "vm: cannot make the initramfs"
		exit 1
	}
	rm -rf "$k" "$rd"
fi

# What the guest runs: the devices, then SCRIPT in the repository.
out=$(mktemp /tmp/lunar-vm-XXXXXX) && run=$(mktemp "$vm/run-XXXXXX") || {
	echo "vm: cannot make temporary files"
	exit 1
}
trap 'rm -f "$out" "$run"' EXIT
{
	export -p | grep -E '^declare -x (BUILD|LUNAR_TEST_SANITIZER|[A-Z]+SAN_OPTIONS)='
	cat <<RUN
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp
ip link set lo up
ip link add veth0 type veth peer name veth1
ip addr add 10.77.0.1/24 dev veth0
ip addr add 10.77.0.2/24 dev veth1
ip link set veth0 up && ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0 && rdma link add rxe1 type rxe netdev veth1 ||
	echo "vm: no soft-RoCE device"
cd '$repo'
bash '$script'
RUN
} >"$run"

timeout --foreground -k 5 "${VM_TIMEOUT:-280}" qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m "${VM_MEM:-3072}" \
	-kernel "$vm/vmlinuz" -initrd "$vm/initrd.img" \
	-append "console=ttyS0 quiet loglevel=3 panic=-1 lunar.run=$run lunar.repo=$repo lunar.build=$build" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	-nic none -display none -serial "file:$out" -monitor none -no-reboot
qrc=$?
tr -d '\r' <"$out" | grep -v '^lunar-vm-exit='
rc=$(tr -d '\r' <"$out" | sed -n 's/^lunar-vm-exit=\([0-9]*\)$/\1/p' | tail -1)
[ -n "$rc" ] || {
	echo "vm: the machine ended without an exit status (qemu exit $qrc)"
	exit 1
}
exit "$rc"
