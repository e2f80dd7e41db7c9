//! One HTTP transaction (a request and its response) and the buffers the rules see.

use super::head::{Headers, StartLine};
use super::uri::NormUri;
use crate::applayer::buffer::Buffer;
use crate::applayer::{Dir, Progress, Transaction};

/// One direction of a transaction: the start line, the head, the body.
#[derive(Debug, Default)]
pub(super) struct Message {
    /// The start line without its line end (`http.request_line` / `http.response_line`).
    pub(super) line: Vec<u8>,
    /// The pieces of `line`.
    pub(super) parts: StartLine,
    /// The raw header block with its empty line, then the raw trailer block if the body was
    /// chunked (`http.header.raw`, as Suricata appends trailers).
    pub(super) raw: Vec<u8>,
    /// Whether the head is in (`raw` and `headers` are set).
    pub(super) has_head: bool,
    /// Normalized headers (with trailers).
    pub(super) headers: Headers,
    /// The body, de-chunked and decoded, up to the body limit.
    pub(super) body: Vec<u8>,
    /// Whether the body passed the limit (and was cut).
    pub(super) truncated: bool,
}

impl Message {
    /// A piece of the start line.
    fn part(&self, i: usize) -> Option<&[u8]> {
        let p = &self.parts;
        let r = [&p.first, &p.second, &p.third].get(i).copied()?.as_ref()?;
        self.line.get(r.start as usize..r.end as usize)
    }

    /// Bytes held on the heap.
    pub(super) fn heap_size(&self) -> usize {
        self.line.capacity() + self.raw.capacity() + self.headers.heap_size() + self.body.capacity()
    }
}

/// One HTTP transaction: a request and the response paired with it (in order, so
/// pipelined requests pair with their responses). A response without a request (more
/// responses than requests) gets a transaction whose request side is empty and complete.
#[derive(Debug, Default)]
pub(crate) struct HttpTx {
    pub(super) id: u64,
    pub(super) progress: [Progress; 2],
    pub(super) req: Message,
    pub(super) resp: Message,
    /// The normalized URI and the URI's host (request line in).
    pub(super) uri: Option<NormUri>,
    /// `http.host`: the URI's host, else the Host header's host part, lowercased.
    pub(super) host: Option<Vec<u8>>,
    /// The request has no protocol (HTTP/0.9: no headers, the response has no head).
    pub(super) http09: bool,
    /// The files of a multipart request body (ranges into it), set when it completes.
    pub(super) files: Option<Vec<std::ops::Range<u32>>>,
}

impl HttpTx {
    /// The request method, for the response side's framing decisions.
    pub(super) fn method(&self) -> Option<&[u8]> {
        self.req.part(0)
    }

    /// Bytes held on the heap (for the state's memory accounting and tests).
    pub(super) fn heap_size(&self) -> usize {
        self.req.heap_size()
            + self.resp.heap_size()
            + self.uri.as_ref().map_or(0, |u| {
                u.uri.capacity() + u.host.as_ref().map_or(0, Vec::capacity)
            })
            + self.host.as_ref().map_or(0, Vec::capacity)
    }

    /// `file.data` to the server, as Suricata 8: each file of a multipart body, else the
    /// body of a POST or PUT (other methods carry no file).
    fn request_files(&self) -> impl Iterator<Item = &[u8]> {
        let body = self.req.body.as_slice();
        let whole = self.files.is_none()
            && matches!(self.method(), Some(b"POST" | b"PUT"))
            && !body.is_empty();
        let parts = self.files.iter().flatten().filter_map(move |r| {
            body.get(r.start as usize..r.end as usize)
                .filter(|f| !f.is_empty())
        });
        whole.then_some(body).into_iter().chain(parts)
    }

    /// The first instance of buffer `b` seen in direction `dir`, if any (only `file.data`
    /// to the server can have more, see [`Transaction::for_each`]).
    pub(crate) fn buffer(&self, b: Buffer, dir: Dir) -> Option<&[u8]> {
        if b == Buffer::FileData && dir == Dir::ToServer {
            return self.request_files().next();
        }
        if let Some(want) = b.info().and_then(|i| i.dir)
            && want != dir
        {
            return None;
        }
        let m = match dir {
            Dir::ToServer => &self.req,
            Dir::ToClient => &self.resp,
        };
        let hdr = |name: &[u8]| m.headers.value(name);
        let nonempty = |v: &'_ [u8]| !v.is_empty();
        match b {
            Buffer::HttpMethod => m.part(0),
            Buffer::HttpUri => self.uri.as_ref().map(|u| u.uri.as_slice()),
            Buffer::HttpUriRaw => m.part(1),
            Buffer::HttpProtocol => match dir {
                Dir::ToServer => m.part(2),
                Dir::ToClient => m.part(0),
            },
            Buffer::HttpRequestLine | Buffer::HttpResponseLine => {
                Some(m.line.as_slice()).filter(|_| m.parts.first.is_some())
            }
            Buffer::HttpHost => self.host.as_deref(),
            Buffer::HttpHostRaw => match self.uri.as_ref().and_then(|u| u.host.as_deref()) {
                Some(h) => Some(h),
                None => hdr(b"host"),
            },
            Buffer::HttpUserAgent => hdr(b"user-agent"),
            Buffer::HttpCookie => match dir {
                Dir::ToServer => hdr(b"cookie"),
                Dir::ToClient => hdr(b"set-cookie"),
            },
            Buffer::HttpHeader => m.headers.header(),
            Buffer::HttpHeaderRaw => Some(m.raw.as_slice()).filter(|_| m.has_head),
            Buffer::HttpHeaderNames => m.headers.names(),
            Buffer::HttpContentType => hdr(b"content-type"),
            Buffer::HttpContentLen => hdr(b"content-length"),
            Buffer::HttpReferer => hdr(b"referer"),
            Buffer::HttpAccept => hdr(b"accept"),
            Buffer::HttpAcceptEnc => hdr(b"accept-encoding"),
            Buffer::HttpAcceptLang => hdr(b"accept-language"),
            Buffer::HttpConnection => hdr(b"connection"),
            Buffer::HttpServer => hdr(b"server"),
            Buffer::HttpLocation => hdr(b"location"),
            Buffer::HttpStatCode => m.part(1),
            Buffer::HttpStatMsg => m.part(2),
            Buffer::HttpRequestBody | Buffer::HttpResponseBody | Buffer::FileData => {
                Some(m.body.as_slice()).filter(|v| nonempty(v))
            }
            _ => None,
        }
    }
}

impl Transaction for HttpTx {
    fn id(&self) -> u64 {
        self.id
    }

    fn progress(&self, dir: Dir) -> Progress {
        self.progress.get(dir.index()).copied().unwrap_or_default()
    }

    fn for_each(&self, b: Buffer, dir: Dir, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        if b == Buffer::FileData && dir == Dir::ToServer {
            return self.request_files().any(f);
        }
        self.buffer(b, dir).is_some_and(f)
    }
}
