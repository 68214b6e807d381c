#!/bin/bash
# Checks deploy/entrypoint.sh: each listed node gets its rank and the shared
# --nodes list; an unlisted node is refused; a one-node list runs standalone;
# the optional listeners and the mounted secrets become flags only when their
# files exist; a certificate without its key (or a client CA without TLS) is
# refused; the container's args come last; a "coordinator" key (and its
# lease TTL) becomes --coordinator for a cluster, ignored with a note for one
# node; without it a cluster is named --coordinator static; the etcd
# client secret's files and the coordinator-user key become
# --coordinator-ca/-cert/-key/-user/-password-file, a half pair is refused.
set -euo pipefail
entry="$TEST_SRCDIR/summon/deploy/entrypoint.sh"
config=$(mktemp -d)
secrets=$(mktemp -d)
trap 'rm -rf "$config" "$secrets"' EXIT
printf 'a 10.0.0.1:7070\nb 10.0.0.2:7070\nc 10.0.0.3:7070\n' > "$config/nodes.txt"
echo 4 > "$config/local-ranks"
echo 1024 > "$config/memory-budget"
echo 200 > "$config/heartbeat-ms"
echo 3000 > "$config/collective-timeout-ms"
run() {
  local node=$1
  shift
  SUMMON_CONFIG="$config" SUMMON_DRY_RUN=1 NODE_NAME="$node" \
    SUMMON_TLS_CERT="$secrets/tls.crt" SUMMON_TLS_KEY="$secrets/tls.key" \
    SUMMON_TLS_CLIENT_CA="$secrets/ca.crt" SUMMON_TOKENS="$secrets/tokens" \
    SUMMON_ETCD_DIR="$secrets/etcd" sh "$entry" "$@"
}
checks=0
pass() { checks=$((checks + 1)); }

base="/opt/summon/summond --local-ranks 4 --memory-budget 1024 --heartbeat-ms 200 --collective-timeout-ms 3000 --data-dir /var/lib/summon"
cluster="--nodes 10.0.0.1:7070,10.0.0.2:7070,10.0.0.3:7070"
out=$(run b)
expected="$base $cluster --node-rank 1 --coordinator static"
[ "$out" = "$expected" ] || { echo "node b: got '$out'"; exit 1; }
pass
run c | grep -q -- "--node-rank 2 --coordinator static$" || { echo "node c: wrong rank"; exit 1; }
pass
if run z 2>/dev/null; then echo "unlisted node accepted"; exit 1; fi
pass

# Listeners from the ConfigMap, secrets from their mounts, container args last.
echo 0.0.0.0:9464 > "$config/metrics-listen"
echo 0.0.0.0:7071 > "$config/health-listen"
touch "$secrets/tls.crt" "$secrets/tls.key" "$secrets/ca.crt" "$secrets/tokens"
out=$(run a --device cuda)
expected="$base $cluster --node-rank 0 --coordinator static --metrics-listen 0.0.0.0:9464 --health-listen 0.0.0.0:7071 --tls-cert $secrets/tls.crt --tls-key $secrets/tls.key --tls-client-ca $secrets/ca.crt --tokens $secrets/tokens --device cuda"
[ "$out" = "$expected" ] || { echo "all flags: got '$out'"; exit 1; }
pass

# Tokens only (no client CA): TLS and --tokens, no --tls-client-ca.
rm "$secrets/ca.crt"
out=$(run a)
case "$out" in
  *--tls-client-ca*) echo "client CA passed without its file: '$out'"; exit 1 ;;
  *"--tls-cert $secrets/tls.crt --tls-key $secrets/tls.key --tokens $secrets/tokens") ;;
  *) echo "tokens only: got '$out'"; exit 1 ;;
esac
pass

# A certificate without its key, or a key without its certificate: refused.
rm "$secrets/tls.key"
if run a 2>/dev/null; then echo "certificate without key accepted"; exit 1; fi
pass
mv "$secrets/tls.crt" "$secrets/tls.key"
if run a 2>/dev/null; then echo "key without certificate accepted"; exit 1; fi
pass
# A client CA without TLS: refused.
rm "$secrets/tls.key"
touch "$secrets/ca.crt"
if run a 2>/dev/null; then echo "client CA without TLS accepted"; exit 1; fi
pass
rm "$secrets/ca.crt"

# An etcd coordinator from the ConfigMap: after the rank, before the
# listeners; the rank still from nodes.txt.
url="etcd://summon-etcd-0.summon-etcd.summon.svc:2379,summon-etcd-1.summon-etcd.summon.svc:2379/summon"
echo "$url" > "$config/coordinator"
out=$(run c --device cuda)
expected="$base $cluster --node-rank 2 --coordinator $url --metrics-listen 0.0.0.0:9464 --health-listen 0.0.0.0:7071 --tokens $secrets/tokens --device cuda"
[ "$out" = "$expected" ] || { echo "coordinator: got '$out'"; exit 1; }
pass
echo 5s > "$config/coordinator-lease-ttl"
out=$(run a)
expected="$base $cluster --node-rank 0 --coordinator $url --coordinator-lease-ttl 5s --metrics-listen 0.0.0.0:9464 --health-listen 0.0.0.0:7071 --tokens $secrets/tokens"
[ "$out" = "$expected" ] || { echo "coordinator and lease: got '$out'"; exit 1; }
pass

# TLS and authentication to etcd from the summon-etcd-client secret and the
# coordinator-user key, after the coordinator's flags.
mkdir "$secrets/etcd"
touch "$secrets/etcd/ca.crt" "$secrets/etcd/tls.crt" "$secrets/etcd/tls.key" "$secrets/etcd/password"
echo summon > "$config/coordinator-user"
out=$(run a)
expected="$base $cluster --node-rank 0 --coordinator $url --coordinator-lease-ttl 5s --coordinator-ca $secrets/etcd/ca.crt --coordinator-cert $secrets/etcd/tls.crt --coordinator-key $secrets/etcd/tls.key --coordinator-user summon --coordinator-password-file $secrets/etcd/password --metrics-listen 0.0.0.0:9464 --health-listen 0.0.0.0:7071 --tokens $secrets/tokens"
[ "$out" = "$expected" ] || { echo "etcd TLS and user: got '$out'"; exit 1; }
pass
# A user without its password, a client certificate without its key: refused.
rm "$secrets/etcd/password"
if run a 2>/dev/null; then echo "etcd user without password accepted"; exit 1; fi
pass
rm "$config/coordinator-user" "$secrets/etcd/tls.key"
if run a 2>/dev/null; then echo "etcd certificate without key accepted"; exit 1; fi
pass
rm -r "$secrets/etcd"

# One node: standalone on the gRPC port, listeners still passed; a
# coordinator is not passed (summond refuses one for a single node) and the
# entrypoint says so.
printf 'solo 10.0.0.9:7070\n' > "$config/nodes.txt"
out=$(run solo 2>"$config/stderr")
expected="/opt/summon/summond --local-ranks 4 --memory-budget 1024 --heartbeat-ms 200 --collective-timeout-ms 3000 --data-dir /var/lib/summon --listen 0.0.0.0:7070 --metrics-listen 0.0.0.0:9464 --health-listen 0.0.0.0:7071 --tokens $secrets/tokens"
[ "$out" = "$expected" ] || { echo "single node: got '$out'"; exit 1; }
[ "$(cat "$config/stderr")" = "entrypoint: one node in $config/nodes.txt needs no coordinator; not passing --coordinator" ] ||
  { echo "single node with a coordinator: stderr '$(cat "$config/stderr")'"; exit 1; }
pass
rm "$config/coordinator" "$config/coordinator-lease-ttl"
run solo | grep -q -- "--listen 0.0.0.0:7070 --metrics-listen" || { echo "single node"; exit 1; }
pass
echo "entrypoint_test: $checks checks passed"
