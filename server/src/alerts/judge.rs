//! Which alerts of a rule are active, from the per-node metrics of its windows ([`Window`]):
//! plain data in, no database, so every condition is tested on made-up fleets.

use std::collections::{BTreeMap, HashMap};

use super::rules::{Condition, Rule};
use crate::analysis::compare::{hardware_class, BandChoice, ClassSplit, Groups, Metric, MetricKind};
use crate::window::Window;

/// An active alert of a rule, as found in one evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// alertname, node or metric, event, source, then the rule's labels.
    pub labels: BTreeMap<String, String>,
    /// The figure the condition judged (a rate per CPU-second; for bands, the slow band's
    /// median of the metric).
    pub value: f64,
    /// What the value was held against (the threshold it crossed).
    pub threshold: f64,
    /// The nodes the alert is about: one, or a band.
    pub nodes: Vec<String>,
    /// Bands only: the other band, the reference a diff is drawn against.
    pub others: Vec<String>,
}

/// The rate series a node condition judges: per source of the rule's event (one source when the
/// rule names it), with each node's samples behind the rate when stored (`None` for `cpu`,
/// whose samples are its measure).
#[derive(Debug)]
pub struct Series<'a> {
    pub source: &'a str,
    pub values: &'a [Option<f64>],
    pub samples: Option<Vec<f64>>,
}

/// The metrics of `w` that `rule` judges.
pub fn series<'a>(rule: &Rule, w: &'a Window) -> Vec<Series<'a>> {
    let Some(event) = rule.event else {
        return Vec::new();
    };
    w.metrics
        .iter()
        .filter_map(|m| {
            let source = match &m.kind {
                MetricKind::EventRate { event: e, source } if e == event.name() => source,
                MetricKind::Cpu { source } if event == bimodal_proto::v1::EventKind::Cpu => source,
                _ => return None,
            };
            if rule.source.as_ref().is_some_and(|s| s != source) {
                return None;
            }
            Some(Series {
                source,
                values: &m.values,
                samples: m
                    .evidence
                    .as_ref()
                    .map(|e| e.iter().map(|e| e.as_ref().map_or(0.0, |e| e.events)).collect()),
            })
        })
        .collect()
}

/// Active alerts of a per-node condition (`rate_above`, `above_baseline`, `above_peers`) in the
/// window `now`, against `baseline` (the window before, for `above_baseline`).
pub fn nodes(rule: &Rule, now: &Window, baseline: Option<&Window>) -> Vec<Found> {
    let event = rule.event.map_or("", |e| e.name());
    let mut found = Vec::new();
    let before: HashMap<&str, Vec<(&str, Option<f64>)>> = match baseline {
        Some(b) => {
            let mut by_node: HashMap<&str, Vec<(&str, Option<f64>)>> = HashMap::new();
            for s in series(rule, b) {
                for (i, v) in s.values.iter().enumerate() {
                    by_node
                        .entry(b.nodes[i].node.as_str())
                        .or_default()
                        .push((s.source, *v));
                }
            }
            by_node
        }
        None => HashMap::new(),
    };
    // Each node's hardware class, and per series each class's measured values, sorted: a node's
    // peers are its class less itself, whose median is read off its class's values
    // ([`median_without`]), not sorted again per node (quadratic: at 10,000 nodes, seconds per
    // evaluation).
    // (Only a rule that compares peers needs them.)
    let peers = matches!(rule.condition, Condition::AbovePeers { .. });
    let classes: Vec<Vec<&str>> = match peers {
        true => now.nodes.iter().map(|n| hardware_class(&n.labels)).collect(),
        false => Vec::new(),
    };
    for s in series(rule, now) {
        let mut by_class: HashMap<&[&str], Vec<f64>> = HashMap::new();
        if peers {
            for (j, class) in classes.iter().enumerate() {
                if let Some(v) = s.values[j] {
                    by_class.entry(class.as_slice()).or_default().push(v);
                }
            }
            for values in by_class.values_mut() {
                values.sort_by(f64::total_cmp);
            }
        }
        // Nodes judged: measured, on enough samples.
        let judged: Vec<usize> = (0..now.nodes.len())
            .filter(|&i| s.values[i].is_some())
            .filter(|&i| s.samples.as_ref().is_none_or(|n| n[i] >= rule.min_samples as f64))
            .collect();
        for &i in &judged {
            let Some(value) = s.values[i] else { continue };
            let node = now.nodes[i].node.as_str();
            let threshold = match &rule.condition {
                Condition::RateAbove { rate } => Some(*rate),
                Condition::AboveBaseline { factor, .. } => before
                    .get(node)
                    .and_then(|v| v.iter().find(|(source, _)| *source == s.source))
                    .and_then(|(_, v)| *v)
                    .map(|b| factor * b),
                Condition::AbovePeers { factor, min_peers } => {
                    let class = &by_class[classes[i].as_slice()];
                    (class.len() > *min_peers).then(|| factor * median_without(class, value))
                }
                Condition::BandsAppear { .. } => None,
            };
            let Some(threshold) = threshold else { continue };
            if value > threshold {
                let mut labels = rule.labels.clone();
                labels.insert("alertname".into(), rule.name.clone());
                labels.insert("node".into(), node.to_owned());
                labels.insert("event".into(), event.to_owned());
                labels.insert("source".into(), s.source.to_owned());
                found.push(Found {
                    labels,
                    value,
                    threshold,
                    nodes: vec![node.to_owned()],
                    others: Vec::new(),
                });
            }
        }
    }
    found
}

/// The alert of `bands_appear`: the nodes of `now` are split into two bands and either were not
/// in `baseline` (the window before) or the alert is already active (it lasts while the bands
/// do). `choice` and `metrics` are `now`'s bands; `before` says whether the baseline had any.
pub fn bands(
    rule: &Rule,
    metrics: &[Metric],
    choice: &BandChoice,
    now: &Window,
    before_had_bands: bool,
    active: bool,
) -> Option<Found> {
    let (Some(chosen), Some(groups)) = (choice.chosen, &choice.groups) else {
        return None;
    };
    if before_had_bands && !active {
        return None;
    }
    // Bands that are the fleet's hardware classes are no news: a fleet of two CPU models would
    // page for as long as it runs both.
    if choice.classes == ClassSplit::Classes && choice.within.is_none() {
        return None;
    }
    let metric = &metrics[chosen];
    let (slow, fast) = slow_band(groups);
    let value = metric.median_of(slow);
    let mut labels = rule.labels.clone();
    labels.insert("alertname".into(), rule.name.clone());
    labels.insert("metric".into(), metric.name.clone());
    Some(Found {
        labels,
        value,
        threshold: metric.threshold_between(&groups.low, &groups.high),
        nodes: now.names(slow).into_iter().map(str::to_owned).collect(),
        others: now.names(fast).into_iter().map(str::to_owned).collect(),
    })
}

/// The slow band (the high band when neither is known to be slow; the slowest level when there
/// are more than two), and the other nodes.
fn slow_band(groups: &Groups) -> (&[usize], &[usize]) {
    match groups.slow {
        Some("low") => (&groups.low, &groups.high),
        _ => (&groups.high, &groups.low),
    }
}

pub(super) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The median of `sorted` (ascending) less one value equal to `value`, which it holds: as
/// [`median`] of the rest, without copying it.
fn median_without(sorted: &[f64], value: f64) -> f64 {
    let at = sorted.partition_point(|v| v.total_cmp(&value).is_lt());
    let rest = |k: usize| if k < at { sorted[k] } else { sorted[k + 1] };
    match sorted.len() - 1 {
        0 => 0.0,
        n if n % 2 == 1 => rest(n / 2),
        n => (rest(n / 2 - 1) + rest(n / 2)) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::bands::Evidence;
    use crate::analysis::compare::{self, Direction};
    use crate::storage::NodeInfo;
    use rand::{RngCore, SeedableRng};

    fn rule(yaml_condition: &str) -> Rule {
        let text = format!(
            "rules:\n  - alert: A\n    event: remote_access\n    min_samples: 5\n    labels: {{severity: page}}\n    condition: {yaml_condition}\n"
        );
        super::super::rules::read(&text).unwrap().rules.remove(0)
    }

    /// A window of nodes `n0…` with remote_access rates from one source, `samples` behind each,
    /// and a cpu_model label per node.
    fn window(rates: &[Option<f64>], samples: f64, models: &[&str]) -> Window {
        let nodes = (0..rates.len())
            .map(|i| NodeInfo {
                node: format!("n{i}"),
                labels: [("cpu_model".to_owned(), models[i % models.len()].to_owned())].into(),
                first_seen: 0,
                last_seen: 0,
                agent_version: String::new(),
                facts: None,
            })
            .collect();
        Window {
            nodes,
            node_cpu_ns: vec![Some(1e9); rates.len()],
            node_cpu_seconds: vec![Some(1.0); rates.len()],
            metrics: vec![Metric {
                kind: MetricKind::EventRate {
                    event: "remote_access".into(),
                    source: "numa_hint_fault".into(),
                },
                name: "remote_access per CPU-second".into(),
                unit: "pages per CPU-second".into(),
                direction: Direction::HigherIsSlower,
                values: rates.to_vec(),
                evidence: Some(
                    rates
                        .iter()
                        .map(|r| {
                            r.map(|_| Evidence {
                                events: samples,
                                exposure: 1.0,
                            })
                        })
                        .collect(),
                ),
            }],
            sources: Vec::new(),
            findings: vec![Vec::new(); rates.len()],
        }
    }

    fn alerted(found: &[Found]) -> Vec<&str> {
        found.iter().map(|f| f.labels["node"].as_str()).collect()
    }

    #[test]
    fn rate_above_judges_each_node_with_enough_samples() {
        let r = rule("{rate_above: 100}");
        let w = window(&[Some(50.0), Some(150.0), None, Some(101.0)], 20.0, &["x"]);
        let found = nodes(&r, &w, None);
        assert_eq!(alerted(&found), ["n1", "n3"]);
        let f = &found[0];
        assert_eq!(f.labels["alertname"], "A");
        assert_eq!(f.labels["event"], "remote_access");
        assert_eq!(f.labels["source"], "numa_hint_fault");
        assert_eq!(f.labels["severity"], "page");
        assert_eq!((f.value, f.threshold), (150.0, 100.0));
        // Too few samples behind a rate: not judged.
        let thin = window(&[Some(500.0)], 4.0, &["x"]);
        assert!(nodes(&r, &thin, None).is_empty());
        // Another source than the rule's: not judged.
        let mut other = rule("{rate_above: 100}");
        other.source = Some("pmu".into());
        assert!(nodes(&other, &w, None).is_empty());
    }

    #[test]
    fn above_baseline_holds_each_node_to_its_own_past() {
        let r = rule("{above_baseline: {factor: 3, baseline: 1h}}");
        let before = window(&[Some(10.0), Some(100.0), Some(10.0), None], 20.0, &["x"]);
        let now = window(&[Some(31.0), Some(250.0), Some(29.0), Some(1000.0)], 20.0, &["x"]);
        let found = nodes(&r, &now, Some(&before));
        // n1 (2.5x) and n2 (2.9x) stay below; n3 had no baseline.
        assert_eq!(alerted(&found), ["n0"]);
        assert_eq!(found[0].threshold, 30.0);
    }

    #[test]
    fn above_peers_compares_within_a_hardware_class() {
        let r = rule("{above_peers: {factor: 3, min_peers: 3}}");
        // Two classes alternating: a0 b1 a2 b3 a4 b5 a6 b7. The b class runs 10x the a class.
        let rates = [10.0, 100.0, 11.0, 110.0, 9.0, 95.0, 40.0, 105.0].map(Some);
        let found = nodes(&r, &window(&rates, 20.0, &["a", "b"]), None);
        // Only n6 stands out in its class (40 against a median of 10); the b class is high
        // against the a class but not against its own.
        assert_eq!(alerted(&found), ["n6"]);
        // Too few peers: nobody is judged.
        let found = nodes(&r, &window(&[Some(1.0), Some(1.0), Some(50.0)], 20.0, &["a"]), None);
        assert!(found.is_empty());
    }

    #[test]
    fn bands_appear_where_there_were_none_and_last_while_they_do() {
        let r = super::super::rules::read(
            "rules:\n  - alert: Split\n    labels: {team: mem}\n    condition: {bands_appear: }\n",
        )
        .unwrap()
        .rules
        .remove(0);
        let mut null = crate::analysis::bands::NullCache::default();
        let config = crate::analysis::bands::BandConfig::default();
        // Twelve nodes a few percent apart; three of them five times higher.
        let split: Vec<Option<f64>> = (0..12)
            .map(|i| Some(if [2, 6, 9].contains(&i) { 500.0 } else { 100.0 } * (1.0 + 0.01 * i as f64)))
            .collect();
        let w = window(&split, 5000.0, &["x"]);
        let choice = compare::find_bands(&w.metrics, &config, &mut null);
        let found = bands(&r, &w.metrics, &choice, &w, false, false).expect("bands found");
        assert_eq!(found.nodes, ["n2", "n6", "n9"]);
        assert_eq!(found.others.len(), 9);
        assert_eq!(found.labels["alertname"], "Split");
        assert_eq!(found.labels["metric"], "remote_access per CPU-second");
        assert_eq!(found.labels["team"], "mem");
        assert!(found.value > 400.0, "{found:?}");
        // Bands the window before had too: not new, unless the alert is already active.
        assert!(bands(&r, &w.metrics, &choice, &w, true, false).is_none());
        assert!(bands(&r, &w.metrics, &choice, &w, true, true).is_some());
        // One band: nothing.
        let one: Vec<Option<f64>> = (0..12).map(|i| Some(100.0 * (1.0 + 0.01 * i as f64))).collect();
        let w = window(&one, 5000.0, &["x"]);
        let choice = compare::find_bands(&w.metrics, &config, &mut null);
        assert!(bands(&r, &w.metrics, &choice, &w, false, false).is_none());
        // The three high nodes are another CPU model, and the rest one model: the bands are the
        // models, no news to page for.
        let mut w = window(&split, 5000.0, &["x"]);
        for (i, node) in w.nodes.iter_mut().enumerate() {
            let model = if [2, 6, 9].contains(&i) { "B" } else { "A" };
            node.labels.insert("cpu_model".into(), model.into());
        }
        let choice = compare::find_bands_by_class(&w.metrics, &w.labels(), &config, &mut null);
        assert_eq!(choice.classes, ClassSplit::Classes);
        assert!(bands(&r, &w.metrics, &choice, &w, false, false).is_none());
    }

    /// A node's peers' median read off its class's sorted values is the median of the others.
    #[test]
    fn the_median_without_a_value_is_the_median_of_the_rest() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(48);
        for n in 1..40 {
            // Ties as well: values from a few levels.
            let values: Vec<f64> = (0..n).map(|_| (rng.next_u32() % 7) as f64).collect();
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            for (i, &v) in values.iter().enumerate() {
                let mut rest: Vec<f64> = values
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .map(|(_, &v)| v)
                    .collect();
                assert_eq!(median_without(&sorted, v), median(&mut rest), "{values:?} without {i}");
            }
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
