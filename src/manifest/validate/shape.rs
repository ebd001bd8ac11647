//! The first stage: each document read into an object of its kind, or every way it is
//! misshapen. Later stages see only the objects read here; `Broken` names the others.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;

use super::{Broken, Kind, Parsed, Spec, check_dns_label};
use crate::manifest::raw::{self, API_VERSION};
use crate::manifest::yaml::{self, Document};
use crate::manifest::{Problem, Source, did_you_mean};

/// Every object of `sources` that could be read, in reading order; the others are reported,
/// and named in `broken`.
pub(super) fn read_objects<'a>(
    sources: &'a [Source],
    problems: &mut Vec<Problem>,
    broken: &mut Broken,
) -> Vec<Parsed<'a>> {
    let mut objects = Vec::new();
    for src in sources {
        match yaml::parse(&src.text) {
            Ok(docs) => {
                for doc in docs {
                    if let Some(p) = parse_object(src, doc, problems, broken) {
                        objects.push(p);
                    }
                }
            }
            Err(e) => problems.push(Problem {
                file: src.path.clone(),
                line: e.pos.line,
                column: e.pos.column,
                object: None,
                field: None,
                message: e.kind.to_string(),
                source_line: None,
            }),
        }
    }
    objects
}

fn parse_object<'a>(
    src: &'a Source,
    doc: Document,
    problems: &mut Vec<Problem>,
    broken: &mut Broken,
) -> Option<Parsed<'a>> {
    let kind = match kind_of(&doc) {
        Ok(kind) => kind,
        Err((field, message)) => {
            problems.push(problem_at(src, &doc, field, None, message));
            return None;
        }
    };
    let shown_name = doc
        .value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    let object = Some(format!("{kind}/{shown_name}"));
    let before = problems.len();
    let mut report = |errs: Vec<(String, String)>| {
        for (field, msg) in errs {
            problems.push(problem_at(src, &doc, &field, object.clone(), msg));
        }
    };
    let Some((api_version, metadata, spec)) = typed_object(kind, &doc.value, &mut report) else {
        broken.insert((kind, shown_name));
        return None;
    };
    // Read without the fields that did not fit (reported above): the later stages judge the
    // rest of it, so that one run says every problem. It counts as broken still, so that
    // what refers to it is not refused for its sake.
    let shape_problems = problems.len();
    if shape_problems > before {
        broken.insert((kind, shown_name.clone()));
    }
    if api_version != API_VERSION {
        problems.push(problem_at(
            src,
            &doc,
            "apiVersion",
            object.clone(),
            format!("apiVersion must be `{API_VERSION}`, not `{api_version}`"),
        ));
    }
    if let Err(e) = check_dns_label(&metadata.name) {
        problems.push(problem_at(src, &doc, "metadata.name", object.clone(), e));
    }
    // A wrong apiVersion or name: nothing more of it is judged (its name makes paths).
    if problems.len() > shape_problems {
        broken.insert((kind, shown_name));
        return None;
    }
    Some(Parsed {
        src,
        doc,
        name: metadata.name,
        labels: metadata.labels,
        spec,
    })
}

/// A problem at `field` of `doc`, or at the document itself when `field` is empty.
fn problem_at(
    src: &Source,
    doc: &Document,
    field: &str,
    object: Option<String>,
    message: String,
) -> Problem {
    let pos = doc.pos_of(field);
    Problem {
        file: src.path.clone(),
        line: pos.line,
        column: pos.column,
        object,
        field: (!field.is_empty()).then(|| field.to_string()),
        message,
        source_line: None,
    }
}

/// What the document's `kind` says it is; else the field to point at and why not.
fn kind_of(doc: &Document) -> Result<Kind, (&'static str, String)> {
    if !doc.value.is_object() {
        return Err((
            "",
            "a manifest must be a mapping with apiVersion, kind, metadata and spec".into(),
        ));
    }
    match doc.value.get("kind") {
        None => Err((
            "",
            format!("missing field `kind` (one of {})", Kind::names().join(", ")),
        )),
        Some(Value::String(k)) => k.parse::<Kind>().map_err(|e| ("kind", e)),
        Some(other) => Err(("kind", format!("`kind` must be a string, not {other}"))),
    }
}

/// The object as its kind's format: apiVersion, metadata and spec; `None` when it does not fit
/// (`report` has had every error then).
fn typed_object(
    kind: Kind,
    value: &Value,
    report: &mut dyn FnMut(Vec<(String, String)>),
) -> Option<(String, raw::Metadata, Spec)> {
    match kind {
        Kind::Team => typed(value, report)
            .map(|o: raw::Object<raw::TeamSpec>| (o.api_version, o.metadata, Spec::Team(o.spec))),
        Kind::MainSession => typed(value, report).map(|o: raw::Object<raw::MainSessionSpec>| {
            (o.api_version, o.metadata, Spec::MainSession(o.spec))
        }),
        Kind::AccessGrant => typed(value, report).map(|o: raw::Object<raw::AccessGrantSpec>| {
            (o.api_version, o.metadata, Spec::AccessGrant(o.spec))
        }),
        Kind::Member => typed(value, report).map(|o: raw::Object<raw::MemberSpec>| {
            (o.api_version, o.metadata, Spec::Member(o.spec))
        }),
    }
}

/// Deserializes `value` as `T`, reporting every shape error rather than the first: each bad
/// field is recorded and taken out, and parsing runs again on what is left. What is left is
/// returned when it fits (every error reported); `None` when nothing fits.
fn typed<T: DeserializeOwned>(
    value: &Value,
    report: &mut dyn FnMut(Vec<(String, String)>),
) -> Option<T> {
    let mut v = value.clone();
    let mut errs: Vec<(String, String)> = Vec::new();
    // Array elements already removed, by the array's original path, so later paths still name
    // the element as the user numbered it.
    let mut removed: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    // Each round deserializes the whole object again: bound rounds times size, so that a huge
    // object with many errors cannot take seconds. Objects of ordinary size get all 100 rounds.
    let rounds = (SHAPE_WORK / count_values(value)).clamp(1, 100);
    for _ in 0..rounds {
        match serde_path_to_error::deserialize::<_, T>(&v) {
            Ok(t) => {
                report(errs);
                return Some(t);
            }
            Err(e) => {
                let segments: Vec<Segment> = e.path().iter().cloned().collect();
                let msg = e.inner().to_string();
                let (segments, msg) = match unknown_field(&msg) {
                    // serde reports an unknown field at its parent; point at the field itself.
                    Some((field, known)) => {
                        let hint = did_you_mean(&field, known.iter().map(String::as_str))
                            .map(|m| format!(" (did you mean `{m}`?)"))
                            .unwrap_or_else(|| format!("; known fields: {}", known.join(", ")));
                        let mut s = segments;
                        if !matches!(s.last(), Some(Segment::Map { key }) if *key == field) {
                            s.push(Segment::Map { key: field.clone() });
                        }
                        (s, format!("unknown field `{field}`{hint}"))
                    }
                    None => (segments, plain_words(&msg)),
                };
                let original = original_path(&segments, &removed);
                let is_consequence = msg.starts_with("missing field")
                    && errs
                        .iter()
                        .any(|(p, _)| p.starts_with(&original) || original.starts_with(p.as_str()));
                if !is_consequence {
                    errs.push((original.clone(), msg));
                }
                if !remove_at(&mut v, &segments, &mut removed) {
                    break;
                }
            }
        }
    }
    report(errs);
    None
}

/// Values one object's shape checks may visit in all (see `typed`).
const SHAPE_WORK: usize = 200_000;

/// Values in `v`, itself included. (Nesting is bounded by the YAML reader.)
fn count_values(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count_values).sum(),
        Value::Object(m) => m.values().map(count_values).sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => 0,
    }
}

/// serde names Rust types; users know YAML's words.
fn plain_words(msg: &str) -> String {
    msg.replace("expected u32", "expected a whole number")
        .replace("expected u64", "expected a whole number")
        .replace("expected a sequence", "expected a list")
        .replace("expected a map", "expected a mapping")
}

/// `unknown field `x`, expected one of `a`, `b`` → ("x", ["a", "b"]).
fn unknown_field(msg: &str) -> Option<(String, Vec<String>)> {
    let rest = msg.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let known = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    Some((field.to_string(), known))
}

fn path_string(segments: &[Segment]) -> String {
    let mut s = String::new();
    for seg in segments {
        match seg {
            Segment::Seq { index } => s.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    s
}

/// Maps a path in the pruned value back to the path the user wrote.
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "another crate's enum, which grows"
)]
fn original_path(segments: &[Segment], removed: &BTreeMap<String, Vec<usize>>) -> String {
    let mut fixed = Vec::new();
    for seg in segments {
        match seg {
            Segment::Seq { index } => {
                let gone = removed
                    .get(&path_string(&fixed))
                    .cloned()
                    .unwrap_or_default();
                let mut orig = *index;
                for g in gone.iter().copied().collect::<BTreeSet<_>>() {
                    if g <= orig {
                        orig += 1;
                    }
                }
                fixed.push(Segment::Seq { index: orig });
            }
            // The schema crate's segments other than an index are kept as they are.
            other => fixed.push(other.clone()),
        }
    }
    path_string(&fixed)
}

/// Removes the value at `segments`; false when nothing could be removed (the error is at the
/// root, so parsing cannot go on).
fn remove_at(
    v: &mut Value,
    segments: &[Segment],
    removed: &mut BTreeMap<String, Vec<usize>>,
) -> bool {
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut cur = &mut *v;
    for seg in parents {
        cur = match (seg, cur) {
            (Segment::Map { key } | Segment::Enum { variant: key }, Value::Object(m)) => {
                match m.get_mut(key) {
                    Some(c) => c,
                    None => return false,
                }
            }
            (Segment::Seq { index }, Value::Array(a)) => match a.get_mut(*index) {
                Some(c) => c,
                None => return false,
            },
            _ => return false,
        };
    }
    match (last, cur) {
        (Segment::Map { key } | Segment::Enum { variant: key }, Value::Object(m)) => {
            m.remove(key).is_some()
        }
        (Segment::Seq { index }, Value::Array(a)) if *index < a.len() => {
            let orig = original_path(segments, removed);
            let array = original_path(parents, removed);
            let n: usize = orig
                .rsplit('[')
                .next()
                .and_then(|s| s.trim_end_matches(']').parse().ok())
                .unwrap_or(*index);
            a.remove(*index);
            removed.entry(array).or_default().push(n);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_message() {
        let (f, known) =
            unknown_field("unknown field `memroy`, expected one of `memory`, `pids`, `cpus`")
                .unwrap();
        assert_eq!(f, "memroy");
        assert_eq!(known, ["memory", "pids", "cpus"]);
        assert_eq!(
            unknown_field("unknown field `x`, expected `y`").unwrap().1,
            ["y"]
        );
    }
}
