//! A YAML document as a tree whose every node knows its line and column, so the mistakes of the
//! server's files (alert rules, tokens) are reported where they are. Anchors, aliases and tags
//! are refused: these files need none of them and they would hide where a value came from.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::selector::is_label_name;

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
                message: format!("{what} are not supported here"),
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
            message: "the file is one YAML document; found a second one".into(),
        }),
    }
}

/// One mistake in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mistake {
    pub at: Position,
    pub message: String,
}

/// A file that could not be used: every mistake, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mistakes {
    pub file: String,
    pub mistakes: Vec<Mistake>,
}

impl fmt::Display for Mistakes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, m) in self.mistakes.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}:{}: {}", self.file, m.at, m.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Mistakes {}

/// Reads the file at `path` and checks it with `check` (which reports mistakes to the reader).
pub fn check_file<T>(path: &Path, check: impl FnOnce(&mut Reader, &Node) -> Option<T>) -> Result<T, Mistakes> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Mistakes {
        file: file.clone(),
        mistakes: vec![Mistake {
            at: Position { line: 0, column: 0 },
            message: format!("cannot read the file: {e}"),
        }],
    })?;
    check_text(&text, check).map_err(|mistakes| Mistakes { file, mistakes })
}

/// Checks a file's text with `check`: its value, or every mistake found, in file order.
pub fn check_text<T>(text: &str, check: impl FnOnce(&mut Reader, &Node) -> Option<T>) -> Result<T, Vec<Mistake>> {
    let doc = parse(text).map_err(|e| {
        vec![Mistake {
            at: e.at,
            message: format!("not valid YAML: {}", e.message),
        }]
    })?;
    let mut r = Reader::default();
    let value = check(&mut r, &doc);
    match (value, r.mistakes.is_empty()) {
        (Some(value), true) => Ok(value),
        _ => {
            r.mistakes.sort_by_key(|m| m.at);
            Err(r.mistakes)
        }
    }
}

/// Collects mistakes while reading.
#[derive(Debug, Default)]
pub struct Reader {
    pub mistakes: Vec<Mistake>,
}

impl Reader {
    pub fn wrong(&mut self, at: Position, message: impl Into<String>) {
        self.mistakes.push(Mistake {
            at,
            message: message.into(),
        });
    }

    /// A mapping's fields by key; reports a node that is not a mapping, keys that are not
    /// text, duplicates and keys not in `allowed`.
    pub fn fields<'a>(&mut self, node: &'a Node, what: &str, allowed: &[&str]) -> Option<HashMap<&'a str, &'a Node>> {
        let Value::Mapping(pairs) = &node.value else {
            self.wrong(node.at, format!("{what} must be a mapping, not {}", node.describe()));
            return None;
        };
        let mut fields = HashMap::new();
        for (key, value) in pairs {
            let Some(name) = key.scalar() else {
                self.wrong(key.at, format!("a key of {what} must be text, not {}", key.describe()));
                continue;
            };
            if !allowed.contains(&name) {
                self.wrong(
                    key.at,
                    format!("unknown field `{name}` in {what}; known: {}", allowed.join(", ")),
                );
                continue;
            }
            if fields.insert(name, value).is_some() {
                self.wrong(key.at, format!("`{name}` is given twice in {what}"));
            }
        }
        Some(fields)
    }

    pub fn text<'a>(&mut self, node: &'a Node, what: &str) -> Option<&'a str> {
        match &node.value {
            Value::Scalar { text, .. } if !text.is_empty() => Some(text),
            _ => {
                self.wrong(node.at, format!("{what} must be text, not {}", node.describe()));
                None
            }
        }
    }

    pub fn number(&mut self, node: &Node, what: &str, valid: impl Fn(f64) -> bool, rule: &str) -> Option<f64> {
        let parsed = match &node.value {
            Value::Scalar { text, quoted: false } => text.parse::<f64>().ok().filter(|v| v.is_finite()),
            _ => None,
        };
        match parsed {
            Some(v) if valid(v) => Some(v),
            Some(v) => {
                self.wrong(node.at, format!("{what} must be {rule}, not {v}"));
                None
            }
            None => {
                self.wrong(
                    node.at,
                    format!("{what} must be a number {rule}, not {}", node.describe()),
                );
                None
            }
        }
    }

    pub fn whole(&mut self, node: &Node, what: &str, min: u64) -> Option<u64> {
        match node.scalar().and_then(|t| t.parse::<u64>().ok()) {
            Some(v) if v >= min => Some(v),
            _ => {
                self.wrong(
                    node.at,
                    format!(
                        "{what} must be a whole number of at least {min}, not {}",
                        node.describe()
                    ),
                );
                None
            }
        }
    }

    pub fn duration(&mut self, node: &Node, what: &str, min: Duration, max: Duration) -> Option<Duration> {
        let text = self.text(node, what)?;
        match humantime::parse_duration(text) {
            Ok(d) if d >= min && d <= max => Some(d),
            Ok(_) => {
                self.wrong(
                    node.at,
                    format!(
                        "{what} must be from {} to {}, not {text}",
                        humantime::format_duration(min),
                        humantime::format_duration(max)
                    ),
                );
                None
            }
            Err(_) => {
                self.wrong(node.at, format!("{what} `{text}` is not a duration (like 30s, 5m, 1h)"));
                None
            }
        }
    }

    /// A mapping of label names to text.
    pub fn string_map(
        &mut self,
        node: &Node,
        what: &str,
        check_value: impl Fn(&str) -> Result<(), String>,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Value::Mapping(pairs) = &node.value else {
            if !node.is_null() {
                self.wrong(node.at, format!("{what} must be a mapping, not {}", node.describe()));
            }
            return out;
        };
        for (key, value) in pairs {
            let Some(name) = key.scalar() else {
                self.wrong(key.at, format!("a name in {what} must be text, not {}", key.describe()));
                continue;
            };
            if !is_label_name(name) {
                self.wrong(
                    key.at,
                    format!("`{name}` is not a label name (letters, digits and `_`, not starting with a digit)"),
                );
                continue;
            }
            let Some(text) = value.scalar() else {
                self.wrong(
                    value.at,
                    format!("`{name}` in {what} must be text, not {}", value.describe()),
                );
                continue;
            };
            if let Err(e) = check_value(text) {
                self.wrong(value.at, format!("`{name}` in {what}: {e}"));
                continue;
            }
            if out.insert(name.to_owned(), text.to_owned()).is_some() {
                self.wrong(key.at, format!("`{name}` is given twice in {what}"));
            }
        }
        out
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
