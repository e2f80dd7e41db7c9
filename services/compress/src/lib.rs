//! Adaptive packet compression (seed 003, sections 3.2 and 5.2) as two relayd services:
//! `compress` puts a packet's transport header and data in IPComp form (RFC 3173) when
//! its expected wait in the egress queue covers the cost, and `decompress` restores it
//! byte for byte at the other end.
//!
//! Wire format: IPv4 protocol / IPv6 next header 108, a 4-byte IPComp header (next header,
//! flags, CPI) and the compressed data. CPI 2 is DEFLATE as RFC 2394 specifies (raw
//! deflate); LZO and LZ4 use CPIs 61440 and 61441 from the private range.

mod codec;
mod compress;
mod decision;
mod decompress;

pub use codec::{Algorithm, CodecError, Codecs};
pub use compress::{CompressConfig, EstimateMode, Mode};
pub use decision::{Estimate, should_compress};
pub use decompress::DecompressConfig;

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::wire::{Ipv4Packet, UdpPacket, checksum, proto};
    use relay_core::{Action, Context, Counters, Packet, ServiceConfig};
    use std::io::Read;
    use std::time::Instant;

    /// A UDP/IPv4 packet with a text payload of `n` bytes (compresses well).
    fn udp_text(n: usize) -> Vec<u8> {
        let text = b"relayd compresses this payload because it repeats itself. ";
        let payload: Vec<u8> = (0..n).map(|i| text[i % text.len()]).collect();
        let total = 28 + n;
        let mut b = vec![
            0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
        ];
        b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        b.extend_from_slice(&[0x0f, 0xa0, 0x13, 0x88]);
        b.extend_from_slice(&((8 + n) as u16).to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&payload);
        Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        let pseudo = checksum::pseudo_v4(
            [10, 0, 1, 1].into(),
            [10, 0, 2, 2].into(),
            17,
            (8 + n) as u32,
        );
        UdpPacket::new_unchecked(&mut b[20..]).fill_checksum(pseudo);
        b
    }

    fn compressor(alg: &str, mode: &str) -> Box<dyn relay_core::Service> {
        let cfg: CompressConfig =
            toml::from_str(&format!("algorithm = \"{alg}\"\nmode = \"{mode}\"")).unwrap();
        cfg.into_factory("c")
            .unwrap()
            .build(&Counters::new(), &relay_core::Resources::new())
    }

    fn cx() -> Context {
        Context::new(0, Instant::now())
    }

    #[test]
    fn compress_then_decompress_restores_every_byte() {
        for alg in ["deflate", "lz4", "lzo"] {
            if alg == "lzo" && !Algorithm::Lzo.available() {
                continue;
            }
            let orig = udp_text(1400);
            let mut c = compressor(alg, "always");
            let mut d = DecompressConfig::default()
                .into_factory("d")
                .unwrap()
                .build(&Counters::new(), &relay_core::Resources::new());
            let mut p = Packet::from_bytes(&orig);
            assert_eq!(c.process(&mut p, &mut cx()), Action::Continue);
            assert!(
                p.is_modified() && p.len() < orig.len() / 2,
                "{alg}: {} bytes",
                p.len()
            );
            let ip = Ipv4Packet::new_checked(p.data()).unwrap();
            assert_eq!(
                (ip.protocol(), ip.total_len() as usize),
                (proto::IPCOMP, p.len())
            );
            assert!(ip.verify_checksum(), "{alg}: IPv4 header checksum");
            assert_eq!(ip.payload()[0], 17, "IPComp next header is UDP");
            let mut q = Packet::from_bytes(p.data());
            assert_eq!(d.process(&mut q, &mut cx()), Action::Continue);
            assert_eq!(q.data(), &orig[..], "{alg}: not restored byte for byte");
        }
    }

    #[test]
    fn deflate_ipcomp_is_rfc_2394_raw_deflate() {
        let orig = udp_text(1000);
        let mut p = Packet::from_bytes(&orig);
        compressor("deflate", "always").process(&mut p, &mut cx());
        let d = p.data();
        assert_eq!(
            &d[20..24],
            &[17, 0, 0, 2],
            "IPComp header: next header UDP, flags 0, CPI 2"
        );
        // A plain raw inflater (no zlib header) restores the transport header and data.
        let mut out = Vec::new();
        flate2::read::DeflateDecoder::new(&d[24..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, &orig[20..]);
    }

    #[test]
    fn never_grows_a_packet_and_skips_what_it_must() {
        // Random payload: compression cannot win, the packet stays as it was.
        let mut x = 7u32;
        let mut orig = udp_text(1400);
        for b in &mut orig[28..] {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        let mut p = Packet::from_bytes(&orig);
        compressor("lz4", "always").process(&mut p, &mut cx());
        assert!(!p.is_modified());
        // Small packets, never mode, IPComp already: untouched.
        for (bytes, mode) in [(udp_text(50), "always"), (udp_text(1400), "never")] {
            let mut p = Packet::from_bytes(&bytes);
            compressor("lz4", mode).process(&mut p, &mut cx());
            assert!(!p.is_modified(), "{mode}");
        }
        let mut p = Packet::from_bytes(&udp_text(1400));
        let mut c = compressor("lz4", "always");
        c.process(&mut p, &mut cx());
        let once = p.data().to_vec();
        let mut p = Packet::from_bytes(&once);
        c.process(&mut p, &mut cx());
        assert!(!p.is_modified(), "compressed twice");
    }

    fn count(counters: &Counters, name: &str) -> u64 {
        counters
            .snapshot()
            .iter()
            .find(|c| c.0 == name)
            .map_or(0, |c| c.2)
    }

    /// Adaptive mode reads the egress queue from the monitor relayd hands it, and times
    /// its compressions on the clock it is given: none of it is a global.
    #[test]
    fn adaptive_mode_reads_the_monitor_and_the_clock_it_is_given() {
        let cfg: CompressConfig =
            toml::from_str("algorithm = \"deflate\"\nmode = \"adaptive\"").unwrap();
        let f = cfg.into_factory("c").unwrap();
        assert!(f.manifest().queue_monitor);
        // No monitor and no bandwidth configured: the rate is unknown, nothing compressed.
        let counters = Counters::new();
        let mut s = f.build(&counters, &relay_core::Resources::new());
        let mut p = Packet::from_bytes(&udp_text(1400));
        s.process(&mut p, &mut cx());
        assert!(!p.is_modified());
        assert_eq!(count(&counters, "skipped_no_bandwidth"), 1);
        // A second of queue on a 1 MB/s link: compressing pays. On a clock that stands
        // still the compression took no time, and C (replaced by the first sample) is 0.
        let res = relay_core::Resources::new()
            .with(relay_netlink::QueueMonitor::fixed(1_000_000, 1_000_000))
            .with_clock(relay_core::Clock::manual(Instant::now()));
        let counters = Counters::new();
        let mut s = f.build(&counters, &res);
        let mut p = Packet::from_bytes(&udp_text(1400));
        s.process(&mut p, &mut cx());
        assert!(p.is_modified());
        assert_eq!(count(&counters, "compressed"), 1);
        assert_eq!(count(&counters, "c_ns"), 0);
    }

    #[test]
    fn decompression_is_capped_at_max_size() {
        let mut p = Packet::from_bytes(&udp_text(1400));
        compressor("deflate", "always").process(&mut p, &mut cx());
        let compressed = p.data().to_vec();
        let counters = Counters::new();
        let cfg = DecompressConfig { max_size: 1000 };
        let mut d = cfg
            .into_factory("d")
            .unwrap()
            .build(&counters, &relay_core::Resources::new());
        assert_eq!(
            d.process(&mut Packet::from_bytes(&compressed), &mut cx()),
            Action::Drop
        );
        assert_eq!(
            counters
                .snapshot()
                .iter()
                .find(|c| c.0 == "dropped_too_large")
                .unwrap()
                .2,
            1
        );
        assert!(
            DecompressConfig { max_size: 70000 }
                .into_factory("d")
                .is_err()
        );
    }

    #[test]
    fn corrupt_or_truncated_ipcomp_is_dropped_never_a_panic() {
        let orig = udp_text(1400);
        let mut p = Packet::from_bytes(&orig);
        compressor("deflate", "always").process(&mut p, &mut cx());
        let good = p.data().to_vec();
        let counters = Counters::new();
        let mut d = DecompressConfig::default()
            .into_factory("d")
            .unwrap()
            .build(&counters, &relay_core::Resources::new());
        // Every truncation (with the IP length fixed up to match) and every byte flip.
        for cut in 24..good.len() {
            let mut b = good[..cut].to_vec();
            b[2..4].copy_from_slice(&(cut as u16).to_be_bytes());
            let mut q = Packet::from_bytes(&b);
            let a = d.process(&mut q, &mut cx());
            assert!(
                a == Action::Drop || q.data().len() != orig.len() || q.data() != &orig[..],
                "cut {cut}"
            );
        }
        for i in 24..good.len() {
            let mut b = good.clone();
            b[i] ^= 0xff;
            let _ = d.process(&mut Packet::from_bytes(&b), &mut cx());
        }
        // Unknown CPI.
        let mut b = good.clone();
        b[22..24].copy_from_slice(&9u16.to_be_bytes());
        assert_eq!(
            d.process(&mut Packet::from_bytes(&b), &mut cx()),
            Action::Drop
        );
        let snap: std::collections::HashMap<String, u64> = counters
            .snapshot()
            .into_iter()
            .map(|(n, _, v)| (n, v))
            .collect();
        assert!(
            snap["dropped_corrupt"] > 100 && snap["dropped_unknown_cpi"] == 1,
            "{snap:?}"
        );
    }
}
