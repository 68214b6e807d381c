#!/usr/bin/env bash
# scripts/check_shm_leaks over a directory of its own (SHM_DIR): a segment
# made after the snapshot fails the compare and is named; one that was there
# before, a removed one and files not named summon-* do not.
set -uo pipefail
check="$TEST_SRCDIR/$TEST_WORKSPACE/scripts/check_shm_leaks"
[ -x "$check" ] || check="$(dirname "$0")/../../scripts/check_shm_leaks"
dir=$(mktemp -d)
trap 'rm -rf "$dir" "$dir.snap"' EXIT
export SHM_DIR="$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

touch "$dir/summon-old-m-r0-params" "$dir/summon-gone-m-r0-params"
"$check" snapshot "$dir.snap" || fail "snapshot"
rm "$dir/summon-gone-m-r0-params"
touch "$dir/not-summon" "$dir/sem.summonish"
out=$("$check" compare "$dir.snap" 2>&1) || fail "a clean run failed: $out"

touch "$dir/summon-new-m-r0-params" "$dir/summon-new-m-r0-staged"
out=$("$check" compare "$dir.snap" 2>&1)
code=$?
[ "$code" -eq 1 ] || fail "a leak exited $code, not 1"
case "$out" in
  *"left 2 summon-* segment(s)"*) ;;
  *) fail "the count is missing: $out" ;;
esac
for name in summon-new-m-r0-params summon-new-m-r0-staged; do
  case "$out" in *"  $name"*) ;; *) fail "$name is not listed: $out" ;; esac
done
case "$out" in *summon-old-m-r0-params*) fail "an old segment was listed" ;; esac

"$check" compare "$dir/missing.snap" >/dev/null 2>&1
[ $? -eq 2 ] || fail "a missing snapshot is not a usage error"
"$check" frobnicate x >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown verb is not a usage error"

[ "$failures" -eq 0 ] && echo "check_shm_leaks_test: OK"
exit "$failures"
