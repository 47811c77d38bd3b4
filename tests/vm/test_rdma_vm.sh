#!/usr/bin/env bash
# test_rdma_vm.sh - the RDMA tests against a real verbs stack: inside a
# machine with soft-RoCE devices (run-in-vm.sh), the engine's device tests
# (test_rdma_device), a keyed cluster whose values travel over RDMA
# (test_rdma_cluster; both skip on a host without a device) and a peer
# stopped mid-transfer (test_peer_stop), its transfers over RDMA.
# VM_TESTS names other test binaries under $BUILD/tests/ to run there too
# (make rdma-vm: the cluster tests with remote transfers, writes held back
# at their owner among them). Exit 0 pass,
# 77 skipped (the machine cannot run here: the reason is printed), 1 fail.
set -u
BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.."
tests="unit/test_rdma_device integration/test_rdma_cluster integration/test_peer_stop ${VM_TESTS:-}"
bins=()
for t in $tests; do
	[ -x "$BUILD/tests/$t" ] || { echo "FAIL: no $BUILD/tests/$t (build it first)"; exit 1; }
	bins+=("$BUILD/tests/$t")
done
case $BUILD in /*) dir=$BUILD ;; *) dir=$PWD/$BUILD ;; esac
inner=$(mktemp "$dir/vm-tests-XXXXXX") || { echo "FAIL: cannot write to $BUILD"; exit 1; }
trap 'rm -f "$inner"' EXIT
# Inside, a test that skips for want of a device fails: the machine has two;
# and the cluster tests check their transfers went by RDMA (LUNAR_TEST_RDMA).
cat >"$inner" <<INNER
rdma link show | grep -q ACTIVE || { echo "FAIL: no active soft-RoCE device in the machine"; exit 1; }
export LUNAR_TEST_RDMA=1
bash tests/run.sh ${bins[*]} 2>&1 | tee /tmp/run.out
rc=\${PIPESTATUS[0]}
grep -q '^== SKIP' /tmp/run.out && { echo "FAIL: a test skipped beside an RDMA device"; exit 1; }
exit \$rc
INNER
bash tests/vm/run-in-vm.sh "$inner"
