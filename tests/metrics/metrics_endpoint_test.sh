#!/usr/bin/env bash
# A live summond with --metrics-listen 127.0.0.1:0: after a known workload
# (3 sessions opened, 1 refused, a read, a write, a writeback) /metrics shows
# exact counter and gauge values, and `promtool check metrics` accepts it.
set -uo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/metrics/metrics_common.sh"

mkdir -p "$work/data"
# No staging pre-fault: it races the writeback it serves (each rank's spare
# is adopted or made by the writeback, whichever comes first), and the pool
# counts below are exact. shard_store_staging_test covers the pre-fault.
"$summond_bin" --insecure-local --listen 127.0.0.1:0 --port-file "$work/port" \
  --metrics-listen 127.0.0.1:0 --metrics-port-file "$work/metrics_port" \
  --local-ranks 2 --data-dir "$work/data" --log-level warn \
  --staging-prefault=false &
pids+=($!)
wait_for_file "$work/port"
wait_for_file "$work/metrics_port"
server="127.0.0.1:$(cat "$work/port")"
mp="$(cat "$work/metrics_port")"
[ "$mp" -gt 0 ] || fail "metrics port $mp"

# Before any call: every family is there, label-less ones at 0.
expect_sample "$mp" 'summon_node_up' 1
expect_sample "$mp" 'summon_node_ready' 1
expect_sample "$mp" 'summon_gathered_bytes_total' 0
expect_sample "$mp" 'summon_sessions_open{kind="writable"}' 0

ctl model create m --layout "$layout" --init seeded:42 >/dev/null ||
  fail "model create"
a="$(ctl session open m --scope layers.1)" || fail "open a"
b="$(ctl session open m --scope layers.2 --no-writeback)" || fail "open b"
c="$(ctl session open m --scope layers.3 --no-writeback)" || fail "open c"
ctl session open nosuchmodel >/dev/null 2>&1 && fail "open of a missing model"

expect_sample "$mp" 'summon_sessions_open{kind="writable"}' 1
expect_sample "$mp" 'summon_sessions_open{kind="readonly"}' 2
# layers.N is 3152 float32 = 12608 bytes; three distinct gathers.
expect_sample "$mp" 'summon_memory_budget_used_bytes{node="0"}' $((3 * 12608))

# One read and one write of layers.1.attn.qkv.weight ([48, 16] float32).
ctl tensor read "$a" layers.1.attn.qkv.weight --out "$work/w.npy" >/dev/null ||
  fail "read"
ctl tensor write "$a" layers.1.attn.qkv.weight --in "$work/w.npy" >/dev/null ||
  fail "write"
for id in "$a" "$b" "$c"; do
  ctl session close "$id" >/dev/null || fail "close $id"
done

expect_sample "$mp" 'summon_session_opens_total{result="OK"}' 3
expect_sample "$mp" 'summon_session_opens_total{result="NOT_FOUND"}' 1
expect_sample "$mp" 'summon_session_closes_total{result="OK"}' 3
expect_sample "$mp" 'summon_writebacks_total{result="OK"}' 1
expect_sample "$mp" 'summon_gathered_bytes_total' $((3 * 12608))
expect_sample "$mp" 'summon_read_bytes_total' 3072
expect_sample "$mp" 'summon_written_bytes_total' 3072
expect_sample "$mp" 'summon_gather_duration_seconds_count' 3
expect_sample "$mp" 'summon_gather_duration_seconds_bucket{le="+Inf"}' 3
expect_sample "$mp" 'summon_read_duration_seconds_count' 1
expect_sample "$mp" 'summon_writeback_duration_seconds_count' 1
expect_sample "$mp" 'summon_sessions_open{kind="writable"}' 0
expect_sample "$mp" 'summon_sessions_open{kind="readonly"}' 0
expect_sample "$mp" 'summon_memory_budget_used_bytes{node="0"}' 0
expect_sample "$mp" 'summon_trainer_ranks{phase="IDLE"}' 2
expect_sample "$mp" 'summon_trainers_attached' 0
# The closed sessions' copies stay mapped for the next open (issue 22): three
# fresh mappings of 12608 bytes, each rounded up to 4 KiB pages; a's
# writeback left a spare staged segment on each rank.
expect_sample "$mp" 'summon_copy_pool_acquires_total{source="fresh"}' 3
expect_sample "$mp" 'summon_copy_pool_acquires_total{source="reused"}' 0
expect_sample "$mp" 'summon_copy_pool_retained_bytes' $((3 * 16384))
expect_sample "$mp" 'summon_staging_pool_reuses_total' 0
expect_sample "$mp" 'summon_staging_prefaults_total{result="done"}' 0
expect_sample "$mp" 'summon_staging_prefaults_total{result="refused"}' 0
# The next writable session reuses a kept copy, and its writeback both
# ranks' spare staging.
d="$(ctl session open m --scope layers.1)" || fail "open d"
ctl tensor write "$d" layers.1.attn.qkv.weight --in "$work/w.npy" >/dev/null ||
  fail "write d"
ctl session close "$d" >/dev/null || fail "close d"
expect_sample "$mp" 'summon_copy_pool_acquires_total{source="reused"}' 1
expect_sample "$mp" 'summon_copy_pool_acquires_total{source="fresh"}' 3
expect_sample "$mp" 'summon_staging_pool_reuses_total' 2

scrape "$mp" >"$work/metrics.txt"
grep -q '^# TYPE summon_session_opens_total counter$' "$work/metrics.txt" ||
  fail "no TYPE line for opens"
# Counts since start are counters (rate() applies), whoever computes them.
for counter in summon_copy_pool_acquires_total summon_staging_pool_reuses_total \
  summon_staging_prefaults_total; do
  grep -q "^# TYPE $counter counter\$" "$work/metrics.txt" ||
    fail "$counter is not declared a counter: $(grep "$counter" "$work/metrics.txt")"
done
promtool check metrics <"$work/metrics.txt" ||
  fail "promtool check metrics rejected: $(cat "$work/metrics.txt")"
curl -sf -o /dev/null "http://127.0.0.1:$mp/metrics" -H 'Accept: text/plain' ||
  fail "second scrape"
# Its shared-memory shards go with it.
ctl model delete m >/dev/null || fail "model delete"
echo "PASS"
