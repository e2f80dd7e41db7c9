//! Content modifiers (`nocase`, `offset`, `depth`, `distance`, `within`, `startswith`,
//! `endswith`, `fast_pattern`): each applies to the last content named, whatever its
//! buffer, with Suricata's checks (detect-offset.c, detect-depth.c, detect-distance.c,
//! detect-within.c).

use super::lists::Lists;
use super::{PErr, kerr};
use crate::rules::rule::Num;

/// Largest `distance` / `within` (Suricata's `DETECT_CONTENT_VALUE_MAX`).
const CONTENT_VALUE_MAX: i64 = 1024 * 1024;

/// A content modifier (`nocase`, `offset`, ..., `endswith`): applies to the last content
/// named, whatever its buffer (Suricata's `SCDetectGetLastSMFromLists`). Numbers may name
/// `byte_extract` variables.
pub(super) fn content_modifier(
    ls: &mut Lists,
    name: &str,
    value: Option<&str>,
) -> Result<(), PErr> {
    let flag = || match value {
        None => Ok(()),
        Some(_) => Err(kerr(name, "takes no value")),
    };
    let need = || value.ok_or_else(|| kerr(name, "needs a value (`keyword:value;`)"));
    let range = match name {
        "offset" | "depth" => Some((0, i64::from(u16::MAX))),
        "distance" | "within" => Some((-CONTENT_VALUE_MAX, CONTENT_VALUE_MAX)),
        _ => None,
    };
    let n = match range {
        Some(range) => Some(ls.num(need()?, range).map_err(|m| kerr(name, m))?),
        None => None,
    };
    let c = ls
        .last_content_mut()
        .ok_or_else(|| kerr(name, "a content modifier needs a `content` before it"))?;
    let absolute = c.offset.is_some() || c.depth.is_some();
    let mixed = || {
        kerr(
            name,
            "offset/depth and distance/within cannot be mixed on one content",
        )
    };
    let dup = || kerr(name, "given twice for one content");
    let shorter = |n: Option<Num>, len: usize| matches!(n, Some(Num::Lit(v)) if v < len as i64);
    match (name, n) {
        ("nocase", _) => {
            flag()?;
            if c.nocase {
                return Err(dup());
            }
            c.set_nocase();
        }
        ("offset", n) => {
            if c.relative() {
                return Err(mixed());
            }
            if c.startswith {
                return Err(kerr(name, "offset cannot be mixed with startswith"));
            }
            if c.offset.replace(n.unwrap_or(Num::Lit(0))).is_some() {
                return Err(dup());
            }
        }
        ("depth", n) => {
            if c.relative() {
                return Err(mixed());
            }
            if c.startswith {
                return Err(kerr(name, "depth cannot be mixed with startswith"));
            }
            if shorter(n, c.pat.len()) {
                return Err(kerr(name, "depth is shorter than the content"));
            }
            if c.depth.replace(n.unwrap_or(Num::Lit(0))).is_some() {
                return Err(dup());
            }
        }
        ("distance", n) => {
            if absolute {
                return Err(mixed());
            }
            if c.distance.replace(n.unwrap_or(Num::Lit(0))).is_some() {
                return Err(dup());
            }
        }
        ("within", n) => {
            if absolute {
                return Err(mixed());
            }
            if shorter(n, c.pat.len()) {
                return Err(kerr(name, "within is shorter than the content"));
            }
            if c.within.replace(n.unwrap_or(Num::Lit(0))).is_some() {
                return Err(dup());
            }
        }
        ("startswith", _) => {
            flag()?;
            if c.relative() {
                return Err(mixed());
            }
            if c.offset.is_some() {
                return Err(kerr(name, "startswith cannot be mixed with offset"));
            }
            if c.depth.is_some() {
                return Err(kerr(name, "startswith cannot be mixed with depth"));
            }
            c.depth = Some(Num::Lit(c.pat.len() as i64));
            c.startswith = true;
        }
        ("endswith", _) => {
            flag()?;
            c.endswith = true;
        }
        _ => return fast_pattern(ls, name, value),
    }
    Ok(())
}

/// `fast_pattern` (or `fast_pattern:only`): the last content is the one the prefilter
/// looks for.
fn fast_pattern(ls: &mut Lists, name: &str, value: Option<&str>) -> Result<(), PErr> {
    match value.map(str::trim) {
        None | Some("only") => {}
        Some(_) => {
            return Err(kerr(
                name,
                "fast_pattern chopping (`fast_pattern:o,l`) is not supported",
            ));
        }
    }
    let c = ls
        .last_content_mut()
        .ok_or_else(|| kerr(name, "a content modifier needs a `content` before it"))?;
    if c.negated {
        return Err(kerr(name, "a negated content cannot be the fast pattern"));
    }
    c.fast_pattern = true;
    if ls.contents().filter(|c| c.fast_pattern).count() > 1 {
        return Err(kerr(name, "only one content may be the fast pattern"));
    }
    Ok(())
}
