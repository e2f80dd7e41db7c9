#!/usr/bin/env python3
"""Live runs: the relay thread's CPU time per packet against its system calls per packet
(batching), fitted per (path, side) as thr_ns = b + a * sys_pp over every run (paced, rtpaced,
flood): b is the per-packet cost, a the cost of a round's system calls. Reads parse.py -v."""
import subprocess, sys, os, statistics
here = os.path.dirname(os.path.abspath(__file__))
out = subprocess.run([sys.executable, os.path.join(here, "parse.py"), "-v"], capture_output=True, text=True).stdout
lines = [l.split("\t") for l in out.splitlines() if l and not l.startswith("==") and not l.startswith(" ")]
hdr = lines[0]; rows = [dict(zip(hdr, l)) for l in lines[1:] if len(l) == len(hdr)]
def fit(xs, ys):
    n = len(xs); mx = sum(xs)/n; my = sum(ys)/n
    sxx = sum((x-mx)**2 for x in xs); sxy = sum((x-mx)*(y-my) for x, y in zip(xs, ys))
    a = sxy/sxx; b = my - a*mx
    res = [y - (b + a*x) for x, y in zip(xs, ys)]
    sd = (sum(r*r for r in res)/(n-2))**0.5
    # standard error of the prediction at x0 is computed by the caller
    return a, b, sd, mx, sxx, n
for metric in ["thr_ns", "sum_ns"]:
    print(f"-- {metric} = b + a * syscalls/packet")
    for path in ["accept", "ids", "xdp"]:
        f = {}
        for side in ["base", "new"]:
            sel = [r for r in rows if r["path"] == path and r["side"] == side]
            xs = [float(r["sys_pp"]) for r in sel]; ys = [float(r[metric]) for r in sel]
            f[side] = fit(xs, ys)
            a, b, sd, mx, sxx, n = f[side]
            preds = []
            for x0 in (0.034, 0.4):
                se = sd*(1/n + (x0-mx)**2/sxx)**0.5
                preds.append(f"at {x0}: {b+a*x0:6.0f} +- {se:4.0f}")
            print(f"  {path:6s} {side:4s} n={n:2d} b={b:6.0f} a={a:6.0f} resid sd {sd:5.0f}  " + "  ".join(preds))
        for x0 in (0.034, 0.4):
            (a0, b0, *_), (a1, b1, *_) = f["base"], f["new"]
            print(f"  {path:6s} ratio new/base at {x0} syscalls/packet: {(b1+a1*x0)/(b0+a0*x0):.3f}")
