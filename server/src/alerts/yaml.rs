//! A YAML document as a tree whose every node knows its line and column, so a rule file's
//! mistakes are reported where they are. Anchors, aliases and tags are refused: a rule file
//! needs none of them and they would hide where a value came from.

use std::fmt;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Where something is in the file, 1-based.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A value and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub at: Position,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A scalar as written (`quoted`: it was in quotes, so `"5"` is a string, not a number).
    Scalar {
        text: String,
        quoted: bool,
    },
    Sequence(Vec<Node>),
    /// Keys in the order written (duplicates kept: the reader reports them).
    Mapping(Vec<(Node, Node)>),
}

impl Node {
    /// What the node is, for messages: "a mapping", "a list", "`text`".
    pub fn describe(&self) -> String {
        match &self.value {
            Value::Scalar { text, .. } if text.is_empty() => "nothing".into(),
            Value::Scalar { text, .. } => format!("`{text}`"),
            Value::Sequence(_) => "a list".into(),
            Value::Mapping(_) => "a mapping".into(),
        }
    }

    /// The scalar's text, if the node is a scalar.
    pub fn scalar(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// Whether this is the empty (null) scalar: `key:` with nothing after it, or `~`/`null`.
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, quoted: false } if text.is_empty() || text == "~" || text == "null")
    }
}

/// Why the file is not YAML at all (nothing else can be checked then).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    pub at: Position,
    pub message: String,
}

fn position(mark: Marker) -> Position {
    Position {
        line: mark.line(),
        column: mark.col() + 1,
    }
}

/// Builds the tree from the parser's events.
#[derive(Default)]
struct Builder {
    /// Open sequences and mappings, innermost last.
    open: Vec<Node>,
    /// A mapping's key waiting for its value, per open mapping (by depth).
    keys: Vec<Option<Node>>,
    documents: Vec<Node>,
    refused: Option<SyntaxError>,
}

impl Builder {
    fn refuse(&mut self, at: Position, what: &str) {
        if self.refused.is_none() {
            self.refused = Some(SyntaxError {
                at,
                message: format!("{what} are not supported in a rule file"),
            });
        }
    }

    fn push(&mut self, node: Node) {
        let Some(parent) = self.open.last_mut() else {
            self.documents.push(node);
            return;
        };
        match &mut parent.value {
            Value::Sequence(items) => items.push(node),
            Value::Mapping(pairs) => {
                let key = self.keys.last_mut().expect("a key slot per open node");
                match key.take() {
                    None => *key = Some(node),
                    Some(k) => pairs.push((k, node)),
                }
            }
            Value::Scalar { .. } => unreachable!("scalars are never open"),
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        let at = position(mark);
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 {
                    self.refuse(at, "anchors");
                }
                if tag.is_some() {
                    self.refuse(at, "tags");
                }
                let quoted = !matches!(style, TScalarStyle::Plain);
                self.push(Node {
                    at,
                    value: Value::Scalar { text, quoted },
                });
            }
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                if anchor != 0 {
                    self.refuse(at, "anchors");
                }
                if tag.is_some() {
                    self.refuse(at, "tags");
                }
                let value = match event {
                    Event::SequenceStart(..) => Value::Sequence(Vec::new()),
                    _ => Value::Mapping(Vec::new()),
                };
                self.open.push(Node { at, value });
                self.keys.push(None);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                self.keys.pop();
                if let Some(node) = self.open.pop() {
                    self.push(node);
                }
            }
            Event::Alias(_) => {
                self.refuse(at, "aliases");
                self.push(Node {
                    at,
                    value: Value::Scalar {
                        text: String::new(),
                        quoted: false,
                    },
                });
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentStart | Event::DocumentEnd => {}
        }
    }
}

/// Parses one YAML document (an empty file is an empty mapping).
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, true).map_err(|e| SyntaxError {
        at: position(*e.marker()),
        message: e.info().to_owned(),
    })?;
    if let Some(refused) = builder.refused {
        return Err(refused);
    }
    match builder.documents.len() {
        0 => Ok(Node {
            at: Position { line: 1, column: 1 },
            value: Value::Mapping(Vec::new()),
        }),
        1 => Ok(builder.documents.pop().expect("one document")),
        _ => Err(SyntaxError {
            at: builder.documents[1].at,
            message: "a rule file is one YAML document; found a second one".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_know_their_lines() {
        let doc = parse("a: 1\nb:\n  - x\n  - \"5\"\nc:\n").unwrap();
        let Value::Mapping(pairs) = &doc.value else { panic!() };
        assert_eq!(pairs.len(), 3);
        assert_eq!(pairs[0].0.scalar(), Some("a"));
        assert_eq!(pairs[0].1.at, Position { line: 1, column: 4 });
        let Value::Sequence(items) = &pairs[1].1.value else {
            panic!()
        };
        assert_eq!(items[1].at.line, 4);
        assert_eq!(
            items[1].value,
            Value::Scalar {
                text: "5".into(),
                quoted: true
            }
        );
        assert!(pairs[2].1.is_null());
    }

    #[test]
    fn syntax_errors_and_refused_features_say_where() {
        let e = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.at.line >= 2, "{e:?}");
        let e = parse("a: &x 1\nb: *x\n").unwrap_err();
        assert_eq!(e.at.line, 1);
        assert!(e.message.contains("anchors"), "{e:?}");
        let e = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(e.at.line, 3);
        assert_eq!(parse("").unwrap().value, Value::Mapping(Vec::new()));
    }
}
