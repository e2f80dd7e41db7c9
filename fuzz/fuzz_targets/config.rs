//! The TOML configuration checker behind `relayd check` and `run` (daemon/relayd
//! `config::parse`): TOML syntax, the daemon section, queues and their ranges, hooks and
//! matches, every service kind's options and their checks, listeners; then, for a
//! configuration that passes, the iptables rule set it implies (`rules::restore_text`,
//! which `relayd rules` prints) and its own checks.
//!
//! The registry is relayd's own, with the kinds that would read or write a file the input
//! names (`encrypt`, `decrypt` key files; `ids` rule files and EVE log) reading fixed files
//! instead, and the egress monitor fixed (see `relayd_fuzz::sandboxed_registry`). The
//! iptables validation that `check` runs (`iptables-restore --test`) is left out: it is an
//! external program, not a parser of relayd's.
//!
//! Input: configuration text (UTF-8; other input is skipped).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let registry = relayd_fuzz::sandboxed_registry();
    match relayd::config::parse(text, Path::new("fuzz.toml"), registry) {
        Ok(cfg) => {
            let rs = relayd::rules::ruleset(&cfg);
            let _ = rs.check();
            let _ = relayd::rules::restore_text(&cfg);
        }
        Err(errors) => {
            for e in &errors.0 {
                // Every error points into the file (line 0 only for whole-file errors).
                assert!(
                    e.line <= text.lines().count() + 1,
                    "error past the end: {e:?}"
                );
                let _ = e.to_string();
            }
        }
    }
});
