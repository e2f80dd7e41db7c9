//! The command line: `run`, `check`, `rules`, `status`, `cleanup`. The only place that
//! knows about signals, files, sockets and exit codes.

use crate::config::{self, Config, ConfigErrors, DEFAULT_SOCKET};
use crate::daemon::{self, Daemon};
use crate::registry::Registry;
use crate::status::Status;
use crate::{rules, status};
use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use tokio::signal::unix::{SignalKind, signal};

/// Relay daemon: chains of packet services on Linux NFQUEUE queues.
///
/// relayd takes packets from netfilter's NFQUEUE queues and passes each one through a
/// chain of services (log, mark, drop, compress, ESP encryption, IDS rules, MPLS, delay,
/// the TCP split proxy), then gives the kernel its verdict. One TOML file names the
/// queues, the iptables matches that feed them, and each queue's chain.
///
/// relayd installs its own iptables rules: chains named PREFIX-HOOK (RELAYD-FORWARD, ...)
/// in the raw and mangle tables, jumped to from position 1 of the built-in chains. It
/// removes them when it stops. While relayd is down, a fail-open queue's traffic passes
/// unprocessed and a fail-closed queue's traffic is dropped.
///
/// Commands that touch iptables or NFQUEUE need root (CAP_NET_ADMIN). check and rules
/// change nothing; replay runs offline and unprivileged.
#[derive(Debug, Parser)]
#[command(
    name = "relayd",
    version,
    propagate_version = true,
    subcommand_value_name = "COMMAND"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon in the foreground (SIGHUP reloads, SIGINT/SIGTERM stop).
    ///
    /// Start-up, in this order: bind the status socket; take the instance lock (one
    /// relayd per chain prefix per network namespace); remove rules an earlier relayd
    /// left behind after a crash; bind every configured queue, all or nothing, with one
    /// thread per queue; install the iptables rules with one iptables-restore run per
    /// address family. Rules go in only once the queues they feed are bound. If a step
    /// fails, relayd undoes what it did and exits 1.
    ///
    /// SIGHUP reloads the configuration file: it is checked as relayd check does, then
    /// applied without losing a packet (new queues bound first, the rules swapped table by
    /// table, each queue switched to its new chain between two batches). A file with
    /// errors is refused, the errors logged, and the running configuration kept.
    /// daemon.chain_prefix, daemon.iptables, daemon.socket and daemon.metrics change only
    /// on a restart.
    ///
    /// SIGINT or SIGTERM stops relayd: the status socket is removed, then all of relayd's
    /// rules, then each queue is drained (at most 2 s) and unbound. After a crash or
    /// SIGKILL, relayd cleanup (or the next relayd run) removes what was left.
    ///
    /// Logs go to stderr, coloured only on a terminal.
    Run {
        /// Configuration file, e.g. /etc/relayd/relayd.toml.
        #[arg(short, long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
        config: PathBuf,
        /// Log filter (tracing syntax, e.g. "info" or "relayd::dump=warn,info"); RUST_LOG wins.
        #[arg(long, default_value = "info", value_name = "FILTER")]
        log: String,
    },
    /// Check a configuration: exit 0 if valid, 2 with errors naming file, line and field.
    ///
    /// Reads the file, checks every key (unknown keys are errors, so a typo is never
    /// silently ignored), and tests each queue's rule with iptables-restore --test, which
    /// commits nothing. It binds no queue, so it cannot notice a queue number another
    /// program holds. Errors go to stderr, one per line, as FILE:LINE:COLUMN: FIELD:
    /// MESSAGE.
    ///
    /// When iptables cannot be run (not root, no CAP_NET_ADMIN), the rules are not tested:
    /// check prints a warning and still exits 0 if the rest is valid.
    ///
    /// A valid file's report starts with the capabilities relayd needs to run it, and
    /// why: CAP_NET_ADMIN always, CAP_NET_RAW for a service that sends packets itself,
    /// CAP_SYS_NICE for a negative queue nice, CAP_NET_BIND_SERVICE for a listener below
    /// port 1024. A unit's AmbientCapabilities= (or daemon.user) needs exactly these.
    Check {
        /// Configuration file.
        #[arg(short, long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
        config: PathBuf,
    },
    /// Print the iptables-restore input `run` would install.
    ///
    /// The rules as run installs them on a box where none of relayd's chains exist yet:
    /// one block per address family in use, each after a comment naming the program it
    /// is fed to (iptables-restore -w --noflush, or iptables-legacy-restore with
    /// daemon.iptables = "legacy"). It runs no iptables command and changes nothing.
    Rules {
        /// Configuration file.
        #[arg(short, long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
        config: PathBuf,
    },
    /// Show the running daemon's counters.
    ///
    /// Asks the running daemon over its unix socket and prints a table: per queue the
    /// packets, accepted, dropped, modified, malformed, errors, ENOBUFS overruns, the
    /// kernel's drops (k.drop) and packets waiting for a verdict (k.wait); per service
    /// instance its packets and its own counters; proxy listeners and tc classes when
    /// there are any. --format prometheus prints the same OpenMetrics text the daemon
    /// serves on /metrics (daemon.metrics), e.g. for node_exporter's textfile collector.
    /// Exits 1 when no daemon answers.
    Status {
        /// Status socket (default: from the configuration, else /run/relayd/relayd.sock).
        #[arg(short, long, value_name = "SOCKET", value_hint = clap::ValueHint::AnyPath)]
        socket: Option<PathBuf>,
        /// Configuration file to take the socket path from.
        #[arg(short, long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
        config: Option<PathBuf>,
        /// Print JSON instead of a table (the same as --format json).
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Output format.
        #[arg(long, value_enum, value_name = "FORMAT", default_value_t = StatusFormat::Table)]
        format: StatusFormat,
    },
    /// Run a queue's chain over a capture file, offline and unprivileged (like `suricata -r`).
    ///
    /// Builds one configured queue's chain and feeds it every IP packet of the capture,
    /// with each packet's capture timestamp as the clock the services see. No netlink,
    /// iptables or root is involved, and the queue's match is not applied. Prints the
    /// status table of the replayed queue and its services at the end.
    Replay {
        /// Configuration file.
        #[arg(short, long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
        config: PathBuf,
        /// Capture to read (pcap or pcapng; Ethernet, Linux cooked, raw IP, BSD loopback, PPP or Cisco HDLC).
        #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
        pcap: PathBuf,
        /// Queue whose chain runs (default: the first configured).
        #[arg(long, value_name = "NUM")]
        queue: Option<u16>,
        /// Write the packets that come out to this pcap (raw IP, original timestamps).
        #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
        write: Option<PathBuf>,
        /// Print one JSON object per packet verdict (then the summary goes to stderr).
        #[arg(long)]
        json: bool,
        /// Egress queue backlog adaptive services see, in bytes.
        #[arg(long, default_value_t = 0, value_name = "BYTES")]
        backlog_bytes: u32,
        /// Egress rate adaptive services see, e.g. "100mbit" (default: none).
        #[arg(long, value_name = "RATE")]
        bandwidth: Option<String>,
    },
    /// Write a fresh random key for an ESP cipher to a new file (mode 0600).
    ///
    /// The file holds the key in hex, laid out as ip xfrm takes keys: for GCM the AES key
    /// followed by its 4-byte salt, for CBC+HMAC the AES key followed by the 32-byte
    /// HMAC-SHA-256 key. An existing file is never overwritten. Copy the file to the
    /// relay at the other end over a secure channel; each direction has its own key.
    Keygen {
        /// aes-128-gcm, aes-256-gcm, aes-128-cbc-hmac-sha256 or aes-256-cbc-hmac-sha256.
        #[arg(value_name = "CIPHER")]
        cipher: String,
        /// The key file to create (never overwritten).
        #[arg(value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
        file: PathBuf,
    },
    /// Remove every rule relayd owns (after a crash).
    ///
    /// Removes every chain named PREFIX-HOOK in the raw and mangle tables, for IPv4 and
    /// IPv6, and every rule that jumps or goes to one, deleting rules by their exact text
    /// so that no other rule is touched. Also removes the split proxy's ip rule and
    /// local route, the services' tc trees (an htb root qdisc with relayd's handle), and
    /// relayd's XDP programs (named relayd_xdp) from every interface of the namespace.
    /// A daemon that stops normally cleans up itself, and relayd run does this at start.
    ///
    /// While a relayd with the same prefix runs in this network namespace, cleanup refuses
    /// and exits 1: removing its rules would silently take its queues out of the traffic
    /// path. --force cleans up anyway.
    Cleanup {
        /// Configuration file to take the chain prefix and iptables flavour from.
        #[arg(short, long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
        config: Option<PathBuf>,
        /// Chain prefix (default RELAYD).
        #[arg(long, value_name = "PREFIX")]
        prefix: Option<String>,
        /// Clean up even if a running relayd holds the prefix.
        #[arg(long)]
        force: bool,
    },
}

/// How `relayd status` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StatusFormat {
    /// A table for people.
    Table,
    /// The status socket's JSON, pretty-printed.
    Json,
    /// OpenMetrics/Prometheus text, as served on /metrics.
    Prometheus,
}

/// Runs the CLI with the built-in services.
pub fn main() -> ExitCode {
    main_with(Registry::with_builtins())
}

/// Runs the CLI with the given service kinds (a custom build registers its own first).
pub fn main_with(registry: Registry) -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { config, log } => {
            init_logging(&log);
            let cfg = match load(&config, &registry) {
                Ok(c) => c,
                Err(code) => return code,
            };
            cfg.warnings.iter().for_each(|w| tracing::warn!("{w}"));
            match run(cfg, registry) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    eprintln!("relayd: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Check { config } => check(&config, &registry),
        Command::Rules { config } => {
            let cfg = match load(&config, &registry) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match rules::restore_text(&cfg) {
                Ok(t) => {
                    print!("{t}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("relayd: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Status {
            socket,
            config,
            json,
            format,
        } => {
            let format = if json { StatusFormat::Json } else { format };
            let socket = match (socket, config) {
                (Some(s), _) => s,
                (None, Some(c)) => match load(&c, &registry) {
                    Ok(cfg) => cfg.daemon.socket,
                    Err(code) => return code,
                },
                (None, None) => PathBuf::from(DEFAULT_SOCKET),
            };
            match status::query(&socket) {
                Ok(s) if format == StatusFormat::Json => {
                    println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Ok(s) if format == StatusFormat::Prometheus => {
                    print!("{}", crate::metrics::encode(&s));
                    ExitCode::SUCCESS
                }
                Ok(s) => {
                    print!("{}", s.render());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("relayd: no daemon answers on {}: {e}", socket.display());
                    ExitCode::from(1)
                }
            }
        }
        Command::Replay {
            config,
            pcap,
            queue,
            write,
            json,
            backlog_bytes,
            bandwidth,
        } => {
            // Services log as they would live (dump lines on stderr); the rest stays quiet.
            init_logging("warn,relayd::dump=info");
            let rate = match bandwidth.as_deref().map(relay_core::units::parse_rate) {
                None => 0,
                Some(Ok(bits)) => bits / 8,
                Some(Err(e)) => {
                    eprintln!("relayd: --bandwidth: {e}");
                    return ExitCode::from(2);
                }
            };
            let cfg = match load(&config, &registry) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let opts = crate::replay::ReplayOptions {
                pcap,
                queue,
                write,
                json,
                // Offline: adaptive services read this fixed queue instead of the kernel's.
                egress: (backlog_bytes, rate),
            };
            let stdout = std::io::stdout();
            match crate::replay::run(&cfg, &opts, &mut stdout.lock()) {
                Ok(status) if json => {
                    eprint!("{}", status.render());
                    ExitCode::SUCCESS
                }
                Ok(status) => {
                    print!("{}", status.render());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("relayd: replay: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Keygen { cipher, file } => {
            let Some(c) = relay_svc_crypto::Cipher::from_name(&cipher) else {
                let names: Vec<&str> = relay_svc_crypto::Cipher::ALL
                    .iter()
                    .map(|(n, _)| *n)
                    .collect();
                eprintln!(
                    "relayd: unknown cipher `{cipher}` (one of {})",
                    names.join(", ")
                );
                return ExitCode::from(2);
            };
            match relay_svc_crypto::keygen(c, &file) {
                Ok(()) => {
                    println!(
                        "wrote {} ({} bytes, mode 0600)",
                        file.display(),
                        c.key_len()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("relayd: keygen: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Cleanup {
            config,
            prefix,
            force,
        } => {
            let (mut p, mut flavor) = ("RELAYD".to_string(), config::IptablesFlavor::Auto);
            // The split proxy's ip rule and route, found by relayd's preference and table.
            let mut routing = (
                config::DEFAULT_TPROXY_RULE_PREF,
                config::DEFAULT_TPROXY_TABLE,
            );
            // tc trees: relayd's HTB handle, and any other a configuration names.
            let mut tc_handles = vec![relay_control::tc::DEFAULT_HANDLE];
            if let Some(c) = config {
                match load(&c, &registry) {
                    Ok(cfg) => {
                        for p in crate::qos::plans(cfg.queue_services()).unwrap_or_default() {
                            if !tc_handles.contains(&p.handle) {
                                tc_handles.push(p.handle);
                            }
                        }
                        (p, flavor) = (cfg.daemon.chain_prefix, cfg.daemon.iptables);
                        if let Some(t) = &cfg.tproxy {
                            routing = (t.spec.rule_pref, t.spec.table);
                        }
                    }
                    Err(code) => return code,
                }
            }
            if let Some(x) = prefix {
                p = x;
            }
            // Hold the lock while cleaning, so that no daemon starts halfway through.
            let _lock = match crate::lock::InstanceLock::acquire(&p) {
                Ok(l) => Some(l),
                Err(e @ crate::lock::LockError::Held { .. }) if !force => {
                    eprintln!("relayd: refusing to clean up: {e}; stop it first (or --force)");
                    return ExitCode::from(1);
                }
                Err(crate::lock::LockError::Io(e)) if !force => {
                    eprintln!("relayd: cannot take the instance lock: {e:#}");
                    return ExitCode::from(1);
                }
                Err(_) => None,
            };
            let routes = match crate::listeners::remove_routing(routing.0, routing.1) {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("relayd: removing the split proxy's ip rule and route: {e:#}");
                    return ExitCode::from(1);
                }
            };
            let tc = relay_control::tc::Tc::system();
            let trees: Vec<String> = tc_handles
                .iter()
                .flat_map(|h| crate::qos::cleanup(&tc, *h))
                .collect();
            // relayd's XDP programs on every interface of this network namespace (a
            // program another tool attached is left alone).
            let xdp = match relay_xdp::attach::cleanup() {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("relayd: removing relayd's XDP programs: {e}");
                    return ExitCode::from(1);
                }
            };
            match daemon::cleanup_all(&p, flavor) {
                Ok(n) => {
                    println!(
                        "removed {n} chains and rules with prefix {p}, {routes} ip rules and routes (preference {}, table {}), {} XDP programs{}, and {} tc trees{}",
                        routing.0,
                        routing.1,
                        xdp.len(),
                        if xdp.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", xdp.join(", "))
                        },
                        trees.len(),
                        if trees.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", trees.join(", "))
                        }
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("relayd: cleanup failed: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// `relayd check`: loads and checks `config` as `relayd run` would, says which
/// capabilities it needs, and does nothing else: building the services' factories opens
/// no file for writing and starts no thread (what they need is made by a running relayd,
/// from their manifests).
pub fn check(config: &Path, registry: &Registry) -> ExitCode {
    let cfg = match load(config, registry) {
        Ok(c) => c,
        Err(code) => return code,
    };
    cfg.warnings.iter().for_each(|w| eprintln!("warning: {w}"));
    match rules::validate(&cfg) {
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
        Ok(warning) => {
            if let Some(w) = warning {
                eprintln!("warning: iptables matches not checked: {w}");
            }
            println!(
                "{}",
                crate::privilege::describe(&crate::privilege::needed(&cfg))
            );
            let n: usize = cfg.queues.iter().map(|q| q.nums().count()).sum();
            let xdp = if cfg.xdp.is_empty() {
                String::new()
            } else {
                let x: usize = cfg.xdp.iter().map(|x| x.nums().count()).sum();
                format!(", {} xdp entries, {x} XDP queues", cfg.xdp.len())
            };
            println!(
                "{}: ok ({} queue entries, {n} queues{xdp})",
                config.display(),
                cfg.queues.len()
            );
            ExitCode::SUCCESS
        }
    }
}

fn load(path: &Path, registry: &Registry) -> Result<Config, ExitCode> {
    config::load(path, registry).map_err(|e: ConfigErrors| {
        eprintln!("{e}");
        ExitCode::from(2)
    })
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn run(cfg: Config, registry: Registry) -> anyhow::Result<()> {
    // The proxy listeners relay on this runtime, so it gets worker threads; the queues
    // have threads of their own.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("relayd-rt")
        .enable_all()
        .build()
        .context("starting the runtime")?;
    if !cfg.listeners.is_empty() {
        // Each relayed connection holds two sockets and, with splice, two pipes.
        match relay_proxy::raise_fd_limit() {
            Ok(n) => tracing::debug!(limit = n, "file descriptor limit"),
            Err(e) => tracing::warn!("cannot raise the file descriptor limit: {e}"),
        }
    }
    rt.block_on(serve(cfg, registry))
}

async fn serve(cfg: Config, registry: Registry) -> anyhow::Result<()> {
    // Signal handlers first: a SIGTERM during startup must still lead to a clean exit.
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // systemd's notify socket and watchdog, when it started relayd (else all no-ops).
    let mut notify = crate::notify::Supervisor::from_env();
    let socket_path = cfg.daemon.socket.clone();
    let listener = status::bind_group(&socket_path, cfg.daemon.socket_group)
        .inspect_err(|e| notify.failed(e))?;
    // daemon.metrics: bound before the rules go in (and before any privilege drop).
    let metrics_listener = match cfg.daemon.metrics {
        Some(a) => match crate::metrics::bind(a).await {
            Ok(l) => Some(l),
            Err(e) => {
                status::remove_socket(&socket_path);
                let e = anyhow::anyhow!("binding daemon.metrics {a}: {e}");
                notify.failed(&e);
                return Err(e);
            }
        },
        None => None,
    };
    // daemon.user: with the socket bound and the instance lock taken as root, relayd
    // drops to the user and the capabilities its configuration needs before it binds a
    // queue or installs a rule. Credentials and capabilities are per thread, and queue
    // threads take no signals: dropping before they exist is the only way every thread
    // ends up unprivileged (later ones inherit from the main thread). Start-up then also
    // proves that the capabilities kept suffice.
    let started = match &cfg.daemon.user {
        None => Daemon::start(cfg),
        Some(user) => crate::lock::InstanceLock::acquire(&cfg.daemon.chain_prefix)
            .map_err(anyhow::Error::from)
            .and_then(|lock| {
                // The ESP state directories, for the user (it could not make them).
                // SAFETY: geteuid cannot fail.
                if unsafe { libc::geteuid() } == 0 {
                    crate::state_dirs::prepare(&cfg, user).map_err(anyhow::Error::msg)?;
                }
                // The services' log files, opened as root as the state directories are
                // made; their writers start after the drop, as the user.
                let logs = crate::resources::open_logs(&cfg)?;
                drop_privileges(user, &crate::privilege::needed_set(&cfg))?;
                Ok((lock, logs))
            })
            .and_then(|(lock, logs)| Daemon::start_opened(cfg, lock, logs)),
    };
    let daemon = match started {
        Ok(d) => Arc::new(Mutex::new(Some(d))),
        Err(e) => {
            status::remove_socket(&socket_path);
            notify.failed(&e);
            return Err(e);
        }
    };
    // The IKE daemon: its SAs go to the ESP services' SA table.
    let ike_specs = lock(&daemon)
        .as_ref()
        .map(|d| d.config().ike.clone())
        .unwrap_or_default();
    let ike = Arc::new(crate::ike::Ike::start(
        ike_specs,
        Box::new(crate::ike::EspTable::new(relay_svc_crypto::IkeSas::shared(
            registry.kept(),
        ))),
    ));
    tracing::info!(socket = %socket_path.display(), "relayd running");
    // Only now, with the rules installed, is relayd ready (the status socket came first).
    notify.ready(&health(&daemon, notify.stuck_after()));
    let for_status = daemon.clone();
    let ike_status = ike.clone();
    let server = tokio::spawn(status::serve(
        listener,
        status::ServerLimits::default(),
        move || with_ike(lock(&for_status).as_ref().map(Daemon::status), &ike_status),
    ));
    let metrics = metrics_listener.map(|l| {
        let for_metrics = daemon.clone();
        let ike_metrics = ike.clone();
        if let Ok(a) = l.local_addr() {
            tracing::info!(address = %a, "serving /metrics");
        }
        tokio::spawn(crate::metrics::serve(
            l,
            crate::metrics::Limits::default(),
            move || {
                with_ike(
                    lock(&for_metrics).as_ref().map(Daemon::status),
                    &ike_metrics,
                )
            },
        ))
    });
    let mut watchdog = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut pings = notify.pinger();
    loop {
        tokio::select! {
            _ = hup.recv() => {
                notify.reloading();
                let outcome = reload(&daemon, &registry).await;
                if outcome.is_ok() && let Some(d) = lock(&daemon).as_ref() {
                    ike.reload(d.config().ike.clone());
                }
                if outcome.is_err() && let Some(d) = lock(&daemon).as_mut() {
                    d.reload_failed();
                }
                notify.reloaded(outcome, &health(&daemon, notify.stuck_after()));
            }
            _ = term.recv() => {
                tracing::info!("SIGTERM: stopping");
                notify.stopping("SIGTERM");
                break;
            }
            _ = int.recv() => {
                tracing::info!("SIGINT: stopping");
                notify.stopping("SIGINT");
                break;
            }
            _ = watchdog.tick() => notify.check(&health(&daemon, notify.stuck_after()), false),
            _ = pings.tick() => notify.check(&health(&daemon, notify.stuck_after()), true),
        }
    }
    server.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    status::remove_socket(&socket_path);
    // DELETE to every IKE peer while the rules and queues are still in place.
    ike.shutdown(std::time::Duration::from_secs(2)).await;
    let d = lock(&daemon).take();
    match d {
        Some(mut d) => {
            // No new SYN is split from here; split connections drain within each
            // listener's drain_timeout_secs, then everything relayd added goes.
            let handles = d.stop_serving();
            crate::listeners::drain_all(handles).await;
            d.shutdown().context("removing rules on exit")
        }
        None => Ok(()),
    }
}

/// A status snapshot with the IKE daemon's connections added.
fn with_ike(st: Option<Status>, ike: &crate::ike::Ike) -> Option<Status> {
    st.map(|mut s| {
        s.ike = ike.status();
        s
    })
}

/// Drops from root to `user` with exactly `keep` (see [`crate::privilege::drop_to`]);
/// started as another user, relayd already is unprivileged and only says so.
fn drop_privileges(user: &config::DaemonUser, keep: &caps::CapsHashSet) -> anyhow::Result<()> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        tracing::warn!(user = %user.name, "not started as root: daemon.user ignored");
        return Ok(());
    }
    crate::privilege::drop_to(&user.name, keep)
        .with_context(|| format!("dropping to daemon.user {}", user.name))?;
    let mut names: Vec<String> = keep.iter().map(|c| c.to_string()).collect();
    names.sort();
    tracing::info!(user = %user.name, uid = user.uid, gid = user.gid, capabilities = %names.join(","), "dropped privileges");
    Ok(())
}

/// The queue threads' health ([`Daemon::health`]), for the watchdog.
fn health(daemon: &Mutex<Option<Daemon>>, stuck_after: std::time::Duration) -> daemon::Health {
    lock(daemon)
        .as_ref()
        .map(|d| d.health(stuck_after))
        .unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A SIGHUP reload; `Err` with the reason if it was refused (the running configuration
/// stays in force).
async fn reload(daemon: &Mutex<Option<Daemon>>, registry: &Registry) -> Result<(), String> {
    let changes = reload_queues(daemon, registry)?;
    if changes.stop.is_empty() && changes.start.is_empty() {
        return Ok(());
    }
    for (spec, handle) in changes.stop {
        tracing::info!(listener = %spec.name, "listener changed or removed: draining the old one");
        if let Some(d) = lock(daemon).as_mut() {
            d.drain_listener(spec, handle);
        }
    }
    for spec in changes.start {
        match crate::listeners::bind_retrying(&spec).await {
            Ok(h) => {
                tracing::info!(listener = %spec.name, kind = spec.kind.as_str(), listen = %h.local_addr(), "listener running");
                if let Some(d) = lock(daemon).as_mut() {
                    d.add_listener(spec, h);
                }
            }
            Err(e) => tracing::error!(listener = %spec.name, "listener not started: {e:#}"),
        }
    }
    Ok(())
}

/// The synchronous part of a reload (configuration, queues, rules); `Err` with the reason
/// if it was refused.
fn reload_queues(
    daemon: &Mutex<Option<Daemon>>,
    registry: &Registry,
) -> Result<daemon::ListenerChanges, String> {
    let mut guard = lock(daemon);
    let Some(d) = guard.as_mut() else {
        return Ok(Default::default());
    };
    let path = d.config().path.clone();
    tracing::info!(config = %path.display(), "SIGHUP: reloading");
    let new = match config::load(&path, registry) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("reload refused, keeping the running configuration:\n{e}");
            return Err(e.to_string());
        }
    };
    new.warnings.iter().for_each(|w| tracing::warn!("{w}"));
    // After a drop (or started with fewer), no capability can be gained: say which one
    // the new file needs rather than fail halfway through applying it.
    let missing = crate::privilege::missing(&new);
    if !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(|c| c.to_string()).collect();
        let e = format!(
            "the new configuration needs {} which relayd does not have (restart it to gain them)",
            names.join(", ")
        );
        tracing::error!("reload refused, keeping the running configuration: {e}");
        return Err(e);
    }
    match d.reload(new) {
        Ok(changes) => {
            tracing::info!("reloaded");
            Ok(changes)
        }
        Err(e) => {
            tracing::error!("reload refused, keeping the running configuration: {e:#}");
            Err(format!("{e:#}"))
        }
    }
}
