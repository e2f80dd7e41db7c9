//! Shared pieces of relayd's fuzz targets (`fuzz_targets/`) and of the seed builder
//! (`examples/build_corpus.rs`): packet builders, the fixed ESP keys every target and
//! seed agrees on, the fixed IDS rule set, and a service registry that touches no file
//! the input names.
//!
//! Nothing here is on relayd's datapath; it exists so that the targets stay short and
//! the seeds are made with the same builders and keys as the targets use.

use relay_core::wire::{Ipv4Packet, TcpPacket, UdpPacket, checksum};
use relay_core::{Packet, ServiceConfig, ServiceFactory};
use relay_svc_crypto::Cipher;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The folder of the fuzz crate (`fuzz/`), fixed at build time.
pub const FUZZ_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Reads a file of the relayd tree (`rel` from the repository root), panicking if it is
/// missing: the targets need their fixed inputs, and a missing one is a setup error.
pub fn repo_file(rel: &str) -> String {
    let p = PathBuf::from(FUZZ_DIR).join("..").join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

// ---------------------------------------------------------------------------------------
// Packets

/// An IPv4 header (20 bytes, DF set, TTL 64) for `proto` with `payload_len` bytes after it,
/// checksum filled.
pub fn ipv4_header(src: [u8; 4], dst: [u8; 4], proto: u8, payload_len: usize) -> Vec<u8> {
    let mut b = vec![0u8; 20];
    b[0] = 0x45;
    b[2..4].copy_from_slice(&((20 + payload_len) as u16).to_be_bytes());
    b[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    b[6] = 0x40;
    b[8] = 64;
    b[9] = proto;
    b[12..16].copy_from_slice(&src);
    b[16..20].copy_from_slice(&dst);
    Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
    b
}

/// An IPv6 header (40 bytes, hop limit 64) for `next` with `payload_len` bytes after it.
pub fn ipv6_header(src: Ipv6Addr, dst: Ipv6Addr, next: u8, payload_len: usize) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    b[0] = 0x60;
    b[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
    b[6] = next;
    b[7] = 64;
    b[8..24].copy_from_slice(&src.octets());
    b[24..40].copy_from_slice(&dst.octets());
    b
}

/// A UDP/IPv4 datagram with checksums filled.
pub fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = ipv4_header(src, dst, 17, 8 + payload.len());
    b.extend_from_slice(&sport.to_be_bytes());
    b.extend_from_slice(&dport.to_be_bytes());
    b.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(payload);
    let ps = checksum::pseudo_v4(src.into(), dst.into(), 17, (8 + payload.len()) as u32);
    UdpPacket::new_unchecked(&mut b[20..]).fill_checksum(ps);
    b
}

/// A TCP/IPv4 segment with `flags`, the given TCP options (a multiple of 4 bytes) and
/// payload, checksums filled.
pub fn tcp4(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    flags: u8,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let thl = 20 + options.len();
    let mut b = ipv4_header(src, dst, 6, thl + payload.len());
    let mut t = vec![0u8; thl];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&1000u32.to_be_bytes());
    t[8..12].copy_from_slice(&5000u32.to_be_bytes());
    t[12] = ((thl / 4) as u8) << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t[20..].copy_from_slice(options);
    b.extend_from_slice(&t);
    b.extend_from_slice(payload);
    let ps = checksum::pseudo_v4(src.into(), dst.into(), 6, (thl + payload.len()) as u32);
    TcpPacket::new_unchecked(&mut b[20..]).fill_checksum(ps);
    b
}

/// An ICMP/IPv4 message of `ty`/`code` with `rest` after the 4-byte header.
pub fn icmp4(src: [u8; 4], dst: [u8; 4], ty: u8, code: u8, rest: &[u8]) -> Vec<u8> {
    let mut b = ipv4_header(src, dst, 1, 4 + rest.len());
    let mut m = vec![ty, code, 0, 0];
    m.extend_from_slice(rest);
    let c = checksum::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    b.extend_from_slice(&m);
    b
}

/// A UDP/IPv6 datagram with its checksum filled, after the given extension headers
/// (`ext`: each `(next_header_of_this_one, bytes)`; the chain ends in UDP).
pub fn udp6(src: Ipv6Addr, dst: Ipv6Addr, ext: &[(u8, Vec<u8>)], payload: &[u8]) -> Vec<u8> {
    let ulen = 8 + payload.len();
    let ext_len: usize = ext.iter().map(|(_, e)| e.len()).sum();
    let first = ext.first().map_or(17, |(t, _)| *t);
    let mut b = ipv6_header(src, dst, first, ext_len + ulen);
    for (i, (_, e)) in ext.iter().enumerate() {
        let mut e = e.clone();
        e[0] = ext.get(i + 1).map_or(17, |(t, _)| *t);
        b.extend_from_slice(&e);
    }
    let at = b.len();
    b.extend_from_slice(&4000u16.to_be_bytes());
    b.extend_from_slice(&5000u16.to_be_bytes());
    b.extend_from_slice(&(ulen as u16).to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(payload);
    let ps = checksum::pseudo_v6(src, dst, 17, ulen as u32);
    UdpPacket::new_unchecked(&mut b[at..]).fill_checksum(ps);
    b
}

/// Two documentation addresses for IPv6 packets.
pub fn v6_pair() -> (Ipv6Addr, Ipv6Addr) {
    (
        "2001:db8::1".parse().unwrap(),
        "2001:db8::2".parse().unwrap(),
    )
}

/// A packet with the conventional relay test addresses: 10.0.1.1 -> 10.0.2.2.
pub const CLIENT: [u8; 4] = [10, 0, 1, 1];
/// See [`CLIENT`].
pub const SERVER: [u8; 4] = [10, 0, 2, 2];

/// A text payload of `n` bytes that compresses well.
pub fn text(n: usize) -> Vec<u8> {
    let t = b"relayd fuzzes this payload because it repeats itself. ";
    (0..n).map(|i| t[i % t.len()]).collect()
}

/// A varied set of IP packets (every protocol and header shape the parsers know): the
/// seeds of the packet-shaped targets.
pub fn sample_packets() -> Vec<(&'static str, Vec<u8>)> {
    let (s6, d6) = v6_pair();
    let hop_by_hop = vec![0, 0, 1, 4, 0, 0, 0, 0];
    let fragment_first = vec![0, 0, 0, 1, 0, 0, 0, 7];
    let fragment_later = vec![0, 0, 0x05, 0x00, 0, 0, 0, 7];
    let mut v4_options = udp4(CLIENT, SERVER, 4000, 5000, b"options");
    // IHL 6: one 4-byte option (NOP NOP NOP EOL) between header and UDP.
    v4_options.splice(20..20, [1, 1, 1, 0]);
    v4_options[0] = 0x46;
    let total = v4_options.len() as u16;
    v4_options[2..4].copy_from_slice(&total.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut v4_options[..]).fill_checksum();
    let mut frag = udp4(CLIENT, SERVER, 4000, 5000, &text(64));
    frag[6] = 0x20; // MF, offset 0
    Ipv4Packet::new_unchecked(&mut frag[..]).fill_checksum();
    let mut later = udp4(CLIENT, SERVER, 4000, 5000, &text(64));
    later[6..8].copy_from_slice(&0x0010u16.to_be_bytes()); // offset 128
    Ipv4Packet::new_unchecked(&mut later[..]).fill_checksum();
    vec![
        ("udp4", udp4(CLIENT, SERVER, 4000, 5000, b"hello")),
        ("udp4_big", udp4(CLIENT, SERVER, 4000, 5000, &text(1400))),
        ("udp4_options", v4_options),
        ("udp4_first_fragment", frag),
        ("udp4_later_fragment", later),
        (
            "tcp4_syn_mss",
            tcp4(CLIENT, SERVER, 40000, 80, 0x02, &[2, 4, 5, 0xb4], b""),
        ),
        (
            "tcp4_http",
            tcp4(
                CLIENT,
                SERVER,
                40000,
                80,
                0x18,
                &[],
                b"GET /etc/passwd HTTP/1.1\r\n\r\n",
            ),
        ),
        (
            "icmp4_echo",
            icmp4(CLIENT, SERVER, 8, 0, &[0, 1, 0, 1, 1, 2, 3, 4]),
        ),
        (
            "icmp4_unreachable",
            icmp4(SERVER, CLIENT, 3, 3, &{
                let mut q = vec![0, 0, 0, 0];
                q.extend_from_slice(&udp4(CLIENT, SERVER, 4000, 5000, b"quoted")[..28]);
                q
            }),
        ),
        ("udp6", udp6(s6, d6, &[], b"hello6")),
        ("udp6_hop_by_hop", udp6(s6, d6, &[(0, hop_by_hop)], b"hbh")),
        (
            "udp6_first_fragment",
            udp6(s6, d6, &[(44, fragment_first)], b"frag"),
        ),
        (
            "udp6_later_fragment",
            udp6(s6, d6, &[(44, fragment_later)], b"frag"),
        ),
        ("ipcomp4_header_only", {
            let mut b = ipv4_header(CLIENT, SERVER, 108, 4);
            b.extend_from_slice(&[17, 0, 0, 2]);
            b
        }),
    ]
}

/// A [`Packet`] of `bytes`; if `cut` is `Some(n)` and shorter than the packet, only the
/// first `n` bytes are kept and the packet is a partial copy (the kernel's copy range).
pub fn packet(bytes: &[u8], cut: Option<usize>) -> Packet {
    match cut {
        Some(n) if n < bytes.len() => {
            let mut p = Packet::from_bytes(&bytes[..n]);
            p.meta.orig_len = Some(bytes.len() as u32);
            p
        }
        _ => Packet::from_bytes(bytes),
    }
}

// ---------------------------------------------------------------------------------------
// ESP

/// One SA of the ESP targets' `decrypt` service.
#[derive(Debug, Clone, Copy)]
pub struct EspSa {
    /// The suite.
    pub cipher: Cipher,
    /// Extended sequence numbers.
    pub esn: bool,
    /// Tunnel mode (the body is a whole IP packet) rather than transport.
    pub tunnel: bool,
    /// The outer sources the SA accepts (required in tunnel mode).
    pub peer: Option<&'static str>,
    /// The outer family the peer (if any) is of, so the family packets are sent in.
    pub v6: bool,
}

/// The SAs of the ESP targets, SPI `0x1000 + index`: every cipher in transport mode
/// without and with ESN (the latter only from 10.0.0.0/16), and in tunnel mode from
/// 10.0.1.1 (IPv4 outer) and, with ESN, from 2001:db8::1 (IPv6 outer).
pub const ESP_SAS: [EspSa; 16] = {
    const C: [Cipher; 4] = [
        Cipher::Aes128Gcm,
        Cipher::Aes256Gcm,
        Cipher::Aes128CbcHmac,
        Cipher::Aes256CbcHmac,
    ];
    let mut out = [EspSa {
        cipher: Cipher::Aes128Gcm,
        esn: false,
        tunnel: false,
        peer: None,
        v6: false,
    }; 16];
    let mut i = 0;
    while i < 16 {
        let (esn, tunnel, peer, v6) = match i / 4 {
            0 => (false, false, None, false),
            1 => (true, false, Some("10.0.0.0/16"), false),
            2 => (false, true, Some("10.0.1.1"), false),
            _ => (true, true, Some("2001:db8::1"), true),
        };
        out[i] = EspSa {
            cipher: C[i % 4],
            esn,
            tunnel,
            peer,
            v6,
        };
        i += 1;
    }
    out
};

/// The SPI of SA `i` of [`ESP_SAS`].
pub fn esp_spi(i: usize) -> u32 {
    0x1000 + i as u32
}

/// The fixed key of `cipher` (not secret: the fuzz targets seal with it).
pub fn esp_key(cipher: Cipher) -> Vec<u8> {
    (0..cipher.key_len())
        .map(|i| (i as u8).wrapping_mul(37) ^ cipher.key_len() as u8)
        .collect()
}

/// Writes the fixed key of `cipher` to a key file relayd accepts and returns its path:
/// mode 0600, in a folder only this user can write, under `fuzz/target/` or, when the
/// checkout sits below a folder others can write (a clone in /tmp), under
/// `$HOME/.cache/relayd-fuzz-keys`. relayd's own `load_key` decides which one passes.
/// Idempotent and safe when several fuzzing processes do it at once.
pub fn esp_key_file(cipher: Cipher) -> PathBuf {
    static KEYS: OnceLock<Vec<(Cipher, PathBuf)>> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        Cipher::ALL
            .iter()
            .map(|&(_, c)| (c, place_key(c)))
            .collect()
    });
    keys.iter()
        .find(|(c, _)| *c == cipher)
        .map(|(_, p)| p.clone())
        .expect("every cipher has a key")
}

fn place_key(cipher: Cipher) -> PathBuf {
    let mut dirs = vec![PathBuf::from(FUZZ_DIR).join("target").join("fuzz-keys")];
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cache").join("relayd-fuzz-keys"));
    }
    let mut errors = Vec::new();
    for dir in &dirs {
        let path = write_key(dir, cipher);
        match relay_svc_crypto::load_key(&path, cipher) {
            Ok(_) => return path,
            Err(e) => errors.push(e.to_string()),
        }
    }
    panic!("no folder for the fuzz keys that relayd accepts: {errors:?}");
}

fn write_key(dir: &std::path::Path, cipher: Cipher) -> PathBuf {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    let name = format!(
        "{}.key",
        cipher.key_len() * 10 + usize::from(cipher.is_gcm())
    );
    let path = dir.join(name);
    if std::fs::metadata(&path).is_ok() {
        return path;
    }
    let hex: String = esp_key(cipher).iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!("key.{}.tmp", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .expect("writing a fuzz key");
    std::io::Write::write_all(&mut f, hex.as_bytes()).expect("writing a fuzz key");
    std::fs::rename(&tmp, &path).expect("placing a fuzz key");
    path
}

/// The configuration name of `cipher`.
pub fn cipher_name(cipher: Cipher) -> &'static str {
    Cipher::ALL
        .iter()
        .find(|(_, c)| *c == cipher)
        .map(|(n, _)| *n)
        .expect("every cipher has a name")
}

/// The `decrypt` configuration over every SA of [`ESP_SAS`], window 4096, written as
/// TOML as an operator would (so that new optional keys keep their defaults).
pub fn decrypt_config() -> relay_svc_crypto::DecryptConfig {
    let mut t = format!(
        "replay_window = 4096\nstate_dir = \"{}\"\n",
        esp_state_dir().display()
    );
    for (i, sa) in ESP_SAS.iter().enumerate() {
        t += &format!(
            "[[sa]]\nspi = {}\ncipher = \"{}\"\nkey_file = \"{}\"\nesn = {}\nmode = \"{}\"\n",
            esp_spi(i),
            cipher_name(sa.cipher),
            esp_key_file(sa.cipher).display(),
            sa.esn,
            if sa.tunnel { "tunnel" } else { "transport" },
        );
        if let Some(p) = sa.peer {
            t += &format!("peer = \"{p}\"\n");
        }
    }
    toml::from_str(&t).expect("the fuzz decrypt configuration parses")
}

/// Builds the ESP part (SPI to ICV) of SA `i` around `body`, which must already end in
/// its padding, pad length and next header and be a multiple of the cipher's block.
pub fn esp_seal(sa: &relay_svc_crypto::SaCrypto, i: usize, seq: u64, body: &[u8]) -> Vec<u8> {
    let EspSa { cipher, esn, .. } = ESP_SAS[i];
    let mut esp = Vec::with_capacity(8 + cipher.iv_len() + body.len() + 16);
    esp.extend_from_slice(&esp_spi(i).to_be_bytes());
    esp.extend_from_slice(&(seq as u32).to_be_bytes());
    esp.resize(8 + cipher.iv_len(), 0);
    esp.extend_from_slice(body);
    esp.resize(esp.len() + relay_svc_crypto::ICV_LEN, 0);
    sa.seal(seq, esn, &mut esp)
        .expect("a body of whole cipher blocks");
    esp
}

/// `plain` padded as RFC 4303 2.4 says for `cipher`, with pad length and `next` header.
pub fn esp_pad(cipher: Cipher, plain: &[u8], next: u8) -> Vec<u8> {
    let padded = (plain.len() + 2).next_multiple_of(cipher.block());
    let pad = padded - plain.len() - 2;
    let mut b = plain.to_vec();
    b.extend((1..=pad).map(|k| k as u8));
    b.push(pad as u8);
    b.push(next);
    b
}

// ---------------------------------------------------------------------------------------
// IDS

/// Address and port variables for rule files, as the IDS tests use them.
pub fn ids_vars() -> std::collections::BTreeMap<String, String> {
    let mut v = std::collections::BTreeMap::new();
    v.insert("HOME_NET".into(), "[10.0.0.0/8,192.168.0.0/16]".into());
    v.insert("EXTERNAL_NET".into(), "!$HOME_NET".into());
    v.insert("HTTP_PORTS".into(), "[80,8080]".into());
    v
}

/// Rules beside the IDS tests' varied file that reach the remaining keywords.
pub const EXTRA_RULES: &str = r#"
alert tcp any any -> any any (msg:"relative"; content:"user"; content:"root"; distance:1; within:20; sid:4000001;)
alert udp any any -> any any (msg:"depth offset"; content:"|00 01|"; offset:2; depth:6; sid:4000002;)
alert ip any any -> any any (msg:"ttl"; ttl:>200; sid:4000003;)
alert tcp any any -> any any (msg:"established"; flow:established,to_client; content:"HTTP/1."; sid:4000004;)
drop icmp any any -> any any (msg:"icode"; itype:3; icode:3; sid:4000005;)
alert tcp any any -> any 80 (msg:"dsize"; dsize:10<>100; content:"GET "; nocase; sid:4000006;)
alert udp any any -> any 53 (msg:"pcre dns"; pcre:"/[a-z]{5,}\x03com/i"; sid:4000007;)
alert ip any any -> [2001:db8::/32] any (msg:"v6"; sid:4000008;)
reject tcp any any -> any 23 (msg:"telnet"; flags:S; sid:4000009;)
alert tcp any any -> any any (msg:"threshold both"; content:"A"; threshold: type both, track by_dst, count 3, seconds 1; sid:4000010;)
ratelimit udp any any -> any any (msg:"udp rate"; rate:5/s, burst 5, track by_src; sid:4000011;)
pass udp 10.9.0.0/16 any -> any any (msg:"pass"; sid:4000012;)
"#;

/// The fixed rule set of the `ids_engine` target: the IDS tests' varied rules file (its
/// broken rules are left out, as relayd leaves them out) and [`EXTRA_RULES`].
pub fn ids_rules_text() -> String {
    repo_file("services/ids/tests/fixtures/varied.rules") + EXTRA_RULES
}

// ---------------------------------------------------------------------------------------
// Configuration

/// Wraps a service configuration whose factory would read or write files named in the
/// input (key files, rule files, EVE logs): the input's paths are replaced by fixed,
/// harmless ones before the real checks run, so that a fuzzed configuration can neither
/// read `/dev/zero` nor create a file anywhere.
#[derive(serde::Deserialize)]
#[serde(transparent)]
pub struct Sandboxed<C>(pub C);

/// How [`Sandboxed`] makes a configuration harmless.
pub trait Sandbox {
    /// Replaces every path in the configuration by a fixed one.
    fn sandbox(&mut self);
}

/// A state directory of this process's own beside the fuzz keys: the ESP services write
/// their sequence state there, never in /var/lib/relayd, and each run starts afresh.
pub fn esp_state_dir() -> PathBuf {
    let keys = esp_key_file(Cipher::Aes128Gcm);
    let parent = keys.parent().map(PathBuf::from).unwrap_or_default();
    parent.join(format!("state-{}", std::process::id()))
}

impl Sandbox for relay_svc_crypto::EncryptConfig {
    fn sandbox(&mut self) {
        if let Some(c) = self.cipher {
            self.key_file = Some(esp_key_file(c));
        }
        self.state_dir = Some(esp_state_dir());
    }
}

impl Sandbox for relay_svc_crypto::DecryptConfig {
    fn sandbox(&mut self) {
        self.state_dir = Some(esp_state_dir());
        for sa in &mut self.sa {
            sa.key_file = esp_key_file(sa.cipher);
        }
    }
}

impl Sandbox for relay_svc_ids::IdsConfig {
    fn sandbox(&mut self) {
        let fixed = PathBuf::from(FUZZ_DIR).join("../services/ids/tests/fixtures/varied.rules");
        for r in &mut self.rules {
            *r = fixed.clone();
        }
        self.classification = None;
        self.eve_log = None;
    }
}

impl<C: ServiceConfig + Sandbox> ServiceConfig for Sandboxed<C> {
    const KIND: &'static str = C::KIND;

    fn into_factory(
        mut self,
        name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        self.0.sandbox();
        self.0.into_factory(name)
    }
}

/// relayd's registry of built-in services with the file-touching kinds sandboxed (loading
/// a configuration starts no queue monitor: that is relayd's, from the manifests).
pub fn sandboxed_registry() -> &'static relayd::Registry {
    static R: OnceLock<relayd::Registry> = OnceLock::new();
    R.get_or_init(|| {
        let mut r = relayd::Registry::with_builtins();
        r.register::<Sandboxed<relay_svc_crypto::EncryptConfig>>();
        r.register::<Sandboxed<relay_svc_crypto::DecryptConfig>>();
        r.register::<Sandboxed<relay_svc_ids::IdsConfig>>();
        r
    })
}

/// A small deterministic input reader for targets whose input has a few control bytes
/// in front of the data.
#[derive(Debug)]
pub struct Input<'a>(pub &'a [u8]);

impl<'a> Input<'a> {
    /// The next byte, 0 once the input is used up.
    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    /// The next big-endian u16, 0-filled.
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    /// The rest of the input.
    pub fn rest(self) -> &'a [u8] {
        self.0
    }
}

/// The IPv4 address of a relay edge in the MPLS targets and seeds (a configured peer).
pub const MPLS_PEER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
