#!/usr/bin/env bash
# relayd demo: builds a three-namespace testbed (src -- relay -- dst), runs relayd on the
# relay with examples/demo/relayd.toml, sends traffic, shows `relayd status`, and cleans
# up everything it made (namespaces, rules) on exit, also on Ctrl-C. Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release}
RELAYD="$PWD/$BIN/relayd"
TRAFFIC="$PWD/$BIN/relay-traffic"
CONF="$PWD/examples/demo/relayd.toml"
P="rdemo$$"
SRC=$P-src RELAY=$P-relay DST=$P-dst
LOG=$(mktemp)

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

cleanup() {
  set +e
  [ -n "${RELAYD_PID:-}" ] && kill -TERM "$RELAYD_PID" 2>/dev/null && wait "$RELAYD_PID" 2>/dev/null
  for n in $SRC $RELAY $DST; do ip netns pids $n 2>/dev/null | xargs -r kill -9; ip netns del $n 2>/dev/null; done
  rm -f "$LOG"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "the demo needs root (network namespaces, iptables)"; exit 1; }
for b in "$RELAYD" "$TRAFFIC"; do [ -x "$b" ] || { echo "missing $b: run 'make release'"; exit 1; }; done

step "testbed: $SRC (10.0.1.1) -- $RELAY -- $DST (10.0.2.2)"
for n in $SRC $RELAY $DST; do ip netns add $n; ip -n $n link set lo up; done
ip link add eth0 netns $SRC type veth peer name eth0 netns $RELAY
ip link add eth1 netns $RELAY type veth peer name eth0 netns $DST
ip -n $SRC addr add 10.0.1.1/24 dev eth0; ip -n $SRC link set eth0 up
ip -n $RELAY addr add 10.0.1.2/24 dev eth0; ip -n $RELAY link set eth0 up
ip -n $RELAY addr add 10.0.2.1/24 dev eth1; ip -n $RELAY link set eth1 up
ip -n $DST addr add 10.0.2.2/24 dev eth0; ip -n $DST link set eth0 up
ip -n $SRC route add default via 10.0.1.2
ip -n $DST route add default via 10.0.2.1
ip netns exec $RELAY sysctl -qw net.ipv4.ip_forward=1

step "relayd check -c examples/demo/relayd.toml"
ip netns exec $RELAY "$RELAYD" check -c "$CONF"

step "relayd run (in $RELAY); the rules it installs:"
ip netns exec $RELAY "$RELAYD" run -c "$CONF" 2>"$LOG" &
RELAYD_PID=$!
for _ in $(seq 50); do grep -q "relayd running" "$LOG" && break; sleep 0.1; done
grep -q "relayd running" "$LOG" || { cat "$LOG"; exit 1; }
ip netns exec $RELAY iptables-save -t mangle | grep -E "RELAYD|^\*"

step "traffic: 1000 UDP packets to port 5000 (queue 0), 500 to port 6666 (queue 1), a ping (kernel only)"
ip netns exec $DST "$TRAFFIC" udp-sink --bind 10.0.2.2:5000 --idle 1s --max 15s > "$LOG.sink" 2>/dev/null &
SINK=$!
ip netns exec $DST "$TRAFFIC" udp-sink --bind 10.0.2.2:6666 --idle 1s --max 4s > "$LOG.sink2" 2>/dev/null &
SINK2=$!
sleep 0.3
ip netns exec $SRC "$TRAFFIC" udp-send --dst 10.0.2.2:5000 --size 200 --pps 1000 --duration 1s >/dev/null
ip netns exec $SRC "$TRAFFIC" udp-send --dst 10.0.2.2:6666 --size 200 --pps 500 --duration 1s >/dev/null
ip netns exec $SRC ping -c 2 -i 0.2 -q 10.0.2.2 | tail -2
wait $SINK $SINK2 || true
echo "received on 5000: $(grep -o '"packets": *[0-9]*' "$LOG.sink" | head -1)"
echo "received on 6666: $(grep -o '"packets": *[0-9]*' "$LOG.sink2" | head -1)  (queue 1 drops them)"
rm -f "$LOG.sink" "$LOG.sink2"

step "a few lines the dump service logged"
grep "relayd::dump" "$LOG" | head -3 | sed "s/^.*relayd::dump: //" || { echo "(no dump lines?)"; cat "$LOG" | tail -5; }

step "relayd status"
"$RELAYD" status --socket /run/relayd-demo.sock

step "SIGTERM: relayd removes its rules"
kill -TERM $RELAYD_PID; wait $RELAYD_PID; RELAYD_PID=
left=$(ip netns exec $RELAY iptables-save | grep -c RELAYD || true)
echo "RELAYD rules left: $left"
[ "$left" = 0 ]
step "done; the testbed is removed on exit"
