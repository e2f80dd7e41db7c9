//! The files of a `multipart/form-data` request body, which Suricata's `file.data` sees to
//! the server (one instance per file), following Suricata's MIME parser for HTTP
//! (`rust/src/mime/mime.rs`): the boundary is the Content-Type's `boundary` parameter
//! (any media type, at most 255 bytes, backslashes dropped) after `--`; a part is a file
//! if its Content-Disposition has a non-empty `filename` parameter; its data runs from the
//! end of the part's headers to the CRLF before the next boundary line, or to the end of
//! the body when that is missing (a truncated upload). Parts are not decoded
//! (Content-Transfer-Encoding is ignored, as in Suricata).
//!
//! Works on the complete (de-chunked, decoded, limited) body; the result is ranges into
//! it, at most one per part.

use std::ops::Range;

/// The longest boundary Suricata accepts.
const MAX_BOUNDARY: usize = 255;

/// The `name=value` parameters after the first `;` of a header value, as Suricata's
/// `mime_parse_header_tokens`: values quoted (backslash escapes kept) or up to `;`.
fn params(value: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let start = memchr::memchr(b';', value).map_or(value.len(), |i| i + 1);
    let mut rest = value.get(start..).unwrap_or_default();
    std::iter::from_fn(move || {
        let space = |c: &u8| matches!(c, b' ' | b'\t' | b'\r' | b'\n');
        let skip = rest.iter().take_while(|c| space(c)).count();
        rest = rest.get(skip..).unwrap_or_default();
        let eq = memchr::memchr(b'=', rest)?;
        let name = rest.get(..eq)?;
        let after = rest.get(eq + 1..)?;
        let (val, tail) = if let Some(q) = after.strip_prefix(b"\"") {
            let mut esc = false;
            let end = q.iter().position(|&c| {
                let hit = c == b'"' && !esc;
                esc = c == b'\\' && !esc;
                hit
            })?;
            (q.get(..end)?, q.get(end + 1..)?)
        } else {
            let end = memchr::memchr(b';', after).unwrap_or(after.len());
            let v = after.get(..end)?;
            let trimmed = v.iter().rposition(|c| !space(c)).map_or(0, |e| e + 1);
            (v.get(..trimmed)?, after.get(end..)?)
        };
        let skip = tail.iter().take_while(|c| space(c)).count();
        let tail = tail.get(skip..).unwrap_or_default();
        rest = tail.strip_prefix(b";").unwrap_or(tail);
        Some((name, val))
    })
}

/// The multipart boundary line prefix (`--` and the boundary) a Content-Type declares.
pub(super) fn boundary(content_type: &[u8]) -> Option<Vec<u8>> {
    let (_, v) = params(content_type).find(|(n, _)| *n == b"boundary")?;
    if v.len() > MAX_BOUNDARY {
        return None;
    }
    let mut b = b"--".to_vec();
    b.extend(v.iter().filter(|&&c| c != b'\\'));
    Some(b)
}

/// Whether a part's header line declares a file name.
fn has_filename(line: &[u8]) -> bool {
    let Some(colon) = memchr::memchr(b':', line) else {
        return false;
    };
    let name = line.get(..colon).unwrap_or_default();
    name.eq_ignore_ascii_case(b"content-disposition")
        && params(line.get(colon + 1..).unwrap_or_default())
            .any(|(n, v)| (n == b"filename" || n == b"filename*0") && !v.is_empty())
}

/// `r` as a `u32` range (bodies are bounded well below 4 GiB).
fn r32(r: Range<usize>) -> Range<u32> {
    let c = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    c(r.start)..c(r.end)
}

/// The files of `body`, split by `boundary` (from [`boundary`]).
pub(super) fn files(boundary: &[u8], body: &[u8]) -> Vec<Range<u32>> {
    let mut files = Vec::new();
    let mut end_marker = b"\r\n".to_vec();
    end_marker.extend_from_slice(boundary);
    let finder = memchr::memmem::Finder::new(&end_marker);
    let mut pos = 0;
    'parts: while pos < body.len() {
        // Start: skip lines up to one starting with the boundary.
        let rest = body.get(pos..).unwrap_or_default();
        let Some(lf) = memchr::memchr(b'\n', rest) else {
            break;
        };
        let is_boundary = rest.starts_with(boundary);
        pos += lf + 1;
        if !is_boundary {
            continue;
        }
        // The part's headers, up to an empty line.
        let mut file = false;
        loop {
            let rest = body.get(pos..).unwrap_or_default();
            let Some(lf) = memchr::memchr(b'\n', rest) else {
                break 'parts;
            };
            let line = rest.get(..lf).unwrap_or_default();
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            pos += lf + 1;
            if line.is_empty() {
                break;
            }
            file |= has_filename(line);
        }
        // The data, up to CRLF and the next boundary.
        let rest = body.get(pos..).unwrap_or_default();
        let (len, next) = if rest.starts_with(boundary) {
            (0, pos)
        } else {
            match finder.find(rest) {
                Some(e) => (e, pos + e + 2),
                None => (rest.len(), body.len()),
            }
        };
        if file {
            files.push(r32(pos..pos + len));
        }
        pos = next;
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts<'a>(body: &'a [u8], ct: &[u8]) -> Vec<&'a [u8]> {
        let b = boundary(ct).expect("a boundary");
        files(&b, body)
            .into_iter()
            .map(|r| &body[r.start as usize..r.end as usize])
            .collect()
    }

    #[test]
    fn files_are_the_parts_with_a_filename() {
        let body = b"preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"hwid\"\r\n\r\n\
b6a20f7b\r\n--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.zip\"\r\n\
Content-Type: application/zip\r\n\r\nPK\x03\x04zip\r\nbytes\r\n--XyZ\r\n\
Content-Disposition: form-data; name=\"g\"; filename=\"\"\r\n\r\nnot a file\r\n--XyZ\r\n\
content-disposition: attachment; filename=b.txt\r\n\r\n\r\n--XyZ--\r\n";
        let ct = b"multipart/form-data; boundary=XyZ";
        assert_eq!(texts(body, ct), [&b"PK\x03\x04zip\r\nbytes"[..], b""]);
    }

    #[test]
    fn a_missing_closing_boundary_runs_to_the_end() {
        let body = b"--b\r\nContent-Disposition: form-data; filename=\"x\"\r\n\r\ntruncated up";
        assert_eq!(
            texts(body, b"multipart/form-data; boundary=\"b\""),
            [&b"truncated up"[..]]
        );
    }

    #[test]
    fn boundaries_come_from_the_parameter() {
        assert_eq!(
            boundary(b"multipart/form-data; boundary=----abc").as_deref(),
            Some(&b"------abc"[..])
        );
        assert_eq!(
            boundary(b"multipart/form-data;boundary=\"q\\\"x\"; charset=utf8").as_deref(),
            Some(&b"--q\"x"[..])
        );
        assert_eq!(boundary(b"text/plain"), None);
        assert_eq!(boundary(b"multipart/form-data; boundary"), None);
        let long = [b'a'; 300];
        let mut ct = b"multipart/form-data; boundary=".to_vec();
        ct.extend_from_slice(&long);
        assert_eq!(boundary(&ct), None);
    }
}
