// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * relayd's XDP program (crates/xdp/src/program.rs loads it; docs/xdp.md explains it).
 *
 * Runs on the ingress interface. A packet that one of the configured rules matches, and
 * that the kernel's FIB can forward right now, gets its egress interface and MAC
 * addresses written into the frame's metadata area (struct relay_meta, just before the
 * packet) and is redirected to the AF_XDP socket of its rx queue. With no socket bound
 * there, the redirect falls back to XDP_PASS (fail-open) or XDP_DROP (fail-closed), as
 * the config map says, so the failure policy holds while relayd is down. Everything
 * else goes on to the kernel untouched (XDP_PASS): other traffic, what is not IPv4 or
 * IPv6 (ARP, VLAN tags, truncated headers), packets whose TTL expires here, and what the
 * kernel would not forward
 * either (local delivery, no route), so that it sends ICMP errors and delivers locally
 * as usual. A matched packet the kernel would forward but whose next hop is not known
 * here (no neighbour entry yet, larger than the egress MTU) is redirected all the same,
 * with egress ifindex 0: relayd runs the chain and hands the result to the kernel's
 * forwarding, so matched traffic never bypasses the chain. So are IPv4 packets with
 * options, fragments and IPv6 packets with extension headers, matched by addresses (and
 * IPv4's protocol) alone: an option or a fragment must not carry traffic past the chain.
 * A driver that leaves no room for the metadata gets the failure policy.
 *
 * The packet is never rewritten here: userland decrements the TTL and writes the
 * Ethernet header from the metadata after its chain ran.
 *
 * Offloaded flows (docs/xdp.md, "Flow offload"): with offload on (the config map), a
 * matched packet is first looked up by its 5-tuple in `flows`, an LRU hash relayd fills
 * with the flows its chain offloaded. A live entry of the current generation passes the
 * packet to the kernel's forwarding (XDP_PASS) without a copy to userland; an entry idle
 * for longer than the configured time, or of an older generation (a reload changed the
 * chain), is deleted and the packet goes on as any other (to relayd). Packets parsed only
 * as far as the addresses (options, fragments, extension headers) are never looked up.
 *
 * Every packet bumps exactly one of the outcome counters (STAT_REDIRECTED and after,
 * except the offload events), so seen == redirected + redirected_unresolved + no_socket +
 * pass_unmatched + pass_fib + pass_ttl + pass_unparsed + pass_offloaded.
 *
 * Licence: bpf_fib_lookup is a GPL-only helper, hence "Dual MIT/GPL".
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_QUEUES 64
#define MAX_RULES 32

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* IPv4 frag_off: more fragments, and the offset. */
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

/* Counters in `stats`; program.rs documents them (ProgramStats) and keeps this order. */
enum {
	STAT_SEEN = 0,
	STAT_REDIRECTED = 1,
	STAT_NO_SOCKET = 2,
	STAT_PASS_UNMATCHED = 3,
	STAT_PASS_FIB = 4,
	STAT_PASS_TTL = 5,
	STAT_PASS_UNPARSED = 6,
	STAT_REDIRECTED_UNRESOLVED = 7,
	STAT_PASS_OFFLOADED = 8,
	/* Events, not outcomes: an offloaded flow's entry deleted, the packet going on. */
	STAT_OFFLOAD_EXPIRED = 9,
	STAT_OFFLOAD_REVOKED = 10,
	STAT_COUNT = 11,
};

/* program.rs: Cfg (24 bytes). */
struct relay_cfg {
	__u32 fail_open;  /* non-zero: XDP_PASS when no socket is bound, else XDP_DROP */
	__u32 nrules;     /* rules[0..nrules) are in force */
	__u32 offload;    /* non-zero: matched packets are looked up in `flows` */
	__u32 generation; /* entries of another generation are revoked */
	__u64 idle_ns;    /* an entry unused for longer than this expires */
};

/* offload.rs: FlowKey (40 bytes). A packet's 5-tuple in its own direction: addresses in
 * network order (IPv4 in the first word, the rest zero), ports in host order (zero for
 * protocols other than TCP and UDP), family 4 or 6, the IP protocol, padding zero. */
struct relay_flow {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u8 family;
	__u8 proto;
	__u8 pad[2];
};

/* offload.rs: FlowValue (32 bytes). relayd writes it once (last_ns = its insertion time,
 * packets and bytes zero, generation its chain's); the program updates the rest. */
struct relay_flow_val {
	__u64 last_ns; /* bpf_ktime_get_ns() (CLOCK_MONOTONIC) of the last packet passed */
	__u64 packets; /* passed to the kernel by this entry */
	__u64 bytes;   /* their IP bytes */
	__u32 generation;
	__u32 pad;
};

/* offload.rs: QueueOffloadStats. Per rx queue, for the queue's own counters. */
struct relay_qstat {
	__u64 passed;
	__u64 bytes;
	__u64 expired;
	__u64 revoked;
};

/* program.rs: MatchRule (#[repr(C)], 44 bytes). */
struct relay_rule {
	__u8 family;  /* 0 any, 4, 6 */
	__u8 proto;   /* 0 any, else the IP protocol (after IPv6's fixed header) */
	__u8 src_len; /* source prefix length, 0 = any */
	__u8 dst_len;
	__u16 sport_lo, sport_hi; /* host order; 0..65535 = any; a narrower range */
	__u16 dport_lo, dport_hi; /* matches only TCP and UDP packets */
	__u8 src[16];             /* network order; IPv4 in the first 4 bytes */
	__u8 dst[16];
};

/* program.rs: FrameMeta. Written just before the packet (data_meta .. data). */
struct relay_meta {
	__u32 ifindex; /* egress interface (host order) */
	__u8 dmac[6];  /* next hop's MAC */
	__u8 smac[6];  /* egress interface's MAC */
};

_Static_assert(sizeof(struct relay_rule) == 44, "relay_rule is 44 bytes");
_Static_assert(sizeof(struct relay_meta) == 16, "relay_meta is 16 bytes");
_Static_assert(sizeof(struct relay_cfg) == 24, "relay_cfg is 24 bytes");
_Static_assert(sizeof(struct relay_flow) == 40, "relay_flow is 40 bytes");
_Static_assert(sizeof(struct relay_flow_val) == 32, "relay_flow_val is 32 bytes");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct relay_cfg);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__type(value, struct relay_rule);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Offloaded flows. max_entries is the `[[xdp]] offload_flows` relayd loads the program
 * with (1 when offload is off: an LRU hash is allocated whole up front). An LRU hash and
 * not a plain one: when it is full, inserting a new flow evicts the least recently used
 * one (which then comes back to relayd), rather than failing. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct relay_flow);
	__type(value, struct relay_flow_val);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct relay_qstat);
} offload_stats SEC(".maps");

/* What the rules look at, in the rule's byte orders; `k` is also the `flows` key. */
struct pkt {
	struct relay_flow k; /* addresses, ports (0 without), family, protocol */
	__u8 has_ports; /* TCP or UDP */
	/* IPv4 options, a fragment, IPv6 extension headers: the ports (and, behind IPv6
	 * extension headers, the protocol) are not read here. Such a packet matches a rule
	 * whatever the rule says of them, so that no option or fragment carries matched
	 * traffic past the chain; relayd runs the chain and hands it to the kernel. */
	__u8 irregular;
	__u8 proto_unknown;
	/* A TCP segment with SYN set (a SYN or SYN-ACK): a new connection, perhaps on the
	 * tuple of an old offloaded one, which relayd's chain must see from its start. */
	__u8 syn;
};

static __always_inline int count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		*v += 1; /* per-CPU slot: no atomic needed */
	return 0;
}

/* Whether the first `len` bits of `a` and `b` agree (len <= 128; 0 always agrees). */
static __always_inline int prefix_eq(const __u32 *a, const __u8 *b, __u32 len)
{
	__u32 w[4];

	__builtin_memcpy(w, b, 16);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 bits, mask;

		if (len <= (__u32)i * 32)
			break;
		bits = len - (__u32)i * 32;
		mask = bits >= 32 ? 0xffffffff : bpf_htonl(~((1u << (32 - bits)) - 1));
		if ((a[i] ^ w[i]) & mask)
			return 0;
	}
	return 1;
}

static __always_inline int rule_matches(const struct relay_rule *r, const struct pkt *p)
{
	__u32 max_len = p->k.family == 4 ? 32 : 128;

	if (r->family && r->family != p->k.family)
		return 0;
	if (r->proto && !p->proto_unknown && r->proto != p->k.proto)
		return 0;
	if (!p->irregular &&
	    (r->sport_lo != 0 || r->sport_hi != 0xffff || r->dport_lo != 0 || r->dport_hi != 0xffff)) {
		if (!p->has_ports)
			return 0;
		if (p->k.sport < r->sport_lo || p->k.sport > r->sport_hi)
			return 0;
		if (p->k.dport < r->dport_lo || p->k.dport > r->dport_hi)
			return 0;
	}
	/* A prefix longer than the family's address never matches (program.rs refuses it). */
	if (r->src_len > max_len || r->dst_len > max_len)
		return 0;
	if (r->src_len && !prefix_eq(p->k.src, r->src, r->src_len))
		return 0;
	if (r->dst_len && !prefix_eq(p->k.dst, r->dst, r->dst_len))
		return 0;
	return 1;
}

/* IPv6 extension headers this program does not walk (the packet goes to the kernel):
 * hop-by-hop, routing, fragment, AH, destination options, mobility, HIP, shim6. ESP (50)
 * is a final header as far as forwarding goes, so it is a protocol a rule can name. */
static __always_inline int ipv6_ext_header(__u8 nexthdr)
{
	switch (nexthdr) {
	case 0:
	case 43:
	case 44:
	case 51:
	case 60:
	case 135:
	case 139:
	case 140:
		return 1;
	}
	return 0;
}

/* Whether the packet's flow is offloaded: a live entry of the current generation in
 * `flows`, which this packet then refreshes and counts. A stale entry (idle too long,
 * from before a reload, or met by a SYN) is deleted and counted, and the packet goes on
 * to relayd.
 *
 * The entry's packet and byte counts are atomic adds on the shared entry rather than a
 * per-CPU hash: RSS keeps a flow on one rx queue, so on one CPU, and an uncontended
 * atomic add costs about a plain one; a per-CPU value would multiply the map's memory by
 * the CPU count and leave no single last-seen time to judge idleness by. The last-seen
 * store is plain: racing CPUs write nearly the same time. */
static __always_inline int offloaded(struct xdp_md *ctx, const struct relay_cfg *cfg,
				     const struct relay_flow *k, __u64 len, int syn)
{
	struct relay_flow_val *v = bpf_map_lookup_elem(&flows, k);
	struct relay_qstat *q;
	__u32 qi = ctx->rx_queue_index;
	__u64 now;

	if (!v)
		return 0;
	now = bpf_ktime_get_ns();
	q = bpf_map_lookup_elem(&offload_stats, &qi);
	/* A SYN opens a new connection on the tuple (a port reused after the old one
	 * closed): the old flow's offload ends with it, as conntrack makes a new entry. */
	if (syn || v->generation != cfg->generation) {
		bpf_map_delete_elem(&flows, k);
		count(STAT_OFFLOAD_REVOKED);
		if (q)
			q->revoked += 1; /* per-CPU slot */
		return 0;
	}
	/* Signed: relayd's insertion time may be a little after this CPU's clock read. */
	if ((__s64)(now - v->last_ns) > (__s64)cfg->idle_ns) {
		bpf_map_delete_elem(&flows, k);
		count(STAT_OFFLOAD_EXPIRED);
		if (q)
			q->expired += 1;
		return 0;
	}
	v->last_ns = now;
	__sync_fetch_and_add(&v->packets, 1);
	__sync_fetch_and_add(&v->bytes, len);
	if (q) {
		q->passed += 1;
		q->bytes += len;
	}
	return 1;
}

SEC("xdp")
int relayd_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};
	struct pkt p = {};
	struct relay_cfg *cfg;
	struct relay_meta *meta;
	struct ethhdr *eth = data;
	void *l4;
	__u32 zero = 0, i, nrules, ttl;
	__u64 iplen;
	int rc, matched = 0, unresolved = 0;

	count(STAT_SEEN);
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return XDP_PASS; /* cannot happen: an ARRAY's slots always exist */

	if ((void *)(eth + 1) > data_end)
		goto unparsed;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end)
			goto unparsed;
		if (ip->version != 4 || ip->ihl < 5)
			goto unparsed;
		/* Options (rare) or a fragment (no ports, or only in the first): matched by
		 * addresses and protocol alone (struct pkt). */
		if (ip->ihl != 5 || (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)))
			p.irregular = 1;
		p.k.family = 4;
		p.k.proto = ip->protocol;
		p.k.src[0] = ip->saddr;
		p.k.dst[0] = ip->daddr;
		ttl = ip->ttl;
		iplen = bpf_ntohs(ip->tot_len);
		l4 = ip + 1;
		fib.family = AF_INET;
		fib.tos = ip->tos;
		fib.tot_len = bpf_ntohs(ip->tot_len);
		fib.ipv4_src = ip->saddr;
		fib.ipv4_dst = ip->daddr;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			goto unparsed;
		if (ip6->version != 6)
			goto unparsed;
		/* Extension headers are not walked: matched by addresses alone. */
		if (ipv6_ext_header(ip6->nexthdr)) {
			p.irregular = 1;
			p.proto_unknown = 1;
		}
		p.k.family = 6;
		p.k.proto = ip6->nexthdr;
		__builtin_memcpy(p.k.src, &ip6->saddr, 16);
		__builtin_memcpy(p.k.dst, &ip6->daddr, 16);
		ttl = ip6->hop_limit;
		iplen = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		l4 = ip6 + 1;
		fib.family = AF_INET6;
		fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
		fib.tot_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
	} else {
		goto unparsed; /* ARP, VLAN tags, MPLS, ...: not ours */
	}

	if (p.irregular) {
		/* no ports to read */
	} else if (p.k.proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end)
			goto unparsed;
		p.k.sport = bpf_ntohs(th->source);
		p.k.dport = bpf_ntohs(th->dest);
		p.has_ports = 1;
		p.syn = th->syn;
	} else if (p.k.proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end)
			goto unparsed;
		p.k.sport = bpf_ntohs(uh->source);
		p.k.dport = bpf_ntohs(uh->dest);
		p.has_ports = 1;
	}

	nrules = cfg->nrules;
	for (i = 0; i < MAX_RULES; i++) {
		struct relay_rule *r;

		if (i >= nrules)
			break;
		r = bpf_map_lookup_elem(&rules, &i);
		if (r && rule_matches(r, &p)) {
			matched = 1;
			break;
		}
	}
	if (!matched) {
		count(STAT_PASS_UNMATCHED);
		return XDP_PASS;
	}
	if (ttl <= 1) {
		count(STAT_PASS_TTL); /* the kernel sends the ICMP time exceeded */
		return XDP_PASS;
	}
	/* One load and branch on the miss path while offload is off. The kernel forwards an
	 * offloaded flow's packets: no FIB lookup here. */
	if (cfg->offload && !p.irregular && offloaded(ctx, cfg, &p.k, iplen, p.syn)) {
		count(STAT_PASS_OFFLOADED);
		return XDP_PASS;
	}

	fib.l4_protocol = p.k.proto;
	fib.sport = bpf_htons(p.k.sport);
	fib.dport = bpf_htons(p.k.dport);
	fib.ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
	case BPF_FIB_LKUP_RET_UNSUPP_LWT:
		/* A packet the kernel would forward, but not to a next hop known here (no
		 * neighbour entry yet, larger than the egress MTU: to be fragmented or
		 * answered, a lightweight tunnel route). It still goes through the chain,
		 * so that matched traffic never bypasses it (an encrypting chain, a
		 * fail-closed queue): egress ifindex 0 tells relayd to hand the result to
		 * the kernel's forwarding, which resolves the neighbour, fragments or
		 * answers as usual. */
		unresolved = 1;
		break;
	default:
		/* Local delivery, no route, blackhole, prohibit, forwarding off: the kernel
		 * does not forward these either. */
		count(STAT_PASS_FIB);
		return XDP_PASS;
	}
	/* What relayd does not transmit itself (options, fragments, extension headers)
	 * goes back to the kernel's forwarding after the chain. */
	if (p.irregular)
		unresolved = 1;

	/* Userland needs the next hop: without room for it (a driver that gives no headroom
	 * for metadata) the kernel forwards the packet instead, counted with the FIB misses. */
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct relay_meta)))
		goto no_meta;
	meta = (void *)(long)ctx->data_meta;
	if ((void *)(meta + 1) > (void *)(long)ctx->data)
		goto no_meta;
	meta->ifindex = unresolved ? 0 : fib.ifindex;
	__builtin_memcpy(meta->dmac, fib.dmac, 6);
	__builtin_memcpy(meta->smac, fib.smac, 6);

	rc = bpf_redirect_map(&xsks, ctx->rx_queue_index, cfg->fail_open ? XDP_PASS : XDP_DROP);
	if (rc != XDP_REDIRECT)
		count(STAT_NO_SOCKET);
	else
		count(unresolved ? STAT_REDIRECTED_UNRESOLVED : STAT_REDIRECTED);
	return rc;

no_meta:
	/* Matched, but relayd cannot be told the next hop: the failure policy. */
	count(STAT_PASS_FIB);
	return cfg->fail_open ? XDP_PASS : XDP_DROP;

unparsed:
	count(STAT_PASS_UNPARSED);
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
