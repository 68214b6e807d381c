#!/usr/bin/env bash
# Makes a throwaway PKI in DIR with openssl, for tests and scripts/demo:
#   ca.crt ca.key                 the cluster's CA
#   server.crt server.key         summond's certificate (SAN IP:127.0.0.1,
#                                 DNS:localhost), signed by the CA
#   alice.crt alice.key           a client certificate, CN=alice, by the CA
#   rogue-ca.crt                  another CA, and
#   mallory.crt mallory.key       a client certificate also saying CN=alice,
#                                 signed by the rogue CA
# Certificates are valid for two days: nothing here is for production.
set -euo pipefail
dir=${1:?usage: make_pki.sh DIR}
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
  -out "$1.key" 2>/dev/null; }
ca() {  # NAME CN
  key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.crt" -days 2 \
    -subj "/CN=$2" 2>/dev/null
}
leaf() {  # NAME CN CA EXTENSIONS
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" \
    -CAcreateserial -out "$1.crt" -days 2 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca summon-test-ca
ca rogue-ca rogue-ca
leaf server summond ca "subjectAltName=IP:127.0.0.1,DNS:localhost"
leaf alice alice ca "extendedKeyUsage=clientAuth"
leaf mallory alice rogue-ca "extendedKeyUsage=clientAuth"
chmod 600 ./*.key
