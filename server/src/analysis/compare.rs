//! The slow band of a fleet and what differs on it, from per-node values alone.
//!
//! 1. [`find_bands`]: every per-node [`Metric`] is tested for two bands ([`bands::detect`]),
//!    the significance level divided among the metrics (Bonferroni); the strongest split wins.
//! 2. [`label_splits`]: node labels (operator labels and facts: CPU model, NUMA layout, kernel,
//!    THP...) whose values go with the bands (Fisher's exact test per label value).
//! 3. [`code_differences`]: functions whose per-node value, normalized per node, differs between
//!    the bands (a rank test over nodes, [`rank::mann_whitney`]), ranked by effect size;
//!    [`data_differences`]: the same over data objects (where sampled data addresses fell).
//!
//! Values are per node, never summed over a band first: a function large on one node of a band
//! and absent on the others is one node's difference, not the band's.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::bands::{self, BandConfig, Bands, Evidence, NullCache, Split};
use super::{rank, NodeSet, NodeValues};

/// Which way a metric goes on slow nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// More per CPU-second is slower (events per CPU-second, CPU per unit of work).
    HigherIsSlower,
    /// Less is slower (work per CPU-second).
    LowerIsSlower,
    /// Neither says slow by itself (CPU load: more CPU may be more traffic).
    Neither,
}

/// What a metric measures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MetricKind {
    /// CPU-seconds per second of the window, from the `cpu` event's source.
    Cpu { source: String },
    /// One event of one source per CPU-second.
    EventRate { event: String, source: String },
    /// A node counter's increase per second (node-wide, not per workload).
    Counter { name: String },
    /// One counted hardware event per another (node-wide, where the PMU counts both): cycles
    /// per instruction, cache misses per thousand instructions.
    Ratio { numerator: String, denominator: String },
    /// The share of placed memory held far from its threads.
    RemoteMemory,
    /// Units of work per CPU-second (`--work-uprobe`).
    Work,
}

/// One value per node (aligned with the comparison's nodes; `None`: not measured there).
#[derive(Clone, Debug, Serialize)]
pub struct Metric {
    #[serde(flatten)]
    pub kind: MetricKind,
    /// e.g. "page_fault per CPU-second".
    pub name: String,
    /// The values' unit, e.g. "faults per CPU-second".
    pub unit: String,
    pub direction: Direction,
    pub values: Vec<Option<f64>>,
    /// What each value rests on, for metrics that are counts (events per CPU-second, the share
    /// of pages far, counters): tested as counts ([`bands::detect_counts`]).
    #[serde(skip)]
    pub evidence: Option<Vec<Option<Evidence>>>,
}

impl Metric {
    /// The metric measured on `nodes` alone (by index into the comparison's nodes).
    pub fn only(&self, nodes: &[usize]) -> Metric {
        let nodes = NodeSet::of(nodes);
        let keep = |i: usize| nodes.contains(i);
        Metric {
            values: self
                .values
                .iter()
                .enumerate()
                .map(|(i, v)| v.filter(|_| keep(i)))
                .collect(),
            evidence: self
                .evidence
                .as_ref()
                .map(|e| e.iter().enumerate().map(|(i, v)| v.filter(|_| keep(i))).collect()),
            ..self.clone()
        }
    }

    /// The metric of nodes named `names`, aligned with the nodes named `wanted` (`None` for a
    /// node it did not measure): the same metric of another window, set beside this one's.
    pub fn aligned(&self, names: &[&str], wanted: &[&str]) -> Metric {
        let index: std::collections::HashMap<&str, usize> = names.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        Metric {
            values: wanted
                .iter()
                .map(|n| index.get(n).and_then(|&i| self.values.get(i).copied().flatten()))
                .collect(),
            evidence: self.evidence.as_ref().map(|e| {
                wanted
                    .iter()
                    .map(|n| index.get(n).and_then(|&i| e.get(i).copied().flatten()))
                    .collect()
            }),
            ..self.clone()
        }
    }

    /// The median of the values of `nodes` (by index into the comparison's nodes) that have one.
    pub fn median_of(&self, nodes: &[usize]) -> f64 {
        let mut v: Vec<f64> = nodes.iter().filter_map(|&i| self.values[i]).collect();
        v.sort_by(f64::total_cmp);
        match v.is_empty() {
            true => f64::NAN,
            false => bands::median(&v),
        }
    }

    /// A value between `low` and `high` (the geometric mean of the highest of one and the
    /// lowest of the other).
    pub fn threshold_between(&self, low: &[usize], high: &[usize]) -> f64 {
        let top = low
            .iter()
            .filter_map(|&i| self.values[i])
            .fold(f64::NEG_INFINITY, f64::max);
        let bottom = high
            .iter()
            .filter_map(|&i| self.values[i])
            .fold(f64::INFINITY, f64::min);
        (top.max(0.0) * bottom).sqrt()
    }
}

#[cfg(test)]
impl Metric {
    /// Page faults per CPU-second per node, resting on `evidence` where given: the metric the
    /// tests of compare and of its API answer are written with.
    pub(crate) fn page_faults(values: Vec<Option<f64>>, evidence: Option<Vec<Option<Evidence>>>) -> Metric {
        Metric {
            kind: MetricKind::EventRate {
                event: "page_fault".into(),
                source: "page-faults".into(),
            },
            name: "page_fault per CPU-second".into(),
            unit: "faults per CPU-second".into(),
            direction: Direction::HigherIsSlower,
            values,
            evidence,
        }
    }
}

/// One metric's test.
#[derive(Clone, Debug)]
pub struct MetricBands {
    /// Nodes with a value, by index into the comparison's nodes (what `bands` indexes).
    pub measured: Vec<usize>,
    /// Nodes with a value resting on too little evidence to be placed in a band
    /// ([`set_aside`]): neither tested nor deciding the test, by index into the comparison's
    /// nodes.
    pub set_aside: Vec<usize>,
    pub bands: Bands,
}

/// A node's exposure below this share of the fleet's median leaves it too little evidence to be
/// placed, when it also saw fewer than [`bands::MIN_BAND_EVENTS`] events.
pub const SET_ASIDE_EXPOSURE: f64 = 0.1;

/// The nodes (by index into `evidence`) whose value of a count rests on too little: fewer than
/// [`bands::MIN_BAND_EVENTS`] events over less than [`SET_ASIDE_EXPOSURE`] of the median
/// exposure (a node that ran a few milliseconds of CPU in the window). Their few events say
/// nothing of their rate: a fast node and a slow one would both show none or one. Set aside, such
/// a node neither lands in a band by the floor its zero is raised to (half an event over its
/// tiny exposure: the highest value of the fleet) nor vetoes the fleet's bands for resting on
/// few events. A node that ran as long as the others and saw few events is measured: it is low.
pub fn set_aside(evidence: &[Option<Evidence>]) -> Vec<usize> {
    let mut exposures: Vec<f64> = evidence
        .iter()
        .flatten()
        .map(|e| e.exposure)
        .filter(|x| *x > 0.0)
        .collect();
    if exposures.is_empty() {
        return Vec::new();
    }
    exposures.sort_by(f64::total_cmp);
    let median = exposures[exposures.len() / 2];
    (0..evidence.len())
        .filter(|&i| {
            evidence[i].is_some_and(|e| e.events < bands::MIN_BAND_EVENTS && e.exposure < SET_ASIDE_EXPOSURE * median)
        })
        .collect()
}

/// Two groups of nodes by index: `high` had the higher values of the metric that split them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Groups {
    pub low: Vec<usize>,
    pub high: Vec<usize>,
    /// Which group is slow, when the metric says (`"high"` or `"low"`).
    pub slow: Option<&'static str>,
}

/// Nodes of each group whose functions and data objects an explanation reads by default: a
/// rank test over 100 nodes against 100 finds any difference worth listing (complete separation
/// gives p ≈ 1e-34; an effect of 0.3 about 1e-4), and the reads then cost as much at 10,000
/// nodes as at 200 (docs/design/028).
pub const EXPLAINED_PER_GROUP: usize = 100;

impl Groups {
    /// At most `per_group` nodes of each group, named by `name`: those whose names hash lowest,
    /// so the same nodes of a fleet are read from one request and one window to the next, and
    /// spread over the group whatever the order of its nodes. A group within the bound is kept
    /// as it is; a sampled one is in ascending order.
    pub fn sampled<'a>(&self, name: impl Fn(usize) -> &'a str, per_group: usize) -> Groups {
        let take = |members: &[usize]| -> Vec<usize> {
            if members.len() <= per_group {
                return members.to_vec();
            }
            let mut keyed: Vec<(u64, usize)> = members
                .iter()
                .map(|&i| (twox_hash::XxHash64::oneshot(0, name(i).as_bytes()), i))
                .collect();
            keyed.sort_unstable();
            let mut kept: Vec<usize> = keyed[..per_group].iter().map(|&(_, i)| i).collect();
            kept.sort_unstable();
            kept
        };
        Groups {
            low: take(&self.low),
            high: take(&self.high),
            slow: self.slow,
        }
    }

    /// Every node of both, ascending.
    pub fn nodes(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self.low.iter().chain(&self.high).copied().collect();
        all.sort_unstable();
        all
    }
}

/// A node of the bands that ran in one band in the first half of the window and in the other
/// in the second: a node that turned slow (or recovered) half-way through lands in a band by its
/// average over the window, with nothing to say so.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MovedWithin {
    /// Index of the node in the window.
    #[serde(skip)]
    pub node: usize,
    /// The metric in each half.
    pub first: f64,
    pub second: f64,
    /// The band each half's value lies in.
    pub first_band: &'static str,
    pub second_band: &'static str,
    /// Where the metric counts events: the p-value of "one rate throughout" from the node's
    /// events and exposure in each half ([`rank::rate_change`]).
    pub p_value: Option<f64>,
}

/// How unlikely a node's two halves must be under one rate to be said to have moved: tested
/// only on the nodes whose halves already lie clearly in different bands, so even a fleet of
/// 10,000 nodes flags fewer than one by chance.
pub const MOVED_WITHIN_P: f64 = 1e-4;

/// The nodes of `groups` whose metric lies clearly in one band in the first half (`first`,
/// aligned with the window's nodes) and clearly in the other in the second. A half's value is
/// in a band when it lies beyond both the bands' threshold and the geometric middle of their
/// medians on that band's side: a node that hovers at the threshold is in neither, not moved.
/// Where the metric counts events, the halves' rates must also differ beyond noise
/// ([`MOVED_WITHIN_P`]).
pub fn moved_within(metric: &Metric, groups: &Groups, first: &Metric, second: &Metric) -> Vec<MovedWithin> {
    let threshold = metric.threshold_between(&groups.low, &groups.high);
    let middle = (metric.median_of(&groups.low).max(0.0) * metric.median_of(&groups.high)).sqrt();
    let (above, below) = (threshold.max(middle), threshold.min(middle));
    let band = |v: f64| -> Option<&'static str> {
        if v > above {
            Some("high")
        } else if v < below || (v == 0.0 && below == 0.0) {
            Some("low")
        } else {
            None
        }
    };
    let evidence = |m: &Metric, i: usize| m.evidence.as_ref().and_then(|e| e.get(i).copied().flatten());
    let mut moved = Vec::new();
    for &i in groups.nodes().iter() {
        let (Some(Some(a)), Some(Some(b))) = (first.values.get(i), second.values.get(i)) else {
            continue;
        };
        let (Some(first_band), Some(second_band)) = (band(*a), band(*b)) else {
            continue;
        };
        if first_band == second_band {
            continue;
        }
        let p_value = match (evidence(first, i), evidence(second, i)) {
            (Some(x), Some(y)) => Some(rank::rate_change(x.events, x.exposure, y.events, y.exposure)),
            _ => None,
        };
        if p_value.is_some_and(|p| p >= MOVED_WITHIN_P) {
            continue;
        }
        moved.push(MovedWithin {
            node: i,
            first: *a,
            second: *b,
            first_band,
            second_band,
            p_value,
        });
    }
    moved
}

/// Every metric's test and the strongest split.
#[derive(Clone, Debug)]
pub struct BandChoice {
    /// Each metric's test over every node.
    pub tested: Vec<MetricBands>,
    /// Index into the metrics of the split chosen.
    pub chosen: Option<usize>,
    pub groups: Option<Groups>,
    /// The test the groups come from: the chosen metric's over every node, or over the nodes of
    /// [`BandChoice::within`]'s class.
    pub answer: Option<MetricBands>,
    /// The significance level each metric was held to.
    pub alpha_per_metric: f64,
    /// Where the split over every node lies among the fleet's hardware classes.
    pub classes: ClassSplit,
    /// The hardware class the groups lie in, when they were found within one.
    pub within: Option<HardwareClass>,
}

/// Node facts that make a hardware class: nodes of one class are the same machine, and a
/// metric may differ between classes (a CPU model's CPI, a NUMA layout's remote accesses)
/// without any node running slow.
pub const HARDWARE_CLASS_LABELS: &[&str] = &["cpu_model", "sockets", "numa_nodes"];

/// A node's hardware class: its values of [`HARDWARE_CLASS_LABELS`] ("" where it has none).
pub fn hardware_class(labels: &BTreeMap<String, String>) -> Vec<&str> {
    HARDWARE_CLASS_LABELS
        .iter()
        .map(|l| labels.get(*l).map_or("", String::as_str))
        .collect()
}

/// A hardware class and its nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HardwareClass {
    /// The class's labels, e.g. `cpu_model` → "AMD EPYC 7B13" (those the nodes have).
    pub labels: BTreeMap<String, String>,
    /// Its nodes, by index into the comparison's nodes.
    pub nodes: Vec<usize>,
}

/// The fleet's hardware classes, the largest first.
pub fn hardware_classes(labels: &[BTreeMap<String, String>]) -> Vec<HardwareClass> {
    let mut by_class: BTreeMap<Vec<&str>, Vec<usize>> = BTreeMap::new();
    for (i, l) in labels.iter().enumerate() {
        by_class.entry(hardware_class(l)).or_default().push(i);
    }
    let mut classes: Vec<HardwareClass> = by_class
        .into_iter()
        .map(|(values, nodes)| HardwareClass {
            labels: HARDWARE_CLASS_LABELS
                .iter()
                .zip(values)
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            nodes,
        })
        .collect();
    classes.sort_by(|a, b| b.nodes.len().cmp(&a.nodes.len()).then(a.labels.cmp(&b.labels)));
    classes
}

/// Where a split over every node lies among the hardware classes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassSplit {
    /// The fleet is one class (or no split was found).
    OneClass,
    /// Every class lies in one band, but for its own tail ([`CLASS_TAIL`]), and the bands hold
    /// different classes: the bands are hardware classes, not slow nodes.
    Classes,
    /// The bands cut across the classes.
    Across,
}

/// The share of a class's nodes that may lie in the other band while the class still lies in
/// one: the tail of its node-to-node noise past the cut. Two classes 5 σ apart (cycles per
/// instruction 1.0 and 1.3 at σ 0.05) put a node or two of 400 past a cut between them; a
/// split that wholly followed the classes was "across" them in every fleet of 1,000 nodes of the
/// statistics benchmark, and the classes were called slow nodes.
pub const CLASS_TAIL: f64 = 0.1;

impl ClassSplit {
    /// How `groups` lie among `classes`.
    pub fn of(groups: Option<&Groups>, classes: &[HardwareClass]) -> ClassSplit {
        let Some(groups) = groups else {
            return ClassSplit::OneClass;
        };
        if classes.len() < 2 {
            return ClassSplit::OneClass;
        }
        let (high, low) = (NodeSet::of(&groups.high), NodeSet::of(&groups.low));
        let mut sides = Vec::new();
        for class in classes {
            let (in_low, in_high) = class.nodes.iter().fold((0usize, 0usize), |(l, h), i| {
                (l + usize::from(low.contains(*i)), h + usize::from(high.contains(*i)))
            });
            let placed = in_low + in_high;
            if placed == 0 {
                continue;
            }
            match in_low.min(in_high) as f64 <= CLASS_TAIL * placed as f64 {
                true => sides.push(in_high > in_low),
                false => return ClassSplit::Across,
            }
        }
        match sides.contains(&false) && sides.contains(&true) {
            true => ClassSplit::Classes,
            false => ClassSplit::Across,
        }
    }

    /// The classes of `classes` most of whose nodes lie in `nodes`.
    pub fn mostly_in<'a>(classes: &'a [HardwareClass], nodes: &[usize]) -> Vec<&'a HardwareClass> {
        let nodes = NodeSet::of(nodes);
        classes
            .iter()
            .filter(|c| 2 * c.nodes.iter().filter(|&&i| nodes.contains(i)).count() > c.nodes.len())
            .collect()
    }
}

/// [`find_bands`] over every node and within each hardware class of at least
/// [`BandConfig::min_fleet`] nodes (`labels`: each node's, for its class; the level divided
/// among the classes as well). The answer is the split over every node, unless that split is
/// the hardware classes themselves or there is none: then the strongest split within a class,
/// when one has any ("within class B, these nodes" rather than "class B"). A split over every
/// node whose slow nodes all lie in one class with bands of its own names that class.
pub fn find_bands_by_class(
    metrics: &[Metric],
    labels: &[BTreeMap<String, String>],
    config: &BandConfig,
    null: &mut NullCache,
) -> BandChoice {
    let mut fleet = find_bands(metrics, config, null);
    let classes = hardware_classes(labels);
    fleet.classes = ClassSplit::of(fleet.groups.as_ref(), &classes);
    if classes.len() < 2 {
        return fleet;
    }
    let big: Vec<&HardwareClass> = classes.iter().filter(|c| c.nodes.len() >= config.min_fleet()).collect();
    let per_class = BandConfig {
        alpha: config.alpha / big.len().max(1) as f64,
        ..config.clone()
    };
    let found: Vec<(&HardwareClass, BandChoice)> = big
        .into_iter()
        .map(|class| {
            let only: Vec<Metric> = metrics.iter().map(|m| m.only(&class.nodes)).collect();
            (class, find_bands(&only, &per_class, null))
        })
        .filter(|(_, choice)| choice.chosen.is_some())
        .collect();
    if fleet.classes == ClassSplit::Across {
        // The fleet's own split stands; when its slow nodes all lie in one class that has bands
        // of its own, that class is named and the slow nodes are set against the rest of it.
        let slow_of = |g: &Groups| -> Vec<usize> {
            match g.slow {
                Some("low") => g.low.clone(),
                _ => g.high.clone(),
            }
        };
        let slow = fleet.groups.as_ref().map(slow_of);
        let within = found.iter().find(|(class, _)| {
            let members = NodeSet::of(&class.nodes);
            slow.as_ref()
                .is_some_and(|slow| slow.iter().all(|&i| members.contains(i)))
        });
        fleet.within = within.map(|(class, _)| (*class).clone());
        // The class's own split of the same metric, when its slow nodes are some of the fleet's:
        // searched at the class's own scale, it leaves out the tail of the class that the
        // fleet's cut took with a few slow nodes (1% of a class 2× slower: exact in 52% of
        // fleets of 1,000 nodes of the statistics benchmark before).
        if let (Some((_, own)), Some(slow)) = (within, &slow) {
            let own_slow = own.groups.as_ref().map(slow_of).unwrap_or_default();
            let fleet_slow = NodeSet::of(slow);
            if own.chosen == fleet.chosen && !own_slow.is_empty() && own_slow.iter().all(|&i| fleet_slow.contains(i)) {
                fleet.groups = own.groups.clone();
                fleet.answer = own.answer.clone();
            }
        }
        // Compared with their own class: another model's functions would differ anyway.
        if let (Some(class), Some(groups)) = (&fleet.within, fleet.groups.as_mut()) {
            let other = match groups.slow {
                Some("low") => &mut groups.high,
                _ => &mut groups.low,
            };
            let members = NodeSet::of(&class.nodes);
            other.retain(|&i| members.contains(i));
        }
        return fleet;
    }
    let strongest = found
        .into_iter()
        .filter_map(|(class, choice)| {
            let (p, d) = match &choice.answer.as_ref()?.bands {
                Bands::Two(split) => (split.p_value, split.d),
                Bands::None { .. } => return None,
            };
            Some((class, choice, p, d))
        })
        .min_by(|a, b| a.2.total_cmp(&b.2).then(b.3.total_cmp(&a.3)));
    if let Some((class, choice, _, _)) = strongest {
        fleet.chosen = choice.chosen;
        fleet.groups = choice.groups;
        fleet.answer = choice.answer;
        fleet.within = Some(class.clone());
    }
    fleet
}

/// Tests every metric and chooses the strongest two-band split: among metrics that say which
/// way is slow first (bands of CPU load alone may be bands of traffic), the smallest p-value,
/// then the largest Cohen's d. `config.alpha` is the fleet-wide level, divided among the metrics;
/// the null is drawn finely enough for the divided level to be reachable.
pub fn find_bands(metrics: &[Metric], config: &BandConfig, null: &mut NullCache) -> BandChoice {
    let tested_count = metrics.len().max(1);
    let alpha = config.alpha / tested_count as f64;
    let mut per_metric = config.clone();
    per_metric.alpha = alpha;
    // A p-value can be as small as 1 / (draws + 1): ten times finer than the level.
    per_metric.null_draws = config.null_draws.max((10.0 / alpha).ceil() as usize - 1);
    let tested: Vec<MetricBands> = metrics
        .iter()
        .map(|m| {
            let with_value: Vec<usize> = (0..m.values.len())
                .filter(|&i| m.values[i].is_some_and(f64::is_finite))
                .collect();
            let set_aside: Vec<usize> = match &m.evidence {
                Some(evidence) => {
                    let of: Vec<Option<Evidence>> = with_value.iter().map(|&i| evidence[i]).collect();
                    set_aside(&of).into_iter().map(|k| with_value[k]).collect()
                }
                None => Vec::new(),
            };
            let aside = NodeSet::of(&set_aside);
            let measured: Vec<usize> = with_value.into_iter().filter(|&i| !aside.contains(i)).collect();
            let values: Vec<f64> = measured.iter().map(|&i| m.values[i].unwrap_or(0.0)).collect();
            let bands = match &m.evidence {
                Some(evidence) => {
                    let evidence: Vec<Option<Evidence>> = measured.iter().map(|&i| evidence[i]).collect();
                    bands::detect_counts(&values, &evidence, &per_metric, null)
                }
                None => bands::detect(&values, &per_metric, null),
            };
            MetricBands {
                bands,
                measured,
                set_aside,
            }
        })
        .collect();
    let chosen = tested
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match &t.bands {
            Bands::Two(split) => Some((i, split, metrics[i].direction == Direction::Neither)),
            Bands::None { .. } => None,
        })
        .min_by(|a, b| {
            a.2.cmp(&b.2)
                .then(a.1.p_value.total_cmp(&b.1.p_value))
                .then(b.1.d.total_cmp(&a.1.d))
        })
        .map(|(i, _, _)| i);
    let groups = chosen.map(|i| {
        let Bands::Two(split) = &tested[i].bands else {
            unreachable!("chosen among splits")
        };
        groups_of(split, &tested[i].measured, metrics[i].direction)
    });
    BandChoice {
        answer: chosen.map(|i| tested[i].clone()),
        tested,
        chosen,
        groups,
        alpha_per_metric: alpha,
        classes: ClassSplit::OneClass,
        within: None,
    }
}

/// The groups a split gives: its two bands, or, when it has more than two levels and the metric
/// says which way is slow, the slowest level against every other (the slowest is the answer;
/// the others are listed beside it).
fn groups_of(split: &Split, measured: &[usize], direction: Direction) -> Groups {
    let nodes = |idx: &[usize]| -> Vec<usize> { idx.iter().map(|&i| measured[i]).collect() };
    let rest = |skip: usize| -> Vec<usize> {
        let mut all: Vec<usize> = (0..split.levels.len())
            .filter(|&l| l != skip)
            .flat_map(|l| nodes(&split.levels[l]))
            .collect();
        all.sort_unstable();
        all
    };
    let levels = split.levels.len();
    let (low, high) = match direction {
        Direction::HigherIsSlower if levels > 2 => (rest(levels - 1), nodes(&split.levels[levels - 1])),
        Direction::LowerIsSlower if levels > 2 => (nodes(&split.levels[0]), rest(0)),
        _ => (nodes(&split.low), nodes(&split.high)),
    };
    Groups {
        low,
        high,
        slow: match direction {
            Direction::HigherIsSlower => Some("high"),
            Direction::LowerIsSlower => Some("low"),
            Direction::Neither => None,
        },
    }
}

/// How a yes/no property of nodes (a label value, a finding) goes with the bands.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Association {
    /// Nodes of each band with the property, and the band's size.
    pub high_with: usize,
    pub high_nodes: usize,
    pub low_with: usize,
    pub low_nodes: usize,
    /// Fisher's exact test of "the property does not go with the band".
    pub p_value: f64,
}

impl Association {
    /// The association of a property (a label value, a finding) that `high_with` nodes of
    /// `groups`' high band and `low_with` of its low band have: many properties are counted in
    /// one pass over the nodes, never one pass per property.
    pub fn counted(groups: &Groups, high_with: usize, low_with: usize) -> Association {
        let (high_nodes, low_nodes) = (groups.high.len(), groups.low.len());
        Association {
            high_with,
            high_nodes,
            low_with,
            low_nodes,
            p_value: rank::fisher(high_with, high_nodes - high_with, low_with, low_nodes - low_with),
        }
    }

    /// Whether the property holds on every node of one band and no node of the other.
    pub fn exact(&self) -> bool {
        (self.high_with == self.high_nodes && self.low_with == 0)
            || (self.low_with == self.low_nodes && self.high_with == 0)
    }
}

/// A label value that goes with one band.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LabelSplit {
    pub label: String,
    pub value: String,
    #[serde(flatten)]
    pub association: Association,
}

/// Per label, the value that best goes with the bands, strongest first. Labels with one value
/// over the bands' nodes, or a different value on every node (the node name), say nothing.
pub fn label_splits(labels: &[BTreeMap<String, String>], groups: &Groups) -> Vec<LabelSplit> {
    let in_bands: Vec<usize> = groups.low.iter().chain(&groups.high).copied().collect();
    let keys: BTreeSet<&str> = in_bands
        .iter()
        .flat_map(|&i| labels[i].keys().map(String::as_str))
        .collect();
    let value = |i: usize, key: &str| labels[i].get(key).map(String::as_str).unwrap_or("");
    // Per label, each value's nodes in each band, counted in one pass: a label of thousands of
    // values (a rack, a pod's address) over 100,000 nodes, tested value by value over every
    // node, was quadratic.
    let mut splits: Vec<LabelSplit> = keys
        .into_iter()
        .filter_map(|key| {
            let mut values: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
            for &i in &groups.high {
                values.entry(value(i, key)).or_default().0 += 1;
            }
            for &i in &groups.low {
                values.entry(value(i, key)).or_default().1 += 1;
            }
            if values.len() < 2 || values.len() == in_bands.len() {
                return None;
            }
            values
                .into_iter()
                .map(|(v, (high_with, low_with))| LabelSplit {
                    label: key.to_owned(),
                    value: v.to_owned(),
                    association: Association::counted(groups, high_with, low_with),
                })
                .min_by(|a, b| a.association.p_value.total_cmp(&b.association.p_value))
        })
        .collect();
    splits.sort_by(|a, b| {
        a.association
            .p_value
            .total_cmp(&b.association.p_value)
            .then_with(|| a.label.cmp(&b.label))
    });
    splits
}

/// A finding (memory held far from its threads, ...) present on nodes of one band more than
/// the other.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FindingSplit {
    /// What is found, the same words on every node (e.g. `bss of scylla (/usr/bin/scylla) on
    /// a NUMA node none of its threads ran on`).
    pub finding: String,
    #[serde(flatten)]
    pub association: Association,
    /// One node's finding in full, with its figures.
    pub example: String,
}

/// Findings per node (finding, that node's text), each tested against the bands; strongest
/// first. A finding on every node of the bands or on none of them says nothing.
pub fn finding_splits(findings: &[Vec<(String, String)>], groups: &Groups) -> Vec<FindingSplit> {
    // Per finding: the nodes of each band that have it (each node once), and an example.
    let mut on: BTreeMap<&str, ([usize; 2], &str)> = BTreeMap::new();
    // The high band first: the example comes from it when it has the finding.
    for (band, nodes) in [(0, &groups.high), (1, &groups.low)] {
        for &i in nodes {
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            for (finding, text) in &findings[i] {
                if seen.insert(finding.as_str()) {
                    on.entry(finding.as_str()).or_insert_with(|| ([0, 0], text.as_str())).0[band] += 1;
                }
            }
        }
    }
    let total = groups.low.len() + groups.high.len();
    let mut splits: Vec<FindingSplit> = on
        .into_iter()
        .filter(|(_, ([high, low], _))| high + low < total)
        .map(|(finding, ([high, low], example))| FindingSplit {
            finding: finding.to_owned(),
            association: Association::counted(groups, high, low),
            example: example.to_owned(),
        })
        .collect();
    splits.sort_by(|a, b| {
        a.association
            .p_value
            .total_cmp(&b.association.p_value)
            .then_with(|| a.finding.cmp(&b.finding))
    });
    splits
}

/// Whether a function's own samples or its callees' too are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Samples whose leaf is the function.
    SelfValue,
    /// Samples with the function anywhere on the stack.
    TotalValue,
}

/// One function's values per node for one event and source, aligned with the comparison's
/// nodes (`None`: the node has no value to normalize by).
#[derive(Clone, Debug)]
pub struct FunctionValues {
    pub function: String,
    pub module: String,
    pub self_values: NodeValues,
    pub total_values: NodeValues,
}

/// The functions of one event and source, already normalized per node.
#[derive(Clone, Debug)]
pub struct FunctionTable {
    pub event: String,
    pub source: String,
    /// The normalized values' unit ("faults per CPU-second", "share of CPU time").
    pub unit: String,
    pub functions: Vec<FunctionValues>,
}

/// How one thing's per-node values differ between the bands, whatever the thing is (a
/// function, a data object).
#[derive(Clone, Debug, Serialize)]
pub struct Difference {
    pub event: String,
    pub source: String,
    pub unit: String,
    /// Per-node values of each band (in the groups' node order, nodes without a value left
    /// out), for dot plots.
    pub low: Vec<f64>,
    pub high: Vec<f64>,
    pub low_median: f64,
    pub high_median: f64,
    /// The difference of the medians as a share of the event's largest median in this
    /// comparison (its whole, near the root of the stacks): how much of the event it moves.
    pub weight: f64,
    /// Rank-biserial correlation: 1 when every node of the high band is above every node of
    /// the low band.
    pub effect: f64,
    pub p_value: f64,
    /// Benjamini–Hochberg over every function tested in this comparison.
    pub q_value: f64,
}

/// A function whose per-node value differs between the bands.
#[derive(Clone, Debug, Serialize)]
pub struct CodeDifference {
    pub function: String,
    pub module: String,
    pub measure: Measure,
    /// Whether its value moved with its event's whole on each node ([`node_wholes`]) and its
    /// share of that whole did not: a node-wide shift (every stack of the event ×4: THP off,
    /// remote memory, a smaller cache), not this function's doing. Listed after the functions
    /// of its event whose share moved.
    pub with_whole: bool,
    /// For a function of the event the bands were cut on: its difference tested on the half of
    /// the window that did not cut the groups ([`super::held_out`]); `None` for other events, and
    /// where the window has no halves or the halves no values of the function.
    pub held_out: Option<super::held_out::HeldOut>,
    #[serde(flatten)]
    pub difference: Difference,
}

/// Each node's whole of a table's event: the largest inclusive value of any function on it (the
/// functions near the root of every stack), `None` where no function has a value.
pub fn node_wholes(table: &FunctionTable) -> Vec<Option<f64>> {
    let nodes = table.functions.first().map_or(0, |f| f.self_values.len());
    (0..nodes)
        .map(|i| {
            table
                .functions
                .iter()
                .filter_map(|f| f.total_values[i].or(f.self_values[i]))
                .reduce(f64::max)
        })
        .collect()
}

/// An event whose whole differs between the groups node-wide.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeWide {
    pub event: String,
    pub source: String,
    pub unit: String,
    pub low_median: f64,
    pub high_median: f64,
    /// `high_median / low_median`.
    pub factor: f64,
    pub effect: f64,
    pub p_value: f64,
    /// Functions listed whose difference is this shift (their share did not move).
    pub functions: usize,
}

/// The events whose whole per node differs consistently between the groups (the test a
/// function is listed by) as a shift of the node, with how many of the `listed` differences
/// only follow it: "every page-fault stack ×4, node-wide". An event none of whose listed
/// functions follows its whole moved by those functions, and is not listed.
pub fn node_wide(tables: &[FunctionTable], groups: &Groups, listed: &[CodeDifference]) -> Vec<NodeWide> {
    let mut out = Vec::new();
    for table in tables {
        let wholes = node_wholes(table);
        let pick =
            |nodes: &[usize]| -> Vec<f64> { nodes.iter().filter_map(|&i| wholes.get(i).copied().flatten()).collect() };
        let (low, high) = (pick(&groups.low), pick(&groups.high));
        if low.len() < 2 || high.len() < 2 {
            continue;
        }
        let test = rank::mann_whitney(&low, &high);
        let (low_median, high_median) = (median(&low), median(&high));
        if test.effect.abs() < MIN_LISTED_EFFECT || test.p_value > MAX_LISTED_P || low_median <= 0.0 {
            continue;
        }
        let functions = listed
            .iter()
            .filter(|d| d.with_whole && d.difference.event == table.event && d.difference.source == table.source)
            .count();
        // A whole moved by some functions' own shifts is not a shift of the node.
        if functions == 0 {
            continue;
        }
        out.push(NodeWide {
            event: table.event.clone(),
            source: table.source.clone(),
            unit: table.unit.clone(),
            low_median,
            high_median,
            factor: high_median / low_median,
            effect: test.effect,
            p_value: test.p_value,
            functions,
        });
    }
    out
}

/// Smallest |effect| listed: below it the bands overlap more than they differ.
pub const MIN_LISTED_EFFECT: f64 = 0.5;
/// Code differences compare lists by default, and an alert's first cause is chosen among: the
/// held-out q-values depend on how many of the band event's functions are listed.
pub const LISTED: usize = 50;
/// Largest p-value listed. Small bands cannot go far below it (3 nodes against 5: 0.036 when
/// every slow node is above every fast one), so the q-value is given beside it, not required.
pub const MAX_LISTED_P: f64 = 0.05;
/// A function's own share of its event's whole from which its shift is its own, not the node's.
pub const MOST_OF_THE_EVENT: f64 = 0.5;
/// Weights this close to the heaviest left rank as equal.
pub const WEIGHT_STEP: f64 = 0.05;

/// When the heaviest difference left is a caller's total, a function's own samples that moved at
/// least this share of it rank beside it: the callee whose samples moved is the answer, not the
/// caller whose total carried them (`main` first in 12.5% of the statistics benchmark's fleets
/// of 100 nodes where the third largest function moved ×4, before).
pub const CALLEE_OF_TOTAL: f64 = 0.5;

/// Why no function can be listed between `groups`, when they are too small for it: the rank
/// test's smallest p-value for the most nodes of each group any function has values on (every
/// node of one above every node of the other) is above [`MAX_LISTED_P`] (2 nodes against 7,
/// 3 against 4, one node against 38: a node without CPU time, or with short chains for totals,
/// has no value). `None` when a difference could be listed, or there is nothing to rank.
pub fn too_few_to_rank(tables: &[FunctionTable], groups: &Groups) -> Option<String> {
    let valued = |members: &[usize], values: &NodeValues| members.iter().filter(|&&i| values[i].is_some()).count();
    let (mut low, mut high) = (0, 0);
    for f in tables.iter().flat_map(|t| &t.functions) {
        for values in [&f.self_values, &f.total_values] {
            low = low.max(valued(&groups.low, values));
            high = high.max(valued(&groups.high, values));
        }
    }
    if low == 0 && high == 0 {
        return None;
    }
    if low == 0 || high == 0 {
        return Some(format!(
            "too few nodes to rank functions: no node of the {} group has a value",
            if low == 0 { "low" } else { "high" }
        ));
    }
    let apart: Vec<f64> = (0..low + high).map(|i| i as f64).collect();
    let best = rank::mann_whitney(&apart[..low], &apart[low..]).p_value;
    (best > MAX_LISTED_P).then(|| {
        format!(
            "too few nodes to rank functions: {high} against {low} nodes with values reach p = {best:.3} \
             at best (every node of one group above every node of the other), above the \
             {MAX_LISTED_P} a difference is listed at"
        )
    })
}

/// Functions whose normalized per-node values differ between the bands consistently (|effect|
/// at least [`MIN_LISTED_EFFECT`], p at most [`MAX_LISTED_P`]), the largest first: by
/// [`CodeDifference::weight`], taking among those within [`WEIGHT_STEP`] of the heaviest left,
/// so that a function going from nothing to a trace does not outrank one that moved half the
/// event; within that window user code before
/// kernel code (the kernel path an event is taken on, a fault handler or `task_numa_fault`, is
/// in every stack of the event: the code that drove it is the answer), a function's own
/// samples before its callers' totals (which the callee's difference often accounts for), then
/// by |effect| and weight.
/// Every function is tested on its self value and, where it has callees, its total value.
pub fn code_differences(tables: &[FunctionTable], groups: &Groups, limit: usize) -> Vec<CodeDifference> {
    let mut found = Vec::new();
    for table in tables {
        let first = found.len();
        let wholes = node_wholes(table);
        // Shares of the whole: judged where at least two nodes of each group have a whole (a
        // group with none of the event gained the event; that is no shift of a whole).
        let whole = |i: usize| wholes.get(i).copied().flatten().filter(|&w| w > 0.0);
        let has_whole = |nodes: &[usize]| nodes.iter().filter(|&&i| whole(i).is_some()).count() >= 2;
        let shares_judged = has_whole(&groups.low) && has_whole(&groups.high);
        // Per difference of this table, where shares are judged: how its share of the whole moved
        // (the rank test's effect, the log shares' p-value), whether its own samples are most of
        // the event, and whether the difference is of its own samples.
        let mut shares: Vec<Option<(f64, f64, bool, bool)>> = Vec::new();
        for f in &table.functions {
            // Totals left unmeasured on some nodes (short chains) say nothing of callees.
            let has_callees = f
                .self_values
                .pairs(&f.total_values)
                .any(|(own, total)| total.is_some() && own != total);
            let measures = [
                (Measure::SelfValue, &f.self_values),
                (Measure::TotalValue, &f.total_values),
            ];
            for (measure, values) in measures {
                if measure == Measure::TotalValue && !has_callees {
                    continue;
                }
                let pick = |nodes: &[usize]| -> Vec<f64> { nodes.iter().filter_map(|&i| values[i]).collect() };
                let (low, high) = (pick(&groups.low), pick(&groups.high));
                if low.is_empty() || high.is_empty() || low.iter().chain(&high).all(|&v| v == 0.0) {
                    continue;
                }
                let test = rank::mann_whitney(&low, &high);
                // Its share of the whole on each node: how it moved, and whether its own samples
                // are a minor part of the event (a function that is most of its event is the
                // event: its shift is its own, however the whole moved).
                shares.push(shares_judged.then(|| {
                    let share = |nodes: &[usize]| -> Vec<f64> {
                        nodes.iter().filter_map(|&i| Some(values[i]? / whole(i)?)).collect()
                    };
                    let (low_share, high_share) = (share(&groups.low), share(&groups.high));
                    let effect = rank::mann_whitney(&low_share, &high_share).effect;
                    let most =
                        !low_share.is_empty() && median(&low_share).max(median(&high_share)) >= MOST_OF_THE_EVENT;
                    (
                        effect,
                        rank::log_t_test(&low_share, &high_share),
                        most,
                        measure == Measure::SelfValue,
                    )
                }));
                found.push(CodeDifference {
                    function: f.function.clone(),
                    module: f.module.clone(),
                    measure,
                    with_whole: false,
                    held_out: None,
                    difference: Difference {
                        event: table.event.clone(),
                        source: table.source.clone(),
                        unit: table.unit.clone(),
                        low_median: median(&low),
                        high_median: median(&high),
                        weight: 0.0,
                        low,
                        high,
                        effect: test.effect,
                        p_value: test.p_value,
                        q_value: 1.0,
                    },
                });
            }
        }
        // Whether each share moved: a consistent rank effect, and a p-value of its log shares
        // that holds among every function of the event tested at once (Benjamini–Hochberg within
        // the table). Fifty functions' shares at p ≤ 0.05 each would have two or three move by
        // chance under a node-wide shift, and the shift would be blamed on them.
        let share_q = rank::q_values(&shares.iter().map(|s| s.map_or(1.0, |s| s.1)).collect::<Vec<_>>());
        // Per difference: (its share of the whole did not move, and its own samples are a minor
        // part of the event that did not move either).
        let follows: Vec<(bool, bool)> = shares
            .iter()
            .zip(&share_q)
            .map(|(judged, &q)| match judged {
                Some((effect, _, most, own)) => {
                    let still = effect.abs() < MIN_LISTED_EFFECT || q > MAX_LISTED_P;
                    (still && !(*most && *own), still && !*most && *own)
                }
                None => (false, false),
            })
            .collect();
        // A node-wide shift: the event's whole differs between the groups, and at least two
        // functions that are each a minor part of it moved with it (one function that is nearly
        // all of the event cannot be told from the event). Then every function whose share did
        // not move only followed it.
        let pick = |nodes: &[usize]| -> Vec<f64> { nodes.iter().filter_map(|&i| whole(i)).collect() };
        let whole_test = rank::mann_whitney(&pick(&groups.low), &pick(&groups.high));
        let listed =
            |d: &CodeDifference| d.difference.effect.abs() >= MIN_LISTED_EFFECT && d.difference.p_value <= MAX_LISTED_P;
        let minor_followers = found[first..]
            .iter()
            .zip(&follows)
            .filter(|(d, (_, minor))| *minor && listed(d))
            .count();
        if shares_judged
            && whole_test.effect.abs() >= MIN_LISTED_EFFECT
            && whole_test.p_value <= MAX_LISTED_P
            && minor_followers >= 2
        {
            for (d, (follows_whole, _)) in found[first..].iter_mut().zip(&follows) {
                d.with_whole = *follows_whole;
            }
        }
        let whole = found[first..]
            .iter()
            .map(|d| d.difference.low_median.max(d.difference.high_median))
            .fold(0.0, f64::max);
        for d in &mut found[first..] {
            d.difference.weight = if whole > 0.0 {
                (d.difference.high_median - d.difference.low_median).abs() / whole
            } else {
                0.0
            };
        }
    }
    let q = rank::q_values(&found.iter().map(|d| d.difference.p_value).collect::<Vec<_>>());
    for (d, q) in found.iter_mut().zip(q) {
        d.difference.q_value = q;
    }
    found.retain(|d| d.difference.effect.abs() >= MIN_LISTED_EFFECT && d.difference.p_value <= MAX_LISTED_P);
    // Repeatedly the most telling of the differences within WEIGHT_STEP of the heaviest one
    // left: a window around the heaviest rather than fixed steps, so that two weights a hair
    // apart never land in different steps (a caller's total 0.833 and its callee's own
    // samples 0.793 did, in a test run).
    let telling = |a: &CodeDifference, b: &CodeDifference| {
        let kernel = |d: &CodeDifference| d.module == bimodal_proto::KERNEL_MODULE;
        kernel(a)
            .cmp(&kernel(b))
            .then((a.measure == Measure::TotalValue).cmp(&(b.measure == Measure::TotalValue)))
            .then(b.difference.effect.abs().total_cmp(&a.difference.effect.abs()))
            .then(b.difference.weight.total_cmp(&a.difference.weight))
            .then_with(|| a.function.cmp(&b.function))
    };
    let mut ranked = Vec::with_capacity(limit.min(found.len()));
    while ranked.len() < limit && !found.is_empty() {
        let heaviest = (0..found.len())
            .max_by(|&i, &j| found[i].difference.weight.total_cmp(&found[j].difference.weight))
            .expect("found is not empty");
        let (top, weight) = (&found[heaviest], found[heaviest].difference.weight);
        // A caller's total moves by what its callees' own samples moved, plus every node's noise
        // in all of them: when the heaviest is a total, a function's own samples of the same
        // event that moved at least half as much are in the window too (and, being own samples,
        // come first), else the caller would be first about half the time.
        let callee_of_top = |d: &CodeDifference| {
            top.measure == Measure::TotalValue
                && d.measure == Measure::SelfValue
                && d.difference.event == top.difference.event
                && d.difference.source == top.difference.source
                && d.difference.weight >= CALLEE_OF_TOTAL * weight
        };
        let pick = (0..found.len())
            .filter(|&i| found[i].difference.weight >= weight - WEIGHT_STEP || callee_of_top(&found[i]))
            .min_by(|&i, &j| telling(&found[i], &found[j]))
            .expect("the heaviest is within the window");
        ranked.push(found.swap_remove(pick));
    }
    // Within each event, the functions whose share moved (the causes) before those that only
    // followed the event's whole, each in the order above; the places each event holds in the
    // list stay its own. An event whose every function followed its whole keeps its order: one
    // function that is nearly all of it (the whole is that function) cannot be told from a
    // node-wide shift, and `node_wide` says the shift.
    order_within_events(ranked, |d| d.with_whole)
}

/// `ranked` with each event's differences (by event and source) in the order of `key`, stably,
/// in the places the event held in the list: reordering one event never moves another's.
pub fn order_within_events<K: Ord>(
    ranked: Vec<CodeDifference>,
    key: impl Fn(&CodeDifference) -> K,
) -> Vec<CodeDifference> {
    let mut places: Vec<((&str, &str), Vec<usize>)> = Vec::new();
    for (at, d) in ranked.iter().enumerate() {
        let event = (d.difference.event.as_str(), d.difference.source.as_str());
        match places.iter_mut().find(|(e, _)| *e == event) {
            Some((_, at_list)) => at_list.push(at),
            None => places.push((event, vec![at])),
        }
    }
    let places: Vec<Vec<usize>> = places.into_iter().map(|(_, at_list)| at_list).collect();
    let mut slots: Vec<Option<CodeDifference>> = ranked.into_iter().map(Some).collect();
    for at_list in places {
        let mut of_event: Vec<CodeDifference> = at_list.iter().filter_map(|&at| slots[at].take()).collect();
        of_event.sort_by_key(&key);
        for (at, d) in at_list.into_iter().zip(of_event) {
            slots[at] = Some(d);
        }
    }
    slots.into_iter().flatten().collect()
}

/// One data object's values per node for one event and source (`None`: nothing to normalize by).
#[derive(Clone, Debug)]
pub struct DataValues {
    /// How a person reads it: `bss_table (bss of /usr/bin/app)`.
    pub object: String,
    /// The mapping's kind (bss, data, heap, anon...).
    pub kind: String,
    pub values: NodeValues,
}

/// The data objects of one event and source, normalized per node.
#[derive(Clone, Debug)]
pub struct DataTable {
    pub event: String,
    pub source: String,
    pub unit: String,
    pub objects: Vec<DataValues>,
}

/// A data object whose per-node value differs between the bands.
#[derive(Clone, Debug, Serialize)]
pub struct DataDifference {
    pub object: String,
    pub kind: String,
    #[serde(flatten)]
    pub difference: Difference,
}

/// Data objects whose per-node values differ between the bands: the same test, thresholds and
/// ranking as [`code_differences`], over where sampled data addresses fell instead of code.
pub fn data_differences(tables: &[DataTable], groups: &Groups, limit: usize) -> Vec<DataDifference> {
    let as_code: Vec<FunctionTable> = tables
        .iter()
        .map(|t| FunctionTable {
            event: t.event.clone(),
            source: t.source.clone(),
            unit: t.unit.clone(),
            functions: t
                .objects
                .iter()
                .map(|o| FunctionValues {
                    function: o.object.clone(),
                    module: o.kind.clone(),
                    self_values: o.values.clone(),
                    total_values: o.values.clone(),
                })
                .collect(),
        })
        .collect();
    code_differences(&as_code, groups, limit)
        .into_iter()
        .map(|d| DataDifference {
            object: d.function,
            kind: d.module,
            difference: d.difference,
        })
        .collect()
}

/// How one metric's per-node values differ between two groups the user gave (`low` is the
/// first group, `high` the second): no bands are looked for, the groups are what is compared.
#[derive(Clone, Debug, Serialize)]
pub struct MetricDifference {
    pub name: String,
    pub unit: String,
    pub direction: Direction,
    pub low_median: f64,
    pub high_median: f64,
    /// Nodes of each group with a value.
    pub low_nodes: usize,
    pub high_nodes: usize,
    /// Rank-biserial correlation: 1 when every node of the second group is above every node
    /// of the first.
    pub effect: f64,
    pub p_value: f64,
    /// Benjamini–Hochberg over the metrics compared.
    pub q_value: f64,
}

/// Every metric measured on nodes of both groups, tested over nodes (each node counted once);
/// the most consistent difference first (smallest p, then largest |effect|).
pub fn metric_differences(metrics: &[Metric], groups: &Groups) -> Vec<MetricDifference> {
    let mut found: Vec<MetricDifference> = metrics
        .iter()
        .filter_map(|m| {
            let pick = |nodes: &[usize]| -> Vec<f64> { nodes.iter().filter_map(|&i| m.values[i]).collect() };
            let (low, high) = (pick(&groups.low), pick(&groups.high));
            if low.is_empty() || high.is_empty() {
                return None;
            }
            let test = rank::mann_whitney(&low, &high);
            Some(MetricDifference {
                name: m.name.clone(),
                unit: m.unit.clone(),
                direction: m.direction,
                low_median: median(&low),
                high_median: median(&high),
                low_nodes: low.len(),
                high_nodes: high.len(),
                effect: test.effect,
                p_value: test.p_value,
                q_value: 1.0,
            })
        })
        .collect();
    let q = rank::q_values(&found.iter().map(|d| d.p_value).collect::<Vec<_>>());
    for (d, q) in found.iter_mut().zip(q) {
        d.q_value = q;
    }
    found.sort_by(|a, b| {
        a.p_value
            .total_cmp(&b.p_value)
            .then(b.effect.abs().total_cmp(&a.effect.abs()))
            .then_with(|| a.name.cmp(&b.name))
    });
    found
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_of_each_group_is_bounded_spread_and_the_same_every_time() {
        let names: Vec<String> = (0..1000).map(|i| format!("node-{i:04}")).collect();
        let name = |i: usize| names[i].as_str();
        // The slow tenth, every tenth node; the rest fast.
        let (high, low): (Vec<usize>, Vec<usize>) = (0..1000).partition(|i| i % 10 == 3);
        let groups = Groups {
            low,
            high,
            slow: Some("high"),
        };
        let sample = groups.sampled(name, 100);
        assert_eq!(sample.high, groups.high, "a group within the bound is read whole");
        assert_eq!(sample.low.len(), 100);
        assert_eq!(sample.slow, Some("high"));
        assert!(sample.low.windows(2).all(|w| w[0] < w[1]));
        assert!(sample.low.iter().all(|i| groups.low.contains(i)));
        // Spread over the group, not its first hundred: each ninth of it holds some.
        for part in groups.low.chunks(100) {
            let held = part.iter().filter(|i| sample.low.contains(i)).count();
            assert!((2..=25).contains(&held), "{held} of a ninth: {:?}", sample.low);
        }
        // The same nodes whatever the order the group lists them in.
        let mut reversed = groups.clone();
        reversed.low.reverse();
        assert_eq!(reversed.sampled(name, 100).low, sample.low);
        // A smaller sample is part of a larger one: a node read once stays read as the bound
        // grows.
        let small = groups.sampled(name, 20);
        assert!(small.low.iter().all(|i| sample.low.contains(i)));
        assert_eq!(sample.nodes().len(), 200);
    }

    fn metric(name: &str, direction: Direction, values: Vec<Option<f64>>) -> Metric {
        Metric {
            kind: MetricKind::EventRate {
                event: name.into(),
                source: "s".into(),
            },
            name: name.into(),
            unit: "per CPU-second".into(),
            direction,
            values,
            evidence: None,
        }
    }

    /// A fleet of two CPU models (100 nodes each, the second's CPI 1.3× the first's), and the
    /// labels that say which node is which.
    fn two_models(slow_in_second: usize) -> (Vec<Metric>, Vec<BTreeMap<String, String>>) {
        use rand::SeedableRng;
        use rand_distr::Distribution;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(48);
        let values = (0..200)
            .map(|i| {
                let z: f64 = rand_distr::StandardNormal.sample(&mut rng);
                let class = if i < 100 { 1.0 } else { 1.3 };
                let slow = if (100..100 + slow_in_second).contains(&i) {
                    2.0
                } else {
                    1.0
                };
                Some(class * slow * (0.03 * z).exp())
            })
            .collect();
        let labels = (0..200)
            .map(|i| {
                let model = if i < 100 { "Intel Xeon 8375C" } else { "AMD EPYC 7R13" };
                BTreeMap::from([("cpu_model".to_string(), model.to_string())])
            })
            .collect();
        (
            vec![metric("cycles per instruction", Direction::HigherIsSlower, values)],
            labels,
        )
    }

    /// Two CPU models, no node slow within its model: the bands over the fleet are the models,
    /// said so, and nothing is found within either.
    #[test]
    fn bands_that_are_hardware_classes_are_said_to_be() {
        let (metrics, labels) = two_models(0);
        let choice = find_bands_by_class(&metrics, &labels, &BandConfig::default(), &mut NullCache::default());
        assert_eq!(choice.classes, ClassSplit::Classes);
        assert_eq!(choice.within, None);
        assert_eq!(
            choice.groups.expect("the models split").high,
            (100..200).collect::<Vec<_>>()
        );
    }

    /// A tenth of the second model 2× slower: the answer is those nodes, within their class,
    /// not the models (which are still what splits the fleet as a whole).
    #[test]
    fn a_slow_band_within_a_hardware_class_is_found() {
        let (metrics, labels) = two_models(10);
        let choice = find_bands_by_class(&metrics, &labels, &BandConfig::default(), &mut NullCache::default());
        let within = choice.within.expect("bands within a class");
        assert_eq!(within.labels["cpu_model"], "AMD EPYC 7R13");
        let groups = choice.groups.expect("groups");
        assert_eq!(groups.high, (100..110).collect::<Vec<_>>());
        assert_eq!(groups.low, (110..200).collect::<Vec<_>>());
        // One class: nothing said of classes.
        let one: Vec<BTreeMap<String, String>> = vec![BTreeMap::new(); 200];
        let choice = find_bands_by_class(&metrics, &one, &BandConfig::default(), &mut NullCache::default());
        assert_eq!((choice.classes, choice.within), (ClassSplit::OneClass, None));
    }

    /// A node that ran a few milliseconds in the window (no fault seen) is set aside and named:
    /// before, its zero was raised to half a fault over those milliseconds, the highest value of
    /// the fleet, put it in the slow band and vetoed the bands for resting on no event.
    #[test]
    fn a_node_with_too_little_exposure_is_set_aside_not_a_veto() {
        let mut evidence = Vec::new();
        let mut values = Vec::new();
        for i in 0..20 {
            // 10 CPU-seconds each; 4 slow nodes fault 30 times a CPU-second, the rest 10.
            let rate = if [3, 7, 11, 15].contains(&i) { 30.0 } else { 10.0 } * (1.0 + 0.01 * (i % 5) as f64);
            // Node 18: 5 ms of CPU, nothing seen.
            let (events, exposure) = if i == 18 { (0.0, 0.005) } else { (rate * 10.0, 10.0) };
            evidence.push(Some(Evidence { events, exposure }));
            values.push(Some(events / exposure));
        }
        let mut faults = metric("page_fault", Direction::HigherIsSlower, values);
        faults.evidence = Some(evidence.clone());
        let choice = find_bands(&[faults], &BandConfig::default(), &mut NullCache::default());
        assert_eq!(choice.tested[0].set_aside, vec![18]);
        assert!(!choice.tested[0].measured.contains(&18));
        let groups = choice
            .groups
            .unwrap_or_else(|| panic!("no band: {:?}", choice.tested[0].bands));
        assert_eq!(groups.high, vec![3, 7, 11, 15]);
        assert!(!groups.low.contains(&18));
    }

    /// Set aside: few events over a tenth of the median exposure or less. A node that ran as long
    /// as the rest and saw few events is measured (it is low); so is one that ran briefly and saw
    /// many; a node without evidence is neither.
    #[test]
    fn only_few_events_over_little_exposure_is_set_aside() {
        let e = |events: f64, exposure: f64| Some(Evidence { events, exposure });
        let evidence = [
            e(500.0, 10.0),
            e(480.0, 10.0),
            e(2.0, 10.0),
            e(9.0, 0.5),
            e(40.0, 0.5),
            None,
            e(0.0, 0.0),
            e(520.0, 10.0),
        ];
        assert_eq!(set_aside(&evidence), vec![3, 6]);
        assert_eq!(set_aside(&[None, None]), Vec::<usize>::new());
    }

    /// Every stack of the event ×4 on the high group: each function's value moves with its node's
    /// whole and its share does not, so all are listed as following a node-wide shift of ×4 and
    /// none as a cause. One function ×10 instead: it is the cause, listed first, and no function
    /// is said to follow a shift of the node. A function that is most of its event is its own
    /// cause.
    #[test]
    fn a_node_wide_shift_is_told_from_a_function_s() {
        let groups = Groups {
            low: (0..5).collect(),
            high: (5..10).collect(),
            slow: Some("high"),
        };
        // Per node: main's total is the sum of its callees' own values.
        let table = |scale: &dyn Fn(usize, &str) -> f64| {
            let own = |name: &str| -> Vec<Option<f64>> {
                (0..10)
                    .map(|i| Some(scale(i, name) * (1.0 + 0.01 * ((i * 3) % 5) as f64)))
                    .collect()
            };
            let (a, b, c) = (own("parse"), own("lookup"), own("hash"));
            let main: Vec<Option<f64>> = (0..10)
                .map(|i| Some(a[i].unwrap() + b[i].unwrap() + c[i].unwrap()))
                .collect();
            FunctionTable {
                event: "page_fault".into(),
                source: "page-faults".into(),
                unit: "faults per CPU-second".into(),
                functions: vec![
                    FunctionValues {
                        function: "main".into(),
                        module: "app".into(),
                        self_values: vec![Some(0.0); 10].into(),
                        total_values: main.into(),
                    },
                    FunctionValues {
                        function: "parse".into(),
                        module: "app".into(),
                        self_values: a.clone().into(),
                        total_values: a.into(),
                    },
                    FunctionValues {
                        function: "lookup".into(),
                        module: "app".into(),
                        self_values: b.clone().into(),
                        total_values: b.into(),
                    },
                    FunctionValues {
                        function: "hash".into(),
                        module: "app".into(),
                        self_values: c.clone().into(),
                        total_values: c.into(),
                    },
                ],
            }
        };
        let base = |name: &str| match name {
            "parse" => 100.0,
            "hash" => 80.0,
            _ => 50.0,
        };
        let everywhere = [table(&|i, name| base(name) * if i >= 5 { 4.0 } else { 1.0 })];
        let listed = code_differences(&everywhere, &groups, 50);
        assert!(!listed.is_empty() && listed.iter().all(|d| d.with_whole), "{listed:#?}");
        let wide = node_wide(&everywhere, &groups, &listed);
        assert_eq!(wide.len(), 1, "{wide:#?}");
        assert!((wide[0].factor - 4.0).abs() < 1e-9, "{wide:#?}");
        assert_eq!(wide[0].functions, listed.len());

        let one = [table(&|i, name| {
            base(name) * if i >= 5 && name == "lookup" { 10.0 } else { 1.0 }
        })];
        let listed = code_differences(&one, &groups, 50);
        assert_eq!(
            (listed[0].function.as_str(), listed[0].with_whole),
            ("lookup", false),
            "{listed:#?}"
        );
        // The whole moved, by lookup alone: no shift of the node (main's total follows lookup).
        assert!(listed.iter().all(|d| !d.with_whole), "{listed:#?}");
        assert_eq!(node_wide(&one, &groups, &listed), []);
        assert!(
            listed.iter().all(|d| d.function != "parse" && d.function != "hash"),
            "parse and hash did not change: {listed:#?}"
        );
        // One function that is most of its event: its ×4 is its own, not the node's.
        let alone = [table(&|i, name| match (name, i >= 5) {
            ("parse", true) => 4000.0,
            ("parse", false) => 1000.0,
            (_, true) => base(name) * 4.0,
            _ => base(name),
        })];
        let listed = code_differences(&alone, &groups, 50);
        let parse = listed.iter().find(|d| d.function == "parse").expect("parse listed");
        assert!(!parse.with_whole, "{listed:#?}");
    }

    /// Two nodes against seven can never be listed (p = 0.056 at best); against eight they
    /// can (0.044); three against five can (0.036), three against four cannot (0.057). What
    /// counts is the nodes with values: three of a group, one without CPU time, are two.
    #[test]
    fn groups_too_small_to_rank_say_so() {
        let groups = |low: usize, high: usize| Groups {
            low: (0..low).collect(),
            high: (low..low + high).collect(),
            slow: Some("high"),
        };
        let table = |values: Vec<Option<f64>>| FunctionTable {
            event: "cpu".into(),
            source: "cpu-clock".into(),
            unit: "share of CPU time".into(),
            functions: vec![FunctionValues {
                function: "f".into(),
                module: "m".into(),
                self_values: values.clone().into(),
                total_values: values.into(),
            }],
        };
        let all = |n: usize| table(vec![Some(1.0); n]);
        let note = too_few_to_rank(&[all(9)], &groups(7, 2)).expect("2 against 7 cannot be ranked");
        assert!(note.contains("2 against 7 nodes with values reach p = 0.056"), "{note}");
        assert_eq!(too_few_to_rank(&[all(10)], &groups(8, 2)), None);
        assert_eq!(too_few_to_rank(&[all(8)], &groups(5, 3)), None);
        assert!(too_few_to_rank(&[all(7)], &groups(4, 3)).is_some());
        assert_eq!(too_few_to_rank(&[all(200)], &groups(100, 100)), None);
        // 3 against 5, but one of the three has no value: 2 against 5.
        let mut values = vec![Some(1.0); 8];
        values[6] = None;
        assert!(too_few_to_rank(&[table(values)], &groups(5, 3)).is_some());
        assert!(too_few_to_rank(&[all(5)], &groups(5, 0))
            .unwrap()
            .contains("no node of the high group"));
        assert_eq!(too_few_to_rank(&[], &groups(5, 3)), None);
    }

    /// A fleet of 20 with 4 slow nodes in one metric and noise in another: the slow metric
    /// is chosen, its high band is slow, and a node without a value is left out of the test.
    #[test]
    fn the_banded_metric_is_chosen() {
        let mut rates: Vec<Option<f64>> = (0..20).map(|i| Some(100.0 + (i % 5) as f64)).collect();
        for i in [3, 7, 11, 15] {
            rates[i] = Some(300.0 + i as f64);
        }
        rates[19] = None;
        let noise: Vec<Option<f64>> = (0..20).map(|i| Some(50.0 + ((i * 7) % 11) as f64)).collect();
        let metrics = vec![
            metric("noise", Direction::HigherIsSlower, noise),
            metric("page_fault", Direction::HigherIsSlower, rates),
        ];
        let choice = find_bands(&metrics, &BandConfig::default(), &mut NullCache::default());
        assert_eq!(choice.chosen, Some(1));
        let groups = choice.groups.unwrap();
        assert_eq!(groups.high, vec![3, 7, 11, 15]);
        assert_eq!(groups.low.len(), 15);
        assert_eq!(groups.slow, Some("high"));
        assert!(matches!(choice.tested[0].bands, Bands::None { .. }));
        assert!((choice.alpha_per_metric - 0.005).abs() < 1e-12);
    }

    /// Bands in CPU load and in a rate that says which way is slow: the rate's bands are the
    /// answer, even when the load's split is stronger.
    #[test]
    fn a_metric_that_says_slow_comes_first() {
        let split = |high: f64| -> Vec<Option<f64>> {
            (0..20)
                .map(|i| Some(if i < 5 { high } else { 100.0 } + (i % 3) as f64))
                .collect()
        };
        let metrics = vec![
            metric("cpu", Direction::Neither, split(10_000.0)),
            metric("page_fault", Direction::HigherIsSlower, split(300.0)),
        ];
        let choice = find_bands(&metrics, &BandConfig::default(), &mut NullCache::default());
        assert!(matches!(choice.tested[0].bands, Bands::Two(_)));
        assert_eq!(choice.chosen, Some(1));
    }

    /// One fleet of one band in every metric: no groups.
    #[test]
    fn no_metric_no_bands() {
        let values: Vec<Option<f64>> = (0..30)
            .map(|i| Some(100.0 * (1.0 + 0.01 * ((i * 13) % 7) as f64)))
            .collect();
        let choice = find_bands(
            &[metric("cpu", Direction::Neither, values)],
            &BandConfig::default(),
            &mut NullCache::default(),
        );
        assert_eq!(choice.chosen, None);
        assert!(choice.groups.is_none());
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The CPU model that every slow node has and no fast node has comes first; the node name
    /// (different everywhere) and the zone (the same everywhere) say nothing.
    #[test]
    fn labels_that_split_the_bands() {
        let nodes: Vec<BTreeMap<String, String>> = (0..10)
            .map(|i| {
                let node = format!("n{i}");
                let model = if i < 3 { "big" } else { "small" };
                let kernel = if i % 2 == 0 { "6.1" } else { "6.8" };
                labels(&[("node", &node), ("cpu_model", model), ("zone", "a"), ("kernel", kernel)])
            })
            .collect();
        let groups = Groups {
            low: (3..10).collect(),
            high: vec![0, 1, 2],
            slow: Some("high"),
        };
        let splits = label_splits(&nodes, &groups);
        assert_eq!(splits.len(), 2, "{splits:?}");
        assert_eq!(
            (splits[0].label.as_str(), splits[0].value.as_str()),
            ("cpu_model", "big")
        );
        assert!(splits[0].association.exact());
        assert!(
            (splits[0].association.p_value - 1.0 / 120.0).abs() < 1e-9,
            "{:?}",
            splits[0]
        );
        assert_eq!(splits[1].label, "kernel");
        assert!(splits[1].association.p_value > 0.5);
    }

    /// Remote .bss on every slow node and no fast one comes first; a finding on every node says
    /// nothing.
    #[test]
    fn findings_that_go_with_the_slow_band() {
        let groups = Groups {
            low: (0..6).collect(),
            high: vec![6, 7, 8],
            slow: Some("high"),
        };
        let findings: Vec<Vec<(String, String)>> = (0..9)
            .map(|i| {
                let mut f = vec![("remote heap of logger".to_owned(), format!("node {i}"))];
                if i >= 6 {
                    f.push((
                        "remote bss of scylla".to_owned(),
                        format!("node {i}: 16384 pages on node 1"),
                    ));
                }
                if i == 2 {
                    f.push(("remote anon of cron".to_owned(), "node 2".to_owned()));
                }
                f
            })
            .collect();
        let splits = finding_splits(&findings, &groups);
        assert_eq!(splits.len(), 2, "{splits:?}");
        assert_eq!(splits[0].finding, "remote bss of scylla");
        assert_eq!(
            (splits[0].association.high_with, splits[0].association.low_with),
            (3, 0)
        );
        assert!(
            (splits[0].association.p_value - 1.0 / 84.0).abs() < 1e-9,
            "{:?}",
            splits[0]
        );
        assert_eq!(splits[0].example, "node 6: 16384 pages on node 1");
        assert_eq!(splits[1].finding, "remote anon of cron");
        assert!(splits[1].association.p_value > 0.5);
    }

    /// A callee's own samples rank before a caller's total a hair heavier (0.795 against
    /// 0.832: steps of 0.05 once put them in different steps, the caller first).
    #[test]
    fn own_samples_before_a_slightly_heavier_callers_total() {
        let groups = Groups {
            low: (0..5).collect(),
            high: (5..8).collect(),
            slow: Some("high"),
        };
        let of = |fast: f64, slow: f64| -> Vec<Option<f64>> {
            (0..8)
                .map(|i| Some(if i >= 5 { slow } else { fast } + i as f64 * 0.1))
                .collect()
        };
        let function = |name: &str, own: Vec<Option<f64>>, total: Vec<Option<f64>>| FunctionValues {
            function: name.into(),
            module: "app".into(),
            self_values: own.into(),
            total_values: total.into(),
        };
        let table = FunctionTable {
            event: "page_fault".into(),
            source: "s".into(),
            unit: "faults per CPU-second".into(),
            functions: vec![
                function("start_main", vec![Some(0.0); 8], of(22.8, 136.0)),
                function("load_session", of(22.8, 131.0), of(22.8, 131.0)),
            ],
        };
        let found = code_differences(&[table], &groups, 10);
        let order: Vec<(&str, Measure)> = found.iter().map(|d| (d.function.as_str(), d.measure)).collect();
        assert_eq!(
            order,
            [
                ("load_session", Measure::SelfValue),
                ("start_main", Measure::TotalValue)
            ],
            "{found:?}"
        );
        assert!(
            found[1].difference.weight - found[0].difference.weight > 0.03,
            "{found:?}"
        );
    }

    /// A function higher on every slow node ranks first; one large on a single node of the
    /// slow band (which a sum of the band's profiles would show as the biggest difference) is
    /// not listed; a function equal everywhere is not listed.
    #[test]
    fn per_node_differences_not_sums() {
        let n = 12;
        let groups = Groups {
            low: (0..8).collect(),
            high: (8..12).collect(),
            slow: Some("high"),
        };
        let of = |f: &dyn Fn(usize) -> f64| -> Vec<Option<f64>> { (0..n).map(|i| Some(f(i))).collect() };
        let steady = of(&|i| if i >= 8 { 40.0 + i as f64 } else { 10.0 + i as f64 });
        let one_node = of(&|i| if i == 9 { 10_000.0 } else { 5.0 + (i % 2) as f64 });
        let same = of(&|i| 20.0 + (i % 4) as f64);
        let table = FunctionTable {
            event: "page_fault".into(),
            source: "s".into(),
            unit: "faults per CPU-second".into(),
            functions: [("clear_buffer", steady), ("batch_job", one_node), ("idle", same)]
                .into_iter()
                .map(|(name, v)| FunctionValues {
                    function: name.into(),
                    module: "app".into(),
                    self_values: v.clone().into(),
                    total_values: v.into(),
                })
                .collect(),
        };
        let found = code_differences(&[table], &groups, 10);
        assert_eq!(found.len(), 1, "{found:?}");
        let top = &found[0];
        assert_eq!(
            (top.function.as_str(), top.measure),
            ("clear_buffer", Measure::SelfValue)
        );
        assert_eq!(top.difference.effect, 1.0);
        assert_eq!(top.difference.high.len(), 4);
        assert!((top.difference.p_value - 2.0 / 495.0).abs() < 1e-12, "{top:?}");
    }

    /// Two given groups: every metric measured on both is tested over nodes, the consistent
    /// difference first; a metric one group never measured is left out.
    #[test]
    fn metrics_of_two_given_groups() {
        let groups = Groups {
            low: vec![0, 1, 2, 3],
            high: vec![4, 5, 6, 7],
            slow: None,
        };
        let apart = metric(
            "page_fault",
            Direction::HigherIsSlower,
            (0..8)
                .map(|i| Some(if i >= 4 { 50.0 } else { 10.0 } + i as f64))
                .collect(),
        );
        let mixed = metric(
            "cpu",
            Direction::Neither,
            (0..8).map(|i| Some(f64::from(i % 2))).collect(),
        );
        let one_side = metric(
            "remote_access",
            Direction::HigherIsSlower,
            (0..8).map(|i| (i < 4).then_some(1.0)).collect(),
        );
        let found = metric_differences(&[mixed, apart, one_side], &groups);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].name, "page_fault");
        assert_eq!(found[0].effect, 1.0);
        assert_eq!((found[0].low_median, found[0].high_median), (11.5, 55.5));
        assert!((found[0].p_value - 2.0 / 70.0).abs() < 1e-12, "{:?}", found[0]);
        assert_eq!(found[1].name, "cpu");
        assert_eq!(found[1].effect, 0.0);
        assert!(found[1].q_value >= found[1].p_value);
    }

    /// Remote accesses taken in `task_numa_fault`: the kernel leaf has the whole event on every
    /// node, as does the user function that faulted; the user function is named first.
    #[test]
    fn user_code_before_the_kernel_path_of_the_event() {
        let groups = Groups {
            low: (0..4).collect(),
            high: (4..8).collect(),
            slow: Some("high"),
        };
        let rates: Vec<Option<f64>> = (0..8)
            .map(|i| Some(if i >= 4 { 7000.0 + i as f64 } else { 1.0 }))
            .collect();
        let function = |name: &str, module: &str, self_values: Vec<Option<f64>>| FunctionValues {
            function: name.into(),
            module: module.into(),
            self_values: self_values.into(),
            total_values: rates.clone().into(),
        };
        let table = FunctionTable {
            event: "remote_access".into(),
            source: "task_numa_fault".into(),
            unit: "pages per CPU-second".into(),
            functions: vec![
                function("task_numa_fault", bimodal_proto::KERNEL_MODULE, rates.clone()),
                function("scan_bss_table", "numa_scan", vec![Some(0.0); 8]),
            ],
        };
        let found = code_differences(&[table], &groups, 10);
        let names: Vec<(&str, Measure)> = found.iter().map(|d| (d.function.as_str(), d.measure)).collect();
        assert_eq!(
            names,
            [
                ("scan_bss_table", Measure::TotalValue),
                ("task_numa_fault", Measure::SelfValue)
            ]
        );
    }

    /// Totals not measured on nodes with short chains (frame pointers beside whole chains): a
    /// caller's total is tested over the other nodes only, its own samples over all; a leaf
    /// (own samples equal to its total wherever both are measured) gets no total test.
    #[test]
    fn totals_left_out_on_short_chains_are_not_tested_there() {
        let groups = Groups {
            low: (0..6).collect(),
            high: (6..12).collect(),
            slow: Some("high"),
        };
        let short = [2, 8];
        let leave_out = |values: Vec<Option<f64>>| -> Vec<Option<f64>> {
            values
                .into_iter()
                .enumerate()
                .map(|(i, v)| if short.contains(&i) { None } else { v })
                .collect()
        };
        let leaf: Vec<Option<f64>> = (0..12)
            .map(|i| Some(if i >= 6 { 50.0 } else { 10.0 } + i as f64))
            .collect();
        let caller: Vec<Option<f64>> = leaf.iter().map(|v| v.map(|v| v + 100.0)).collect();
        let table = FunctionTable {
            event: "page_fault".into(),
            source: "page-faults".into(),
            unit: "faults per CPU-second".into(),
            functions: vec![
                FunctionValues {
                    function: "touch".into(),
                    module: "app".into(),
                    self_values: leaf.clone().into(),
                    total_values: leave_out(leaf.clone()).into(),
                },
                FunctionValues {
                    function: "loop".into(),
                    module: "app".into(),
                    self_values: vec![Some(0.0); 12].into(),
                    total_values: leave_out(caller).into(),
                },
            ],
        };
        let found = code_differences(&[table], &groups, 10);
        let tested: Vec<(&str, Measure, usize)> = found
            .iter()
            .map(|d| {
                let n = d.difference.low.len() + d.difference.high.len();
                (d.function.as_str(), d.measure, n)
            })
            .collect();
        assert!(tested.contains(&("touch", Measure::SelfValue, 12)), "{tested:?}");
        assert!(tested.contains(&("loop", Measure::TotalValue, 10)), "{tested:?}");
        assert!(
            !tested.iter().any(|t| t.0 == "touch" && t.1 == Measure::TotalValue),
            "{tested:?}"
        );
    }

    /// Page faults per CPU-second, with the (events, exposure) each rests on where given.
    fn rate(values: &[f64], evidence: Option<&[(f64, f64)]>) -> Metric {
        Metric::page_faults(
            values.iter().map(|&v| Some(v)).collect(),
            evidence.map(|e| {
                e.iter()
                    .map(|&(events, exposure)| Some(bands::Evidence { events, exposure }))
                    .collect()
            }),
        )
    }

    /// Bands of 100–120 and 200 faults per CPU-second over a window; node 2 ran at 100 in the
    /// first half and 300 in the second (200 on average: the high band). It is the only one
    /// flagged: node 0's halves differ within its band, node 3 lies between the bands (past the
    /// threshold, short of the middle of the medians) in one half, and node 4's halves cross the
    /// bands on four events in all.
    #[test]
    fn a_node_that_changed_band_half_way_is_flagged() {
        let window = rate(&[100.0, 100.0, 200.0, 200.0, 200.0, 120.0], None);
        let groups = Groups {
            low: vec![0, 1, 5],
            high: vec![2, 3, 4],
            slow: Some("high"),
        };
        let first = [90.0, 100.0, 100.0, 150.0, 100.0, 120.0];
        let second = [110.0, 100.0, 300.0, 250.0, 300.0, 120.0];
        let counted = |values: &[f64]| -> Vec<(f64, f64)> {
            values
                .iter()
                .enumerate()
                .map(|(i, &v)| match i {
                    4 => (v / 100.0, 0.01),
                    _ => (v * 10.0, 10.0),
                })
                .collect()
        };
        let moved = moved_within(
            &window,
            &groups,
            &rate(&first, Some(&counted(&first))),
            &rate(&second, Some(&counted(&second))),
        );
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert_eq!(
            (moved[0].node, moved[0].first_band, moved[0].second_band),
            (2, "low", "high")
        );
        assert!(moved[0].p_value.unwrap() < 1e-12);
        // Without counts, the crossing alone: nodes 2 and 4.
        let moved: Vec<usize> = moved_within(&window, &groups, &rate(&first, None), &rate(&second, None))
            .iter()
            .map(|m| m.node)
            .collect();
        assert_eq!(moved, vec![2, 4]);
    }

    /// Another window's metric set beside this one's by node name: a node it lacks has no value.
    #[test]
    fn a_metric_of_another_window_is_aligned_by_name() {
        let other = rate(&[1.0, 2.0], Some(&[(10.0, 1.0), (20.0, 1.0)]));
        let aligned = other.aligned(&["b", "c"], &["a", "b", "c"]);
        assert_eq!(aligned.values, vec![None, Some(1.0), Some(2.0)]);
        assert_eq!(aligned.evidence.unwrap()[2].unwrap().events, 20.0);
    }

    /// A class with a node of its tail past the cut still lies in one band; a tenth of each
    /// class in the other band is a split across them.
    #[test]
    fn a_class_s_tail_past_the_cut_is_still_the_class() {
        let class = |model: &str, nodes: std::ops::Range<usize>| HardwareClass {
            labels: BTreeMap::from([("cpu_model".to_owned(), model.to_owned())]),
            nodes: nodes.collect(),
        };
        let classes = [class("A", 0..50), class("B", 50..100)];
        let tail = Groups {
            low: (0..51).collect(),
            high: (51..100).collect(),
            slow: Some("high"),
        };
        assert_eq!(ClassSplit::of(Some(&tail), &classes), ClassSplit::Classes);
        let names =
            |c: Vec<&HardwareClass>| -> Vec<String> { c.iter().map(|c| c.labels["cpu_model"].clone()).collect() };
        assert_eq!(names(ClassSplit::mostly_in(&classes, &tail.high)), ["B"]);
        assert_eq!(names(ClassSplit::mostly_in(&classes, &tail.low)), ["A"]);
        let across = Groups {
            low: (0..44).chain(50..94).collect(),
            high: (44..50).chain(94..100).collect(),
            slow: Some("high"),
        };
        assert_eq!(ClassSplit::of(Some(&across), &classes), ClassSplit::Across);
    }
}
