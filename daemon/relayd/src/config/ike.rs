//! The `[ike.NAME]` sections: one IKEv2 connection each (docs/encryption.md, "IKEv2"),
//! checked into the `relay_ike::ConnConfig` the IKE daemon runs, with strongSwan's
//! spellings for proposals, traffic selectors and times so one peer's swanctl.conf reads
//! like the other's relayd.toml.

use super::error::Ctx;
use relay_ike::{ConnConfig, Identity, Mode, Retransmit, Secret, TrafficSelector};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// The shortest pre-shared key relayd accepts, in bytes: a PSK is the only secret of the
/// IKE SA, and a short one falls to an offline dictionary attack on a captured IKE_AUTH.
pub const MIN_PSK_LEN: usize = 16;

/// One `[ike.NAME]` section, checked.
#[derive(Debug, Clone)]
pub struct IkeSpec {
    /// The connection's name.
    pub name: String,
    /// Line of the section's header.
    pub line: usize,
    /// Where the PSK was read from (reloads read it again).
    pub psk_file: PathBuf,
    /// What relay_ike negotiates.
    pub conn: ConnConfig,
}

impl IkeSpec {
    /// Whether `other` asks for the same connection: a reload keeps an unchanged
    /// connection's SAs up.
    pub fn same_as(&self, other: &IkeSpec) -> bool {
        let (a, b) = (&self.conn, &other.conn);
        a.name == b.name
            && a.local == b.local
            && a.remote == b.remote
            && a.local_id == b.local_id
            && a.remote_id == b.remote_id
            && a.psk == b.psk
            && a.ike_proposals == b.ike_proposals
            && a.esp_proposals == b.esp_proposals
            && a.local_ts == b.local_ts
            && a.remote_ts == b.remote_ts
            && a.mode == b.mode
            && a.initiate == b.initiate
            && a.ike_rekey == b.ike_rekey
            && a.child_rekey == b.child_rekey
            && a.child_rekey_bytes == b.child_rekey_bytes
            && a.child_rekey_packets == b.child_rekey_packets
            && a.dpd_delay == b.dpd_delay
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIke {
    local: Spanned<String>,
    remote: Spanned<String>,
    #[serde(default)]
    local_id: Option<Spanned<String>>,
    #[serde(default)]
    remote_id: Option<Spanned<String>>,
    psk_file: Spanned<String>,
    #[serde(default)]
    proposals: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    esp_proposals: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    local_ts: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    remote_ts: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    mode: Option<Spanned<String>>,
    #[serde(default)]
    start: Option<bool>,
    #[serde(default)]
    rekey_time: Option<Spanned<String>>,
    #[serde(default)]
    child_rekey_time: Option<Spanned<String>>,
    #[serde(default)]
    child_rekey_bytes: Option<Spanned<u64>>,
    #[serde(default)]
    child_rekey_packets: Option<Spanned<u64>>,
    #[serde(default)]
    dpd_delay: Option<Spanned<String>>,
    #[serde(default)]
    retransmit_timeout: Option<Spanned<String>>,
    #[serde(default)]
    retransmit_tries: Option<Spanned<u32>>,
}

/// Checks every `[ike.NAME]` and records every error; returns the good ones in name order.
pub(super) fn check_ike(cx: &mut Ctx<'_>, raw: BTreeMap<String, Spanned<RawIke>>) -> Vec<IkeSpec> {
    let mut out = Vec::new();
    let mut pairs: BTreeMap<(IpAddr, IpAddr), String> = BTreeMap::new();
    for (name, body) in raw {
        let span = body.span();
        let errors_before = cx.errors.len();
        let spec = check_one(cx, &name, body.into_inner());
        if let Some(spec) = spec
            && cx.errors.len() == errors_before
        {
            let key = (spec.conn.local, spec.conn.remote);
            if let Some(other) = pairs.insert(key, name.clone()) {
                cx.err(
                    Some(span.clone()),
                    format!("ike.{name}.remote"),
                    format!(
                        "connection [ike.{other}] already runs between {} and {}: one IKE \
                         connection per pair of addresses",
                        key.0, key.1
                    ),
                );
                continue;
            }
            let line = cx.line_col(span.start).0;
            out.push(IkeSpec { line, ..spec });
        }
    }
    out
}

fn check_one(cx: &mut Ctx<'_>, name: &str, r: RawIke) -> Option<IkeSpec> {
    let field = |f: &str| format!("ike.{name}.{f}");
    let addr = |cx: &mut Ctx<'_>, s: &Spanned<String>, f: &str| -> Option<IpAddr> {
        match s.get_ref().trim().parse::<IpAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                cx.err(
                    Some(s.span()),
                    field(f),
                    format!("`{}` is not an IP address", s.get_ref()),
                );
                None
            }
        }
    };
    let local = addr(cx, &r.local, "local");
    let remote = addr(cx, &r.remote, "remote");
    if let (Some(l), Some(rm)) = (local, remote)
        && l.is_ipv4() != rm.is_ipv4()
    {
        cx.err(
            Some(r.remote.span()),
            field("remote"),
            "local and remote must be of one address family",
        );
    }
    let local_id = r.local_id.as_ref().map(|s| identity(s.get_ref()));
    let remote_id = r.remote_id.as_ref().map(|s| identity(s.get_ref()));

    let psk_path = PathBuf::from(r.psk_file.get_ref());
    let psk = match read_psk(&psk_path) {
        Ok(k) => Some(k),
        Err(e) => {
            cx.err(Some(r.psk_file.span()), field("psk_file"), e);
            None
        }
    };

    let mut ike_proposals = Vec::new();
    match &r.proposals {
        None => ike_proposals.push(
            relay_ike::parse_proposal(DEFAULT_PROPOSAL).expect("the default proposal parses"),
        ),
        Some(list) => {
            if list.get_ref().is_empty() {
                cx.err(Some(list.span()), field("proposals"), "must not be empty");
            }
            for p in list.get_ref() {
                match relay_ike::parse_proposal(p.get_ref()) {
                    Ok(v) => ike_proposals.push(v),
                    Err(e) => cx.err(Some(p.span()), field("proposals"), e.to_string()),
                }
            }
        }
    }
    let mut esp_proposals = Vec::new();
    match &r.esp_proposals {
        None => esp_proposals.push(
            relay_ike::parse_esp_proposal(DEFAULT_ESP_PROPOSAL)
                .expect("the default ESP proposal parses"),
        ),
        Some(list) => {
            if list.get_ref().is_empty() {
                cx.err(
                    Some(list.span()),
                    field("esp_proposals"),
                    "must not be empty",
                );
            }
            for p in list.get_ref() {
                match relay_ike::parse_esp_proposal(p.get_ref()) {
                    Ok(v) => esp_proposals.push(v),
                    Err(e) => cx.err(Some(p.span()), field("esp_proposals"), e.to_string()),
                }
            }
        }
    }

    let selectors = |cx: &mut Ctx<'_>,
                     list: &Option<Spanned<Vec<Spanned<String>>>>,
                     f: &str,
                     default: Option<IpAddr>|
     -> Vec<TrafficSelector> {
        let Some(list) = list else {
            return default.map(TrafficSelector::host).into_iter().collect();
        };
        if list.get_ref().is_empty() {
            cx.err(Some(list.span()), field(f), "must not be empty");
        }
        let mut out = Vec::new();
        for s in list.get_ref() {
            match parse_ts(s.get_ref()) {
                Ok(ts) => out.push(ts),
                Err(e) => cx.err(Some(s.span()), field(f), e),
            }
        }
        out
    };
    let local_ts = selectors(cx, &r.local_ts, "local_ts", local);
    let remote_ts = selectors(cx, &r.remote_ts, "remote_ts", remote);

    let mode = match r.mode.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
        None | Some(("tunnel", _)) => Mode::Tunnel,
        Some(("transport", _)) => Mode::Transport,
        Some((other, span)) => {
            cx.err(
                Some(span),
                field("mode"),
                format!("`{other}`: use \"tunnel\" or \"transport\""),
            );
            Mode::Tunnel
        }
    };
    let time = |cx: &mut Ctx<'_>, v: &Option<Spanned<String>>, f: &str, default: u64| match v {
        None => Duration::from_secs(default),
        Some(s) => match parse_time(s.get_ref()) {
            Ok(d) => d,
            Err(e) => {
                cx.err(Some(s.span()), field(f), e);
                Duration::ZERO
            }
        },
    };
    let ike_rekey = time(cx, &r.rekey_time, "rekey_time", 4 * 3600);
    let child_rekey = time(cx, &r.child_rekey_time, "child_rekey_time", 3600);
    let dpd_delay = time(cx, &r.dpd_delay, "dpd_delay", 0);
    for (d, v, f) in [
        (ike_rekey, &r.rekey_time, "rekey_time"),
        (child_rekey, &r.child_rekey_time, "child_rekey_time"),
    ] {
        if let Some(v) = v
            && d < Duration::from_secs(MIN_REKEY_SECS)
        {
            cx.err(
                Some(v.span()),
                field(f),
                format!("at least {MIN_REKEY_SECS}s: a rekey takes a round trip or more"),
            );
        }
    }
    let count = |cx: &mut Ctx<'_>, v: &Option<Spanned<u64>>, f: &str| -> Option<u64> {
        let v = v.as_ref()?;
        if *v.get_ref() == 0 {
            cx.err(
                Some(v.span()),
                field(f),
                "must be at least 1 (leave it out for no limit)",
            );
            return None;
        }
        Some(*v.get_ref())
    };
    let child_rekey_bytes = count(cx, &r.child_rekey_bytes, "child_rekey_bytes");
    let child_rekey_packets = count(cx, &r.child_rekey_packets, "child_rekey_packets");

    let mut retransmit = Retransmit::default();
    if let Some(t) = &r.retransmit_timeout {
        match relay_core::units::parse_duration(t.get_ref()) {
            Ok(d) if d >= Duration::from_millis(100) => retransmit.timeout = d,
            Ok(_) => cx.err(
                Some(t.span()),
                field("retransmit_timeout"),
                "at least 100ms",
            ),
            Err(e) => cx.err(Some(t.span()), field("retransmit_timeout"), e),
        }
    }
    if let Some(n) = &r.retransmit_tries {
        if *n.get_ref() > 20 {
            cx.err(Some(n.span()), field("retransmit_tries"), "at most 20");
        } else {
            retransmit.tries = *n.get_ref();
        }
    }

    let (local, remote, psk) = (local?, remote?, psk?);
    Some(IkeSpec {
        name: name.to_string(),
        line: 0,
        psk_file: psk_path,
        conn: ConnConfig {
            name: name.to_string(),
            local,
            remote,
            local_id: local_id.unwrap_or(Identity::Addr(local)),
            remote_id: remote_id.unwrap_or(Identity::Addr(remote)),
            psk,
            ike_proposals,
            esp_proposals,
            local_ts,
            remote_ts,
            mode,
            initiate: r.start.unwrap_or(false),
            ike_rekey,
            child_rekey,
            child_rekey_bytes,
            child_rekey_packets,
            dpd_delay,
            retransmit,
        },
    })
}

/// The IKE proposal when `proposals` is left out.
pub const DEFAULT_PROPOSAL: &str = "aes128gcm16-prfsha256-x25519";
/// The ESP proposal when `esp_proposals` is left out.
pub const DEFAULT_ESP_PROPOSAL: &str = "aes128gcm16";
/// The shortest rekey interval accepted.
pub const MIN_REKEY_SECS: u64 = 5;

/// An identity as swanctl.conf writes it: an IP address (ID_IPV4/6_ADDR), `user@host`
/// (ID_RFC822_ADDR), or a name (ID_FQDN; a leading `@` is dropped, as strongSwan does).
pub fn identity(s: &str) -> Identity {
    let s = s.trim();
    if let Ok(a) = s.parse::<IpAddr>() {
        return Identity::Addr(a);
    }
    if let Some(fqdn) = s.strip_prefix('@') {
        return Identity::Fqdn(fqdn.to_string());
    }
    if s.contains('@') {
        return Identity::Email(s.to_string());
    }
    Identity::Fqdn(s.to_string())
}

/// A traffic selector in swanctl.conf's syntax: `ADDR[/PREFIX][[PROTO[/PORT]]]`, e.g.
/// `10.0.1.0/24`, `10.0.1.5`, `10.0.1.0/24[udp]`, `10.0.1.0/24[tcp/443]`,
/// `10.0.1.0/24[udp/5000-5010]`.
pub fn parse_ts(s: &str) -> Result<TrafficSelector, String> {
    let s = s.trim();
    let (net, extra) = match s.split_once('[') {
        Some((n, rest)) => {
            let inner = rest
                .strip_suffix(']')
                .ok_or_else(|| format!("`{s}`: `[` without a closing `]`"))?;
            (n, Some(inner))
        }
        None => (s, None),
    };
    let (addr, prefix) = match net.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (net, None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("`{s}`: `{addr}` is not an IP address"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let mut ts = match prefix {
        None => TrafficSelector::host(addr),
        Some(p) => {
            let p: u8 = p
                .parse()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`{s}`: prefix length must be 0 to {max}"))?;
            TrafficSelector::subnet(addr, p)
        }
    };
    if let Some(extra) = extra {
        let (proto, port) = match extra.split_once('/') {
            Some((p, q)) => (p, Some(q)),
            None => (extra, None),
        };
        ts.protocol = match proto {
            "" | "any" => 0,
            "tcp" => 6,
            "udp" => 17,
            "icmp" => 1,
            "icmp6" | "ipv6-icmp" => 58,
            "sctp" => 132,
            n => n
                .parse()
                .map_err(|_| format!("`{s}`: unknown protocol `{n}` (tcp, udp, icmp, a number)"))?,
        };
        if let Some(port) = port {
            let bad = || format!("`{s}`: port must be a number or a range `LOW-HIGH`");
            let (lo, hi) = match port.split_once('-') {
                Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
                None if port == "%any" => (0, 65535),
                None => {
                    let p: u16 = port.parse().map_err(|_| bad())?;
                    (p, p)
                }
            };
            if lo > hi {
                return Err(bad());
            }
            if ts.protocol == 0 {
                return Err(format!("`{s}`: a port needs a protocol (`[udp/{port}]`)"));
            }
            ts.start_port = lo;
            ts.end_port = hi;
        }
    }
    Ok(ts)
}

/// A time as swanctl.conf writes it: a number with `s`, `m`, `h` or `d` (seconds without
/// a unit), e.g. `4h`, `30m`, `10s`, `0` (off, where that means something).
pub fn parse_time(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a time such as \"4h\", \"30m\", \"10s\""))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        u => return Err(format!("unknown unit `{u}` in `{s}` (use s, m, h or d)")),
    };
    n.checked_mul(mult)
        .filter(|v| *v <= 365 * 86400)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("`{s}` is more than a year"))
}

/// Reads a PSK file: one line, `0x` and hex digits for arbitrary bytes, else the text
/// itself (surrounding white space removed), as swanctl.conf's `secret` takes it.
///
/// Whoever can read the file can impersonate either peer, and whoever can replace it
/// chooses the key: it is opened under the key-file rules of services/crypto
/// ([`relay_svc_crypto::open_secret`]: the file owned by relayd's user or root, mode 600 or
/// 400, every directory from `/` to it safe, no symbolic-link swap between check and read).
pub fn read_psk(path: &std::path::Path) -> Result<Secret, String> {
    use std::io::Read;
    let shown = path.display();
    let mut f = relay_svc_crypto::open_secret(path)
        .map_err(|e| e.to_string().replacen("key file", "PSK file", 1))?;
    // Wiped when dropped: the file's text is the secret (or its hex).
    // Room for all of it at once, so no reallocation leaves a copy behind.
    let mut text = zeroize::Zeroizing::new(String::with_capacity(4097));
    (&mut f)
        .take(4096)
        .read_to_string(&mut text)
        .map_err(|e| format!("PSK file {shown}: {e}"))?;
    let t = text.trim();
    let bytes = match t.strip_prefix("0x") {
        Some(hex) => {
            if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "PSK file {shown}: `0x` must be followed by hex digits"
                ));
            }
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("00"), 16).unwrap_or(0))
                .collect()
        }
        None => t.as_bytes().to_vec(),
    };
    if bytes.len() < MIN_PSK_LEN {
        return Err(format!(
            "PSK file {shown}: {} bytes, at least {MIN_PSK_LEN} are needed (`relayd keygen` \
             or `head -c 32 /dev/urandom | xxd -p -c 64` with a `0x` before it)",
            bytes.len()
        ));
    }
    Ok(Secret::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_in_swanctl_syntax() {
        let t = parse_ts("10.0.1.0/24").unwrap();
        assert_eq!(
            (t.start.to_string(), t.end.to_string()),
            ("10.0.1.0".into(), "10.0.1.255".into())
        );
        assert_eq!((t.protocol, t.start_port, t.end_port), (0, 0, 65535));
        let t = parse_ts("10.0.1.5[udp/5000-5010]").unwrap();
        assert_eq!((t.protocol, t.start_port, t.end_port), (17, 5000, 5010));
        assert_eq!(t.start, t.end);
        let t = parse_ts("fd00::/64[tcp/443]").unwrap();
        assert_eq!((t.protocol, t.start_port), (6, 443));
        assert!(parse_ts("10.0.1.0/33").unwrap_err().contains("prefix"));
        assert!(
            parse_ts("10.0.1.0/24[/80]")
                .unwrap_err()
                .contains("needs a protocol")
        );
        assert!(parse_ts("10.0.1.0/24[udp").is_err());
        assert!(parse_ts("host/24").is_err());
    }

    fn psk(name: &str, text: &str) -> PathBuf {
        crate::config::test_util::psk_file(name, text)
    }

    fn conf(psk: &std::path::Path, extra: &str) -> String {
        format!(
            "[ike.b]\nlocal = \"192.0.2.1\"\nremote = \"198.51.100.7\"\npsk_file = \"{}\"\n{extra}",
            psk.display()
        )
    }

    #[test]
    fn a_section_becomes_a_connection() {
        let p = psk("ok", "0x5ce1e7a5ecf1c6d1d4e95d26b6c42c1b");
        let c = crate::config::test_util::parsed(&conf(
            &p,
            "proposals = [\"aes256-sha256-ecp256\", \"aes128gcm16-prfsha256-x25519\"]\n\
             local_ts = [\"10.0.1.0/24\"]\nremote_ts = [\"10.0.3.0/24[udp/5000]\"]\n\
             start = true\nchild_rekey_time = \"10m\"\nchild_rekey_packets = 1000000\n\
             dpd_delay = \"30s\"\nremote_id = \"@b.example\"\n",
        ));
        assert_eq!(c.ike.len(), 1);
        let k = &c.ike[0];
        assert_eq!(k.line, 1);
        assert_eq!(k.conn.psk.len(), 16);
        assert_eq!(k.conn.ike_proposals.len(), 2);
        assert_eq!(k.conn.esp_proposals.len(), 1, "the default");
        assert_eq!(
            k.conn.local_id,
            Identity::Addr("192.0.2.1".parse().unwrap())
        );
        assert_eq!(k.conn.remote_id, Identity::Fqdn("b.example".into()));
        assert_eq!(k.conn.remote_ts[0].start_port, 5000);
        assert!(k.conn.initiate);
        assert_eq!(k.conn.child_rekey, Duration::from_secs(600));
        assert_eq!(k.conn.ike_rekey, Duration::from_secs(4 * 3600));
        assert_eq!(k.conn.child_rekey_packets, Some(1_000_000));
        assert_eq!(k.conn.dpd_delay, Duration::from_secs(30));
        assert_eq!(k.conn.mode, Mode::Tunnel);
        // An IKE connection alone is something to do.
        assert!(c.queues.is_empty());
    }

    #[test]
    fn errors_name_file_line_and_key() {
        use crate::config::test_util::{errs, first_err};
        let p = psk("errs", "0x5ce1e7a5ecf1c6d1d4e95d26b6c42c1b");
        first_err(
            &conf(&p, "proposals = [\"aes128-x25519\"]\n"),
            5,
            "ike.b.proposals",
        );
        first_err(
            &conf(&p, "esp_proposals = [\"3des\"]\n"),
            5,
            "ike.b.esp_proposals",
        );
        first_err(
            &conf(&p, "local_ts = [\"10.0.1.0/40\"]\n"),
            5,
            "ike.b.local_ts",
        );
        first_err(&conf(&p, "mode = \"beet\"\n"), 5, "ike.b.mode");
        first_err(
            &conf(&p, "child_rekey_time = \"1s\"\n"),
            5,
            "ike.b.child_rekey_time",
        );
        first_err(&conf(&p, "rekey_time = \"4x\"\n"), 5, "ike.b.rekey_time");
        first_err(
            &conf(&p, "child_rekey_bytes = 0\n"),
            5,
            "ike.b.child_rekey_bytes",
        );
        let e = errs(&conf(&p, "bogus = 1\n"));
        assert!(e[0].message.contains("bogus"), "{e:?}");
        let e = first_err(
            &conf(&p, "").replace("198.51.100.7", "2001:db8::7"),
            3,
            "ike.b.remote",
        );
        assert!(e[0].message.contains("family"), "{e:?}");
        let short = psk("short", "swordfish");
        let e = first_err(&conf(&short, ""), 4, "ike.b.psk_file");
        assert!(e[0].message.contains("at least 16"), "{e:?}");
        let e = first_err(
            &conf(std::path::Path::new("/nonexistent/b.psk"), ""),
            4,
            "ike.b.psk_file",
        );
        assert!(e[0].message.contains("No such file"), "{e:?}");
        // The PSK must be nobody else's to read.
        use std::os::unix::fs::PermissionsExt;
        let open = psk("open", "0x5ce1e7a5ecf1c6d1d4e95d26b6c42c1b");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = first_err(&conf(&open, ""), 4, "ike.b.psk_file");
        assert!(e[0].message.contains("chmod 600"), "{e:?}");
        // Nor in a directory someone else can write (they could replace it).
        let shared = p.parent().unwrap().join("shared");
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let in_shared = shared.join("b.psk");
        std::fs::copy(&p, &in_shared).unwrap();
        std::fs::set_permissions(&in_shared, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = first_err(&conf(&in_shared, ""), 4, "ike.b.psk_file");
        assert!(e[0].message.contains("writable by anyone"), "{e:?}");
        // Two connections between the same addresses.
        let two = format!(
            "{}\n{}",
            conf(&p, ""),
            conf(&p, "").replace("[ike.b]", "[ike.c]")
        );
        let e = errs(&two);
        assert!(e[0].message.contains("already runs between"), "{e:?}");
    }

    #[test]
    fn times_and_identities() {
        assert_eq!(parse_time("4h").unwrap(), Duration::from_secs(14400));
        assert_eq!(parse_time("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_time("10s").unwrap(), Duration::from_secs(10));
        assert!(parse_time("10x").unwrap_err().contains("unit"));
        assert!(parse_time("-1s").is_err());
        assert_eq!(
            identity("10.0.0.1"),
            Identity::Addr("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            identity("@relay.example"),
            Identity::Fqdn("relay.example".into())
        );
        assert_eq!(
            identity("ops@example.org"),
            Identity::Email("ops@example.org".into())
        );
    }
}
