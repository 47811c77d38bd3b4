#!/usr/bin/env bash
# test_format.sh - every C source and header is formatted as the repo's
# .clang-format says (`make format` fixes it). Lists the files that are
# not. Exits 0 pass, 1 fail, 77 skip (no clang-format, or not a git tree).
set -u
cd "$(dirname "$0")/../.." || exit 1
FORMAT=${CLANG_FORMAT:-clang-format}
command -v "$FORMAT" >/dev/null || { echo "SKIP: $FORMAT not found (apt-get install clang-format)"; exit 77; }
files=$(git ls-files '*.c' '*.h' 2>/dev/null) || { echo "SKIP: not a git checkout"; exit 77; }
[ -n "$files" ] || { echo "SKIP: no tracked C files"; exit 77; }
bad=0
for f in $files; do
	if ! "$FORMAT" --dry-run -Werror "$f" >/dev/null 2>&1; then
		echo "not formatted: $f"
		bad=$((bad + 1))
	fi
done
if [ "$bad" -gt 0 ]; then
	echo "FAIL: $bad file(s) differ from .clang-format (run make format)"
	exit 1
fi
echo "formatted: $(echo "$files" | wc -l) files"
