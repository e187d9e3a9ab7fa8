//! Selectors: which nodes and processes a query covers, in Prometheus's label-matcher syntax,
//! `{zone="a",node=~"web-.*",cpu_model!="x",namespace!~"kube-.*"}`.
//!
//! One parser for every place that takes a selector (the API, compare, alert rules, the CLI).
//! Matchers follow Prometheus: `=` and `!=` compare strings, `=~` and `!~` are RE2 regular
//! expressions anchored at both ends, and a label a node does not have has the value `""`. Unlike
//! a PromQL vector selector there is no metric name, and `{}` (or an empty string) selects
//! everything.
//!
//! Each label is either a node label (`node`, the operator's labels, the facts in
//! [`NODE_FACT_LABELS`]) or a process label ([`PROCESS_LABELS`]); storage turns each matcher into
//! SQL on the table that holds that label, with every value bound as a parameter.

use std::fmt;

/// Labels every node has, from what the agent measured (not set by the operator). An operator
/// label with one of these names is kept as `exported_<name>`, as Prometheus does on conflicts.
pub const NODE_FACT_LABELS: &[&str] = &[
    "node",
    "cpu_vendor",
    "cpu_model",
    "cpus",
    "sockets",
    "numa_nodes",
    "kernel",
    "numa_balancing",
    "thp",
    "pmu",
    "unwinding",
    "agent_version",
];

/// Labels of a sampled process (who it is), matched against each sample's process.
pub const PROCESS_LABELS: &[&str] = &[
    "comm",
    "executable",
    "container_id",
    "container",
    "pod",
    "pod_uid",
    "namespace",
    "unit",
];

/// How a matcher compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchOp {
    Equal,
    NotEqual,
    Regex,
    NotRegex,
}

impl MatchOp {
    fn as_str(self) -> &'static str {
        match self {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
            MatchOp::Regex => "=~",
            MatchOp::NotRegex => "!~",
        }
    }
}

/// Where a label lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelScope {
    Node,
    Process,
}

/// One `name op "value"`.
#[derive(Clone, Debug)]
pub struct Matcher {
    pub name: String,
    pub op: MatchOp,
    pub value: String,
    /// The value as an anchored regular expression, for `=~` and `!~`.
    regex: Option<regex::Regex>,
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        (&self.name, self.op, &self.value) == (&other.name, other.op, &other.value)
    }
}

impl Matcher {
    /// A matcher; fails when `op` is a regex operator and `value` does not compile.
    pub fn new(name: &str, op: MatchOp, value: &str) -> Result<Matcher, SelectorError> {
        let regex = match op {
            MatchOp::Regex | MatchOp::NotRegex => {
                Some(regex::Regex::new(&anchored(value)).map_err(|e| SelectorError {
                    position: 0,
                    message: format!("`{value}` is not a valid regular expression for `{name}`: {e}"),
                })?)
            }
            _ => None,
        };
        Ok(Matcher {
            name: name.to_owned(),
            op,
            value: value.to_owned(),
            regex,
        })
    }

    /// Whether a label with this value (`""` when absent) is selected.
    pub fn matches(&self, value: &str) -> bool {
        match self.op {
            MatchOp::Equal => value == self.value,
            MatchOp::NotEqual => value != self.value,
            MatchOp::Regex => self.regex.as_ref().is_some_and(|r| r.is_match(value)),
            MatchOp::NotRegex => !self.regex.as_ref().is_some_and(|r| r.is_match(value)),
        }
    }

    /// The regular expression as ClickHouse's `match()` must see it: anchored like Prometheus's.
    pub fn anchored_regex(&self) -> String {
        anchored(&self.value)
    }

    /// Whether the label belongs to the process (else to the node).
    pub fn scope(&self) -> LabelScope {
        if PROCESS_LABELS.contains(&self.name.as_str()) {
            LabelScope::Process
        } else {
            LabelScope::Node
        }
    }
}

fn anchored(re: &str) -> String {
    format!("^(?:{re})$")
}

/// Prometheus's label-name rule.
pub fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Matchers that must all hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    pub matchers: Vec<Matcher>,
}

/// Why a selector does not parse; `position` is the 0-based byte offset where it went wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("selector error at position {position}: {message}")]
pub struct SelectorError {
    pub position: usize,
    pub message: String,
}

/// Longest selector accepted, in bytes.
pub const MAX_SELECTOR_BYTES: usize = 4096;
/// Most matchers in one selector.
pub const MAX_MATCHERS: usize = 32;

impl Selector {
    /// Every node and process.
    pub fn all() -> Selector {
        Selector::default()
    }

    /// Parses `{name op "value", ...}`; the braces may be left out, a trailing comma is allowed.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        if text.len() > MAX_SELECTOR_BYTES {
            return Err(SelectorError {
                position: MAX_SELECTOR_BYTES,
                message: format!("a selector is at most {MAX_SELECTOR_BYTES} bytes"),
            });
        }
        let mut p = Parser { text, pos: 0 };
        p.skip_space();
        let braced = p.eat('{');
        let mut matchers = Vec::new();
        loop {
            p.skip_space();
            if p.at_end() || (braced && p.peek() == Some('}')) {
                break;
            }
            let start = p.pos;
            let name = p.label_name()?;
            p.skip_space();
            let op = p.operator()?;
            p.skip_space();
            let value = p.string()?;
            let matcher = Matcher::new(&name, op, &value).map_err(|e| SelectorError {
                position: start,
                message: e.message,
            })?;
            matchers.push(matcher);
            if matchers.len() > MAX_MATCHERS {
                return Err(p.error(format!("a selector has at most {MAX_MATCHERS} matchers")));
            }
            p.skip_space();
            if !p.eat(',') {
                break;
            }
        }
        p.skip_space();
        if braced && !p.eat('}') {
            return Err(p.error(match p.peek() {
                Some(c) => format!("expected `,` or `}}`, found `{c}`"),
                None => "expected `}` at the end".into(),
            }));
        }
        p.skip_space();
        if let Some(c) = p.peek() {
            return Err(p.error(format!("unexpected `{c}` after the selector")));
        }
        Ok(Selector { matchers })
    }

    /// The matchers on node labels.
    pub fn node_matchers(&self) -> impl Iterator<Item = &Matcher> {
        self.matchers.iter().filter(|m| m.scope() == LabelScope::Node)
    }

    /// The matchers on process labels.
    pub fn process_matchers(&self) -> impl Iterator<Item = &Matcher> {
        self.matchers.iter().filter(|m| m.scope() == LabelScope::Process)
    }

    /// Whether a node with these labels (`node` included) is selected by the node matchers.
    pub fn matches_node(&self, label: impl Fn(&str) -> Option<String>) -> bool {
        self.node_matchers()
            .all(|m| m.matches(label(&m.name).as_deref().unwrap_or("")))
    }

    /// This selector with one more matcher.
    pub fn and(mut self, matcher: Matcher) -> Selector {
        self.matchers.push(matcher);
        self
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, m) in self.matchers.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}{}\"", m.name, m.op.as_str())?;
            for c in m.value.chars() {
                match c {
                    '"' => f.write_str("\\\"")?,
                    '\\' => f.write_str("\\\\")?,
                    '\n' => f.write_str("\\n")?,
                    c => write!(f, "{c}")?,
                }
            }
            f.write_str("\"")?;
        }
        f.write_str("}")
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += self.peek().map_or(1, char::len_utf8);
        }
    }

    fn error(&self, message: String) -> SelectorError {
        SelectorError {
            position: self.pos,
            message,
        }
    }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`, as Prometheus label names.
    fn label_name(&mut self) -> Result<String, SelectorError> {
        let start = self.pos;
        match self.peek() {
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
            Some(c) => return Err(self.error(format!("expected a label name, found `{c}`"))),
            None => return Err(self.error("expected a label name".into())),
        }
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.pos += 1;
        }
        Ok(self.text[start..self.pos].to_owned())
    }

    fn operator(&mut self) -> Result<MatchOp, SelectorError> {
        let rest = &self.text[self.pos..];
        let (op, len) = if rest.starts_with("=~") {
            (MatchOp::Regex, 2)
        } else if rest.starts_with("!~") {
            (MatchOp::NotRegex, 2)
        } else if rest.starts_with("!=") {
            (MatchOp::NotEqual, 2)
        } else if rest.starts_with('=') {
            (MatchOp::Equal, 1)
        } else {
            return Err(self.error(match self.peek() {
                Some(c) => format!("expected one of `=`, `!=`, `=~`, `!~`, found `{c}`"),
                None => "expected one of `=`, `!=`, `=~`, `!~`".into(),
            }));
        };
        self.pos += len;
        Ok(op)
    }

    /// A double-, single- or back-quoted string; the first two take Go escapes.
    fn string(&mut self) -> Result<String, SelectorError> {
        let start = self.pos;
        let quote = match self.peek() {
            Some(q @ ('"' | '\'' | '`')) => q,
            Some(c) => return Err(self.error(format!("expected a quoted value, found `{c}`"))),
            None => return Err(self.error("expected a quoted value".into())),
        };
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(SelectorError {
                    position: start,
                    message: "this quoted value is not closed".into(),
                });
            };
            self.pos += c.len_utf8();
            if c == quote {
                return Ok(out);
            }
            if c == '\\' && quote != '`' {
                let Some(e) = self.peek() else { continue };
                self.pos += e.len_utf8();
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    '\\' | '"' | '\'' => out.push(e),
                    // Unknown escapes (`\.`, `\d`) stay as written, so a regular expression
                    // reads the same with or without a doubled backslash (Prometheus refuses them).
                    other => {
                        out.push('\\');
                        out.push(other);
                    }
                }
                continue;
            }
            out.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prometheus syntax parses into matchers of the right scope; braces are optional.
    #[test]
    fn parses_prometheus_matchers() {
        let s = Selector::parse(r#"{zone="a", node=~"web-.*",cpu_model!="x", namespace!~'kube-.*',}"#).unwrap();
        let got: Vec<_> = s
            .matchers
            .iter()
            .map(|m| (m.name.as_str(), m.op, m.value.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("zone", MatchOp::Equal, "a"),
                ("node", MatchOp::Regex, "web-.*"),
                ("cpu_model", MatchOp::NotEqual, "x"),
                ("namespace", MatchOp::NotRegex, "kube-.*"),
            ]
        );
        assert_eq!(s.node_matchers().count(), 3);
        assert_eq!(s.process_matchers().count(), 1);
        assert_eq!(Selector::parse("zone=\"a\"").unwrap().matchers.len(), 1);
        assert!(Selector::parse("{}").unwrap().matchers.is_empty());
        assert!(Selector::parse("  ").unwrap().matchers.is_empty());
    }

    /// The canonical form parses back to the same selector, escapes included.
    #[test]
    fn display_round_trips() {
        for text in [r#"{a="x\"y",b=~"w\\.z",c!="line\n"}"#, "{}", r#"{node="web-1"}"#] {
            let s = Selector::parse(text).unwrap();
            assert_eq!(Selector::parse(&s.to_string()).unwrap(), s, "{text} -> {s}");
        }
    }

    /// Regexes are anchored at both ends; absent labels are the empty string.
    #[test]
    fn matches_like_prometheus() {
        let s = Selector::parse(r#"{node=~"web-.*", zone!="b", rack=""}"#).unwrap();
        let labels = |node: &'static str, zone: &'static str| {
            move |name: &str| match name {
                "node" => Some(node.to_owned()),
                "zone" => Some(zone.to_owned()),
                _ => None,
            }
        };
        assert!(s.matches_node(labels("web-1", "a")));
        assert!(!s.matches_node(labels("my-web-1", "a")), "anchored at the start");
        assert!(!s.matches_node(labels("web-1", "b")));
        let m = Matcher::new("node", MatchOp::Regex, "web").unwrap();
        assert!(!m.matches("web-1"), "anchored at the end");
        assert_eq!(m.anchored_regex(), "^(?:web)$");
    }

    /// Mistakes say where and what was expected.
    #[test]
    fn errors_have_positions() {
        for (text, position, needle) in [
            (r#"{zone="a""#, 9, "expected `}`"),
            (r#"{zone=="a"}"#, 6, "quoted value"),
            (r#"{1zone="a"}"#, 1, "label name"),
            (r#"{zone:"a"}"#, 5, "`=`, `!=`"),
            (r#"{zone="a}"#, 6, "not closed"),
            (r#"{node=~"(web"}"#, 1, "not a valid regular expression"),
            (r#"{zone="a"} x"#, 11, "unexpected `x`"),
            (r#"{zone="a" rack="b"}"#, 10, "expected `,` or `}`"),
        ] {
            let e = Selector::parse(text).unwrap_err();
            assert_eq!(e.position, position, "{text}: {e}");
            assert!(e.message.contains(needle), "{text}: {e}");
        }
        assert!(Selector::parse(&"a=\"b\",".repeat(40)).is_err());
        assert!(Selector::parse(&format!("a=\"{}\"", "x".repeat(5000))).is_err());
    }
}
