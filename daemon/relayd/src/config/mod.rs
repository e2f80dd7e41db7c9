//! The configuration file: TOML read with serde, then checked as a whole. Every error
//! names the file, the line and column, and the field, and says what is wrong.
//!
//! One file per section of the configuration: `daemon` (`[daemon]`), `queue`
//! (`[[queue]]`), `services` (`[service.NAME]`), `listeners` (the proxy listeners),
//! `tproxy` (the split proxy's diversion), and `error` (errors with their place in the
//! file). Each checks its section and records every error, so that one run reports all
//! of them ([`ConfigErrors`]); `parse` here reads the file and runs them in order.

mod daemon;
mod error;
mod ike;
mod listener_spec;
mod listeners;
mod offload;
mod queue;
mod services;
mod tproxy;
mod xdp;

pub use daemon::{
    DEFAULT_CT_MARK_BITS, DEFAULT_OFFLOAD_MARK, DEFAULT_SOCKET, DaemonConfig, DaemonUser,
    IptablesFlavor, ct_bits_from_mask,
};
pub use error::{ConfigError, ConfigErrors};
pub use ike::{
    DEFAULT_ESP_PROPOSAL, DEFAULT_PROPOSAL, IkeSpec, MIN_PSK_LEN, MIN_REKEY_SECS, identity,
    parse_time, parse_ts, read_psk,
};
pub use listener_spec::{ListenerKind, ListenerSpec};
pub use offload::{offload_bits, set_generations};
pub use queue::QueueSpec;
pub use services::LISTENER_KINDS;
pub use tproxy::{DEFAULT_TPROXY_RULE_PREF, DEFAULT_TPROXY_TABLE, TproxySetup};
pub use xdp::XdpSpec;

use crate::registry::Registry;
use daemon::{RawDaemon, check_daemon, warn_rereads_as_user};
use error::{Ctx, toml_error};
use ike::{RawIke, check_ike};
use listeners::check_listeners;
use queue::{RawQueue, check_queue};
use serde::Deserialize;
use services::read_services;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use xdp::{RawXdp, check_xdp};

/// A whole, checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it was read from.
    pub path: PathBuf,
    /// `[daemon]`.
    pub daemon: DaemonConfig,
    /// `[[queue]]` entries in file order.
    pub queues: Vec<QueueSpec>,
    /// `[[xdp]]` entries in file order.
    pub xdp: Vec<XdpSpec>,
    /// The proxy listeners the daemon runs (`socks5`, and the transparent listener of the
    /// split proxy), in name order.
    pub listeners: Vec<ListenerSpec>,
    /// The transparent diversion relayd installs for its split proxy, if any.
    pub tproxy: Option<TproxySetup>,
    /// `[ike.NAME]` connections, in name order.
    pub ike: Vec<IkeSpec>,
    /// What is valid but probably unwise (a SOCKS5 listener open to the network without
    /// authentication), in the errors' form; `relayd check` prints them, `run` logs them.
    pub warnings: Vec<ConfigError>,
}

impl Config {
    /// Every `[[queue]]` entry's services, name and factory, in file order (a service in
    /// two entries comes twice).
    pub fn queue_services(&self) -> impl Iterator<Item = (&str, &dyn relay_core::ServiceFactory)> {
        self.queues
            .iter()
            .flat_map(|q| q.services.iter())
            .map(|(name, f)| (name.as_str(), f.as_ref()))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    queue: Vec<RawQueue>,
    #[serde(default)]
    xdp: Vec<RawXdp>,
    #[serde(default)]
    ike: BTreeMap<String, toml::Spanned<RawIke>>,
    #[serde(default)]
    #[allow(dead_code)]
    service: Option<toml::Value>, // read separately, with positions
}

/// Reads and checks a configuration file.
pub fn load(path: &Path, registry: &Registry) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            field: "(file)".into(),
            message: format!("cannot read: {e}"),
        }])
    })?;
    parse(&text, path, registry)
}

/// Parses and checks configuration text (`path` is used in error messages).
pub fn parse(text: &str, path: &Path, registry: &Registry) -> Result<Config, ConfigErrors> {
    let mut cx = Ctx::new(path, text);
    if let Err(e) = toml::de::DeTable::parse(text) {
        return Err(ConfigErrors(vec![toml_error(&cx, &e, "(syntax)")]));
    }
    let raw: RawFile = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => return Err(ConfigErrors(vec![toml_error(&cx, &e, "")])),
    };
    let daemon = check_daemon(&mut cx, raw.daemon);
    // Read as root before a drop to daemon.user, the ESP services accept a state
    // directory owned by that user: relayd makes it so before the drop (state_dirs).
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    relay_svc_crypto::persist::set_service_user(
        daemon.user.as_ref().filter(|_| root).map(|u| u.uid),
    );
    let services = read_services(&mut cx, registry, daemon.bypass_mark);
    let mut queues = Vec::new();
    let mut taken: BTreeMap<u16, String> = BTreeMap::new();
    for (index, q) in raw.queue.into_iter().enumerate() {
        if let Some(spec) = check_queue(
            &mut cx,
            index,
            q,
            &services,
            registry,
            &mut taken,
            queue::Marks {
                ct: daemon.ct_mark_bits,
                offload: daemon.offload_mark,
            },
        ) {
            queues.push(spec);
        }
    }
    offload::check_count(
        &mut cx,
        queues.iter().filter(|q| q.queue.offload.is_some()).count() as u32,
        daemon.offload_mark,
    );
    let mut xdp = Vec::new();
    let mut interfaces = BTreeMap::new();
    for (index, x) in raw.xdp.into_iter().enumerate() {
        let spec = check_xdp(
            &mut cx,
            index,
            x,
            &services,
            registry,
            &mut taken,
            &mut interfaces,
        );
        xdp.extend(spec);
    }
    let (listeners, tproxy) = check_listeners(&mut cx, &queues, &services, &daemon);
    warn_rereads_as_user(&mut cx, &daemon, &queues);
    let ike = check_ike(&mut cx, raw.ike);
    if queues.is_empty()
        && xdp.is_empty()
        && listeners.is_empty()
        && ike.is_empty()
        && cx.errors.is_empty()
    {
        cx.err(
            None,
            "queue",
            "no [[queue]] or [[xdp]] entries, no listeners and no [ike.NAME]: nothing to do",
        );
    }
    if !cx.errors.is_empty() {
        return Err(ConfigErrors(cx.errors));
    }
    let config = Config {
        path: path.to_path_buf(),
        daemon,
        queues,
        xdp,
        listeners,
        tproxy,
        ike,
        warnings: std::mem::take(&mut cx.warnings),
    };
    // The tc trees `run` installs: two services that want different trees on one
    // interface, or a tree tc would refuse, are errors `check` reports too.
    if let Err(e) = crate::qos::plans(config.queue_services()) {
        return Err(ConfigErrors(vec![cx.at(None, "service", e)]));
    }
    Ok(config)
}

#[cfg(test)]
pub(crate) mod test_util {
    use super::*;

    /// A PSK file (mode 0600) holding `text`, in a directory (mode 0700) on a path that
    /// passes the key-file walk: beside the test binary, else under /run or /root (a
    /// checkout under a shared /tmp does not qualify).
    pub(crate) fn psk_file(name: &str, text: &str) -> std::path::PathBuf {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let exe = std::env::current_exe().unwrap();
        let beside = exe.parent().map(Path::to_path_buf);
        let dir_name = format!("relayd-ike-psk-{}", std::process::id());
        for base in [beside, Some("/run".into()), Some("/root".into())]
            .into_iter()
            .flatten()
        {
            let dir = base.join(&dir_name);
            let made = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir);
            let p = dir.join(name);
            let _ = std::fs::remove_file(&p);
            let written = made.is_ok()
                && std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&p)
                    .and_then(|mut f| writeln!(f, "{text}"))
                    .is_ok();
            if written && relay_svc_crypto::open_secret(&p).is_ok() {
                return p;
            }
        }
        panic!("no directory on a path only root can write, for a PSK file");
    }

    /// Parses `text`, which must be a valid configuration.
    pub(crate) fn parsed(text: &str) -> Config {
        parse(text, Path::new("t.toml"), &Registry::with_builtins()).unwrap()
    }

    pub(crate) fn errs(text: &str) -> Vec<ConfigError> {
        parse(text, Path::new("t.toml"), &Registry::with_builtins())
            .unwrap_err()
            .0
    }

    /// Parses `text`, which must fail, checks that the first error points at `line` and
    /// `field`, and returns all the errors.
    #[track_caller]
    pub(crate) fn first_err(text: &str, line: usize, field: &str) -> Vec<ConfigError> {
        let e = errs(text);
        assert_eq!((e[0].line, e[0].field.as_str()), (line, field), "{e:?}");
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_util::{errs, parsed};

    #[test]
    fn check_refuses_tc_trees_run_would_refuse() {
        let encap = |name: &str, rate: &str| {
            format!(
                "[service.{name}]\nkind = \"mpls-encap\"\ninterface = \"core0\"\nlocal = \"192.0.2.1\"\nlink_rate = \"{rate}\"\n"
            )
        };
        let queue = "[[queue]]\nnum = 0\nhook = \"prerouting\"\ntable = \"raw\"\nservices = [\"a\", \"b\"]\n";
        let e = errs(&format!(
            "{queue}{}{}",
            encap("a", "10mbit"),
            encap("b", "20mbit")
        ));
        assert!(
            e[0].message.contains("both want the tc tree of core0"),
            "{e:?}"
        );
        // The same tree twice is one tree.
        parsed(&format!(
            "{queue}{}{}",
            encap("a", "10mbit"),
            encap("b", "10mbit")
        ));
    }

    #[test]
    fn parses_the_documented_example() {
        let text = r#"
[daemon]
socket = "/tmp/r.sock"

[[queue]]
num = 0
hook = "forward"
match = "-i eth0 -p udp"
services = ["dump0", "accept"]

[[queue]]
num = "2-3"
hook = "output"
table = "raw"
services = ["drop"]

[service.dump0]
kind = "dump"
rate = 5
"#;
        let c = parsed(text);
        assert_eq!(c.queues.len(), 2);
        assert_eq!(c.queues[0].services.len(), 2);
        assert_eq!(c.queues[0].line, 6);
        assert!(c.queues[0].queue.fail_open && c.queues[0].queue.gso);
        assert_eq!((c.queues[1].first, c.queues[1].last), (2, 3));
        assert_eq!(c.daemon.socket, PathBuf::from("/tmp/r.sock"));
    }
}
