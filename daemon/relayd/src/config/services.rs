//! The `[service.NAME]` sections: each read with its position and built into its
//! factory through the registry, or kept as a listener section for the daemon.

use super::error::{Ctx, section_error, toml_error};
use crate::registry::{BuildError, Registry};
use relay_core::ServiceFactory;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue};

pub(super) struct ServiceEntry<'a> {
    /// `None` if the section has errors (already reported).
    pub(super) factory: Option<Arc<dyn ServiceFactory>>,
    /// The span of the section's name, where errors about the service as a whole point.
    pub(super) name_span: Range<usize>,
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
        let entry = read_service(cx, registry, stage_mask, name, body);
        out.insert(name.get_ref().to_string(), entry);
    }
    out
}

/// One `[service.NAME]`: a listener section kept for the daemon, or a chain service built
/// by the registry from its options. Without a factory or listener if it has errors
/// (reported here, once): it still counts as present.
fn read_service<'a>(
    cx: &mut Ctx<'_>,
    registry: &Registry,
    stage_mask: u32,
    name: &Spanned<DeString<'a>>,
    body: &Spanned<DeValue<'a>>,
) -> ServiceEntry<'a> {
    let mut entry = ServiceEntry {
        factory: None,
        name_span: name.span(),
        listener: None,
    };
    let field = format!("service.{}", name.get_ref());
    let Some((kind, kind_span, options)) = split_kind(cx, &field, name, body) else {
        return entry;
    };
    if let Some(k) = LISTENER_KINDS.iter().find(|k| **k == kind) {
        entry.listener = Some(ListenerSection {
            kind: k,
            kind_span,
            body_span: body.span(),
            options,
        });
        return entry;
    }
    let de = toml::de::ValueDeserializer::from(Spanned::new(body.span(), DeValue::Table(options)));
    match registry.build(&kind, name.get_ref(), de) {
        None => {
            let known: Vec<&str> = registry.kinds().collect();
            cx.err(
                Some(kind_span),
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
            let bits = factory.manifest().mark_bits & stage_mask;
            if bits != 0 {
                cx.err(
                    Some(body.span()),
                    field,
                    format!(
                        "sets mark bits {bits:#x}, which are relayd's stage bits \
                         (daemon.bypass_mark {stage_mask:#x}): choose other bits"
                    ),
                );
            }
            entry.factory = Some(factory);
        }
    }
    entry
}

/// A section's name checked, and its body split into the `kind` (a string, with its span)
/// and the options; `None` after an error.
fn split_kind<'a>(
    cx: &mut Ctx<'_>,
    field: &str,
    name: &Spanned<DeString<'a>>,
    body: &Spanned<DeValue<'a>>,
) -> Option<(String, Range<usize>, DeTable<'a>)> {
    if !valid_name(name.get_ref()) {
        cx.err(
            Some(name.span()),
            field,
            "service names use A-Z, a-z, 0-9, _ and -",
        );
        return None;
    }
    let DeValue::Table(table) = body.get_ref() else {
        cx.err(
            Some(body.span()),
            field,
            "must be a table with at least `kind`",
        );
        return None;
    };
    let mut options = table.clone();
    let Some((kind_key, kind_val)) = options
        .iter()
        .find(|(k, _)| k.get_ref() == "kind")
        .map(|(k, v)| (k.clone(), v.clone()))
    else {
        cx.err(
            Some(name.span()),
            format!("{field}.kind"),
            "missing: every service needs a `kind`",
        );
        return None;
    };
    options.remove(&kind_key);
    let DeValue::String(kind) = kind_val.get_ref() else {
        cx.err(
            Some(kind_val.span()),
            format!("{field}.kind"),
            "must be a string",
        );
        return None;
    };
    Some((kind.to_string(), kind_val.span(), options))
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `services`: each name a `[service.NAME]` section that built (one with errors was
/// reported already) or a built-in kind that needs no options; never a listener.
pub(super) fn resolve_chain(
    cx: &mut Ctx<'_>,
    owner: &str,
    list: &Spanned<Vec<Spanned<String>>>,
    services: &BTreeMap<String, ServiceEntry<'_>>,
    registry: &Registry,
) -> Vec<(String, Arc<dyn ServiceFactory>)> {
    let mut chain = Vec::new();
    if list.get_ref().is_empty() {
        cx.err(
            Some(list.span()),
            format!("{owner}.services"),
            "empty: name at least one service",
        );
    }
    for (i, s) in list.get_ref().iter().enumerate() {
        let name = s.get_ref();
        let f = || format!("{owner}.services[{i}]");
        if let Some(e) = services.get(name) {
            if let Some(l) = &e.listener {
                cx.err(
                    Some(s.span()),
                    f(),
                    format!(
                        "`{name}` is a {} listener the daemon runs, not a chain service",
                        l.kind
                    ),
                );
            } else if let Some(factory) = &e.factory {
                chain.push((name.clone(), factory.clone()));
            }
            continue;
        }
        match registry.build_default(name) {
            Some(Ok(factory)) => chain.push((name.clone(), factory)),
            Some(Err(BuildError::Options(e))) => cx.err(
                Some(s.span()),
                f(),
                format!(
                    "built-in `{name}` needs options ({}); add a [service.NAME] section",
                    e.message().trim()
                ),
            ),
            Some(Err(BuildError::Invalid(m))) => cx.err(Some(s.span()), f(), m),
            None => cx.err(
                Some(s.span()),
                f(),
                format!(
                    "unknown service `{name}`: not a [service.{name}] section nor a built-in kind"
                ),
            ),
        }
    }
    chain
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
