//! The IKE connections' series (`[ike.NAME]`, daemon/relayd/src/ike): state, peer, ages,
//! rekeys, failures, child SAs and the protocol counters.

use super::{Builder, labels, put, set};
use crate::ike::IkeConnStatus;

/// Adds the series of `conns` to `b`.
pub(super) fn encode(b: &mut Builder, conns: &[IkeConnStatus]) {
    // IKE connections (`[ike.NAME]`).
    let ike_up = b.gauge(
        "relayd_ike_established",
        "1 if the IKE connection has an established IKE SA, else 0.",
    );
    let ike_info = b.gauge(
        "relayd_ike_info",
        "Always 1: the IKE connection's state (established, connecting, ..., down) and peer.",
    );
    let ike_age = b.gauge(
        "relayd_ike_sa_age_seconds",
        "Age of the connection's current IKE SA.",
    );
    let ike_rekeys = b.gauge(
        "relayd_ike_sa_rekeys",
        "Rekeys of the connection's current IKE SA line.",
    );
    let ike_failures = b.gauge(
        "relayd_ike_failures",
        "Failed attempts of the IKE connection since its last success.",
    );
    let ike_children = b.gauge(
        "relayd_ike_child_sas",
        "Child SAs of the IKE connection (during a rekey, old and new).",
    );
    let ike_counter = b.counter(
        "relayd_ike_counter",
        "An IKE connection's counter (msgs_in, retransmits, auth_failures, child_rekeys, ...), named by the `counter` label.",
    );
    for c in conns {
        let l = labels(&[("connection", &c.name)]);
        put(
            &ike_up,
            l.clone(),
            if c.state == "established" { 1.0 } else { 0.0 },
        );
        let peer = c.peer.clone().unwrap_or_default();
        put(
            &ike_info,
            labels(&[
                ("connection", &c.name),
                ("state", &c.state),
                ("peer", &peer),
                ("nat", if c.nat { "yes" } else { "no" }),
            ]),
            1.0,
        );
        put(&ike_age, l.clone(), c.age_s as f64);
        put(&ike_rekeys, l.clone(), c.rekeys as f64);
        put(&ike_failures, l.clone(), c.failures as f64);
        put(&ike_children, l, c.children.len() as f64);
        for (name, v) in &c.counters {
            set(
                &ike_counter,
                labels(&[("connection", &c.name), ("counter", name)]),
                *v,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::encode;
    use super::super::tests::sample;
    use std::collections::BTreeMap;

    #[test]
    fn ike_connections_are_series() {
        let mut st = sample();
        st.ike = vec![crate::ike::IkeConnStatus {
            name: "site-b".into(),
            local: "192.0.2.1".into(),
            remote: "198.51.100.7".into(),
            state: "established".into(),
            peer: Some("198.51.100.7:4500".into()),
            age_s: 30,
            rekeys: 2,
            nat: true,
            children: vec![Default::default()],
            counters: BTreeMap::from([("child_rekeys".into(), 4), ("auth_failures".into(), 0)]),
            ..Default::default()
        }];
        let t = encode(&st);
        for line in [
            "relayd_ike_established{connection=\"site-b\"} 1.0",
            "relayd_ike_info{connection=\"site-b\",state=\"established\",peer=\"198.51.100.7:4500\",nat=\"yes\"} 1.0",
            "relayd_ike_sa_age_seconds{connection=\"site-b\"} 30.0",
            "relayd_ike_sa_rekeys{connection=\"site-b\"} 2.0",
            "relayd_ike_child_sas{connection=\"site-b\"} 1.0",
            "relayd_ike_counter_total{connection=\"site-b\",counter=\"child_rekeys\"} 4",
            "# TYPE relayd_ike_counter counter",
        ] {
            assert!(t.lines().any(|x| x == line), "missing {line:?} in\n{t}");
        }
    }
}
