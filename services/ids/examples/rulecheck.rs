//! Loads rules files the way `relayd check` with `strict = true` would, one file at a time,
//! with Suricata's default address and port variables, and reports how many load whole and
//! which keywords refuse the others (a file counts against every keyword that refused one
//! of its rules).
//!
//! `cargo run --release -p relay-svc-ids --example rulecheck -- FILE...` (add `-v` to list
//! every error). Used to judge the language against public rule sets (docs/ids.md,
//! "Conformance").

use relay_svc_ids::{LoadOptions, RuleSet};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

/// Suricata's default `vars` (suricata.yaml), so rules written against them load.
pub const SURICATA_VARS: &[(&str, &str)] = &[
    ("HOME_NET", "[192.168.0.0/16,10.0.0.0/8,172.16.0.0/12]"),
    ("EXTERNAL_NET", "!$HOME_NET"),
    ("HTTP_SERVERS", "$HOME_NET"),
    ("SMTP_SERVERS", "$HOME_NET"),
    ("SQL_SERVERS", "$HOME_NET"),
    ("DNS_SERVERS", "$HOME_NET"),
    ("TELNET_SERVERS", "$HOME_NET"),
    ("AIM_SERVERS", "$EXTERNAL_NET"),
    ("DC_SERVERS", "$HOME_NET"),
    ("DNP3_SERVER", "$HOME_NET"),
    ("DNP3_CLIENT", "$HOME_NET"),
    ("MODBUS_CLIENT", "$HOME_NET"),
    ("MODBUS_SERVER", "$HOME_NET"),
    ("ENIP_CLIENT", "$HOME_NET"),
    ("ENIP_SERVER", "$HOME_NET"),
    ("HTTP_PORTS", "80"),
    ("SHELLCODE_PORTS", "!80"),
    ("ORACLE_PORTS", "1521"),
    ("SSH_PORTS", "22"),
    ("DNP3_PORTS", "20000"),
    ("MODBUS_PORTS", "502"),
    ("FILE_DATA_PORTS", "[$HTTP_PORTS,110,143]"),
    ("FTP_PORTS", "21"),
    ("GENEVE_PORTS", "6081"),
    ("VXLAN_PORTS", "4789"),
    ("TEREDO_PORTS", "3544"),
];

fn main() {
    let mut verbose = false;
    let mut files = Vec::new();
    for a in std::env::args().skip(1) {
        if a == "-v" {
            verbose = true;
        } else {
            files.push(PathBuf::from(a));
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
        };
        let set = match RuleSet::load(&opts) {
            Ok(s) => s,
            Err(e) => {
                println!("{e}");
                continue;
            }
        };
        if set.errors().is_empty() {
            if set.rules().is_empty() {
                empty += 1;
            }
            ok += 1;
            continue;
        }
        let kws: HashSet<String> = set
            .errors()
            .iter()
            .map(|e| e.keyword.clone().unwrap_or_else(|| "(header)".into()))
            .collect();
        if kws.len() == 1 {
            *only.entry(kws.iter().next().unwrap().clone()).or_default() += 1;
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
}
