//! The match lists while a rule is parsed: which buffer each payload keyword goes to
//! (sticky buffers, legacy content modifiers, pcre flags, relative keywords), moving a
//! content to another buffer, `byte_extract` variables, and the checks and flags that
//! need the whole rule (variables defined before use, `bsize` against the contents, the
//! backtracking flags the inspector reads).

use super::{PErr, kerr};
use crate::applayer::buffer::Buffer;
use crate::rules::bytes::{Bsize, MAX_ITEMS};
use crate::rules::rule::{Content, Item, MAX_VARS, MatchList, Num, Pcre};

/// A keyword in a list, with its place in the rule (Suricata's sigmatch `idx`: a content
/// moved to another buffer keeps it, so modifiers still find "the last content").
struct Slot {
    seq: u32,
    item: Item,
}

/// The lists of one rule under construction.
#[derive(Default)]
pub(super) struct Lists {
    lists: Vec<(Buffer, Vec<Slot>)>,
    /// The sticky buffer in effect (`None`: none named, or `pkt_data`).
    sticky: Option<Buffer>,
    /// Whether the sticky buffer has received a keyword since it was named.
    sticky_used: bool,
    seq: u32,
    /// `byte_extract` variable names, by slot.
    vars: Vec<String>,
    /// The rule's pcres (items refer to them by index).
    pub(super) pcres: Vec<Pcre>,
}

impl Lists {
    /// The buffer a content (or pcre without a buffer flag) goes to now.
    pub(super) fn current(&self) -> Buffer {
        self.sticky.unwrap_or(Buffer::Payload)
    }

    /// The sticky buffer in effect, if any.
    pub(super) fn sticky(&self) -> Option<Buffer> {
        self.sticky
    }

    /// A sticky-buffer keyword (`http.uri;`, `pkt_data;` = `None`).
    pub(super) fn set_sticky(&mut self, b: Option<Buffer>, kw: &str) -> Result<(), PErr> {
        if let Some(prev) = self.sticky
            && !self.sticky_used
        {
            return Err(kerr(
                kw,
                format!("the sticky buffer `{}` before it has no match", prev.name()),
            ));
        }
        self.sticky = b;
        self.sticky_used = false;
        Ok(())
    }

    /// Appends `item` to the list of buffer `b` (created on first use).
    pub(super) fn push(&mut self, b: Buffer, item: Item) -> Result<(), String> {
        let seq = self.seq;
        self.seq += 1;
        if self.sticky == Some(b) {
            self.sticky_used = true;
        }
        let list = self.list_mut(b);
        if list.len() >= MAX_ITEMS {
            return Err(format!("more than {MAX_ITEMS} keywords on one buffer"));
        }
        list.push(Slot { seq, item });
        Ok(())
    }

    /// The list of buffer `b`, created empty at the end if the rule has none yet.
    fn list_mut(&mut self, b: Buffer) -> &mut Vec<Slot> {
        let i = match self.lists.iter().position(|(lb, _)| *lb == b) {
            Some(i) => i,
            None => {
                self.lists.push((b, Vec::new()));
                self.lists.len() - 1
            }
        };
        &mut self.lists[i].1
    }

    /// The most recent slot (any list) passing `f`: (list, index).
    fn last_where(&self, f: impl Fn(&Item) -> bool) -> Option<(usize, usize)> {
        let mut best: Option<(u32, usize, usize)> = None;
        for (l, (_, slots)) in self.lists.iter().enumerate() {
            for (i, s) in slots.iter().enumerate() {
                if f(&s.item) && best.is_none_or(|b| s.seq > b.0) {
                    best = Some((s.seq, l, i));
                }
            }
        }
        best.map(|(_, l, i)| (l, i))
    }

    /// The content the next content modifier applies to: the last one named, whatever its
    /// buffer.
    pub(super) fn last_content_mut(&mut self) -> Option<&mut Content> {
        let (l, i) = self.last_where(|it| matches!(it, Item::Content(_)))?;
        match &mut self.lists[l].1[i].item {
            Item::Content(c) => Some(c),
            _ => None,
        }
    }

    /// The contents of the rule, for checks over all of them.
    pub(super) fn contents(&self) -> impl Iterator<Item = &Content> {
        self.lists
            .iter()
            .flat_map(|(_, s)| s)
            .filter_map(|s| match &s.item {
                Item::Content(c) => Some(&**c),
                _ => None,
            })
    }

    /// A legacy content modifier (`content:"x"; http_uri;`): moves the last payload content,
    /// with its modifiers, to the end of buffer `to`'s list.
    pub(super) fn move_last_payload_content(&mut self, to: Buffer, kw: &str) -> Result<(), PErr> {
        if let Some(s) = self.sticky {
            return Err(kerr(
                kw,
                format!(
                    "a content modifier cannot follow the sticky buffer `{}` (write `pkt_data;` before the content)",
                    s.name()
                ),
            ));
        }
        let from = self.lists.iter().position(|(b, _)| *b == Buffer::Payload);
        let found = from.and_then(|l| {
            let slots = &self.lists[l].1;
            let i = slots
                .iter()
                .enumerate()
                .filter(|(_, s)| matches!(s.item, Item::Content(_)))
                .max_by_key(|(_, s)| s.seq)?
                .0;
            Some((l, i))
        });
        let Some((l, i)) = found else {
            return Err(kerr(kw, "a content modifier needs a `content` before it"));
        };
        let slot = self.lists[l].1.remove(i);
        if self.lists[l].1.is_empty() {
            // The buffer was named only by the content now moved: it takes no place in the
            // order of lists.
            self.lists.remove(l);
        }
        let list = self.list_mut(to);
        if list.len() >= MAX_ITEMS {
            return Err(kerr(
                kw,
                format!("more than {MAX_ITEMS} keywords on one buffer"),
            ));
        }
        list.push(slot);
        Ok(())
    }

    /// The buffer a relative `isdataat` / `byte_*` goes to without a sticky buffer: that of
    /// the keyword before it (Suricata's `SCDetectGetLastSMFromLists`), else the payload.
    pub(super) fn relative_target(&self) -> Buffer {
        if let Some(s) = self.sticky {
            return s;
        }
        self.last_where(|it| !matches!(it, Item::Bsize(_)))
            .map_or(Buffer::Payload, |(l, _)| self.lists[l].0)
    }

    /// For `isdataat:!1,relative` (Suricata's `endswith` in disguise): the content just
    /// before it in list `b`, if the keyword before it is a content.
    pub(super) fn last_if_content_in(&mut self, b: Buffer) -> Option<&mut Content> {
        let (l, i) = self.last_where(|it| !matches!(it, Item::Bsize(_)))?;
        if self.lists[l].0 != b {
            return None;
        }
        match &mut self.lists[l].1[i].item {
            Item::Content(c) => Some(c),
            _ => None,
        }
    }

    /// True if list `b` has a content or pcre (pcre `R` needs one before it).
    pub(super) fn has_match_in(&self, b: Buffer) -> bool {
        self.lists.iter().any(|(lb, s)| {
            *lb == b
                && s.iter()
                    .any(|s| matches!(s.item, Item::Content(_) | Item::Pcre(_)))
        })
    }

    /// Parses a number that may name a variable: `what` is checked for range by `range`.
    pub(super) fn num(&self, v: &str, range: (i64, i64)) -> Result<Num, String> {
        let v = v.trim();
        if v.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return self
                .vars
                .iter()
                .position(|n| n == v)
                .map(|i| Num::Var(i as u8))
                .ok_or_else(|| format!("`{v}` is not a byte_extract variable defined before"));
        }
        let n: i64 = v.parse().map_err(|_| format!("`{v}` is not a number"))?;
        if !(range.0..=range.1).contains(&n) {
            return Err(format!("{n} is out of range ({} to {})", range.0, range.1));
        }
        Ok(Num::Lit(n))
    }

    /// Defines a `byte_extract` variable: its slot.
    pub(super) fn define_var(&mut self, name: &str) -> Result<u8, String> {
        if !name.starts_with(|c: char| c.is_ascii_alphabetic())
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "variable name `{name}` must start with a letter (letters, digits, _ and -)"
            ));
        }
        if self.vars.iter().any(|n| n == name) {
            return Err(format!("variable `{name}` is defined twice"));
        }
        if self.vars.len() >= MAX_VARS {
            return Err(format!("more than {MAX_VARS} byte_extract variables"));
        }
        self.vars.push(name.to_string());
        Ok((self.vars.len() - 1) as u8)
    }

    /// The finished lists: empty ones dropped, variables checked, `bsize` checked against
    /// the contents, and the backtracking flags set.
    pub(super) fn finish(self) -> Result<(Vec<MatchList>, Vec<Pcre>), PErr> {
        if let Some(s) = self.sticky
            && !self.sticky_used
        {
            return Err(kerr(s.name(), "the sticky buffer has no match after it"));
        }
        let mut out = Vec::new();
        for (buffer, slots) in self.lists {
            if slots.is_empty() {
                continue;
            }
            let mut items: Vec<Item> = slots.into_iter().map(|s| s.item).collect();
            check_vars(&items, &self.vars)?;
            check_bsize(&items)?;
            if buffer == Buffer::HttpHost {
                check_host(&items)?;
            }
            set_flags(&mut items);
            out.push(MatchList { buffer, items });
        }
        Ok((out, self.pcres))
    }
}

/// Every variable a keyword reads is extracted earlier in the same list: the inspector
/// fills [`crate::rules::rule::Vars`] in list order, and lists are inspected one by one.
fn check_vars(items: &[Item], names: &[String]) -> Result<(), PErr> {
    let mut defined = 0u32;
    for it in items {
        let uses: [Option<Num>; 4] = match it {
            Item::Content(c) => [c.offset, c.depth, c.distance, c.within],
            Item::IsDataAt(d) => [Some(d.at), None, None, None],
            Item::ByteTest(t) => [Some(t.nbytes), Some(t.value), Some(t.offset), None],
            Item::ByteJump(j) => [Some(j.nbytes), Some(j.offset), None, None],
            _ => [None; 4],
        };
        for v in uses.iter().flatten().filter_map(|n| n.var()) {
            if defined & (1 << v) == 0 {
                let name = names.get(usize::from(v)).map_or("?", String::as_str);
                return Err(kerr(
                    name,
                    "a byte_extract variable is used only after its byte_extract in the same buffer",
                ));
            }
        }
        if let Item::ByteExtract(e) = it {
            defined |= 1 << e.var;
        }
    }
    Ok(())
}

/// Suricata refuses a `bsize` the list's contents cannot fit in
/// (`DetectBsizeValidateContentCallback` with `SigParseRequiredContentSize`).
fn check_bsize(items: &[Item]) -> Result<(), PErr> {
    let Some(max) = items.iter().find_map(|it| match it {
        Item::Bsize(Bsize { cmp, urilen: false }) => Some(cmp.max()),
        _ => None,
    }) else {
        return Ok(());
    };
    let Some(max) = max else { return Ok(()) };
    let lit = |n: Option<Num>| match n {
        Some(Num::Lit(v)) => v,
        _ => 0,
    };
    let (mut total, mut max_offset, mut first) = (0i64, 0i64, true);
    for c in items.iter().filter_map(|it| match it {
        Item::Content(c) => Some(c),
        _ => None,
    }) {
        if !first {
            if !c.relative() {
                continue;
            }
            if c.negated {
                let check = total + lit(c.distance) + lit(c.within);
                if check > max as i64 {
                    return Err(bsize_err(check, max));
                }
                continue;
            }
        }
        total += c.pat.len() as i64 + lit(c.distance);
        max_offset = max_offset.max(lit(c.offset));
        first = false;
    }
    if total > max as i64 {
        return Err(bsize_err(total, max));
    }
    if total + max_offset > max as i64 {
        return Err(bsize_err(total + max_offset, max));
    }
    Ok(())
}

fn bsize_err(need: i64, max: u64) -> PErr {
    kerr(
        "bsize",
        format!(
            "the contents need {need} bytes, more than bsize allows ({max}): the rule can never match"
        ),
    )
}

/// The `http.host` buffer is lowercase: a content with capitals (without `nocase`) could
/// never match, and Suricata refuses it.
fn check_host(items: &[Item]) -> Result<(), PErr> {
    for it in items {
        if let Item::Content(c) = it
            && !c.nocase
            && c.pat.iter().any(u8::is_ascii_uppercase)
        {
            return Err(kerr(
                "http.host",
                "the buffer is lowercase: write the content in lowercase (or add nocase)",
            ));
        }
    }
    Ok(())
}

/// Sets the flags that tell the inspector when to try a content or pcre at its next
/// occurrence (Suricata sets them while parsing: `WITHIN_NEXT`, `DISTANCE_NEXT`,
/// `RELATIVE_NEXT`): the next content or pcre of the list is placed from its end, or the
/// keyword right after it is a relative `isdataat` / `byte_*`.
fn set_flags(items: &mut [Item]) {
    let n = items.len();
    for i in 0..n {
        if !matches!(items[i], Item::Content(_) | Item::Pcre(_)) {
            continue;
        }
        let next = items
            .get(i + 1..)
            .unwrap_or(&[])
            .iter()
            .find(|it| matches!(it, Item::Content(_) | Item::Pcre(_)));
        // (a within-like dependency, any dependency)
        let (within, any) = match next {
            Some(Item::Content(c)) => (
                c.within.is_some() || (c.negated && c.distance.is_some()),
                c.relative(),
            ),
            Some(Item::Pcre(p)) => (p.relative, p.relative),
            _ => (false, false),
        };
        let byte = items
            .get(i + 1)
            .is_some_and(|it| it.relative() && !matches!(it, Item::Content(_) | Item::Pcre(_)));
        match &mut items[i] {
            Item::Content(c) => {
                c.retry = within || byte;
                c.rel_next = any || byte;
            }
            Item::Pcre(p) => p.retry = any || byte,
            _ => {}
        }
    }
}
