#!/usr/bin/env bash
# summonctl with a big tensor, as a user runs it: a 1 GiB float32 tensor read
# to a file with bounded memory (peak RSS measured, at most 64 MiB), exact
# values, the progress line under a pseudo-terminal (and not with --quiet or
# without a terminal), and the tensor streamed back in through stdin.
set -uo pipefail

work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/summonctl_stream.XXXXXX")"
# shellcheck source=tests/cli/summond_testlib.sh
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/cli/summond_testlib.sh"

# No --data-dir: the daemon unlinks its shards when it exits.
start_summond --local-ranks 2
export SUMMON_SERVER="$server"
ctl() { "$summonctl_bin" "$@"; }

# 16384 x 16384 float32 = 1 GiB in one parameter.
cat >"$work/layout.json" <<'JSON'
{"strategy": "FULL_SHARD", "units": [{"fqn": "", "params": [
  {"fqn": "w", "shape": [16384, 16384], "dtype": "float32"}]}]}
JSON
ctl model create big --layout "$work/layout.json" --init seeded:7 >/dev/null ||
  fail "model create"
session=$(ctl session open big --no-writeback) || fail "session open"

# Peak resident memory of summonctl reading 1 GiB: ru_maxrss of the child.
rss_kib=$(/usr/bin/python3 -c '
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if code == 0
      else "exit%d" % code)' \
  "$summonctl_bin" tensor read "$session" w --out "$work/w.npy")
case "$rss_kib" in exit*) fail "tensor read: $rss_kib" ;; esac
echo "summonctl tensor read of 1 GiB: peak RSS ${rss_kib} KiB"
[ "$rss_kib" -le 65536 ] || fail "peak RSS ${rss_kib} KiB > 64 MiB"
[ "$(stat -c %s "$work/w.npy")" -eq $((1073741824 + 128)) ] ||
  fail "w.npy has $(stat -c %s "$work/w.npy") bytes"
# The first MiB of data (after the 128-byte .npy header) is the seeded
# init, exactly.
"$seeded_values" w 7 262144 1 >"$work/head.bin" || fail "seeded_values"
head -c $((128 + 1048576)) "$work/w.npy" | tail -c 1048576 >"$work/got.bin"
cmp "$work/got.bin" "$work/head.bin" ||
  fail "the first MiB differs from the seeded init"

# Under a pseudo-terminal the progress line is drawn on stderr.
script -qec "$summonctl_bin tensor read $session w --out $work/tty.npy" \
  /dev/null >"$work/tty.log" 2>&1 || fail "tensor read under a terminal"
grep -q "read w from shared memory .*100%" "$work/tty.log" ||
  fail "no progress line of a same-host read under a terminal: $(tr '\r' '\n' <"$work/tty.log" | tail -3)"
# --no-map streams the same bytes over gRPC instead of reading the
# session's memory (MapSession), as a client on another host would.
script -qec "$summonctl_bin tensor read $session w --no-map --out $work/streamed.npy" \
  /dev/null >"$work/streamed.log" 2>&1 || fail "tensor read --no-map"
grep -q "read w .*100%" "$work/streamed.log" &&
  ! grep -q "shared memory" "$work/streamed.log" ||
  fail "--no-map did not stream: $(tr '\r' '\n' <"$work/streamed.log" | tail -3)"
cmp "$work/streamed.npy" "$work/w.npy" || fail "streamed and same-host reads differ"
rm -f "$work/streamed.npy"
script -qec "$summonctl_bin --quiet tensor read $session w --out $work/q.npy" \
  /dev/null >"$work/quiet.log" 2>&1 || fail "tensor read --quiet"
! grep -q "%" "$work/quiet.log" || fail "--quiet still drew progress"
ctl tensor read "$session" w --out "$work/plain.npy" >/dev/null 2>"$work/plain.err" ||
  fail "tensor read without a terminal"
[ ! -s "$work/plain.err" ] || fail "progress without a terminal: $(cat "$work/plain.err")"
rm -f "$work/tty.npy" "$work/q.npy" "$work/plain.npy"

# The same bytes streamed back in through stdin: a writeback of the tensor's
# own values leaves every shard's checksum as it was.
before=$(ctl model checksum big) || fail "checksum"
writer=$(ctl session open big) || fail "writable session open"
ctl tensor write "$writer" w --in - <"$work/w.npy" >/dev/null ||
  fail "tensor write --in -"
ctl session close "$writer" >/dev/null || fail "close with writeback"
after=$(ctl model checksum big) || fail "checksum"
[ "$(echo "$before" | awk '{print $3}')" = "$(echo "$after" | awk '{print $3}')" ] ||
  fail "a write of the same values changed the shards"

ctl session close "$session" >/dev/null
# The cleanup SIGKILLs summond, which then cannot unlink its shards: without
# this, every run would leave 1 GiB in /dev/shm.
ctl model delete big >/dev/null || fail "model delete"
echo "PASS"
