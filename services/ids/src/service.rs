//! The `ids` service: configuration, factory (one rule set per configuration, shared by
//! the queue threads, and a manifest asking relayd for the EVE log) and the per-packet call.

use crate::applayer::http::{DecodeOptions, HttpLimits};
use crate::engine::{
    Detector, DetectorOptions, ExceptionPolicy, LoadOptions, OffloadOptions, Outcome, RuleSet,
};
use crate::eve::EveWriter;
use crate::flow::FlowLimits;
use crate::flow::stream::StreamLimits;
use crate::hostos::{FragPolicy, PolicyMap, PolicySpec};
use crate::reject::{RejectCounters, RejectLimits, Rejecter};
use relay_core::units::de_u32;
use relay_core::{
    Action, Context, Counters, FailPolicy, LogFile, Manifest, Packet, Resources, Service,
    ServiceConfig, ServiceFactory, Tally,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Configuration of `ids` (`[service.NAME]` with `kind = "ids"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdsConfig {
    /// Rules files, loaded in order. A file that cannot be read is always an error.
    pub rules: Vec<PathBuf>,
    /// Where EVE JSON alert lines go (appended); no alert lines without it.
    #[serde(default)]
    pub eve_log: Option<PathBuf>,
    /// Address and port variables, without the `$` (`HOME_NET = "[10.0.0.0/8]"`); values
    /// may refer to other variables (`EXTERNAL_NET = "!$HOME_NET"`).
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// Refuse to start (or to reload) if any rule fails to load. Default false: the other
    /// rules load and the failures are logged.
    #[serde(default)]
    pub strict: bool,
    /// A Suricata `classification.config` to add to or override the built-in classtypes.
    #[serde(default)]
    pub classification: Option<PathBuf>,
    /// A Suricata `threshold.config` (threshold, event_filter, suppress, rate_filter
    /// lines) applied to the rules; its bad lines count as rule errors (see `strict`).
    #[serde(default)]
    pub threshold_file: Option<PathBuf>,
    /// A mark for the resets and unreachables `reject` sends (for the user's own rules:
    /// policy routing, accounting). relayd puts the stage bits of the queue's hook
    /// ([`Context::sent_mark`]) on top in any case, replacing those bits of this mark, so
    /// that its own rules at the hooks the answer has crossed let it through unqueued.
    /// Default: none besides the stage bits.
    #[serde(default, deserialize_with = "de_opt_u32")]
    pub reject_mark: Option<u32>,
    /// Most keys each queue thread tracks for `threshold`, `detection_filter` and `rate`
    /// (default 65536); beyond it new keys share one entry per rule.
    #[serde(default = "default_track_max")]
    pub track_max: usize,
    /// Flows each queue thread tracks (default 65536): flowbits, stream reassembly and
    /// application-layer parsing live in them. A full table evicts flows that are not
    /// established first; beyond that new flows are inspected packet by packet
    /// (`flow_overflow`).
    #[serde(default = "default_flows", deserialize_with = "de_at_least_1_usize")]
    pub flows: usize,
    /// Bytes all TCP streams of a queue thread may hold (default 67108864, 64 MiB);
    /// a stream that would pass it stops being reassembled (`stream_memcap`).
    #[serde(
        default = "default_stream_memcap",
        deserialize_with = "de_at_least_1_usize"
    )]
    pub stream_memcap: usize,
    /// Bytes reassembled per direction of a TCP flow (default 1048576, 1 MiB, Suricata's
    /// `reassembly.depth`; 0: no limit). Past it the stream is inspected packet by packet.
    #[serde(default = "default_stream_depth")]
    pub stream_depth: u64,
    /// Bytes one direction of a TCP flow may hold unconsumed or out of order (default
    /// 262144, 256 KiB).
    #[serde(
        default = "default_stream_buffer",
        deserialize_with = "de_at_least_1_usize"
    )]
    pub stream_buffer: usize,
    /// Reassemble TCP flows picked up without their handshake (default false, as
    /// Suricata's `stream.midstream`).
    #[serde(default)]
    pub midstream: bool,
    /// Inline mode (Suricata's `stream.drop-invalid`): drop a packet its receiving host
    /// would discard (bad checksum, no ACK, PAWS, outside the window, an ACK of unsent
    /// data, an RST outside the window, a TTL too low to reach it) and a segment that
    /// overlaps received bytes with different data. Such packets are never inspected as
    /// part of a stream either way. Default: true when a rule can block (`drop`,
    /// `reject`, `ratelimit`), false for rules that only alert (an IDS changes no
    /// traffic).
    #[serde(default)]
    pub drop_invalid: Option<bool>,
    /// How the protected hosts' TCP resolves overlapping segments, so that the bytes
    /// inspected are the bytes the application reads: one of Suricata's `host-os-policy`
    /// names for every host (`"linux"`, the default), or a table of prefixes with an
    /// optional `default` (`{ default = "linux", "192.168.1.0/24" = "windows" }`), the
    /// receiving host's address choosing.
    #[serde(default = "default_frag_policy")]
    pub stream_policy: PolicySpec,
    /// Bytes of stream before a packet's new bytes that stream inspection includes
    /// (default 2048): a pattern split across segments is found if it spans at most this
    /// many bytes before the segment that completes it.
    #[serde(default = "default_stream_lookback")]
    pub stream_lookback: usize,
    /// HTTP request body bytes kept per transaction, after decoding (default 102400,
    /// 100 KiB, Suricata's `request-body-limit`): what `http.request_body` sees.
    #[serde(
        default = "default_http_body_limit",
        deserialize_with = "de_at_least_1_usize"
    )]
    pub http_request_body_limit: usize,
    /// HTTP response body bytes kept per transaction, after decoding (default 102400,
    /// 100 KiB, Suricata's `response-body-limit`): what `file.data` sees, and where
    /// decompression stops.
    #[serde(
        default = "default_http_body_limit",
        deserialize_with = "de_at_least_1_usize"
    )]
    pub http_response_body_limit: usize,
    /// Content codings of an HTTP body undone at most (default 2, Suricata's
    /// `response-body-decompress-layer-limit`; 1 to 4).
    #[serde(default = "default_http_decompress_layers")]
    pub http_decompress_layers: usize,
    /// Decode `Content-Encoding: lzma` bodies (default false, as Suricata's
    /// `lzma-enabled`); each such body may hold a 1 MiB dictionary while it is decoded.
    #[serde(default)]
    pub http_lzma: bool,
    /// Alerts that may wait for the EVE writer (default 8192); beyond it lines are
    /// dropped and counted (`eve_dropped`), never waited for.
    #[serde(default = "default_eve_queue")]
    pub eve_queue: usize,
    /// Answers (resets, unreachables) `reject` may send per second, all destinations
    /// together, per queue thread (default 1000, the kernel's `icmp_msgs_per_sec`). At
    /// least 1. Answers beyond it are counted (`reject_suppressed`), not sent; the packet
    /// is dropped either way.
    #[serde(default = "default_reject_rate", deserialize_with = "de_at_least_1")]
    pub reject_rate: u32,
    /// Answers that may leave at once before `reject_rate` applies (default 50, the
    /// kernel's `icmp_msgs_burst`). At least 1.
    #[serde(default = "default_reject_burst", deserialize_with = "de_at_least_1")]
    pub reject_burst: u32,
    /// Answers per second to any one address (default 10; 0: no per-destination limit),
    /// like the kernel's per-destination `icmp_ratelimit`: the address a spoofed flood
    /// names as its source gets at most this many.
    #[serde(default = "default_reject_dest_rate")]
    pub reject_dest_rate: u32,
    /// Answers that may leave at once to any one address (default 10). At least 1.
    #[serde(
        default = "default_reject_dest_burst",
        deserialize_with = "de_at_least_1"
    )]
    pub reject_dest_burst: u32,
    /// How the protected hosts reassemble IP fragments, when relayd sees them unreassembled
    /// (no conntrack defragmentation in the relay's namespace): one policy name for every
    /// destination (default `"linux"`, Linux 4.19 and later), or a table of prefixes,
    /// `{ default = "linux", "192.168.1.0/24" = "windows" }`. Names: `linux`,
    /// `old-linux`, `first`, `last`, `bsd`, `bsd-right`, `windows`, `solaris` (and
    /// Suricata's host-os-policy names).
    #[serde(default = "default_frag_policy")]
    pub frag_policy: PolicySpec,
    /// Seconds an incomplete IPv4 fragment train is held (default 30, the destination's
    /// `net.ipv4.ipfrag_time`). At least 1.
    #[serde(default = "default_frag_timeout", deserialize_with = "de_at_least_1")]
    pub frag_timeout: u32,
    /// Seconds an incomplete IPv6 fragment train is held (default 60, the destination's
    /// `net.ipv6.ip6frag_time`). At least 1.
    #[serde(default = "default_frag6_timeout", deserialize_with = "de_at_least_1")]
    pub frag6_timeout: u32,
    /// Bytes fragment trains may be charged per queue thread (default 4194304, 4 MiB, the
    /// destination's `net.ipv4.ipfrag_high_thresh`); past it fragments are refused
    /// (`defrag_refused`) and, inline, dropped. At least 1.
    #[serde(
        default = "default_frag_memcap",
        deserialize_with = "de_at_least_1_usize"
    )]
    pub frag_memcap: usize,
    /// The destination's `net.ipv4.ipfrag_max_dist` (default 64; 0: off): an IPv4 train
    /// whose next fragment comes after more than this many fragments of the same source
    /// is restarted by Linux (inline, relayd drops that fragment instead).
    #[serde(default = "default_frag_max_dist")]
    pub frag_max_dist: u32,
    /// Bytes all application-layer parser states of a queue thread may hold together
    /// (default 67108864, 64 MiB; Suricata's `app-layer.protocols.http.memcap`, here for
    /// every parser): HTTP heads, bodies, decompressors and pending transactions, DNS and
    /// TLS buffers. A flow whose parser would pass it is stopped (`app_memcap`) and gets
    /// `exception_policy`. At least `http_request_body_limit` + `http_response_body_limit`.
    #[serde(
        default = "default_app_memcap",
        deserialize_with = "de_at_least_1_usize"
    )]
    pub app_memcap: usize,
    /// What happens to a flow a memcap refuses memory (the application-layer memcap; the
    /// stream memcap too): `drop-flow`, `pass-flow`, `bypass` (as `pass-flow`), `ignore`
    /// (keep inspecting its packets and stream without its parser) or `auto` (default:
    /// `drop-flow` if the rules can drop or reject, else `ignore`, as Suricata's default
    /// in IPS and IDS mode).
    #[serde(default)]
    pub exception_policy: ExceptionPolicy,
    /// Vote to offload flows whose later packets no rule could still match (default true;
    /// only a queue with `offload = true` acts on votes). See docs/ids.md, "Offload".
    #[serde(default = "default_true")]
    pub offload: bool,
    /// TLS after the handshake: `full` (default: inspected as any stream) or `bypass`
    /// (offloaded once encrypted both ways, unless a rule reads it), as Suricata's
    /// `app-layer.protocols.tls.encryption-handling`.
    #[serde(default)]
    pub tls_encryption_handling: EncryptionHandling,
}

/// What happens to TLS flows after their handshake (`tls_encryption_handling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EncryptionHandling {
    /// Keep inspecting the encrypted records as stream and packets (relayd's behaviour).
    #[default]
    Full,
    /// Offload the flow once both directions are encrypted, if no rule reads it later.
    Bypass,
}

fn default_true() -> bool {
    true
}

fn default_frag_policy() -> PolicySpec {
    PolicySpec::One("linux".into())
}

fn default_frag_timeout() -> u32 {
    30
}

fn default_frag6_timeout() -> u32 {
    60
}

fn default_frag_memcap() -> usize {
    crate::decode::DEFAULT_FRAG_MEMCAP
}

fn default_frag_max_dist() -> u32 {
    64
}

fn de_opt_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    de_u32(d).map(Some)
}

/// A count that must be at least 1, refused at its own key (`file:line:field`) otherwise.
fn de_at_least_1<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(serde::de::Error::custom("must be at least 1")),
        n => Ok(n),
    }
}

fn default_reject_rate() -> u32 {
    1000
}

fn default_reject_burst() -> u32 {
    50
}

fn default_reject_dest_rate() -> u32 {
    10
}

fn default_reject_dest_burst() -> u32 {
    10
}

fn default_track_max() -> usize {
    65_536
}

fn default_eve_queue() -> usize {
    8192
}

fn default_flows() -> usize {
    crate::flow::DEFAULT_MAX_FLOWS
}

fn default_stream_memcap() -> usize {
    crate::flow::stream::DEFAULT_MEMCAP
}

fn default_stream_depth() -> u64 {
    crate::flow::stream::DEFAULT_DEPTH
}

fn default_stream_buffer() -> usize {
    crate::flow::stream::DEFAULT_BUFFER
}

fn default_http_body_limit() -> usize {
    HttpLimits::default().response_body_limit
}

fn default_http_decompress_layers() -> usize {
    HttpLimits::default().decode.layers
}

fn default_app_memcap() -> usize {
    crate::applayer::budget::DEFAULT_APP_MEMCAP
}

fn default_stream_lookback() -> usize {
    crate::engine::DEFAULT_STREAM_LOOKBACK
}

/// A size that must be at least 1, refused at its own key otherwise.
fn de_at_least_1_usize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(serde::de::Error::custom("must be at least 1")),
        n => Ok(n),
    }
}

impl IdsConfig {
    /// The detector's options from the keys (flows, streams, HTTP limits and decoding);
    /// `blocks`: some rule can stop traffic (the inline default).
    fn detector_options(&self, blocks: bool) -> DetectorOptions {
        DetectorOptions {
            drop_invalid: self.drop_invalid.unwrap_or(blocks),
            track_max: self.track_max,
            flows: FlowLimits {
                max_flows: self.flows,
                midstream: self.midstream,
                memcap: self.stream_memcap,
                // Checked by `into_factory` before.
                policy: self.stream_policies().unwrap_or_default(),
                stream: StreamLimits {
                    depth: self.stream_depth,
                    buffer: self.stream_buffer,
                    ..StreamLimits::default()
                },
                ..FlowLimits::default()
            },
            stream_lookback: self.stream_lookback,
            http: HttpLimits {
                request_body_limit: self.http_request_body_limit,
                response_body_limit: self.http_response_body_limit,
                decode: DecodeOptions {
                    layers: self.http_decompress_layers,
                    lzma: self.http_lzma,
                },
                ..HttpLimits::default()
            },
            decode: crate::decode::DecodeOptions {
                defrag: crate::decode::DefragLimits {
                    memcap: self.frag_memcap,
                    timeout: Duration::from_secs(u64::from(self.frag_timeout)),
                    timeout6: Duration::from_secs(u64::from(self.frag6_timeout)),
                    max_dist: self.frag_max_dist,
                    // Checked by `into_factory` before.
                    policy: self.frag_policies().unwrap_or_default(),
                    ..crate::decode::DefragLimits::default()
                },
                ..crate::decode::DecodeOptions::default()
            },
            app_memcap: self.app_memcap,
            exception_policy: self.exception_policy,
            offload: OffloadOptions {
                enabled: self.offload,
                encrypted: self.tls_encryption_handling == EncryptionHandling::Bypass,
            },
            ..DetectorOptions::default()
        }
    }

    /// The stream overlap policy table `stream_policy` describes.
    fn stream_policies(
        &self,
    ) -> Result<PolicyMap<crate::flow::stream::StreamPolicy>, crate::hostos::PolicyMapError> {
        PolicyMap::from_spec("stream_policy", &self.stream_policy)
    }

    /// The fragment policy table `frag_policy` describes.
    fn frag_policies(&self) -> Result<PolicyMap<FragPolicy>, crate::hostos::PolicyMapError> {
        PolicyMap::from_spec("frag_policy", &self.frag_policy)
    }
}

impl ServiceConfig for IdsConfig {
    const KIND: &'static str = "ids";

    fn into_factory(
        self,
        name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        if self.rules.is_empty() {
            return Err("rules: list at least one rules file".into());
        }
        if self.reject_mark == Some(0) {
            return Err("reject_mark must not be 0 (leave it out for no mark)".into());
        }
        if self.track_max == 0 {
            return Err("track_max must be at least 1".into());
        }
        // The raw consumer keeps `stream_lookback` bytes held: at or past the per-direction
        // buffer every reassembled stream would fill its buffer and stop being reassembled.
        if self.stream_lookback >= self.stream_buffer {
            return Err(format!(
                "stream_lookback ({}) must be below stream_buffer ({}): the look-back is held in the stream buffer",
                self.stream_lookback, self.stream_buffer
            )
            .into());
        }
        self.frag_policies().map_err(|e| e.to_string())?;
        self.stream_policies().map_err(|e| e.to_string())?;
        if !(1..=4).contains(&self.http_decompress_layers) {
            return Err(format!(
                "http_decompress_layers ({}) must be 1 to 4",
                self.http_decompress_layers
            )
            .into());
        }
        // Below both body limits one flow could never hold its bodies: every large body
        // would be a memcap exception.
        let bodies = self
            .http_request_body_limit
            .saturating_add(self.http_response_body_limit);
        if self.app_memcap < bodies {
            return Err(format!(
                "app_memcap ({}) must be at least http_request_body_limit + http_response_body_limit ({bodies})",
                self.app_memcap
            )
            .into());
        }
        let opts = LoadOptions {
            files: self.rules.clone(),
            vars: self.vars.clone(),
            classification: self.classification.clone(),
            threshold_file: self.threshold_file.clone(),
        };
        let set = RuleSet::load(&opts).map_err(|e| e.to_string())?;
        for w in set.warnings() {
            tracing::warn!(service = name, "ids threshold file: {w}");
        }
        if !set.errors().is_empty() {
            let n = set.errors().len();
            if self.strict {
                let list: Vec<String> = set.errors().iter().map(ToString::to_string).collect();
                return Err(
                    format!("{n} rule(s) failed to load (strict): {}", list.join("; ")).into(),
                );
            }
            for e in set.errors() {
                tracing::warn!(service = name, "ids rule not loaded: {e}");
            }
        }
        tracing::info!(
            service = name,
            rules = set.rules().len(),
            failed = set.errors().len(),
            patterns = set.prefilter_patterns(),
            "ids rules loaded"
        );
        let set = Arc::new(set);
        let opts = self.detector_options(set.blocks());
        // The EVE log is relayd's to open and start (never in `relayd check`); the queue
        // threads' instances find the writer in their resources.
        let logs = self
            .eve_log
            .iter()
            .map(|path| {
                let (set, capacity) = (set.clone(), self.eve_queue);
                LogFile::new(path.clone(), move |file| {
                    EveWriter::start(file, capacity, set.clone())
                })
            })
            .collect();
        let manifest = Manifest {
            // An IPS that drops must not let a flood bypass it; an IDS that only alerts
            // must not blackhole the router when it is down.
            fail_policy: if set.blocks() {
                FailPolicy::Closed
            } else {
                FailPolicy::Open
            },
            // Resets and unreachables (`reject`).
            emits: true,
            mark_bits: self.reject_mark.unwrap_or(0),
            conntrack: set.reads_flow_state(),
            offloads: self.offload,
            logs,
            ..Manifest::new()
        };
        Ok(Arc::new(IdsFactory {
            set,
            manifest,
            reject_mark: self.reject_mark,
            reject_limits: RejectLimits {
                rate: self.reject_rate,
                burst: self.reject_burst,
                dest_rate: self.reject_dest_rate,
                dest_burst: self.reject_dest_burst,
            },
            opts,
        }))
    }
}

struct IdsFactory {
    set: Arc<RuleSet>,
    manifest: Manifest,
    reject_mark: Option<u32>,
    reject_limits: RejectLimits,
    opts: DetectorOptions,
}

impl ServiceFactory for IdsFactory {
    fn kind(&self) -> &'static str {
        "ids"
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, res: &Resources) -> Box<dyn Service> {
        let rejecter = Rejecter::new(
            self.reject_mark,
            self.reject_limits,
            RejectCounters {
                tally: Tally::new(counters, "reject_sent", "reject_errors", "reject_errors"),
                suppressed: counters.counter("reject_suppressed"),
            },
        );
        let det = Detector::with_options(
            self.set.clone(),
            counters,
            res.get::<EveWriter>(),
            self.opts.clone(),
        );
        Box::new(Ids { det, rejecter })
    }
}

struct Ids {
    det: Detector,
    rejecter: Rejecter,
}

impl Service for Ids {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        match self.det.inspect(pkt, cx.now) {
            Outcome::Drop => Action::Drop,
            Outcome::Reject => {
                // The answers carry the stage bits of this queue's hook, so that relayd's
                // rules at the hooks they have crossed skip them (relay_core::StageMark).
                self.rejecter.reject(pkt, cx);
                Action::Drop
            }
            _ => {
                if let Some(v) = self.det.offload() {
                    cx.offload(v);
                }
                Action::Continue
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> IdsConfig {
        let dir = std::env::temp_dir().join(format!("ids-svc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = dir.join("r.rules");
        std::fs::write(
            &rules,
            "alert tcp any any -> any any (content:\"x\"; sid:1;)\n",
        )
        .unwrap();
        toml::from_str(&format!(
            "rules = [{:?}]\n{extra}",
            rules.display().to_string()
        ))
        .unwrap()
    }

    #[test]
    fn stream_policy_takes_a_name_or_a_table() {
        use crate::flow::stream::StreamPolicy;
        let o = config("stream_policy = \"windows\"\n").detector_options(true);
        assert_eq!(o.flows.policy.get_key(0), StreamPolicy::Windows);
        let o = config("stream_policy = { default = \"bsd\", \"192.168.1.0/24\" = \"vista\" }\n")
            .detector_options(true);
        let key = |s: &str| crate::rules::rule::ip_key(s.parse().unwrap());
        assert_eq!(
            o.flows.policy.get_key(key("192.168.1.9")),
            StreamPolicy::Vista
        );
        assert_eq!(o.flows.policy.get_key(key("10.0.0.1")), StreamPolicy::Bsd);
        assert_eq!(
            config("")
                .detector_options(true)
                .flows
                .policy
                .get_key(key("::1")),
            StreamPolicy::Linux
        );
        for bad in [
            "stream_policy = \"beos\"\n",
            "stream_policy = { \"10.0.0.0/33\" = \"bsd\" }\n",
        ] {
            let err = match config(bad).into_factory("ids") {
                Err(e) => e.to_string(),
                Ok(_) => panic!("accepted {bad}"),
            };
            assert!(err.contains("stream_policy"), "{err}");
        }
    }

    /// The factory only declares the EVE log: opening it (and starting its thread) is
    /// relayd's, so `relayd check` writes nothing.
    #[test]
    fn the_factory_opens_no_eve_log() {
        let dir = std::env::temp_dir().join(format!("ids-svc-eve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let eve = dir.join("sub").join("eve.json");
        let f = config(&format!("eve_log = {:?}\n", eve.display().to_string()))
            .into_factory("ids")
            .unwrap();
        let logs: Vec<_> = f.manifest().logs.iter().map(|l| l.path.clone()).collect();
        assert_eq!(logs, vec![eve.clone()]);
        assert!(!dir.exists(), "the factory made {}", dir.display());
        drop(f.build(&Counters::new(), &Resources::new()));
        assert!(!dir.exists(), "build made {}", dir.display());
    }

    #[test]
    fn drop_invalid_defaults_to_whether_the_rules_block() {
        assert!(config("").detector_options(true).drop_invalid);
        assert!(!config("").detector_options(false).drop_invalid);
        assert!(
            !config("drop_invalid = false\n")
                .detector_options(true)
                .drop_invalid
        );
        assert!(
            config("drop_invalid = true\n")
                .detector_options(false)
                .drop_invalid
        );
    }

    #[test]
    fn a_look_back_the_stream_buffer_cannot_hold_is_refused() {
        let err = match config("stream_lookback = 262144\n").into_factory("ids") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        };
        assert!(err.contains("stream_lookback"), "{err}");
        assert!(
            config("stream_lookback = 4096\nstream_buffer = 8192\n")
                .into_factory("ids")
                .is_ok()
        );
    }

    #[test]
    fn fragment_keys_are_checked_and_reach_the_decoder() {
        let d = config("").detector_options(true).decode.defrag;
        assert_eq!(d, crate::decode::DefragLimits::default());
        assert_eq!(
            (
                d.timeout.as_secs(),
                d.timeout6.as_secs(),
                d.memcap,
                d.max_dist
            ),
            (30, 60, 4 << 20, 64)
        );
        let c = config(
            "frag_timeout = 20\nfrag6_timeout = 40\nfrag_memcap = 1000\nfrag_max_dist = 0\n\
             frag_policy = { default = \"bsd\", \"192.168.1.0/24\" = \"windows\" }\n",
        );
        let d = c.detector_options(true).decode.defrag;
        assert_eq!(
            (
                d.timeout.as_secs(),
                d.timeout6.as_secs(),
                d.memcap,
                d.max_dist
            ),
            (20, 40, 1000, 0)
        );
        assert_eq!(d.policy.get_v4(0xc0a8_0107), FragPolicy::Windows);
        assert_eq!(d.policy.get_v4(0x0a00_0001), FragPolicy::Bsd);
        let one = config("frag_policy = \"solaris\"\n").detector_options(true);
        assert_eq!(one.decode.defrag.policy.get_v4(1), FragPolicy::Solaris);
        for (bad, names) in [
            ("frag_policy = \"beos\"\n", "beos"),
            (
                "frag_policy = { \"10.0.0.0/33\" = \"bsd\" }\n",
                "10.0.0.0/33",
            ),
            (
                "frag_policy = { \"10.0.0.0/8\" = \"nope\" }\n",
                "10.0.0.0/8",
            ),
        ] {
            let err = match config(bad).into_factory("ids") {
                Err(e) => e.to_string(),
                Ok(_) => panic!("accepted {bad}"),
            };
            assert!(err.contains("frag_policy") && err.contains(names), "{err}");
        }
        for bad in [
            "frag_timeout = 0\n",
            "frag6_timeout = 0\n",
            "frag_memcap = 0\n",
        ] {
            assert!(
                toml::from_str::<IdsConfig>(&format!("rules = [\"r\"]\n{bad}")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn app_memcap_and_exception_policy_are_checked_and_reach_the_detector() {
        let o = config("").detector_options(true);
        assert_eq!(
            (o.app_memcap, o.exception_policy),
            (64 << 20, ExceptionPolicy::Auto)
        );
        for (v, want) in [
            ("drop-flow", ExceptionPolicy::DropFlow),
            ("pass-flow", ExceptionPolicy::PassFlow),
            ("bypass", ExceptionPolicy::Bypass),
            ("ignore", ExceptionPolicy::Ignore),
            ("auto", ExceptionPolicy::Auto),
        ] {
            let c = config(&format!(
                "exception_policy = \"{v}\"\napp_memcap = 1048576\n"
            ));
            let o = c.detector_options(true);
            assert_eq!((o.app_memcap, o.exception_policy), (1 << 20, want));
        }
        for bad in [
            "exception_policy = \"drop-packet\"\n",
            "exception_policy = \"reject\"\n",
            "app_memcap = 0\n",
        ] {
            let r = toml::from_str::<IdsConfig>(&format!("rules = [\"r\"]\n{bad}"));
            assert!(r.is_err(), "accepted {bad}");
        }
        let err = match config("app_memcap = 100000\n").into_factory("ids") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted an app_memcap below the body limits"),
        };
        assert!(err.contains("app_memcap"), "{err}");
        assert!(config("app_memcap = 204800\n").into_factory("ids").is_ok());
    }

    #[test]
    fn http_decoding_keys_are_checked_and_reach_the_detector() {
        for bad in [
            "http_decompress_layers = 0\n",
            "http_decompress_layers = 5\n",
        ] {
            let err = match config(bad).into_factory("ids") {
                Err(e) => e.to_string(),
                Ok(_) => panic!("accepted {bad}"),
            };
            assert!(err.contains("http_decompress_layers"), "{err}");
        }
        assert!(
            toml::from_str::<IdsConfig>("rules = [\"r\"]\nhttp_response_body_limit = 0\n").is_err()
        );
        let c = config(
            "http_decompress_layers = 3\nhttp_lzma = true\nhttp_request_body_limit = 10\nhttp_response_body_limit = 2000000\n",
        );
        let h = c.detector_options(true).http;
        assert_eq!(
            (
                h.decode.layers,
                h.decode.lzma,
                h.request_body_limit,
                h.response_body_limit
            ),
            (3, true, 10, 2_000_000)
        );
    }
}
