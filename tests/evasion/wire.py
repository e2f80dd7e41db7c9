"""The evasion suite's packet plumbing: a packet socket that writes whole frames to the
gateway and reads the host's answers, and a TCP connection driven by hand (sequence
numbers, timestamps, the host's window). Shared by tcp_cases.py and frag_cases.py; see
attack.py."""

import random
import socket
import struct
import sys
import threading
import time

from scapy.all import IP, IPv6, TCP, Raw


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

    def handshake(self, data=b""):
        """SYN, SYN-ACK, ACK; `data` rides on the handshake's last ACK."""
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
        self.send(self.snd_nxt, data, flags="PA" if data else "A")
        self.snd_nxt = (self.snd_nxt + len(data)) & 0xFFFFFFFF

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


def target(fam):
    return CFG["dst4"] if fam == 4 else CFG["dst6"]
