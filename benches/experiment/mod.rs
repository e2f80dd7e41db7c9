//! What the paper experiments (`experiment_split`, `experiment_compress`) share: their
//! knobs from the environment, the real `relayd` started in a testbed namespace, and the
//! results written to docs/ and drawn with gnuplot.

#![allow(unreachable_pub)]

use relay_testbed::{Node, Proc};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// The relayd binary cargo built for this bench.
pub const RELAYD: &str = env!("CARGO_BIN_EXE_relayd");

/// The number in environment variable `name`, or `default` if it is unset or not one.
pub fn env_num<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The whitespace-separated list in environment variable `name` (`default` if unset);
/// words that do not parse are skipped.
pub fn env_list<T: FromStr>(name: &str, default: &str) -> Vec<T> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The directory of relayd instance `tag` of this run: its configuration and control
/// socket (`s.sock`).
pub fn run_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("relayd-exp-{}-{tag}", std::process::id()))
}

/// Starts relayd in `node` with configuration `body` (a `[daemon]` section naming the
/// socket in [`run_dir`] is put in front), and waits until it runs.
pub fn start_relayd(node: &Node, tag: &str, body: &str) -> Proc {
    let dir = run_dir(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("relayd.toml");
    let text = format!("[daemon]\nsocket = \"{}/s.sock\"\n{body}", dir.display());
    std::fs::write(&cfg, text).unwrap();
    let mut cmd = node.cmd(RELAYD);
    cmd.args(["run", "-c"])
        .arg(&cfg)
        .args(["--log", "warn,relayd::cli=info"]);
    cmd.stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    let p = node.spawn(cmd);
    assert!(
        p.wait_stderr_contains("relayd running", Duration::from_secs(10)),
        "{}",
        p.stderr_text()
    );
    p
}

/// The workspace's docs/ folder, where the experiments write their results.
pub fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// Runs gnuplot on `script` in directory `dir`; false if gnuplot is missing or failed.
pub fn gnuplot(dir: &Path, script: &str) -> bool {
    let path = std::env::temp_dir().join(format!("relayd-exp-{}.gp", std::process::id()));
    std::fs::write(&path, script).unwrap();
    let ok = std::process::Command::new("gnuplot")
        .current_dir(dir)
        .arg(&path)
        .status()
        .is_ok_and(|s| s.success());
    let _ = std::fs::remove_file(&path);
    ok
}
