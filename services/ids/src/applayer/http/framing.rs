//! Message bodies on the wire: how a body ends (RFC 9112 section 6.3 as libhtp applies
//! it), reading it by Content-Length, chunks (with trailers) or until close, and the end
//! of a message.

use super::body::{self, Chunk, Framing, trim_capacity};
use super::conn::{BlankScan, Phase, chomp, msg_mut, tx_mut};
use super::head::{self, Headers};
use super::{HttpError, HttpLimits, HttpState, multipart};
use crate::applayer::Progress;

/// The longest chunk-size line read (libhtp's field limit is 18000).
const MAX_CHUNK_LINE: usize = 8 * 1024;

/// Whether a chunk-size line not yet ended may still be one: after any of libhtp's chunk
/// control bytes (CR, LF, space, tab, VT, FF) comes nothing yet or a hex digit.
fn chunk_size_start(line: &[u8]) -> bool {
    line.iter()
        .find(|c| !matches!(c, b'\r' | b'\n' | b' ' | b'\t' | 0x0b | 0x0c))
        .is_none_or(u8::is_ascii_hexdigit)
}

impl HttpState {
    /// How the body of direction `d` of transaction `id` ends (`None`: no body). Also
    /// switches the flow to ignoring everything after a 101 or an accepted `CONNECT`.
    pub(super) fn framing(
        &mut self,
        d: usize,
        id: Option<u64>,
    ) -> Result<Option<Framing>, HttpError> {
        let Some(t) = tx_mut(&mut self.txs, id) else {
            return Ok(None);
        };
        let m = if d == 0 { &t.req } else { &t.resp };
        let te = m.headers.value(b"transfer-encoding");
        let chunked = te.is_some_and(|v| {
            // libhtp's `index_of_nocase_nozero`: NUL bytes in the value are skipped.
            let v: Vec<u8> = v
                .iter()
                .filter(|&&c| c != 0)
                .map(u8::to_ascii_lowercase)
                .collect();
            v.windows(7).any(|w| w == b"chunked")
        });
        let cl = m.headers.value(b"content-length");
        if d == 0 {
            return Ok(if chunked {
                Some(Framing::Chunked(Chunk::Size))
            } else if te.is_some() {
                None
            } else {
                cl.and_then(body::content_length)
                    .filter(|&n| n > 0)
                    .map(Framing::Length)
            });
        }
        let status = m
            .parts
            .second
            .as_ref()
            .and_then(|r| m.line.get(r.start as usize..r.end as usize))
            .and_then(head::status_number);
        let method = t.method();
        // libhtp: a 101 or 1xx, 204 or 304 with Transfer-Encoding or Content-Length has
        // a body after all ("Switching Protocol with Content-Length", "Unexpected
        // Response body"). A 304 keeps none here (as RFC 9110 says; Suricata 7.0.10 does
        // read one): conditional GETs often repeat the entity's Content-Length.
        let announced = te.is_some() || cl.is_some();
        let tunnel = (status == Some(101) && !announced)
            || (method == Some(b"CONNECT") && status.is_some_and(|s| (200..300).contains(&s)));
        if tunnel {
            for s in &mut self.sides {
                s.phase = Phase::Ignore;
            }
            return Ok(None);
        }
        if method == Some(b"HEAD")
            || status == Some(304)
            || (!announced && matches!(status, Some(100..=199 | 204)))
        {
            return Ok(None);
        }
        if chunked {
            return Ok(Some(Framing::Chunked(Chunk::Size)));
        }
        match cl {
            Some(v) => match body::content_length(v) {
                Some(0) => Ok(None),
                Some(n) => Ok(Some(Framing::Length(n))),
                None => Err(HttpError::BadContentLength),
            },
            None => Ok(Some(Framing::Close)),
        }
    }

    /// Body bytes of direction `d`, decoded onto its message's body.
    pub(super) fn write_body(&mut self, d: usize, bytes: &[u8]) {
        let side = &mut self.sides[d];
        let (Some(dec), Some(t)) = (side.decoder.as_mut(), tx_mut(&mut self.txs, side.tx)) else {
            return;
        };
        let m = msg_mut(t, d);
        if dec.write(bytes, &mut m.body) {
            m.truncated = true;
            trim_capacity(&mut m.body);
            t.progress[d] = Progress::Complete;
            side.decoder = None;
        }
    }

    /// The message of direction `d` is complete: the side goes back to idle (unless it
    /// ignores everything), remembering the transaction for bytes that follow.
    pub(super) fn complete(&mut self, d: usize) {
        let side = &mut self.sides[d];
        if let Some(t) = tx_mut(&mut self.txs, side.tx) {
            if let Some(dec) = side.decoder.as_mut() {
                dec.finish(&mut msg_mut(t, d).body);
                trim_capacity(&mut msg_mut(t, d).body);
            }
            t.progress[d] = Progress::Complete;
            side.prev = Some(t.id);
            if d == 0 && t.method() == Some(b"POST") {
                t.files = t
                    .req
                    .headers
                    .value(b"content-type")
                    .and_then(multipart::boundary)
                    .map(|b| multipart::files(&b, &t.req.body));
            }
        }
        side.reset();
    }

    /// Reads body bytes of direction `d` per its framing.
    pub(super) fn read_body(
        &mut self,
        d: usize,
        data: &[u8],
        limits: &HttpLimits,
    ) -> Result<usize, HttpError> {
        let side = &mut self.sides[d];
        let Some(framing) = side.framing else {
            self.complete(d);
            return Ok(0);
        };
        let take = |left: u64| data.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        match framing {
            Framing::Close => {
                self.write_body(d, data);
                Ok(data.len())
            }
            Framing::Length(left) => {
                let n = take(left);
                self.write_body(d, data.get(..n).unwrap_or_default());
                let left = left.saturating_sub(n as u64);
                self.sides[d].framing = Some(Framing::Length(left));
                if left == 0 {
                    self.complete(d);
                }
                Ok(n)
            }
            Framing::Chunked(Chunk::Data(left)) => {
                let n = take(left);
                self.write_body(d, data.get(..n).unwrap_or_default());
                let left = left.saturating_sub(n as u64);
                self.sides[d].framing = Some(Framing::Chunked(if left == 0 {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(left)
                }));
                Ok(n)
            }
            Framing::Chunked(Chunk::DataEnd) => {
                // libhtp skips anything up to the line end after the data.
                Ok(match memchr::memchr(b'\n', data) {
                    Some(p) => {
                        side.framing = Some(Framing::Chunked(Chunk::Size));
                        p + 1
                    }
                    None => data.len(),
                })
            }
            Framing::Chunked(Chunk::Size) => {
                let lf = memchr::memchr(b'\n', data);
                let used = lf.map_or(data.len(), |p| p + 1);
                side.buf
                    .extend_from_slice(data.get(..used).unwrap_or_default());
                let size = if d == 1 && !chunk_size_start(&side.buf) {
                    Err(())
                } else if lf.is_some() {
                    body::chunk_size(chomp(&side.buf))
                } else if side.buf.len() > MAX_CHUNK_LINE {
                    Err(())
                } else {
                    Ok(None)
                };
                if size.is_err() && d == 1 {
                    // libhtp: a response whose chunk-size line is not one is read as a
                    // body until close, starting with that line (how an HTTP/1.0 server
                    // that ignores `chunked` sends it).
                    let line = std::mem::take(&mut side.buf);
                    side.framing = Some(Framing::Close);
                    self.write_body(d, &line);
                    return Ok(used);
                }
                if side.buf.len() > MAX_CHUNK_LINE {
                    return Err(HttpError::BadChunk);
                }
                if lf.is_some() {
                    let size = size.map_err(|()| HttpError::BadChunk)?;
                    side.buf.clear();
                    side.framing = Some(Framing::Chunked(match size {
                        None => Chunk::Size,
                        Some(0) => {
                            side.scan = BlankScan::default();
                            side.rscan = head::ResScan::default();
                            Chunk::Trailer
                        }
                        Some(n) => Chunk::Data(n),
                    }));
                }
                Ok(used)
            }
            Framing::Chunked(Chunk::Trailer) => {
                let (used, end) = side.take_block(d, data);
                if side.buf.len() > limits.max_head {
                    return Err(HttpError::HeadTooLong(limits.max_head));
                }
                if end {
                    self.trailers_done(d)?;
                    self.complete(d);
                }
                Ok(used)
            }
        }
    }

    /// The trailer block of direction `d` is in `buf`: Suricata adds it to the raw header
    /// buffer and its fields to the headers.
    fn trailers_done(&mut self, d: usize) -> Result<(), HttpError> {
        let side = &mut self.sides[d];
        let Some(t) = tx_mut(&mut self.txs, side.tx) else {
            return Ok(());
        };
        let m = msg_mut(t, d);
        let head_len = m.raw.len();
        m.raw.extend_from_slice(&side.buf);
        side.buf.clear();
        let Some((hb, tb)) = m.raw.split_at_checked(head_len) else {
            return Ok(());
        };
        let cookie: &[u8] = if d == 0 { b"cookie" } else { b"set-cookie" };
        if d == 1 {
            let trailer = head::response_texts(tb, side.http11);
            if trailer.is_empty() {
                return Ok(());
            }
            let mut texts = head::response_texts(hb, side.http11);
            texts.extend(trailer);
            m.headers = Headers::build(&head::response_fields(&texts), cookie)
                .map_err(|()| HttpError::TooManyHeaders)?;
            return Ok(());
        }
        let trailer = head::parse_block(tb);
        if trailer.is_empty() {
            return Ok(());
        }
        let mut fields = head::parse_block(hb);
        fields.extend(trailer);
        m.headers = Headers::build(&fields, cookie).map_err(|()| HttpError::TooManyHeaders)?;
        Ok(())
    }
}
