#!/usr/bin/env bash
# ESP per cipher beside OpenSSL on the same machine, in the same run (issue 5): relayd's
# `encrypt` service and the SA's raw seal and open on 1,400-byte packets (criterion), and
# `openssl speed -evp` on 1,400-byte blocks. Prints a Markdown table of Gb/s per core and
# ratios, as recorded in docs/performance.md.
#
# For CBC+HMAC the OpenSSL figure that does the same work is AES-CBC encryption followed
# by HMAC-SHA-256 over the result (the rates combined: 1 / (1/a + 1/b)). OpenSSL's stitched
# `aes-*-cbc-hmac-sha256` EVP cipher is shown for reference only: it is meant for TLS
# records and, driven by `openssl speed` without a MAC key and record header, does not
# compute the same MAC.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-3}
BYTES=1400

ossl() { # rate in bytes/s of `openssl speed ARGS` at 1,400-byte blocks
    openssl speed "$@" -bytes $BYTES -seconds "$SECS" 2>/dev/null | tail -1 |
        awk '{ v = $NF; sub(/k$/, "", v); printf "%.0f\n", v * 1000 }'
}
gbps() { awk -v r="$1" 'BEGIN { printf "%.2f", r * 8 / 1e9 }'; }

out=$(cargo bench -p relay-svc-crypto --locked --bench esp -- --warm-up-time 1 \
    --measurement-time "$SECS" --output-format bencher 2>/dev/null | grep '^test ')
ns() { # ns per 1,400-byte packet of bench $1
    echo "$out" | awk -v n="$1" '$2 == n { gsub(",", "", $5); print $5 }'
}

echo "| cipher | relayd encrypt (service) | relayd seal | relayd open | OpenSSL | encrypt / OpenSSL | seal / OpenSSL |"
echo "|---|---|---|---|---|---|---|"
for c in aes-128-gcm aes-256-gcm aes-128-cbc-hmac-sha256 aes-256-cbc-hmac-sha256; do
    case $c in
    *gcm) ref=$(ossl -evp "$c") ;;
    *)
        aes=${c%-hmac-sha256}
        a=$(ossl -evp "$aes")
        h=$(ossl -hmac sha256)
        ref=$(awk -v a="$a" -v h="$h" 'BEGIN { printf "%.0f", 1 / (1 / a + 1 / h) }')
        ;;
    esac
    rate() { awk -v ns="$1" -v b=$BYTES 'BEGIN { printf "%.0f", b / (ns / 1e9) }'; }
    e=$(rate "$(ns "$c/encrypt_service")")
    s=$(rate "$(ns "$c/seal")")
    o=$(rate "$(ns "$c/open")")
    printf "| %s | %s | %s | %s | %s | %.2f | %.2f |\n" "$c" "$(gbps "$e")" "$(gbps "$s")" \
        "$(gbps "$o")" "$(gbps "$ref")" "$(awk -v x="$e" -v y="$ref" 'BEGIN { print x / y }')" \
        "$(awk -v x="$s" -v y="$ref" 'BEGIN { print x / y }')"
done
echo
echo "OpenSSL $(openssl version | awk '{ print $2 }'); stitched TLS cipher, for reference only:"
for c in aes-128-cbc-hmac-sha256 aes-256-cbc-hmac-sha256; do
    echo "  $c (stitched): $(gbps "$(ossl -evp "$c")") Gb/s"
done
