#!/bin/sh
# Turns etcd's authentication on for summon: user root (role root), a role
# named after summon's user with readwrite on /summon/<cluster>/ only, that
# user with the role, then `etcdctl auth enable`. The Job summon-etcd-auth of
# deploy/overlays/etcd-auth runs this file (a ConfigMap generated from it);
# tests/deploy/etcd_auth_manifests.py runs the same file against a real etcd.
#
# It converges instead of replaying steps, so running it again, or after a
# run that stopped half way, is safe: what exists is kept, what is missing is
# added, and `auth enable` is the last step (etcd refuses it before root holds
# role root, and ignores it once on). Passwords: while authentication is off
# both are (re)set from the files; once it is on, root's must be the one
# etcd has (every call here authenticates as root), and summon's is reset
# only when etcd refuses the file's. Each change of users or roles outdates
# every token etcd gave, so nothing is written that is already there.
#
# Environment (POSIX sh; etcdctl 3.4 from the etcd image or Debian's
# etcd-client):
#   SUMMON_COORDINATOR    etcd://HOST:PORT[,HOST:PORT...]/CLUSTER, the
#                         ConfigMap's coordinator (summond's --coordinator):
#                         the endpoints and the prefix /summon/CLUSTER/
#   SUMMON_USER           the ConfigMap's coordinator-user; also the role's name
#   ROOT_PASSWORD_FILE    first line: root's password
#   SUMMON_PASSWORD_FILE  first line: the user's password (the secret
#                         summon-etcd-client's "password", as summond reads it)
#   ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY   etcdctl's own TLS variables;
#                         with ETCDCTL_CACERT the endpoints are https://
#   ETCDCTL_ENDPOINTS     optional: overrides the coordinator's hosts
#   ETCD_WAIT_S           how long to wait for etcd to answer (default 300)
set -eu

fail() {
  echo "etcd-auth-setup: $*" >&2
  exit 2
}

: "${SUMMON_COORDINATOR:?etcd://HOST:PORT[,...]/CLUSTER}"
: "${SUMMON_USER:?the user summond authenticates as}"
: "${ROOT_PASSWORD_FILE:?a file whose first line is the root password}"
: "${SUMMON_PASSWORD_FILE:?a file whose first line is the password of SUMMON_USER}"

case $SUMMON_COORDINATOR in
  etcd://?*/?*) ;;
  *) fail "SUMMON_COORDINATOR is not etcd://HOST:PORT[,...]/CLUSTER: $SUMMON_COORDINATOR" ;;
esac
rest=${SUMMON_COORDINATOR#etcd://}
cluster=${rest##*/}
prefix="/summon/$cluster/"
if [ -z "${ETCDCTL_ENDPOINTS:-}" ]; then
  scheme=http
  if [ -n "${ETCDCTL_CACERT:-}" ]; then scheme=https; fi
  ETCDCTL_ENDPOINTS=$(printf '%s\n' "${rest%/*}" |
    sed "s|[^,][^,]*|$scheme://&|g")
fi
export ETCDCTL_ENDPOINTS
case $SUMMON_USER in
  root | *:* | *[[:space:]]* | "") fail "SUMMON_USER cannot be '$SUMMON_USER'" ;;
esac

# summond reads the first line of its password file; etcdctl 3.4 reads a new
# password from stdin up to the first blank (fmt.Scanf "%s"), so a password
# with a blank would be cut short there: refuse it instead.
password() {  # FILE
  [ -r "$1" ] || fail "cannot read $1"
  value=$(head -n 1 "$1")
  case $value in
    "") fail "$1: the first line is empty" ;;
    *[[:space:]]*) fail "$1: the password has a blank (etcdctl 3.4 cannot set it)" ;;
  esac
  printf '%s' "$value"
}
root_password=$(password "$ROOT_PASSWORD_FILE")
summon_password=$(password "$SUMMON_PASSWORD_FILE")

# Every call as root, in the environment (never on a command line): etcd
# ignores the credentials while authentication is off.
as_root() {
  ETCDCTL_USER="root:$root_password" etcdctl "$@"
}

# Wait for a quorum (a fresh StatefulSet starts with the Job). A refused
# root password will not get better by waiting.
wait_s=${ETCD_WAIT_S:-300}
waited=0
until out=$(as_root user list 2>&1); do
  case $out in
    *"authentication failed"*)
      fail "etcd refuses root with ROOT_PASSWORD_FILE's password (authentication is on with another one)" ;;
  esac
  if [ "$waited" -ge "$wait_s" ]; then
    echo "etcd-auth-setup: no answer from $ETCDCTL_ENDPOINTS in ${wait_s}s:" >&2
    printf '%s\n' "$out" | tail -n 1 >&2
    exit 1
  fi
  sleep 2
  waited=$((waited + 2))
done

# Off, etcd takes any credentials; on, it refuses a user that does not exist.
auth_is_on() {
  if out=$(ETCDCTL_USER="etcd-auth-setup-probe:-" etcdctl get --keys-only \
      --limit=1 "$prefix" 2>&1); then
    echo false
    return
  fi
  case $out in
    *"authentication failed"*) echo true ;;
    *) printf '%s\n' "$out" >&2; exit 1 ;;
  esac
}
auth_on=$(auth_is_on)
echo "etcd-auth-setup: $ETCDCTL_ENDPOINTS, authentication on: $auth_on"

has_user() {  # NAME
  as_root user list | grep -qxF "$1"
}

has_role() {  # USER ROLE
  as_root user get "$1" | sed -n 's/^Roles: //p' | tr ' ' '\n' | grep -qxF "$2"
}

ensure_user() {  # NAME PASSWORD
  if ! has_user "$1"; then
    printf '%s\n' "$2" | as_root user add "$1" --interactive=false
  elif [ "$auth_on" = false ]; then
    printf '%s\n' "$2" | as_root user passwd "$1" --interactive=false
  fi
}

ensure_user root "$root_password"
if ! has_role root root; then as_root user grant-role root root; fi

role=$SUMMON_USER
if ! as_root role list | grep -qxF "$role"; then as_root role add "$role"; fi
# readwrite on the prefix shows as one read and one write range.
if [ "$(as_root role get "$role" | grep -cxF "	[$prefix, ${prefix%/}0) (prefix $prefix)")" != 2 ]; then
  as_root role grant-permission "$role" --prefix=true readwrite "$prefix"
fi

ensure_user "$SUMMON_USER" "$summon_password"
if [ "$auth_on" = true ] && ! out=$(ETCDCTL_USER="$SUMMON_USER:$summon_password" \
    etcdctl get --keys-only --limit=1 "$prefix" 2>&1); then
  case $out in
    *"authentication failed"*)
      printf '%s\n' "$summon_password" |
        as_root user passwd "$SUMMON_USER" --interactive=false ;;
  esac
fi
if ! has_role "$SUMMON_USER" "$role"; then
  as_root user grant-role "$SUMMON_USER" "$role"
fi

if [ "$auth_on" = false ]; then as_root auth enable; fi

# The end state, as summond will see it.
if [ "$(auth_is_on)" != true ]; then
  echo "etcd-auth-setup: authentication is still off" >&2
  exit 1
fi
ETCDCTL_USER="$SUMMON_USER:$summon_password" etcdctl get --keys-only \
  --limit=1 "$prefix" >/dev/null
echo "etcd-auth-setup: authentication on; user $SUMMON_USER reads and writes $prefix only"
