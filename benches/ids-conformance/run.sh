#!/usr/bin/env bash
# IDS conformance: relayd's IDS against suricata-verify's rules and captures and against
# Suricata itself. Usage (from anywhere in a clone):
#
#   bash benches/ids-conformance/run.sh /path/to/suricata-verify [--filter RE] [-j N] ...
#
# Builds relayd and the rulecheck example (release, in $CARGO_TARGET_DIR or ./target)
# unless RELAYD / RULECHECK name binaries, then runs conformance.py; the summary goes to
# stdout, results to $OUT (default: <target>/ids-conformance). See README.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
die() { echo "ids-conformance: $*" >&2; exit 2; }

[ $# -ge 1 ] || die "usage: $0 /path/to/suricata-verify [--filter RE] [-j N] [--mode ips|ids|auto] [--no-cache]"
tree=$1
shift
[ -d "$tree" ] || die "$tree: no such directory (a suricata-verify checkout: https://github.com/OISF/suricata-verify)"
[ -d "$tree/tests" ] || die "$tree has no tests/ directory: not a suricata-verify tree"
command -v suricata >/dev/null || die "suricata not found: install it (Debian: apt-get install suricata; 7.0.10 is in bookworm-backports)"
command -v python3 >/dev/null || die "python3 not found"

target=${CARGO_TARGET_DIR:-$root/target}
if [ -z "${RELAYD:-}" ] || [ -z "${RULECHECK:-}" ]; then
    command -v cargo >/dev/null || die "cargo not found (or set RELAYD and RULECHECK to built binaries)"
    (cd "$root" && cargo build --release --locked -q -p relayd \
        && cargo build --release --locked -q -p relay-svc-ids --example rulecheck) >&2 \
        || die "build failed"
fi
RELAYD=${RELAYD:-$target/release/relayd}
RULECHECK=${RULECHECK:-$target/release/examples/rulecheck}
OUT=${OUT:-$target/ids-conformance}

# No __pycache__ in the clone.
export PYTHONDONTWRITEBYTECODE=1
exec python3 "$here/conformance.py" --tree "$tree" --relayd "$RELAYD" \
    --rulecheck "$RULECHECK" --out "$OUT" "$@"
