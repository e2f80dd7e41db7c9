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
    pub(super) errors: Vec<ConfigError>,
    pub(super) warnings: Vec<ConfigError>,
}

impl Ctx<'_> {
    pub(super) fn at(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = span.map(|s| line_col(self.text, s.start)).unwrap_or((0, 0));
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

/// 1-based line and column of a byte offset.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
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
    let sub = guess_field(&msg, cx.text, e.span());
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
        guess_field(&msg, cx.text, e.span())
    } else {
        field.to_string()
    };
    cx.at(e.span(), field, msg)
}

/// The key an error is about: serde names it in "unknown field `x`" and "missing field
/// `x`"; otherwise it is the key on the line the error points at (`key = value`).
fn guess_field(msg: &str, text: &str, span: Option<Range<usize>>) -> String {
    if (msg.starts_with("unknown field") || msg.starts_with("missing field"))
        && let Some(name) = msg.split('`').nth(1)
    {
        return name.to_string();
    }
    let line = span.and_then(|s| {
        let start = text[..s.start.min(text.len())]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        text[start..].lines().next()
    });
    match line.and_then(|l| l.split_once('=')) {
        Some((key, _)) if !key.trim().starts_with('[') => key.trim().trim_matches('"').to_string(),
        _ => "(syntax)".into(),
    }
}

/// The byte range of 1-based line `line` (for errors known only by line).
pub(super) fn line_span(text: &str, line: usize) -> Range<usize> {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    start..start
}
