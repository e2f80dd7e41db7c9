#!/bin/sh
# Captures the packets in this directory (needs root): three namespaces A - R - B, R a
# router with a 1280-byte link towards B, checksum offload off so that every checksum
# is the kernel's own. Split the pcap into one .bin per packet (IP header on).
set -e
for n in wA wR wB; do ip netns del $n 2>/dev/null || true; ip netns add $n; ip -n $n link set lo up; done
ip link add a0 netns wA type veth peer name r0 netns wR
ip link add r1 netns wR type veth peer name b0 netns wB
ip -n wA addr add 192.0.2.1/24 dev a0; ip -n wA addr add 2001:db8:1::1/64 dev a0 nodad
ip -n wR addr add 192.0.2.254/24 dev r0; ip -n wR addr add 2001:db8:1::fe/64 dev r0 nodad
ip -n wR addr add 198.51.100.254/24 dev r1; ip -n wR addr add 2001:db8:2::fe/64 dev r1 nodad
ip -n wB addr add 198.51.100.2/24 dev b0; ip -n wB addr add 2001:db8:2::2/64 dev b0 nodad
ip -n wR link set r1 mtu 1280; ip -n wB link set b0 mtu 1280
for x in "wA a0" "wR r0" "wR r1" "wB b0"; do set -- $x; ip -n $1 link set $2 up; ip netns exec $1 ethtool -K $2 tx off rx off >/dev/null; done
ip netns exec wR sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
ip -n wA route add default via 192.0.2.254; ip -n wA -6 route add default via 2001:db8:1::fe
ip -n wB route add default via 198.51.100.254; ip -n wB -6 route add default via 2001:db8:2::fe
sleep 2
ip netns exec wA tcpdump -i a0 -w "${1:-capture.pcap}" -U 2>/dev/null & T=$!
sleep 1
ip netns exec wA ping -c1 -W1 198.51.100.2
ip netns exec wA ping -6 -c1 -W1 2001:db8:2::2
ip netns exec wA ping -c1 -W1 -t1 198.51.100.2
ip netns exec wA ping -6 -c1 -W1 -t1 2001:db8:2::2
ip netns exec wA ping -c1 -W1 -s 1400 -M do 198.51.100.2
ip netns exec wA ping -6 -c1 -W1 -s 1400 -M do 2001:db8:2::2
ip netns exec wA python3 -c "
import socket
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('192.0.2.1',40001)); s.sendto(b'relayd',('198.51.100.2',9))
s=socket.socket(socket.AF_INET6,socket.SOCK_DGRAM); s.bind(('2001:db8:1::1',40001)); s.sendto(b'relayd',('2001:db8:2::2',9))
for fam,a in ((socket.AF_INET,'198.51.100.2'),(socket.AF_INET6,'2001:db8:2::2')):
  c=socket.socket(fam,socket.SOCK_STREAM); c.settimeout(1)
  try: c.connect((a,81))
  except Exception as e: print(e)
"
sleep 1
kill $T; wait $T || true
for n in wA wR wB; do ip netns del $n; done
