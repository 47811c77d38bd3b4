#!/usr/bin/env bash
# run.sh - run test binaries one after another, each bounded in time, and
# print one closing line: "N passed, N failed, N skipped".
# A binary exits 0 (pass), 77 (skipped: it printed why) or anything else (fail).
set -u
passed=0 failed=0 skipped=0 failures=()
limit=${TEST_TIMEOUT:-300}
for t in "$@"; do
	name=${t#"${BUILD:-build}"/tests/}
	start=$(date +%s%N)
	timeout -k 5 "$limit" "$t"
	rc=$?
	ms=$((($(date +%s%N) - start) / 1000000)); secs="$((ms / 1000)).$((ms % 1000 / 100))"
	case $rc in
	0) passed=$((passed + 1)); echo "== PASS $name (${secs}s)" ;;
	77) skipped=$((skipped + 1)); echo "== SKIP $name (${secs}s)" ;;
	*) failed=$((failed + 1)); failures+=("$name"); echo "== FAIL $name (exit $rc, ${secs}s)" ;;
	esac
done
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
