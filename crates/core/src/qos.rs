//! The traffic-control state a service needs on an egress interface: an HTB tree with one
//! class per traffic class the service marks packets for (MANE's per-VCAN QoS, seed 001).
//! The service only describes it, in its [`Manifest::qos`](crate::Manifest::qos) (vocabulary,
//! no behaviour); relayd installs it with tc when the service starts, changes only the
//! differing classes on reload, and removes it on exit.

/// An HTB tree on one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosPlan {
    /// The egress interface.
    pub interface: String,
    /// The HTB qdisc's major handle (e.g. 0x1d0 for `1d0:`); marks carry it in their high
    /// 16 bits.
    pub handle: u16,
    /// The root class's rate and ceil (bits/s): the link.
    pub link_rate_bps: u64,
    /// The default class's guaranteed rate (bits/s); its ceil is the link rate.
    pub default_rate_bps: u64,
    /// One class per traffic class, in table order.
    pub classes: Vec<QosClass>,
}

/// One class of a [`QosPlan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosClass {
    /// A name for messages and status (e.g. the VCAN's).
    pub name: String,
    /// The class minor: the class is `handle:minor`.
    pub minor: u16,
    /// The verdict mark the service gives the class's packets: `handle << 16 | minor`.
    pub mark: u32,
    /// The MPLS label of the class (0 if none).
    pub label: u32,
    /// Guaranteed rate, bits/s.
    pub rate_bps: u64,
    /// Ceiling, bits/s.
    pub ceil_bps: u64,
    /// HTB priority 0..=7.
    pub prio: u8,
}
