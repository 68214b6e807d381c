#!/usr/bin/env bash
# A TLS summond (--tls-cert/--tls-key, tests/security/make_pki.sh) serves
# /metrics over HTTPS with its gRPC certificate: a real Prometheus scrapes it
# with `scheme: https` and the CA (docs/operations.md "Metrics"); curl
# verifies the certificate with the CA, fails without it, and plain HTTP gets
# no answer.
set -uo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tests/metrics/metrics_common.sh"

"$runfiles/tests/security/make_pki.sh" "$work/pki" >/dev/null 2>&1 ||
  fail "make_pki.sh"
read -r p0 m0 pp <<<"$(free_ports 3)"
mkdir -p "$work/n0"
"$summond_bin" --listen "127.0.0.1:$p0" --local-ranks 1 --data-dir "$work/n0" \
  --tls-cert "$work/pki/server.crt" --tls-key "$work/pki/server.key" \
  --metrics-listen "127.0.0.1:$m0" --log-level info >"$work/n0.log" 2>&1 &
pids+=($!)

https="https://127.0.0.1:$m0/metrics"
for _ in $(seq 100); do
  curl -sf --cacert "$work/pki/ca.crt" "$https" | grep -x 'summon_node_up 1' >/dev/null &&
    break
  sleep 0.1
done
curl -sf --cacert "$work/pki/ca.crt" "$https" | grep -x 'summon_node_up 1' >/dev/null ||
  fail "no HTTPS /metrics with the CA: $(cat "$work/n0.log")"
grep -qF "serving metrics on https://127.0.0.1:$m0/metrics" "$work/n0.log" ||
  fail "the log does not name the https address: $(cat "$work/n0.log")"
curl -sf "$https" >/dev/null 2>&1 && fail "the certificate verified without the CA"
curl -sf --max-time 10 "http://127.0.0.1:$m0/metrics" >/dev/null 2>&1 &&
  fail "plain HTTP was answered on the TLS listener"

cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: summond
    scheme: https
    tls_config:
      ca_file: $work/pki/ca.crt
    static_configs:
      - targets: ['127.0.0.1:$m0']
YML
start_prometheus "$work/prometheus.yml"

expect_query 'count(up{job="summond"} == 1)' 1
expect_query 'sum(summon_node_up)' 1
expect_query 'sum(summon_node_ready)' 1
echo "PASS"
