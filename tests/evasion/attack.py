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

Usage: attack.py JSON_CONFIG CASE...   (one JSON line per case on stdout). The cases are in
tcp_cases.py and frag_cases.py, the packet plumbing in wire.py.

Frames are written to a packet socket, so the kernel neither checks nor fixes them, and
the source namespace must drop its own kernel's RSTs (iptables OUTPUT), or it would reset
every connection crafted here. Needs Debian's python3-scapy (run as /usr/bin/python3).
"""

import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import frag_cases  # noqa: E402
import tcp_cases  # noqa: E402
from frag_cases import FRAG, f_honest_reverse, frag_case, udp_datagram  # noqa: E402
from wire import CFG, RNG, USED_PORTS, Wire, settle  # noqa: E402

# What the host does without an IPS in the way (checked on the control path):
# "evil": the application reads the forbidden string; "clean": it does not.

CONTROL = {
    "plain": "evil", "ins_bad_ip_checksum": "evil", "ttl_expires_at_relay": "evil",
    "frag_dup_benign_first": "clean", "honest_random": "clean",
}


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
    fn = getattr(tcp_cases, "case_" + name)
    c, prefix = fn(w, fam, name)
    settle(0.1)
    out.update(proto="tcp", sport=c.sport, prefix=prefix.decode(),
               control=CONTROL.get(name, "evil"))
    honest = getattr(c, "honest", None)
    if honest is not None:
        out.update(sha256=hashlib.sha256(honest).hexdigest(), len=len(honest))
    return out


def main():
    # The modules share these objects: fill them in place.
    CFG.update(json.loads(sys.argv[1]))
    RNG.seed(CFG.get("seed", 1))
    frag_cases.IDS[0] = RNG.randrange(1, 1 << 16)
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
