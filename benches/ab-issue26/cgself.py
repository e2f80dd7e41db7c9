#!/usr/bin/env python3
"""Self cost (Ir) per function of a callgrind dump, handling name compression."""
import sys, re, collections
def selfcost(path):
    names = {}
    cost = collections.Counter()
    fn = None; skip = False
    for line in open(path):
        line = line.rstrip("\n")
        m = re.match(r"^fn=\((\d+)\)(?: (.*))?$", line)
        if m:
            i, n = m.groups()
            if n: names[i] = n
            fn = names.get(i, i); skip = False; continue
        m = re.match(r"^c?fn=\((\d+)\) (.*)$", line) or re.match(r"^cfn=\((\d+)\) (.*)$", line)
        if m:
            names[m.group(1)] = m.group(2); continue
        if line.startswith("calls="):
            skip = True; continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            parts = line.split()
            if skip:
                skip = False; continue
            if fn is not None and len(parts) >= 2:
                cost[fn] += int(parts[1])
    return cost
if __name__ == "__main__":
    c = selfcost(sys.argv[1]); tot = sum(c.values()); pk = float(sys.argv[2]) if len(sys.argv) > 2 else 1
    print("total", tot, "per pkt", tot / pk)
    for f, v in c.most_common(int(sys.argv[3]) if len(sys.argv) > 3 else 30):
        print(f"{v/pk:10.1f} {100*v/tot:5.1f}%  {f[:150]}")
