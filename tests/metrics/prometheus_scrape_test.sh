#!/usr/bin/env bash
# A real Prometheus server (Debian's /usr/bin/prometheus, scrape interval
# 1 s) scrapes a 2-node summon cluster, one target per node; after a known
# workload (3 sessions opened and closed through both nodes, one writeback)
# PromQL over the scraped series returns the expected values.
set -uo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/metrics/metrics_common.sh"

read -r p0 p1 m0 m1 pp <<<"$(free_ports 5)"
nodes="127.0.0.1:$p0,127.0.0.1:$p1"
for rank in 0 1; do
  mport_var="m$rank"
  mkdir -p "$work/n$rank"
  "$summond_bin" --insecure-local --nodes "$nodes" --coordinator static \
    --node-rank "$rank" --local-ranks 1 \
    --heartbeat-ms 200 --data-dir "$work/n$rank" \
    --metrics-listen "127.0.0.1:${!mport_var}" --log-level warn \
    >"$work/n$rank.log" 2>&1 &
  pids+=($!)
done

# Ready once both nodes say so on their own /metrics.
for _ in $(seq 200); do
  r0="$(curl -sf "http://127.0.0.1:$m0/metrics" | grep -x 'summon_node_ready 1')"
  r1="$(curl -sf "http://127.0.0.1:$m1/metrics" | grep -x 'summon_node_ready 1')"
  [ -n "$r0" ] && [ -n "$r1" ] && break
  sleep 0.1
done
[ -n "$r0" ] && [ -n "$r1" ] ||
  fail "cluster not READY in 20 s: $(cat "$work"/n*.log)"

cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: summond
    static_configs:
      - targets: ['127.0.0.1:$m0', '127.0.0.1:$m1']
YML
start_prometheus "$work/prometheus.yml"

# The workload: through node 1 (forwarded to the leader) and node 0.
server="127.0.0.1:$p1"
ctl model create m --layout "$layout" --init seeded:7 >/dev/null ||
  fail "model create"
a="$(ctl session open m --scope layers.0)" || fail "open a"
b="$(ctl session open m --scope layers.1 --no-writeback)" || fail "open b"
server="127.0.0.1:$p0"
c="$(ctl session open m --scope layers.2 --no-writeback)" || fail "open c"
for id in "$a" "$b" "$c"; do
  ctl session close "$id" >/dev/null || fail "close $id"
done

expect_query 'count(up{job="summond"} == 1)' 2
expect_query 'sum(summon_node_ready)' 2
expect_query 'sum(summon_session_opens_total{result="OK"})' 3
expect_query 'sum(summon_session_closes_total{result="OK"})' 3
expect_query 'sum(summon_writebacks_total{result="OK"})' 1
# Each gather puts a full copy (12608 bytes per layer) on both nodes.
expect_query 'sum(summon_gathered_bytes_total)' $((2 * 3 * 12608))
expect_query 'sum(summon_sessions_open)' 0
expect_query 'count(summon_leader_epoch > 0)' 2
expect_query 'count(summon_peer_heartbeat_age_seconds < 5)' 1

ctl model delete m >/dev/null || fail "model delete"
echo "PASS"
