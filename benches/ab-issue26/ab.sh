#!/bin/bash
# A/B harness for issue 26: the same testbed as benches/passthrough.rs (src -- relay -- dst
# over veth, threaded NAPI on the relay's eth0 pinned to CPU 1, RPS of the other veths as
# the bench sets it, src without TSO/tx checksum offload and with a 1,000-packet pfifo),
# two relayd binaries (base, new), and per-thread counters of the relay process.
#
#   ab.sh setup | teardown
#   ab.sh stat SIDE PATH MODE TAG      PATH: kernel|accept|ids|xdp  MODE: paced|flood|rtpaced
#     (rtpaced: relay and NAPI threads SCHED_FIFO 50, generator FIFO 40; the paced generator
#     spins, so this takes the traffic core from everything else: use it sparingly)
#   ab.sh cg SIDE PATH TAG             relayd under callgrind at a low paced rate (CG_PPS, CG_SECS;
#                                      GEN_BATCH=1 GEN_BURST=1 for one packet per round)
#   ab.sh prof SIDE PATH TAG           perf record (cpu-clock) of the relay thread and core
set -u
B=b26
RELAY_CPU=1
TRAFFIC_CPU=0
OUT=${OUT:-/tmp/relayd-ab/out}
RUN=/tmp/b26run
# The two relayd binaries (bench profile) and one generator for both.
RELAYD_BASE=${RELAYD_BASE:?RELAYD_BASE=path of the base relayd}
RELAYD_NEW=${RELAYD_NEW:?RELAYD_NEW=path of the new relayd}
TRAFFIC=${TRAFFIC:?TRAFFIC=path of relay-traffic}
RULES=$(dirname "$(readlink -f "$0")")/../sizing-ids.rules
PPS=${PPS:-100000}
WARM=${WARM:-1}
WIN=${WIN:-4}
mkdir -p "$OUT" "$RUN"

relayd_bin() { [ "$1" = base ] && echo "$RELAYD_BASE" || echo "$RELAYD_NEW"; }
nx() { local n=$1; shift; ip netns exec "$B-$n" "$@"; }

setup() {
	for n in src relay dst; do
		ip netns add "$B-$n"
		ip -n "$B-$n" link set lo up
	done
	ip link add eth0 netns "$B-src" type veth peer name eth0 netns "$B-relay"
	ip link add eth1 netns "$B-relay" type veth peer name eth0 netns "$B-dst"
	ip -n "$B-src" addr add 10.0.1.1/24 dev eth0
	ip -n "$B-relay" addr add 10.0.1.2/24 dev eth0
	ip -n "$B-relay" addr add 10.0.2.1/24 dev eth1
	ip -n "$B-dst" addr add 10.0.2.2/24 dev eth0
	ip -n "$B-src" link set eth0 up
	ip -n "$B-relay" link set eth0 up
	ip -n "$B-relay" link set eth1 up
	ip -n "$B-dst" link set eth0 up
	nx relay sysctl -qw net.ipv4.ip_forward=1
	ip -n "$B-src" route add 10.0.2.0/24 via 10.0.1.2
	ip -n "$B-dst" route add 10.0.1.0/24 via 10.0.2.1
	nx relay sh -c 'echo 2 > /sys/class/net/eth0/queues/rx-0/rps_cpus; echo 2 > /sys/class/net/eth1/queues/rx-0/rps_cpus'
	nx src sh -c 'echo 1 > /sys/class/net/eth0/queues/rx-0/rps_cpus'
	nx dst sh -c 'echo 1 > /sys/class/net/eth0/queues/rx-0/rps_cpus'
	nx src ethtool -K eth0 tso off >/dev/null
	nx src ethtool -K eth0 tx off >/dev/null
	nx src tc qdisc replace dev eth0 root pfifo limit 1000
	nx src ping -c1 -W2 10.0.2.2 >/dev/null || { echo "no path"; exit 1; }
	# threaded NAPI on the relay's eth0, pinned to the relay core (Rx::Napi)
	local before after
	before=$(grep -l '^napi/' /proc/[0-9]*/comm 2>/dev/null | sort)
	nx relay sh -c 'echo 0 > /sys/class/net/eth0/queues/rx-0/rps_cpus && ethtool -K eth0 gro on >/dev/null && echo 1 > /sys/class/net/eth0/threaded'
	after=$(grep -l '^napi/' /proc/[0-9]*/comm 2>/dev/null | sort)
	local new
	new=$(comm -13 <(echo "$before") <(echo "$after") | head -1 | cut -d/ -f3)
	[ -n "$new" ] || { echo "no napi thread"; exit 1; }
	taskset -pc $RELAY_CPU "$new" >/dev/null
	echo "$new" > $RUN/napi
	nx dst iptables -w -t raw -I PREROUTING -s 10.0.1.1 -j DROP
	echo "setup done, napi thread $new ($(cat /proc/$new/comm))"
}

teardown() {
	for n in src relay dst; do
		for p in $(ip netns pids "$B-$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
		ip netns del "$B-$n" 2>/dev/null
	done
}

config() { # PATH -> config text
	local path=$1
	echo "[daemon]"
	echo "socket = \"$RUN/relay.sock\""
	case $path in
	accept) printf '[[queue]]\nnum = 0\nhook = "forward"\ncpu = 1\nnice = -5\nfail_open = false\nservices = ["accept"]\n' ;;
	ids)
		printf '[[queue]]\nnum = 0\nhook = "forward"\ncpu = 1\nnice = -5\nfail_open = false\nservices = ["ids"]\n'
		printf '[service.ids]\nkind = "ids"\nrules = ["%s"]\nstrict = true\n[service.ids.vars]\nHOME_NET = "[10.0.2.0/24]"\nEXTERNAL_NET = "!$HOME_NET"\n' "$RUN/ids.rules"
		;;
	xdp) printf '[[xdp]]\nnum = 0\ninterface = "eth0"\ncpu = 1\nfail_open = false\nservices = ["accept"]\n' ;;
	esac
}

thread_name() { [ "$1" = xdp ] && echo relayd-xdp0 || echo relayd-q0; }

find_tid() { # PID NAME
	local t
	for t in /proc/$1/task/*; do
		[ "$(cat $t/comm 2>/dev/null)" = "$2" ] && { basename $t; return; }
	done
}

# Starts relayd (optionally under a wrapper), waits for its thread pinned on the relay core.
start_relayd() { # SIDE PATH [wrapper...]
	local side=$1 path=$2; shift 2
	cp "$RULES" $RUN/ids.rules
	config "$path" > $RUN/relay.toml
	rm -f $RUN/relay.sock $RUN/relayd.err
	ip netns exec "$B-relay" "$@" "$(relayd_bin "$side")" run -c $RUN/relay.toml --log warn,relayd::cli=info 2>$RUN/relayd.err >/dev/null &
	RPID=$!
	local i
	for i in $(seq 1 300); do
		grep -q 'relayd running' $RUN/relayd.err 2>/dev/null && break
		sleep 0.1
	done
	grep -q 'relayd running' $RUN/relayd.err || { echo "relayd did not start"; cat $RUN/relayd.err; exit 1; }
	# the real relayd pid (ip netns exec execs; a wrapper may too)
	TNAME=$(thread_name "$path")
	for i in $(seq 1 50); do
		TID=$(find_tid $RPID "$TNAME")
		[ -n "$TID" ] && grep Cpus_allowed_list /proc/$RPID/task/$TID/status | grep -q "[[:space:]]$RELAY_CPU$" && break
		sleep 0.1
	done
	[ -n "$TID" ] || { echo "no thread $TNAME"; exit 1; }
	grep Cpus_allowed_list /proc/$RPID/task/$TID/status | grep -q "[[:space:]]$RELAY_CPU$" || { echo "thread not pinned"; exit 1; }
	[ "$path" = xdp ] && renice -n -5 -p "$TID" >/dev/null
	sleep 0.3
}

stop_relayd() {
	kill -TERM "$RPID" 2>/dev/null
	local i
	for i in $(seq 1 100); do kill -0 "$RPID" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$RPID" 2>/dev/null
	wait "$RPID" 2>/dev/null
	nx relay ip link show eth0 | grep -q xdp && { echo "WARNING: xdp still attached"; nx relay ip link set eth0 xdp off; }
}

gen() { # MODE SECONDS [PPS]
	local args=(--cpu $TRAFFIC_CPU udp-send --dst 10.0.2.2:9000 --size 36 --ratio 0.5 --batch ${GEN_BATCH:-64} --burst ${GEN_BURST:-256} --duration "${2}s")
	[ "$1" != flood ] && args+=(--pps "${3:-$PPS}")
	local pri=(nice -n -10)
	[ "$1" = rtpaced ] && pri=(chrt -f 40)
	nx src "${pri[@]}" $TRAFFIC "${args[@]}" >$RUN/gen.json 2>$RUN/gen.err &
	GPID=$!
}

# The measuring window's workload: dst rx packets and /proc/stat at both ends.
cat > $RUN/window.sh <<'EOF'
#!/bin/sh
# window.sh SECS OUTFILE
rx() { ip netns exec b26-dst cat /proc/net/dev | awk '$1=="eth0:"{print $3}'; }
{ echo "rx0 $(rx)"; echo "t0 $(date +%s.%N)"; grep '^cpu[01] ' /proc/stat | sed 's/^/s0 /'; } > "$2"
sleep "$1"
{ echo "rx1 $(rx)"; echo "t1 $(date +%s.%N)"; grep '^cpu[01] ' /proc/stat | sed 's/^/s1 /'; } >> "$2"
EOF
chmod +x $RUN/window.sh

stat_run() { # SIDE PATH MODE TAG
	local side=$1 path=$2 mode=$3 tag=$4
	local f=$OUT/stat-$tag-$side-$path-$mode
	local load; load=$(cut -d' ' -f1-3 /proc/loadavg)
	local napi; napi=$(cat $RUN/napi)
	local targets=$napi
	if [ "$path" != kernel ]; then
		start_relayd "$side" "$path"
		targets="$RPID,$napi"
	fi
	local win=$WIN; [ "$mode" = flood ] && win=3
	if [ "$mode" = rtpaced ]; then
		chrt -f -p 50 "$napi"
		[ "$path" != kernel ] && chrt -f -p 50 "$TID"
	fi
	gen "$mode" "$(echo "$WARM + $win + 0.5" | bc)"
	sleep "$WARM"
	perf stat -x, --per-thread -e task-clock,context-switches,raw_syscalls:sys_enter -p "$targets" -o $f.perf -- $RUN/window.sh "$win" $f.win
	wait $GPID
	cp $RUN/gen.json $f.gen
	[ "$mode" = rtpaced ] && chrt -o -p 0 "$napi"
	[ "$path" != kernel ] && stop_relayd
	# top of other processes during the run is not captured; record the load
	echo "load $load" >> $f.win
	echo "tid ${TID:-}" >> $f.win
	echo "done $tag $side $path $mode load $load"
}

cg_run() { # SIDE PATH TAG: relayd under callgrind; counters zeroed before and dumped after
	# a paced run of CG_PPS for CG_SECS, so the dump holds exactly that run's packets.
	local side=$1 path=$2 tag=$3
	local f=$OUT/cg-$tag-$side-$path
	rm -f $RUN/cg.out*
	start_relayd "$side" "$path" valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=$RUN/cg.out --log-file=$RUN/vg.log
	local cgpps=${CG_PPS:-5000} cgsecs=${CG_SECS:-6}
	sleep 1
	callgrind_control -z $RPID >/dev/null
	{ echo "rx0 $(ip netns exec b26-dst cat /proc/net/dev | awk '$1=="eth0:"{print $3}')"; echo "t0 $(date +%s.%N)"; } > $f.win
	gen paced "$cgsecs" "$cgpps"
	wait $GPID
	sleep 0.5
	{ echo "rx1 $(ip netns exec b26-dst cat /proc/net/dev | awk '$1=="eth0:"{print $3}')"; echo "t1 $(date +%s.%N)"; } >> $f.win
	callgrind_control -d $RPID >/dev/null
	cp $RUN/gen.json $f.gen
	stop_relayd
	mkdir -p $f.d; cp $RUN/cg.out* $f.d/ 2>/dev/null; cp $RUN/vg.log $f.d/
	echo "done cg $tag $side $path tid $TID"
	echo "tid $TID" >> $f.win
}

prof_run() { # SIDE PATH TAG
	local side=$1 path=$2 tag=$3
	local f=$OUT/prof-$tag-$side-$path
	start_relayd "$side" "$path"
	gen paced "$(echo "$WARM + $WIN + 0.5" | bc)"
	sleep "$WARM"
	perf record -q -e cpu-clock -F 4000 -g -t "$TID" -o $f.thr.data -- sleep "$WIN" 2>/dev/null &
	local p1=$!
	perf record -q -e cpu-clock -F 4000 -g -C $RELAY_CPU -o $f.core.data -- $RUN/window.sh "$WIN" $f.win 2>/dev/null
	wait $p1
	wait $GPID
	cp $RUN/gen.json $f.gen
	stop_relayd
	echo "done prof $tag $side $path"
}

case $1 in
setup) setup ;;
teardown) teardown ;;
stat) stat_run "$2" "$3" "$4" "$5" ;;
cg) cg_run "$2" "$3" "$4" ;;
prof) prof_run "$2" "$3" "$4" ;;
esac
