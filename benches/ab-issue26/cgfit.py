#!/usr/bin/env python3
"""Ir of the relay thread = a * batches + b * packets, fitted per (path, side) over all callgrind
runs (normal and single-packet batches). packets = calls of Chain::run, batches = calls of
recvmmsg (NFQUEUE) or poll (XDP)."""
import os, glob, re, subprocess, statistics, collections
OUT = os.environ.get("OUT", "/tmp/relayd-ab/out")
def counts(f):
    names = {}; calls = collections.Counter(); cur = None; summ = 0
    for line in open(f):
        if line.startswith("summary:"): summ = int(line.split()[1])
        m = re.match(r"^c?fn=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            if m.group(2): names[m.group(1)] = m.group(2)
            if line.startswith("cfn="): cur = names.get(m.group(1))
            continue
        if line.startswith("calls=") and cur:
            calls[cur] += int(line.split("=")[1].split()[0])
    return summ, calls
data = collections.defaultdict(list)
for d in sorted(glob.glob(OUT + "/cg-*.d")):
    m = re.match(r".*/cg-(.+)-(base|new)-(accept|ids|xdp)\.d$", d)
    tag, side, path = m.groups()
    best = None
    for f in glob.glob(d + "/cg.out.1-*"):
        s, c = counts(f)
        if best is None or s > best[0]: best = (s, c)
    ir, c = best
    P = c.get("relay_core::chain::Chain::run", 0)
    B = c.get("poll" if path == "xdp" else "recvmmsg", 0)
    data[(path, side)].append((tag, ir, P, B))
    print(f"{tag:4s} {side:4s} {path:6s} Ir {ir:10d} packets {P:6d} batches {B:6d} pkts/batch {P/max(B,1):5.2f} Ir/pkt {ir/max(P,1):8.1f}")
print()
for path in ["accept", "ids", "xdp"]:
    res = {}
    for side in ["base", "new"]:
        rows = data.get((path, side), [])
        if len(rows) < 2: continue
        # least squares for ir = a*B + b*P (no intercept)
        sbb = sum(B*B for _,_,P,B in rows); spp = sum(P*P for _,_,P,B in rows); sbp = sum(B*P for _,_,P,B in rows)
        sib = sum(ir*B for _,ir,P,B in rows); sip = sum(ir*P for _,ir,P,B in rows)
        det = sbb*spp - sbp*sbp
        a = (sib*spp - sip*sbp) / det; b = (sip*sbb - sib*sbp) / det
        resid = [ir - a*B - b*P for _,ir,P,B in rows]
        rel = max(abs(r)/ir for r,(_,ir,_,_) in zip(resid, rows))
        res[side] = (a, b)
        print(f"{path:6s} {side:4s} n={len(rows)} per batch a={a:8.1f} per packet b={b:7.1f}  at 1/batch {a+b:7.1f}  at 16/batch {a/16+b:7.1f}  max residual {100*rel:.1f} %")
    if len(res) == 2:
        (a0,b0),(a1,b1) = res["base"], res["new"]
        print(f"{path:6s} ratio new/base: per packet {b1/b0:.3f}, per batch {a1/a0:.3f}, at 1/batch {(a1+b1)/(a0+b0):.3f}, at 16/batch {(a1/16+b1)/(a0/16+b0):.3f}")
