//! The `[service.NAME]` sections: each read with its position and built into its
//! factory through the registry, or kept as a listener section for the daemon.

use super::error::{Ctx, section_error, toml_error};
use crate::registry::{BuildError, Registry};
use relay_core::ServiceFactory;
use relay_svc_tcpsplit::TcpSplitConfig;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use toml::Spanned;

pub(super) struct ServiceEntry<'a> {
    /// `None` if the section has errors (already reported).
    pub(super) factory: Option<Arc<dyn ServiceFactory>>,
    /// A `tcpsplit` section's options (the proxy and the rules read them too), and the
    /// span of its name.
    pub(super) split: Option<(TcpSplitConfig, Range<usize>)>,
    /// A listener section (`socks5`, `tproxy`): not a chain service.
    pub(super) listener: Option<ListenerSection<'a>>,
}

/// A `[service.NAME]` of a listener kind, kept for `listeners::check_listeners`.
pub(super) struct ListenerSection<'a> {
    pub(super) kind: &'static str,
    pub(super) kind_span: Range<usize>,
    pub(super) body_span: Range<usize>,
    pub(super) options: toml::de::DeTable<'a>,
}

/// Kinds that are listeners the daemon runs, not chain services.
pub const LISTENER_KINDS: [&str; 2] = ["socks5", "tproxy"];

/// Reads every `[service.NAME]` with positions, builds each factory.
pub(super) fn read_services<'a>(
    cx: &mut Ctx<'a>,
    registry: &Registry,
    stage_mask: u32,
) -> BTreeMap<String, ServiceEntry<'a>> {
    use toml::de::{DeTable, DeValue};
    let mut out = BTreeMap::new();
    let doc = match DeTable::parse(cx.text) {
        Ok(d) => d,
        Err(e) => {
            let err = toml_error(cx, &e, "");
            cx.errors.push(err);
            return out;
        }
    };
    let Some((_, section)) = doc.get_ref().iter().find(|(k, _)| k.get_ref() == "service") else {
        return out;
    };
    let DeValue::Table(section) = section.get_ref() else {
        cx.err(
            Some(section.span()),
            "service",
            "must be a table of [service.NAME] sections",
        );
        return out;
    };
    for (name, body) in section.iter() {
        let name_s = name.get_ref().to_string();
        let field = format!("service.{name_s}");
        // Until it builds, the section counts as present but broken (errors said once).
        out.insert(
            name_s.clone(),
            ServiceEntry {
                factory: None,
                split: None,
                listener: None,
            },
        );
        if !valid_name(&name_s) {
            cx.err(
                Some(name.span()),
                field.clone(),
                "service names use A-Z, a-z, 0-9, _ and -",
            );
            continue;
        }
        let DeValue::Table(table) = body.get_ref() else {
            cx.err(
                Some(body.span()),
                field,
                "must be a table with at least `kind`",
            );
            continue;
        };
        let mut options = table.clone();
        let kind = options
            .iter()
            .find(|(k, _)| k.get_ref() == "kind")
            .map(|(k, v)| (k.clone(), v.clone()));
        let Some((kind_key, kind_val)) = kind else {
            cx.err(
                Some(name.span()),
                format!("{field}.kind"),
                "missing: every service needs a `kind`",
            );
            continue;
        };
        options.remove(&kind_key);
        let DeValue::String(kind) = kind_val.get_ref() else {
            cx.err(
                Some(kind_val.span()),
                format!("{field}.kind"),
                "must be a string",
            );
            continue;
        };
        if let Some(k) = LISTENER_KINDS.iter().find(|k| **k == kind.as_ref()) {
            out.insert(
                name_s,
                ServiceEntry {
                    factory: None,
                    split: None,
                    listener: Some(ListenerSection {
                        kind: k,
                        kind_span: kind_val.span(),
                        body_span: body.span(),
                        options,
                    }),
                },
            );
            continue;
        }
        let split = if kind.as_ref() == <TcpSplitConfig as relay_core::ServiceConfig>::KIND {
            let de = toml::de::ValueDeserializer::from(Spanned::new(
                body.span(),
                DeValue::Table(options.clone()),
            ));
            <TcpSplitConfig as serde::Deserialize>::deserialize(de)
                .ok()
                .map(|c| (c, name.span()))
        } else {
            None
        };
        let de =
            toml::de::ValueDeserializer::from(Spanned::new(body.span(), DeValue::Table(options)));
        match registry.build(kind, &name_s, de) {
            None => {
                let known: Vec<&str> = registry.kinds().collect();
                cx.err(
                    Some(kind_val.span()),
                    format!("{field}.kind"),
                    format!(
                        "unknown service kind `{kind}` (known: {})",
                        known.join(", ")
                    ),
                );
            }
            Some(Err(BuildError::Options(e))) => section_error(cx, &field, &e, body.span()),
            Some(Err(BuildError::Invalid(msg))) => cx.err(Some(body.span()), field, msg),
            Some(Ok(factory)) => {
                let bits = factory.mark_bits() & stage_mask;
                if bits != 0 {
                    cx.err(
                        Some(body.span()),
                        field.clone(),
                        format!(
                            "sets mark bits {bits:#x}, which are relayd's stage bits \
                             (daemon.bypass_mark {stage_mask:#x}): choose other bits"
                        ),
                    );
                }
                out.insert(
                    name_s,
                    ServiceEntry {
                        factory: Some(factory),
                        split,
                        listener: None,
                    },
                );
            }
        }
    }
    out
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{errs, first_err, parsed};

    #[test]
    fn service_marks_may_not_set_the_stage_bits() {
        let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"m\"]\n";
        let e = first_err(
            &format!("{q}[service.m]\nkind = \"mark\"\nmark = \"0x40000001\"\n"),
            5,
            "service.m",
        );
        assert!(e[0].message.contains("stage bits"), "{e:?}");
        // The default mask covers every bit, the stage bits included: only set bits count.
        parsed(&format!(
            "{q}[service.m]\nkind = \"mark\"\nmark = \"0x1\"\n"
        ));
    }

    #[test]
    fn unknown_kind_names_line_and_field() {
        let e = errs(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"x\"]\n[service.x]\nkind = \"nope\"\n",
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!((e[0].line, e[0].field.as_str()), (6, "service.x.kind"));
        assert!(
            e[0].message.contains("unknown service kind `nope`"),
            "{}",
            e[0].message
        );
        assert!(e[0].to_string().starts_with("t.toml:6:"));
    }

    #[test]
    fn bad_option_type_and_unknown_option() {
        first_err(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n[service.d]\nkind = \"dump\"\nrate = \"x\"\n",
            7,
            "service.d.rate",
        );
        first_err(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n[service.d]\nkind = \"dump\"\nratee = 1\n",
            7,
            "service.d.ratee",
        );
        first_err(
            "[[queue]]\nnum = 0\nhook = \"sideways\"\nservices = [\"accept\"]\n",
            3,
            "queue[0].hook",
        );
        first_err(
            "[[queue]]\nnum = 0\nhook = \"forward\"\ntable = \"raw\"\nservices = [\"accept\"]\n",
            4,
            "queue[0].table",
        );
        let e = errs("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"mark\"]\n");
        assert!(e[0].message.contains("needs options"), "{e:?}");
        first_err(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\nmatch = \"-p udp -j ACCEPT\"\n",
            5,
            "queue[0].match",
        );
        first_err("[daemon]\nsokcet = 1\n", 2, "sokcet");
        first_err("[[queue]\nnum = 0\n", 1, "(syntax)");
    }
}
