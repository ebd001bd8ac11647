//! Manifests: reading YAML files, checking them, and producing the trusted model.
//!
//! `load::read_sources` finds and reads the files, `yaml` parses them keeping positions, `raw`
//! is the format, `validate` applies every rule and builds `crate::model::Model`. All problems
//! of a run are collected and reported together, each with its file, line, object and field.

pub mod edit;
pub mod export;
pub(crate) mod load;
pub(crate) mod paths;
pub mod raw;
pub mod reach;
pub(crate) mod rules;
pub mod validate;
pub(crate) mod yaml;

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

pub use load::{Source, read_sources};
pub(crate) use validate::is_name;
pub use validate::validate;

/// One thing wrong in the manifests, located as precisely as we can.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The manifest file as the user named it (`<stdin>` for `-`).
    pub file: PathBuf,
    /// 1-based; 0 when the problem is with the file as a whole.
    pub line: usize,
    /// 1-based, in characters; 0 with `line` 0.
    pub column: usize,
    /// `Member/reviewer`, when the problem is inside an object.
    pub object: Option<String>,
    /// `spec.resources.memory`, when the problem is with one field.
    pub field: Option<String>,
    /// What is wrong, said for the person who wrote the manifest.
    pub message: String,
    /// The text of line `line`, when at hand: shown under the message with a caret, as rustc
    /// does. Not part of the problem's data (JSON output, equality of tests' expectations).
    #[serde(skip)]
    pub source_line: Option<String>,
}

/// Longest source line shown under a problem; a longer one (minified YAML) is left out.
const MAX_SNIPPET_LINE: usize = 300;

impl Problem {
    /// Takes the problem's line from `text`, the file it is in.
    pub(crate) fn with_source(mut self, text: &str) -> Problem {
        if self.line > 0 {
            self.source_line = text
                .lines()
                .nth(self.line - 1)
                .filter(|l| l.len() <= MAX_SNIPPET_LINE)
                .map(str::to_string);
        }
        self
    }

    /// The line under the problem with a caret under the place, rustc-style:
    ///
    /// ```text
    ///    |
    /// 19 |     memory: 512Q
    ///    |             ^^^^
    /// ```
    /// `None` when the line is not at hand.
    pub fn snippet(&self) -> Option<String> {
        use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};
        let line = self.source_line.as_deref()?;
        // The column counts characters; the span is in bytes.
        let start = line
            .char_indices()
            .nth(self.column.saturating_sub(1))
            .map_or(line.len(), |(i, _)| i);
        let end = start + token_len(&line[start..]);
        let report = [Group::with_level(Level::ERROR).element(
            Snippet::source(line)
                .line_start(self.line)
                .annotation(AnnotationKind::Primary.span(start..end)),
        )];
        Some(Renderer::plain().render(&report))
    }
}

/// Bytes of the YAML token at the start of `s`: a quoted string with its quotes, or a plain
/// word up to a space, a flow indicator, or a `: ` that ends a key.
fn token_len(s: &str) -> usize {
    let mut chars = s.char_indices().peekable();
    match chars.peek() {
        Some(&(_, q @ ('"' | '\''))) => {
            chars.next();
            let mut escaped = false;
            while let Some((i, c)) = chars.next() {
                match c {
                    // `\"` inside double quotes, `''` inside single quotes.
                    '\\' if q == '"' && !escaped => escaped = true,
                    '\'' if q == '\'' && chars.peek().is_some_and(|&(_, n)| n == '\'') => {
                        chars.next();
                    }
                    c if c == q && !escaped => return i + 1,
                    _ => escaped = false,
                }
            }
            s.len()
        }
        _ => {
            while let Some((i, c)) = chars.next() {
                let key_end = c == ':' && chars.peek().is_none_or(|(_, n)| n.is_whitespace());
                if c.is_whitespace() || matches!(c, ',' | '[' | ']' | '{' | '}') || key_end {
                    return i;
                }
            }
            s.len()
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if let Some(o) = &self.object {
            write!(f, ": {o}")?;
        }
        if let Some(field) = self.field.as_deref().filter(|s| !s.is_empty()) {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Why a set of manifests was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Every problem found, in file order.
    #[error("{}", render(.0))]
    Invalid(Vec<Problem>),
    /// The paths named no manifest at all.
    #[error("no manifests (*.yaml, *.yml) found in {}", .0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    Empty(Vec<PathBuf>),
}

fn render(problems: &[Problem]) -> String {
    let mut s = String::new();
    for p in problems {
        s.push_str(&p.to_string());
        s.push('\n');
        if let Some(snippet) = p.snippet() {
            s.push_str(&snippet);
            s.push('\n');
        }
    }
    let n = problems.len();
    s.push_str(&format!(
        "{n} problem{} found; nothing was changed",
        if n == 1 { "" } else { "s" }
    ));
    s
}

/// The closest of `candidates` to `word`, when it is close enough to be a likely typo.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| {
            (
                strsim::jaro_winkler(&word.to_lowercase(), &c.to_lowercase()),
                c,
            )
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::token_len;

    #[test]
    fn the_caret_spans_one_yaml_token() {
        for (s, token) in [
            ("parent: lead", "parent"),
            ("512Q", "512Q"),
            ("a, b]", "a"),
            ("host:443]", "host:443"),
            (r#""say \"hi\"": x"#, r#""say \"hi\"""#),
            ("'it''s' x", "'it''s'"),
            ("\"unterminated", "\"unterminated"),
            ("", ""),
        ] {
            assert_eq!(&s[..token_len(s)], token, "{s}");
        }
    }
}
