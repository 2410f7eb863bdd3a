#!/usr/bin/env bash
# Size and complexity limits for non-test Go code: no file over MAX_LINES
# lines, no function over MAX_CYCLO cyclomatic complexity (gocyclo). Lists
# every offender and fails when there is one. Applies to every non-test .go
# file git knows (tracked or new, not ignored).
#
# usage: hack/check-limits.sh GOCYCLO_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
gocyclo=${1:?usage: $0 path/to/gocyclo}
max_lines=${MAX_LINES:-600}
max_cyclo=${MAX_CYCLO:-25}

mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.go' ':!:*_test.go' | sort -u)
[ ${#files[@]} -gt 0 ] || exit 0

status=0
big=$(for f in "${files[@]}"; do [ -f "$f" ] && printf '%s %s\n' "$(wc -l <"$f")" "$f"; done | awk -v max="$max_lines" '$1 > max' | sort -rn)
if [ -n "$big" ]; then
	echo "non-test Go files over $max_lines lines:"
	echo "$big" | sed 's/^/  /'
	status=1
fi
existing=()
for f in "${files[@]}"; do [ -f "$f" ] && existing+=("$f"); done
complex=$("$gocyclo" -over "$max_cyclo" "${existing[@]}" | sort -rn || true)
if [ -n "$complex" ]; then
	echo "functions over cyclomatic complexity $max_cyclo (gocyclo):"
	echo "$complex" | sed 's/^/  /'
	status=1
fi
exit $status
