//! `port-class`: shapes traffic by destination port. Each listed port gets an HTB class
//! with its own guaranteed rate on an egress interface, and the service marks each packet
//! for its port's class. A complete relayd service that needs a tc tree and a mark, in one
//! file: its manifest declares both, and relayd installs the tree (and changes or removes
//! it on reload and exit), checks the mark against its own bits and keeps the queue's
//! copy range small, with nothing in relayd to change.
//!
//! ```toml
//! [service.shape]
//! kind = "port-class"
//! interface = "eth1"
//! link_rate = "100mbit"
//! classes = [{ port = 22, rate = "10mbit" }, { port = 443, rate = "60mbit" }]
//! ```

use relay_core::manifest::HEADER_BYTES;
use relay_core::units::parse_rate;
use relay_core::wire::proto;
use relay_core::{
    Action, Context, Counter, Counters, InvalidConfig, Manifest, Packet, QosClass, QosPlan,
    Resources, Service, ServiceConfig, ServiceFactory,
};
use serde::Deserialize;
use std::sync::Arc;

/// `[service.NAME]` with `kind = "port-class"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortClassConfig {
    /// The egress interface the tree goes on.
    pub interface: String,
    /// The link's rate (`"100mbit"`): the root class's rate and every class's ceiling.
    pub link_rate: String,
    /// The HTB major handle (default 0x1e0, so as not to meet `mpls-encap`'s 0x1d0).
    #[serde(default = "default_handle")]
    pub handle: u16,
    /// One class per destination port, in order.
    pub classes: Vec<PortClass>,
}

/// One port's class.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortClass {
    /// TCP or UDP destination port.
    pub port: u16,
    /// Its guaranteed rate (`"10mbit"`).
    pub rate: String,
}

fn default_handle() -> u16 {
    0x1e0
}

impl ServiceConfig for PortClassConfig {
    const KIND: &'static str = "port-class";

    fn into_factory(self, _name: &str) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        let rate = |what: &str, s: &str| parse_rate(s).map_err(|e| format!("{what}: {e}"));
        let link = rate("link_rate", &self.link_rate)?;
        let mut ports = Vec::new();
        let mut classes = Vec::new();
        for (i, c) in self.classes.iter().enumerate() {
            // Minors from 0x10 on: the default class has its own.
            let minor = 0x10 + u16::try_from(i).map_err(|_| "too many classes")?;
            let mark = u32::from(self.handle) << 16 | u32::from(minor);
            ports.push((c.port, mark));
            classes.push(QosClass {
                name: format!("port {}", c.port),
                minor,
                mark,
                label: 0,
                rate_bps: rate(&format!("classes[{i}].rate"), &c.rate)?,
                ceil_bps: link,
                prio: 1,
            });
        }
        let manifest = Manifest {
            // The tree relayd installs; its classes are what the marks select.
            qos: Some(QosPlan {
                interface: self.interface,
                handle: self.handle,
                link_rate_bps: link,
                default_rate_bps: link / 10,
                classes,
            }),
            // The bits the marks set, which relayd checks against its own.
            mark_bits: ports.iter().fold(0, |bits, (_, mark)| bits | mark),
            // Only the ports are read.
            needs_bytes: Some(HEADER_BYTES),
            ..Manifest::new()
        };
        Ok(Arc::new(Factory { ports, manifest }))
    }
}

struct Factory {
    /// Port and mark of each class.
    ports: Vec<(u16, u32)>,
    manifest: Manifest,
}

impl ServiceFactory for Factory {
    fn kind(&self) -> &'static str {
        PortClassConfig::KIND
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        Box::new(PortClasses {
            ports: self.ports.clone(),
            classified: counters.counter("classified"),
        })
    }
}

/// One instance per queue thread.
struct PortClasses {
    ports: Vec<(u16, u32)>,
    classified: Counter,
}

impl Service for PortClasses {
    fn process(&mut self, pkt: &mut Packet, _cx: &mut Context) -> Action {
        let port = match pkt.layout().map(|l| l.proto) {
            Ok(proto::TCP) => pkt.tcp().map(|t| t.dst_port()),
            Ok(proto::UDP) => pkt.udp().map(|u| u.dst_port()),
            _ => None,
        };
        if let Some(&(_, mark)) = port.and_then(|p| self.ports.iter().find(|(q, _)| *q == p)) {
            // The verdict's mark selects the class; unlisted ports go to the default one.
            pkt.set_mark(mark);
            self.classified.inc();
        }
        Action::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The configuration of the module docs.
    fn config() -> PortClassConfig {
        PortClassConfig {
            interface: "eth1".into(),
            link_rate: "100mbit".into(),
            handle: default_handle(),
            classes: vec![
                PortClass {
                    port: 22,
                    rate: "10mbit".into(),
                },
                PortClass {
                    port: 443,
                    rate: "60mbit".into(),
                },
            ],
        }
    }

    fn udp_to(port: u16) -> Vec<u8> {
        let mut b = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x30, 0x39, 0, 0,
            0, 8, 0, 0,
        ];
        b[22..24].copy_from_slice(&port.to_be_bytes());
        relay_core::wire::Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        b
    }

    #[test]
    fn the_manifest_asks_for_the_tree_and_the_mark() {
        let f = config().into_factory("shape").unwrap();
        let m = f.manifest();
        let plan = m.qos.as_ref().unwrap();
        assert_eq!((plan.interface.as_str(), plan.handle), ("eth1", 0x1e0));
        assert_eq!(plan.classes.len(), 2);
        assert_eq!(plan.classes[1].mark, 0x1e0_0011);
        assert_eq!(plan.classes[1].rate_bps, 60_000_000);
        assert_eq!(m.mark_bits, 0x1e0_0010 | 0x1e0_0011);
        assert_eq!(m.needs_bytes, Some(HEADER_BYTES));
    }

    #[test]
    fn marks_each_listed_port_for_its_class() {
        let f = config().into_factory("shape").unwrap();
        let counters = Counters::new();
        let mut s = f.build(&counters, &Resources::new());
        let mut cx = Context::new(0, Instant::now());
        let mut p = Packet::from_bytes(&udp_to(443));
        assert_eq!(s.process(&mut p, &mut cx), Action::Continue);
        assert_eq!(p.verdict_mark(), Some(0x1e0_0011));
        let mut p = Packet::from_bytes(&udp_to(80));
        assert_eq!(s.process(&mut p, &mut cx), Action::Continue);
        assert_eq!(p.verdict_mark(), None);
        assert_eq!(counters.snapshot()[0].2, 1);
    }

    #[test]
    fn a_bad_rate_names_its_class() {
        let mut c = config();
        c.classes[1].rate = "fast".into();
        let e = c.into_factory("shape").err().unwrap();
        assert!(e.message().starts_with("classes[1].rate"), "{e}");
    }
}
