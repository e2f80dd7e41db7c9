//! Ready-made topologies: the 3-node line around a relay and the 4-node line of a
//! compression experiment, dual-stack, with routes so the ends reach each other.

use crate::{Link, Node, Testbed};

/// The classic line `src -- relay -- dst`.
///
/// | link       | a side                           | b side                           |
/// |------------|----------------------------------|----------------------------------|
/// | `src_link` | src `10.0.1.1/24`, `fd00:1::1/64`   | relay `10.0.1.2/24`, `fd00:1::2/64` |
/// | `dst_link` | relay `10.0.2.1/24`, `fd00:2::1/64` | dst `10.0.2.2/24`, `fd00:2::2/64`   |
///
/// The relay forwards; src routes `10.0.2.0/24` and `fd00:2::/64` via the relay, dst
/// routes `10.0.1.0/24` and `fd00:1::/64` back. Fields drop in declaration order, so the
/// testbed (and with it the namespaces) goes first; the node handles own nothing.
#[derive(Debug)]
pub struct Line3 {
    /// The testbed owning the three namespaces.
    pub tb: Testbed,
    /// Traffic source, `10.0.1.1` / `fd00:1::1`.
    pub src: Node,
    /// The node in the middle that runs the relay, forwarding between the two links.
    pub relay: Node,
    /// Traffic destination, `10.0.2.2` / `fd00:2::2`.
    pub dst: Node,
    /// src (`a`, eth0) to relay (`b`, eth0).
    pub src_link: Link,
    /// relay (`a`, eth1) to dst (`b`, eth0).
    pub dst_link: Link,
}

/// Builds a [`Line3`]; panics (after tearing down what was built) if any step fails.
pub fn line3(test_name: &str) -> Line3 {
    let tb = Testbed::new(test_name);
    let src = tb.node("src");
    let relay = tb.node("relay");
    let dst = tb.node("dst");
    relay.forwarding(true);
    let src_link = dual_link(&tb, &src, &relay, 1);
    let dst_link = dual_link(&tb, &relay, &dst, 2);
    src.route("10.0.2.0/24", "10.0.1.2");
    src.route("fd00:2::/64", "fd00:1::2");
    dst.route("10.0.1.0/24", "10.0.2.1");
    dst.route("fd00:1::/64", "fd00:2::1");
    Line3 {
        tb,
        src,
        relay,
        dst,
        src_link,
        dst_link,
    }
}

/// The line of a compression experiment: `src -- comp -- decomp -- dst`.
///
/// Subnet `k` (1, 2, 3) is link `links[k-1]`: its a side is `10.0.k.1/24` and
/// `fd00:k::1/64`, its b side `10.0.k.2/24` and `fd00:k::2/64`. So src is `10.0.1.1`, comp
/// `10.0.1.2`/`10.0.2.1`, decomp `10.0.2.2`/`10.0.3.1`, dst `10.0.3.2`. Both middle nodes
/// forward, and every node has routes to every subnet.
#[derive(Debug)]
pub struct Line4 {
    /// The testbed owning the four namespaces.
    pub tb: Testbed,
    /// Traffic source, `10.0.1.1` / `fd00:1::1`.
    pub src: Node,
    /// Compressing relay.
    pub comp: Node,
    /// Decompressing relay.
    pub decomp: Node,
    /// Traffic destination, `10.0.3.2` / `fd00:3::2`.
    pub dst: Node,
    /// src–comp, comp–decomp (the compressed, usually rate-limited hop), decomp–dst.
    pub links: [Link; 3],
}

/// Builds a [`Line4`]; panics (after tearing down what was built) if any step fails.
pub fn line4(test_name: &str) -> Line4 {
    let tb = Testbed::new(test_name);
    let src = tb.node("src");
    let comp = tb.node("comp");
    let decomp = tb.node("decomp");
    let dst = tb.node("dst");
    comp.forwarding(true);
    decomp.forwarding(true);
    let links = [
        dual_link(&tb, &src, &comp, 1),
        dual_link(&tb, &comp, &decomp, 2),
        dual_link(&tb, &decomp, &dst, 3),
    ];
    for k in [2, 3] {
        routes_via(&src, k, 1, 2);
    }
    routes_via(&comp, 3, 2, 2);
    routes_via(&decomp, 1, 2, 1);
    for k in [1, 2] {
        routes_via(&dst, k, 3, 1);
    }
    Line4 {
        tb,
        src,
        comp,
        decomp,
        dst,
        links,
    }
}

/// A link on subnet `k`: a side `.1`, b side `.2`, in both 10.0.k.0/24 and fd00:k::/64.
fn dual_link(tb: &Testbed, a: &Node, b: &Node, k: u8) -> Link {
    let link = tb.link(a, &format!("10.0.{k}.1/24"), b, &format!("10.0.{k}.2/24"));
    link.addr_a(&format!("fd00:{k}::1/64"));
    link.addr_b(&format!("fd00:{k}::2/64"));
    link
}

/// Routes subnet `k` (v4 and v6) from `node` via host `host` of subnet `via`.
fn routes_via(node: &Node, k: u8, via: u8, host: u8) {
    node.route(&format!("10.0.{k}.0/24"), &format!("10.0.{via}.{host}"));
    node.route(&format!("fd00:{k}::/64"), &format!("fd00:{via}::{host}"));
}
