#!/bin/bash
# callgrind with single-packet batches: 2,000/s, generator batch 1, burst 1
cd "$(dirname "$(readlink -f "$0")")"
export GEN_BATCH=1 GEN_BURST=1 CG_PPS=2000 CG_SECS=8
for r in 1 2; do
  if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for path in accept ids xdp; do for side in $order; do bash ab.sh cg $side $path s$r 2>&1 | grep done; done; done
done
