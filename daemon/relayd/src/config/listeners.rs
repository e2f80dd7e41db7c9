//! The proxy listeners the daemon runs: the `socks5` and `tproxy` sections, each checked
//! against the proxy's own options, and the transparent listener of the split proxy (its
//! diversion is checked in `tproxy`).

use super::daemon::DaemonConfig;
use super::error::{Ctx, section_error};
use super::listener_spec::{ListenerKind, ListenerSpec};
use super::queue::QueueSpec;
use super::services::{ListenerSection, ServiceEntry};
use super::tproxy::{self, TproxySetup};
use relay_proxy::{Socks5Config, TransparentConfig};
use std::collections::BTreeMap;
use toml::Spanned;

/// Keys of a listener section besides `kind`: the proxy's own (read from its defaults, so
/// a key the proxy crate adds is known here at once) and relayd's extras.
fn listener_keys(kind: &str) -> Vec<String> {
    let value = match kind {
        "socks5" => serde_json::to_value(Socks5Config::default()),
        _ => serde_json::to_value(TransparentConfig::default()),
    };
    let mut keys: Vec<String> = match value {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    };
    if kind == "tproxy" {
        keys.extend(TPROXY_EXTRA_KEYS.map(String::from));
    }
    keys.sort();
    keys
}

/// `tproxy` keys that are relayd's (rules and routes), not the listener's.
const TPROXY_EXTRA_KEYS: [&str; 4] = ["tproxy_mark", "table", "rule_pref", "ports"];

/// Checks the listener sections and the split proxy as a whole: the listeners to run,
/// and the transparent diversion (TPROXY rules and route) the diverting services need.
pub(super) fn check_listeners(
    cx: &mut Ctx<'_>,
    queues: &[QueueSpec],
    services: &BTreeMap<String, ServiceEntry<'_>>,
    daemon: &DaemonConfig,
) -> (Vec<ListenerSpec>, Option<TproxySetup>) {
    let (splits, families) = tproxy::diverters(cx, queues, services);
    tproxy::check_diverters_agree(cx, &splits, daemon);
    let (mut listeners, section) = read_listeners(cx, services);
    let setup = tproxy::check_tproxy(
        cx,
        &mut listeners,
        section.as_ref(),
        &splits,
        families,
        daemon,
    );
    check_addresses(cx, &listeners);
    (listeners, setup)
}

/// The listener sections that check, in name order, and the `tproxy` one (relayd runs
/// one transparent listener).
fn read_listeners<'s, 'a>(
    cx: &mut Ctx<'_>,
    services: &'s BTreeMap<String, ServiceEntry<'a>>,
) -> (Vec<ListenerSpec>, Option<(String, &'s ListenerSection<'a>)>) {
    let mut listeners = Vec::new();
    let mut tproxy_section: Option<(String, &ListenerSection<'_>)> = None;
    for (name, e) in services {
        let Some(l) = &e.listener else { continue };
        let Some(kind) = read_listener(cx, name, l) else {
            continue;
        };
        if l.kind == "tproxy" {
            if let Some((prev, _)) = &tproxy_section {
                cx.err(
                    Some(l.kind_span.clone()),
                    format!("service.{name}.kind"),
                    format!(
                        "a second tproxy listener (service `{prev}` is the first): relayd runs one"
                    ),
                );
                continue;
            }
            tproxy_section = Some((name.clone(), l));
        }
        listeners.push(ListenerSpec {
            name: name.clone(),
            line: cx.line_col(l.kind_span.start).0,
            kind,
        });
    }
    (listeners, tproxy_section)
}

/// One listener section: every key known, the `socks5` destination lists, the proxy's
/// options read (without relayd's own keys) and within its limits. `None` if it cannot
/// be read.
fn read_listener(cx: &mut Ctx<'_>, name: &str, l: &ListenerSection<'_>) -> Option<ListenerKind> {
    use toml::de::DeValue;
    let field = format!("service.{name}");
    let errors_before = cx.errors.len();
    // Unknown keys are refused here: the proxy's own config types accept any.
    let known = listener_keys(l.kind);
    for (k, _) in l.options.iter() {
        if !known.iter().any(|x| x == k.get_ref().as_ref()) {
            cx.err(
                Some(k.span()),
                format!("{field}.{}", k.get_ref()),
                format!(
                    "unknown field `{}`, expected one of {}",
                    k.get_ref(),
                    known.join(", ")
                ),
            );
        }
    }
    if l.kind == "socks5" {
        check_dest_lists(cx, &field, l);
    }
    if cx.errors.len() > errors_before {
        return None;
    }
    let mut proxy_opts = l.options.clone();
    // relayd's own keys are read by the diversion, from the section itself.
    let extra: Vec<_> = proxy_opts
        .keys()
        .filter(|k| TPROXY_EXTRA_KEYS.contains(&k.get_ref().as_ref()))
        .cloned()
        .collect();
    for k in extra {
        proxy_opts.remove(&k);
    }
    let de = toml::de::ValueDeserializer::from(Spanned::new(
        l.body_span.clone(),
        DeValue::Table(proxy_opts),
    ));
    let kind = if l.kind == "socks5" {
        <Socks5Config as serde::Deserialize>::deserialize(de).map(ListenerKind::Socks5)
    } else {
        <TransparentConfig as serde::Deserialize>::deserialize(de).map(ListenerKind::Transparent)
    };
    match kind {
        Ok(kind) => {
            check_proxy_options(cx, &field, l, &kind);
            Some(kind)
        }
        Err(e) => {
            section_error(cx, &field, &e, l.body_span.clone());
            None
        }
    }
}

/// Two listeners on one address would fail at bind time: say so now, with the line.
fn check_addresses(cx: &mut Ctx<'_>, listeners: &[ListenerSpec]) {
    for (i, a) in listeners.iter().enumerate() {
        if let Some(b) = listeners[..i]
            .iter()
            .find(|b| b.kind.listen() == a.kind.listen() && a.kind.listen().port() != 0)
        {
            cx.err(
                Some(cx.lines.line_span(a.line)),
                format!("service.{}.listen", a.name),
                format!("{} is also service `{}`'s address", a.kind.listen(), b.name),
            );
        }
    }
}

/// A `socks5` section's `allow` and `deny` lists, each entry parsed here so that an error
/// names its line and index (deserializing would refuse it too, less precisely).
fn check_dest_lists(cx: &mut Ctx<'_>, field: &str, l: &ListenerSection<'_>) {
    use toml::de::DeValue;
    for key in ["allow", "deny"] {
        let Some((_, v)) = l.options.iter().find(|(k, _)| k.get_ref().as_ref() == key) else {
            continue;
        };
        let DeValue::Array(items) = v.get_ref() else {
            cx.err(
                Some(v.span()),
                format!("{field}.{key}"),
                "must be a list of strings, e.g. [\"10.0.0.0/8\", \"192.0.2.1:443\"]",
            );
            continue;
        };
        for (i, item) in items.iter().enumerate() {
            let f = format!("{field}.{key}[{i}]");
            match item.get_ref() {
                DeValue::String(s) => {
                    if let Err(e) = s.parse::<relay_proxy::DestRule>() {
                        cx.err(Some(item.span()), f, e);
                    }
                }
                _ => cx.err(
                    Some(item.span()),
                    f,
                    "must be a string: ADDR[/LEN][:PORT[-PORT]], \"[IPV6]/LEN:PORTS\" or \"*:PORTS\"",
                ),
            }
        }
    }
}

/// The proxy crate's own limits, checked here so that they name the line.
fn check_proxy_options(
    cx: &mut Ctx<'_>,
    field: &str,
    l: &ListenerSection<'_>,
    kind: &ListenerKind,
) {
    let span_of = |key: &str| {
        l.options
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == key)
            .map(|(_, v)| v.span())
            .or(Some(l.body_span.clone()))
    };
    let opts = match kind {
        ListenerKind::Socks5(c) => &c.options,
        ListenerKind::Transparent(c) => &c.options,
    };
    if opts.max_connections == 0 {
        cx.err(
            span_of("max_connections"),
            format!("{field}.max_connections"),
            "must be at least 1",
        );
    }
    if !(4096..=64 << 20).contains(&opts.buffer_size) {
        cx.err(
            span_of("buffer_size"),
            format!("{field}.buffer_size"),
            "must be 4096 bytes to 64 MiB",
        );
    }
    if let ListenerKind::Socks5(c) = kind
        && c.users.is_empty()
        && !c.listen.ip().to_canonical().is_loopback()
    {
        let listen = l
            .options
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == "listen")
            .map_or(l.kind_span.clone(), |(_, v)| v.span());
        cx.warn(
            Some(listen),
            format!("{field}.listen"),
            format!(
                "{} is not a loopback address and `users` is empty: any host that reaches it may use the proxy without authentication (add `users`, or listen on 127.0.0.1)",
                c.listen
            ),
        );
    }
    if let ListenerKind::Socks5(c) = kind {
        for u in &c.users {
            let ok = |s: &str| (1..=255).contains(&s.len());
            if !ok(&u.username) || !ok(&u.password) {
                cx.err(
                    span_of("users"),
                    format!("{field}.users"),
                    format!(
                        "user {:?}: name and password must be 1 to 255 bytes (RFC 1929)",
                        u.username
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_util::{errs, first_err, parsed};

    #[test]
    fn split_proxy_and_listeners() {
        let split = "[[queue]]\nnum = 0\nhook = \"prerouting\"\ntable = \"raw\"\nmatch = \"-p tcp --syn\"\nservices = [\"split\"]\n[service.split]\nkind = \"tcpsplit\"\nports = [80]\nupstream = \"mptcp\"\n";
        let socks = "[service.socks]\nkind = \"socks5\"\nlisten = \"127.0.0.1:1080\"\n";
        let c = parsed(&format!("{split}{socks}"));
        assert_eq!(c.listeners.len(), 2);
        let t = c.tproxy.as_ref().unwrap();
        assert_eq!((t.spec.divert_mark, t.spec.port), (0x1, 9040));
        assert_eq!(t.listener, "split");
        match &c.listeners.iter().find(|l| l.name == "split").unwrap().kind {
            ListenerKind::Transparent(tc) => {
                assert_eq!(tc.options.upstream, relay_proxy::Upstream::Mptcp)
            }
            other => panic!("{other:?}"),
        }
        let rules = crate::rules::restore_text(&c).unwrap();
        assert!(
            rules.contains(
                "-A RELAYD-PREROUTING -p tcp -m mark --mark 0x1/0x1 -m addrtype ! --dst-type LOCAL -j TPROXY --on-port 9040"
            ),
            "{rules}"
        );
        // Unknown keys in a listener, a listener in a chain, tcpsplit in the wrong place.
        first_err(
            &format!(
                "{split}[service.socks]\nkind = \"socks5\"\nlisten = \"0.0.0.0:1080\"\nlisen = 1\n"
            ),
            14,
            "service.socks.lisen",
        );
        first_err(
            &format!("{socks}[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"socks\"]\n"),
            7,
            "queue[0].services[0]",
        );
        let e = errs(&split.replace("table = \"raw\"\n", ""));
        assert_eq!(e[0].field, "queue[0].table", "{e:?}");
        let e = errs(&split.replace("\"prerouting\"\ntable = \"raw\"", "\"forward\""));
        assert_eq!(e[0].field, "queue[0].hook", "{e:?}");
        first_err(
            &format!("{split}[service.tp]\nkind = \"tproxy\"\nupstream = \"tcp\"\n"),
            13,
            "service.tp.upstream",
        );
        let e = errs(&format!(
            "{socks}[service.s2]\nkind = \"socks5\"\nlisten = \"127.0.0.1:1080\"\nbuffer_size = 10\n"
        ));
        assert!(
            e.iter()
                .any(|e| e.field == "service.s2.buffer_size" && e.line == 7),
            "{e:?}"
        );
        assert!(e.iter().any(|e| e.field.ends_with(".listen")), "{e:?}");
        // A socks5 listener alone is a whole configuration.
        parsed(socks);
    }

    #[test]
    fn socks5_defaults_lists_and_open_listener_warning() {
        // No `listen`: loopback, and nothing to warn about.
        let c = parsed("[service.s]\nkind = \"socks5\"\n");
        match &c.listeners[0].kind {
            ListenerKind::Socks5(s) => {
                assert_eq!(s.listen, "127.0.0.1:1080".parse().unwrap());
                assert!(s.allow.is_empty() && s.deny.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        // Open to the network without users: a warning at the `listen` line, no error.
        let c = parsed("[service.s]\nkind = \"socks5\"\nlisten = \"0.0.0.0:1080\"\n");
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        let w = &c.warnings[0];
        assert_eq!((w.line, w.field.as_str()), (3, "service.s.listen"), "{w:?}");
        assert!(w.to_string().starts_with("t.toml:3:"), "{w}");
        assert!(w.message.contains("without authentication"), "{w}");
        for quiet in [
            "listen = \"[::1]:1080\"\n",
            "listen = \"[::ffff:127.0.0.1]:1080\"\n",
            "listen = \"10.0.1.2:1080\"\nusers = [{ username = \"a\", password = \"b\" }]\n",
        ] {
            let c = parsed(&format!("[service.s]\nkind = \"socks5\"\n{quiet}"));
            assert!(c.warnings.is_empty(), "{quiet}: {:?}", c.warnings);
        }
        // allow and deny: read, and every bad entry named by file, line, field and index.
        let c = parsed(
            "[service.s]\nkind = \"socks5\"\nallow = [\"127.0.0.1:8080\", \"10.0.0.0/8\"]\ndeny = [\"[2001:db8::]/32:80-90\"]\n",
        );
        match &c.listeners[0].kind {
            ListenerKind::Socks5(s) => {
                assert_eq!(s.allow.len(), 2);
                assert_eq!(s.deny[0].to_string(), "[2001:db8::]/32:80-90");
            }
            other => panic!("{other:?}"),
        }
        let e = first_err(
            "[service.s]\nkind = \"socks5\"\nallow = [\n  \"10.0.0.0/8\",\n  \"10.0.0.1/8\",\n]\ndeny = [\"2001:db8::/32:80\", 5]\n",
            5,
            "service.s.allow[1]",
        );
        assert!(e[0].message.contains("host bits"), "{e:?}");
        assert!(
            e[0].to_string()
                .starts_with("t.toml:5:3: service.s.allow[1]:"),
            "{}",
            e[0]
        );
        assert_eq!(
            (e[1].line, e[1].field.as_str()),
            (7, "service.s.deny[0]"),
            "{e:?}"
        );
        assert!(e[1].message.contains("brackets"), "{e:?}");
        assert_eq!(e[2].field, "service.s.deny[1]", "{e:?}");
        assert_eq!(e.len(), 3, "{e:?}");
        first_err(
            "[service.s]\nkind = \"socks5\"\ndeny = \"10.0.0.0/8\"\n",
            3,
            "service.s.deny",
        );
        // The transparent listener has no destination lists.
        first_err(
            "[service.t]\nkind = \"tproxy\"\nports = [80]\nallow = [\"10.0.0.0/8\"]\n",
            4,
            "service.t.allow",
        );
    }
}
