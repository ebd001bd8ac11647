//! Label selectors (`-l`), as kubectl's equality-based ones: `key=value`, `key!=value`, and a
//! bare `key` (has the label), comma-separated, all of which must hold.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Is(String, String),
    IsNot(String, String),
    Has(String),
}

/// A parsed `-l` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector(Vec<Term>);

impl Selector {
    /// Parses `key=value,key!=value,key`; the error says what a part must look like.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim) {
            let term = if let Some((k, v)) = part.split_once("!=") {
                Term::IsNot(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Term::Is(k.trim().into(), v.trim().into())
            } else {
                Term::Has(part.into())
            };
            let key = match &term {
                Term::Is(k, _) | Term::IsNot(k, _) | Term::Has(k) => k,
            };
            if key.is_empty() {
                return Err(format!(
                    "`{text}`: each part is key=value, key!=value or key (comma-separated)"
                ));
            }
            terms.push(term);
        }
        Ok(Selector(terms))
    }

    /// Whether `labels` satisfy every term (`key!=value` holds when `key` is absent).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|t| match t {
            Term::Is(k, v) => labels.get(k) == Some(v),
            Term::IsNot(k, v) => labels.get(k) != Some(v),
            Term::Has(k) => labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_inequality_and_existence_all_must_hold() {
        let l = BTreeMap::from([("role".to_string(), "review".to_string())]);
        let m = |s: &str| Selector::parse(s).unwrap().matches(&l);
        assert!(m("role=review"));
        assert!(m("role==review"));
        assert!(!m("role=write"));
        assert!(m("role!=write"));
        assert!(!m("role!=review"));
        assert!(m("role"));
        assert!(!m("tier"));
        assert!(m("tier!=x"), "an absent label is not x");
        assert!(!m("role=review,tier"));
        assert!(Selector::parse("=x").is_err());
        assert!(Selector::parse("a,,b").is_err());
    }
}
