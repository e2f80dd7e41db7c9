//! The DNS wire format as far as detection needs it (RFC 1035 section 4): the 12-byte header,
//! question names with compression pointers, and the record framing of the answer section.
//!
//! Name decoding follows Suricata's `dns_parse_name` (rust/src/dns/parser.rs) so that
//! `dns.query` sees the same bytes: labels joined with `.`, bytes as on the wire (case kept,
//! no escaping, no trailing dot, the root name empty), compression pointers followed forward
//! or backward (a pointer to itself is an error unless a pointer was already followed), at
//! most 255 labels and pointers per name, and names longer than [`MAX_NAME_LEN`] truncated.
//! Every read is bounds-checked: malformed input is an error, never a panic.

use thiserror::Error;

/// The size of the DNS header.
pub(crate) const HEADER_LEN: usize = 12;

/// The longest name kept, in presentation bytes (Suricata's `MAX_NAME_LEN`, dnsmasq's limit).
pub(crate) const MAX_NAME_LEN: usize = 1025;

/// The most labels and pointers followed in one name (Suricata's loop guard).
const MAX_LABELS: usize = 255;

/// What can be wrong with a message's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub(crate) enum WireError {
    /// The message ends inside a name, a question or a record.
    #[error("message ends inside a name, question or record")]
    Truncated,
    /// A label length byte with the reserved top bits `01` or `10`.
    #[error("reserved label type")]
    LabelType,
    /// A compression pointer past the end of the message, or to itself.
    #[error("bad compression pointer")]
    Pointer,
    /// More than 255 labels and pointers without following a pointer first.
    #[error("too many labels")]
    LabelLimit,
}

/// The fixed header of a DNS message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The message id (matches a response to its query).
    pub(crate) id: u16,
    /// QR, opcode, AA, TC, RD, RA, Z, AD, CD and RCODE.
    pub(crate) flags: u16,
    /// Number of questions.
    pub(crate) questions: u16,
    /// Number of answer records.
    pub(crate) answers: u16,
    /// Number of authority records.
    pub(crate) authorities: u16,
    /// Number of additional records.
    pub(crate) additionals: u16,
}

fn be16(msg: &[u8], at: usize) -> Option<u16> {
    let b = msg.get(at..)?.first_chunk::<2>()?;
    Some(u16::from_be_bytes(*b))
}

impl Header {
    /// Reads the header at the start of `msg` (`None` if shorter than 12 bytes).
    pub(crate) fn parse(msg: &[u8]) -> Option<Header> {
        Some(Header {
            id: be16(msg, 0)?,
            flags: be16(msg, 2)?,
            questions: be16(msg, 4)?,
            answers: be16(msg, 6)?,
            authorities: be16(msg, 8)?,
            additionals: be16(msg, 10)?,
        })
    }

    /// True for a response (QR bit set).
    pub(crate) fn is_response(&self) -> bool {
        self.flags & 0x8000 != 0
    }

    /// Whether the header is plausible for a message of `len` bytes, as Suricata 8's
    /// `probe_header_validity`: two bytes at least per record counted, a message without
    /// records is exactly a header, and a request asks at least one question.
    pub(crate) fn plausible(&self, len: usize) -> bool {
        let records = usize::from(self.questions)
            + usize::from(self.answers)
            + usize::from(self.authorities)
            + usize::from(self.additionals);
        if 2 * records > len {
            return false;
        }
        if records == 0 && len > HEADER_LEN {
            return false;
        }
        // A request must ask something.
        self.is_response() || self.questions != 0
    }
}

/// Flags a name can carry without being an error (Suricata's `DNSNameFlags`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NameFlags {
    /// The name was longer than [`MAX_NAME_LEN`] and was cut.
    pub(crate) truncated: bool,
    /// A pointer to itself after a pointer had been followed: the name stops there.
    pub(crate) infinite_loop: bool,
    /// The label limit was hit after a pointer had been followed.
    pub(crate) label_limit: bool,
}

impl NameFlags {
    fn merge(&mut self, o: NameFlags) {
        self.truncated |= o.truncated;
        self.infinite_loop |= o.infinite_loop;
        self.label_limit |= o.label_limit;
    }
}

/// Decodes the name at `start` in `msg`, appending its presentation form to `out` when
/// given (up to [`MAX_NAME_LEN`] bytes). Returns the offset after the name as it sits in
/// the message (after the first pointer, if one was followed) and the name's flags.
pub(crate) fn parse_name(
    msg: &[u8],
    start: usize,
    mut out: Option<&mut Vec<u8>>,
) -> Result<(usize, NameFlags), WireError> {
    let mut pos = start;
    // The offset after the first pointer followed: where the caller's parsing resumes.
    let mut pivot: Option<usize> = None;
    let mut flags = NameFlags::default();
    let mut len = 0usize;
    let mut count = 0usize;
    let out_start = out.as_ref().map_or(0, |o| o.len());
    // As Suricata: the end of the message ends the name without an error.
    while let Some(&b) = msg.get(pos) {
        if b == 0 {
            pos += 1;
            break;
        } else if b & 0xc0 == 0 {
            let n = usize::from(b);
            let label = msg.get(pos + 1..pos + 1 + n).ok_or(WireError::Truncated)?;
            if !flags.truncated {
                let sep = usize::from(len > 0);
                len += sep + n;
                if let Some(o) = out.as_deref_mut() {
                    if sep == 1 {
                        o.push(b'.');
                    }
                    o.extend_from_slice(label);
                }
            }
            pos += 1 + n;
        } else if b & 0xc0 == 0xc0 {
            let ptr = be16(msg, pos).ok_or(WireError::Truncated)?;
            let offset = usize::from(ptr & 0x3fff);
            if offset > msg.len() {
                return Err(WireError::Pointer);
            }
            if offset == pos {
                flags.infinite_loop = true;
                if pivot.is_some() {
                    break;
                }
                return Err(WireError::Pointer);
            }
            if pivot.is_none() {
                pivot = Some(pos + 2);
            }
            pos = offset;
        } else {
            return Err(WireError::LabelType);
        }
        count += 1;
        if count > MAX_LABELS {
            flags.label_limit = true;
            if pivot.is_some() {
                flags.truncated = true;
                break;
            }
            return Err(WireError::LabelLimit);
        }
        if len > MAX_NAME_LEN {
            len = MAX_NAME_LEN;
            if let Some(o) = out.as_deref_mut() {
                o.truncate(out_start + MAX_NAME_LEN);
            }
            flags.truncated = true;
            if pivot.is_some() {
                break;
            }
        }
    }
    Ok((pivot.unwrap_or(pos), flags))
}

/// Walks the questions and answers of `msg` (whose header is `h`), calling `question` with
/// each question's name decoded into `scratch` (cleared for each); without `scratch` names
/// are checked, not decoded, and nothing is allocated. Answers are
/// checked for framing (name, type, class, TTL, RDATA within the message), not decoded.
/// Authority and additional records are not looked at: Suricata 8 tolerates them broken.
pub(crate) fn walk(
    msg: &[u8],
    h: &Header,
    mut scratch: Option<&mut Vec<u8>>,
    mut question: impl FnMut(&[u8]),
) -> Result<NameFlags, WireError> {
    let mut flags = NameFlags::default();
    let mut pos = HEADER_LEN;
    for _ in 0..h.questions {
        let (p, f) = match scratch.as_deref_mut() {
            Some(s) => {
                s.clear();
                parse_name(msg, pos, Some(s))?
            }
            None => parse_name(msg, pos, None)?,
        };
        flags.merge(f);
        // QTYPE and QCLASS.
        msg.get(p..p + 4).ok_or(WireError::Truncated)?;
        pos = p + 4;
        if let Some(s) = scratch.as_deref() {
            question(s);
        }
    }
    for _ in 0..h.answers {
        let (p, f) = parse_name(msg, pos, None)?;
        flags.merge(f);
        // TYPE, CLASS, TTL, RDLENGTH, then RDATA.
        let rdlen = be16(msg, p + 8).ok_or(WireError::Truncated)?;
        let end = p + 10 + usize::from(rdlen);
        if end > msg.len() {
            return Err(WireError::Truncated);
        }
        pos = end;
    }
    Ok(flags)
}

/// Suricata's `probe`: is `msg` (the start of a message that is `dlen` bytes long) DNS?
/// With the whole message, its header must be plausible and its questions and answers
/// parse; with less, the header alone decides.
pub(crate) fn probe(msg: &[u8], dlen: usize) -> bool {
    let msg = msg.get(..dlen).unwrap_or(msg);
    let Some(h) = Header::parse(msg) else {
        return false;
    };
    if msg.len() < dlen {
        return h.plausible(dlen);
    }
    h.plausible(dlen) && walk(msg, &h, None, |_| {}).is_ok()
}
