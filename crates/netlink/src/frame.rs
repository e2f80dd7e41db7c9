//! Netlink framing, for every netlink family relayd speaks (rtnetlink here, nfnetlink_queue
//! in relay-nfq): the message header (`struct nlmsghdr`), iteration over the messages of
//! a datagram and over the attributes of a message (`struct nlattr`), their building, and
//! the 4-byte alignment both follow (netlink(7), include/uapi/linux/netlink.h).
//!
//! Reading never panics and never reads past its buffer: an inconsistent length ends the
//! iteration ([`Messages`] stops quietly; [`Attrs`] also says so with [`Attrs::damaged`]),
//! and every accessor returns `None` for bytes that are not there. Header fields are in
//! host byte order, as the kernel writes them; attribute payloads are the family's
//! business (nfnetlink_queue's are big-endian).

use std::io;

/// Bytes of a `struct nlmsghdr`.
pub const NLMSG_HDRLEN: usize = 16;
/// Bytes of a `struct nlattr` (length and type).
pub const NLA_HDRLEN: usize = 4;

/// Message type: an error or an acknowledgement (`struct nlmsgerr`, error 0).
pub const NLMSG_ERROR: u16 = 2;
/// Message type: the end of a dump.
pub const NLMSG_DONE: u16 = 3;

/// Header flag: a request.
pub const NLM_F_REQUEST: u16 = 1;
/// Header flag: acknowledge the request with an `NLMSG_ERROR` of error 0.
pub const NLM_F_ACK: u16 = 4;
/// Header flags: dump everything (`NLM_F_ROOT | NLM_F_MATCH`).
pub const NLM_F_DUMP: u16 = 0x300;

/// The attribute type bits, without `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER`.
pub const NLA_TYPE_MASK: u16 = 0x3fff;

/// `n` rounded up to netlink's 4-byte alignment (`NLMSG_ALIGN`, `NLA_ALIGN`).
#[inline]
pub const fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// A netlink message header (`struct nlmsghdr`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Header {
    /// Length of the message, header included (padding excluded).
    pub len: u32,
    /// Message type (for nfnetlink: subsystem << 8 | message).
    pub ty: u16,
    /// `NLM_F_*` flags.
    pub flags: u16,
    /// Sequence number, echoed in the answer.
    pub seq: u32,
    /// Port id of the sender (0: the kernel).
    pub pid: u32,
}

impl Header {
    /// The header as it goes on the wire.
    pub fn to_bytes(&self) -> [u8; NLMSG_HDRLEN] {
        let mut b = [0u8; NLMSG_HDRLEN];
        b[0..4].copy_from_slice(&self.len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.ty.to_ne_bytes());
        b[6..8].copy_from_slice(&self.flags.to_ne_bytes());
        b[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        b[12..16].copy_from_slice(&self.pid.to_ne_bytes());
        b
    }

    /// The header at the start of `b`, if `b` holds one (its length is not checked
    /// against `b`: a datagram cut short still tells its type).
    pub fn parse(b: &[u8]) -> Option<Header> {
        let b = b.get(..NLMSG_HDRLEN)?;
        Some(Header {
            len: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            ty: u16::from_ne_bytes([b[4], b[5]]),
            flags: u16::from_ne_bytes([b[6], b[7]]),
            seq: u32::from_ne_bytes([b[8], b[9], b[10], b[11]]),
            pid: u32::from_ne_bytes([b[12], b[13], b[14], b[15]]),
        })
    }
}

/// One netlink message inside a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// Its header.
    pub header: Header,
    /// Offset of `payload` in the datagram.
    pub offset: usize,
    /// The bytes after the header, up to the message's length.
    pub payload: &'a [u8],
}

impl Message<'_> {
    /// The message type.
    pub fn ty(&self) -> u16 {
        self.header.ty
    }

    /// The sequence number.
    pub fn seq(&self) -> u32 {
        self.header.seq
    }

    /// For an `NLMSG_ERROR` message, its error: 0 for an acknowledgement, else a negative
    /// errno (see [`os_error`]). `None` for other messages and a payload too short.
    pub fn error(&self) -> Option<i32> {
        if self.header.ty != NLMSG_ERROR {
            return None;
        }
        let e = self.payload.get(..4)?;
        Some(i32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
    }
}

/// The error a netlink `NLMSG_ERROR` code (a negative errno) stands for. Any value is
/// taken: `i32::MIN`, which has no negation, gives some error rather than a panic.
pub fn os_error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code.saturating_neg())
}

/// Iterates the messages of a datagram; stops at the first inconsistent length (shorter
/// than a header, or past the datagram's end).
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    buf: &'a [u8],
    off: usize,
}

impl<'a> Messages<'a> {
    /// The messages of `buf`.
    pub fn new(buf: &'a [u8]) -> Messages<'a> {
        Messages { buf, off: 0 }
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Message<'a>;

    fn next(&mut self) -> Option<Message<'a>> {
        let b = self.buf.get(self.off..)?;
        let header = Header::parse(b)?;
        let len = header.len as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            self.off = self.buf.len();
            return None;
        }
        let m = Message {
            header,
            offset: self.off + NLMSG_HDRLEN,
            payload: &b[NLMSG_HDRLEN..len],
        };
        self.off += align(len);
        Some(m)
    }
}

/// One attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    /// Its type, without the nested and byte-order flags ([`NLA_TYPE_MASK`]).
    pub ty: u16,
    /// Offset of `data` in the buffer iterated.
    pub offset: usize,
    /// Its payload.
    pub data: &'a [u8],
}

impl Attr<'_> {
    /// The payload's first four bytes as a big-endian `u32` (nfnetlink's byte order).
    pub fn be32(&self) -> Option<u32> {
        Some(u32::from_be_bytes(self.data.get(..4)?.try_into().ok()?))
    }

    /// The `u32` at `at` in the payload, in host byte order (rtnetlink's).
    pub fn ne32_at(&self, at: usize) -> Option<u32> {
        ne32_at(self.data, at)
    }
}

/// The `u32` at `at` in `b`, in host byte order.
pub fn ne32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// Iterates the attributes in a buffer (a message's payload after its family header, or a
/// nested attribute's payload). Stops at the first attribute whose length is shorter than
/// its header or runs past the buffer, and then reports [`Attrs::damaged`]; 1 to 3 bytes
/// left at the end are padding, not damage.
#[derive(Debug, Clone)]
pub struct Attrs<'a> {
    buf: &'a [u8],
    off: usize,
    damaged: bool,
}

impl<'a> Attrs<'a> {
    /// The attributes in `buf`.
    pub fn new(buf: &'a [u8]) -> Attrs<'a> {
        Attrs {
            buf,
            off: 0,
            damaged: false,
        }
    }

    /// True once the iteration met an inconsistent length (the attributes after it, if
    /// any, were not read).
    pub fn damaged(&self) -> bool {
        self.damaged
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Attr<'a>;

    fn next(&mut self) -> Option<Attr<'a>> {
        let b = self.buf.get(self.off..)?;
        if b.len() < NLA_HDRLEN {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > b.len() {
            self.damaged = true;
            self.off = self.buf.len();
            return None;
        }
        let a = Attr {
            ty,
            offset: self.off + NLA_HDRLEN,
            data: &b[NLA_HDRLEN..len],
        };
        self.off += align(len);
        Some(a)
    }
}

/// The header of an attribute of type `ty` with `data_len` bytes of payload. Netlink
/// lengths are 16 bits: a longer payload is the caller's error (nfnetlink_queue's
/// verdicts check it before).
pub fn attr_header(ty: u16, data_len: usize) -> [u8; NLA_HDRLEN] {
    let len = (NLA_HDRLEN + data_len).min(u16::MAX as usize) as u16;
    let mut b = [0u8; NLA_HDRLEN];
    b[0..2].copy_from_slice(&len.to_ne_bytes());
    b[2..4].copy_from_slice(&ty.to_ne_bytes());
    b
}

/// Appends an attribute of type `ty` carrying `data` to `out`, padded to alignment.
pub fn put_attr(out: &mut Vec<u8>, ty: u16, data: &[u8]) {
    out.extend_from_slice(&attr_header(ty, data.len()));
    out.extend_from_slice(data);
    out.resize(align(out.len()), 0);
}

/// Builds one netlink message in a growable buffer: the header, the family's fixed
/// header, attributes; [`Builder::finish`] writes the length. For setup paths and tests;
/// the hot path writes into fixed buffers with [`Header::to_bytes`] and [`attr_header`].
#[derive(Debug, Clone)]
pub struct Builder {
    buf: Vec<u8>,
}

impl Builder {
    /// A message of type `ty` with `flags` and sequence number `seq`.
    pub fn new(ty: u16, flags: u16, seq: u32) -> Builder {
        let mut buf = Vec::with_capacity(64);
        let header = Header {
            len: 0,
            ty,
            flags,
            seq,
            pid: 0,
        };
        buf.extend_from_slice(&header.to_bytes());
        Builder { buf }
    }

    /// Appends `bytes` as they are (a family header such as nfgenmsg or tcmsg), padded to
    /// alignment.
    pub fn push(&mut self, bytes: &[u8]) -> &mut Builder {
        self.buf.extend_from_slice(bytes);
        self.buf.resize(align(self.buf.len()), 0);
        self
    }

    /// Appends an attribute.
    pub fn attr(&mut self, ty: u16, data: &[u8]) -> &mut Builder {
        put_attr(&mut self.buf, ty, data);
        self
    }

    /// The message, its length written in.
    pub fn finish(&mut self) -> &[u8] {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_reads_back_messages_and_attributes() {
        let mut nested = Vec::new();
        put_attr(&mut nested, 1, &7u32.to_ne_bytes());
        let mut m = Builder::new(0x301, NLM_F_REQUEST | NLM_F_ACK, 42);
        m.push(&[2, 0, 0, 9])
            .attr(5, b"abc")
            .attr(0x8000 | 6, &nested);
        let first = m.finish().to_vec();
        assert_eq!(first.len(), 16 + 4 + 8 + 12);
        let mut d = first.clone();
        d.extend_from_slice(Builder::new(NLMSG_DONE, 0, 42).finish());

        let msgs: Vec<_> = Messages::new(&d).collect();
        assert_eq!(msgs.len(), 2);
        let h = msgs[0].header;
        assert_eq!(
            (h.len as usize, h.ty, h.flags, h.seq),
            (first.len(), 0x301, 5, 42)
        );
        assert_eq!(
            (msgs[0].offset, msgs[1].ty(), msgs[1].seq()),
            (16, NLMSG_DONE, 42)
        );
        assert_eq!(&msgs[0].payload[..4], &[2, 0, 0, 9]);

        let mut attrs = Attrs::new(&msgs[0].payload[4..]);
        let a = attrs.next().unwrap();
        assert_eq!((a.ty, a.offset, a.data), (5, 4, &b"abc"[..]));
        let n = attrs.next().unwrap();
        assert_eq!(n.ty, 6, "the nested flag is masked off");
        let inner: Vec<_> = Attrs::new(n.data).collect();
        assert_eq!((inner.len(), inner[0].ne32_at(0)), (1, Some(7)));
        assert!(attrs.next().is_none() && !attrs.damaged());
    }

    #[test]
    fn errors_and_acknowledgements() {
        let mut m = Builder::new(NLMSG_ERROR, 0, 3);
        m.push(&(-libc::EBUSY).to_ne_bytes());
        let b = m.finish().to_vec();
        let msg = Messages::new(&b).next().unwrap();
        assert_eq!(msg.error(), Some(-libc::EBUSY));
        assert_eq!(os_error(-libc::EBUSY).raw_os_error(), Some(libc::EBUSY));
        // No negation of i32::MIN: still an error, no panic.
        assert!(os_error(i32::MIN).raw_os_error().is_some());
        let done = Builder::new(NLMSG_DONE, 0, 3).finish().to_vec();
        assert_eq!(Messages::new(&done).next().unwrap().error(), None);
    }

    #[test]
    fn bad_lengths_end_the_iteration_without_panicking() {
        let mut m = Builder::new(1, 0, 1);
        m.attr(1, &[1, 2, 3, 4]).attr(2, &[5; 9]);
        let b = m.finish().to_vec();
        for n in 0..b.len() {
            let _ = Messages::new(&b[..n]).count();
            let mut a = Attrs::new(&b[16..n.max(16)]);
            let _ = a.by_ref().count();
            let _ = a.damaged();
        }
        assert_eq!(Messages::new(&b[..b.len() - 1]).count(), 0, "cut short");
        let mut bad = b.clone();
        bad[16] = 2; // first attribute shorter than its header
        let mut a = Attrs::new(&bad[16..]);
        assert!(a.next().is_none() && a.damaged());
        bad[16] = 0xff; // and now past the end
        let mut a = Attrs::new(&bad[16..]);
        assert!(a.next().is_none() && a.damaged());
        let mut huge = b.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(Messages::new(&huge).count(), 0);
        assert_eq!(ne32_at(&b, usize::MAX - 1), None);
        // Padding at the end is no damage.
        let mut a = Attrs::new(&[8, 0, 1, 0, 9, 9, 9, 9, 0, 0]);
        assert_eq!(a.by_ref().count(), 1);
        assert!(!a.damaged());
    }
}
