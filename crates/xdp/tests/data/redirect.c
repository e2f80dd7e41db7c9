// SPDX-License-Identifier: MIT OR Apache-2.0
//
// Test-only XDP program for tests/xsk.rs: redirects every IPv4 UDP packet to the AF_XDP
// socket in the XSKMAP entry of its rx queue, after writing 16 bytes of metadata
// (0xa0, 0xa1, ..., 0xaf) in front of it with bpf_xdp_adjust_meta. Everything else
// (ARP above all) and packets of a queue with no socket go to the kernel.
//
// Built by the test: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -c

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define META_LEN 16

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int redirect_udp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;

	if (bpf_xdp_adjust_meta(ctx, -META_LEN))
		return XDP_PASS;
	data = (void *)(long)ctx->data;
	__u8 *meta = (void *)(long)ctx->data_meta;
	if ((void *)(meta + META_LEN) > data)
		return XDP_PASS;
#pragma unroll
	for (int i = 0; i < META_LEN; i++)
		meta[i] = 0xa0 + i;

	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual MIT/GPL";
