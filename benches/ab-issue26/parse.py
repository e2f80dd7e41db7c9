#!/usr/bin/env python3
"""Tabulates ab.sh's stat runs: one row per run, then medians per (path, mode, side)."""
import glob, json, os, re, statistics, sys

OUT = os.environ.get("OUT", "/tmp/relayd-ab/out")
HZ = 100.0


def win(path):
    d = {"s0": {}, "s1": {}}
    for line in open(path):
        p = line.split()
        if not p:
            continue
        if p[0] in ("s0", "s1"):
            d[p[0]][p[1]] = [int(x) for x in p[2:]]
        elif p[0] == "load":
            d["load"] = p[1]
        elif p[0] in ("rx0", "rx1", "t0", "t1"):
            d[p[0]] = float(p[1])
        elif p[0] == "tid":
            d["tid"] = p[1] if len(p) > 1 else ""
    return d


def busy(d, cpu):
    a, b = d["s0"][cpu], d["s1"][cpu]
    idle = (b[3] - a[3]) + (b[4] - a[4]) + (b[7] - a[7])
    wall = (d["t1"] - d["t0"])
    return max(0.0, wall - idle / HZ), wall


def perf(path, tid):
    thr = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        f = line.strip().split(",")
        name, val, ev = f[0], f[1], f[3]
        comm, t = name.rsplit("-", 1)
        try:
            v = float(val)
        except ValueError:
            v = 0.0
        thr.setdefault((comm, t), {})[ev] = v
    relay = {"task-clock": 0.0, "context-switches": 0.0, "raw_syscalls:sys_enter": 0.0}
    thread = dict(relay)
    napi = dict(relay)
    for (comm, t), evs in thr.items():
        tgt = napi if comm.startswith("napi/") else relay
        for k in relay:
            tgt[k] += evs.get(k, 0.0)
        if t == tid:
            for k in relay:
                thread[k] += evs.get(k, 0.0)
    return relay, thread, napi


rows = []
for w in sorted(glob.glob(OUT + "/stat-*.win")):
    base = w[:-4]
    m = re.match(r".*/stat-(.+)-(base|new)-(kernel|accept|ids|xdp)-(paced|flood|rtpaced)$", base)
    if not m:
        continue
    tag, side, path, mode = m.groups()
    if not re.fullmatch(os.environ.get("TAGS", ".*"), tag):
        continue
    d = win(w)
    if not os.path.exists(base + ".gen"):
        continue
    gen = json.load(open(base + ".gen"))
    relay, thread, napi = perf(base + ".perf", d.get("tid", ""))
    pk = d["rx1"] - d["rx0"]
    b1, wall = busy(d, "cpu1")
    b0, _ = busy(d, "cpu0")
    ours_ms = relay["task-clock"] + napi["task-clock"]
    rows.append(dict(
        tag=tag, side=side, path=path, mode=mode, load=d.get("load"),
        offered=gen["pps"], rate=pk / wall,
        thr_ns=thread["task-clock"] * 1e6 / pk if pk else float("nan"),
        relayd_ns=relay["task-clock"] * 1e6 / pk if pk else float("nan"),
        napi_ns=napi["task-clock"] * 1e6 / pk,
        sum_ns=ours_ms * 1e6 / pk,
        sys_pp=relay["raw_syscalls:sys_enter"] / pk,
        cs_pp=(relay["context-switches"]) / pk,
        core1=b1 / wall, core0=b0 / wall,
        core1_us=b1 / pk * 1e6,
        ours_share=ours_ms / 1e3 / wall,
        other1=(b1 - ours_ms / 1e3) / wall,
    ))

cols = ["tag", "side", "path", "mode", "load", "offered", "rate", "thr_ns", "relayd_ns", "napi_ns",
        "sum_ns", "sys_pp", "cs_pp", "core1", "ours_share", "other1", "core1_us", "core0"]


def fmt(v):
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:.0f}"
        return f"{v:.3f}"
    return str(v)


if "-v" in sys.argv:
    print("\t".join(cols))
    for r in sorted(rows, key=lambda r: (r["path"], r["mode"], r["tag"], r["side"])):
        print("\t".join(fmt(r[c]) for c in cols))

print()
meas = ["rate", "thr_ns", "relayd_ns", "napi_ns", "sum_ns", "sys_pp", "cs_pp", "core1", "ours_share", "other1", "core1_us"]
for path in ["kernel", "accept", "ids", "xdp"]:
    for mode in ["paced", "rtpaced", "flood"]:
        sel = {s: [r for r in rows if r["path"] == path and r["mode"] == mode and r["side"] == s] for s in ["base", "new"]}
        if not sel["base"] and not sel["new"]:
            continue
        print(f"== {path} {mode}: n base {len(sel['base'])}, new {len(sel['new'])}")
        for k in meas:
            out = []
            meds = {}
            for s in ["base", "new"]:
                v = [r[k] for r in sel[s]]
                if not v:
                    out.append("-")
                    continue
                meds[s] = statistics.median(v)
                out.append(f"{meds[s]:.4g} [{min(v):.4g}-{max(v):.4g}]")
            ratio = meds["new"] / meds["base"] if len(meds) == 2 and meds["base"] else float("nan")
            print(f"  {k:11s} base {out[0]:28s} new {out[1]:28s} ratio {ratio:.3f}")
