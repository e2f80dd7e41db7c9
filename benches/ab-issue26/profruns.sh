#!/bin/bash
cd "$(dirname "$(readlink -f "$0")")"
for r in 1 2; do
  if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for path in xdp accept ids; do for side in $order; do bash ab.sh prof $side $path p$r 2>&1 | tail -1; done; done
done
