#!/bin/bash
# rtpaced: relay thread and NAPI thread SCHED_FIFO 50, generator FIFO 40, paced 100,000/s
cd "$(dirname "$(readlink -f "$0")")"
for r in 1 2 3 4; do
  if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  echo "=== rt round $r ($order) $(date -u +%T) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  bash ab.sh stat new kernel rtpaced t$r
  for path in accept ids xdp; do
    for side in $order; do bash ab.sh stat $side $path rtpaced t$r; done
  done
done
echo "=== end $(date -u +%T)"
