//! Prometheus/OpenMetrics metrics: every figure of `relayd status` as a series, encoded
//! with `prometheus-client` ([`encode`]), and the `/metrics` endpoint ([`serve`]) on the
//! daemon's tokio runtime. `relayd status --format prometheus` prints [`encode`] of the
//! status the socket returns, so the endpoint and the command print the same text.
//!
//! The series are built from a [`Status`] snapshot: the queue counters are atomics read
//! without a lock, so a scrape never takes a lock the packet path takes.
//!
//! Per-service counters are one family, `relayd_service_counter_total{service, kind,
//! counter}` (and `relayd_service_gauge` for the few that are gauges), rather than one
//! family per counter name: the names are chosen by each service kind (a custom build
//! adds its own), are not all valid metric names (`sid:1000001`), and a fixed set of
//! family names keeps dashboards and alerts independent of the configuration. IDS rule
//! hits (counters named `sid:N` of an `ids` service) get their own family,
//! `relayd_ids_rule_hits_total{service, sid}`, with a series only for rules that have
//! matched (a rule set has tens of thousands of rules).

use crate::status::Status;
use http_body_util::Full;
use hyper::body::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The content type of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A series' labels, in order.
type Labels = Vec<(String, String)>;
/// A counter family.
type Counters = Family<Labels, Counter>;
/// A gauge family (f64 values: times, and counts that may exceed i64).
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

mod ike;

/// A label value escaped as the text format wants it (`\`, `"` and newlines), since
/// `prometheus-client` writes label values as given; service names come from the
/// configuration file.
fn esc(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

/// Labels from pairs, values escaped.
fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), esc(v)))
        .collect()
}

/// A registry being filled from one snapshot.
struct Builder(Registry);

impl Builder {
    /// A counter family called `name` (the encoder adds `_total`). `help` without its
    /// final full stop: the encoder adds one.
    fn counter(&mut self, name: &str, help: &str) -> Counters {
        let f = Counters::default();
        self.0.register(name, help.trim_end_matches('.'), f.clone());
        f
    }

    /// A gauge family called `name`.
    fn gauge(&mut self, name: &str, help: &str) -> Gauges {
        let f = Gauges::default();
        self.0.register(name, help.trim_end_matches('.'), f.clone());
        f
    }

    /// A counter without labels, set to `v`.
    fn single_counter(&mut self, name: &str, help: &str, v: u64) {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        self.0.register(name, help.trim_end_matches('.'), c);
    }

    /// A gauge without labels, set to `v`.
    fn single_gauge(&mut self, name: &str, help: &str, v: f64) {
        let g = Gauge::<f64, AtomicU64>::default();
        g.set(v);
        self.0.register(name, help.trim_end_matches('.'), g);
    }
}

/// `text` with each run of sample lines sorted, so that the output does not depend on
/// the order of a hash map (the endpoint and `relayd status --format prometheus` print
/// the same text for the same status).
fn sorted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run: Vec<&str> = Vec::new();
    let flush = |run: &mut Vec<&str>, out: &mut String| {
        run.sort_unstable();
        for l in run.drain(..) {
            out.push_str(l);
            out.push('\n');
        }
    };
    for line in text.lines() {
        if line.starts_with('#') {
            flush(&mut run, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            run.push(line);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// Sets counter `l` of `f` to `v` (a fresh family per scrape, so `inc_by` sets it).
fn set(f: &Counters, l: Labels, v: u64) {
    f.get_or_create(&l).inc_by(v);
}

/// Sets gauge `l` of `f` to `v`.
fn put(f: &Gauges, l: Labels, v: f64) {
    f.get_or_create(&l).set(v);
}

/// The OpenMetrics text of `s`: one series per figure `relayd status` shows, with HELP
/// and TYPE lines, ending in `# EOF`.
pub fn encode(s: &Status) -> String {
    let mut b = Builder(Registry::default());
    let build = b.gauge(
        "relayd_build_info",
        "relayd's version, as a label; the value is always 1.",
    );
    put(&build, labels(&[("version", &s.version)]), 1.0);
    b.single_gauge(
        "relayd_start_time_seconds",
        "When the daemon started, in seconds since the Unix epoch.",
        s.start_time_ms as f64 / 1000.0,
    );
    b.single_counter(
        "relayd_reloads",
        "Successful SIGHUP reloads since start.",
        s.reloads,
    );
    b.single_counter(
        "relayd_reload_failures",
        "Refused SIGHUP reloads since start (the running configuration was kept).",
        s.reload_failures,
    );

    // Per queue.
    let q_counters: [(&str, &str); 9] = [
        ("packets", "Packets received from the queue."),
        ("accepted", "Packets accepted (modified or not)."),
        ("dropped", "Packets dropped."),
        ("modified", "Packets accepted with modified bytes."),
        ("repeated", "Packets repeated with a mark."),
        (
            "malformed",
            "Packets that could not be parsed (handled by the queue's policy).",
        ),
        ("errors", "Datapath errors."),
        (
            "enobufs",
            "Receive buffer overruns (ENOBUFS): packets lost.",
        ),
        ("batches", "Receive system calls that returned packets."),
    ];
    let fams: Vec<Counters> = q_counters
        .iter()
        .map(|(n, h)| b.counter(&format!("relayd_queue_{n}"), h))
        .collect();
    let k_queue = b.counter(
        "relayd_queue_kernel_queue_dropped",
        "Packets the kernel dropped because the queue was full (nfnetlink_queue).",
    );
    let k_user = b.counter(
        "relayd_queue_kernel_user_dropped",
        "Packets the kernel dropped because it could not deliver them to relayd.",
    );
    let k_wait = b.gauge(
        "relayd_queue_kernel_waiting_packets",
        "Packets waiting in the kernel for relayd's verdict now.",
    );
    let datapath = b.counter(
        "relayd_queue_datapath",
        "A datapath's own counters per queue (XDP: transmitted, tx_full, to_kernel, the AF_XDP sockets' statistics).",
    );
    let off_flows = b.counter(
        "relayd_queue_offload_flows",
        "Flows offloaded (their later packets skip the queue), by reason.",
    );
    type OffloadField = fn(&crate::status::OffloadStatus) -> u64;
    let off_other: Vec<(Counters, OffloadField)> = vec![
        (
            b.counter(
                "relayd_queue_offload_failed",
                "Offloads the datapath could not carry out (the flow stayed inline).",
            ),
            |o| o.failed,
        ),
        (
            b.counter(
                "relayd_queue_offload_revoked",
                "Offloaded flows taken back (a reload's new generation, or expiry).",
            ),
            |o| o.revoked,
        ),
        (
            b.counter(
                "relayd_queue_offload_skipped_packets",
                "Packets of offloaded flows that skipped the queue.",
            ),
            |o| o.skipped_packets,
        ),
        (
            b.counter(
                "relayd_queue_offload_skipped_bytes",
                "Bytes of offloaded flows that skipped the queue.",
            ),
            |o| o.skipped_bytes,
        ),
    ];
    let up = b.gauge(
        "relayd_queue_thread_up",
        "1 while the queue's thread runs its loop, 0 if it has ended or is stuck.",
    );
    for q in &s.queues {
        let num = q.num.to_string();
        let l = labels(&[("queue", &num), ("hook", &q.hook)]);
        let values = [
            q.packets,
            q.accepted,
            q.dropped,
            q.modified,
            q.repeated,
            q.malformed,
            q.errors,
            q.enobufs,
            q.batches,
        ];
        for (f, v) in fams.iter().zip(values) {
            set(f, l.clone(), v);
        }
        if let Some(k) = &q.kernel {
            set(&k_queue, l.clone(), k.queue_dropped);
            set(&k_user, l.clone(), k.user_dropped);
            put(&k_wait, l.clone(), f64::from(k.waiting));
        }
        for (counter, v) in &q.datapath {
            set(
                &datapath,
                labels(&[("queue", &num), ("hook", &q.hook), ("counter", counter)]),
                *v,
            );
        }
        if let Some(o) = &q.offload {
            for (reason, v) in &o.flows {
                set(
                    &off_flows,
                    labels(&[("queue", &num), ("hook", &q.hook), ("reason", reason)]),
                    *v,
                );
            }
            for (f, get) in &off_other {
                set(f, l.clone(), get(o));
            }
        }
        let healthy = !s.unhealthy_queues.contains(&q.num);
        put(&up, l, if healthy { 1.0 } else { 0.0 });
    }
    let program = b.counter(
        "relayd_xdp_program_packets",
        "Packets an XDP port's program saw, by outcome (redirected, no_socket, pass_unmatched, ...).",
    );
    let offload = b.gauge(
        "relayd_xdp_offload",
        "An XDP port's offloaded flows: live entries of its map (flows) and the packets and bytes they passed, entries deleted when idle (expired) or after a reload (revoked).",
    );
    for x in &s.xdp {
        for (outcome, v) in x.program.iter().flatten() {
            set(
                &program,
                labels(&[("interface", &x.interface), ("outcome", outcome)]),
                *v,
            );
        }
        for (what, v) in x.offload.iter().flatten() {
            put(
                &offload,
                labels(&[("interface", &x.interface), ("counter", what)]),
                *v as f64,
            );
        }
    }

    // Per service.
    let sv_packets = b.counter(
        "relayd_service_packets",
        "Packets a service instance saw (summed over the queues that run it).",
    );
    let sv_counter = b.counter(
        "relayd_service_counter",
        "A service instance's own counter, named by the `counter` label.",
    );
    let sv_gauge = b.gauge(
        "relayd_service_gauge",
        "A service instance's own gauge (a current value), named by the `counter` label.",
    );
    let ids_hits = b.counter(
        "relayd_ids_rule_hits",
        "Packets an IDS rule matched, by rule sid.",
    );
    for sv in &s.services {
        let base = [("service", sv.name.as_str()), ("kind", sv.kind.as_str())];
        set(&sv_packets, labels(&base), sv.packets);
        for (name, v) in &sv.counters {
            if sv.gauges.contains(name) {
                let mut l = labels(&base);
                l.push(("counter".into(), esc(name)));
                put(&sv_gauge, l, *v as f64);
            } else if let (Some(sid), "ids") = (name.strip_prefix("sid:"), sv.kind.as_str()) {
                // A rule set has tens of thousands of rules, most never matching: only
                // rules that have matched get a series.
                if *v == 0 {
                    continue;
                }
                set(
                    &ids_hits,
                    labels(&[("service", &sv.name), ("sid", sid)]),
                    *v,
                );
            } else {
                let mut l = labels(&base);
                l.push(("counter".into(), esc(name)));
                set(&sv_counter, l, *v);
            }
        }
    }

    // tc classes.
    let tc_bytes = b.counter("relayd_tc_class_sent_bytes", "Bytes a tc class sent.");
    let tc_packets = b.counter("relayd_tc_class_sent_packets", "Packets a tc class sent.");
    let tc_drops = b.counter(
        "relayd_tc_class_dropped_packets",
        "Packets a tc class's queue dropped.",
    );
    for c in &s.qos {
        let l = labels(&[
            ("interface", &c.interface),
            ("class", &c.class),
            ("name", &c.name),
        ]);
        set(&tc_bytes, l.clone(), c.bytes);
        set(&tc_packets, l.clone(), c.packets);
        set(&tc_drops, l, c.drops);
    }

    // Proxy listeners: each field of their counters, gauges for the current figures.
    let mut lst_counters: Vec<(String, Counters)> = Vec::new();
    let mut lst_gauges: Vec<(String, Gauges)> = Vec::new();
    for ls in &s.listeners {
        let l = labels(&[
            ("listener", &ls.name),
            ("kind", &ls.kind),
            ("listen", &ls.listen),
            ("upstream", &ls.upstream),
            ("state", &ls.state),
        ]);
        let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(ls.stats) else {
            continue;
        };
        for (field, v) in fields {
            let Some(v) = v.as_u64() else { continue };
            if matches!(field.as_str(), "active" | "peak_active") {
                let name = format!("relayd_listener_{field}_connections");
                let f = match lst_gauges.iter().find(|(n, _)| *n == name) {
                    Some((_, f)) => f.clone(),
                    None => {
                        let f = b.gauge(&name, &format!("Proxy listener figure `{field}`."));
                        lst_gauges.push((name, f.clone()));
                        f
                    }
                };
                put(&f, l.clone(), v as f64);
            } else {
                let name = format!("relayd_listener_{field}");
                let f = match lst_counters.iter().find(|(n, _)| *n == name) {
                    Some((_, f)) => f.clone(),
                    None => {
                        let f = b.counter(&name, &format!("Proxy listener counter `{field}`."));
                        lst_counters.push((name, f.clone()));
                        f
                    }
                };
                set(&f, l.clone(), v);
            }
        }
    }

    ike::encode(&mut b, &s.ike);

    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &b.0);
    sorted(&out)
}

/// What the `/metrics` server allows its clients: it is a listener, so an attack surface
/// (a client that never finishes its request, huge headers, many connections).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; beyond, a connection is closed at once.
    pub max_connections: usize,
    /// Time a client has to send its request head.
    pub header_timeout: Duration,
    /// Time a connection may live in all (request, scrape, reply).
    pub connection_timeout: Duration,
    /// The largest request head buffered (hyper's minimum is 8 KiB).
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 16,
            header_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(30),
            max_header_bytes: 8192,
        }
    }
}

/// Binds the metrics listener at `addr` (needs a tokio runtime).
pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// One connection being served: frees its slot when it ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves `/metrics` on `listener` until the task is dropped: `GET /metrics` (or `HEAD`)
/// answers [`encode`] of `status()` (run on tokio's blocking pool; one status serves the
/// scrapes of the next second, see [`FRESH`]), any other path 404,
/// any other method 405. HTTP/1.1 without keep-alive, within `limits`. `status` returns
/// `None` while the daemon is stopping (answered 503).
pub async fn serve<F>(listener: tokio::net::TcpListener, limits: Limits, status: F)
where
    F: Fn() -> Option<Status> + Send + Sync + 'static,
{
    let status = Arc::new(status);
    let last: Snapshot = Arc::new(tokio::sync::Mutex::new(None));
    let active = Arc::new(AtomicUsize::new(0));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(false)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_headers(32);
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE and the like: the connection stays in the backlog; do not spin.
                tracing::debug!("metrics: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if active.load(Ordering::Relaxed) >= limits.max_connections {
            drop(stream);
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(active.clone());
        let status = status.clone();
        let last = last.clone();
        let http = http.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let io = hyper_util::rt::TokioIo::new(stream);
            let svc =
                hyper::service::service_fn(move |req| answer(req, status.clone(), last.clone()));
            let conn = http.serve_connection(io, svc);
            let _ = tokio::time::timeout(limits.connection_timeout, conn).await;
        });
    }
}

/// How long one scrape's text answers the scrapes after it.
const FRESH: Duration = Duration::from_secs(1);

/// The last text served and when it was made. Behind an async mutex, so that concurrent
/// scrapes wait for one status rather than each taking the daemon's lock (and running
/// `tc`) in turn: whoever connects, the daemon makes at most one status a second here.
type Snapshot = Arc<tokio::sync::Mutex<Option<(std::time::Instant, Arc<String>)>>>;

/// The text for a scrape: the last one if it is younger than [`FRESH`], else a new one
/// (`None` while the daemon is stopping).
async fn text<F>(status: Arc<F>, last: Snapshot) -> Option<Arc<String>>
where
    F: Fn() -> Option<Status> + Send + Sync + 'static,
{
    let mut last = last.lock().await;
    if let Some((at, t)) = last.as_ref()
        && at.elapsed() < FRESH
    {
        return Some(t.clone());
    }
    let t = tokio::task::spawn_blocking(move || status().map(|s| encode(&s)))
        .await
        .ok()
        .flatten()
        .map(Arc::new)?;
    *last = Some((std::time::Instant::now(), t.clone()));
    Some(t)
}

/// The response to one request.
async fn answer<F>(
    req: hyper::Request<hyper::body::Incoming>,
    status: Arc<F>,
    last: Snapshot,
) -> Result<hyper::Response<Full<Bytes>>, std::convert::Infallible>
where
    F: Fn() -> Option<Status> + Send + Sync + 'static,
{
    let reply = |code: u16, ctype: &str, body: String| {
        let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or_default();
        if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        Ok(r)
    };
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.uri().path() != "/metrics" {
        return reply(
            404,
            PLAIN,
            "not found: relayd serves /metrics only\n".into(),
        );
    }
    let head = req.method() == hyper::Method::HEAD;
    if req.method() != hyper::Method::GET && !head {
        return reply(405, PLAIN, "method not allowed\n".into());
    }
    match text(status, last).await {
        Some(t) if head => reply(200, CONTENT_TYPE, String::new()).map(|mut r| {
            if let Ok(v) = hyper::header::HeaderValue::from_str(&t.len().to_string()) {
                r.headers_mut().insert(hyper::header::CONTENT_LENGTH, v);
            }
            r
        }),
        Some(t) => reply(200, CONTENT_TYPE, t.as_str().to_owned()),
        None => reply(503, PLAIN, "relayd is stopping\n".into()),
    }
}

#[cfg(test)]
pub(crate) mod tests;
