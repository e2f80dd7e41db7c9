#!/usr/bin/env python3
"""Call counts of named functions in a callgrind dump (summed over call sites)."""
import sys, re, collections
names = {}; calls = collections.Counter(); cur = None
for line in open(sys.argv[1]):
    m = re.match(r"^c?fn=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
    if m:
        if m.group(2): names[m.group(1)] = m.group(2)
        if line.startswith("cfn="): cur = names.get(m.group(1))
        continue
    if line.startswith("calls=") and cur:
        calls[cur] += int(line.split("=")[1].split()[0])
for pat in sys.argv[2:]:
    for k, v in calls.items():
        if re.search(pat, k): print(f"{v:9d}  {k[:120]}")
