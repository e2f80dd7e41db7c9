//! The MPLS label stack entry (RFC 3032 section 2.1) as a typed view over four bytes and
//! its high-level form [`LseRepr`], plus the constants of the two encapsulations relayd
//! speaks: MPLS-in-IP (RFC 4023, protocol [`super::proto::MPLS`]) and MPLS-in-UDP
//! (RFC 7510).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                Label                  | TC  |S|      TTL      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! [`Lse::new_checked`] and [`LseRepr::parse`] fail only on a buffer shorter than
//! [`HEADER_LEN`] ([`Malformed::Truncated`]); after the check no getter or setter panics.
//! Every 32-bit word is a valid entry (reserved labels are the caller's to refuse).

use super::Malformed;

/// Length of one label stack entry.
pub const HEADER_LEN: usize = 4;
/// UDP destination port of MPLS-in-UDP (RFC 7510 section 3).
pub const UDP_PORT: u16 = 6635;
/// The largest label value (20 bits).
pub const MAX_LABEL: u32 = (1 << 20) - 1;
/// Labels 0-15 are reserved (RFC 3032 section 2.1; RFC 7274): never a VCAN's label.
pub const FIRST_UNRESERVED_LABEL: u32 = 16;

/// A read/write view of one label stack entry.
#[derive(Debug, Clone, Copy)]
pub struct Lse<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Lse<T> {
    /// Wraps a buffer without checking it; getters panic if it is shorter than 4 bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        Lse { buffer }
    }

    /// Wraps a buffer holding at least one entry.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let l = Lse { buffer };
        l.check_len()?;
        Ok(l)
    }

    /// Checks that the buffer holds one entry.
    pub fn check_len(&self) -> Result<(), Malformed> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word(&self) -> u32 {
        super::ipv4::be32(self.buffer.as_ref(), 0..HEADER_LEN)
    }

    /// The 20-bit label.
    pub fn label(&self) -> u32 {
        self.word() >> 12
    }

    /// The 3-bit traffic class (RFC 5462, formerly EXP).
    pub fn tc(&self) -> u8 {
        ((self.word() >> 9) & 0x7) as u8
    }

    /// The bottom-of-stack bit.
    pub fn bottom(&self) -> bool {
        self.word() & 0x100 != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.word() as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Lse<T> {
    fn set_word(&mut self, w: u32) {
        self.buffer.as_mut()[..HEADER_LEN].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the label (only its low 20 bits are kept).
    pub fn set_label(&mut self, label: u32) {
        let w = (self.word() & 0xfff) | ((label & MAX_LABEL) << 12);
        self.set_word(w);
    }

    /// Sets the traffic class (only its low 3 bits are kept).
    pub fn set_tc(&mut self, tc: u8) {
        let w = (self.word() & !(0x7 << 9)) | (((tc & 0x7) as u32) << 9);
        self.set_word(w);
    }

    /// Sets the bottom-of-stack bit.
    pub fn set_bottom(&mut self, s: bool) {
        let w = (self.word() & !0x100) | ((s as u32) << 8);
        self.set_word(w);
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, ttl: u8) {
        let w = (self.word() & !0xff) | ttl as u32;
        self.set_word(w);
    }
}

/// The high-level form of a label stack entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LseRepr {
    /// Label, 0..=2^20-1.
    pub label: u32,
    /// Traffic class, 0..=7.
    pub tc: u8,
    /// Bottom of stack.
    pub bottom: bool,
    /// Time to live.
    pub ttl: u8,
}

impl LseRepr {
    /// Reads an entry (checking its length).
    pub fn parse<T: AsRef<[u8]>>(lse: &Lse<T>) -> Result<LseRepr, Malformed> {
        lse.check_len()?;
        Ok(LseRepr {
            label: lse.label(),
            tc: lse.tc(),
            bottom: lse.bottom(),
            ttl: lse.ttl(),
        })
    }

    /// The entry's length: 4.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the entry into `lse` (label and TC truncated to their widths).
    ///
    /// # Panics
    /// If `lse`'s buffer is shorter than 4 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, lse: &mut Lse<T>) {
        let w = ((self.label & MAX_LABEL) << 12)
            | (((self.tc & 0x7) as u32) << 9)
            | ((self.bottom as u32) << 8)
            | self.ttl as u32;
        lse.set_word(w);
    }

    /// The entry's four bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.emit(&mut Lse::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3032_layout() {
        // Label 100 (0x00064), TC 4, S=1, TTL 63: 0000 0000 0000 0110 0100 | 100 | 1 | 0011 1111
        let r = LseRepr {
            label: 100,
            tc: 4,
            bottom: true,
            ttl: 63,
        };
        assert_eq!(r.to_bytes(), [0x00, 0x06, 0x49, 0x3f]);
        let max = LseRepr {
            label: MAX_LABEL,
            tc: 7,
            bottom: false,
            ttl: 255,
        };
        assert_eq!(max.to_bytes(), [0xff, 0xff, 0xfe, 0xff]);
        let l = Lse::new_checked(&[0x00u8, 0x06, 0x49, 0x3f][..]).unwrap();
        assert_eq!(LseRepr::parse(&l), Ok(r));
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut b = [0xffu8; 4];
        let mut l = Lse::new_unchecked(&mut b[..]);
        l.set_label(0x12345);
        assert_eq!(
            (l.label(), l.tc(), l.bottom(), l.ttl()),
            (0x12345, 7, true, 255)
        );
        l.set_tc(2);
        l.set_bottom(false);
        l.set_ttl(9);
        assert_eq!(
            (l.label(), l.tc(), l.bottom(), l.ttl()),
            (0x12345, 2, false, 9)
        );
        assert_eq!(b, [0x12, 0x34, 0x54, 0x09]);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Lse::new_checked(&[0u8; 3][..]).unwrap_err(),
            Malformed::Truncated
        );
        assert_eq!(
            LseRepr::parse(&Lse::new_unchecked(&[0u8; 3][..])),
            Err(Malformed::Truncated)
        );
    }
}
