"""The TCP cases of the evasion suite (attack.py runs them): insertions, RST and SYN
handling, the urgent pointer, TTL, and overlaps as Linux's tcp_input.c resolves them."""

from scapy.all import IP, IPv6, TCP

from wire import FORBIDDEN, RNG, Conn, CFG, settle, target

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


def case_honest_no_timestamp(w, fam, name):
    """Honest bytes in a segment without the timestamp option the handshake negotiated:
    Linux takes it (tcp_validate_incoming checks PAWS only on segments that carry a
    timestamp), so an engine must not drop it; then the forbidden string in order."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    line = b"no timestamp here\n"
    c.send(s, line, options=False)
    if not c.wait_acked(s + len(line)):
        c.snd_nxt = s + len(line)
        return c, prefix + line
    c.snd_nxt = s + len(line)
    s = c.snd_nxt
    c.send(s, b"EVIL-PA")
    settle()
    c.send(s + 7, b"YLOAD")
    c.wait_acked(s + 12, 0.5)
    return c, prefix + line


def case_data_on_handshake_ack(w, fam, name):
    """The first part of the forbidden string on the ACK that completes the handshake
    (tcp_rcv_state_process takes data on it), the rest in the next segment."""
    c = Conn(w, fam, target(fam), CFG["tcp_port"])
    c.handshake(b"EVIL-PA")
    settle()
    c.send(c.snd_nxt, b"YLOAD")
    c.wait_acked(c.snd_nxt + 5, 0.5)
    return c, b""


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


def case_urgent_pointer_ahead(w, fam, name):
    """tcp_urg on a segment without data: the urgent pointer may point past the segment,
    and the byte it names is taken out of the stream when it arrives later, in a segment
    without URG."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s, flags="AU", urgptr=6)
    settle()
    c.send(s, b"EVIL-")
    settle()
    c.send(s + 5, b"XPAYLOAD")
    c.wait_acked(s + 13, 0.5)
    return c, prefix


def case_ins_md5_option(w, fam, name):
    """tcp_inbound_hash: a segment with a TCP-MD5 signature option (RFC 2385) on a
    connection without a key is dropped (TCPMD5Unexpected)."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    seg = c.segment(s, b"GOOD-PA")
    seg[TCP].options = seg[TCP].options + [(19, b"\x00" * 16)]
    w.send(seg)
    settle()
    c.send(s, b"EVIL-PA")
    settle()
    c.send(s + 7, b"YLOAD")
    c.wait_acked(s + 12, 0.5)
    return c, prefix


def case_ins_v6_destopt_discard(w, fam, name):
    """ip6_parse_tlv / ip6_tlvopt_unknown: an IPv6 destination option of unknown type whose
    two high bits are 01 makes the host discard the packet. Routers do not read
    destination options, so it passes the relay and dies at the host. (IPv6 only; over
    IPv4 the case sends a segment without ACK instead.)"""
    if fam == 4:
        return case_ins_noack(w, fam, name)
    from scapy.all import IPv6ExtHdrDestOpt, HBHOptUnknown
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    seg = c.segment(s, b"GOOD-PA")
    t = seg[TCP]
    pkt = IPv6(src=c.src, dst=c.dst) / IPv6ExtHdrDestOpt(
        options=[HBHOptUnknown(otype=0x5E, optdata=b"\x00\x00\x00\x00")]) / t
    w.send(pkt)
    settle()
    c.send(s, b"EVIL-PA")
    settle()
    c.send(s + 7, b"YLOAD")
    c.wait_acked(s + 12, 0.5)
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


def case_ooo_same_start_shorter(w, fam, name):
    """tcp_data_queue_ofo: a later out-of-order segment inside a queued one ("all the bits
    are present") is dropped: the first bytes win."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s + 5, b"PAYLOAD!")
    settle()
    c.send(s + 5, b"safe!!")
    settle()
    c.send(s, b"EVIL-")
    c.wait_acked(s + 13, 0.5)
    return c, prefix


def case_ooo_later_start_partial(w, fam, name):
    """tcp_data_queue_ofo / tcp_ofo_queue: a later segment starting inside a queued one and
    ending after it; both are kept and the earlier start wins where they overlap."""
    c, prefix = tcp_start(w, fam, name)
    s = c.snd_nxt
    c.send(s + 5, b"PAYLO")
    settle()
    c.send(s + 8, b"xxAD")
    settle()
    c.send(s, b"EVIL-")
    c.wait_acked(s + 12, 0.5)
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

