//! Network interface names from configuration files, checked once for every consumer.
//!
//! A name relayd reads from its configuration ends up on `tc` and `ip` command lines and,
//! worse, inside `tc -batch` scripts, where a newline starts another command, `#` starts
//! a comment, quotes group words and a trailing `\` joins lines. `relayd check` and
//! `relayd run` must refuse the same names, so both call [`check`] (through the services'
//! configuration checks and the tc plan's validation).
//!
//! The rule is the kernel's `dev_valid_name()` (net/core/dev.c), made stricter where the
//! tools in between need it:
//!
//! - 1 to 15 bytes (`IFNAMSIZ` is 16 with the terminating NUL);
//! - not `.` or `..`;
//! - no `/`, `:` or whitespace (the kernel's own refusals);
//! - printable ASCII only: no control characters (a newline or tab would split a `tc`
//!   script line), and nothing outside ASCII (a zero-width or bidi character would make
//!   one name look like another in logs and status; the kernel's `isspace` also refuses
//!   the byte 0xa0, which UTF-8 uses inside many characters);
//! - none of `"`, `'`, `#`, `\` (they mean something to `tc -batch`), nor `%` (the kernel
//!   reads it as a `%d` template when a device is created or renamed, so no existing
//!   device has one).

/// The kernel's `IFNAMSIZ`: the size of an interface name buffer, terminating NUL included.
pub const IFNAMSIZ: usize = 16;

/// The longest interface name, in bytes.
pub const MAX_LEN: usize = IFNAMSIZ - 1;

/// Characters printable ASCII may have that an interface name in relayd's configuration
/// may not: the kernel's (`/`, `:`) and those `tc -batch` or the kernel's name templates
/// give a meaning to.
const FORBIDDEN: &[u8] = b"/:\"'#\\%";

/// Why a string is not an interface name relayd accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfNameError {
    /// The empty string.
    Empty,
    /// Longer than [`MAX_LEN`] bytes (the length in bytes).
    TooLong(usize),
    /// `.` or `..`, which the kernel refuses (they are directory entries in sysfs).
    Dot,
    /// A character the rule refuses (see the module documentation).
    BadChar(char),
}

impl std::fmt::Display for IfNameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IfNameError::Empty => f.write_str("empty"),
            IfNameError::TooLong(n) => {
                write!(f, "{n} bytes long, the kernel allows at most {MAX_LEN}")
            }
            IfNameError::Dot => f.write_str("\".\" and \"..\" are not interface names"),
            IfNameError::BadChar(c) if c.is_whitespace() => {
                write!(f, "contains whitespace ({:?})", c)
            }
            IfNameError::BadChar(c) if c.is_control() => {
                write!(f, "contains a control character ({:?})", c)
            }
            IfNameError::BadChar(c) if !c.is_ascii() => {
                write!(f, "contains {c:?}: only printable ASCII is accepted")
            }
            IfNameError::BadChar(c) => write!(f, "contains {c:?}"),
        }
    }
}

impl std::error::Error for IfNameError {}

/// Checks that `name` is an interface name relayd may hand to the kernel, `ip` and `tc`
/// (the rule is in the module documentation). Whether the interface exists is not asked.
pub fn check(name: &str) -> Result<(), IfNameError> {
    if name.is_empty() {
        return Err(IfNameError::Empty);
    }
    if let Some(c) = name
        .chars()
        .find(|&c| !c.is_ascii_graphic() || FORBIDDEN.contains(&(c as u8)))
    {
        return Err(IfNameError::BadChar(c));
    }
    if name.len() > MAX_LEN {
        return Err(IfNameError::TooLong(name.len()));
    }
    if name == "." || name == ".." {
        return Err(IfNameError::Dot);
    }
    Ok(())
}

/// [`check`], as the one-line message configuration errors carry: the name, escaped so
/// that a newline or tab in it shows as `\n` or `\t`, and why it is refused.
pub fn check_msg(name: &str) -> Result<(), String> {
    check(name).map_err(|e| format!("\"{}\" is not an interface name: {e}", name.escape_debug()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_real_interfaces_are_called() {
        for n in [
            "eth0",
            "lo",
            "enp0s31f6",
            "wlp2s0",
            "veth-a.100",
            "br_lan",
            "v0-abcdefghijkl",
            "a@b",
            "x",
            "...",
        ] {
            assert_eq!(check(n), Ok(()), "{n}");
        }
    }

    #[test]
    fn refuses_what_the_kernel_or_tc_batch_would_misread() {
        let cases: &[(&str, IfNameError)] = &[
            ("", IfNameError::Empty),
            ("abcdefghijklmnop", IfNameError::TooLong(16)),
            (".", IfNameError::Dot),
            ("..", IfNameError::Dot),
            ("eth\n1", IfNameError::BadChar('\n')),
            ("eth\t1", IfNameError::BadChar('\t')),
            ("eth 1", IfNameError::BadChar(' ')),
            ("eth1\r", IfNameError::BadChar('\r')),
            ("eth\u{b}1", IfNameError::BadChar('\u{b}')),
            ("eth\u{c}1", IfNameError::BadChar('\u{c}')),
            ("eth\u{0}1", IfNameError::BadChar('\u{0}')),
            ("eth\u{7f}", IfNameError::BadChar('\u{7f}')),
            ("eth\u{a0}1", IfNameError::BadChar('\u{a0}')),
            ("eth\u{85}1", IfNameError::BadChar('\u{85}')),
            ("eth\u{2028}", IfNameError::BadChar('\u{2028}')),
            ("eth0\u{200b}", IfNameError::BadChar('\u{200b}')),
            ("étè", IfNameError::BadChar('é')),
            ("a/b", IfNameError::BadChar('/')),
            ("eth0:1", IfNameError::BadChar(':')),
            ("eth#1", IfNameError::BadChar('#')),
            ("\"eth1", IfNameError::BadChar('"')),
            ("eth'1", IfNameError::BadChar('\'')),
            ("eth1\\", IfNameError::BadChar('\\')),
            ("eth%d", IfNameError::BadChar('%')),
        ];
        for (n, want) in cases {
            assert_eq!(check(n), Err(*want), "{n:?}");
        }
    }

    #[test]
    fn everything_rust_calls_whitespace_or_control_is_refused() {
        // relay-control's tc plan validation refuses `char::is_whitespace`: this rule
        // must refuse at least as much, so that check never passes what run refuses.
        for c in (0..=0x10ffffu32).filter_map(char::from_u32) {
            if c.is_whitespace() || c.is_control() {
                let n = format!("a{c}b");
                assert!(check(&n).is_err(), "{c:?}");
            }
        }
    }

    #[test]
    fn messages_escape_the_name_and_say_why() {
        let m = check_msg("eth\n1").unwrap_err();
        assert!(!m.contains('\n'), "{m}");
        assert!(m.contains(r#""eth\n1""#) && m.contains("whitespace"), "{m}");
        let m = check_msg("abcdefghijklmnopq").unwrap_err();
        assert!(m.contains("17 bytes") && m.contains("15"), "{m}");
    }
}
