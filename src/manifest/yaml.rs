//! YAML with positions. serde_yaml forgets where a value stood once parsed, and every error we
//! report must name the file, line and column of the field at fault, so documents are read here
//! into a small tree whose nodes keep their position, then turned into JSON for serde.

use std::collections::BTreeMap;

use serde_json::{Map, Number, Value};
use yaml_rust2::Yaml;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A position in a source file: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl From<Marker> for Pos {
    fn from(m: Marker) -> Self {
        Pos {
            line: m.line(),
            column: m.col() + 1,
        }
    }
}

/// A syntax error, with where it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub pos: Pos,
    pub message: String,
}

/// One YAML document: its JSON value and where each field path (`spec.read[1]`) stood.
#[derive(Debug, Clone)]
pub struct Document {
    pub value: Value,
    /// Position of the value at each path; "" is the document itself.
    pub values: BTreeMap<String, Pos>,
    /// Position of the key at each path (points at `name:` rather than its value).
    pub keys: BTreeMap<String, Pos>,
    pub start: Pos,
}

impl Document {
    /// Where to point for an error at `path`: the nearest enclosing path that was seen.
    pub fn pos_of(&self, path: &str) -> Pos {
        let mut p = path.to_string();
        loop {
            if let Some(pos) = self.keys.get(&p).or_else(|| self.values.get(&p)) {
                return *pos;
            }
            match p.rfind(['.', '[']) {
                Some(i) => p.truncate(i),
                None if !p.is_empty() => p.clear(),
                None => return self.start,
            }
        }
    }

    /// Where the value (not the key) at `path` stood.
    pub fn value_pos(&self, path: &str) -> Pos {
        self.values
            .get(path)
            .copied()
            .unwrap_or_else(|| self.pos_of(path))
    }
}

#[derive(Debug, Clone)]
enum Node {
    Scalar(String, TScalarStyle, Pos),
    Seq(Vec<Node>, Pos),
    Map(Vec<(Node, Node)>, Pos),
}

impl Node {
    fn pos(&self) -> Pos {
        match self {
            Node::Scalar(_, _, p) | Node::Seq(_, p) | Node::Map(_, p) => *p,
        }
    }
}

#[derive(Default)]
struct Builder {
    docs: Vec<(Node, Pos)>,
    stack: Vec<(Node, Option<usize>)>,
    anchors: BTreeMap<usize, Node>,
    doc_start: Pos,
    bad_alias: Option<Pos>,
}

impl Builder {
    fn push_value(&mut self, node: Node) {
        match self.stack.last_mut() {
            None => self.docs.push((node, self.doc_start)),
            Some((Node::Seq(items, _), _)) => items.push(node),
            Some((Node::Map(pairs, _), _)) => {
                // A map is built from alternating keys and values; a pending key has a null
                // placeholder value that we fill in.
                match pairs.last_mut() {
                    Some((_, v @ Node::Scalar(..))) if is_placeholder(v) => *v = node,
                    _ => pairs.push((node, placeholder())),
                }
            }
            Some((Node::Scalar(..), _)) => {}
        }
    }
}

const PLACEHOLDER: &str = "\u{0}placeholder";

fn placeholder() -> Node {
    Node::Scalar(PLACEHOLDER.into(), TScalarStyle::Plain, Pos::default())
}

fn is_placeholder(n: &Node) -> bool {
    matches!(n, Node::Scalar(s, _, _) if s == PLACEHOLDER)
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let pos = Pos::from(mark);
        match ev {
            Event::DocumentStart => self.doc_start = pos,
            Event::Scalar(s, style, anchor, _) => {
                let node = Node::Scalar(s, style, pos);
                if anchor > 0 {
                    self.anchors.insert(anchor, node.clone());
                }
                self.push_value(node);
            }
            Event::SequenceStart(anchor, _) => self
                .stack
                .push((Node::Seq(vec![], pos), Some(anchor).filter(|a| *a > 0))),
            Event::MappingStart(anchor, _) => self
                .stack
                .push((Node::Map(vec![], pos), Some(anchor).filter(|a| *a > 0))),
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((node, anchor)) = self.stack.pop() {
                    if let Some(a) = anchor {
                        self.anchors.insert(a, node.clone());
                    }
                    self.push_value(node);
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(node) => self.push_value(node),
                None => self.bad_alias = Some(pos),
            },
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

/// Parse every document of a YAML stream. Empty documents (a stray `---`) are skipped.
pub fn parse(text: &str) -> Result<Vec<Document>, SyntaxError> {
    let mut b = Builder::default();
    Parser::new_from_str(text)
        .load(&mut b, true)
        .map_err(|e| SyntaxError {
            pos: Pos::from(*e.marker()),
            message: e.info().to_string(),
        })?;
    if let Some(pos) = b.bad_alias {
        return Err(SyntaxError {
            pos,
            message: "alias to an unknown anchor".into(),
        });
    }
    let mut docs = Vec::new();
    for (node, start) in b.docs {
        let mut doc = Document {
            value: Value::Null,
            values: BTreeMap::new(),
            keys: BTreeMap::new(),
            start,
        };
        doc.value = to_json(&node, "", &mut doc)?;
        if !doc.value.is_null() {
            docs.push(doc);
        }
    }
    Ok(docs)
}

fn to_json(node: &Node, path: &str, doc: &mut Document) -> Result<Value, SyntaxError> {
    doc.values.insert(path.to_string(), node.pos());
    Ok(match node {
        Node::Scalar(s, style, _) => scalar(s, *style),
        Node::Seq(items, _) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, n)| to_json(n, &format!("{path}[{i}]"), doc))
                .collect::<Result<_, _>>()?,
        ),
        Node::Map(pairs, _) => {
            // A block mapping's own mark sits after its first key; the first key is where a
            // reader looks.
            if let Some((k, _)) = pairs.first() {
                doc.values.insert(path.to_string(), k.pos());
            }
            let mut map = Map::new();
            for (k, v) in pairs {
                let key = match k {
                    Node::Scalar(s, _, _) => s.clone(),
                    other => {
                        return Err(SyntaxError {
                            pos: other.pos(),
                            message: "a mapping key must be a plain string".into(),
                        });
                    }
                };
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                if map.contains_key(&key) {
                    return Err(SyntaxError {
                        pos: k.pos(),
                        message: format!("duplicate key `{key}`"),
                    });
                }
                doc.keys.insert(child.clone(), k.pos());
                let value = to_json(v, &child, doc)?;
                map.insert(key, value);
            }
            Value::Object(map)
        }
    })
}

/// YAML 1.2 core schema: only plain scalars are typed; quoted ones are always strings.
fn scalar(s: &str, style: TScalarStyle) -> Value {
    if style != TScalarStyle::Plain {
        return Value::String(s.to_string());
    }
    match Yaml::from_str(s) {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Integer(i) => Value::Number(i.into()),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(s.to_string())),
        _ => Value::String(s.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_fields_and_documents() {
        let text = "a: 1\nb:\n  c: [x, y]\n---\n---\nd: \"true\"\n";
        let docs = parse(text).unwrap();
        assert_eq!(docs.len(), 2, "the empty document is skipped");
        assert_eq!(docs[0].value["b"]["c"][1], "y");
        assert_eq!(docs[0].keys["b.c"], Pos { line: 3, column: 3 });
        assert_eq!(
            docs[0].values["b.c[1]"],
            Pos {
                line: 3,
                column: 10
            }
        );
        assert_eq!(docs[1].value["d"], "true", "a quoted scalar stays a string");
        assert_eq!(docs[1].keys["d"].line, 6);
        assert_eq!(
            docs[0].pos_of("b.c[1].nothing"),
            Pos {
                line: 3,
                column: 10
            }
        );
    }

    #[test]
    fn duplicate_keys_and_syntax_errors_have_positions() {
        let e = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(e.pos.line, 2);
        assert!(e.message.contains("duplicate key `a`"));
        let e = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.pos.line >= 2, "{e:?}");
    }

    #[test]
    fn aliases_expand() {
        let docs = parse("x: &r [a, b]\ny: *r\n").unwrap();
        assert_eq!(docs[0].value["y"][1], "b");
    }
}
