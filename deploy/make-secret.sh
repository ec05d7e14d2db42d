#!/usr/bin/env bash
# The Secrets deploy/k8s/*.yaml read, one file per value, for `kubectl create secret generic
# NAME --from-file=DIR`. No file ends in a newline: the values go into environment variables
# as they are, and the server compares tokens byte for byte. Needs openssl (1.1.1 or later).
#
#   make-secret.sh [DIR]
#       The server's Secret `dt-rdzv` (default DIR ./dt-rdzv-secret), for the dt-rdzv pods only:
#       token        the server token (24 random bytes in hex, as `dt-rdzv serve` generates
#                    them): it opens every job and the operator's requests
#       tls.crt      the native port's certificate (self-signed, ECDSA P-256) ...
#       tls.key      ... and its private key (dt-rdzv serve --tls-cert / --tls-key)
#       fingerprint  sha256:.. of tls.crt, as `dt-rdzv serve` prints it: what members pin
#                    (DTCOMM_RDZV_FINGERPRINT). Names and dates are not checked against a pin.
#
#   make-secret.sh --job JOB [SERVER_DIR [DIR]]
#       A training job's Secret `dt-rdzv-job-JOB` (default DIR ./dt-rdzv-job-JOB), from the
#       server's (default SERVER_DIR ./dt-rdzv-secret), for that job's pods:
#       token        JOB's own token, `dt-rdzv token --job JOB` computed here with openssl
#                    (dtj1_ + hex HMAC-SHA256(server token, "dt-rdzv job token v1\0" + JOB),
#                    docs/protocol.md): it joins and reads JOB only, so a training pod holds
#                    neither the server token nor the certificate's key
#       fingerprint  the server's, copied
#       JOB is the job's --rdzv-id (the manifests use the Job's name).
#
#   make-secret.sh --etcd [DIR]
#       The Secret `dt-rdzv-etcd` of dt-rdzv-ha.yaml's etcd (default DIR ./dt-rdzv-etcd-secret):
#       etcd answers only TLS clients with a certificate of this CA (--client-cert-auth), and
#       only dt-rdzv-ha's pods mount the client certificate. Its CA key goes to DIR.ca.key,
#       beside DIR, not into the Secret (keep it offline; it signs new certificates).
#       ca.crt       the CA (ECDSA P-256, self-signed)
#       member.crt   each etcd member's certificate, for clients and peers alike: names
#       member.key   dt-rdzv-etcd-{0,1,2}.dt-rdzv-etcd (DT_RDZV_ETCD_NAMES to change them),
#                    localhost, 127.0.0.1
#       client.crt   dt-rdzv's client certificate (CN dt-rdzv, clientAuth) ...
#       client.key   ... and its key (dt-rdzv serve --backend-cert / --backend-key)
#
# tests/deploy/test_manifests.py runs this script and starts dt-rdzv, dtrun and etcd with its
# output.
set -euo pipefail
umask 077

fresh() {  # refuses to overwrite any of the files named
  local dir=$1
  shift
  mkdir -p "$dir"
  for f in "$@"; do
    if [ -e "$dir/$f" ]; then
      echo "make-secret.sh: $dir/$f exists; not overwriting it" >&2
      exit 1
    fi
  done
}

if [ "${1:-}" = "--job" ]; then
  job=${2:?usage: make-secret.sh --job JOB [SERVER_DIR [DIR]]}
  if ! [[ $job =~ ^[a-z0-9]([-a-z0-9.]{0,243}[a-z0-9])?$ ]]; then
    echo "make-secret.sh: job name '$job' cannot name a Secret (dt-rdzv-job-$job): lower-case" \
      "letters, digits, '-' and '.', starting and ending with a letter or digit" >&2
    exit 2
  fi
  server=${3:-dt-rdzv-secret}
  dir=${4:-dt-rdzv-job-$job}
  for f in token fingerprint; do
    if [ ! -s "$server/$f" ]; then
      echo "make-secret.sh: $server/$f is missing or empty: run make-secret.sh $server first" >&2
      exit 1
    fi
  done
  fresh "$dir" token fingerprint
  key=$(cat "$server/token")
  mac=$(printf 'dt-rdzv job token v1\0%s' "$job" \
    | openssl dgst -sha256 -mac HMAC -macopt "key:$key" | sed 's/^.*= *//')
  if ! [[ $mac =~ ^[0-9a-f]{64}$ ]]; then
    echo "make-secret.sh: openssl gave no HMAC-SHA256 ('$mac')" >&2
    exit 1
  fi
  printf 'dtj1_%s' "$mac" >"$dir/token"
  cp "$server/fingerprint" "$dir/fingerprint"
  echo "make-secret.sh: wrote $dir/token (job $job) and fingerprint" >&2
  echo "next: kubectl create secret generic dt-rdzv-job-$job --from-file=$dir" >&2
  exit 0
fi

if [ "${1:-}" = "--etcd" ]; then
  dir=${2:-dt-rdzv-etcd-secret}
  days=${DT_RDZV_CERT_DAYS:-3650}
  names=${DT_RDZV_ETCD_NAMES:-dt-rdzv-etcd-0.dt-rdzv-etcd dt-rdzv-etcd-1.dt-rdzv-etcd dt-rdzv-etcd-2.dt-rdzv-etcd}
  fresh "$dir" ca.crt member.crt member.key client.crt client.key
  if [ -e "$dir.ca.key" ]; then
    echo "make-secret.sh: $dir.ca.key exists; not overwriting it" >&2
    exit 1
  fi
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -days "$days" -subj /CN=dt-rdzv-etcd-ca \
    -keyout "$dir.ca.key" -out "$dir/ca.crt" 2>/dev/null
  san="DNS:localhost,IP:127.0.0.1"
  for n in $names; do san="$san,DNS:$n"; done
  sign() {  # name CN extensions
    local ext
    ext=$(mktemp)
    printf '%s\n' "$3" >"$ext"
    openssl req "${ec[@]}" -subj "/CN=$2" -keyout "$dir/$1.key" -out "$dir/$1.csr" 2>/dev/null
    openssl x509 -req -in "$dir/$1.csr" -CA "$dir/ca.crt" -CAkey "$dir.ca.key" \
      -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$ext" \
      -out "$dir/$1.crt" 2>/dev/null
    rm -f "$dir/$1.csr" "$ext"
  }
  sign member dt-rdzv-etcd "subjectAltName=$san
extendedKeyUsage=serverAuth,clientAuth"
  sign client dt-rdzv "extendedKeyUsage=clientAuth"
  echo "make-secret.sh: wrote $dir/ca.crt, member.crt, member.key, client.crt, client.key" \
    "(the CA's key: $dir.ca.key, keep it out of the cluster)" >&2
  echo "next: kubectl create secret generic dt-rdzv-etcd --from-file=$dir" >&2
  exit 0
fi

dir=${1:-dt-rdzv-secret}
days=${DT_RDZV_CERT_DAYS:-3650}
fresh "$dir" token tls.crt tls.key fingerprint
printf '%s' "$(openssl rand -hex 24)" >"$dir/token"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$days" \
  -subj /CN=dt-rdzv -addext subjectAltName=DNS:dt-rdzv,DNS:localhost \
  -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null
fp=$(openssl x509 -in "$dir/tls.crt" -noout -fingerprint -sha256 | cut -d= -f2 | tr 'A-F' 'a-f')
printf 'sha256:%s' "$fp" >"$dir/fingerprint"
echo "make-secret.sh: wrote $dir/token, tls.crt, tls.key, fingerprint (sha256:$fp)" >&2
echo "next: kubectl create secret generic dt-rdzv --from-file=$dir" >&2
echo "then, for each training job: make-secret.sh --job JOB $dir" >&2
