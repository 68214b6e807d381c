#!/bin/sh
# Starts summond for this Kubernetes node: finds its rank in nodes.txt (the
# ConfigMap), builds the --nodes list and passes the shared flags.
# SUMMON_DRY_RUN=1 prints the command instead of running it (tests).
set -eu
config=${SUMMON_CONFIG:-/etc/summon}
node=${NODE_NAME:?NODE_NAME must name this Kubernetes node}

rank=-1
nodes=""
i=0
while read -r name address; do
  [ -n "$name" ] || continue
  [ "$name" = "$node" ] && rank=$i
  nodes="${nodes:+$nodes,}$address"
  i=$((i + 1))
done < "$config/nodes.txt"
if [ "$rank" -lt 0 ]; then
  echo "entrypoint: node $node is not listed in $config/nodes.txt" >&2
  exit 2
fi

set -- /opt/summon/summond \
  --local-ranks "$(cat "$config/local-ranks")" \
  --memory-budget "$(cat "$config/memory-budget")" \
  --heartbeat-ms "$(cat "$config/heartbeat-ms")" \
  --collective-timeout-ms "$(cat "$config/collective-timeout-ms")" \
  --data-dir /var/lib/summon
if [ "$i" -gt 1 ]; then
  set -- "$@" --nodes "$nodes" --node-rank "$rank"
else
  set -- "$@" --listen "0.0.0.0:7070"
fi
if [ "${SUMMON_DRY_RUN:-0}" = 1 ]; then
  echo "$@"
  exit 0
fi
exec "$@"
