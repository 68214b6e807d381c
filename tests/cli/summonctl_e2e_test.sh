#!/usr/bin/env bash
# summond and summonctl as a user runs them: separate processes, a real port,
# a data directory, signals. Checks exact tensor values against the seeded
# init, the exit code = gRPC code contract, persistence across a daemon
# restart, and that a deleted model leaves no shared memory behind.
set -uo pipefail

work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/summonctl_e2e.XXXXXX")"
# shellcheck source=tests/cli/summond_testlib.sh
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/cli/summond_testlib.sh"
layout="$runfiles/examples/gpt_tiny.json"
data_dir="$work/data"
model=clie2e
weight=layers.1.attn.qkv.weight
weight_numel=768  # [48, 16] in examples/gpt_tiny.json.
seed=42
instance=""

# A failed run must not leave this run's segments for the next one.
remove_segments() {
  if [ -n "$instance" ]; then rm -f /dev/shm/summon-"$instance"-*; fi
}
cleanup_extra=remove_segments

ctl() { "$summonctl_bin" --server "$server" "$@"; }

# expect CODE STDERR_PREFIX ARGS...: summonctl ARGS exits with CODE (the gRPC
# status code) and, when failing, says so on stderr as "ERROR <NAME>: ...".
expect() {
  local code=$1 prefix=$2
  shift 2
  ctl "$@" >"$work/out" 2>"$work/err"
  local status=$?
  [ "$status" -eq "$code" ] ||
    fail "summonctl $* exited $status, want $code; stderr: $(cat "$work/err")"
  case "$(head -n 1 "$work/err")" in
    "$prefix"*) ;;
    *) fail "summonctl $* stderr starts '$(head -n 1 "$work/err")', want '$prefix'" ;;
  esac
}

# The data section of a .npy file (version 1.0: 10 + HEADER_LEN bytes first).
npy_data() {
  local header_len
  header_len=$(od -A n -t u2 -j 8 -N 2 "$1" | tr -d ' ')
  tail -c +$((10 + header_len + 1)) "$1"
}

# The names in /dev/shm matching a glob, one per line.
shm_names() {
  (
    shopt -s nullglob
    cd /dev/shm || exit 1
    # shellcheck disable=SC2206  # The pattern is meant to expand here.
    local names=($1)
    if [ "${#names[@]}" -gt 0 ]; then printf '%s\n' "${names[@]}"; fi
  )
}

# The shared-memory segments of this run's daemon instance.
instance_segments() { shm_names "summon-${instance}-*"; }

# --- start, create ------------------------------------------------------------
start_summond --local-ranks 4 --data-dir "$data_dir"
rank0_segments() { shm_names "summon-*-${model}-r0-params"; }
stale="$(rank0_segments)"  # Other daemons' model of this name, if any.
expect 0 "" model create "$model" --layout "$layout" --init "seeded:$seed"
instance="$(rank0_segments | grep -vxF -e "$stale" |
  sed -n "s/^summon-\(.*\)-${model}-r0-params\$/\1/p")"
[ -n "$instance" ] || fail "model create made no rank 0 segment in /dev/shm"
want_segments="$(printf "summon-${instance}-${model}-r%d-params\n" 0 1 2 3)"
[ "$(instance_segments)" = "$want_segments" ] ||
  fail "want one params segment per local rank, got: $(instance_segments)"

# --- read: exact seeded values --------------------------------------------------
sid="$(ctl session open "$model" --scope layers.1)" || fail "session open failed"
expect 0 "" tensor read "$sid" "$weight" --out "$work/seeded.npy"
head -c 128 "$work/seeded.npy" | grep -q "'descr': '<f4', 'fortran_order': False, 'shape': (48, 16)" ||
  fail "unexpected .npy header: $(head -c 128 "$work/seeded.npy" | tr -d '\0')"
# First elements as the seeded-init formula (docs/design.md#seeded-init)
# gives them, computed independently of core/ (element 0 =
# -0.05432087182998657 = 0xbd5e7f90).
first="$(npy_data "$work/seeded.npy" | od -A n -t x4 -N 16 | tr -s ' ')"
[ "$first" = " bd5e7f90 befdabb8 bd6f08f0 bec0f136" ] ||
  fail "first elements of $weight are$first, want bd5e7f90 befdabb8 bd6f08f0 bec0f136"
"$seeded_values" "$weight" "$seed" "$weight_numel" 1 >"$work/expected_seeded.bin" ||
  fail "seeded_values failed"
cmp <(npy_data "$work/seeded.npy") "$work/expected_seeded.bin" ||
  fail "$weight differs from its seeded init"

# --- the user's files (issue 23): a FIFO with a reader is written through and
# stays a FIFO, nothing beside it; a symlink's target is written, the link kept.
mkdir "$work/out_dir"
mkfifo "$work/out_dir/pipe"
cat "$work/out_dir/pipe" >"$work/from_pipe.npy" &
reader=$!
expect 0 "" tensor read "$sid" "$weight" --out "$work/out_dir/pipe"
wait "$reader" || fail "the FIFO's reader failed"
[ -p "$work/out_dir/pipe" ] || fail "the FIFO was replaced"
[ "$(ls "$work/out_dir")" = "pipe" ] || fail "beside the FIFO: $(ls "$work/out_dir")"
cmp "$work/from_pipe.npy" "$work/seeded.npy" || fail "the FIFO got other bytes"
ln -s seeded.npy "$work/link.npy"
expect 0 "" tensor read "$sid" "$weight" --out "$work/link.npy"
[ -L "$work/link.npy" ] || fail "the symlink was replaced"
cmp "$work/link.npy" "$work/seeded.npy" || fail "the symlink's target differs"

# --- write doubled values, close with writeback, reopen read-only --------------
npy_header_len=$(($(wc -c <"$work/seeded.npy") - weight_numel * 4))
{
  head -c "$npy_header_len" "$work/seeded.npy"
  "$seeded_values" "$weight" "$seed" "$weight_numel" 2
} >"$work/doubled.npy"
cmp -s "$work/seeded.npy" "$work/doubled.npy" && fail "doubling changed nothing"
expect 0 "" tensor write "$sid" "$weight" --in "$work/doubled.npy"
expect 0 "" session close "$sid"
grep -q '^written_back *true' "$work/out" || fail "close did not write back: $(cat "$work/out")"

read_back() {
  local ro
  ro="$(ctl session open "$model" --scope layers.1 --no-writeback)" ||
    fail "read-only session open failed"
  expect 0 "" tensor read "$ro" "$weight" --out "$1"
  expect 0 "" session close "$ro"
}
read_back "$work/back.npy"
cmp "$work/doubled.npy" "$work/back.npy" || fail "doubled values did not persist"

# --- failures: exit code = gRPC status code --------------------------------------
expect 5 "ERROR NOT_FOUND: no session s-0000000000000000" \
  session get s-0000000000000000
expect 5 "ERROR NOT_FOUND: no session s-0000000000000000" \
  tensor read s-0000000000000000 "$weight" --out "$work/none.npy"
[ ! -e "$work/none.npy" ] || fail "a failed read wrote a file"
expect 0 "" trainer phase "$model" 0 FORWARD
expect 9 "ERROR FAILED_PRECONDITION: cannot open a session on model '$model': rank 0 is in FORWARD" \
  session open "$model" --scope layers.1
expect 0 "" trainer phase "$model" 0 IDLE
expect 3 "ERROR INVALID_ARGUMENT: unknown verb 'frobnicate' for 'session'" \
  session frobnicate
expect 3 "ERROR INVALID_ARGUMENT: missing flag --layout" model create other

# --- restart: the shards survive in shared memory -------------------------------
stop_summond
[ "$(instance_segments)" = "$want_segments" ] ||
  fail "a daemon with --data-dir must keep its segments: $(instance_segments)"
start_summond --local-ranks 4 --data-dir "$data_dir"
expect 0 "" model list
grep -q "^$model " "$work/out" || fail "restarted summond lost $model: $(cat "$work/out")"
read_back "$work/restarted.npy"
cmp "$work/doubled.npy" "$work/restarted.npy" ||
  fail "doubled values did not survive the restart"

# --- delete, stop, nothing left ---------------------------------------------------
expect 0 "" model delete "$model"
expect 5 "ERROR NOT_FOUND: no model named '$model'" model describe "$model"
[ ! -e "$data_dir/models/$model.json" ] || fail "model record left in $data_dir"
stop_summond
[ -z "$(instance_segments)" ] ||
  fail "shared memory left behind: $(instance_segments)"

echo "PASS"
