//! YAML with positions. serde_yaml forgets where a value stood once parsed, and every error we
//! report must name the file, line and column of the field at fault, so documents are read here
//! into a small tree whose nodes keep their position, then turned into JSON for serde.
//!
//! Manifests are untrusted, so the tree is built within limits: nesting depth, and the number of
//! values and bytes of text once aliases are expanded (a few hundred bytes of nested aliases, a
//! "billion laughs", would otherwise expand to gigabytes). Aliases share the anchored node
//! rather than copy it, and each use is charged at its full expanded size, so a file is refused
//! at the alias that takes it over a limit, before anything is expanded. The parser is driven
//! one event at a time here: yaml-rust2's `Parser::load` recurses once per level of nesting, so a
//! megabyte of `- - - …` would overflow the stack before any limit could be checked.

use std::collections::HashMap;
use std::rc::Rc;

use serde_json::{Map, Number, Value};
use yaml_rust2::Yaml;
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::load::MAX_FILE_BYTES;

/// Deepest nesting of sequences and mappings in a file. Manifests need about 5; the limit keeps
/// every recursive walk of the tree (to JSON, serde, drop) far from the end of the stack.
pub const MAX_DEPTH: usize = 64;
/// Most values (scalars, sequences, mappings, keys included) in one file, counting every use of
/// an alias in full. A team of a hundred members is a few thousand.
pub const MAX_NODES: usize = 100_000;
/// Most bytes of scalar text in one file, counting every use of an alias in full. Twice the file
/// cap: a file without aliases stays below it (an escape never yields more than 1.5 times its own
/// length), while one string used many times by alias does not.
pub const MAX_TEXT_BYTES: usize = 2 * MAX_FILE_BYTES as usize;

/// A position in a source file: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    /// From 1.
    pub line: usize,
    /// From 1, in characters.
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

/// Why a file is not a tree we accept, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Where the parser stopped: the syntax error, or the value that crossed a limit.
    pub pos: Pos,
    /// What went wrong.
    pub kind: ParseErrorKind,
}

/// Why a file was refused: bad YAML, or one of the limits an untrusted file is read within.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// Not YAML, or YAML we do not take: an alias to an unknown anchor, a key that is not a
    /// plain string, a duplicate key.
    #[error("YAML syntax: {0}")]
    Syntax(String),
    /// Nested deeper than `MAX_DEPTH`.
    #[error("nested more than {MAX_DEPTH} levels deep")]
    TooDeep,
    /// More than `MAX_NODES` values once aliases are expanded.
    #[error("more than {MAX_NODES} values in one file, counting every use of an alias in full")]
    TooManyValues,
    /// More than `MAX_TEXT_BYTES` of scalar text once aliases are expanded.
    #[error(
        "more than {} MiB of text in one file, counting every use of an alias in full",
        MAX_TEXT_BYTES >> 20
    )]
    TooMuchText,
}

impl ParseError {
    fn syntax(pos: Pos, message: impl Into<String>) -> ParseError {
        ParseError {
            pos,
            kind: ParseErrorKind::Syntax(message.into()),
        }
    }
}

/// One YAML document: its JSON value, and the tree it came from for positions.
#[derive(Debug, Clone)]
pub struct Document {
    /// The document as JSON, for serde to read into `raw` types.
    pub value: Value,
    tree: Node,
}

impl Document {
    /// Where to point for an error at `path` (`spec.read[1]`): the key of the deepest field of
    /// the path that exists (or the element, in a list).
    pub fn pos_of(&self, path: &str) -> Pos {
        self.walk(path).1
    }

    /// Where the value (not the key) at `path` stood.
    pub fn value_pos(&self, path: &str) -> Pos {
        match self.walk(path) {
            (node, _, true) => node.shown_pos(),
            (_, pos, false) => pos,
        }
    }

    /// Follows `path` down the tree as far as it goes: the node reached, where to point for it,
    /// and whether the whole path was found. A key may itself hold `.` (an env name, a label):
    /// the longest key that fits is taken.
    fn walk(&self, path: &str) -> (&Node, Pos, bool) {
        let mut node = self.tree.resolved();
        let mut at = node.shown_pos();
        let mut rest = path;
        while !rest.is_empty() {
            let step = match node {
                Node::Seq(items, _) => index_step(rest)
                    .and_then(|(i, after)| items.get(i).map(|n| (n, n.shown_pos(), after))),
                Node::Map(pairs, _) => key_step(pairs, rest.strip_prefix('.').unwrap_or(rest)),
                Node::Scalar(..) | Node::Shared(_) => None,
            };
            let Some((next, pos, after)) = step else {
                return (node, at, false);
            };
            node = next.resolved();
            at = pos;
            rest = after;
        }
        (node, at, true)
    }
}

/// `[3]rest` -> (3, rest).
fn index_step(path: &str) -> Option<(usize, &str)> {
    let (index, rest) = path.strip_prefix('[')?.split_once(']')?;
    Some((index.parse().ok()?, rest))
}

/// The value of the longest key that `path` starts with, the key's position, and the rest.
fn key_step<'a, 'p>(pairs: &'a [(Node, Node)], path: &'p str) -> Option<(&'a Node, Pos, &'p str)> {
    pairs
        .iter()
        .filter_map(|(k, v)| match k.resolved() {
            Node::Scalar(key, _, pos) => {
                let rest = path.strip_prefix(key.as_str())?;
                (rest.is_empty() || rest.starts_with(['.', '['])).then_some((
                    key.len(),
                    v,
                    *pos,
                    rest,
                ))
            }
            Node::Seq(..) | Node::Map(..) | Node::Shared(_) => None,
        })
        .max_by_key(|(len, ..)| *len)
        .map(|(_, v, pos, rest)| (v, pos, rest))
}

#[derive(Debug, Clone)]
enum Node {
    Scalar(String, TScalarStyle, Pos),
    Seq(Vec<Node>, Pos),
    Map(Vec<(Node, Node)>, Pos),
    /// An anchored node, shared by its anchor and every alias to it; its positions are the
    /// anchor's. Nothing is copied until the tree becomes JSON, and the budget bounds that copy.
    Shared(Rc<Node>),
}

impl Node {
    fn resolved(&self) -> &Node {
        match self {
            Node::Shared(n) => n.resolved(),
            n @ (Node::Scalar(..) | Node::Seq(..) | Node::Map(..)) => n,
        }
    }

    fn pos(&self) -> Pos {
        match self.resolved() {
            Node::Scalar(_, _, p) | Node::Seq(_, p) | Node::Map(_, p) => *p,
            Node::Shared(_) => unreachable!("resolved"),
        }
    }

    /// Where a reader looks for this value: a block mapping's own mark sits after its first
    /// key, so for a mapping that is the first key.
    fn shown_pos(&self) -> Pos {
        match self.resolved() {
            Node::Map(pairs, p) => pairs.first().map_or(*p, |(k, _)| k.pos()),
            n @ (Node::Scalar(..) | Node::Seq(..) | Node::Shared(_)) => n.pos(),
        }
    }
}

/// A sequence or mapping still being read.
struct Open {
    node: Node,
    anchor: usize,
    /// A mapping's key, until its value arrives.
    key: Option<Node>,
    /// The file's counts when it started, so that its own size is known at its end.
    nodes_before: usize,
    text_before: usize,
    /// Levels of nesting in it so far, itself included.
    height: usize,
}

/// An anchored node, with what each alias to it costs.
struct Anchored {
    node: Rc<Node>,
    nodes: usize,
    text: usize,
    height: usize,
}

/// Builds the documents of one file from parser events, keeping to the limits.
#[derive(Default)]
struct Builder {
    docs: Vec<Node>,
    open: Vec<Open>,
    anchors: HashMap<usize, Anchored>,
    /// Values and bytes of scalar text so far, every use of an alias counted in full.
    nodes: usize,
    text: usize,
}

impl Builder {
    fn event(&mut self, ev: Event, pos: Pos) -> Result<(), ParseError> {
        match ev {
            // Anchors are local to their document.
            Event::DocumentStart => self.anchors.clear(),
            Event::Scalar(s, style, anchor, _) => {
                let text = s.len();
                self.spend(1, text, pos)?;
                self.add(Node::Scalar(s, style, pos), anchor, 1, text, 0);
            }
            Event::SequenceStart(anchor, _) => self.open(Node::Seq(vec![], pos), anchor, pos)?,
            Event::MappingStart(anchor, _) => self.open(Node::Map(vec![], pos), anchor, pos)?,
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(o) = self.open.pop() {
                    let (nodes, text) = (self.nodes - o.nodes_before, self.text - o.text_before);
                    self.add(o.node, o.anchor, nodes, text, o.height);
                }
            }
            Event::Alias(id) => {
                // An anchor is known once its node is complete, so an alias inside its own
                // anchor is unknown too: there are no cycles.
                let Some(a) = self.anchors.get(&id) else {
                    return Err(ParseError::syntax(
                        pos,
                        "alias to an unknown anchor (an alias can only name a complete node before it in the same document)",
                    ));
                };
                let (node, nodes, text, height) =
                    (Node::Shared(a.node.clone()), a.nodes, a.text, a.height);
                if self.open.len() + height > MAX_DEPTH {
                    return Err(ParseError {
                        pos,
                        kind: ParseErrorKind::TooDeep,
                    });
                }
                self.spend(nodes, text, pos)?;
                self.push(node, height);
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
        Ok(())
    }

    fn open(&mut self, node: Node, anchor: usize, pos: Pos) -> Result<(), ParseError> {
        if self.open.len() >= MAX_DEPTH {
            return Err(ParseError {
                pos,
                kind: ParseErrorKind::TooDeep,
            });
        }
        let (nodes_before, text_before) = (self.nodes, self.text);
        self.spend(1, 0, pos)?;
        self.open.push(Open {
            node,
            anchor,
            key: None,
            nodes_before,
            text_before,
            height: 1,
        });
        Ok(())
    }

    /// Charges `nodes` values and `text` bytes to the file; an error at `pos` past a limit.
    fn spend(&mut self, nodes: usize, text: usize, pos: Pos) -> Result<(), ParseError> {
        self.nodes += nodes;
        self.text += text;
        let kind = if self.nodes > MAX_NODES {
            ParseErrorKind::TooManyValues
        } else if self.text > MAX_TEXT_BYTES {
            ParseErrorKind::TooMuchText
        } else {
            return Ok(());
        };
        Err(ParseError { pos, kind })
    }

    /// A complete node: kept under its anchor, if it has one, and added to its parent.
    fn add(&mut self, node: Node, anchor: usize, nodes: usize, text: usize, height: usize) {
        let node = if anchor > 0 {
            let node = Rc::new(node);
            let anchored = Anchored {
                node: node.clone(),
                nodes,
                text,
                height,
            };
            self.anchors.insert(anchor, anchored);
            Node::Shared(node)
        } else {
            node
        };
        self.push(node, height);
    }

    fn push(&mut self, node: Node, height: usize) {
        let Some(parent) = self.open.last_mut() else {
            self.docs.push(node);
            return;
        };
        parent.height = parent.height.max(height + 1);
        match &mut parent.node {
            Node::Seq(items, _) => items.push(node),
            Node::Map(pairs, _) => match parent.key.take() {
                Some(key) => pairs.push((key, node)),
                None => parent.key = Some(node),
            },
            Node::Scalar(..) | Node::Shared(_) => {}
        }
    }
}

/// Parse every document of a YAML stream. Empty documents (a stray `---`) are skipped.
pub fn parse(text: &str) -> Result<Vec<Document>, ParseError> {
    let mut parser = Parser::new_from_str(text);
    let mut b = Builder::default();
    loop {
        let (ev, mark) = parser
            .next_token()
            .map_err(|e| ParseError::syntax(Pos::from(*e.marker()), e.info()))?;
        if ev == Event::StreamEnd {
            break;
        }
        b.event(ev, Pos::from(mark))?;
    }
    let mut docs = Vec::new();
    for tree in b.docs {
        let value = to_json(&tree)?;
        if !value.is_null() {
            docs.push(Document { value, tree });
        }
    }
    Ok(docs)
}

fn to_json(node: &Node) -> Result<Value, ParseError> {
    Ok(match node.resolved() {
        Node::Scalar(s, style, _) => scalar(s, *style),
        Node::Seq(items, _) => Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Node::Map(pairs, _) => {
            let mut map = Map::new();
            for (k, v) in pairs {
                let Node::Scalar(key, _, pos) = k.resolved() else {
                    return Err(ParseError::syntax(
                        k.pos(),
                        "a mapping key must be a plain string",
                    ));
                };
                if map.contains_key(key) {
                    return Err(ParseError::syntax(*pos, format!("duplicate key `{key}`")));
                }
                map.insert(key.clone(), to_json(v)?);
            }
            Value::Object(map)
        }
        Node::Shared(_) => unreachable!("resolved"),
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
        Yaml::String(_) | Yaml::Array(_) | Yaml::Hash(_) | Yaml::Alias(_) | Yaml::BadValue => {
            Value::String(s.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize, column: usize) -> Pos {
        Pos { line, column }
    }

    #[test]
    fn positions_of_fields_and_documents() {
        let text = "a: 1\nb:\n  c: [x, y]\n---\n---\nd: \"true\"\n";
        let docs = parse(text).unwrap();
        assert_eq!(docs.len(), 2, "the empty document is skipped");
        assert_eq!(docs[0].value["b"]["c"][1], "y");
        assert_eq!(docs[0].pos_of("b.c"), at(3, 3), "a field: its key");
        assert_eq!(docs[0].value_pos("b.c"), at(3, 6), "its value");
        assert_eq!(docs[0].value_pos("b.c[1]"), at(3, 10));
        assert_eq!(docs[0].pos_of(""), at(1, 1), "a mapping: its first key");
        assert_eq!(docs[0].value_pos("b"), at(3, 3));
        assert_eq!(docs[1].value["d"], "true", "a quoted scalar stays a string");
        assert_eq!(docs[1].pos_of("d").line, 6);
        assert_eq!(docs[0].pos_of("b.c[1].nothing"), at(3, 10));
        assert_eq!(
            docs[0].value_pos("b.c[7]"),
            at(3, 3),
            "the nearest that exists"
        );
    }

    #[test]
    fn keys_with_dots_are_found() {
        let docs = parse("env:\n  a: 1\n  a.b: 2\n  a.b.c: [x]\n").unwrap();
        assert_eq!(docs[0].pos_of("env.a.b"), at(3, 3));
        assert_eq!(docs[0].pos_of("env.a.b.c[0]"), at(4, 11));
        assert_eq!(docs[0].pos_of("env.a.x"), at(2, 3));
    }

    #[test]
    fn duplicate_keys_and_syntax_errors_have_positions() {
        let e = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(e.pos.line, 2);
        assert_eq!(e.kind, ParseErrorKind::Syntax("duplicate key `a`".into()));
        let e = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.pos.line >= 2, "{e:?}");
    }

    #[test]
    fn aliases_expand() {
        let docs = parse("x: &r [a, b]\ny: *r\n").unwrap();
        assert_eq!(docs[0].value["y"][1], "b");
        assert_eq!(
            docs[0].value_pos("y[1]"),
            at(1, 11),
            "positions are the anchor's"
        );
    }

    #[test]
    fn aliases_reach_only_complete_anchors_of_their_document() {
        let e = parse("a: &a [*a]\n").unwrap_err();
        assert_eq!(e.pos, at(1, 8));
        let e = parse("a: &a x\n---\nb: *a\n").unwrap_err();
        assert_eq!(e.pos, at(3, 4));
        assert!(
            e.kind.to_string().contains("alias to an unknown anchor"),
            "{e:?}"
        );
    }

    #[test]
    fn expansion_is_charged_at_the_alias() {
        // 10 levels of 10 aliases: 10^10 values once expanded.
        let mut text = String::from("l0: &l0 [x,x,x,x,x,x,x,x,x,x]\n");
        for i in 1..10 {
            let p = i - 1;
            text.push_str(&format!(
                "l{i}: &l{i} [{}]\n",
                vec![format!("*l{p}"); 10].join(",")
            ));
        }
        let e = parse(&text).unwrap_err();
        assert_eq!(e.kind, ParseErrorKind::TooManyValues);
        assert_eq!(e.pos.line, 5, "{e:?}");
        let long = "x".repeat(1 << 20);
        let e = parse(&format!("a: &a {long}\nb: [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n")).unwrap_err();
        assert_eq!((e.pos, e.kind), (at(2, 23), ParseErrorKind::TooMuchText));
        // Many small aliases to a string are fine within the budget.
        let docs = parse(&format!("a: &a x\nb: [{}]\n", vec!["*a"; 1000].join(","))).unwrap();
        assert_eq!(docs[0].value["b"][999], "x");
    }

    #[test]
    fn nesting_is_limited_also_through_aliases() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(&ok).is_ok());
        let e = parse(&format!("{}{}", "- ".repeat(100_000), "x")).unwrap_err();
        assert_eq!((e.pos, e.kind), (at(1, 129), ParseErrorKind::TooDeep));
        // 40 levels anchored, then used 40 levels down: 80 in all.
        let deep = format!("{}x{}", "[".repeat(40), "]".repeat(40));
        let text = format!("a: &a {deep}\nb: {}*a{}\n", "[".repeat(40), "]".repeat(40));
        let e = parse(&text).unwrap_err();
        assert_eq!((e.pos, e.kind), (at(2, 44), ParseErrorKind::TooDeep));
    }
}
