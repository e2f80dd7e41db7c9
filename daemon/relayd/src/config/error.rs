//! Errors with their place: the file, 1-based line and column, and the field path, and
//! the mapping of toml's errors (byte spans) to them.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One thing wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 if unknown).
    pub line: usize,
    /// 1-based column (0 if unknown).
    pub column: usize,
    /// The field, as a path (`queue[1].num`, `service.dump0.kind`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.field,
            self.message
        )
    }
}

/// All that is wrong with a configuration file (at least one error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

pub(super) struct Ctx<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
    /// Where `text`'s lines start, built once: every position an error or an entry
    /// records is looked up in it (a scan of the text per lookup made `relayd check`
    /// quadratic in the number of entries).
    pub(super) lines: LineIndex,
    pub(super) errors: Vec<ConfigError>,
    pub(super) warnings: Vec<ConfigError>,
}

impl<'a> Ctx<'a> {
    /// The context of checking `text`, read from `path`: no errors yet.
    pub(super) fn new(path: &'a Path, text: &'a str) -> Ctx<'a> {
        Ctx {
            path,
            text,
            lines: LineIndex::new(text),
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// 1-based line and column of byte `offset` of the text.
    pub(super) fn line_col(&self, offset: usize) -> (usize, usize) {
        self.lines.line_col(offset)
    }

    pub(super) fn at(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = span.map(|s| self.line_col(s.start)).unwrap_or((0, 0));
        ConfigError {
            file: self.path.to_path_buf(),
            line,
            column,
            field: field.into(),
            message: message.into(),
        }
    }

    pub(super) fn err(
        &mut self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        let e = self.at(span, field, message);
        self.errors.push(e);
    }

    /// Records a warning: valid, but probably not what is wanted.
    pub(super) fn warn(
        &mut self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        let w = self.at(span, field, message);
        self.warnings.push(w);
    }
}

/// The byte offsets at which the lines of a text start, so that the line and column of an
/// offset take a binary search instead of a scan of everything before it.
#[derive(Debug, Clone)]
pub(super) struct LineIndex {
    /// The start of every line, ascending; the first is 0.
    starts: Vec<usize>,
    /// The text's length: offsets past it count as at its end.
    len: usize,
}

#[cfg(test)]
thread_local! {
    /// How many times this thread scanned a whole text for its lines (the test of
    /// linearity counts them instead of timing a run).
    pub(super) static SCANS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl LineIndex {
    /// Indexes `text`: one pass over it.
    pub(super) fn new(text: &str) -> LineIndex {
        #[cfg(test)]
        SCANS.with(|s| s.set(s.get() + 1));
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex {
            starts,
            len: text.len(),
        }
    }

    /// 1-based line and column of byte `offset` (the column counts bytes, as toml's spans
    /// do); an offset past the end is at the end.
    pub(super) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.len);
        // The number of lines starting at or before `offset`: at least 1 (line 1 starts at 0).
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts.get(line.wrapping_sub(1)).copied().unwrap_or(0);
        (line, offset - start + 1)
    }

    /// The byte range (empty) at the start of 1-based line `line` (for errors known only
    /// by line); past the last line, the end of the text.
    pub(super) fn line_span(&self, line: usize) -> Range<usize> {
        let start = self
            .starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(self.len);
        start..start
    }
}

/// Records the error of deserializing the options of section `field` (`service.NAME`):
/// the key it is about appended to `field` where it can be told, at the error's position
/// or else at the section's `body` span.
pub(super) fn section_error(
    cx: &mut Ctx<'_>,
    field: &str,
    e: &toml::de::Error,
    body: Range<usize>,
) {
    let msg = e.message().trim().to_string();
    let sub = guess_field(&msg, cx, e.span());
    let f = if sub == "(syntax)" {
        field.to_string()
    } else {
        format!("{field}.{sub}")
    };
    cx.err(e.span().or(Some(body)), f, msg);
}

/// Turns a toml error into ours, keeping its position; `field` names what was being read.
pub(super) fn toml_error(cx: &Ctx<'_>, e: &toml::de::Error, field: &str) -> ConfigError {
    let msg = e.message().trim().to_string();
    let field = if field.is_empty() {
        guess_field(&msg, cx, e.span())
    } else {
        field.to_string()
    };
    cx.at(e.span(), field, msg)
}

/// The key an error is about: serde names it in "unknown field `x`" and "missing field
/// `x`"; otherwise it is the key on the line the error points at (`key = value`).
fn guess_field(msg: &str, cx: &Ctx<'_>, span: Option<Range<usize>>) -> String {
    if (msg.starts_with("unknown field") || msg.starts_with("missing field"))
        && let Some(name) = msg.split('`').nth(1)
    {
        return name.to_string();
    }
    let line = span.and_then(|s| {
        let start = cx.lines.line_span(cx.line_col(s.start).0).start;
        cx.text.get(start..)?.lines().next()
    });
    match line.and_then(|l| l.split_once('=')) {
        Some((key, _)) if !key.trim().starts_with('[') => key.trim().trim_matches('"').to_string(),
        _ => "(syntax)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_util::parsed;

    /// What `line_col` was before the index: a scan of everything before the offset.
    fn scanned(text: &str, offset: usize) -> (usize, usize) {
        let before = &text[..offset.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before
            .rfind('\n')
            .map_or(before.len(), |i| before.len() - i - 1)
            + 1;
        (line, col)
    }

    #[test]
    fn the_index_places_every_offset_as_the_scan_did() {
        for text in ["", "a", "\n", "ab\n\ncd\n", "x = 1\n[q]\ny = 2", "\n\nz"] {
            let ix = LineIndex::new(text);
            for offset in 0..=text.len() + 2 {
                assert_eq!(
                    ix.line_col(offset),
                    scanned(text, offset),
                    "{text:?} at {offset}"
                );
            }
            for line in 0..=text.lines().count() + 2 {
                let old: usize = text
                    .split_inclusive('\n')
                    .take(line.saturating_sub(1))
                    .map(str::len)
                    .sum();
                assert_eq!(ix.line_span(line), old..old, "{text:?} line {line}");
            }
        }
    }

    /// `relayd check` of a file with 32,000 queue entries scans the text for its lines
    /// once, not once per entry (it took 17 s when it did), and still places each entry.
    #[test]
    fn a_large_file_is_scanned_for_lines_once() {
        let n = 32_000;
        let mut text = String::with_capacity(n * 60);
        for i in 0..n {
            text.push_str(&format!(
                "[[queue]]\nnum = {i}\nhook = \"forward\"\nservices = [\"accept\"]\n\n"
            ));
        }
        SCANS.with(|s| s.set(0));
        let c = parsed(&text);
        assert_eq!(SCANS.with(|s| s.get()), 1, "one scan for the whole file");
        assert_eq!(c.queues.len(), n);
        assert_eq!(
            c.queues[n - 1].line,
            5 * (n - 1) + 2,
            "the entry's `num` line"
        );
    }

    #[test]
    fn errors_keep_their_place() {
        let text = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n\n\
                    [[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n";
        let e = crate::config::test_util::errs(text);
        assert_eq!(
            e[0].to_string(),
            format!("t.toml:7:7: {}: {}", e[0].field, e[0].message),
            "{e:?}"
        );
    }
}
