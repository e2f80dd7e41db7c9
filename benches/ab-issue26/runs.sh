#!/bin/bash
# Interleaved rounds: ROUNDS x (paced then flood) x path x side, alternating side order per round.
cd "$(dirname "$(readlink -f "$0")")"
R0=${R0:-1}; R1=${R1:-4}
for r in $(seq $R0 $R1); do
  if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  echo "=== round $r ($order) $(date -u +%T) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  for mode in paced flood; do
    bash ab.sh stat new kernel $mode r$r
    for path in accept ids xdp; do
      for side in $order; do bash ab.sh stat $side $path $mode r$r; done
    done
  done
done
echo "=== end $(date -u +%T)"
