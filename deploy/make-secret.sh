#!/usr/bin/env bash
# Writes the four values of the `dt-rdzv` Secret into DIR (default ./dt-rdzv-secret), one file
# each, so that `kubectl create secret generic dt-rdzv --from-file=DIR` makes the Secret that
# deploy/k8s/*.yaml read:
#   token        the join token (24 random bytes in hex, as `dt-rdzv serve` generates them)
#   tls.crt      the native port's certificate (self-signed, ECDSA P-256) ...
#   tls.key      ... and its private key (dt-rdzv serve --tls-cert / --tls-key)
#   fingerprint  sha256:.. of tls.crt, as `dt-rdzv serve` prints it: what members pin
#                (DTCOMM_RDZV_FINGERPRINT). Names and dates are not checked against a pin.
# No file ends in a newline: the values go into environment variables as they are, and the
# server compares DTRDZV_TOKEN byte for byte. Needs openssl (1.1.1 or later).
# tests/deploy/test_manifests.py runs this script and starts dt-rdzv with its output.
set -euo pipefail
dir=${1:-dt-rdzv-secret}
days=${DT_RDZV_CERT_DAYS:-3650}
umask 077
mkdir -p "$dir"
for f in token tls.crt tls.key fingerprint; do
  if [ -e "$dir/$f" ]; then
    echo "make-secret.sh: $dir/$f exists; not overwriting it" >&2
    exit 1
  fi
done
printf '%s' "$(openssl rand -hex 24)" >"$dir/token"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$days" \
  -subj /CN=dt-rdzv -addext subjectAltName=DNS:dt-rdzv,DNS:localhost \
  -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null
fp=$(openssl x509 -in "$dir/tls.crt" -noout -fingerprint -sha256 | cut -d= -f2 | tr 'A-F' 'a-f')
printf 'sha256:%s' "$fp" >"$dir/fingerprint"
echo "make-secret.sh: wrote $dir/token, tls.crt, tls.key, fingerprint (sha256:$fp)" >&2
echo "next: kubectl create secret generic dt-rdzv --from-file=$dir" >&2
