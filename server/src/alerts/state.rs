//! The life of an alert: pending while its condition holds for less than the rule's `for:`,
//! firing after, resolved when the condition stops holding (a pending alert whose condition
//! stops is inactive: it never fired). One [`Tracker`] holds every alert the evaluating server
//! knows; each change is stored, so another server (or this one restarted) picks up where it
//! left off.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::judge::Found;
use super::rules::{render, Rule};

/// An alert and its states are rows of the alert history, defined with it in storage.
pub use crate::storage::alerts::{Alert, State};

/// Labels hashed in order (they are sorted): the same labels give the same fingerprint on every
/// server and after restarts.
pub fn fingerprint(labels: &BTreeMap<String, String>) -> u64 {
    let mut bytes = Vec::new();
    for (k, v) in labels {
        bytes.extend_from_slice(k.as_bytes());
        bytes.push(0xff);
        bytes.extend_from_slice(v.as_bytes());
        bytes.push(0xff);
    }
    twox_hash::XxHash64::oneshot(0, &bytes)
}

/// Every alert the evaluating server knows, by fingerprint.
#[derive(Clone, Debug, Default)]
pub struct Tracker {
    alerts: HashMap<u64, Alert>,
}

impl Tracker {
    /// A tracker that continues from stored alerts (the latest state of each).
    pub fn restore(alerts: impl IntoIterator<Item = Alert>) -> Tracker {
        Tracker {
            alerts: alerts.into_iter().map(|a| (a.fingerprint, a)).collect(),
        }
    }

    pub fn get(&self, fingerprint: u64) -> Option<&Alert> {
        self.alerts.get(&fingerprint)
    }

    pub fn get_mut(&mut self, fingerprint: u64) -> Option<&mut Alert> {
        self.alerts.get_mut(&fingerprint)
    }

    /// Whether any alert of `rule` is pending or firing.
    pub fn rule_active(&self, rule: &str) -> bool {
        self.alerts.values().any(|a| a.rule == rule && a.is_active())
    }

    /// Alerts in any state, in no order.
    pub fn alerts(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values()
    }

    /// One evaluation of `rule` at `now` over the window [from, to), which found `found` active;
    /// `selector_of` gives the selector of a found alert's nodes. Returns the alerts whose state
    /// changed, in their new state.
    pub fn step(
        &mut self,
        rule: &Rule,
        found: Vec<Found>,
        now: u32,
        (from, to): (u32, u32),
        selector_of: impl Fn(&Found) -> String,
    ) -> Vec<Alert> {
        let mut changed = Vec::new();
        let mut seen = HashSet::new();
        for f in found {
            let fp = fingerprint(&f.labels);
            seen.insert(fp);
            let annotations = rule
                .annotations
                .iter()
                .map(|(k, t)| (k.clone(), render(t, &f.labels, f.value)))
                .collect();
            let mut new = false;
            let alert = match self.alerts.get_mut(&fp).filter(|a| a.is_active()) {
                Some(a) => a,
                None => {
                    let a = Alert {
                        rule: rule.name.clone(),
                        fingerprint: fp,
                        state: State::Pending,
                        labels: f.labels.clone(),
                        annotations: BTreeMap::new(),
                        value: f.value,
                        active_since: now,
                        fired_at: 0,
                        resolved_at: 0,
                        selector: selector_of(&f),
                        from,
                        to,
                        top_function: String::new(),
                        node_wide: String::new(),
                    };
                    self.alerts.insert(fp, a);
                    let a = self.alerts.get_mut(&fp).expect("just inserted");
                    if rule.for_.is_zero() {
                        a.state = State::Firing;
                        a.fired_at = now;
                    }
                    changed.push(fp);
                    new = true;
                    a
                }
            };
            alert.value = f.value;
            alert.annotations = annotations;
            alert.from = from;
            alert.to = to;
            if alert.state == State::Pending && u64::from(now.saturating_sub(alert.active_since)) >= rule.for_.as_secs()
            {
                alert.state = State::Firing;
                alert.fired_at = now;
                // (A new alert is among those changed already.)
                if !new {
                    changed.push(fp);
                }
            }
        }
        for a in self.alerts.values_mut() {
            if a.rule == rule.name && a.is_active() && !seen.contains(&a.fingerprint) {
                a.state = match a.state {
                    State::Firing => State::Resolved,
                    _ => State::Inactive,
                };
                a.resolved_at = now;
                changed.push(a.fingerprint);
            }
        }
        changed.iter().map(|fp| self.alerts[fp].clone()).collect()
    }

    /// Resolves the active alerts of rules not in `rules` (a rule file that dropped them).
    pub fn retire(&mut self, rules: &HashSet<&str>, now: u32) -> Vec<Alert> {
        let mut changed = Vec::new();
        for a in self.alerts.values_mut() {
            if a.is_active() && !rules.contains(a.rule.as_str()) {
                a.state = match a.state {
                    State::Firing => State::Resolved,
                    _ => State::Inactive,
                };
                a.resolved_at = now;
                changed.push(a.clone());
            }
        }
        changed
    }

    /// Forgets alerts that ended before `before` (they are sent no more).
    pub fn forget_ended(&mut self, before: u32) {
        self.alerts.retain(|_, a| a.is_active() || a.resolved_at >= before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(for_: &str) -> Rule {
        let text = format!(
            "rules:\n  - alert: Spike\n    event: page_fault\n    for: {for_}\n    condition: {{rate_above: 10}}\n    annotations: {{summary: '{{{{ $labels.node }}}} at {{{{ $value }}}}'}}\n"
        );
        super::super::rules::read(&text).unwrap().rules.remove(0)
    }

    fn found(node: &str, value: f64) -> Found {
        Found {
            labels: [
                ("alertname".to_owned(), "Spike".to_owned()),
                ("node".to_owned(), node.to_owned()),
            ]
            .into(),
            value,
            threshold: 10.0,
            nodes: vec![node.to_owned()],
            others: Vec::new(),
        }
    }

    fn states(changed: &[Alert]) -> Vec<(&str, State)> {
        let mut s: Vec<_> = changed.iter().map(|a| (a.labels["node"].as_str(), a.state)).collect();
        s.sort_by_key(|x| x.0);
        s
    }

    fn node_selector(f: &Found) -> String {
        format!("{{node=\"{}\"}}", f.nodes[0])
    }

    #[test]
    fn pending_then_firing_then_resolved() {
        let r = rule("60s");
        let mut t = Tracker::default();
        let w = (0, 300);
        let c = t.step(&r, vec![found("a", 20.0), found("b", 30.0)], 1000, w, node_selector);
        assert_eq!(states(&c), [("a", State::Pending), ("b", State::Pending)]);
        // Still pending, value updated, nothing changed.
        assert!(t
            .step(&r, vec![found("a", 25.0), found("b", 30.0)], 1030, w, node_selector)
            .is_empty());
        let a = t.get(fingerprint(&found("a", 0.0).labels)).unwrap();
        assert_eq!(a.value, 25.0);
        assert_eq!(a.annotations["summary"], "a at 25");
        assert_eq!(a.selector, "{node=\"a\"}");
        // b stops before `for:` is over: inactive. a fires at 60 s.
        let c = t.step(&r, vec![found("a", 25.0)], 1060, w, node_selector);
        assert_eq!(states(&c), [("a", State::Firing), ("b", State::Inactive)]);
        assert_eq!(c[0].active_since, 1000);
        assert!(t.rule_active("Spike"));
        let c = t.step(&r, vec![], 1090, w, node_selector);
        assert_eq!(states(&c), [("a", State::Resolved)]);
        assert_eq!((c[0].fired_at, c[0].resolved_at), (1060, 1090));
        assert!(!t.rule_active("Spike"));
        // It comes back: a new alert with a new start.
        let c = t.step(&r, vec![found("a", 50.0)], 1120, w, node_selector);
        assert_eq!(states(&c), [("a", State::Pending)]);
        assert_eq!(c[0].active_since, 1120);
        t.forget_ended(1100);
        assert_eq!(t.alerts().count(), 1, "b (ended at 1060) is forgotten");
    }

    #[test]
    fn without_for_an_alert_fires_at_once_and_a_restored_one_continues() {
        let r = rule("0s");
        let mut t = Tracker::default();
        let c = t.step(&r, vec![found("a", 20.0)], 1000, (0, 1), node_selector);
        assert_eq!(states(&c), [("a", State::Firing)]);
        // Another server restores the stored alert: the same alert goes on firing, unchanged.
        let mut other = Tracker::restore(c);
        assert!(other
            .step(&r, vec![found("a", 20.0)], 1030, (0, 1), node_selector)
            .is_empty());
        assert_eq!(other.alerts().next().unwrap().active_since, 1000);
        // A rule taken out of the file resolves its alerts.
        let c = other.retire(&HashSet::new(), 1060);
        assert_eq!(states(&c), [("a", State::Resolved)]);
    }

    #[test]
    fn fingerprints_depend_on_labels_only() {
        let a = found("a", 1.0);
        assert_eq!(fingerprint(&a.labels), fingerprint(&found("a", 99.0).labels));
        assert_ne!(fingerprint(&a.labels), fingerprint(&found("b", 1.0).labels));
        assert_eq!(State::from_name("firing"), Some(State::Firing));
    }
}
