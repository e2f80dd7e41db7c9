//! TLS over a reassembled TCP stream: the record layer, handshake messages reassembled across
//! records, and the buffers of the flow's single transaction (Suricata's TLS has one):
//! `tls.sni` from the ClientHello, `tls.cert_subject` / `tls.cert_issuer` from the first
//! certificate of a Certificate message.
//!
//! As Suricata (`app-layer-ssl.c`, `rust/src/x509`):
//! - `tls.sni` is the first `host_name` of the first server_name extension of the first
//!   ClientHello, its bytes as sent (1 to 255 of them; another name type or length means no
//!   SNI). The direction to server is [`Progress::Complete`] once the ClientHello is parsed.
//! - The certificate subject and issuer are x509-parser's `X509Name` display, the very call
//!   Suricata makes: RDNs joined by `, `, multi-valued ones by ` + `, short names from the OID
//!   registry (`C=US, O=Google Inc, CN=www.google.com`). The server's certificate is kept for
//!   the direction to client, a client certificate for the direction to server (Suricata 8
//!   matches `tls.cert_subject` both ways). The direction to client is `Complete` once the
//!   Certificate message, the ServerHelloDone, or encrypted records are seen.
//! - TLS 1.3 encrypts the Certificate message: a ServerHello that selects TLS 1.3
//!   (supported_versions 0x0304) completes the direction to client with no certificate
//!   buffers, as there is nothing in the clear to read.
//! - After a ChangeCipherSpec or an application data record in a direction, that direction is
//!   encrypted: only record headers are followed (bodies skipped, nothing buffered).
//! - A record whose header is not TLS (type other than 20 to 24, version not 3.0 to 3.4,
//!   length 0 or over 2^14 + 1024) is a parse error that stops the parser for the flow.
//!   SSLv2 records (first byte with one of its top two bits set, as Suricata tells them
//!   apart) are framed and skipped: an SSLv2-compatible ClientHello carries no SNI, and the
//!   TLS records after it are read as usual.
//!
//! Crates: `tls-parser` decodes the ClientHello, its server_name extension and the
//! ServerHello (the record and handshake framing around them is three length fields, done
//! here so that a partial record can be kept and a message can span records);
//! `x509-parser` decodes the certificate, and gives Suricata's exact name format.
//!
//! Bounds, per direction: a partial record is buffered (at most 5 + [`MAX_RECORD_LEN`] bytes)
//! only while a handshake record in the clear spans calls; a handshake message is reassembled
//! across records up to [`MAX_HANDSHAKE_LEN`] bytes (longer ones are cut there, counted, and
//! only a Certificate message is still read, for its first certificate). Buffers above 4 KiB
//! are released when done. The kept strings are at most the SNI (255 bytes) and two names per
//! direction formatted from a certificate of at most 64 KiB.

use thiserror::Error;
use tls_parser::{
    SNIType, TlsExtension, parse_tls_extension_sni_content, parse_tls_handshake_client_hello,
    parse_tls_handshake_server_hello,
};

use super::{Dir, Progress, Transaction};
use crate::applayer::buffer::Buffer;

/// The largest record body accepted (Suricata's `SSLV3_RECORD_MAX_LEN`).
pub(crate) const MAX_RECORD_LEN: usize = (1 << 14) + 1024;

/// The most bytes of one handshake message reassembled.
pub(crate) const MAX_HANDSHAKE_LEN: usize = 64 * 1024;

const RECORD_HDR: usize = 5;
const HS_HDR: usize = 4;
const KEEP_CAPACITY: usize = 4096;

const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
const HEARTBEAT: u8 = 24;

const HS_CLIENT_HELLO: u8 = 1;
const HS_SERVER_HELLO: u8 = 2;
const HS_CERTIFICATE: u8 = 11;
const HS_SERVER_HELLO_DONE: u8 = 14;

const EXT_SERVER_NAME: u16 = 0;
const EXT_SUPPORTED_VERSIONS: u16 = 43;
const TLS13: u16 = 0x0304;

/// A record header that is not TLS: the parser stops for the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
// The variants name what in the record is wrong, as the counters and messages do.
#[allow(clippy::enum_variant_names)]
pub(crate) enum TlsError {
    /// A content type other than change_cipher_spec, alert, handshake, application_data
    /// and heartbeat.
    #[error("TLS record type {0} unknown")]
    RecordType(u8),
    /// A record version other than SSL 3.0 to TLS 1.3.
    #[error("TLS record version {0:#06x} unknown")]
    RecordVersion(u16),
    /// A record length of zero or above [`MAX_RECORD_LEN`].
    #[error("TLS record length {0} out of range")]
    RecordLength(usize),
}

/// What happened on a flow, for counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TlsStats {
    /// Record headers read.
    pub records: u64,
    /// Handshake messages read in the clear.
    pub handshake_messages: u64,
    /// ClientHello or ServerHello messages that did not parse.
    pub hello_errors: u64,
    /// Certificate messages whose first certificate did not parse.
    pub cert_errors: u64,
    /// Handshake messages longer than [`MAX_HANDSHAKE_LEN`], cut.
    pub oversized: u64,
}

/// The flow's single TLS transaction: the handshake's buffers and progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsTx {
    sni: Option<Vec<u8>>,
    subject: [Option<String>; 2],
    issuer: [Option<String>; 2],
    progress: [Progress; 2],
    tls13: bool,
}

impl TlsTx {
    /// The ClientHello's server name, if any.
    pub(crate) fn sni(&self) -> Option<&[u8]> {
        self.sni.as_deref()
    }

    /// The subject of the first certificate sent in `dir` (the server's for
    /// [`Dir::ToClient`]), formatted as Suricata does.
    pub(crate) fn cert_subject(&self, dir: Dir) -> Option<&str> {
        self.subject.get(dir.index())?.as_deref()
    }

    /// The issuer of the first certificate sent in `dir`.
    pub(crate) fn cert_issuer(&self, dir: Dir) -> Option<&str> {
        self.issuer.get(dir.index())?.as_deref()
    }

    /// True if the ServerHello selected TLS 1.3 (certificates encrypted).
    #[cfg(test)]
    pub(crate) fn is_tls13(&self) -> bool {
        self.tls13
    }

    fn advance(&mut self, dir: Dir, p: Progress) {
        if let Some(cur) = self.progress.get_mut(dir.index()) {
            *cur = (*cur).max(p);
        }
    }
}

impl Transaction for TlsTx {
    fn id(&self) -> u64 {
        0
    }

    fn progress(&self, dir: Dir) -> Progress {
        self.progress.get(dir.index()).copied().unwrap_or_default()
    }

    fn for_each(&self, b: Buffer, dir: Dir, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        let v: Option<&[u8]> = match (b, dir) {
            (Buffer::TlsSni, Dir::ToServer) => self.sni(),
            (Buffer::TlsCertSubject, _) => self.cert_subject(dir).map(str::as_bytes),
            (Buffer::TlsCertIssuer, _) => self.cert_issuer(dir).map(str::as_bytes),
            _ => None,
        };
        v.is_some_and(f)
    }
}

/// One direction's parsing state.
#[derive(Debug, Default)]
struct Half {
    /// A record (header, then body) that spans calls; only handshake records in the clear.
    rec: Vec<u8>,
    /// Bytes of the current record's body still to skip.
    skip: usize,
    /// ChangeCipherSpec or application data seen: bodies are no longer read.
    encrypted: bool,
    /// A handshake message (header included) that spans records.
    hs: Vec<u8>,
    /// Bytes of an oversized handshake message still to discard.
    hs_skip: usize,
}

impl Half {
    fn encrypt(&mut self) {
        self.encrypted = true;
        self.hs = Vec::new();
        self.hs_skip = 0;
    }
}

/// The TLS state of one flow.
#[derive(Debug, Default)]
pub(crate) struct TlsState {
    halves: [Half; 2],
    tx: TlsTx,
    stopped: bool,
    stats: TlsStats,
    /// What this state has charged to the application-layer memcap.
    pub(crate) mem: super::budget::Charge,
}

/// A validated record header.
struct RecordHeader {
    /// The content type ([`SSLV2`] for an SSLv2 record).
    ctype: u8,
    /// The body length.
    len: usize,
}

/// Pseudo content type of an SSLv2 record (never parsed, only skipped).
const SSLV2: u8 = 0;

/// The header length of the record starting with `b0`: as Suricata, a byte with one of the
/// two top bits set starts an SSLv2 record (2-byte header, or 3 with padding), anything
/// else a TLS one (5 bytes).
fn header_len(b0: u8) -> usize {
    if b0 & 0x80 != 0 {
        2
    } else if b0 & 0x40 != 0 {
        3
    } else {
        RECORD_HDR
    }
}

/// Checks a whole record header (`header_len` bytes).
fn record_header(h: &[u8]) -> Result<RecordHeader, TlsError> {
    let (ctype, len) = match *h {
        [b0, b1] => (SSLV2, usize::from(b0 & 0x7f) << 8 | usize::from(b1)),
        [b0, b1, _] => (SSLV2, usize::from(b0 & 0x3f) << 8 | usize::from(b1)),
        [ctype, major, minor, l0, l1] => {
            if !(CHANGE_CIPHER_SPEC..=HEARTBEAT).contains(&ctype) {
                return Err(TlsError::RecordType(ctype));
            }
            if major != 3 || minor > 4 {
                return Err(TlsError::RecordVersion(u16::from_be_bytes([major, minor])));
            }
            let len = usize::from(u16::from_be_bytes([l0, l1]));
            if len > MAX_RECORD_LEN {
                return Err(TlsError::RecordLength(len));
            }
            (ctype, len)
        }
        _ => return Err(TlsError::RecordType(h.first().copied().unwrap_or_default())),
    };
    if len == 0 {
        return Err(TlsError::RecordLength(0));
    }
    Ok(RecordHeader { ctype, len })
}

impl TlsState {
    /// A state before any byte.
    #[cfg(test)]
    pub(crate) fn new() -> TlsState {
        TlsState::default()
    }

    /// Bytes this state holds (itself, its record and handshake buffers and the kept
    /// strings), as charged to the application-layer memcap.
    pub(crate) fn memory(&self) -> usize {
        let opt = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
        std::mem::size_of::<TlsState>()
            + self
                .halves
                .iter()
                .map(|h| h.rec.capacity() + h.hs.capacity())
                .sum::<usize>()
            + self.tx.sni.as_ref().map_or(0, Vec::capacity)
            + self.tx.subject.iter().map(opt).sum::<usize>()
            + self.tx.issuer.iter().map(opt).sum::<usize>()
    }

    /// The flow's transaction.
    pub(crate) fn tx(&self) -> &TlsTx {
        &self.tx
    }

    /// True once both directions are encrypted (a ChangeCipherSpec or an application data
    /// record seen each way): the parser reads nothing more of the flow, and its one
    /// transaction is final (Suricata's `SSL_AL_FLAG_SSL_CLIENT_SSN_ENCRYPTED` and
    /// `..._SERVER_SSN_ENCRYPTED`).
    pub(crate) fn encrypted(&self) -> bool {
        self.halves.iter().all(|h| h.encrypted)
    }

    /// True once a record error stopped the parser.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The flow's counters.
    #[cfg(test)]
    pub(crate) fn stats(&self) -> &TlsStats {
        &self.stats
    }

    /// Parses the next bytes of the stream travelling in `dir` (in order, no gap). After an
    /// error (returned once) the flow's TLS parsing has stopped, both directions count as
    /// complete, and later bytes are ignored.
    pub(crate) fn feed(&mut self, dir: Dir, data: &[u8]) -> Result<(), TlsError> {
        if self.stopped {
            return Ok(());
        }
        let res = self.records(dir, data);
        if res.is_err() {
            self.stopped = true;
            self.halves = Default::default();
            self.tx.advance(Dir::ToServer, Progress::Complete);
            self.tx.advance(Dir::ToClient, Progress::Complete);
        }
        res
    }

    /// The record layer: headers checked, handshake bodies in the clear parsed (from `data`
    /// directly when whole, else buffered), other bodies skipped.
    fn records(&mut self, dir: Dir, mut data: &[u8]) -> Result<(), TlsError> {
        let d = dir.index();
        loop {
            let Some(half) = self.halves.get_mut(d) else {
                return Ok(());
            };
            if half.skip > 0 {
                let n = half.skip.min(data.len());
                half.skip -= n;
                data = data.get(n..).unwrap_or_default();
                if half.skip > 0 {
                    return Ok(());
                }
                continue;
            }
            if let Some(&b0) = half.rec.first() {
                let hl = header_len(b0);
                if half.rec.len() < hl {
                    let (head, tail) = data.split_at(data.len().min(hl - half.rec.len()));
                    half.rec.extend_from_slice(head);
                    data = tail;
                    let Some(h) = half.rec.get(..hl) else {
                        return Ok(());
                    };
                    let h = record_header(h)?;
                    if !self.on_header(d, &h) {
                        let half = &mut self.halves[d];
                        half.rec.clear();
                        half.skip = h.len;
                        continue;
                    }
                }
                // Only a handshake record in the clear gets here: a 5-byte header.
                let half = &mut self.halves[d];
                let total = hl + record_header(half.rec.get(..hl).unwrap_or_default())?.len;
                let (head, tail) = data.split_at(data.len().min(total - half.rec.len()));
                half.rec.extend_from_slice(head);
                data = tail;
                if half.rec.len() < total {
                    return Ok(());
                }
                let mut rec = std::mem::take(&mut half.rec);
                self.handshake(dir, rec.get(hl..).unwrap_or_default());
                rec.clear();
                if rec.capacity() <= KEEP_CAPACITY {
                    self.halves[d].rec = rec;
                }
                continue;
            }
            let Some(&b0) = data.first() else {
                return Ok(());
            };
            let hl = header_len(b0);
            let Some((hb, body)) = data.split_at_checked(hl) else {
                half.rec.extend_from_slice(data);
                return Ok(());
            };
            let h = record_header(hb)?;
            if !self.on_header(d, &h) {
                self.halves[d].skip = h.len;
                data = body;
                continue;
            }
            match body.split_at_checked(h.len) {
                Some((body, rest)) => {
                    self.handshake(dir, body);
                    data = rest;
                }
                None => {
                    let half = &mut self.halves[d];
                    half.rec.reserve(hl + h.len);
                    half.rec.extend_from_slice(data);
                    return Ok(());
                }
            }
        }
    }

    /// Counts a record and says whether its body is to be parsed (a handshake record in the
    /// clear); ChangeCipherSpec and application data turn the direction encrypted.
    fn on_header(&mut self, d: usize, h: &RecordHeader) -> bool {
        self.stats.records += 1;
        let Some(half) = self.halves.get_mut(d) else {
            return false;
        };
        match h.ctype {
            CHANGE_CIPHER_SPEC | APPLICATION_DATA => {
                half.encrypt();
                let dir = if d == 0 { Dir::ToServer } else { Dir::ToClient };
                self.tx.advance(dir, Progress::Complete);
                false
            }
            HANDSHAKE => !half.encrypted,
            // Alerts, heartbeats and SSLv2 records carry nothing for the buffers.
            ALERT | HEARTBEAT | SSLV2 => false,
            _ => false,
        }
    }

    /// Reassembles handshake messages from one record's body and handles each.
    fn handshake(&mut self, dir: Dir, mut p: &[u8]) {
        let TlsState {
            halves, tx, stats, ..
        } = self;
        let Some(half) = halves.get_mut(dir.index()) else {
            return;
        };
        while !p.is_empty() && !half.encrypted {
            if half.hs_skip > 0 {
                let n = half.hs_skip.min(p.len());
                half.hs_skip -= n;
                p = p.get(n..).unwrap_or_default();
                continue;
            }
            if half.hs.is_empty() {
                // Whole messages straight from the record, without a copy.
                if let Some(total) = hs_total(p)
                    && let Some((msg, rest)) = p.split_at_checked(total)
                {
                    if message(tx, stats, dir, msg, true) {
                        half.encrypt();
                    }
                    p = rest;
                    continue;
                }
            }
            if half.hs.len() < HS_HDR {
                let (head, tail) = p.split_at(p.len().min(HS_HDR - half.hs.len()));
                half.hs.extend_from_slice(head);
                p = tail;
                continue;
            }
            let Some(total) = hs_total(&half.hs) else {
                return;
            };
            let keep = total.min(MAX_HANDSHAKE_LEN);
            let (head, tail) = p.split_at(p.len().min(keep.saturating_sub(half.hs.len())));
            half.hs.extend_from_slice(head);
            p = tail;
            if half.hs.len() >= keep {
                let whole = keep == total;
                if !whole {
                    stats.oversized += 1;
                }
                let mut msg = std::mem::take(&mut half.hs);
                let now_encrypted = message(tx, stats, dir, &msg, whole);
                msg.clear();
                if msg.capacity() <= KEEP_CAPACITY {
                    half.hs = msg;
                }
                half.hs_skip = total - keep;
                if now_encrypted {
                    half.encrypt();
                }
            }
        }
    }
}

/// The size of the handshake message starting `p` (header included), once its header is in.
fn hs_total(p: &[u8]) -> Option<usize> {
    let [_, a, b, c] = *p.first_chunk::<HS_HDR>()?;
    Some(HS_HDR + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c)))
}

/// Handles one handshake message (`whole` false: cut at [`MAX_HANDSHAKE_LEN`]). Returns true
/// if the rest of the direction's handshake is encrypted (a TLS 1.3 ServerHello).
fn message(tx: &mut TlsTx, stats: &mut TlsStats, dir: Dir, msg: &[u8], whole: bool) -> bool {
    let (Some(&kind), Some(body)) = (msg.first(), msg.get(HS_HDR..)) else {
        return false;
    };
    stats.handshake_messages += 1;
    match (kind, dir) {
        (HS_CLIENT_HELLO, Dir::ToServer) if whole => {
            match parse_tls_handshake_client_hello(body) {
                Ok((_, ch)) => {
                    if tx.sni.is_none() {
                        tx.sni = ch.ext.and_then(sni);
                    }
                    tx.advance(Dir::ToServer, Progress::Complete);
                }
                Err(_) => stats.hello_errors += 1,
            }
            false
        }
        (HS_SERVER_HELLO, Dir::ToClient) if whole => match parse_tls_handshake_server_hello(body) {
            Ok((_, sh)) => {
                let tls13 = sh.ext.is_some_and(selects_tls13);
                tx.tls13 |= tls13;
                let p = if tls13 {
                    Progress::Complete
                } else {
                    Progress::Line
                };
                tx.advance(Dir::ToClient, p);
                tls13
            }
            Err(_) => {
                stats.hello_errors += 1;
                false
            }
        },
        (HS_CERTIFICATE, _) => {
            let d = dir.index();
            if tx.subject.get(d).is_some_and(Option::is_none) {
                match first_cert_names(body) {
                    Some((s, i)) => {
                        if let (Some(ts), Some(ti)) = (tx.subject.get_mut(d), tx.issuer.get_mut(d))
                        {
                            *ts = Some(s);
                            *ti = Some(i);
                        }
                    }
                    None => stats.cert_errors += 1,
                }
            }
            if dir == Dir::ToClient {
                tx.advance(Dir::ToClient, Progress::Complete);
            }
            false
        }
        (HS_SERVER_HELLO_DONE, Dir::ToClient) => {
            tx.advance(Dir::ToClient, Progress::Complete);
            false
        }
        _ => false,
    }
}

/// The extensions of a hello as (type, data) pairs, stopping at the first that does not fit.
fn extensions(mut ext: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let (h, rest) = ext.split_first_chunk::<4>()?;
        let [t0, t1, l0, l1] = *h;
        let (data, rest) = rest.split_at_checked(usize::from(u16::from_be_bytes([l0, l1])))?;
        ext = rest;
        Some((u16::from_be_bytes([t0, t1]), data))
    })
}

/// The SNI as Suricata keeps it: the first server_name extension's first entry, which must
/// be a host_name of 1 to 255 bytes.
fn sni(ext: &[u8]) -> Option<Vec<u8>> {
    let (_, data) = extensions(ext).find(|&(t, _)| t == EXT_SERVER_NAME)?;
    let Ok((_, TlsExtension::SNI(names))) = parse_tls_extension_sni_content(data) else {
        return None;
    };
    let &(kind, name) = names.first()?;
    (kind == SNIType::HostName && (1..=255).contains(&name.len())).then(|| name.to_vec())
}

/// Whether a ServerHello's supported_versions extension selects TLS 1.3.
fn selects_tls13(ext: &[u8]) -> bool {
    extensions(ext).any(|(t, data)| t == EXT_SUPPORTED_VERSIONS && data == TLS13.to_be_bytes())
}

/// The subject and issuer of the first certificate of a Certificate message body
/// (`certificate_list` length, then the first certificate's length and DER).
fn first_cert_names(body: &[u8]) -> Option<(String, String)> {
    let [a, b, c] = *body.get(3..)?.first_chunk::<3>()?;
    let len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
    let der = body.get(6..6 + len)?;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some((cert.subject().to_string(), cert.issuer().to_string()))
}

#[cfg(test)]
mod tests;
