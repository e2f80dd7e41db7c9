#!/bin/bash
cd "$(dirname "$(readlink -f "$0")")"
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for path in accept ids xdp; do for side in $order; do bash ab.sh cg $side $path c$r 2>&1 | grep done; done; done
done
