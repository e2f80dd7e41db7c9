//! Argument handling at the two text boundaries: a user's match string (split shell-like,
//! and refused if it tries to pick the target or the command itself) and the
//! iptables-restore/iptables-save line format (quoted so that text round-trips).

use std::borrow::Cow;

/// Why a match string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MatchError {
    /// A quote was opened and never closed.
    #[error("unterminated {0} quote")]
    UnterminatedQuote(char),
    /// The string ends with a lone backslash.
    #[error("trailing backslash")]
    TrailingBackslash,
    /// A control character (newline inside quotes, NUL, ...) cannot be carried by the
    /// line-based iptables-restore format.
    #[error("control character {0:?} cannot appear in a match")]
    ControlChar(char),
    /// The option chooses the command, chain, table, family or target, which relayd owns.
    #[error(
        "option `{0}` is not allowed in a match: relayd chooses the command, table, family \
         and target (-j NFQUEUE) itself"
    )]
    Forbidden(String),
    /// The option names a program for iptables to run (`--modprobe=PROG`, `-M PROG`):
    /// iptables-restore runs as root, so a match must never choose what it executes.
    #[error(
        "option `{0}` is not allowed in a match: it names a program iptables would run as root"
    )]
    RunsProgram(String),
}

/// Long options a match must not use. Checked exactly and as getopt abbreviations,
/// because iptables parses with `getopt_long`, which accepts `--jum` for `--jump`.
const FORBIDDEN_LONG: &[&str] = &[
    "append",
    "check",
    "delete",
    "delete-chain",
    "flush",
    "goto",
    "insert",
    "ipv4",
    "ipv6",
    "jump",
    "list",
    "list-rules",
    "new-chain",
    "rename-chain",
    "replace",
    "table",
    "zero",
];

/// Checked exactly only: the `policy` match has a real `--pol` option, and iptables itself
/// refuses `-P` together with `-A`.
const FORBIDDEN_LONG_EXACT: &[&str] = &["policy"];

/// Short options a match must not use. `-4`/`-6` matter most: iptables-restore silently
/// skips a rule marked for the other family, so the queue would just not exist.
const FORBIDDEN_SHORT: &str = "ACDEFILNPRSXZgjt46";

/// Options that name a program iptables executes (`--modprobe`, its short form `-M`).
const RUNS_PROGRAM_LONG: &str = "modprobe";
const RUNS_PROGRAM_SHORT: char = 'M';

/// Short options without an argument, which getopt lets a user bundle (`-fj X`).
const SHORT_NO_ARG: &str = "fvnxhVb";

/// Splits a match string shell-like into arguments and refuses reserved options.
///
/// Whitespace separates arguments; `'...'` is literal; `"..."` allows `\"` and `\\`;
/// a backslash outside quotes escapes the next character. A value that looks like a
/// reserved option (`--comment -j`) is refused too: iptables' own parser would take it as
/// one in some positions, and no useful match needs it.
pub fn split_matches(s: &str) -> Result<Vec<String>, MatchError> {
    let args = split_shell(s)?;
    for arg in &args {
        check_arg(arg)?;
    }
    Ok(args)
}

fn plain(c: char) -> Result<char, MatchError> {
    if c.is_control() {
        Err(MatchError::ControlChar(c))
    } else {
        Ok(c)
    }
}

fn split_shell(s: &str) -> Result<Vec<String>, MatchError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(plain(c)?),
                        None => return Err(MatchError::UnterminatedQuote('\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(plain(c)?);
                            }
                            None => return Err(MatchError::UnterminatedQuote('"')),
                        },
                        Some(c) => cur.push(plain(c)?),
                        None => return Err(MatchError::UnterminatedQuote('"')),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(plain(c)?),
                    None => return Err(MatchError::TrailingBackslash),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(plain(c)?);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

fn check_arg(arg: &str) -> Result<(), MatchError> {
    if let Some(long) = arg.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or_default();
        if name.is_empty() {
            return Ok(());
        }
        let reserved = FORBIDDEN_LONG.iter().any(|f| f.starts_with(name))
            || FORBIDDEN_LONG_EXACT.contains(&name);
        // getopt_long takes any unambiguous prefix: `--mod=PROG` is `--modprobe=PROG`.
        if RUNS_PROGRAM_LONG.starts_with(name) {
            return Err(MatchError::RunsProgram(arg.to_owned()));
        }
        if reserved {
            return Err(MatchError::Forbidden(arg.to_owned()));
        }
    } else if let Some(cluster) = arg.strip_prefix('-') {
        for c in cluster.chars() {
            if c == RUNS_PROGRAM_SHORT {
                return Err(MatchError::RunsProgram(arg.to_owned()));
            }
            if FORBIDDEN_SHORT.contains(c) {
                return Err(MatchError::Forbidden(format!("-{c}")));
            }
            if !SHORT_NO_ARG.contains(c) {
                // The rest of the cluster is this option's value (or not an option at all).
                break;
            }
        }
    }
    Ok(())
}

/// `args` (a rule's match and target) made fit for relayd's OUTPUT chain, for a copy of a
/// FORWARD rule that must also match packets relayd re-sent from a socket: such a packet
/// has no input interface and came from no MAC, so matches that only exist on the input
/// side are left out (which widens the copy; a FORWARD queue, an IDS above all, must rather
/// see too much than nothing):
///
/// - `[!] -i IF`, `[!] --in-interface IF` (getopt abbreviations down to `--in-`, and the
///   `=IF` forms);
/// - the whole `-m mac` match;
/// - `--physdev-in` and `--physdev-is-in` of `-m physdev`;
/// - a whole `-m policy` match that says `--dir in`.
pub(crate) fn for_output_copy(args: Vec<String>) -> Vec<String> {
    let is_in = |a: &str| {
        let name = a.split('=').next().unwrap_or_default();
        a == "-i" || (name.len() >= 5 && "--in-interface".starts_with(name))
    };
    let mut out: Vec<String> = Vec::with_capacity(args.len());
    let mut blocks = match_blocks(&args).into_iter().peekable();
    let mut i = 0;
    while i < args.len() {
        // A whole module block to leave out?
        if let Some(&(start, end, drop)) = blocks.peek()
            && i == start
        {
            blocks.next();
            if drop {
                i = end;
                continue;
            }
        }
        let a = &args[i];
        let next_is = |f: &dyn Fn(&str) -> bool| args.get(i + 1).is_some_and(|n| f(n));
        if a == "!" && next_is(&|n| is_in(n) || n == "--physdev-in" || n == "--physdev-is-in") {
            i += 1;
            continue;
        }
        if is_in(a) || a == "--physdev-in" {
            i += if a.contains('=') { 1 } else { 2 };
            continue;
        }
        if a == "--physdev-is-in" {
            i += 1;
            continue;
        }
        out.push(a.clone());
        i += 1;
    }
    out
}

/// The `-m NAME ...` blocks of `args` as `(start, end, leave_out)`: from the `-m` to the
/// next `-m`, target or built-in match, and whether a copy for OUTPUT leaves the block out
/// (`mac`, or `policy` with `--dir in`).
fn match_blocks(args: &[String]) -> Vec<(usize, usize, bool)> {
    let builtin = |a: &str| {
        matches!(
            a,
            "-m" | "--match"
                | "-j"
                | "-p"
                | "--protocol"
                | "-s"
                | "--source"
                | "--src"
                | "-d"
                | "--destination"
                | "--dst"
                | "-o"
                | "--out-interface"
                | "-i"
                | "--in-interface"
                | "-f"
                | "--fragment"
        )
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if args[i] == "-m" || args[i] == "--match" {
            let name = args.get(i + 1).map(String::as_str).unwrap_or_default();
            let mut end = (i + 2).min(args.len());
            while end < args.len() && !builtin(&args[end]) {
                // `! -p` belongs to the next match.
                if args[end] == "!" && args.get(end + 1).is_some_and(|n| builtin(n)) {
                    break;
                }
                end += 1;
            }
            let body = &args[i..end];
            let leave_out = name == "mac"
                || (name == "policy" && body.windows(2).any(|w| w[0] == "--dir" && w[1] == "in"));
            out.push((i, end, leave_out));
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Quotes one argument for an iptables-restore line if it needs it.
///
/// iptables-restore only knows double quotes, with backslash escapes inside them; that is
/// also how iptables-save writes strings, so the text round-trips.
pub fn quote_arg(arg: &str) -> Cow<'_, str> {
    let needs = arg.is_empty()
        || arg
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\'));
    if !needs {
        return Cow::Borrowed(arg);
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    for c in arg.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Cow::Owned(out)
}

/// Joins arguments into one iptables-restore line fragment, quoting where needed.
pub(crate) fn join_args<S: AsRef<str>>(args: &[S]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&quote_arg(a.as_ref()));
    }
    out
}

/// Splits one iptables-save line the way iptables-restore reads it: whitespace separates,
/// `"..."` groups, and inside quotes a backslash escapes the next character.
pub(crate) fn split_saved(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                cur.push(n);
                            }
                        }
                        c => cur.push(c),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<String> {
        split_matches(s).unwrap()
    }

    #[test]
    fn splits_plain_words() {
        assert_eq!(
            split("  -i eth0\t-p udp --dport 5000 "),
            ["-i", "eth0", "-p", "udp", "--dport", "5000"]
        );
        assert!(split("").is_empty());
        assert!(split("   ").is_empty());
    }

    #[test]
    fn splits_quotes_and_escapes() {
        assert_eq!(
            split(r#"-m comment --comment "a \"b\" c\\d" -m string --string 'x y' --algo bm"#),
            [
                "-m",
                "comment",
                "--comment",
                r#"a "b" c\d"#,
                "-m",
                "string",
                "--string",
                "x y",
                "--algo",
                "bm"
            ]
        );
        assert_eq!(split(r"a\ b c"), ["a b", "c"]);
        assert_eq!(split(r#"pre"mid dle"post ''"#), ["premid dlepost", ""]);
        assert_eq!(split(r#""a\nb""#), [r"a\nb"]);
    }

    #[test]
    fn refuses_broken_quoting() {
        assert_eq!(
            split_matches("--comment 'abc"),
            Err(MatchError::UnterminatedQuote('\''))
        );
        assert_eq!(
            split_matches("--comment \"abc"),
            Err(MatchError::UnterminatedQuote('"'))
        );
        assert_eq!(split_matches("abc\\"), Err(MatchError::TrailingBackslash));
        assert_eq!(
            split_matches("--comment \"a\nb\""),
            Err(MatchError::ControlChar('\n'))
        );
    }

    #[test]
    fn refuses_targets_and_commands() {
        for bad in [
            "-j ACCEPT",
            "-p udp --jump DROP",
            "--jum DROP",
            "--jump=DROP",
            "-g MYCHAIN",
            "--goto MYCHAIN",
            "-jACCEPT",
            "-fjACCEPT",
            "-A FORWARD",
            "-I FORWARD 1",
            "-D FORWARD",
            "--delete FORWARD",
            "--ins FORWARD",
            "-F",
            "-X",
            "-N x",
            "-t raw",
            "--table raw",
            "-6",
            "--ipv4",
            "--policy",
        ] {
            assert!(
                matches!(split_matches(bad), Err(MatchError::Forbidden(_))),
                "{bad} should be refused"
            );
        }
    }

    #[test]
    fn input_only_matches_are_left_out_of_output_copies() {
        let strip = |s: &str| {
            let args: Vec<String> = s.split(' ').map(String::from).collect();
            for_output_copy(args).join(" ")
        };
        assert_eq!(
            strip("-i eth0 -p udp ! -i lo --dport 1"),
            "-p udp --dport 1"
        );
        assert_eq!(strip("--in-interface=eth0 -o eth1"), "-o eth1");
        assert_eq!(strip("! --in-int eth+ -p tcp"), "-p tcp");
        assert_eq!(strip("-p tcp ! --syn"), "-p tcp ! --syn");
        assert_eq!(strip("-m comment --comment x -i"), "-m comment --comment x");
        assert_eq!(
            strip("-m mac --mac-source 00:11:22:33:44:55 -p udp -j NFQUEUE"),
            "-p udp -j NFQUEUE"
        );
        assert_eq!(
            strip("-m mac ! --mac-source 00:11:22:33:44:55 ! -p udp"),
            "! -p udp"
        );
        assert_eq!(
            strip("-m physdev --physdev-in veth0 --physdev-out br0 -j X"),
            "-m physdev --physdev-out br0 -j X"
        );
        assert_eq!(
            strip("-m physdev ! --physdev-is-in -p tcp"),
            "-m physdev -p tcp"
        );
        assert_eq!(
            strip("-m policy --dir in --pol ipsec -m udp --dport 5 -j X"),
            "-m udp --dport 5 -j X"
        );
        assert_eq!(
            strip("-m policy --dir out --pol none -j X"),
            "-m policy --dir out --pol none -j X"
        );
    }

    #[test]
    fn refuses_options_that_run_a_program() {
        for bad in [
            "--modprobe=/tmp/x",
            "--modprobe /tmp/x",
            "-p udp --modp=/tmp/x",
            "--mod /tmp/x",
            "-M /tmp/x",
            "-M/tmp/x",
            "-vM /tmp/x",
            "-p tcp -m comment --comment -M",
        ] {
            assert!(
                matches!(split_matches(bad), Err(MatchError::RunsProgram(_))),
                "{bad} should be refused as running a program: {:?}",
                split_matches(bad)
            );
        }
        // `--mode` (the statistic match) is not an abbreviation of `--modprobe`.
        assert!(split_matches("-m statistic --mode random --probability 0.5").is_ok());
    }

    #[test]
    fn accepts_ordinary_matches() {
        for good in [
            "-i eth0 -p udp --dport 5000",
            "! -s 10.0.0.0/8 -o eth1",
            "-p tcp -m multiport --dports 80,443 -m conntrack --ctstate NEW",
            "-m policy --pol ipsec --dir in",
            "-f",
            "-p icmp --icmp-type echo-request",
            "-m mark ! --mark 0x1/0x1",
        ] {
            assert!(split_matches(good).is_ok(), "{good} should be accepted");
        }
    }

    #[test]
    fn quoting_round_trips_through_the_saved_splitter() {
        for arg in [
            "plain",
            "",
            "a b",
            r#"q"uote"#,
            r"back\slash",
            "it's",
            "tab\tx",
        ] {
            let quoted = quote_arg(arg);
            assert_eq!(split_saved(&quoted), [arg], "{quoted}");
        }
        assert_eq!(quote_arg("eth0"), "eth0");
        assert_eq!(quote_arg("a b"), "\"a b\"");
        assert_eq!(
            join_args(&["--comment", "x \"y\""]),
            r#"--comment "x \"y\"""#
        );
    }

    #[test]
    fn splits_saved_lines_like_iptables_save_writes_them() {
        assert_eq!(
            split_saved(r#"-A FORWARD -m comment --comment "a \"b\" c\\d \'e\'" -j X"#),
            [
                "-A",
                "FORWARD",
                "-m",
                "comment",
                "--comment",
                r#"a "b" c\d 'e'"#,
                "-j",
                "X"
            ]
        );
    }
}
