//! The IKE connections as `relayd status` shows them and the metrics export them.

use crate::config::IkeSpec;
use relay_ike::{Counters, EspTransform, IkeSaStatus, IkeState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One `[ike.NAME]` connection: its IKE SA (if any) and child SAs, and its counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IkeConnStatus {
    /// The connection's name.
    pub name: String,
    /// Configured local address.
    pub local: String,
    /// Configured remote address.
    pub remote: String,
    /// `established`, `connecting`, `authenticating`, `rekeying`, `deleting`, or `down`
    /// (no IKE SA); `error` when its sockets could not be bound (see `error`).
    pub state: String,
    /// Why the connection cannot run, if it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The peer's address and port of the current IKE SA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// Whether relayd initiated the current IKE SA.
    #[serde(default)]
    pub initiator: bool,
    /// Seconds since the current IKE SA was made.
    #[serde(default)]
    pub age_s: u64,
    /// Rekeys of the IKE SA (its line, across rekeys).
    #[serde(default)]
    pub rekeys: u64,
    /// Failed attempts since the last success.
    #[serde(default)]
    pub failures: u64,
    /// Whether a NAT was detected (IKE and ESP on UDP 4500).
    #[serde(default)]
    pub nat: bool,
    /// The child SAs.
    #[serde(default)]
    pub children: Vec<IkeChildStatus>,
    /// Counters: messages in and out, retransmits, each reason a message was refused,
    /// SAs made and rekeyed, and the shell's own (send errors, ESP in UDP ignored).
    #[serde(default)]
    pub counters: BTreeMap<String, u64>,
}

/// One child SA.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct IkeChildStatus {
    /// Inbound SPI (chosen by relayd).
    pub spi_in: u32,
    /// Outbound SPI (chosen by the peer).
    pub spi_out: u32,
    /// The ESP suite (`aes128gcm16`, `aes256-sha256`, ...).
    pub transform: String,
    /// Seconds since installed.
    pub age_s: u64,
    /// Rekeys of this child's line.
    pub rekeys: u64,
    /// Whether the datapath took it.
    #[serde(default)]
    pub installed: bool,
}

fn state_name(s: IkeState) -> &'static str {
    match s {
        IkeState::Connecting => "connecting",
        IkeState::Authenticating => "authenticating",
        IkeState::Established => "established",
        IkeState::Rekeying => "rekeying",
        IkeState::Deleting => "deleting",
        _ => "other",
    }
}

/// strongSwan's name of an ESP suite.
pub fn transform_name(t: EspTransform) -> &'static str {
    match t {
        EspTransform::Aes128Gcm16 => "aes128gcm16",
        EspTransform::Aes256Gcm16 => "aes256gcm16",
        EspTransform::Aes128CbcHmacSha256 => "aes128-sha256",
        EspTransform::Aes256CbcHmacSha256 => "aes256-sha256",
        _ => "other",
    }
}

/// The counters of relay_ike under their names in status and metrics.
pub fn counter_map(c: &Counters) -> BTreeMap<String, u64> {
    [
        ("msgs_in", c.msgs_in),
        ("msgs_out", c.msgs_out),
        ("retransmits", c.retransmits),
        ("invalid_malformed", c.invalid_malformed),
        ("invalid_unknown_spi", c.invalid_unknown_spi),
        ("invalid_integrity", c.invalid_integrity),
        ("invalid_msg_id", c.invalid_msg_id),
        ("invalid_state", c.invalid_state),
        ("invalid_critical", c.invalid_critical),
        ("auth_failures", c.auth_failures),
        ("no_proposal", c.no_proposal),
        ("ts_unacceptable", c.ts_unacceptable),
        ("ike_up", c.ike_up),
        ("child_up", c.child_up),
        ("child_rekeys", c.child_rekeys),
        ("ike_rekeys", c.ike_rekeys),
        ("timeouts", c.timeouts),
        ("cookies_sent", c.cookies_sent),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

impl IkeConnStatus {
    /// The status of connection `spec` from its endpoint's IKE SAs (the newest one that is
    /// not being deleted stands for the connection) and counters.
    pub fn new(
        spec: &IkeSpec,
        sas: &[IkeSaStatus],
        counters: &Counters,
        bind_error: Option<String>,
    ) -> IkeConnStatus {
        let current = sas
            .iter()
            .filter(|s| s.state != IkeState::Deleting)
            .min_by_key(|s| s.age)
            .or_else(|| sas.first());
        let mut st = IkeConnStatus {
            name: spec.name.clone(),
            local: spec.conn.local.to_string(),
            remote: spec.conn.remote.to_string(),
            state: "down".into(),
            counters: counter_map(counters),
            ..Default::default()
        };
        if let Some(e) = bind_error {
            st.state = "error".into();
            st.error = Some(e);
            return st;
        }
        if let Some(sa) = current {
            st.state = state_name(sa.state).into();
            st.peer = Some(sa.remote.to_string());
            st.initiator = sa.initiator;
            st.age_s = sa.age.as_secs();
            st.rekeys = u64::from(sa.rekeys);
            st.failures = u64::from(sa.failures);
            st.nat = sa.nat;
            // Children of every IKE SA of the connection: during an IKE rekey they move.
            for s in sas {
                for c in &s.children {
                    st.children.push(IkeChildStatus {
                        spi_in: c.spi_in,
                        spi_out: c.spi_out,
                        transform: transform_name(c.transform).into(),
                        age_s: c.age.as_secs(),
                        rekeys: u64::from(c.rekeys),
                        installed: false,
                    });
                }
            }
        }
        st
    }
}

/// The IKE part of `relayd status`'s table.
pub fn render(conns: &[IkeConnStatus]) -> String {
    let mut o = format!(
        "\n{:<16} {:<14} {:<22} {:>8} {:>6} {:>8} {:>4}  children\n",
        "ike", "state", "peer", "age", "rekeys", "failures", "nat"
    );
    for c in conns {
        let children: Vec<String> = c
            .children
            .iter()
            .map(|ch| {
                format!(
                    "{:08x}/{:08x} {} {}s rekeys={}",
                    ch.spi_in, ch.spi_out, ch.transform, ch.age_s, ch.rekeys
                )
            })
            .collect();
        let state = match &c.error {
            Some(e) => format!("{} ({e})", c.state),
            None => c.state.clone(),
        };
        o.push_str(&format!(
            "{:<16} {:<14} {:<22} {:>7}s {:>6} {:>8} {:>4}  {}\n",
            c.name,
            state,
            c.peer.as_deref().unwrap_or(&c.remote),
            c.age_s,
            c.rekeys,
            c.failures,
            if c.nat { "yes" } else { "no" },
            children.join(", ")
        ));
    }
    o
}
