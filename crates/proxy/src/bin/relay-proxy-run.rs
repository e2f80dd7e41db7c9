//! `relay-proxy-run`: runs one proxy listener in the current network namespace, for tests
//! and experiments (`ip netns exec NS relay-proxy-run transparent '{"listen":...}'`).
//!
//! Arguments: the mode (`transparent` or `socks5`) and its configuration as JSON (the
//! same keys as relayd's TOML). Prints `ready ADDR` once listening; on SIGUSR1 prints the
//! counters as one JSON line; on SIGTERM or SIGINT drains (stops accepting, waits up to
//! `drain_timeout_secs`) and prints the final counters as one JSON line, then exits.

use std::io::Write as _;

use relay_proxy::{ProxyHandle, Socks5Config, Socks5Proxy, TransparentConfig, TransparentProxy};
use tokio::signal::unix::{SignalKind, signal};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: relay-proxy-run transparent|socks5 CONFIG_JSON");
        std::process::exit(2);
    }
    if let Err(e) = relay_proxy::raise_fd_limit() {
        eprintln!("relay-proxy-run: raising RLIMIT_NOFILE: {e}");
    }
    let threads = std::env::var("RELAY_PROXY_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1usize);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = rt.block_on(run(&args[1], &args[2]));
    std::process::exit(code);
}

async fn run(mode: &str, json: &str) -> i32 {
    let handle: ProxyHandle = match start(mode, json) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("relay-proxy-run: {e}");
            return 1;
        }
    };
    println!("ready {}", handle.local_addr());
    let _ = std::io::stdout().flush();
    let (Ok(mut term), Ok(mut int), Ok(mut usr1)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::user_defined1()),
    ) else {
        eprintln!("relay-proxy-run: cannot install signal handlers");
        return 1;
    };
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = usr1.recv() => print_stats("stats", &handle.stats()),
        }
    }
    let fin = handle.shutdown().await;
    print_stats("final", &fin);
    0
}

fn start(mode: &str, json: &str) -> Result<ProxyHandle, String> {
    match mode {
        "transparent" => {
            let cfg: TransparentConfig = serde_json::from_str(json).map_err(|e| e.to_string())?;
            TransparentProxy::bind(cfg)
                .and_then(TransparentProxy::spawn)
                .map_err(|e| e.to_string())
        }
        "socks5" => {
            let cfg: Socks5Config = serde_json::from_str(json).map_err(|e| e.to_string())?;
            Socks5Proxy::bind(cfg)
                .and_then(Socks5Proxy::spawn)
                .map_err(|e| e.to_string())
        }
        other => Err(format!("unknown mode {other:?} (transparent or socks5)")),
    }
}

fn print_stats(tag: &str, s: &relay_proxy::StatsSnapshot) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{tag} {}",
        serde_json::to_string(s).unwrap_or_default()
    );
    let _ = out.flush();
}
