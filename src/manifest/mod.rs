//! Manifests: reading YAML files, checking them, and producing the trusted model.
//!
//! `load::read_sources` finds and reads the files, `yaml` parses them keeping positions, `raw`
//! is the format, `validate` applies every rule and builds `crate::model::Desired`. All problems
//! of a run are collected and reported together, each with its file, line, object and field.

pub mod load;
pub mod paths;
pub mod quantity;
pub mod raw;
pub mod reach;
pub mod validate;
pub mod yaml;

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

pub use load::{Source, read_sources};
pub use validate::validate;

/// One thing wrong in the manifests, located as precisely as we can.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub file: PathBuf,
    /// 1-based; 0 when the problem is with the file as a whole.
    pub line: usize,
    pub column: usize,
    /// `Member/reviewer`, when the problem is inside an object.
    pub object: Option<String>,
    /// `spec.resources.memory`, when the problem is with one field.
    pub field: Option<String>,
    pub message: String,
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
    }
    let n = problems.len();
    s.push_str(&format!(
        "{n} problem{} found; nothing was changed",
        if n == 1 { "" } else { "s" }
    ));
    s
}

/// The closest of `candidates` to `word`, when it is close enough to be a likely typo.
pub fn did_you_mean<'a>(
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
