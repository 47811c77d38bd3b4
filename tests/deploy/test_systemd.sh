#!/usr/bin/env bash
# test_systemd.sh - the units in systemd/ stay hardened: systemd-analyze
# security --offline rates each at an exposure of 4 or less, with no
# directive it does not know, and the proxy's unit keeps what SO_PEERCRED and
# RDMA need (no PrivateUsers, no PrivateDevices, AF_UNIX, LimitMEMLOCK).
# Exit 0 pass, 77 skipped (no systemd-analyze, or one without --offline:
# systemd before 250), 1 fail.
set -u
cd "$(dirname "$0")/../.."
command -v systemd-analyze >/dev/null || { echo "skipped: no systemd-analyze"; exit 77; }
if ! systemd-analyze security --help 2>&1 | grep -q -- --offline &&
	! systemd-analyze --help 2>&1 | grep -q -- --offline; then
	echo "skipped: systemd-analyze $(systemd-analyze --version | head -1 | awk '{print $2}') has no --offline"
	exit 77
fi
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
rc=0
for u in systemd/lunar-master.service systemd/lunar-proxy.service; do
	systemd-analyze security --offline=yes "$u" >"$tmp/out" 2>"$tmp/err"
	score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$tmp/out")
	if [ -z "$score" ]; then
		cat "$tmp/out" "$tmp/err"
		echo "FAIL: $u: no exposure level"
		rc=1
		continue
	fi
	echo "  $u: exposure $score"
	if grep -iE 'unknown|invalid|failed to parse|ignoring' "$tmp/err"; then
		echo "FAIL: $u: systemd-analyze did not take every line"
		rc=1
	fi
	awk -v s="$score" 'BEGIN { exit !(s <= 4.0) }' || { echo "FAIL: $u: exposure $score > 4"; rc=1; }
done
p=systemd/lunar-proxy.service
for bad in '^PrivateUsers=(yes|true|1)' '^PrivateDevices=(yes|true|1)' '^ProcSubset=pid'; do
	! grep -qE "$bad" $p || { echo "FAIL: $p: $bad breaks SO_PEERCRED, RDMA or --max-registrations"; rc=1; }
done
for need in '^RestrictAddressFamilies=.*AF_UNIX' '^LimitMEMLOCK=infinity' '^User=lunar' \
	'^OOMScoreAdjust=-500' '^LimitNOFILE='; do
	grep -qE "$need" $p || { echo "FAIL: $p: no $need"; rc=1; }
done
exit $rc
