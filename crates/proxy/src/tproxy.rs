//! What the kernel needs to divert TCP connections to the transparent listener: mangle
//! rules (as text lines for relayd's own chains), a policy-routing rule and a local route.
//!
//! How a diverted connection flows (IPv4; IPv6 is the same with `ip -6`/`ip6tables`):
//!
//! 1. The decision marks the SYN with the *divert mark*: either NFQUEUE's `tcpsplit`
//!    service (verdict repeat-with-mark, so the packet runs the mangle table again) or,
//!    in the static case ([`Divert::Ports`]), a `--syn --dports` rule in the chain itself.
//! 2. `CONNMARK --save-mark` stores the decision in conntrack; later packets of the
//!    connection get it back with `CONNMARK --restore-mark`, so only the SYN is decided.
//! 3. `TPROXY --on-port P --tproxy-mark T` assigns the packet to the transparent listener
//!    on port P (without changing its addresses) and sets the *tproxy mark*. Both this
//!    and the save skip destinations that are the relay's own (`-m addrtype ! --dst-type
//!    LOCAL`): those connections are delivered natively, never proxied to the relay
//!    itself from the relay's address. `::` is not LOCAL to addrtype, yet a connection
//!    the listener accepts for `::` would connect to `::1`: for IPv6 a rule before the
//!    save clears the divert mark of packets to `::` (IPv4 drops 0.0.0.0/8 and 127/8
//!    destinations from outside as martians before routing). The listener refuses such
//!    destinations too ([`crate::policy::check_transparent`]), whatever the rules.
//! 4. `ip rule fwmark T lookup TABLE` + `ip route add local 0.0.0.0/0 dev lo table TABLE`
//!    make the routing decision "deliver locally" for packets with the tproxy mark, though
//!    their destination is another host.
//! 5. Packets of connections already owned by a transparent socket (accepted client legs,
//!    and upstream legs bound to the client's address with `transparent_source`) match
//!    `-m socket --transparent`, get the tproxy mark and are accepted at once: the socket
//!    lookup is cheaper than TPROXY and catches the upstream replies, which carry no
//!    divert mark.

use std::fmt::Write as _;
use std::net::IpAddr;

use relay_control::{IptablesName, cmd};
use relay_core::IpVersion;
use serde::{Deserialize, Serialize};

use crate::ProxyError;

/// `ip`'s family flag for `family`: `-4` or `-6`.
fn ip_flag(family: IpVersion) -> &'static str {
    match family {
        IpVersion::V4 => "-4",
        IpVersion::V6 => "-6",
    }
}

/// The default route of `family`: `0.0.0.0/0` or `::/0`.
fn default_route(family: IpVersion) -> &'static str {
    match family {
        IpVersion::V4 => "0.0.0.0/0",
        IpVersion::V6 => "::/0",
    }
}

/// Which connections are diverted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Divert {
    /// Something else (NFQUEUE's `tcpsplit` service) sets the divert mark on the SYNs of
    /// connections to split; the chain only saves, restores and acts on it.
    Mark,
    /// Static: every new connection to one of these destination ports, no NFQUEUE.
    Ports(Vec<u16>),
}

/// The marks, table and port of a transparent-proxy set-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TproxySpec {
    /// Port of the transparent listener (`TPROXY --on-port`).
    pub port: u16,
    /// Address of the transparent listener (`--on-ip`) per family; `None` means the
    /// packet's own destination, which is right for a listener on `0.0.0.0` / `::`.
    pub on_ip: Option<IpAddr>,
    /// Mark a connection gets when it is to be split (set on its SYN by the decision).
    pub divert_mark: u32,
    /// Bits of the packet/connection mark that `divert_mark` owns.
    pub divert_mask: u32,
    /// Mark TPROXY and the socket rule set; selects the local-delivery routing rule.
    pub tproxy_mark: u32,
    /// Bits of the packet mark that `tproxy_mark` owns.
    pub tproxy_mask: u32,
    /// Routing table holding the `local default dev lo` route.
    pub table: u32,
    /// Preference of the `ip rule` (lower is consulted first; `main` is 32766).
    pub rule_pref: u32,
    /// Which connections to divert.
    pub divert: Divert,
}

impl Default for TproxySpec {
    fn default() -> Self {
        TproxySpec {
            port: 9040,
            on_ip: None,
            divert_mark: Self::DEFAULT_DIVERT_MARK,
            divert_mask: Self::DEFAULT_DIVERT_MARK,
            tproxy_mark: Self::DEFAULT_TPROXY_MARK,
            tproxy_mask: Self::DEFAULT_TPROXY_MARK,
            table: Self::DEFAULT_TABLE,
            rule_pref: Self::DEFAULT_RULE_PREF,
            divert: Divert::Mark,
        }
    }
}

impl TproxySpec {
    /// Default divert mark: one bit next to relayd's bypass mark (`0x40000000`).
    pub const DEFAULT_DIVERT_MARK: u32 = 0x2000_0000;
    /// Default tproxy mark.
    pub const DEFAULT_TPROXY_MARK: u32 = 0x1000_0000;
    /// Default routing table for local delivery.
    pub const DEFAULT_TABLE: u32 = 233;
    /// Default `ip rule` preference.
    pub const DEFAULT_RULE_PREF: u32 = 10233;

    /// A spec for the static case: divert new connections to `ports` to a listener on
    /// `listen_port`, default marks and table.
    pub fn static_ports(listen_port: u16, ports: Vec<u16>) -> TproxySpec {
        TproxySpec {
            port: listen_port,
            divert: Divert::Ports(ports),
            ..TproxySpec::default()
        }
    }

    /// Checks that marks are non-zero, inside their masks and do not overlap.
    pub fn check(&self) -> Result<(), ProxyError> {
        let bad = |field, reason: &str| {
            Err(ProxyError::Config {
                field,
                reason: reason.to_owned(),
            })
        };
        if self.divert_mark == 0 || self.divert_mark & !self.divert_mask != 0 {
            return bad("divert_mark", "must be non-zero and inside divert_mask");
        }
        if self.tproxy_mark == 0 || self.tproxy_mark & !self.tproxy_mask != 0 {
            return bad("tproxy_mark", "must be non-zero and inside tproxy_mask");
        }
        if self.divert_mask & self.tproxy_mask != 0 {
            return bad("tproxy_mask", "must not share bits with divert_mask");
        }
        if self.port == 0 {
            return bad("port", "must be the transparent listener's port");
        }
        if self.table == 0 || self.table >= 253 && self.table <= 255 {
            return bad("table", "0 and the reserved tables 253-255 are not allowed");
        }
        if let Divert::Ports(p) = &self.divert
            && (p.is_empty() || p.len() > 15)
        {
            return bad("ports", "1 to 15 ports (one multiport match)");
        }
        Ok(())
    }

    /// The mangle-table rules, as `-A CHAIN ...` lines in order, for a chain that
    /// `PREROUTING` jumps to. Put the chain before relayd's NFQUEUE rule for the SYNs; the
    /// queue rule must skip packets that already carry the divert mark.
    pub fn mangle_rules(&self, chain: &str, family: IpVersion) -> Vec<String> {
        let dv = format!("0x{:x}/0x{:x}", self.divert_mark, self.divert_mask);
        let tp = format!("0x{:x}/0x{:x}", self.tproxy_mark, self.tproxy_mask);
        let dmask = format!("0x{:x}", self.divert_mask);
        let mut v = vec![
            // Packets of connections a transparent socket already owns: deliver locally.
            format!("-A {chain} -p tcp -m socket --transparent -j MARK --set-xmark {tp}"),
            format!("-A {chain} -p tcp -m mark --mark {tp} -j ACCEPT"),
        ];
        if let Divert::Ports(ports) = &self.divert {
            let list = ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(",");
            v.push(format!(
                "-A {chain} -p tcp --syn -m multiport --dports {list} -j MARK --set-xmark {dv}"
            ));
        }
        // A connection to one of the relay's own addresses is never diverted: the kernel
        // delivers it as it would without the proxy, so the relay's own services see the
        // client, not the proxy connecting to them from the relay (issue 12). Nor one to
        // `::`, which addrtype does not call LOCAL but the listener would reach as `::1`.
        if family == IpVersion::V6 {
            v.push(format!(
                "-A {chain} -d ::/128 -p tcp -m mark --mark {dv} -j MARK --set-xmark 0x0/{dmask}"
            ));
        }
        v.push(format!(
            "-A {chain} -p tcp -m mark --mark {dv} -m addrtype ! --dst-type LOCAL -j CONNMARK --save-mark --nfmask {dmask} --ctmask {dmask}"
        ));
        v.push(format!(
            "-A {chain} -p tcp -m connmark --mark {dv} -j CONNMARK --restore-mark --nfmask {dmask} --ctmask {dmask}"
        ));
        let mut tproxy = format!(
            "-A {chain} -p tcp -m mark --mark {dv} -m addrtype ! --dst-type LOCAL -j TPROXY --on-port {}",
            self.port
        );
        match (self.on_ip, family) {
            (Some(ip @ IpAddr::V4(_)), IpVersion::V4)
            | (Some(ip @ IpAddr::V6(_)), IpVersion::V6) => {
                let _ = write!(tproxy, " --on-ip {ip}");
            }
            _ => {}
        }
        let _ = write!(tproxy, " --tproxy-mark {tp}");
        v.push(tproxy);
        v
    }

    /// The `ip` commands [`TproxySpec::install_routing`] runs for `family`, as argument
    /// lists (without `ip -n NS`), for documentation and for users who script it.
    pub fn routing_commands(&self, family: IpVersion) -> Vec<Vec<String>> {
        vec![
            self.rule_args(family, "add"),
            self.route_args(family, "replace"),
        ]
    }

    /// `ip -4|-6 rule VERB` for the fwmark rule that sends diverted packets to our table.
    fn rule_args(&self, family: IpVersion, verb: &str) -> Vec<String> {
        let mark = format!("0x{:x}/0x{:x}", self.tproxy_mark, self.tproxy_mask);
        let (table, pref) = (self.table.to_string(), self.rule_pref.to_string());
        [
            ip_flag(family),
            "rule",
            verb,
            "pref",
            &pref,
            "fwmark",
            &mark,
            "lookup",
            &table,
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// `ip -4|-6 route VERB` for the local default route in our table.
    fn route_args(&self, family: IpVersion, verb: &str) -> Vec<String> {
        let table = self.table.to_string();
        [
            ip_flag(family),
            "route",
            verb,
            "local",
            default_route(family),
            "dev",
            "lo",
            "table",
            &table,
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// Adds the fwmark rule and the local route in `netns` (`None`: the current
    /// namespace) for both families. Idempotent: a rule already at our preference for our
    /// table is left alone, the route is `replace`d.
    pub fn install_routing(&self, netns: Option<&str>) -> Result<(), ProxyError> {
        self.check()?;
        for family in IpVersion::ALL {
            let cmds = self.routing_commands(family);
            if !self.rule_present(netns, family)? {
                ip(netns, &cmds[0])?;
            }
            ip(netns, &cmds[1])?;
        }
        Ok(())
    }

    /// Removes what [`TproxySpec::install_routing`] added, for both families. Idempotent:
    /// missing rules and routes are not errors; duplicate rules are all removed.
    pub fn remove_routing(&self, netns: Option<&str>) -> Result<(), ProxyError> {
        for family in IpVersion::ALL {
            // Bounded: each pass removes one copy; a kernel keeps at most a handful.
            for _ in 0..64 {
                if !self.rule_present(netns, family)? {
                    break;
                }
                ip(netns, &self.rule_args(family, "del"))?;
            }
            let del = self.route_args(family, "del");
            if let Err(e) = ip(netns, &del) {
                let missing = matches!(&e, ProxyError::Tool { stderr, .. }
                    if stderr.contains("No such process") || stderr.contains("not found")
                        || stderr.contains("No such file"));
                if !missing {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn rule_present(&self, netns: Option<&str>, family: IpVersion) -> Result<bool, ProxyError> {
        let out = ip(
            netns,
            &[
                ip_flag(family),
                "rule",
                "show",
                "pref",
                &self.rule_pref.to_string(),
            ],
        )?;
        let table = format!("lookup {}", self.table);
        Ok(out.lines().any(|l| {
            l.contains("fwmark")
                && l.split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .contains(&table)
        }))
    }

    /// Standalone use without relayd's rule machinery: installs chain `chain` in the
    /// mangle table with [`TproxySpec::mangle_rules`] and a jump to it at the top of
    /// `PREROUTING`, for both families, in `netns`. Idempotent (a reinstall replaces the
    /// chain's contents atomically with `iptables-restore --noflush`).
    pub fn install_chain(&self, netns: Option<&str>, chain: &str) -> Result<(), ProxyError> {
        self.check()?;
        for family in IpVersion::ALL {
            let mut text = format!("*mangle\n:{chain} - [0:0]\n");
            for line in self.mangle_rules(chain, family) {
                text.push_str(&line);
                text.push('\n');
            }
            text.push_str("COMMIT\n");
            let restore = format!("{}-restore", family.iptables());
            run(netns, &restore, &["-w", "--noflush"], Some(&text))?;
            let tool = family.iptables();
            let jump = ["-w", "-t", "mangle", "-C", "PREROUTING", "-j", chain];
            if run(netns, tool, &jump, None).is_err() {
                run(
                    netns,
                    tool,
                    &["-w", "-t", "mangle", "-I", "PREROUTING", "1", "-j", chain],
                    None,
                )?;
            }
        }
        Ok(())
    }

    /// Removes what [`TproxySpec::install_chain`] added: every jump to `chain` from
    /// `PREROUTING`, then the chain. Idempotent.
    pub fn remove_chain(&self, netns: Option<&str>, chain: &str) -> Result<(), ProxyError> {
        for family in IpVersion::ALL {
            let tool = family.iptables();
            for _ in 0..64 {
                let del = ["-w", "-t", "mangle", "-D", "PREROUTING", "-j", chain];
                if run(netns, tool, &del, None).is_err() {
                    break;
                }
            }
            if run(netns, tool, &["-w", "-t", "mangle", "-F", chain], None).is_ok() {
                run(netns, tool, &["-w", "-t", "mangle", "-X", chain], None)?;
            }
        }
        Ok(())
    }
}

/// Runs `ip [-n NS] ARGS...` and returns stdout.
fn ip<S: AsRef<str>>(netns: Option<&str>, args: &[S]) -> Result<String, ProxyError> {
    let mut full: Vec<&str> = Vec::new();
    if let Some(ns) = netns {
        full.extend(["-n", ns]);
    }
    full.extend(args.iter().map(AsRef::as_ref));
    run(None, "ip", &full, None)
}

/// Runs `program ARGS` (inside `ip netns exec NS` when given) with optional stdin.
fn run(
    netns: Option<&str>,
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, ProxyError> {
    let mut cmd = cmd::command(netns, program, args, stdin.is_some());
    let line = {
        let mut s = cmd.get_program().to_string_lossy().into_owned();
        for a in cmd.get_args() {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        s
    };
    tracing::debug!(command = %line, "running");
    let out = cmd::output(&mut cmd, stdin).map_err(|e| ProxyError::Spawn {
        command: line.clone(),
        source: e.into_io(),
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(ProxyError::Tool {
            command: line,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_mode_rules() {
        let spec = TproxySpec::default();
        assert!(spec.check().is_ok());
        let lines = spec.mangle_rules("RELAYD-TPROXY", IpVersion::V4);
        assert_eq!(
            lines,
            [
                "-A RELAYD-TPROXY -p tcp -m socket --transparent -j MARK --set-xmark 0x10000000/0x10000000",
                "-A RELAYD-TPROXY -p tcp -m mark --mark 0x10000000/0x10000000 -j ACCEPT",
                "-A RELAYD-TPROXY -p tcp -m mark --mark 0x20000000/0x20000000 -m addrtype ! --dst-type LOCAL -j CONNMARK --save-mark --nfmask 0x20000000 --ctmask 0x20000000",
                "-A RELAYD-TPROXY -p tcp -m connmark --mark 0x20000000/0x20000000 -j CONNMARK --restore-mark --nfmask 0x20000000 --ctmask 0x20000000",
                "-A RELAYD-TPROXY -p tcp -m mark --mark 0x20000000/0x20000000 -m addrtype ! --dst-type LOCAL -j TPROXY --on-port 9040 --tproxy-mark 0x10000000/0x10000000",
            ]
        );
    }

    #[test]
    fn static_ports_and_on_ip() {
        let mut spec = TproxySpec::static_ports(9040, vec![80, 443]);
        spec.on_ip = Some("127.0.0.1".parse().unwrap());
        let v4 = spec.mangle_rules("C", IpVersion::V4);
        assert!(v4[2].contains("--syn -m multiport --dports 80,443 -j MARK"));
        assert!(v4.last().unwrap().contains("--on-ip 127.0.0.1 "));
        let v6 = spec.mangle_rules("C", IpVersion::V6);
        assert!(!v6.last().unwrap().contains("--on-ip"));
        // IPv6 only: `::` loses the divert mark before the save and TPROXY rules.
        assert_eq!(
            v6[3],
            "-A C -d ::/128 -p tcp -m mark --mark 0x20000000/0x20000000 -j MARK --set-xmark 0x0/0x20000000"
        );
        assert!(v6[4].contains("--save-mark") && v6.len() == v4.len() + 1);
        assert!(!v4.iter().any(|l| l.contains("-d ")));
        let cmds = spec.routing_commands(IpVersion::V6);
        assert_eq!(
            cmds[0].join(" "),
            "-6 rule add pref 10233 fwmark 0x10000000/0x10000000 lookup 233"
        );
        assert_eq!(
            cmds[1].join(" "),
            "-6 route replace local ::/0 dev lo table 233"
        );
    }

    #[test]
    fn bad_specs_are_refused() {
        let mut s = TproxySpec {
            tproxy_mask: 0x3000_0000,
            ..TproxySpec::default()
        };
        assert!(s.check().unwrap_err().to_string().contains("tproxy_mask"));
        s = TproxySpec {
            divert_mark: 0,
            ..TproxySpec::default()
        };
        assert!(s.check().is_err());
        s = TproxySpec::static_ports(9040, vec![]);
        assert!(s.check().is_err());
        s = TproxySpec {
            table: 254,
            ..TproxySpec::default()
        };
        assert!(s.check().is_err());
    }
}
