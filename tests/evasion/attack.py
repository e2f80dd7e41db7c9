#!/usr/bin/python3
"""The evasion suite's attacker (tests/evasion.rs runs it in the source namespace).

Each case completes a real TCP handshake with the destination's recording server, or sends
a UDP datagram, then tries one way of getting the forbidden string past an inline IPS to
the application: an insertion (a segment the host discards but a naive reassembler keeps),
an overlap resolved the way Linux resolves it, or IP fragments the host reassembles
differently. The cases follow Ptacek & Newsham (1998), Handley, Paxson & Kreibich's traffic
normalization (2001), Novak's target-based reassembly (2005), and Linux's own code:
tcp_validate_incoming / tcp_sequence / tcp_ack / tcp_data_queue(_ofo) / tcp_urg in
net/ipv4/tcp_input.c, inet_frag_queue_insert in net/ipv4/inet_fragment.c, ip_frag_queue in
net/ipv4/ip_fragment.c and net/ipv6/reassembly.c.

Usage: attack.py JSON_CONFIG CASE...   (one JSON line per case on stdout)

Frames are written to a packet socket, so the kernel neither checks nor fixes them, and
the source namespace must drop its own kernel's RSTs (iptables OUTPUT), or it would reset
every connection crafted here. Needs Debian's python3-scapy (run as /usr/bin/python3).
"""

import hashlib
import json
import random
import socket
import struct
import sys
import threading
import time

from scapy.all import IP, IPv6, IPv6ExtHdrFragment, TCP, UDP, Raw, Ether  # noqa: E402

FORBIDDEN = b"EVIL-PAYLOAD"
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4

CFG = {}
RNG = random.Random(1)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Wire:
    """One packet socket on the source's interface: sends whole frames to the gateway,
    and a reader thread that hands incoming TCP segments to the connection they belong to."""

    def __init__(self, iface, src_mac, gw_mac):
        self.iface = iface
        self.src_mac = src_mac
        self.gw_mac = gw_mac
        self.tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.tx.bind((iface, 0))
        self.rx = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
        self.rx.bind((iface, 0))
        self.conns = {}
        self.lock = threading.Lock()
        t = threading.Thread(target=self.reader, daemon=True)
        t.start()

    def send(self, l3):
        """Sends one layer-3 packet (scapy, or bytes of an IPv4/IPv6 packet)."""
        raw = bytes(l3)
        etype = 0x0800 if raw[0] >> 4 == 4 else 0x86DD
        frame = bytes.fromhex(self.gw_mac.replace(":", "")) + bytes.fromhex(
            self.src_mac.replace(":", "")) + struct.pack("!H", etype) + raw
        self.tx.send(frame)

    def reader(self):
        while True:
            data, addr = self.rx.recvfrom(65535)
            if addr[2] == PACKET_OUTGOING:
                continue
            seg = parse_tcp(data)
            if seg is None:
                continue
            with self.lock:
                c = self.conns.get(seg["dport"])
            if c is not None:
                c.on_segment(seg)


def parse_tcp(p):
    """The fields of a TCP segment in an IPv4 or IPv6 packet that the attacker needs."""
    if len(p) < 20:
        return None
    v = p[0] >> 4
    if v == 4:
        ihl = (p[0] & 15) * 4
        if p[9] != 6:
            return None
        off = ihl
    elif v == 6:
        if len(p) < 40 or p[6] != 6:
            return None
        off = 40
    else:
        return None
    t = p[off:]
    if len(t) < 20:
        return None
    sport, dport, seq, ack, doff_flags, win = struct.unpack("!HHIIHH", t[:16])
    doff = (doff_flags >> 12) * 4
    flags = doff_flags & 0x3F
    tsval = None
    wscale = None
    opts = t[20:doff]
    i = 0
    while i < len(opts):
        k = opts[i]
        if k == 0:
            break
        if k == 1:
            i += 1
            continue
        if i + 1 >= len(opts):
            break
        ln = opts[i + 1]
        if k == 8 and ln == 10:
            tsval = struct.unpack("!I", opts[i + 2:i + 6])[0]
        if k == 3 and ln == 3:
            wscale = opts[i + 2]
        if ln < 2:
            break
        i += ln
    return {"sport": sport, "dport": dport, "seq": seq, "ack": ack, "flags": flags,
            "win": win, "tsval": tsval, "wscale": wscale, "len": len(t) - doff}


SYN, ACKF, RST, PSH, FIN, URG = 0x02, 0x10, 0x04, 0x08, 0x01, 0x20


class Conn:
    """A TCP connection the attacker drives by hand: our sequence numbers and timestamps,
    and the latest acknowledgment, window and timestamp the host sent."""

    def __init__(self, wire, fam, dst, dport):
        self.wire, self.fam, self.dst, self.dport = wire, fam, dst, dport
        self.src = CFG["src4"] if fam == 4 else CFG["src6"]
        self.sport = pick_port()
        self.iss = RNG.randrange(1 << 31)
        self.snd_nxt = self.iss
        self.ts = RNG.randrange(1 << 20, 1 << 30)
        self.ts_ecr = 0
        self.peer_isn = None
        self.rcv_nxt = None  # next byte expected from the host
        self.acked = None  # highest acknowledgment from the host
        self.win = 0
        self.peer_wscale = 0
        self.challenge = 0
        self.cv = threading.Condition()
        with wire.lock:
            wire.conns[self.sport] = self

    def on_segment(self, s):
        with self.cv:
            if s["sport"] != self.dport:
                return
            if s["flags"] & SYN and s["flags"] & ACKF:
                self.peer_isn = s["seq"]
                self.rcv_nxt = (s["seq"] + 1) & 0xFFFFFFFF
                self.peer_wscale = s["wscale"] or 0
            if s["flags"] & ACKF:
                if self.acked is None or seq_after(s["ack"], self.acked):
                    self.acked = s["ack"]
                elif s["ack"] == self.acked and s["len"] == 0:
                    self.challenge += 1
                self.win = s["win"] << (0 if s["flags"] & SYN else self.peer_wscale)
            if s["tsval"] is not None:
                self.ts_ecr = s["tsval"]
            if s["flags"] & RST:
                self.reset = True
            self.cv.notify_all()

    def next_ts(self):
        self.ts += 7
        return self.ts

    def l3(self, ttl=64):
        if self.fam == 4:
            return IP(src=self.src, dst=self.dst, ttl=ttl)
        return IPv6(src=self.src, dst=self.dst, hlim=ttl)

    def segment(self, seq, data=b"", flags="PA", ack=None, tsval=None, win=None, ttl=64,
                urgptr=0, options=True):
        """A scapy packet of this connection; defaults are those of an honest segment."""
        opts = []
        if options:
            opts = [("NOP", None), ("NOP", None),
                    ("Timestamp", (self.next_ts() if tsval is None else tsval, self.ts_ecr))]
        t = TCP(sport=self.sport, dport=self.dport, seq=seq & 0xFFFFFFFF,
                ack=(self.rcv_nxt if ack is None else ack) & 0xFFFFFFFF, flags=flags,
                window=(502 if win is None else win), options=opts, urgptr=urgptr)
        p = self.l3(ttl) / t
        if data:
            p = p / Raw(data)
        return p

    def send(self, seq, data=b"", **kw):
        self.wire.send(self.segment(seq, data, **kw))

    def handshake(self):
        syn = self.l3() / TCP(sport=self.sport, dport=self.dport, seq=self.iss, flags="S",
                              window=64240, options=[("MSS", 1400), ("SAckOK", b""),
                                                     ("Timestamp", (self.next_ts(), 0)),
                                                     ("NOP", None), ("WScale", 7)])
        for _ in range(3):
            self.wire.send(syn)
            with self.cv:
                if self.cv.wait_for(lambda: self.peer_isn is not None, timeout=1.0):
                    break
        if self.peer_isn is None:
            raise RuntimeError("no SYN-ACK from %s:%d" % (self.dst, self.dport))
        self.snd_nxt = (self.iss + 1) & 0xFFFFFFFF
        self.send(self.snd_nxt, flags="A")

    def wait_acked(self, seq, timeout=1.0):
        """Waits until the host acknowledges everything before `seq`; whether it did."""
        with self.cv:
            return self.cv.wait_for(
                lambda: self.acked is not None and not seq_after(seq, self.acked),
                timeout=timeout)

    def push(self, data, timeout=1.0):
        """Sends honest in-order data (in segments of at most 1,200 bytes) and waits for
        the acknowledgment."""
        for i in range(0, len(data), 1200):
            self.send(self.snd_nxt, data[i:i + 1200])
            self.snd_nxt = (self.snd_nxt + len(data[i:i + 1200])) & 0xFFFFFFFF
        return self.wait_acked(self.snd_nxt, timeout)

    def window_edge(self):
        """The right edge of the host's receive window, as its last ACK announced it."""
        with self.cv:
            return (self.acked + self.win) & 0xFFFFFFFF


def seq_after(a, b):
    return ((a - b) & 0xFFFFFFFF) != 0 and ((a - b) & 0xFFFFFFFF) < (1 << 31)


USED_PORTS = set()


def pick_port():
    lo, hi = CFG.get("ports", [20000, 60000])
    while True:
        p = RNG.randrange(lo, hi)
        if p not in USED_PORTS:
            USED_PORTS.add(p)
            return p


def settle(t=0.05):
    time.sleep(t)


# ---------------------------------------------------------------------------------------
# TCP cases. Each starts with an honest prefix the application must receive (so that a
# case which "passes" because nothing got through at all is caught), then the attack. The
# forbidden string is always split over two or more segments: no single packet holds it,
# so only the reassembled stream can show it.
# ---------------------------------------------------------------------------------------


def tcp_start(w, fam, name, port=None):
    c = Conn(w, fam, target(fam), port or CFG["tcp_port"])
    c.handshake()
    prefix = ("hello %s\n" % name).encode()
    if not c.push(prefix):
        raise RuntimeError("the honest prefix was not acknowledged")
    return c, prefix


def insertion(w, fam, name, benign_kw, evil_kw=None, note=""):
    """Benign bytes at the sequence numbers of the first part of the forbidden string, in
    a segment the host discards (`benign_kw` makes it so), then the real bytes."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s, b"GOOD-PA", **benign_kw)
    settle()
    c.send(s, b"EVIL-PA", **(evil_kw or {}))
    settle()
    c.send(s + 7, b"YLOAD")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_plain(w, fam, name):
    """No trick: the forbidden string in two in-order segments (the rule works at all)."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s, b"EVIL-PA")
    settle()
    c.send(s + 7, b"YLOAD")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_ins_noack(w, fam, name):
    """tcp_rcv_established: a segment without ACK (nor RST/SYN) is discarded."""
    return insertion(w, fam, name, {"flags": "P"})


def case_ins_bad_tcp_checksum(w, fam, name):
    """tcp_checksum_complete: a bad TCP checksum is discarded."""
    c = None

    def bad(seg):
        raw = bytes(seg)
        good = seg.__class__(raw)
        good[TCP].chksum ^= 0x5555
        return good

    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    w.send(bad(c.segment(s, b"GOOD-PA")))
    settle()
    c.send(s, b"EVIL-PA")
    settle()
    c.send(s + 7, b"YLOAD")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_ins_bad_ip_checksum(w, fam, name):
    """ip_rcv_core: a bad IPv4 header checksum is dropped by the first hop (the relay)
    before any netfilter hook, so it never reaches the queue; the host never sees it."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    seg = c.segment(s, b"GOOD-PA")
    raw = bytes(seg)
    good = IP(raw)
    good.chksum ^= 0x5555
    w.send(good)
    settle()
    c.send(s, b"EVIL-PA")
    settle()
    c.send(s + 7, b"YLOAD")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_ins_ack_unsent(w, fam, name):
    """tcp_ack: an ACK of data the host never sent (after snd_nxt) is discarded."""
    return insertion_ack(w, fam, name, 1 << 20)


def case_ins_ack_too_old(w, fam, name):
    """tcp_ack: an ACK before snd_una - min(max_window, bytes_acked) is discarded with a
    challenge ACK (RFC 5961 5.2). A different window keeps it off the fast path."""
    return insertion_ack(w, fam, name, -(1 << 20), win=400)


def insertion_ack(w, fam, name, delta, win=None):
    c, prefix = tcp_start(w, fam, name)
    return insertion_body(c, prefix, {"ack": (c.rcv_nxt + delta) & 0xFFFFFFFF, "win": win})


def insertion_body(c, prefix, benign_kw):
    s = c.snd_nxt
    c.send(s, b"GOOD-PA", **benign_kw)
    settle()
    c.send(s, b"EVIL-PA")
    settle()
    c.send(s + 7, b"YLOAD")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_ins_paws(w, fam, name):
    """tcp_validate_incoming: PAWS, a timestamp older than ts_recent (by more than
    TCP_PAWS_WINDOW) is discarded with a duplicate ACK."""
    c, prefix = tcp_start(w, fam, name)
    return insertion_body(c, prefix, {"tsval": (c.ts - 100000) & 0xFFFFFFFF})


def case_ins_beyond_window(w, fam, name):
    """tcp_sequence: a segment starting beyond rcv_nxt + window is discarded. The benign
    bytes sit just past the right edge; honest filler then moves the window over them and
    the forbidden string goes where the benign bytes were."""
    c, prefix = tcp_start(w, fam, name)
    edge = c.window_edge()
    at = (edge + 100) & 0xFFFFFFFF
    c.send(at, b"GOOD-PA")
    settle()
    filler = b"f" * ((at - c.snd_nxt) & 0xFFFFFFFF)
    for i in range(0, len(filler), 8192):
        if not c.push(filler[i:i + 8192], timeout=2.0):
            raise RuntimeError("filler not acknowledged")
    c.send(at, b"EVIL-PA")
    settle()
    c.send(at + 7, b"YLOAD")
    c.wait_acked(at + 12, 0.5)
    return c, prefix


def case_rst_beyond_window(w, fam, name):
    """tcp_validate_incoming step 1: an RST outside the window (inside 2^30) is discarded
    silently; the connection lives on and takes the forbidden string."""
    c, prefix = tcp_start(w, fam, name)
    c.send((c.window_edge() + 5000) & 0xFFFFFFFF, flags="R", options=False)
    return rst_then_evil(c, prefix)


def case_rst_in_window(w, fam, name):
    """RFC 5961 3.2 in tcp_validate_incoming step 2: an in-window RST that is not exactly
    rcv_nxt only draws a challenge ACK; the connection lives on."""
    c, prefix = tcp_start(w, fam, name)
    c.send(c.snd_nxt + 100, flags="R", options=False)
    return rst_then_evil(c, prefix)


def case_rst_bad_checksum(w, fam, name):
    """An exact RST with a bad TCP checksum: the host drops it."""
    c, prefix = tcp_start(w, fam, name)
    seg = c.segment(c.snd_nxt, flags="R", options=False)
    raw = bytes(seg)
    good = seg.__class__(raw)
    good[TCP].chksum ^= 0x5555
    w.send(good)
    return rst_then_evil(c, prefix)


def rst_then_evil(c, prefix):
    settle(0.1)
    s = c.snd_nxt
    c.send(s, b"EVIL-PA")
    settle()
    c.send(s + 7, b"YLOAD")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_syn_data(w, fam, name):
    """RFC 5961 4.2 in tcp_validate_incoming step 4: a SYN (here with benign data) in an
    established connection draws a challenge ACK and is discarded."""
    c, prefix = tcp_start(w, fam, name)
    return insertion_body(c, prefix, {"flags": "S"})


def case_syn_resync(w, fam, name):
    """A SYN with a new initial sequence number mid-connection (a reassembler that
    resynchronises on it loses the real stream); the host discards it."""
    c, prefix = tcp_start(w, fam, name)
    c.send((c.snd_nxt + (1 << 24)) & 0xFFFFFFFF, flags="S")
    settle(0.1)
    return rst_then_evil(c, prefix)


def case_urgent_byte(w, fam, name):
    """tcp_check_urg / tcp_recvmsg: without SO_OOBINLINE the byte the urgent pointer
    points at (BSD semantics: urg_ptr - 1) is taken out of the stream, so the application
    reads the bytes around it as one. The IPS sees EVIL-XPAYLOAD."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s, b"EVIL-")
    settle()
    c.send(s + 5, b"XPAYLOAD", flags="PAU", urgptr=1)
    c.wait_acked(s + 13, 0.5)
    return c, prefix


def case_ttl_expires_at_relay(w, fam, name):
    """TTL 1 benign segment: ip_forward drops it at the relay before the FORWARD hook, so
    neither the queue nor the host sees it."""
    c, prefix = tcp_start(w, fam, name)
    return insertion_body(c, prefix, {"ttl": 1})


def case_ttl_expires_after_relay(w, fam, name):
    """TTL 2 benign segment: it passes the relay (and its queue) and dies at the router
    between the relay and the host (Ptacek & Newsham's TTL insertion)."""
    c, prefix = tcp_start(w, fam, name)
    return insertion_body(c, prefix, {"ttl": 2})


def case_ooo_same_start_longer(w, fam, name):
    """tcp_data_queue_ofo: a queued out-of-order segment is replaced by a later one with
    the same start that covers it (rb_replace_node): the later bytes win."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s + 5, b"safe!!")
    settle()
    c.send(s + 5, b"PAYLOAD!")
    settle()
    c.send(s, b"EVIL-")
    c.wait_acked(s + 13, 0.5)
    return c, prefix


def case_inorder_overlaps_queued(w, fam, name):
    """tcp_data_queue + tcp_ofo_queue: an in-order segment overlapping a queued
    out-of-order one is delivered whole; the queued one only adds the bytes after it."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s + 3, b"L-xxxLOAD")
    settle()
    c.send(s, b"EVIL-PAY")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_ooo_new_covers_queued(w, fam, name):
    """tcp_data_queue_ofo merge_right: a new segment starting before a queued one and
    covering it removes the queued one."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s + 6, b"xxxxxx")
    settle()
    c.send(s + 4, b"-PAYLOAD")
    settle()
    c.send(s, b"EVIL")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_ooo_new_before_partial(w, fam, name):
    """tcp_data_queue_ofo: a new segment starting before a queued one and ending inside
    it; both are kept and the earlier start wins where they overlap."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s + 6, b"xxxxAD")
    settle()
    c.send(s + 4, b"-PAYLO")
    settle()
    c.send(s, b"EVIL")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_retrans_overlap_new(w, fam, name):
    """tcp_data_queue: a retransmission with different data for bytes already delivered
    (seq < rcv_nxt < end_seq) only adds its new bytes: the first bytes win."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s, b"EVIL-PAY")
    c.wait_acked(s + 8, 0.5)
    c.send(s, b"safe-xxxLOAD")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_tiny_random(w, fam, name):
    """The forbidden string one byte a segment, in random order, the first byte last, with
    some segments sent twice."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    order = list(range(1, len(FORBIDDEN)))
    RNG.shuffle(order)
    order += RNG.sample(order, 3)
    order.append(0)
    for i in order:
        c.send(s + i, FORBIDDEN[i:i + 1])
        settle(0.01)
    c.wait_acked(s + len(FORBIDDEN), 0.5)
    return c, prefix


def case_honest_random(w, fam, name):
    """Honest data (1 MiB over IPv4, 256 KiB over IPv6) in segments of random size, some
    sent out of order and some twice (same bytes), as a lossy path would deliver them:
    all of it must arrive, byte-identical."""
    c, prefix = tcp_start(w, fam, name)
    size = (1 << 20) if fam == 4 else (256 << 10)
    data = RNG.randbytes(size).replace(FORBIDDEN, b"x" * len(FORBIDDEN))
    segs, at = [], 0
    while at < size:
        n = min(RNG.randrange(1, 1400), size - at)
        segs.append((at, n))
        at += n
    base = c.snd_nxt
    i = 0
    while i < len(segs):
        batch = []
        while i < len(segs) and segs[i][0] - segs[batch[0] if batch else i][0] < 32768:
            batch.append(i)
            i += 1
        order = batch[:]
        for k in range(len(order) - 1):
            if RNG.random() < 0.1:
                order[k], order[k + 1] = order[k + 1], order[k]
        end = base + segs[batch[-1]][0] + segs[batch[-1]][1]
        for attempt in range(5):
            for k in order:
                off, n = segs[k]
                c.send(base + off, data[off:off + n])
                if RNG.random() < 0.02:
                    c.send(base + off, data[off:off + n])
            if c.wait_acked(end & 0xFFFFFFFF, 1.0):
                break
        else:
            raise RuntimeError("honest data not acknowledged at %d" % segs[batch[0]][0])
    c.snd_nxt = (base + size) & 0xFFFFFFFF
    c.honest = prefix + data
    return c, prefix


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
}

# What the host does without an IPS in the way (checked on the control path):
# "evil": the application reads the forbidden string; "clean": it does not.
CONTROL = {
    "plain": "evil", "ins_bad_ip_checksum": "evil", "ttl_expires_at_relay": "evil",
    "frag_dup_benign_first": "clean", "honest_random": "clean",
}


def target(fam):
    return CFG["dst4"] if fam == 4 else CFG["dst6"]


def run_case(w, spec):
    """`spec` is NAME/FAMILY, e.g. ins_paws/4, frag_resend_completing_udp/6,
    frag_honest_udp/4."""
    name, fam = spec.rsplit("/", 1)
    fam = int(fam)
    out = {"case": spec, "family": fam}
    if name.startswith("frag_honest_"):
        l4 = name[len("frag_honest_"):]
        if l4 == "udp":
            payload = ("honest fragments " + spec).encode().ljust(64, b"=")
            d, sport = udp_datagram(fam, name, payload)
            f_honest_reverse(d, lambda p: (w.send(p), settle(0.02)))
            settle(0.2)
            out.update(proto="udp", sport=sport, exact=payload.decode(), control="clean")
        return out
    if name.startswith("frag_"):
        rest = name[len("frag_"):]
        kind, l4 = rest.rsplit("_", 1)
        out.update(frag_case(w, fam, l4, name, FRAG[kind]))
        out["control"] = CONTROL.get("frag_" + kind, "evil")
        return out
    fn = globals()["case_" + name]
    c, prefix = fn(w, fam, name)
    settle(0.1)
    out.update(proto="tcp", sport=c.sport, prefix=prefix.decode(),
               control=CONTROL.get(name, "evil"))
    honest = getattr(c, "honest", None)
    if honest is not None:
        out.update(sha256=hashlib.sha256(honest).hexdigest(), len=len(honest))
    return out


def main():
    global CFG, RNG
    CFG = json.loads(sys.argv[1])
    RNG = random.Random(CFG.get("seed", 1))
    IDS[0] = RNG.randrange(1, 1 << 16)
    USED_PORTS.update(CFG.get("used_ports", []))
    w = Wire(CFG["iface"], CFG["src_mac"], CFG["gw_mac"])
    for spec in sys.argv[2:]:
        t = time.time()
        try:
            out = run_case(w, spec)
        except Exception as e:  # a case that cannot run is reported, not hidden
            out = {"case": spec, "error": "%s: %s" % (type(e).__name__, e)}
        out["secs"] = round(time.time() - t, 2)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
