//! strongSwan's charon as a test peer: one charon per testbed namespace, configured from
//! a [`Conn`] (PSK, proposals, traffic selectors, mode, rekey and DPD timers), driven
//! with swanctl over its own vici socket, and torn down without a trace.
//!
//! How charon is run here (shared/RECIPES.md, strongSwan): the PID file path is fixed, so
//! each charon gets a private mount namespace with a tmpfs on `/run` (`unshare -m`), and
//! its own vici socket in its directory. This kernel has no ESP module, so ESP is done in
//! userspace by the `kernel-libipsec` plugin on a TUN device (`ipsec0`); routes over it
//! are the test's business ([`Charon::route_via_tunnel`]). In strongSwan 5.9.8,
//! kernel-libipsec requires UDP encapsulation: charon fakes a NAT and carries ESP in UDP
//! on port 4500 (RFC 3948) even between two plain veths.

#![allow(dead_code, unreachable_pub)]

use super::TempDir;
use relay_testbed::{Node, Proc};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The charon binary Debian's strongswan-charon installs.
pub const CHARON: &str = "/usr/lib/ipsec/charon";
/// swanctl, from strongswan-swanctl.
pub const SWANCTL: &str = "/usr/sbin/swanctl";

/// The plugins charon loads: `kdf` is needed by 5.9.8 for its PRF-based key derivation,
/// `kernel-libipsec` does ESP in userspace, `vici` serves swanctl. No `updown`: tests
/// route themselves, and no helper process outlives charon.
const PLUGINS: &str = "random nonce kdf aes sha1 sha2 hmac gcm pem pkcs1 x509 pubkey \
                       curve25519 openssl kernel-libipsec kernel-netlink socket-default vici";

/// Whether charon and swanctl are installed (`make deps` installs them). A test that
/// needs them calls [`require`] and returns early when it says no.
pub fn available() -> bool {
    Path::new(CHARON).exists() && Path::new(SWANCTL).exists()
}

/// True when charon can run; otherwise prints why the calling test is skipped. Use as
/// `if !strongswan::require("test_name") { return; }`.
pub fn require(test: &str) -> bool {
    if available() {
        return true;
    }
    eprintln!(
        "SKIPPED {test}: strongSwan is not installed ({CHARON}, {SWANCTL}); `make deps` \
         installs strongswan-charon, strongswan-swanctl and libcharon-extra-plugins"
    );
    false
}

/// One IKE connection with one child, in swanctl.conf's terms (swanctl.conf(5)).
#[derive(Clone, Debug)]
pub struct Conn {
    /// The connection's name (`connections.NAME`).
    pub name: String,
    /// The child's name (`children.NAME`).
    pub child: String,
    /// This end's address (`local_addrs`).
    pub local: String,
    /// The peer's address (`remote_addrs`).
    pub remote: String,
    /// IKE identities; `None` uses the address.
    pub local_id: Option<String>,
    pub remote_id: Option<String>,
    /// The pre-shared key as swanctl takes it: text, or `0x` and hex.
    pub psk: String,
    /// IKE proposals, strongSwan syntax (`aes128gcm16-prfsha256-x25519`).
    pub proposals: String,
    /// ESP proposals (`aes128gcm16`, `aes256-sha256`).
    pub esp_proposals: String,
    /// Traffic selectors, swanctl syntax (`10.0.1.0/24`, `10.0.1.1/32[udp/5000]`).
    pub local_ts: String,
    pub remote_ts: String,
    /// `tunnel` or `transport`.
    pub mode: String,
    /// IKE SA rekeying interval (`rekey_time`, e.g. `4h`, `30s`); `0` disables it.
    pub rekey_time: String,
    /// CHILD_SA rekeying interval (`children.rekey_time`).
    pub child_rekey_time: String,
    /// CHILD_SA volume limits (`rekey_bytes`, `rekey_packets`); 0 disables them.
    pub child_rekey_bytes: u64,
    pub child_rekey_packets: u64,
    /// Dead peer detection interval (`dpd_delay`); `0s` disables it.
    pub dpd_delay: String,
    /// What to do when the peer is found dead (`children.dpd_action`: clear, trap,
    /// restart).
    pub dpd_action: String,
    /// `children.start_action`: none, trap, start.
    pub start_action: String,
}

impl Conn {
    /// A tunnel-mode connection from `local` to `remote` protecting `local_ts` <->
    /// `remote_ts` with a PSK, AES-GCM-128 with X25519 for IKE and AES-GCM-128 for ESP,
    /// the rekey timers charon uses by default and no DPD.
    pub fn new(local: &str, remote: &str, local_ts: &str, remote_ts: &str) -> Conn {
        Conn {
            name: "relay".into(),
            child: "net".into(),
            local: local.into(),
            remote: remote.into(),
            local_id: None,
            remote_id: None,
            psk: "0x5ce1e7a5ecf1c6d1d4e95d26b6c42c1b".into(),
            proposals: "aes128gcm16-prfsha256-x25519".into(),
            esp_proposals: "aes128gcm16".into(),
            local_ts: local_ts.into(),
            remote_ts: remote_ts.into(),
            mode: "tunnel".into(),
            rekey_time: "4h".into(),
            child_rekey_time: "1h".into(),
            child_rekey_bytes: 0,
            child_rekey_packets: 0,
            dpd_delay: "0s".into(),
            dpd_action: "clear".into(),
            start_action: "none".into(),
        }
    }

    /// The same connection seen from the other end: addresses, identities and traffic
    /// selectors swapped.
    pub fn mirror(&self) -> Conn {
        Conn {
            local: self.remote.clone(),
            remote: self.local.clone(),
            local_id: self.remote_id.clone(),
            remote_id: self.local_id.clone(),
            local_ts: self.remote_ts.clone(),
            remote_ts: self.local_ts.clone(),
            ..self.clone()
        }
    }

    /// swanctl.conf for this connection and its PSK. Timers are exact: `rand_time = 0`, so
    /// a rekey happens at `rekey_time`, not up to 10 % earlier.
    pub fn swanctl_conf(&self) -> String {
        let local_id = self.local_id.as_deref().unwrap_or(&self.local);
        let remote_id = self.remote_id.as_deref().unwrap_or(&self.remote);
        format!(
            "connections {{\n\
             \x20 {name} {{\n\
             \x20   version = 2\n\
             \x20   local_addrs = {local}\n\
             \x20   remote_addrs = {remote}\n\
             \x20   proposals = {proposals}\n\
             \x20   rekey_time = {rekey}\n\
             \x20   rand_time = 0\n\
             \x20   dpd_delay = {dpd}\n\
             \x20   mobike = no\n\
             \x20   local {{\n\
             \x20     auth = psk\n\
             \x20     id = {local_id}\n\
             \x20   }}\n\
             \x20   remote {{\n\
             \x20     auth = psk\n\
             \x20     id = {remote_id}\n\
             \x20   }}\n\
             \x20   children {{\n\
             \x20     {child} {{\n\
             \x20       local_ts = {lts}\n\
             \x20       remote_ts = {rts}\n\
             \x20       esp_proposals = {esp}\n\
             \x20       mode = {mode}\n\
             \x20       rekey_time = {crekey}\n\
             \x20       rekey_bytes = {cbytes}\n\
             \x20       rekey_packets = {cpackets}\n\
             \x20       rand_time = 0\n\
             \x20       rand_bytes = 0\n\
             \x20       rand_packets = 0\n\
             \x20       dpd_action = {dpd_action}\n\
             \x20       start_action = {start}\n\
             \x20     }}\n\
             \x20   }}\n\
             \x20 }}\n\
             }}\n\
             secrets {{\n\
             \x20 ike-{name} {{\n\
             \x20   id-local = {local_id}\n\
             \x20   id-remote = {remote_id}\n\
             \x20   secret = {psk}\n\
             \x20 }}\n\
             }}\n",
            name = self.name,
            local = self.local,
            remote = self.remote,
            proposals = self.proposals,
            rekey = self.rekey_time,
            dpd = self.dpd_delay,
            child = self.child,
            lts = self.local_ts,
            rts = self.remote_ts,
            esp = self.esp_proposals,
            mode = self.mode,
            crekey = self.child_rekey_time,
            cbytes = self.child_rekey_bytes,
            cpackets = self.child_rekey_packets,
            dpd_action = self.dpd_action,
            start = self.start_action,
            psk = self.psk,
        )
    }
}

/// How verbose charon's log file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// `ike` and `cfg` at 2: state changes, proposals, SPIs, rekeys. The default.
    Normal,
    /// `ike`, `enc`, `lib`, `cfg` at 4: raw key material (nonces, DH secrets, SKEYSEED,
    /// SK_*), plaintext of every message. For test vectors only: it logs secrets.
    Keys,
}

/// strongswan.conf for one instance with its files in `dir`.
fn strongswan_conf(dir: &Path, level: LogLevel) -> String {
    let levels = match level {
        LogLevel::Normal => "default = 1\n      ike = 2\n      cfg = 2\n      net = 1",
        LogLevel::Keys => {
            "default = 1\n      ike = 4\n      enc = 4\n      lib = 4\n      cfg = 4\n      \
             net = 2\n      chd = 4"
        }
    };
    format!(
        "charon {{\n\
         \x20 load = {PLUGINS}\n\
         \x20 install_routes = no\n\
         \x20 install_virtual_ip = no\n\
         \x20 retransmit_tries = 3\n\
         \x20 retransmit_timeout = 1.0\n\
         \x20 retransmit_base = 1.4\n\
         \x20 plugins {{\n\
         \x20   vici {{\n\
         \x20     socket = unix://{dir}/charon.vici\n\
         \x20   }}\n\
         \x20 }}\n\
         \x20 filelog {{\n\
         \x20   charon {{\n\
         \x20     path = {dir}/charon.log\n\
         \x20     time_format = %H:%M:%S\n\
         \x20     flush_line = yes\n\
         \x20     {levels}\n\
         \x20   }}\n\
         \x20 }}\n\
         }}\n",
        dir = dir.display()
    )
}

/// A charon running in a namespace. Dropping it kills charon (SIGKILL); its mount
/// namespace, tmpfs, TUN device and directory go with it.
pub struct Charon {
    /// The namespace charon runs in.
    pub node: Node,
    /// Its configuration files, vici socket and log.
    pub dir: TempDir,
    /// The connection it was configured with.
    pub conn: Conn,
    proc: Proc,
}

impl Charon {
    /// Starts charon in `node` with `conn` and the normal log level, loads the
    /// configuration with swanctl and returns once it is loaded.
    pub fn start(node: &Node, conn: &Conn) -> Charon {
        Charon::start_with(node, conn, LogLevel::Normal)
    }

    /// [`Charon::start`] with a chosen log level.
    pub fn start_with(node: &Node, conn: &Conn, level: LogLevel) -> Charon {
        let dir = TempDir::new(&format!("charon-{}", node.label()));
        std::fs::write(
            dir.0.join("strongswan.conf"),
            strongswan_conf(&dir.0, level),
        )
        .unwrap();
        std::fs::write(dir.0.join("swanctl.conf"), conn.swanctl_conf()).unwrap();
        // swanctl looks for credentials in subdirectories of its configuration file's
        // directory and complains about each that is missing.
        for sub in [
            "x509", "x509ca", "x509ocsp", "x509aa", "x509ac", "x509crl", "pubkey", "private",
            "rsa", "ecdsa", "bliss", "pkcs8", "pkcs12",
        ] {
            std::fs::create_dir_all(dir.0.join(sub)).unwrap();
        }
        let script = format!(
            "mount -t tmpfs none /run && exec env STRONGSWAN_CONF={}/strongswan.conf {CHARON}",
            dir.0.display()
        );
        let mut cmd = node.cmd("unshare");
        cmd.args(["-m", "--propagation", "private", "sh", "-c", &script]);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let proc = node.spawn(cmd);
        let c = Charon {
            node: node.clone(),
            dir,
            conn: conn.clone(),
            proc,
        };
        let vici = c.vici_path();
        let up = super::wait_for(Duration::from_secs(10), || vici.exists());
        assert!(up, "charon did not open its vici socket:\n{}", c.log());
        c.load();
        c
    }

    /// The vici socket's path.
    pub fn vici_path(&self) -> PathBuf {
        self.dir.0.join("charon.vici")
    }

    /// charon's pid (`ip netns exec`, `unshare`, `sh` and `env` all exec in place).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Runs `swanctl ARGS --uri VICI`; returns (success, stdout + stderr).
    pub fn swanctl(&self, args: &[&str]) -> (bool, String) {
        let uri = format!("unix://{}", self.vici_path().display());
        let out = std::process::Command::new(SWANCTL)
            .args(args)
            .args(["--uri", &uri])
            .output()
            .expect("running swanctl");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    /// (Re)loads swanctl.conf: connections and secrets. Panics with swanctl's output on
    /// failure.
    pub fn load(&self) {
        let file = self.dir.0.join("swanctl.conf");
        let (ok, text) = self.swanctl(&["--load-all", "--file", &file.display().to_string()]);
        assert!(ok, "swanctl --load-all failed:\n{text}\n{}", self.log());
    }

    /// Replaces the connection (rewrites swanctl.conf and loads it).
    pub fn reconfigure(&mut self, conn: &Conn) {
        std::fs::write(self.dir.0.join("swanctl.conf"), conn.swanctl_conf()).unwrap();
        self.conn = conn.clone();
        self.load();
    }

    /// Initiates the child (and its IKE SA if needed) and waits up to `timeout` for the
    /// result; returns swanctl's output as the error when it fails.
    pub fn initiate(&self, timeout: Duration) -> Result<String, String> {
        let t = timeout.as_secs().max(1).to_string();
        let (ok, text) =
            self.swanctl(&["--initiate", "--child", &self.conn.child, "--timeout", &t]);
        if ok { Ok(text) } else { Err(text) }
    }

    /// Deletes the IKE SA of the connection (and with it every child), sending DELETE.
    pub fn terminate_ike(&self) -> Result<String, String> {
        let (ok, text) = self.swanctl(&["--terminate", "--ike", &self.conn.name, "--timeout", "5"]);
        if ok { Ok(text) } else { Err(text) }
    }

    /// Deletes the child SAs of the connection, keeping the IKE SA.
    pub fn terminate_child(&self) -> Result<String, String> {
        let (ok, text) =
            self.swanctl(&["--terminate", "--child", &self.conn.child, "--timeout", "5"]);
        if ok { Ok(text) } else { Err(text) }
    }

    /// Rekeys the child SA now (`swanctl --rekey --child`).
    pub fn rekey_child(&self) -> Result<String, String> {
        let (ok, text) = self.swanctl(&["--rekey", "--child", &self.conn.child]);
        if ok { Ok(text) } else { Err(text) }
    }

    /// Rekeys the IKE SA now (`swanctl --rekey --ike`).
    pub fn rekey_ike(&self) -> Result<String, String> {
        let (ok, text) = self.swanctl(&["--rekey", "--ike", &self.conn.name]);
        if ok { Ok(text) } else { Err(text) }
    }

    /// The IKE SAs charon has, from `swanctl --list-sas --raw`.
    pub fn list_sas(&self) -> Vec<IkeSa> {
        let (ok, text) = self.swanctl(&["--list-sas", "--raw"]);
        assert!(ok, "swanctl --list-sas failed:\n{text}");
        parse_list_sas(&text)
    }

    /// The established IKE SA of the connection with an installed child, if there is one.
    pub fn established(&self) -> Option<IkeSa> {
        self.list_sas().into_iter().find(|s| {
            s.name == self.conn.name
                && s.state == "ESTABLISHED"
                && s.children.iter().any(|c| c.state == "INSTALLED")
        })
    }

    /// Waits up to `timeout` for [`Charon::established`].
    pub fn wait_established(&self, timeout: Duration) -> IkeSa {
        let end = Instant::now() + timeout;
        loop {
            if let Some(sa) = self.established() {
                return sa;
            }
            assert!(
                Instant::now() < end,
                "charon: no established SA after {timeout:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Routes `prefix` over charon's TUN device (kernel-libipsec): what the node sends
    /// there is encrypted by charon if a child SA's selectors cover it.
    pub fn route_via_tunnel(&self, prefix: &str) {
        let up = super::wait_for(Duration::from_secs(5), || {
            self.node
                .exec(&["ip", "link", "show", "ipsec0"])
                .status
                .success()
        });
        assert!(up, "charon created no ipsec0:\n{}", self.log());
        self.node.ip(&["route", "replace", prefix, "dev", "ipsec0"]);
    }

    /// charon's log so far.
    pub fn log(&self) -> String {
        let mut s = std::fs::read_to_string(self.dir.0.join("charon.log")).unwrap_or_default();
        s.push_str(&self.proc.stderr_text());
        s
    }

    /// How many CHILD_SAs charon has brought up so far (the first one and every rekey,
    /// either side initiating), counted in its log: the distinct `NAME{N}` of the
    /// `CHILD_SA NAME{N} established with SPIs` lines (a rekey logs its inbound and
    /// outbound halves separately).
    pub fn children_established(&self) -> usize {
        let needle = format!("CHILD_SA {}{{", self.conn.child);
        let mut ids = std::collections::BTreeSet::new();
        for line in self.log().lines() {
            if !line.contains("established with SPIs") {
                continue;
            }
            if let Some(rest) = line.split(&needle).nth(1)
                && let Some(n) = rest.split('}').next()
            {
                ids.insert(n.to_string());
            }
        }
        ids.len()
    }

    /// Stops charon with SIGTERM (SIGKILL after 5 s); returns whether it exited by itself.
    pub fn stop(&mut self) -> bool {
        self.proc.stop(libc::SIGTERM, Duration::from_secs(5)).1
    }

    /// Kills charon at once (SIGKILL), as a peer that disappears.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// Whether charon is still running.
    pub fn alive(&mut self) -> bool {
        self.proc.try_wait().is_none()
    }
}

/// One IKE SA of `swanctl --list-sas`.
#[derive(Clone, Debug, Default)]
pub struct IkeSa {
    /// The connection's name.
    pub name: String,
    /// charon's unique id of this IKE SA (a new one after an IKE rekey).
    pub uniqueid: u64,
    /// CREATED, CONNECTING, ESTABLISHED, REKEYING, DELETING, ...
    pub state: String,
    /// The peer's address.
    pub remote_host: String,
    /// Whether this end initiated it.
    pub initiator: bool,
    /// The SPIs, hex.
    pub initiator_spi: String,
    pub responder_spi: String,
    /// The negotiated algorithms (`AES_GCM_16`, `PRF_HMAC_SHA2_256`, `CURVE_25519`).
    pub encr_alg: String,
    pub prf_alg: String,
    pub dh_group: String,
    /// Whether the peer was found behind a NAT (ESP in UDP).
    pub nat_remote: bool,
    /// Seconds since establishment.
    pub established: u64,
    /// Its CHILD_SAs.
    pub children: Vec<ChildSa>,
}

/// One CHILD_SA of `swanctl --list-sas`.
#[derive(Clone, Debug, Default)]
pub struct ChildSa {
    /// The child's name.
    pub name: String,
    /// charon's unique id (a new one after each rekey).
    pub uniqueid: u64,
    /// INSTALLED, REKEYING, REKEYED, DELETING, ...
    pub state: String,
    /// TUNNEL or TRANSPORT.
    pub mode: String,
    /// Whether ESP is in UDP.
    pub encap: bool,
    /// The SPIs, as numbers.
    pub spi_in: u32,
    pub spi_out: u32,
    pub encr_alg: String,
    pub bytes_in: u64,
    pub packets_in: u64,
    pub bytes_out: u64,
    pub packets_out: u64,
    pub local_ts: Vec<String>,
    pub remote_ts: Vec<String>,
}

/// A node of swanctl's `--raw` output: a value, a list or a section.
#[derive(Clone, Debug, PartialEq)]
pub enum Raw {
    Value(String),
    List(Vec<String>),
    Section(Vec<(String, Raw)>),
}

impl Raw {
    /// The member `key` of a section.
    pub fn get(&self, key: &str) -> Option<&Raw> {
        match self {
            Raw::Section(items) => items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value of member `key`, or "".
    pub fn str(&self, key: &str) -> String {
        match self.get(key) {
            Some(Raw::Value(v)) => v.clone(),
            _ => String::new(),
        }
    }

    /// The numeric value of member `key`, or 0.
    pub fn num(&self, key: &str) -> u64 {
        self.str(key).parse().unwrap_or(0)
    }

    /// The list member `key`, or empty.
    pub fn list(&self, key: &str) -> Vec<String> {
        match self.get(key) {
            Some(Raw::List(v)) => v.clone(),
            _ => Vec::new(),
        }
    }
}

/// Parses swanctl's `--raw` rendering of vici messages: `name {key=value list=[a b]
/// sub {..}}`, one message per line (`list-sa event {...}`). Returns one section per
/// message.
pub fn parse_raw(text: &str) -> Vec<Raw> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(open) = line.find('{') else { continue };
        let mut toks = tokenize(&line[open..]);
        toks.reverse();
        if toks.pop().as_deref() != Some("{") {
            continue;
        }
        out.push(parse_section(&mut toks));
    }
    out
}

fn tokenize(s: &str) -> Vec<String> {
    let mut toks = Vec::new();
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '{' | '}' | '[' | ']' | '=' => {
                if !cur.is_empty() {
                    toks.push(std::mem::take(&mut cur));
                }
                toks.push(ch.to_string());
            }
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    toks.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        toks.push(cur);
    }
    toks
}

/// Parses the members of a section up to its closing brace; `toks` is reversed (next
/// token last).
fn parse_section(toks: &mut Vec<String>) -> Raw {
    let mut items = Vec::new();
    while let Some(t) = toks.pop() {
        if t == "}" {
            break;
        }
        match toks.pop().as_deref() {
            Some("=") if toks.last().map(String::as_str) == Some("[") => {
                toks.pop();
                let mut list = Vec::new();
                while let Some(x) = toks.pop() {
                    if x == "]" {
                        break;
                    }
                    list.push(x);
                }
                items.push((t, Raw::List(list)));
            }
            Some("=") => {
                let v = toks.pop().unwrap_or_default();
                items.push((t, Raw::Value(v)));
            }
            Some("{") => {
                let sub = parse_section(toks);
                items.push((t, sub));
            }
            _ => break,
        }
    }
    Raw::Section(items)
}

/// The IKE SAs in `swanctl --list-sas --raw` output.
pub fn parse_list_sas(text: &str) -> Vec<IkeSa> {
    let mut sas = Vec::new();
    for msg in parse_raw(text) {
        let Raw::Section(items) = msg else { continue };
        for (name, ike) in items {
            let mut sa = IkeSa {
                name,
                uniqueid: ike.num("uniqueid"),
                state: ike.str("state"),
                remote_host: ike.str("remote-host"),
                initiator: ike.str("initiator") == "yes",
                initiator_spi: ike.str("initiator-spi"),
                responder_spi: ike.str("responder-spi"),
                encr_alg: ike.str("encr-alg"),
                prf_alg: ike.str("prf-alg"),
                dh_group: ike.str("dh-group"),
                nat_remote: ike.str("nat-remote") == "yes" || ike.str("nat-fake") == "yes",
                established: ike.num("established"),
                children: Vec::new(),
            };
            if let Some(Raw::Section(children)) = ike.get("child-sas") {
                for (_, c) in children {
                    sa.children.push(ChildSa {
                        name: c.str("name"),
                        uniqueid: c.num("uniqueid"),
                        state: c.str("state"),
                        mode: c.str("mode"),
                        encap: c.str("encap") == "yes",
                        spi_in: u32::from_str_radix(&c.str("spi-in"), 16).unwrap_or(0),
                        spi_out: u32::from_str_radix(&c.str("spi-out"), 16).unwrap_or(0),
                        encr_alg: c.str("encr-alg"),
                        bytes_in: c.num("bytes-in"),
                        packets_in: c.num("packets-in"),
                        bytes_out: c.num("bytes-out"),
                        packets_out: c.num("packets-out"),
                        local_ts: c.list("local-ts"),
                        remote_ts: c.list("remote-ts"),
                    });
                }
            }
            sas.push(sa);
        }
    }
    sas
}

/// A tcpdump writing a capture of `filter` on every interface of a namespace to a file;
/// stopped (SIGTERM, so the file is complete) by [`Capture::finish`] or on drop.
pub struct Capture {
    proc: Proc,
    /// The pcap file.
    pub path: PathBuf,
}

impl Capture {
    /// Starts `tcpdump -i IFACE -w PATH FILTER` in `node`, waiting until it listens.
    pub fn start(node: &Node, iface: &str, path: &Path, filter: &str) -> Capture {
        let mut cmd = node.cmd("tcpdump");
        cmd.args(["-i", iface, "-U", "-s", "0", "-w"])
            .arg(path)
            .args(filter.split_whitespace());
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let proc = node.spawn(cmd);
        let ok = proc.wait_stderr_contains("listening on", Duration::from_secs(5));
        assert!(ok, "tcpdump did not start:\n{}", proc.stderr_text());
        Capture {
            proc,
            path: path.to_path_buf(),
        }
    }

    /// Stops tcpdump so that the file is complete.
    pub fn finish(mut self) -> PathBuf {
        std::thread::sleep(Duration::from_millis(200));
        self.proc.stop(libc::SIGTERM, Duration::from_secs(5));
        self.path.clone()
    }
}

/// `key=value` pairs of a flat swanctl `--raw` section, for messages.
pub fn raw_summary(r: &Raw) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if let Raw::Section(items) = r {
        for (k, v) in items {
            if let Raw::Value(v) = v {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    m
}
