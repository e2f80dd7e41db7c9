//! Loads rules files the way `relayd check` with `strict = true` would, one file at a time,
//! with Suricata's default address and port variables, and reports how many load whole and
//! which keywords refuse the others (a file counts against every keyword that refused one
//! of its rules).
//!
//! `cargo run --release -p relay-svc-ids --example rulecheck -- [OPTIONS] FILE...`. Used to
//! judge the language against public rule sets (docs/ids.md, "Conformance";
//! benches/ids-conformance runs it over suricata-verify). Options:
//!
//! - `-v`: print every error;
//! - `--files-from LIST`: also check the files named in LIST, one path a line;
//! - `--list OUT`: write one tab-separated line per file to OUT: `ok PATH RULES`,
//!   `refused PATH KEYWORDS FIRST-ERROR` (keywords comma-separated) or
//!   `unreadable PATH ERROR`, so a harness can tell which files load;
//! - `--vars-toml`: print the variables below as a `[service.ids.vars]` TOML table and
//!   exit (the harness puts them in the configurations it generates, so both agree).

use relay_svc_ids::{LoadOptions, RuleSet};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use relay_svc_ids::SURICATA_VARS;

fn main() -> ExitCode {
    let mut verbose = false;
    let mut files = Vec::new();
    let mut list_out: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-v" => verbose = true,
            "--vars-toml" => {
                println!("[service.ids.vars]");
                for (k, v) in SURICATA_VARS {
                    println!("{k} = \"{v}\"");
                }
                return ExitCode::SUCCESS;
            }
            "--list" | "--files-from" => {
                let Some(v) = args.next() else {
                    eprintln!("rulecheck: {a} needs a file name");
                    return ExitCode::from(2);
                };
                if a == "--list" {
                    list_out = Some(PathBuf::from(v));
                } else {
                    match std::fs::read_to_string(&v) {
                        Ok(text) => files.extend(
                            text.lines()
                                .filter(|l| !l.trim().is_empty())
                                .map(PathBuf::from),
                        ),
                        Err(e) => {
                            eprintln!("rulecheck: {v}: {e}");
                            return ExitCode::from(2);
                        }
                    }
                }
            }
            _ => files.push(PathBuf::from(a)),
        }
    }
    let mut list = List {
        out: None,
        failed: false,
    };
    if let Some(p) = &list_out {
        match std::fs::File::create(p) {
            Ok(f) => list.out = Some(std::io::BufWriter::new(f)),
            Err(e) => {
                eprintln!("rulecheck: {}: {e}", p.display());
                return ExitCode::from(2);
            }
        }
    }
    let vars: BTreeMap<String, String> = SURICATA_VARS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (mut ok, mut empty) = (0, 0);
    let mut by_kw: HashMap<String, usize> = HashMap::new();
    let mut only: HashMap<String, usize> = HashMap::new();
    for f in &files {
        let opts = LoadOptions {
            files: vec![f.clone()],
            vars: vars.clone(),
            classification: None,
            threshold_file: None,
        };
        let set = match RuleSet::load(&opts) {
            Ok(s) => s,
            Err(e) => {
                println!("{e}");
                record(&mut list, format_args!("unreadable\t{}\t{e}", f.display()));
                continue;
            }
        };
        if set.errors().is_empty() {
            if set.rules().is_empty() {
                empty += 1;
            }
            ok += 1;
            record(
                &mut list,
                format_args!("ok\t{}\t{}", f.display(), set.rules().len()),
            );
            continue;
        }
        let kws: HashSet<String> = set
            .errors()
            .iter()
            .map(|e| e.keyword.clone().unwrap_or_else(|| "(header)".into()))
            .collect();
        if let Some(first) = set.errors().first() {
            let mut sorted: Vec<&str> = kws.iter().map(String::as_str).collect();
            sorted.sort_unstable();
            let why = first.to_string().replace(['\t', '\n'], " ");
            record(
                &mut list,
                format_args!("refused\t{}\t{}\t{why}", f.display(), sorted.join(",")),
            );
        }
        if kws.len() == 1
            && let Some(k) = kws.iter().next()
        {
            *only.entry(k.clone()).or_default() += 1;
        }
        for k in kws {
            *by_kw.entry(k).or_default() += 1;
        }
        if verbose {
            for e in set.errors() {
                println!("{e}");
            }
        }
    }
    let pct = |n: usize| 100.0 * n as f64 / files.len().max(1) as f64;
    println!(
        "accepted: {ok} of {} files ({:.1} %), {empty} of them without rules",
        files.len(),
        pct(ok)
    );
    let mut v: Vec<_> = by_kw.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    println!("refusing keyword: files refused by it (files refused by it alone)");
    for (k, n) in v.iter().take(60) {
        println!("  {k}: {n} ({})", only.get(k).copied().unwrap_or(0));
    }
    let flushed = list.out.as_mut().map_or(Ok(()), |w| w.flush());
    if list.failed || flushed.is_err() {
        eprintln!("rulecheck: writing the list failed");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}

/// The `--list` file, and whether writing it has failed.
struct List {
    out: Option<std::io::BufWriter<std::fs::File>>,
    failed: bool,
}

/// Appends one line to the `--list` file, if there is one; a failure is remembered and
/// reported at the end (exit status 2).
fn record(list: &mut List, line: std::fmt::Arguments<'_>) {
    if let Some(w) = &mut list.out
        && writeln!(w, "{line}").is_err()
    {
        list.failed = true;
    }
}
