//! The rule options (`keyword:value;`), one function per group: the rule's own facts
//! (`msg`, `sid`, `classtype`, ...), content and pcre, the numeric payload keywords, flow
//! state (`flowbits`, `stream-event`, ...) and header tests with thresholds.

use super::modifiers::content_modifier;
use super::*;

/// One option as written: its keyword and value.
struct Opt<'a> {
    name: &'a str,
    value: Option<&'a str>,
}

impl<'a> Opt<'a> {
    /// The value, which the keyword needs.
    fn need(&self) -> Result<&'a str, PErr> {
        self.value
            .ok_or_else(|| kerr(self.name, "needs a value (`keyword:value;`)"))
    }

    /// A keyword that takes no value.
    fn flag(&self) -> Result<(), PErr> {
        match self.value {
            None => Ok(()),
            Some(_) => Err(kerr(self.name, "takes no value")),
        }
    }
}

/// Applies one option to the rule under construction (`ls`: its match lists so far).
pub(super) fn option(
    r: &mut Rule,
    name: &str,
    value: Option<&str>,
    ctx: &Ctx<'_>,
    sid: &mut Option<u32>,
    priority: &mut Option<u8>,
    ls: &mut Lists,
) -> Result<(), PErr> {
    let o = Opt { name, value };
    match name {
        "msg" | "sid" | "rev" | "gid" | "priority" | "classtype" | "reference" | "metadata"
        | "target" | "rawbytes" => meta_option(r, &o, ctx, sid, priority),
        "content" | "uricontent" | "nocase" | "offset" | "depth" | "distance" | "within"
        | "fast_pattern" | "startswith" | "endswith" | "pcre" => content_option(&o, ls),
        "isdataat" | "byte_test" | "byte_jump" | "byte_extract" | "bsize" | "urilen" => {
            numeric_option(&o, ls)
        }
        "noalert" | "bypass" | "flowbits" | "app-layer-protocol" | "stream-event" => {
            state_option(r, &o)
        }
        "dsize" | "ttl" | "itype" | "icode" | "flags" | "flow" | "threshold"
        | "detection_filter" | "rate" => header_option(r, &o),
        "pkt_data" => {
            o.flag()?;
            ls.set_sticky(None, name)
        }
        n if Buffer::from_modifier(n).is_some() => {
            o.flag()?;
            let b = Buffer::from_modifier(n).unwrap_or(Buffer::Payload);
            ls.move_last_payload_content(b, n)
        }
        n if Buffer::from_sticky(n).is_some() => {
            o.flag()?;
            ls.set_sticky(Buffer::from_sticky(n), n)
        }
        n if n.contains('.')
            || n.starts_with("http")
            || n.starts_with("dns")
            || n.starts_with("tls")
            || n.starts_with("file")
            || n.starts_with("ja3")
            || n.starts_with("ssh")
            || n.starts_with("smb")
            || n.starts_with("app-layer") =>
        {
            Err(kerr(
                n,
                "application-layer keyword not supported (relayd parses HTTP/1, DNS and TLS: see docs/ids.md for their buffers)",
            ))
        }
        n => Err(kerr(n, "unsupported keyword")),
    }
}

/// The rule's own facts: `msg`, `sid`, `rev`, `gid`, `priority`, `classtype`; and the
/// keywords read and ignored.
fn meta_option(
    r: &mut Rule,
    o: &Opt<'_>,
    ctx: &Ctx<'_>,
    sid: &mut Option<u32>,
    priority: &mut Option<u8>,
) -> Result<(), PErr> {
    let name = o.name;
    let need = || o.need();
    let num = |v: &str| -> Result<u32, PErr> {
        v.trim()
            .parse::<u32>()
            .map_err(|_| kerr(name, format!("`{v}` is not a number")))
    };
    match name {
        "msg" => r.msg = unescape(unquote(need()?).map_err(|m| kerr(name, m))?.1),
        "sid" => {
            let v = num(need()?)?;
            if v == 0 {
                return Err(kerr(name, "sid 0 is reserved"));
            }
            *sid = Some(v);
        }
        "rev" => r.rev = num(need()?)?,
        "gid" => r.gid = num(need()?)?,
        "priority" => {
            let p = num(need()?)?;
            if !(1..=255).contains(&p) {
                return Err(kerr(name, "priority is 1..255"));
            }
            *priority = Some(p as u8);
        }
        "classtype" => {
            let c = need()?.trim();
            let (desc, prio) = ctx
                .classes
                .get(c)
                .ok_or_else(|| kerr(name, format!("unknown classtype `{c}`")))?;
            r.classtype = Some(c.to_string());
            r.category = desc.clone();
            r.priority = *prio;
        }
        "reference" | "metadata" | "target" | "rawbytes" => {}
        _ => return Err(kerr(name, "unsupported keyword")),
    }
    Ok(())
}

/// `content` (and `uricontent`), its modifiers, and `pcre`.
fn content_option(o: &Opt<'_>, ls: &mut Lists) -> Result<(), PErr> {
    let name = o.name;
    let value = o.value;
    let need = || o.need();
    match name {
        "content" | "uricontent" => {
            let (neg, raw) = unquote(need()?).map_err(|m| kerr(name, m))?;
            let bytes = content_bytes(raw).map_err(|m| kerr(name, m))?;
            let b = ls.current();
            ls.push(b, Item::Content(Box::new(Content::new(bytes, neg))))
                .map_err(|m| kerr(name, m))?;
            if name == "uricontent" {
                // Suricata: `content` then the `http_uri` modifier.
                ls.move_last_payload_content(Buffer::HttpUri, name)?;
            }
        }
        "nocase" | "offset" | "depth" | "distance" | "within" | "fast_pattern" | "startswith"
        | "endswith" => {
            content_modifier(ls, name, value)?;
        }
        "pcre" => {
            let p = parse_pcre(need()?).map_err(|m| kerr(name, m))?;
            let b = match (p.buffer, ls.sticky()) {
                (Some(f), Some(s)) if f != s => {
                    return Err(kerr(
                        name,
                        format!(
                            "the pcre's buffer flag selects `{}` but the sticky buffer `{}` is in effect (write `pkt_data;` first)",
                            f.name(),
                            s.name()
                        ),
                    ));
                }
                (Some(f), _) => f,
                (None, _) => ls.current(),
            };
            if p.relative && ls.sticky().is_none() && !ls.has_match_in(b) {
                return Err(kerr(
                    name,
                    "pcre `R` (relative) needs a content or pcre before it in the same buffer",
                ));
            }
            let item = PcreItem {
                index: ls.pcres.len(),
                negated: p.negated,
                relative: p.relative,
                retry: false,
            };
            ls.pcres.push(p);
            ls.push(b, Item::Pcre(item)).map_err(|m| kerr(name, m))?;
        }
        _ => return Err(kerr(name, "unsupported keyword")),
    }
    Ok(())
}

/// The numeric payload keywords: `isdataat`, `byte_test`, `byte_jump`, `byte_extract`,
/// `bsize`, `urilen`.
fn numeric_option(o: &Opt<'_>, ls: &mut Lists) -> Result<(), PErr> {
    let name = o.name;
    let need = || o.need();
    match name {
        "isdataat" => {
            let d = parse_isdataat(need()?, ls).map_err(|m| kerr(name, m))?;
            let b = if d.relative {
                ls.relative_target()
            } else {
                ls.current()
            };
            // Suricata reads `isdataat:!1,relative` right after a content as `endswith`.
            if d.relative
                && d.negated
                && d.at == Num::Lit(1)
                && let Some(c) = ls.last_if_content_in(b)
            {
                c.endswith = true;
                return Ok(());
            }
            ls.push(b, Item::IsDataAt(d)).map_err(|m| kerr(name, m))?;
        }
        "byte_test" | "byte_jump" | "byte_extract" => {
            let v = need()?;
            let item = match name {
                "byte_test" => Item::ByteTest(parse_byte_test(v, ls).map_err(|m| kerr(name, m))?),
                "byte_jump" => Item::ByteJump(parse_byte_jump(v, ls).map_err(|m| kerr(name, m))?),
                _ => Item::ByteExtract(parse_byte_extract(v, ls).map_err(|m| kerr(name, m))?),
            };
            let b = if item.relative() {
                ls.relative_target()
            } else {
                ls.current()
            };
            ls.push(b, item).map_err(|m| kerr(name, m))?;
        }
        "bsize" => {
            let Some(b) = ls.sticky() else {
                return Err(kerr(
                    name,
                    "bsize needs a sticky buffer before it (it measures that buffer)",
                ));
            };
            let cmp = parse_uint(need()?, u64::MAX).map_err(|m| kerr(name, m))?;
            ls.push(b, Item::Bsize(Bsize { cmp, urilen: false }))
                .map_err(|m| kerr(name, m))?;
        }
        "urilen" => {
            let (cmp, raw) = parse_urilen(need()?).map_err(|m| kerr(name, m))?;
            let b = if raw {
                Buffer::HttpUriRaw
            } else {
                Buffer::HttpUri
            };
            ls.push(b, Item::Bsize(Bsize { cmp, urilen: true }))
                .map_err(|m| kerr(name, m))?;
        }
        _ => return Err(kerr(name, "unsupported keyword")),
    }
    Ok(())
}

/// Flow state and alerting: `noalert`, `bypass`, `flowbits`, `app-layer-protocol`,
/// `stream-event`.
fn state_option(r: &mut Rule, o: &Opt<'_>) -> Result<(), PErr> {
    let name = o.name;
    let need = || o.need();
    let flag = || o.flag();
    match name {
        "noalert" => {
            flag()?;
            r.noalert = true;
        }
        "bypass" => {
            flag()?;
            r.bypass = true;
        }
        "flowbits" => match parse_flowbits(need()?).map_err(|m| kerr(name, m))? {
            None => r.noalert = true,
            Some(op) => {
                let contra = |a, b| {
                    op.cmd == a
                        && op.names.len() == 1
                        && r.flowbits.iter().any(|o| o.cmd == b && o.names == op.names)
                };
                if contra(FlowbitCmd::IsSet, FlowbitCmd::IsNotSet)
                    || contra(FlowbitCmd::IsNotSet, FlowbitCmd::IsSet)
                {
                    return Err(kerr(
                        name,
                        format!(
                            "isset and isnotset of `{}` can never both hold",
                            op.names[0]
                        ),
                    ));
                }
                r.flowbits.push(op);
            }
        },
        "app-layer-protocol" => {
            let t = parse_app_test(need()?).map_err(|m| kerr(name, m))?;
            if r.app_test.iter().any(|x| x.1 == t.1) {
                return Err(kerr(name, format!("`{}` is tested twice", t.1.name())));
            }
            r.app_test.push(t);
        }
        "stream-event" => {
            let v = need()?.trim();
            let e = crate::flow::StreamEvent::by_name(v).ok_or_else(|| {
                kerr(
                    name,
                    format!(
                        "`{v}` is not an event relayd raises (it raises reassembly_overlap_different_data, pkt_invalid_timestamp, est_packet_out_of_window, rst_invalid)"
                    ),
                )
            })?;
            r.stream_events |= e.bit();
        }
        _ => return Err(kerr(name, "unsupported keyword")),
    }
    Ok(())
}

/// Header tests (`dsize`, `ttl`, `itype`, `icode`, `flags`, `flow`) and the rule's
/// thresholds (`threshold`, `detection_filter`, `rate`).
fn header_option(r: &mut Rule, o: &Opt<'_>) -> Result<(), PErr> {
    let name = o.name;
    let need = || o.need();
    match name {
        "dsize" => set_once(
            &mut r.dsize,
            parse_cmp(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "ttl" => set_once(
            &mut r.ttl,
            parse_cmp(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "itype" => set_once(
            &mut r.itype,
            parse_cmp(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "icode" => set_once(
            &mut r.icode,
            parse_cmp(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "flags" => set_once(
            &mut r.flags,
            parse_flags(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "flow" => set_once(
            &mut r.flow,
            parse_flow(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "threshold" => {
            let t = parse_threshold(need()?).map_err(|m| kerr(name, m))?;
            set_once(&mut r.threshold, t, name)?
        }
        "detection_filter" => {
            let ported = matches!(
                r.proto,
                RuleProto::Tcp | RuleProto::Udp | RuleProto::TcpOrUdp
            );
            let f = parse_detection_filter(need()?, ported).map_err(|m| kerr(name, m))?;
            set_once(&mut r.filter, f, name)?
        }
        "rate" => set_once(
            &mut r.rate,
            parse_rate(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        _ => return Err(kerr(name, "unsupported keyword")),
    }
    Ok(())
}

fn set_once<T>(slot: &mut Option<T>, v: T, name: &str) -> Result<(), PErr> {
    if slot.replace(v).is_some() {
        return Err(kerr(name, "given twice"));
    }
    Ok(())
}
