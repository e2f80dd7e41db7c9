//! The files relayd's package ships that come from the command line's clap definitions:
//! a man page per command (`relayd(8)`, `relayd-run(8)`, ...) and shell completions for
//! bash, zsh and fish.
//!
//! They are generated here, from [`crate::cli::Cli`], so that they cannot drift from the
//! CLI: the generated files are committed under `dist/man/` and `dist/completions/`, and
//! `daemon/relayd/tests/dist.rs` regenerates them in memory and fails when the committed
//! copies differ (`make dist` rewrites them). Besides what clap knows (name, synopsis,
//! description, options, subcommands, version), each man page gets sections clap has no
//! place for: exit status, files, environment, examples, see also.

use crate::config::DEFAULT_SOCKET;
use crate::lock::LOCK_DIR;
use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

/// Where the man pages live in the source tree, relative to the workspace root.
pub const MAN_DIR: &str = "dist/man";
/// Where the shell completions live in the source tree, relative to the workspace root.
pub const COMPLETIONS_DIR: &str = "dist/completions";
/// The man pages' section: relayd is a daemon and administration tool.
pub const MAN_SECTION: &str = "8";

/// One generated file: its path relative to the workspace root, and its exact bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistFile {
    /// Path relative to the workspace root, e.g. `dist/man/relayd-run.8`.
    pub path: String,
    /// The file's contents, byte for byte as committed.
    pub contents: Vec<u8>,
}

/// The clap command of the `relayd` binary, as `relayd --help` sees it.
pub fn command() -> clap::Command {
    crate::cli::Cli::command()
}

/// Every generated file: the man pages, then the completions.
pub fn generated() -> std::io::Result<Vec<DistFile>> {
    let mut files = man_pages()?;
    files.extend(completions());
    Ok(files)
}

/// `relayd.8` and one `relayd-COMMAND.8` per subcommand (clap's `help` subcommand left
/// out: `man relayd` is the help), under [`MAN_DIR`].
pub fn man_pages() -> std::io::Result<Vec<DistFile>> {
    let mut cmd = command().disable_help_subcommand(true);
    cmd.build();
    let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    // Every page's SEE ALSO names the other pages.
    let mut names = vec![format!("relayd({MAN_SECTION})")];
    names.extend(
        subs.iter()
            .map(|s| format!("relayd-{}({MAN_SECTION})", s.get_name())),
    );
    let mut pages = vec![man_page(&cmd, None, &names)?];
    for sub in subs {
        pages.push(man_page(sub, Some(sub.get_name()), &names)?);
    }
    Ok(pages)
}

/// Completion scripts for bash, zsh and fish, under [`COMPLETIONS_DIR`], named as each
/// shell's vendor directory expects them once installed (`relayd`, `_relayd`,
/// `relayd.fish`; bash's keeps a `.bash` suffix in the source tree).
pub fn completions() -> Vec<DistFile> {
    [
        (Shell::Bash, "relayd.bash"),
        (Shell::Zsh, "_relayd"),
        (Shell::Fish, "relayd.fish"),
    ]
    .into_iter()
    .map(|(shell, name)| {
        let mut contents = Vec::new();
        clap_complete::generate(shell, &mut command(), "relayd", &mut contents);
        DistFile {
            path: format!("{COMPLETIONS_DIR}/{name}"),
            contents,
        }
    })
    .collect()
}

/// One command's page (`sub` is None for `relayd` itself): clap_mangen's rendering with
/// relayd's own sections inserted before VERSION. `pages` names every page.
fn man_page(cmd: &clap::Command, sub: Option<&str>, pages: &[String]) -> std::io::Result<DistFile> {
    // Every page names relayd's version as its source (a subcommand has none of its own).
    let source = format!("relayd {}", env!("CARGO_PKG_VERSION"));
    let man = Man::new(cmd.clone()).section(MAN_SECTION).source(source);
    let path = format!("{MAN_DIR}/{}", man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page)?;
    let page = String::from_utf8_lossy(&page).into_owned();
    let own = format!(
        "{}({MAN_SECTION})",
        cmd.get_display_name().unwrap_or("relayd")
    );
    let see_also: Vec<&str> = pages
        .iter()
        .map(String::as_str)
        .filter(|p| *p != own)
        .collect();
    let extra = extra_sections(sub, &see_also.join(", "));
    let preamble = Roff::new().render();
    let rendered = extra.render();
    let extra = rendered.strip_prefix(&preamble).unwrap_or(&rendered);
    let contents = match page.find("\n.SH VERSION\n") {
        Some(at) => format!("{}\n{extra}{}", &page[..at], &page[at + 1..]),
        None => format!("{page}{extra}"),
    };
    Ok(DistFile {
        path,
        contents: contents.into_bytes(),
    })
}

/// A part of a man page section relayd writes itself.
enum Item {
    /// A paragraph of plain text.
    Para(String),
    /// A tagged paragraph: the tag in bold (a value, a path, a variable), then the text.
    Tagged(String, String),
    /// What a command line does, then the command line as typed, indented and unfilled.
    Example(&'static str, &'static str),
}

fn para(s: impl Into<String>) -> Item {
    Item::Para(s.into())
}

fn tagged(tag: impl Into<String>, text: impl Into<String>) -> Item {
    Item::Tagged(tag.into(), text.into())
}

/// The sections after OPTIONS/SUBCOMMANDS of the page for subcommand `sub` (None for
/// `relayd` itself): what an operator looks up in a man page and clap does not describe.
/// `see_also` lists relayd's other pages.
fn extra_sections(sub: Option<&str>, see_also: &str) -> Roff {
    let docs = "The configuration reference, the command line in detail and the operations \
        guide: /usr/share/doc/relayd/ (configuration.md, cli.md, operations.md).";
    let mut sections: Vec<(&str, Vec<Item>)> = Vec::new();
    let Some(name) = sub else {
        sections.push((
            "EXIT STATUS",
            vec![
                tagged("0", "Success."),
                tagged(
                    "1",
                    "A runtime failure: run could not start or could not remove its rules, \
                     no daemon answers status, cleanup refused or failed, keygen could not \
                     write the key.",
                ),
                tagged(
                    "2",
                    "A configuration error (one line per error, FILE:LINE:COLUMN: FIELD: \
                     MESSAGE), a rule set relayd refuses, or an invalid command line.",
                ),
            ],
        ));
        sections.push(("ENVIRONMENT", vec![rust_log()]));
        sections.push(("FILES", files()));
        sections.push((
            "EXAMPLES",
            vec![
                Item::Example(
                    "relayd check -c /etc/relayd/relayd.toml",
                    "Check a configuration before starting or reloading relayd.",
                ),
                Item::Example(
                    "systemctl start relayd",
                    "Run /etc/relayd/relayd.toml under systemd; systemctl reload relayd \
                     checks the file and sends relayd SIGHUP.",
                ),
                Item::Example("relayd status", "Show the running daemon's counters."),
            ],
        ));
        sections.push((
            "SEE ALSO",
            vec![
                para(format!(
                    "{see_also}, iptables(8), iptables-restore(8), ip6tables(8), tc(8), \
                     systemctl(1)"
                )),
                para(docs),
            ],
        ));
        return roff(sections);
    };
    let exit = |zero: &str, one: Option<&str>, two: &str| {
        let mut v = vec![tagged("0", zero)];
        if let Some(one) = one {
            v.push(tagged("1", one));
        }
        v.push(tagged("2", two));
        v
    };
    let config_error = "A configuration error, one line per error on stderr.";
    let (exit_status, mut more): (Vec<Item>, Vec<(&str, Vec<Item>)>) = match name {
        "run" => (
            exit(
                "Stopped cleanly by SIGINT or SIGTERM.",
                Some("Could not start, or could not remove its rules on exit."),
                config_error,
            ),
            vec![
                (
                    "SIGNALS",
                    vec![
                        tagged(
                            "SIGHUP",
                            "Reload the configuration file given with -c (refused, and \
                             logged, if it has errors).",
                        ),
                        tagged(
                            "SIGTERM, SIGINT",
                            "Remove the rules, drain and unbind the queues, exit 0.",
                        ),
                    ],
                ),
                ("ENVIRONMENT", vec![rust_log()]),
                ("FILES", files()),
                (
                    "EXAMPLES",
                    vec![Item::Example(
                        "relayd run -c /etc/relayd/relayd.toml --log relayd::dump=warn,info",
                        "Run in the foreground without the dump service's packet lines.",
                    )],
                ),
            ],
        ),
        "check" => (
            exit(
                "Valid (also when iptables could not be run: a warning on stderr).",
                None,
                "Configuration or rule error.",
            ),
            vec![(
                "EXAMPLES",
                vec![Item::Example(
                    "relayd check -c /etc/relayd/relayd.toml",
                    "Prints FILE: ok (N queue entries, M queues), or the errors.",
                )],
            )],
        ),
        "rules" => (
            exit(
                "Printed.",
                None,
                "Configuration error, or a rule set relayd refuses (such as a chain prefix \
                 that does not start with a letter or digit).",
            ),
            vec![],
        ),
        "status" => (
            exit(
                "Printed.",
                Some("No daemon answers on the socket (or it is busy: try again)."),
                "Configuration error (with -c).",
            ),
            vec![
                (
                    "FILES",
                    vec![tagged(
                        DEFAULT_SOCKET,
                        "The default status socket (daemon.socket). Connecting needs write \
                         permission on it.",
                    )],
                ),
                (
                    "EXAMPLES",
                    vec![
                        Item::Example("relayd status", "The counters as a table."),
                        Item::Example(
                            "relayd status -c /etc/relayd/b.toml --json",
                            "The counters of the daemon whose configuration is b.toml, as \
                             one JSON document.",
                        ),
                    ],
                ),
            ],
        ),
        "replay" => (
            exit(
                "Replayed.",
                None,
                "Configuration error, a bad --bandwidth, or a capture that cannot be read \
                 (the message names the packet number).",
            ),
            vec![(
                "EXAMPLES",
                vec![
                    Item::Example(
                        "relayd replay -c relayd.toml --pcap sample.pcap --write out.pcap",
                        "Run the first queue's chain over sample.pcap and write what comes \
                         out to out.pcap.",
                    ),
                    Item::Example(
                        "relayd replay -c relayd.toml --pcap sample.pcap --json | jq 'select(.verdict == \"drop\")'",
                        "The packets the chain drops.",
                    ),
                ],
            )],
        ),
        "keygen" => (
            exit(
                "Written.",
                Some("The file exists already or cannot be written."),
                "Unknown cipher.",
            ),
            vec![(
                "EXAMPLES",
                vec![Item::Example(
                    "relayd keygen aes-128-gcm /etc/relayd/keys/a-to-b.key",
                    "A new AES-128-GCM key, mode 0600, for the direction from relay A to \
                     relay B.",
                )],
            )],
        ),
        "cleanup" => (
            exit(
                "Done (also when there was nothing to remove).",
                Some("Refused (a daemon holds the prefix) or failed."),
                "Configuration error (with -c).",
            ),
            vec![(
                "EXAMPLES",
                vec![Item::Example(
                    "relayd cleanup -c /etc/relayd/relayd.toml",
                    "Remove what a crashed relayd left, with the chain prefix, iptables \
                     flavour and tc handles of its configuration.",
                )],
            )],
        ),
        // A command added to the CLI without its own sections still gets exit status and
        // see also.
        _ => (
            vec![para("See relayd(8) for the exit status of all commands.")],
            vec![],
        ),
    };
    sections.push(("EXIT STATUS", exit_status));
    sections.append(&mut more);
    sections.push(("SEE ALSO", vec![para(see_also), para(docs)]));
    roff(sections)
}

fn rust_log() -> Item {
    tagged(
        "RUST_LOG",
        "A tracing filter (e.g. debug, or relayd::dump=warn,info). When set, it replaces \
         relayd run's --log.",
    )
}

fn files() -> Vec<Item> {
    vec![
        tagged(
            "/etc/relayd/relayd.toml",
            "The configuration relayd.service runs; relayd@NAME.service runs \
             /etc/relayd/NAME.toml. The package installs a commented example.",
        ),
        tagged(
            DEFAULT_SOCKET,
            "The default status socket (daemon.socket), which relayd status queries.",
        ),
        tagged(
            relay_svc_crypto::persist::DEFAULT_STATE_DIR,
            "The ESP services' sequence state (state_dir; $STATE_DIRECTORY when systemd's \
             StateDirectory= sets it, /var/lib/relayd/NAME for relayd@NAME.service). Never \
             delete or restore it without rotating the ESP keys (encryption.md).",
        ),
        tagged(
            format!("{LOCK_DIR}/PREFIX-netINODE.lock"),
            "The instance lock: one relayd per chain prefix per network namespace (INODE \
             is that of /proc/self/ns/net).",
        ),
    ]
}

fn roff(sections: Vec<(&str, Vec<Item>)>) -> Roff {
    let mut r = Roff::new();
    for (heading, items) in sections {
        r.control("SH", [heading]);
        for item in items {
            match item {
                Item::Para(text) => {
                    r.control("PP", []).text([roman(text)]);
                }
                Item::Tagged(tag, text) => {
                    r.control("TP", []).text([bold(tag)]).text([roman(text)]);
                }
                Item::Example(line, what) => {
                    r.control("PP", [])
                        .text([roman(what)])
                        .control("PP", [])
                        .control("RS", ["4"])
                        .control("nf", [])
                        .text([bold(line)])
                        .control("fi", [])
                        .control("RE", []);
                }
            }
        }
    }
    r
}
