//! `decompress`: restores IPComp packets (RFC 3173) byte for byte, whoever compressed them.
//! A corrupt or truncated IPComp packet is counted and dropped with a log line.

use crate::codec::{Algorithm, CodecError, Codecs};
use relay_core::ratelimit::RateLimit;
use relay_core::wire::{IpcompPacket, ipcomp, proto};
use relay_core::{
    Action, Context, Counter, Counters, Manifest, Packet, Resources, Service, ServiceConfig,
    ServiceFactory,
};
use serde::Deserialize;
use std::sync::Arc;

/// `[service.NAME]` with `kind = "decompress"`. Every algorithm relayd knows is accepted,
/// by the CPI in each packet.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecompressConfig {
    /// The largest packet a decompression may produce (bytes, whole IP packet). A packet
    /// that would restore to more is dropped as `too_large`: it caps what a small forged
    /// IPComp packet can turn into inside the network. Default 9216 (jumbo frames); at most
    /// 65531, what a verdict can carry.
    #[serde(default = "default_max_size")]
    pub max_size: usize,
}

impl Default for DecompressConfig {
    fn default() -> Self {
        DecompressConfig {
            max_size: default_max_size(),
        }
    }
}

fn default_max_size() -> usize {
    9216
}

struct Factory {
    max_size: usize,
    manifest: Manifest,
}

impl ServiceConfig for DecompressConfig {
    const KIND: &'static str = "decompress";

    fn into_factory(
        self,
        _name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        if !(576..=65531).contains(&self.max_size) {
            return Err(format!("max_size = {} must be 576-65531 bytes", self.max_size).into());
        }
        Ok(Arc::new(Factory {
            max_size: self.max_size,
            manifest: Manifest {
                rewrites_payload: true,
                ..Manifest::new()
            },
        }))
    }
}

impl ServiceFactory for Factory {
    fn kind(&self) -> &'static str {
        "decompress"
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        let c = |n: &str| counters.counter(n);
        Box::new(Decompress {
            max_size: self.max_size,
            codecs: Codecs::new(1),
            scratch: vec![0u8; 0x10000],
            log: RateLimit::new(10),
            seen: c("seen"),
            decompressed: c("decompressed"),
            passed: c("passed_not_ipcomp"),
            bytes_in: c("bytes_in"),
            bytes_out: c("bytes_out"),
            dropped_corrupt: c("dropped_corrupt"),
            dropped_unknown_cpi: c("dropped_unknown_cpi"),
            dropped_too_large: c("dropped_too_large"),
        })
    }
}

struct Decompress {
    max_size: usize,
    codecs: Codecs,
    scratch: Vec<u8>,
    log: RateLimit,
    seen: Counter,
    decompressed: Counter,
    passed: Counter,
    bytes_in: Counter,
    bytes_out: Counter,
    dropped_corrupt: Counter,
    dropped_unknown_cpi: Counter,
    dropped_too_large: Counter,
}

impl Decompress {
    fn drop(&mut self, pkt: &mut Packet, cx: &Context, why: CodecError, cpi: u16) -> Action {
        match why {
            CodecError::TooLarge => self.dropped_too_large.inc(),
            CodecError::Unavailable => self.dropped_unknown_cpi.inc(),
            CodecError::Corrupt => self.dropped_corrupt.inc(),
        }
        if let Some(suppressed) = self.log.allow(cx.now) {
            let mut line = String::new();
            relay_core::format_packet(&mut line, pkt);
            tracing::warn!(
                queue = cx.queue,
                cpi,
                suppressed,
                "dropping IPComp packet ({}): {line}",
                why.as_str()
            );
        }
        Action::Drop
    }
}

impl Service for Decompress {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        self.seen.inc();
        // Only directly after the fixed header, as `compress` puts it.
        let Some((l, direct)) = pkt.headers().map(|h| (h.layout(), h.direct())) else {
            return Action::Continue;
        };
        if l.proto != proto::IPCOMP || !direct || l.fragment || pkt.is_partial() {
            self.passed.inc();
            return Action::Continue;
        }
        let Some(off) = l.l4 else {
            return Action::Continue;
        };
        let Ok(h) = IpcompPacket::new_checked(&pkt.data()[off..l.len]) else {
            return self.drop(pkt, cx, CodecError::Corrupt, 0);
        };
        let (next, cpi) = (h.next_header(), h.cpi());
        let Some(alg) = Algorithm::from_cpi(cpi).filter(|a| a.available()) else {
            return self.drop(pkt, cx, CodecError::Unavailable, cpi);
        };
        // At most `max_size` bytes in all (never more than a verdict carries).
        let room = self.max_size.saturating_sub(off);
        let src = &pkt.data()[off + ipcomp::HEADER_LEN..l.len];
        let n = match self
            .codecs
            .decompress(alg, src, &mut self.scratch[..room.min(0x10000)])
        {
            Ok(n) => n,
            Err(e) => return self.drop(pkt, cx, e, cpi),
        };
        let total = off + n;
        self.bytes_in.add(l.len as u64);
        self.bytes_out.add(total as u64);
        let Some(t) = pkt.set_transport(l, n, next) else {
            return Action::Continue;
        };
        t.copy_from_slice(&self.scratch[..n]);
        self.decompressed.inc();
        Action::Continue
    }
}
