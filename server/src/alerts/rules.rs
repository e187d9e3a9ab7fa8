//! Alert rules: what a rule file says (`bimodal-server --rules FILE`, `bimodal rules check FILE`),
//! read with every mistake reported at its line, not only the first.
//!
//! ```yaml
//! evaluation_interval: 30s        # how often the server judges every rule (default 30s)
//! rules:
//!   - alert: RemoteAccessSpike    # the alert's name (alertname)
//!     selector: '{zone="a"}'      # the nodes it watches (default: every node)
//!     event: remote_access        # cpu, page_fault, cache_miss, remote_access, ...
//!     source: numa_hint_fault     # optional: without it each source is judged on its own
//!     window: 5m                  # each evaluation reads the last `window` (default 5m, at
//!                                 # least 1m), in whole minutes with the current one
//!     condition:                  # exactly one of:
//!       rate_above: 500           #   the event per CPU-second above a figure
//!       # above_baseline: {factor: 3, baseline: 1h}   the node's own rate over the hour before
//!       # above_peers: {factor: 3}                    the median of its hardware class
//!       # bands_appear: {metric: page_fault}          two bands where the window before had none
//!     for: 2m                     # active this long before it fires (default 0)
//!     min_samples: 10             # a node with fewer samples in the window is not judged
//!     labels: {severity: page}
//!     annotations:
//!       summary: '{{ $labels.node }}: {{ $value }} remote accesses per CPU-second'
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};

use std::path::Path;
use std::time::Duration;

use bimodal_proto::v1::EventKind;

use crate::selector::is_label_name;
use crate::selector::Selector;
use crate::yaml::{self, Mistake, Mistakes, Node, Position, Reader, Value};

/// Labels the evaluation sets itself; a rule's own labels may not use these names.
pub const RESERVED_LABELS: &[&str] = &["alertname", "node", "event", "source", "metric"];

const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
const DEFAULT_WINDOW: Duration = Duration::from_secs(300);
const DEFAULT_MIN_SAMPLES: u64 = 10;
const DEFAULT_MIN_PEERS: usize = 3;

/// A checked rule file.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleFile {
    pub evaluation_interval: Duration,
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// `alert:`, the alertname label of its alerts.
    pub name: String,
    /// The line the rule starts on.
    pub line: usize,
    pub selector: Selector,
    /// `None` only for `bands_appear`, which may test every metric.
    pub event: Option<EventKind>,
    pub source: Option<String>,
    pub window: Duration,
    pub condition: Condition,
    pub for_: Duration,
    pub min_samples: u64,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// When a rule's alert is active.
#[derive(Clone, Debug, PartialEq)]
pub enum Condition {
    /// The node's event per CPU-second above `rate`.
    RateAbove { rate: f64 },
    /// Above `factor` times the node's own rate over `baseline` before the window.
    AboveBaseline { factor: f64, baseline: Duration },
    /// Above `factor` times the median of the selected nodes of its hardware class
    /// ([`crate::analysis::compare::HARDWARE_CLASS_LABELS`]), when at least `min_peers` others of the class were measured.
    AbovePeers { factor: f64, min_peers: usize },
    /// The selected nodes split into two bands (in `metric`, or in any metric compare tests)
    /// where the window before had none.
    BandsAppear { metric: Option<String> },
}

impl Condition {
    /// The name written in rule files.
    pub fn kind(&self) -> &'static str {
        match self {
            Condition::RateAbove { .. } => "rate_above",
            Condition::AboveBaseline { .. } => "above_baseline",
            Condition::AbovePeers { .. } => "above_peers",
            Condition::BandsAppear { .. } => "bands_appear",
        }
    }
}

/// Reads and checks the rule file at `path`.
pub fn load(path: &Path) -> Result<RuleFile, Mistakes> {
    yaml::check_file(path, Reader::file)
}

/// Checks a rule file's text: the rules, or every mistake found.
pub fn read(text: &str) -> Result<RuleFile, Vec<Mistake>> {
    yaml::check_text(text, Reader::file)
}

impl Reader {
    fn file(&mut self, doc: &Node) -> Option<RuleFile> {
        let fields = self.fields(doc, "the rule file", &["evaluation_interval", "rules"])?;
        let evaluation_interval = match fields.get("evaluation_interval") {
            Some(n) => self.duration(
                n,
                "evaluation_interval",
                Duration::from_secs(1),
                Duration::from_secs(3600),
            ),
            None => Some(DEFAULT_INTERVAL),
        };
        let Some(list) = fields.get("rules") else {
            self.wrong(doc.at, "the rule file has no `rules:` list");
            return None;
        };
        let items = match &list.value {
            Value::Sequence(items) => items.as_slice(),
            _ if list.is_null() => &[],
            _ => {
                self.wrong(list.at, format!("`rules` must be a list, not {}", list.describe()));
                return None;
            }
        };
        let mut rules = Vec::new();
        let mut names: HashSet<String> = HashSet::new();
        for item in items {
            // Names are checked apart from the rest: a rule with mistakes still takes its name.
            if let Some((name, at)) = alert_name(item) {
                if !names.insert(name.to_owned()) {
                    self.wrong(at, format!("a second rule named `{name}`: alert names are unique"));
                }
            }
            if let Some(rule) = self.rule(item) {
                rules.push(rule);
            }
        }
        Some(RuleFile {
            evaluation_interval: evaluation_interval?,
            rules,
        })
    }

    fn rule(&mut self, node: &Node) -> Option<Rule> {
        const FIELDS: &[&str] = &[
            "alert",
            "selector",
            "event",
            "source",
            "window",
            "condition",
            "for",
            "min_samples",
            "labels",
            "annotations",
        ];
        let f = self.fields(node, "a rule", FIELDS)?;
        let name = match f.get("alert") {
            Some(n) => self.text(n, "`alert`").and_then(|t| {
                if is_label_name(t) {
                    Some(t.to_owned())
                } else {
                    self.wrong(
                        n.at,
                        format!("alert name `{t}` must be letters, digits and `_`, not starting with a digit"),
                    );
                    None
                }
            }),
            None => {
                self.wrong(node.at, "a rule has no `alert:` name");
                None
            }
        };
        let selector = match f.get("selector") {
            None => Some(Selector::all()),
            Some(n) => self.text(n, "`selector`").and_then(|t| match Selector::parse(t) {
                Ok(s) => Some(s),
                Err(e) => {
                    self.wrong(n.at, format!("`selector` {t}: {e}"));
                    None
                }
            }),
        };
        let condition = match f.get("condition") {
            Some(n) => self.condition(n),
            None => {
                self.wrong(node.at, "a rule has no `condition:`");
                None
            }
        };
        let event = match f.get("event") {
            Some(n) => self.text(n, "`event`").and_then(|t| match EventKind::from_name(t) {
                Some(e) => Some(Some(e)),
                None => {
                    let known: Vec<&str> = EventKind::ALL.iter().map(|e| e.name()).collect();
                    self.wrong(n.at, format!("unknown event `{t}`; known: {}", known.join(", ")));
                    None
                }
            }),
            None => match &condition {
                Some(Condition::BandsAppear { .. }) | None => Some(None),
                Some(c) => {
                    self.wrong(node.at, format!("a rule with `{}` needs an `event:`", c.kind()));
                    None
                }
            },
        };
        let source = match f.get("source") {
            Some(n) => self.text(n, "`source`").map(|t| Some(t.to_owned())),
            None => Some(None),
        };
        let window = match f.get("window") {
            // Samples are kept per minute: a shorter window would read the same minute.
            Some(n) => self.duration(n, "`window`", Duration::from_secs(60), Duration::from_secs(7 * 86_400)),
            None => Some(DEFAULT_WINDOW),
        };
        let for_ = match f.get("for") {
            Some(n) => self.duration(n, "`for`", Duration::ZERO, Duration::from_secs(7 * 86_400)),
            None => Some(Duration::ZERO),
        };
        let min_samples = match f.get("min_samples") {
            Some(n) => self.whole(n, "`min_samples`", 1),
            None => Some(DEFAULT_MIN_SAMPLES),
        };
        let labels = match f.get("labels") {
            Some(n) => {
                let labels = self.string_map(n, "`labels`", |_| Ok(()));
                for (key, _) in match &n.value {
                    Value::Mapping(pairs) => pairs.as_slice(),
                    _ => &[],
                } {
                    if let Some(k) = key.scalar().filter(|k| RESERVED_LABELS.contains(k)) {
                        self.wrong(
                            key.at,
                            format!(
                                "label `{k}` is set by the evaluation (reserved: {})",
                                RESERVED_LABELS.join(", ")
                            ),
                        );
                    }
                }
                labels
            }
            None => BTreeMap::new(),
        };
        let annotations = match f.get("annotations") {
            Some(n) => self.string_map(n, "`annotations`", check_template),
            None => BTreeMap::new(),
        };
        Some(Rule {
            name: name?,
            line: node.at.line,
            selector: selector?,
            event: event?,
            source: source?,
            window: window?,
            condition: condition?,
            for_: for_?,
            min_samples: min_samples?,
            labels,
            annotations,
        })
    }

    fn condition(&mut self, node: &Node) -> Option<Condition> {
        const KINDS: &[&str] = &["rate_above", "above_baseline", "above_peers", "bands_appear"];
        let f = self.fields(node, "`condition`", KINDS)?;
        let mut given: Vec<(&str, &Node)> = f.into_iter().collect();
        given.sort_by_key(|(_, n)| n.at);
        let (kind, value) = match given.as_slice() {
            [one] => *one,
            [] => {
                self.wrong(node.at, format!("`condition` needs one of: {}", KINDS.join(", ")));
                return None;
            }
            [_, second, ..] => {
                self.wrong(
                    second.1.at,
                    format!(
                        "`condition` has {} and {}: a rule has exactly one (write two rules)",
                        given[0].0, second.0
                    ),
                );
                return None;
            }
        };
        let factor = |r: &mut Reader, f: &HashMap<&str, &Node>, at: Position| match f.get("factor") {
            Some(n) => r.number(n, "`factor`", |v| v > 1.0, "above 1"),
            None => {
                r.wrong(at, format!("`{kind}` needs a `factor:`"));
                None
            }
        };
        match kind {
            "rate_above" => self
                .number(value, "`rate_above`", |v| v > 0.0, "above 0 (per CPU-second)")
                .map(|rate| Condition::RateAbove { rate }),
            "above_baseline" => {
                let f = self.fields(value, "`above_baseline`", &["factor", "baseline"])?;
                let factor = factor(self, &f, value.at);
                let baseline = match f.get("baseline") {
                    Some(n) => self.duration(
                        n,
                        "`baseline`",
                        Duration::from_secs(60),
                        Duration::from_secs(30 * 86_400),
                    ),
                    None => Some(Duration::from_secs(3600)),
                };
                Some(Condition::AboveBaseline {
                    factor: factor?,
                    baseline: baseline?,
                })
            }
            "above_peers" => {
                let f = self.fields(value, "`above_peers`", &["factor", "min_peers"])?;
                let factor = factor(self, &f, value.at);
                let min_peers = match f.get("min_peers") {
                    Some(n) => self.whole(n, "`min_peers`", 2).map(|v| v as usize),
                    None => Some(DEFAULT_MIN_PEERS),
                };
                Some(Condition::AbovePeers {
                    factor: factor?,
                    min_peers: min_peers?,
                })
            }
            _ => {
                if value.is_null() {
                    return Some(Condition::BandsAppear { metric: None });
                }
                let f = self.fields(value, "`bands_appear`", &["metric"])?;
                let metric = match f.get("metric") {
                    Some(n) => Some(self.text(n, "`metric`")?.to_owned()),
                    None => None,
                };
                Some(Condition::BandsAppear { metric })
            }
        }
    }
}

/// The `alert:` of a rule, if it has one written as text.
fn alert_name(rule: &Node) -> Option<(&str, Position)> {
    match &rule.value {
        Value::Mapping(pairs) => pairs
            .iter()
            .find(|(k, _)| k.scalar() == Some("alert"))
            .and_then(|(_, v)| Some((v.scalar()?, v.at))),
        _ => None,
    }
}

/// One `{{ ... }}` of an annotation: `$value` or `$labels.NAME`.
enum Field<'a> {
    Value,
    Label(&'a str),
}

/// The pieces of an annotation template: text, and the fields between `{{` and `}}`.
fn template_pieces(template: &str) -> Result<Vec<Result<&str, Field<'_>>>, String> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        pieces.push(Ok(&rest[..open]));
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or("`{{` without its `}}`")?;
        let inner = after[..close].trim();
        pieces.push(Err(match inner {
            "$value" => Field::Value,
            _ => match inner.strip_prefix("$labels.") {
                Some(name) if is_label_name(name) => Field::Label(name),
                _ => {
                    return Err(format!(
                        "`{{{{ {inner} }}}}`: only `{{{{ $value }}}}` and `{{{{ $labels.NAME }}}}` are known"
                    ))
                }
            },
        }));
        rest = &after[close + 2..];
    }
    pieces.push(Ok(rest));
    Ok(pieces)
}

fn check_template(template: &str) -> Result<(), String> {
    template_pieces(template).map(|_| ())
}

/// An annotation with its fields filled in (a label the alert lacks is empty).
pub fn render(template: &str, labels: &BTreeMap<String, String>, value: f64) -> String {
    let Ok(pieces) = template_pieces(template) else {
        return template.to_owned();
    };
    pieces
        .into_iter()
        .map(|p| match p {
            Ok(text) => text.to_owned(),
            Err(Field::Value) => crate::analysis::figure(value),
            Err(Field::Label(name)) => labels.get(name).cloned().unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
evaluation_interval: 15s
rules:
  - alert: RemoteAccessSpike
    selector: '{zone="a"}'
    event: remote_access
    source: numa_hint_fault
    window: 2m
    condition:
      rate_above: 500
    for: 1m
    labels: {severity: page}
    annotations:
      summary: '{{ $labels.node }} has {{ $value }} per CPU-second'
  - alert: PageFaultsOverBaseline
    event: page_fault
    condition:
      above_baseline: {factor: 3}
  - alert: SlowerThanPeers
    event: page_fault
    condition:
      above_peers: {factor: 2.5, min_peers: 4}
  - alert: FleetSplit
    condition:
      bands_appear:
"#;

    #[test]
    fn a_good_file_is_read_whole() {
        let f = read(GOOD).unwrap();
        assert_eq!(f.evaluation_interval, Duration::from_secs(15));
        assert_eq!(f.rules.len(), 4);
        let r = &f.rules[0];
        assert_eq!(r.name, "RemoteAccessSpike");
        assert_eq!(r.line, 4);
        assert_eq!(r.selector.to_string(), r#"{zone="a"}"#);
        assert_eq!(r.event, Some(EventKind::RemoteAccess));
        assert_eq!(r.source.as_deref(), Some("numa_hint_fault"));
        assert_eq!(r.window, Duration::from_secs(120));
        assert_eq!(r.condition, Condition::RateAbove { rate: 500.0 });
        assert_eq!(r.for_, Duration::from_secs(60));
        assert_eq!(r.labels["severity"], "page");
        assert_eq!(
            f.rules[1].condition,
            Condition::AboveBaseline {
                factor: 3.0,
                baseline: Duration::from_secs(3600)
            }
        );
        assert_eq!(f.rules[1].window, DEFAULT_WINDOW);
        assert_eq!(
            f.rules[2].condition,
            Condition::AbovePeers {
                factor: 2.5,
                min_peers: 4
            }
        );
        assert_eq!(f.rules[3].condition, Condition::BandsAppear { metric: None });
        assert_eq!(f.rules[3].event, None);
    }

    #[test]
    fn every_mistake_is_reported_at_its_line() {
        let bad = r#"evaluation_interval: soon
rules:
  - alert: 9lives
    event: remote_acess
    selector: '{zone="a"'
    condition:
      rate_above: -3
  - alert: Twice
    event: page_fault
    condition:
      rate_above: 1
      above_peers: {factor: 2}
  - alert: Twice
    event: page_fault
    colour: red
    window: 1s
    condition:
      above_baseline: {factor: 0.5}
    labels: {node: x, severity: page}
    annotations: {summary: '{{ $labls.node }}'}
  - alert: NoEvent
    condition: {rate_above: 5}
"#;
        let mistakes = read(bad).unwrap_err();
        let lines: Vec<usize> = mistakes.iter().map(|m| m.at.line).collect();
        let text = mistakes
            .iter()
            .map(|m| format!("{}: {}", m.at.line, m.message))
            .collect::<Vec<_>>()
            .join("\n");
        for (line, says) in [
            (1, "evaluation_interval"),
            (3, "alert name `9lives`"),
            (4, "unknown event `remote_acess`"),
            (5, "selector"),
            (7, "above 0"),
            (12, "exactly one"),
            (13, "a second rule named `Twice`"),
            (15, "unknown field `colour`"),
            (16, "`window` must be from"),
            (18, "`factor` must be above 1"),
            (19, "label `node` is set by the evaluation"),
            (20, "$labls.node"),
            (21, "needs an `event:`"),
        ] {
            assert!(
                mistakes.iter().any(|m| m.at.line == line && m.message.contains(says)),
                "no mistake on line {line} saying {says:?}; got:\n{text}"
            );
        }
        assert!(lines.windows(2).all(|w| w[0] <= w[1]), "in file order: {lines:?}");
    }

    #[test]
    fn a_file_that_is_not_yaml_says_where() {
        let m = read("rules:\n  - alert: A\n    condition: {rate_above: 1\n").unwrap_err();
        assert_eq!(m.len(), 1);
        assert!(m[0].message.starts_with("not valid YAML"), "{m:?}");
        assert!(m[0].at.line >= 3, "{m:?}");
        assert!(read("{}").unwrap_err()[0].message.contains("no `rules:`"));
    }

    #[test]
    fn annotations_are_filled_in() {
        let labels: BTreeMap<String, String> = [("node".to_owned(), "web-3".to_owned())].into();
        assert_eq!(
            render(
                "{{ $labels.node }}: {{$value}} ({{ $labels.zone }})",
                &labels,
                1234.5678
            ),
            "web-3: 1235 ()"
        );
        assert_eq!(render("{{ $value }}", &labels, 0.123456), "0.123");
    }

    #[test]
    fn the_shipped_rule_files_are_valid() {
        for name in ["default.yaml", "demo.yaml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules").join(name);
            let file = load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!file.rules.is_empty());
        }
    }
}
