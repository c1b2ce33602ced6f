#!/usr/bin/env bash
# Makes what a TLS run with join tokens needs, with openssl: a CA, a server certificate
# (for the names given, plus "server" and "localhost"), one client certificate and one
# join token per worker, and the server's token file.
#   deploy/make-secrets.sh DIR [WORKERS=2] [EXTRA_SERVER_NAME ...]
# DIR gets: ca.crt, server.crt, server.key, tokens (for the server), and per worker
# worker-N.crt, worker-N.key, worker-N.token. Keep ca.key out of every container; hand
# each volunteer only its own worker-N.* and ca.crt. Revoke a worker by deleting its line
# from DIR/tokens (the server re-reads the file within a second, or on SIGHUP).
set -euo pipefail
dir=${1:?usage: make-secrets.sh DIR [WORKERS] [EXTRA_SERVER_NAME ...]}
workers=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$dir"
cd "$dir"
days=825
sans="DNS:server,DNS:localhost,IP:127.0.0.1"
for name in "$@"; do
  if [[ $name =~ ^[0-9.]+$ ]]; then sans+=",IP:$name"; else sans+=",DNS:$name"; fi
done
[ -f ca.key ] || openssl req -x509 -newkey rsa:3072 -nodes -keyout ca.key -out ca.crt -days "$days" \
  -subj "/CN=muloco run CA" 2>/dev/null
sign() {  # sign NAME SUBJECT EXTENSIONS
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days "$days" \
    -extfile <(printf '%s\n' "$3") 2>/dev/null
  rm -f "$1.csr"
}
sign server "/CN=muloco-server" "subjectAltName=$sans
extendedKeyUsage=serverAuth"
: > tokens.new
echo "# LABEL TOKEN, one worker (or site) per line; delete a line to revoke it" >> tokens.new
for i in $(seq 1 "$workers"); do
  sign "worker-$i" "/CN=worker-$i" "extendedKeyUsage=clientAuth"
  token=$(openssl rand -hex 24)
  echo "$token" > "worker-$i.token"
  echo "worker-$i $token" >> tokens.new
done
mv tokens.new tokens
# The containers run as an unprivileged user with another uid: the files they mount must be
# readable to it. Restrict the directory itself instead (and keep ca.key elsewhere in production).
chmod 0644 ./*.crt ./*.key ./*.token tokens
chmod 0600 ca.key
chmod 0700 .
echo "make-secrets: wrote CA, server certificate ($sans), $workers worker certificates and tokens in $dir"
