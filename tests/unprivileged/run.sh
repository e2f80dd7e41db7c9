#!/usr/bin/env bash
# Runs the unit tests of the services that emit packets (mpls, crypto, ids) as an
# unprivileged user (nobody, no capabilities), as issue 15 asks: a service is bytes in,
# bytes and verdicts out, and needs no raw socket to be tested. Builds the test binaries
# as the caller, runs them with setpriv. Part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
CARGO=${CARGO:-cargo}
crates=(-p relay-svc-mpls -p relay-svc-crypto -p relay-svc-ids)
mapfile -t bins < <($CARGO test --locked --no-run "${crates[@]}" --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])')
[ ${#bins[@]} -ge 3 ] || { echo "unprivileged: found only ${#bins[@]} test binaries" >&2; exit 1; }
# A home of its own for keys the crypto tests write (key files must not sit where others
# could replace them: not under /tmp).
home=$(mktemp -d /run/relayd-unpriv.XXXXXX)
trap 'rm -rf "$home"' EXIT
chown nobody "$home"
chmod 0700 "$home"
for b in "${bins[@]}"; do
  echo "unprivileged: $(basename "$b")"
  setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all --bounding-set=-all \
    env HOME="$home" "$b" --test-threads=2 -q
done
