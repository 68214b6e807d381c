#!/bin/sh
# Starts summond for this Kubernetes node: finds its rank in nodes.txt (the
# ConfigMap), builds the --nodes list and passes the shared flags, the
# optional listeners (metrics-listen, health-listen: ConfigMap keys) and the
# mounted secrets (server certificate and key, client CA, tokens file) when
# their files exist. With a ConfigMap key "coordinator" (an etcd URL, see
# deploy/overlays/etcd) a cluster joins through etcd, which elects its
# leader: --coordinator (and --coordinator-lease-ttl from its key), with the
# secret summon-etcd-client's files when they exist (ca.crt, tls.crt and
# tls.key: TLS to etcd) and the ConfigMap key "coordinator-user" with the
# secret's "password" (etcd's authentication); without that key a cluster
# runs --coordinator static (node 0 leads). The rank still comes from
# nodes.txt, since the cluster forms on that list. Arguments given to this
# script (the container's args, e.g. the GPU overlay's --device cuda) are
# passed on after all of these.
# SUMMON_DRY_RUN=1 prints the command instead of running it (tests).
set -eu
config=${SUMMON_CONFIG:-/etc/summon}
node=${NODE_NAME:?NODE_NAME must name this Kubernetes node}
tls_cert=${SUMMON_TLS_CERT:-/etc/summon-tls/tls.crt}
tls_key=${SUMMON_TLS_KEY:-/etc/summon-tls/tls.key}
client_ca=${SUMMON_TLS_CLIENT_CA:-/etc/summon-client-ca/ca.crt}
tokens=${SUMMON_TOKENS:-/etc/summon-tokens/tokens}
# The token this daemon presents to its peers (a tokens entry granting peer).
peer_token=${SUMMON_PEER_TOKEN:-/etc/summon-tokens/peer-token}
# The CA that peers' server certificates are checked with (cert-manager and
# kubectl put it beside tls.crt in the TLS secret).
tls_ca=${SUMMON_TLS_CA:-/etc/summon-tls/ca.crt}
# TLS and authentication to etcd (secret summon-etcd-client).
etcd_dir=${SUMMON_ETCD_DIR:-/etc/summon-etcd}

rank=-1
nodes=""
count=0
while read -r name address; do
  [ -n "$name" ] || continue
  [ "$name" = "$node" ] && rank=$count
  nodes="${nodes:+$nodes,}$address"
  count=$((count + 1))
done < "$config/nodes.txt"
if [ "$rank" -lt 0 ]; then
  echo "entrypoint: node $node is not listed in $config/nodes.txt" >&2
  exit 2
fi
if { [ -f "$tls_cert" ] && [ ! -f "$tls_key" ]; } ||
   { [ ! -f "$tls_cert" ] && [ -f "$tls_key" ]; }; then
  echo "entrypoint: $tls_cert and $tls_key go together; one is missing" >&2
  exit 2
fi
if [ -f "$client_ca" ] && [ ! -f "$tls_cert" ]; then
  echo "entrypoint: $client_ca (client certificates) needs TLS: $tls_cert is missing" >&2
  exit 2
fi

# The script's own arguments stay first in "$@" while summond's command is
# appended after them; they are rotated to the end at the last step.
extra=$#
set -- "$@" /opt/summon/summond \
  --local-ranks "$(cat "$config/local-ranks")" \
  --memory-budget "$(cat "$config/memory-budget")" \
  --heartbeat-ms "$(cat "$config/heartbeat-ms")" \
  --collective-timeout-ms "$(cat "$config/collective-timeout-ms")" \
  --data-dir /var/lib/summon
if [ "$count" -gt 1 ]; then
  set -- "$@" --nodes "$nodes" --node-rank "$rank"
  if [ -f "$config/coordinator" ]; then
    for key in coordinator coordinator-lease-ttl; do
      if [ -f "$config/$key" ]; then
        set -- "$@" "--$key" "$(cat "$config/$key")"
      fi
    done
    if { [ -f "$etcd_dir/tls.crt" ] && [ ! -f "$etcd_dir/tls.key" ]; } ||
       { [ ! -f "$etcd_dir/tls.crt" ] && [ -f "$etcd_dir/tls.key" ]; }; then
      echo "entrypoint: $etcd_dir/tls.crt and $etcd_dir/tls.key go together; one is missing" >&2
      exit 2
    fi
    if [ -f "$etcd_dir/ca.crt" ]; then
      set -- "$@" --coordinator-ca "$etcd_dir/ca.crt"
    fi
    if [ -f "$etcd_dir/tls.crt" ]; then
      set -- "$@" --coordinator-cert "$etcd_dir/tls.crt" \
        --coordinator-key "$etcd_dir/tls.key"
    fi
    if [ -f "$config/coordinator-user" ]; then
      if [ ! -f "$etcd_dir/password" ]; then
        echo "entrypoint: $config/coordinator-user needs the password in $etcd_dir/password" >&2
        exit 2
      fi
      set -- "$@" --coordinator-user "$(cat "$config/coordinator-user")" \
        --coordinator-password-file "$etcd_dir/password"
    fi
  else
    # The fixed list, named: summond refuses a cluster without a coordinator.
    set -- "$@" --coordinator static
  fi
else
  # summond refuses a coordinator for a single node (it needs none): say so
  # here instead of letting the pod crash-loop on it.
  if [ -f "$config/coordinator" ]; then
    echo "entrypoint: one node in $config/nodes.txt needs no coordinator; not passing --coordinator" >&2
  fi
  set -- "$@" --listen "0.0.0.0:7070"
fi
for key in metrics-listen health-listen; do
  if [ -f "$config/$key" ]; then
    set -- "$@" "--$key" "$(cat "$config/$key")"
  fi
done
if [ -f "$tls_cert" ]; then
  set -- "$@" --tls-cert "$tls_cert" --tls-key "$tls_key"
fi
if [ -f "$client_ca" ]; then
  set -- "$@" --tls-client-ca "$client_ca"
fi
if [ -f "$tokens" ]; then
  set -- "$@" --tokens "$tokens"
fi
if [ -f "$tls_ca" ]; then
  set -- "$@" --tls-ca "$tls_ca"
fi
if [ -f "$peer_token" ]; then
  set -- "$@" --peer-token-file "$peer_token"
fi
while [ "$extra" -gt 0 ]; do
  set -- "$@" "$1"
  shift
  extra=$((extra - 1))
done

if [ "${SUMMON_DRY_RUN:-0}" = 1 ]; then
  echo "$@"
  exit 0
fi
exec "$@"
