//! Reading captures: pcap and pcapng (detected by their magic number), with Ethernet
//! (and 802.1Q / 802.1ad tags), Linux cooked (SLL, SLL2) and raw IP link types. Yields the
//! IP packet of each record with its timestamp; every error names the record number.

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, TsResolution};
use relay_core::wire::ethernet::{EthernetFrame, NshHeader, ethertype, nsh_next};
use relay_core::wire::link;
use std::io::Read;
use std::time::Duration;

/// One captured IP packet.
#[derive(Debug)]
pub struct Record {
    /// 1-based record number in the file (as Wireshark numbers them).
    pub number: u64,
    /// Capture timestamp (since the epoch).
    pub ts: Duration,
    /// The IP packet (link layer removed), or `None` for a non-IP frame.
    pub ip: Option<Vec<u8>>,
    /// The IP packet's length on the wire when the capture cut it (snap length).
    pub ip_orig_len: Option<u32>,
}

/// Why a capture cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Not a pcap or pcapng file, or its header is damaged.
    #[error("not a pcap or pcapng file: {0}")]
    Format(String),
    /// A record could not be read and the file cannot be followed past it (its length
    /// is damaged, or the file ends inside it): reading stops here.
    #[error("packet {number}: {reason}")]
    Record {
        /// The record number.
        number: u64,
        /// What is wrong.
        reason: String,
    },
    /// A record that cannot be used, but the records after it can still be read (a
    /// pcapng packet of an interface never described): skip it and go on.
    #[error("packet {number} skipped: {reason}")]
    Skipped {
        /// The record number.
        number: u64,
        /// What is wrong.
        reason: String,
    },
    /// A link type relayd cannot strip.
    #[error(
        "link type {0:?} is not supported (Ethernet, Linux cooked SLL/SLL2, raw IP, BSD loopback, PPP and Cisco HDLC are)"
    )]
    LinkType(DataLink),
}

enum Inner<R: Read> {
    Pcap(PcapReader<R>, DataLink, TsResolution),
    /// Per interface: link type and the divisor that turns its timestamp units into
    /// nanoseconds as `raw * 10^9 / divisor` (if_tsresol).
    PcapNg(PcapNgReader<R>, Vec<(DataLink, u128)>),
}

/// Units per second for a pcapng `if_tsresol` value (default 6: microseconds); exact
/// integers, since a nanosecond timestamp does not fit a float's mantissa.
fn units_per_second(v: Option<u8>) -> u128 {
    match v {
        None => 1_000_000,
        Some(v) if v & 0x80 != 0 => 1u128 << (v & 0x7f).min(100),
        Some(v) => 10u128.pow(u32::from(v.min(30))),
    }
}

/// A capture file being read.
pub struct Capture<R: Read> {
    inner: Inner<R>,
    number: u64,
    /// A record could not be framed: nothing after it can be read.
    ended: bool,
}

fn supported(link: DataLink) -> bool {
    matches!(
        link,
        DataLink::ETHERNET
            | DataLink::LINUX_SLL
            | DataLink::LINUX_SLL2
            | DataLink::RAW
            | DataLink::IPV4
            | DataLink::IPV6
            | DataLink::NULL
            | DataLink::LOOP
            | DataLink::PPP
            | DataLink::C_HDLC
    )
}

impl Capture<std::io::BufReader<std::fs::File>> {
    /// Opens a pcap or pcapng file.
    pub fn open(path: &std::path::Path) -> Result<Self, CaptureError> {
        let mut f = std::fs::File::open(path)
            .map_err(|e| CaptureError::Format(format!("{}: {e}", path.display())))?;
        let mut magic = [0u8; 4];
        f.read_exact(&mut magic)
            .map_err(|e| CaptureError::Format(format!("{}: {e}", path.display())))?;
        let f = std::fs::File::open(path).map_err(|e| CaptureError::Format(e.to_string()))?;
        Capture::new(std::io::BufReader::with_capacity(1 << 20, f), magic)
    }
}

impl<R: Read> Capture<R> {
    /// Reads a capture whose first four bytes are `magic`.
    pub fn new(reader: R, magic: [u8; 4]) -> Result<Self, CaptureError> {
        let inner = if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
            Inner::PcapNg(
                PcapNgReader::new(reader).map_err(|e| CaptureError::Format(e.to_string()))?,
                Vec::new(),
            )
        } else {
            let r = PcapReader::new(reader).map_err(|e| CaptureError::Format(e.to_string()))?;
            let link = r.header().datalink;
            if !supported(link) {
                return Err(CaptureError::LinkType(link));
            }
            let res = r.header().ts_resolution;
            Inner::Pcap(r, link, res)
        };
        Ok(Capture {
            inner,
            number: 0,
            ended: false,
        })
    }

    /// The next record, `None` at the end of the file. After a [`CaptureError::Record`]
    /// (the file cannot be followed past it) it is `None` too.
    pub fn next_record(&mut self) -> Option<Result<Record, CaptureError>> {
        if self.ended {
            return None;
        }
        let r = self.read_record();
        if matches!(r, Some(Err(CaptureError::Record { .. }))) {
            self.ended = true;
        }
        r
    }

    fn read_record(&mut self) -> Option<Result<Record, CaptureError>> {
        loop {
            let number = self.number + 1;
            let err = |e: pcap_file::PcapError| CaptureError::Record {
                number,
                reason: e.to_string(),
            };
            let (ts, link, data, orig_len) = match &mut self.inner {
                // Raw records: pcap-file refuses a record longer on the wire than the snap
                // length, which is every record of a `tcpdump -s 96` capture.
                Inner::Pcap(r, link, res) => match r.next_raw_packet()? {
                    Ok(p) => {
                        let frac_ns = match res {
                            TsResolution::MicroSecond => p.ts_frac.saturating_mul(1000),
                            TsResolution::NanoSecond => p.ts_frac,
                        };
                        let ts = Duration::new(p.ts_sec as u64, frac_ns.min(999_999_999));
                        (ts, *link, p.data.into_owned(), p.orig_len)
                    }
                    Err(e) => return Some(Err(err(e))),
                },
                Inner::PcapNg(r, links) => match r.next_block()? {
                    Err(e) => return Some(Err(err(e))),
                    Ok(Block::InterfaceDescription(idb)) => {
                        if !supported(idb.linktype) {
                            return Some(Err(CaptureError::LinkType(idb.linktype)));
                        }
                        let resol = idb.options.iter().find_map(|o| match o {
                            InterfaceDescriptionOption::IfTsResol(v) => Some(*v),
                            _ => None,
                        });
                        links.push((idb.linktype, units_per_second(resol)));
                        continue;
                    }
                    Ok(Block::SectionHeader(_)) => {
                        links.clear();
                        continue;
                    }
                    Ok(Block::EnhancedPacket(p)) => match links.get(p.interface_id as usize) {
                        // pcap-file hands the raw timestamp over as nanoseconds; it is in
                        // the interface's units.
                        Some((l, per_second)) => {
                            let ns = p.timestamp.as_nanos() * 1_000_000_000 / per_second;
                            let ts = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
                            (ts, *l, p.data.into_owned(), p.original_len)
                        }
                        None => {
                            self.number = number;
                            return Some(Err(CaptureError::Skipped {
                                number,
                                reason: format!("interface {} was never described", p.interface_id),
                            }));
                        }
                    },
                    Ok(Block::SimplePacket(p)) => match links.first() {
                        Some((l, _)) => (Duration::ZERO, *l, p.data.into_owned(), p.original_len),
                        None => {
                            self.number = number;
                            return Some(Err(CaptureError::Skipped {
                                number,
                                reason: "no interface described".into(),
                            }));
                        }
                    },
                    Ok(_) => continue,
                },
            };
            self.number = number;
            let ip = strip_link(link, &data);
            let link_len = ip.map_or(0, |ip| data.len() - ip.len());
            let cut =
                (orig_len as usize > data.len()).then(|| orig_len.saturating_sub(link_len as u32));
            return Some(Ok(Record {
                number,
                ts,
                ip: ip.map(<[u8]>::to_vec),
                ip_orig_len: cut,
            }));
        }
    }
}

/// Most Ethernet frames nested in NSH (RFC 8300) that are unwrapped to find the IP packet.
const MAX_NESTED_FRAMES: u8 = 4;

/// The IP packet in an Ethernet frame: after its VLAN tags (802.1Q, 802.1ad), and through
/// a Network Service Header (ethertype 0x894f, RFC 8300), which carries IPv4, IPv6 or
/// another Ethernet frame (followed at most [`MAX_NESTED_FRAMES`] deep). As Suricata's
/// DecodeNSH: version 0, MD type 1 (fixed 24-byte header) or 2 (variable), no more.
fn ethernet(frame: &[u8], depth: u8) -> Option<&[u8]> {
    let (ty, off) = EthernetFrame::new_checked(frame).ok()?.network()?;
    let rest = frame.get(off..)?;
    match ty {
        ethertype::IPV4 | ethertype::IPV6 => Some(rest),
        ethertype::NSH => nsh(rest, depth),
        _ => None,
    }
}

/// The IP packet behind a Network Service Header (see [`ethernet`]).
fn nsh(h: &[u8], depth: u8) -> Option<&[u8]> {
    let n = NshHeader::new_checked(h).ok()?;
    let rest = h.get(n.header_len()..)?;
    match n.next_protocol() {
        nsh_next::IPV4 | nsh_next::IPV6 => Some(rest),
        nsh_next::ETHERNET if depth < MAX_NESTED_FRAMES => ethernet(rest, depth + 1),
        _ => None,
    }
}

/// The IP packet inside a frame of link type `link`, or `None` if it carries something else.
pub fn strip_link(link: DataLink, frame: &[u8]) -> Option<&[u8]> {
    match link {
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(frame),
        DataLink::ETHERNET => ethernet(frame, 0),
        DataLink::LINUX_SLL => link::sll(frame),
        DataLink::LINUX_SLL2 => link::sll2(frame),
        DataLink::NULL => link::bsd_loopback(frame, false),
        DataLink::LOOP => link::bsd_loopback(frame, true),
        DataLink::PPP => link::ppp(frame),
        DataLink::C_HDLC => link::c_hdlc(frame),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian microsecond pcap of raw IP records: (caplen, origlen, data).
    fn pcap(records: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        f.extend_from_slice(&[2, 0, 4, 0]);
        f.extend_from_slice(&[0u8; 8]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&101u32.to_le_bytes()); // LINKTYPE_RAW
        for (cap, orig, data) in records {
            f.extend_from_slice(&[0u8; 8]);
            f.extend_from_slice(&cap.to_le_bytes());
            f.extend_from_slice(&orig.to_le_bytes());
            f.extend_from_slice(data);
        }
        f
    }

    #[test]
    fn a_damaged_record_ends_the_capture_after_the_good_ones() {
        let ip = [
            0x45u8, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        // The second record claims 1.4 GB: it cannot be framed, nor anything after it.
        let f = pcap(&[(20, 20, &ip), (0x5400_0000, 20, &ip), (20, 20, &ip)]);
        let mut c = Capture::new(&f[..], [0xd4, 0xc3, 0xb2, 0xa1]).expect("pcap");
        let first = c.next_record().expect("a record").expect("readable");
        assert_eq!(first.ip.as_deref(), Some(&ip[..]));
        match c.next_record() {
            Some(Err(CaptureError::Record { number: 2, .. })) => {}
            other => panic!("expected a record error, got {other:?}"),
        }
        assert!(c.next_record().is_none());
    }

    #[test]
    fn strips_every_link_type() {
        let ip = [0x45u8, 0, 0, 20];
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::ETHERNET, &eth), Some(&ip[..]));
        let mut vlan = vec![0u8; 12];
        vlan.extend_from_slice(&[0x81, 0x00, 0, 5, 0x86, 0xdd]);
        vlan.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::ETHERNET, &vlan), Some(&ip[..]));
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06, 1, 2]);
        assert_eq!(strip_link(DataLink::ETHERNET, &arp), None);
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::LINUX_SLL, &sll), Some(&ip[..]));
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::LINUX_SLL2, &sll2), Some(&ip[..]));
        assert_eq!(strip_link(DataLink::RAW, &ip), Some(&ip[..]));
        let mut null = vec![2u8, 0, 0, 0];
        null.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::NULL, &null), Some(&ip[..]));
        let mut lo = vec![0u8, 0, 0, 24];
        lo.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::LOOP, &lo), Some(&ip[..]));
        let mut ppp = vec![0xffu8, 0x03, 0x00, 0x21];
        ppp.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::PPP, &ppp), Some(&ip[..]));
        assert_eq!(strip_link(DataLink::PPP, &ppp[2..]), Some(&ip[..]));
        // A compressed (one-byte) protocol field: 0x57 is IPv6.
        let mut ppp6 = vec![0x57u8];
        ppp6.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::PPP, &ppp6), Some(&ip[..]));
        assert_eq!(strip_link(DataLink::PPP, &[0x23, 0x45]), None);
        let mut hdlc = vec![0x0fu8, 0x00, 0x08, 0x00];
        hdlc.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::C_HDLC, &hdlc), Some(&ip[..]));
        for (link, f) in [
            (DataLink::NULL, &null),
            (DataLink::PPP, &ppp),
            (DataLink::C_HDLC, &hdlc),
        ] {
            for n in 0..f.len() {
                let _ = strip_link(link, &f[..n]);
            }
        }
        // NSH (MD type 1: 24-byte header; MD type 2: 8 bytes), IPv4 or Ethernet inside.
        let mut nsh1 = vec![0u8; 12];
        nsh1.extend_from_slice(&[0x89, 0x4f, 0x00, 0x06, 0x01, 0x01, 0, 0, 1, 2]);
        nsh1.extend_from_slice(&[0u8; 16]);
        nsh1.extend_from_slice(&ip);
        assert_eq!(strip_link(DataLink::ETHERNET, &nsh1), Some(&ip[..]));
        let mut nsh2 = vec![0u8; 12];
        nsh2.extend_from_slice(&[0x89, 0x4f, 0x00, 0x02, 0x02, 0x03, 0, 0, 1, 2]);
        nsh2.extend_from_slice(&eth);
        assert_eq!(strip_link(DataLink::ETHERNET, &nsh2), Some(&ip[..]));
        // A wrong MD type 1 length, a version other than 0, MPLS inside: not IP.
        let mut bad = nsh1.clone();
        bad[15] = 0x02;
        assert_eq!(strip_link(DataLink::ETHERNET, &bad), None);
        let mut bad = nsh1.clone();
        bad[14] = 0x40;
        assert_eq!(strip_link(DataLink::ETHERNET, &bad), None);
        let mut bad = nsh1.clone();
        bad[17] = 5;
        assert_eq!(strip_link(DataLink::ETHERNET, &bad), None);
        // NSH in NSH in ... stops at the nesting bound.
        let mut deep = eth.clone();
        for _ in 0..=MAX_NESTED_FRAMES {
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&[0x89, 0x4f, 0x00, 0x02, 0x02, 0x03, 0, 0, 1, 2]);
            f.extend_from_slice(&deep);
            deep = f;
        }
        assert_eq!(strip_link(DataLink::ETHERNET, &deep), None);
        for n in 0..nsh1.len() {
            let _ = strip_link(DataLink::ETHERNET, &nsh1[..n]);
        }
        // Short frames never panic.
        for n in 0..eth.len() {
            let _ = strip_link(DataLink::ETHERNET, &eth[..n]);
            let _ = strip_link(DataLink::LINUX_SLL, &sll[..n.min(sll.len())]);
            let _ = strip_link(DataLink::LINUX_SLL2, &sll2[..n.min(sll2.len())]);
        }
    }
}
