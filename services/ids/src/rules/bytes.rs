//! The numeric payload keywords: `isdataat`, `byte_test`, `byte_jump`, `byte_extract`,
//! `bsize` / `urilen`, what the parser makes of them and how each one is evaluated at a
//! cursor in a buffer, following Suricata's `detect-isdataat.c`, `detect-bytetest.c`,
//! `detect-bytejump.c`, `detect-byte-extract.c` and `detect-bsize.c`.
//!
//! Nothing here allocates or panics: every read of the buffer goes through `get`, and the
//! arithmetic on offsets is done in `i64` with saturation (values are at most 2^16 from
//! rules, or extracted 64-bit values clamped to `i64::MAX`).

/// Most keywords in one match list (the inspector recurses once per keyword).
pub(crate) const MAX_ITEMS: usize = 256;

/// Most `byte_extract` variables in one rule.
pub(crate) const MAX_VARS: usize = 16;

/// A number in a payload keyword, or the `byte_extract` variable holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Num {
    /// A number written in the rule (for `byte_test`'s value, the bits of a `u64`).
    Lit(i64),
    /// The slot of a variable in [`Vars`].
    Var(u8),
}

impl Num {
    /// The value as a signed number (an extracted value above `i64::MAX` reads as it).
    pub(crate) fn get(self, vars: &Vars) -> i64 {
        match self {
            Num::Lit(n) => n,
            Num::Var(i) => i64::try_from(vars.get(i)).unwrap_or(i64::MAX),
        }
    }

    /// The value's 64 bits as unsigned (`byte_test`'s comparison value).
    pub(crate) fn get_u64(self, vars: &Vars) -> u64 {
        match self {
            Num::Lit(n) => n as u64,
            Num::Var(i) => vars.get(i),
        }
    }

    /// The variable slot, if it names one.
    pub(crate) fn var(self) -> Option<u8> {
        match self {
            Num::Lit(_) => None,
            Num::Var(i) => Some(i),
        }
    }
}

/// The values `byte_extract` stored while one rule is inspected: a fixed array, so the
/// inspection allocates nothing. A variable is always written (earlier in its list) before
/// it is read; the parser checks that.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Vars([u64; MAX_VARS]);

impl Vars {
    /// The value in slot `i` (0 for a slot out of range, which the parser never makes).
    pub(crate) fn get(&self, i: u8) -> u64 {
        self.0.get(usize::from(i)).copied().unwrap_or(0)
    }

    /// Stores `v` in slot `i`.
    pub(crate) fn set(&mut self, i: u8, v: u64) {
        if let Some(s) = self.0.get_mut(usize::from(i)) {
            *s = v;
        }
    }
}

/// `isdataat:[!]N[,relative]`: is there a byte at offset N (from the cursor if relative)?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IsDataAt {
    pub(crate) at: Num,
    pub(crate) relative: bool,
    pub(crate) negated: bool,
}

/// How a byte keyword reads its number: `nbytes` raw bytes in an endianness, or up to
/// `nbytes` ASCII digits in a base (`string`; base 0 is C's auto-detection: `0x` hex,
/// leading `0` octal, else decimal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Big-endian (network order) bytes, the default.
    Big,
    /// Little-endian bytes.
    Little,
    /// ASCII digits in this base (0, 8, 10 or 16).
    String(u32),
}

/// A `bitmask` applied to an extracted value, with the right shift by its trailing zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bitmask {
    pub(crate) mask: u64,
    pub(crate) shift: u32,
}

impl Bitmask {
    /// The mask and the count of its trailing zero bits (Suricata shifts by them).
    pub(crate) fn new(mask: u64) -> Bitmask {
        Bitmask {
            mask,
            shift: if mask == 0 { 0 } else { mask.trailing_zeros() },
        }
    }

    fn apply(self, v: u64) -> u64 {
        let v = v & self.mask;
        if v != 0 { v >> self.shift } else { v }
    }
}

/// `byte_test`'s operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ByteOp {
    Lt,
    Gt,
    Eq,
    /// `&`: some bit in common.
    And,
    /// `^`: the values differ in some bit.
    Xor,
    Ge,
    Le,
}

/// `byte_test:bytes, [!]op, value, offset[, relative][, big|little][, string, hex|dec|oct][, bitmask M]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteTest {
    pub(crate) nbytes: Num,
    pub(crate) op: ByteOp,
    pub(crate) negated: bool,
    pub(crate) value: Num,
    pub(crate) offset: Num,
    pub(crate) relative: bool,
    pub(crate) enc: Encoding,
    pub(crate) bitmask: Option<Bitmask>,
}

/// Where `byte_jump` counts its jump from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JumpFrom {
    /// After the bytes read (the default).
    Read,
    /// `from_beginning`: the start of the buffer.
    Beginning,
    /// `from_end`: the end of the buffer.
    End,
}

/// `byte_jump:bytes, offset[, relative][, multiplier N][, big|little][, string, base]`
/// `[, align][, from_beginning|from_end][, post_offset N][, bitmask M]`: moves the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteJump {
    pub(crate) nbytes: Num,
    pub(crate) offset: Num,
    pub(crate) relative: bool,
    pub(crate) enc: Encoding,
    pub(crate) multiplier: u64,
    pub(crate) align: bool,
    pub(crate) from: JumpFrom,
    pub(crate) post_offset: i64,
    pub(crate) bitmask: Option<Bitmask>,
}

/// `byte_extract:bytes, offset, name[, relative][, multiplier N][, big|little]`
/// `[, string[, base]][, align 2|4]`: reads a value into variable `var` and moves the cursor
/// past the bytes read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteExtract {
    /// Bytes to read; 0 with `string` reads digits up to the end of the buffer.
    pub(crate) nbytes: u8,
    pub(crate) offset: i64,
    pub(crate) var: u8,
    pub(crate) relative: bool,
    pub(crate) enc: Encoding,
    pub(crate) multiplier: u64,
    /// Round the value up to a multiple of 2 or 4 (0: no rounding).
    pub(crate) align: u64,
}

/// How a comparison of Suricata's unsigned-integer keywords (`bsize`, `urilen`) tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UintMode {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Strictly between `a` and `b` (`a-b`, `a<>b`).
    Range,
    /// Not strictly between (`!a-b`).
    NegRange,
    /// `&a=b`: the bits of `a` are `b`.
    Bitmask,
    /// `&a!=b`.
    NegBitmask,
}

/// A Suricata unsigned-integer test (rust/src/detect/uint.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UintCmp {
    pub(crate) mode: UintMode,
    pub(crate) a: u64,
    pub(crate) b: u64,
}

impl UintCmp {
    /// True if `v` passes the test.
    pub(crate) fn test(self, v: u64) -> bool {
        let (a, b) = (self.a, self.b);
        match self.mode {
            UintMode::Eq => v == a,
            UintMode::Ne => v != a,
            UintMode::Lt => v < a,
            UintMode::Le => v <= a,
            UintMode::Gt => v > a,
            UintMode::Ge => v >= a,
            UintMode::Range => a < v && v < b,
            UintMode::NegRange => v <= a || v >= b,
            UintMode::Bitmask => v & a == b,
            UintMode::NegBitmask => v & a != b,
        }
    }

    /// The largest size the test admits, if it bounds it (for the rule-load check that the
    /// contents fit, as Suricata's `SigParseGetMaxBsize`).
    pub(crate) fn max(self) -> Option<u64> {
        match self.mode {
            UintMode::Lt | UintMode::Eq => Some(self.a),
            UintMode::Range => Some(self.b),
            _ => None,
        }
    }
}

/// `bsize` (the buffer's length) or `urilen` (the same, counted up to 65535).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bsize {
    pub(crate) cmp: UintCmp,
    /// `urilen`: lengths above 65535 count as 65535 (Suricata's u16).
    pub(crate) urilen: bool,
}

impl Bsize {
    pub(crate) fn test(self, len: usize) -> bool {
        let v = if self.urilen {
            len.min(usize::from(u16::MAX)) as u64
        } else {
            len as u64
        };
        self.cmp.test(v)
    }
}

/// C's `strtoull` over `s` (not NUL-terminated: it stops at the end): leading white space,
/// an optional sign (`-` negates, wrapping), `0x` for base 16 or 0, a leading `0` for
/// octal in base 0, then digits. Returns the value and the bytes consumed, or `None` if no
/// digit was read or the value overflows (`ERANGE`), as Suricata's `ByteExtractString`.
pub(crate) fn strtoull(s: &[u8], base: u32) -> Option<(u64, usize)> {
    let mut i = 0;
    while s
        .get(i)
        .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
    {
        i += 1;
    }
    let mut neg = false;
    if let Some(&c) = s.get(i)
        && (c == b'+' || c == b'-')
    {
        neg = c == b'-';
        i += 1;
    }
    let hex_prefix = |i: usize| {
        s.get(i) == Some(&b'0')
            && matches!(s.get(i + 1), Some(b'x' | b'X'))
            && s.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    };
    let mut base = base;
    if (base == 0 || base == 16) && hex_prefix(i) {
        base = 16;
        i += 2;
    } else if base == 0 {
        base = if s.get(i) == Some(&b'0') { 8 } else { 10 };
    }
    let start = i;
    let mut v: u64 = 0;
    while let Some(d) = s.get(i).and_then(|&c| (c as char).to_digit(base)) {
        v = v.checked_mul(u64::from(base))?.checked_add(u64::from(d))?;
        i += 1;
    }
    if i == start {
        return None;
    }
    Some((if neg { v.wrapping_neg() } else { v }, i))
}

/// Reads a number of `n` bytes at `at` in `buf` in encoding `enc`: (value, bytes consumed).
/// `n == 0` reads nothing (the value 0), or with a string encoding the digits up to the end
/// of the buffer.
fn read(buf: &[u8], at: usize, n: usize, enc: Encoding) -> Option<(u64, usize)> {
    match enc {
        Encoding::String(base) => {
            let s = if n == 0 {
                buf.get(at..)?
            } else {
                buf.get(at..at.checked_add(n)?)?
            };
            strtoull(s, base)
        }
        Encoding::Big | Encoding::Little => {
            if n > 8 {
                return None;
            }
            let b = buf.get(at..at.checked_add(n)?)?;
            let mut v = 0u64;
            if enc == Encoding::Big {
                for &x in b {
                    v = (v << 8) | u64::from(x);
                }
            } else {
                for &x in b.iter().rev() {
                    v = (v << 8) | u64::from(x);
                }
            }
            Some((v, n))
        }
    }
}

/// The largest byte count a keyword may read in encoding `enc` (Suricata: 8 raw bytes,
/// 23 string digits).
pub(crate) fn max_nbytes(enc: Encoding) -> i64 {
    match enc {
        Encoding::String(_) => 23,
        _ => 8,
    }
}

/// Where a byte keyword starts reading: `Some((position, bytes left from there))`, or
/// `None` if that is outside the buffer. Suricata: relative counts from the cursor and
/// needs data left after the offset; absolute counts from the start.
fn start(len: usize, cursor: usize, offset: i64, relative: bool) -> Option<(usize, i64)> {
    let base = if relative { cursor as i64 } else { 0 };
    let pos = base.saturating_add(offset);
    let left = (len as i64).saturating_sub(pos);
    if (relative && left <= 0) || pos < 0 {
        return None;
    }
    Some((pos as usize, left))
}

impl IsDataAt {
    /// Evaluates at `cursor`: `Some(true)` match, `Some(false)` no match, `None` no match
    /// that no other cursor can change (Suricata's "discontinue", for literal offsets).
    pub(crate) fn eval(&self, len: usize, cursor: usize, vars: &Vars) -> Option<bool> {
        let var = matches!(self.at, Num::Var(_));
        let at = self.at.get(vars);
        // Suricata treats extracted offsets of 10^8 and more as "never data there".
        if var && at >= 100_000_000 {
            return Some(self.negated);
        }
        let fail = if var { Some(false) } else { None };
        let data = if self.relative {
            (cursor as i64).saturating_add(at) <= len as i64
        } else {
            at < len as i64
        };
        match (data, self.negated) {
            (true, false) | (false, true) => Some(true),
            // A negated relative test that finds data may hold at a later cursor.
            (true, true) if self.relative => Some(false),
            _ => fail,
        }
    }
}

impl ByteTest {
    /// True if the test holds at `cursor`.
    pub(crate) fn eval(&self, buf: &[u8], cursor: usize, vars: &Vars) -> bool {
        if buf.is_empty() {
            return false;
        }
        let n = self.nbytes.get(vars);
        if !(0..=max_nbytes(self.enc)).contains(&n) {
            return false;
        }
        let Some((pos, left)) = start(buf.len(), cursor, self.offset.get(vars), self.relative)
        else {
            return false;
        };
        if n > left {
            return false;
        }
        let Some((mut v, _)) = read(buf, pos, n as usize, self.enc) else {
            return false;
        };
        if let Some(m) = self.bitmask {
            v = m.apply(v);
        }
        let value = self.value.get_u64(vars);
        let m = match self.op {
            ByteOp::Lt => v < value,
            ByteOp::Gt => v > value,
            ByteOp::Eq => v == value,
            ByteOp::And => v & value != 0,
            ByteOp::Xor => v ^ value != 0,
            ByteOp::Ge => v >= value,
            ByteOp::Le => v <= value,
        };
        m != self.negated
    }
}

impl ByteJump {
    /// The new cursor if the jump lands inside the buffer (or at its end).
    pub(crate) fn eval(&self, buf: &[u8], cursor: usize, vars: &Vars) -> Option<usize> {
        if buf.is_empty() {
            return None;
        }
        let n = self.nbytes.get(vars);
        if !(0..=max_nbytes(self.enc)).contains(&n) {
            return None;
        }
        let len = buf.len() as i64;
        let base = if self.relative { cursor as i64 } else { 0 };
        let pos = base.saturating_add(self.offset.get(vars));
        let left = len.saturating_sub(pos);
        if (self.relative && n > 0 && left <= 0) || pos < 0 || n > left {
            return None;
        }
        let (mut v, used) = read(buf, pos as usize, n as usize, self.enc)?;
        if let Some(m) = self.bitmask {
            v = m.apply(v);
        }
        let mut v = v.wrapping_mul(self.multiplier);
        if self.align && v % 4 != 0 {
            v = v.wrapping_add(4 - v % 4);
        }
        // Suricata adds in 64-bit unsigned and reads the sum as signed.
        let v = v.wrapping_add(self.post_offset as u64) as i64;
        let to = match self.from {
            JumpFrom::Beginning => v,
            JumpFrom::End => len.saturating_add(v),
            JumpFrom::Read => pos.saturating_add(v).saturating_add(used as i64),
        };
        if to > len {
            return None;
        }
        // A jump before the start lands on it.
        Some(to.max(0) as usize)
    }
}

impl ByteExtract {
    /// Reads the value at `cursor` into `vars` and returns the new cursor (past the bytes read).
    pub(crate) fn eval(&self, buf: &[u8], cursor: usize, vars: &mut Vars) -> Option<usize> {
        if buf.is_empty() {
            return None;
        }
        let (pos, left) = start(buf.len(), cursor, self.offset, self.relative)?;
        if i64::from(self.nbytes) > left {
            return None;
        }
        let (v, used) = read(buf, pos, usize::from(self.nbytes), self.enc)?;
        let mut v = v.wrapping_mul(self.multiplier);
        if self.align > 1 && v % self.align != 0 {
            v = v.wrapping_add(self.align - v % self.align);
        }
        vars.set(self.var, v);
        Some(pos + used)
    }
}
