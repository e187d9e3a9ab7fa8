//! `GET /api/v1/compare?selector=&from=&to=&limit=&metric=`: the nodes matching the selector,
//! split into two bands by the metric that splits them best, or by `metric` when given (or "no
//! bands", with each metric's reason), the
//! nodes that changed band since the previous window of the same length, and what differs
//! between the bands: labels and facts, placement findings, and functions per event kind,
//! normalized per node. Functions and data objects are read over at most `explained_nodes`
//! nodes of each band (100 by default, or `all`): a larger band is sampled, the same nodes
//! every time (docs/design/028). `?a=S&b=S` instead compares two groups the user gave: each
//! metric tested over the nodes of both, and the same explanation between them.
//!
//! The per-node metrics are [`crate::window`]'s.

use std::collections::{HashMap, HashSet};

use axum::extract::{RawQuery, State};
use axum::Json;
use serde_json::{json, Value};

use super::params::Params;
use super::{AppError, AppState};
use crate::analysis::bands::{BandConfig, Bands, Split};
use crate::analysis::compare::{self, BandChoice, ClassSplit, Groups, Metric, MetricBands};
use crate::analysis::NodeSet;
use crate::clock::{now_secs as now, rfc3339};
use crate::selector::Selector;
use crate::storage::NodesRead;
use crate::window::{self, data_tables, find_bands, function_tables, no_bands_verdict, timed, HeldOutHalves, Window};

/// Differences listed by default (as many as an alert's first cause is chosen among) and at most.
const DEFAULT_LIMIT: u32 = compare::LISTED as u32;
const MAX_LIMIT: u32 = 1000;

/// A split's figures: both bands' medians, the threshold between them and its tests.
fn figures_json(s: &Split) -> Value {
    json!({
        "low_median": s.low_median,
        "high_median": s.high_median,
        "threshold": s.threshold,
        "separation": s.separation,
        "d": s.d,
        "p_value": s.p_value,
        "null": s.null.name(),
    })
}

/// A split that was found: its figures, and its nodes named on each side and level.
fn split_json(w: &Window, measured: &[usize], s: &Split) -> Value {
    let names = |idx: &[usize]| -> Vec<&str> { idx.iter().map(|&i| w.nodes[measured[i]].node.as_str()).collect() };
    let mut v = figures_json(s);
    v["low"] = json!(names(&s.low));
    v["high"] = json!(names(&s.high));
    v["levels"] = json!(s.levels.iter().map(|l| names(l)).collect::<Vec<_>>());
    v["outliers"] = json!(names(&s.outliers));
    v
}

/// A split that was refused, as a metric's `best`: its figures and how many nodes each side
/// held, not their names (a refused split has no levels, and its outliers are the metric's
/// `outliers`, named beside it). Naming its sides doubled the answer for nothing a reader acts
/// on: at 100,000 nodes the refused splits of six metrics named 7.5 of its 15.7 MiB.
fn refused_json(s: &Split) -> Value {
    let mut v = figures_json(s);
    v["low_nodes"] = json!(s.low.len());
    v["high_nodes"] = json!(s.high.len());
    v
}

/// Each metric as the answer lists it, with its test's outcome.
fn metrics_json(w: &Window, metrics: &[Metric], tested: &[MetricBands]) -> Vec<Value> {
    metrics
        .iter()
        .zip(tested)
        .map(|(m, t)| {
            let mut v = serde_json::to_value(m).unwrap_or(Value::Null);
            v["bands"] = bands_json(w, &t.measured, &t.bands);
            v["bands"]["set_aside"] = json!(w.names(&t.set_aside));
            v
        })
        .collect()
}

/// The answer's verdict and `bands` when `metric` split the nodes into `groups` by `split`,
/// with the nodes that changed band since the window before (`previous_window`) and within this
/// one (`within_window`, named in the verdict too). With more than
/// two levels, the groups are the slowest level and every other, and `levels` lists them all.
fn two_bands(
    w: &Window,
    metric: &Metric,
    measured: &[usize],
    split: &Split,
    groups: &Groups,
    previous_window: Value,
    within_window: Value,
) -> (Value, Value) {
    let (low_median, high_median) = (metric.median_of(&groups.low), metric.median_of(&groups.high));
    let figure = crate::analysis::figure;
    let slow = match groups.slow {
        Some(band) => format!("; the {band} band is slow"),
        None => String::new(),
    };
    let verdict = match split.levels.len() {
        levels if levels > 2 => {
            let (slowest, others) = match groups.slow {
                Some("low") => ((groups.low.len(), low_median), (groups.high.len(), high_median)),
                _ => ((groups.high.len(), high_median), (groups.low.len(), low_median)),
            };
            format!(
                "{levels} levels in {}: the slowest, {} nodes at a median of {} {}, against the {} others at {}",
                metric.name,
                slowest.0,
                figure(slowest.1),
                metric.unit,
                others.0,
                figure(others.1),
            )
        }
        _ => format!(
            "two bands in {}: {} nodes at a median of {} and {} at {} {}{slow}",
            metric.name,
            groups.high.len(),
            figure(high_median),
            groups.low.len(),
            figure(low_median),
            metric.unit,
        ),
    };
    // Nodes that ran in one band, then in the other, are part of the answer, not a footnote.
    let moved: Vec<&str> = within_window["moved"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["node"].as_str()).collect())
        .unwrap_or_default();
    let verdict = match moved.len() {
        0 => verdict,
        n => format!(
            "{verdict}; {n} {} changed band half-way through the window: {}",
            if n == 1 { "node" } else { "nodes" },
            moved.join(", ")
        ),
    };
    let names = |idx: &[usize]| -> Vec<&str> { idx.iter().map(|&i| w.nodes[measured[i]].node.as_str()).collect() };
    let levels: Vec<Value> = split
        .levels
        .iter()
        .map(|level| {
            let nodes: Vec<usize> = level.iter().map(|&i| measured[i]).collect();
            json!({ "nodes": names(level), "median": metric.median_of(&nodes) })
        })
        .collect();
    let bands = json!({
        "metric": metric.name,
        "kind": metric.kind,
        "unit": metric.unit,
        "slow": groups.slow,
        "low": w.names(&groups.low),
        "high": w.names(&groups.high),
        "low_median": low_median,
        "high_median": high_median,
        "threshold": metric.threshold_between(&groups.low, &groups.high),
        "separation": split.separation,
        "p_value": split.p_value,
        "null": split.null.name(),
        "levels": levels,
        "outliers": names(&split.outliers),
        "previous_window": previous_window,
        "within_window": within_window,
    });
    (json!(verdict), bands)
}

fn bands_json(w: &Window, measured: &[usize], bands: &Bands) -> Value {
    match bands {
        Bands::Two(s) => {
            let mut v = split_json(w, measured, s);
            v["found"] = json!(true);
            v
        }
        Bands::None { reason, best, outliers } => json!({
            "found": false,
            "reason": reason.to_string(),
            "best": best.as_ref().map(refused_json),
            "outliers": outliers.iter().map(|&i| w.nodes[measured[i]].node.as_str()).collect::<Vec<_>>(),
        }),
    }
}

pub(super) async fn compare(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Result<Json<Value>, AppError> {
    let p = Params::parse(
        raw.as_deref(),
        &["selector", "from", "to", "limit", "metric", "a", "b", "explained_nodes"],
    )?;
    if p.one("a").is_some() || p.one("b").is_some() {
        return given_groups(&state, &p).await;
    }
    let selector = p.selector()?;
    // Whole buckets: the explanation reads every node's values of hundreds of functions, and a
    // partial bucket at an edge would be read from the per-minute tables (the answer's `from`
    // and `to` are the range compared).
    let (from, to) = p.time_range(now())?;
    let (from, to) = crate::storage::plan::whole_buckets(from, to);
    let limit = p.bounded("limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let per_group = explained_per_group(&p)?;
    let mut window = timed("window", Window::read(&state.store, &selector, from, to, now())).await?;
    window.keep_metric(p.one("metric")).map_err(AppError::BadRequest)?;
    let (metrics, choice) = timed("bands", async {
        find_bands(&mut window, state.bands_null.clone())
            .await
            .map_err(AppError::Internal)
    })
    .await?;
    let metrics_json = metrics_json(&window, &metrics, &choice.tested);
    let mut answer = json!({
        "selector": selector.to_string(),
        "from": rfc3339(from),
        "to": rfc3339(to),
        "nodes": window.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
        "alpha": BandConfig::default().alpha,
        "alpha_per_metric": choice.alpha_per_metric,
        "metrics": metrics_json,
        "bands": Value::Null,
        "explanation": Value::Null,
    });
    let (Some(chosen), Some(groups)) = (choice.chosen, &choice.groups) else {
        answer["verdict"] = json!(no_bands_verdict(&window, &metrics, &choice));
        return Ok(Json(answer));
    };
    let metric = &metrics[chosen];
    let Some(MetricBands {
        bands: Bands::Two(split),
        measured,
        ..
    }) = &choice.answer
    else {
        return Err(AppError::Internal("the chosen metric has no split".into()));
    };
    // The previous window and the explanation's reads, at once.
    let sample = Sample::of(&window, groups, per_group);
    let (changed, halves, tables, data) = tokio::try_join!(
        timed(
            "previous window",
            changes(&state, &selector, p.one("metric"), from, to, &window, metric, groups)
        ),
        timed(
            "halves",
            within_window(&state, &selector, (from, to), &window, metric, groups)
        ),
        async {
            let tables = function_tables(&state.store, &selector, from, to, &window, sample.read());
            Ok(timed("functions", tables).await?)
        },
        async {
            let tables = data_tables(&state.store, &selector, from, to, &window, sample.read());
            Ok(timed("data objects", tables).await?)
        },
    )?;
    let explained = sample.groups.clone();
    (answer["verdict"], answer["bands"]) = two_bands(&window, metric, measured, split, groups, changed, halves.json);
    answer["verdict"] = json!(classes_verdict(
        &window,
        metric,
        &choice,
        answer["verdict"].as_str().unwrap_or("")
    ));
    answer["bands"]["classes"] = json!(choice.classes);
    answer["bands"]["within"] = json!(choice.within.as_ref().map(|c| json!({
        "labels": c.labels,
        "nodes": window.names(&c.nodes),
    })));
    let labels: Vec<_> = window.nodes.iter().map(|n| n.labels.clone()).collect();
    let explained_nodes = explained_json(&window, &explained, per_group);
    let (groups, findings) = (groups.clone(), window.findings.clone());
    // Hundreds of rank tests: on a blocking thread, not the server's workers.
    let groups_explained = explained.clone();
    let (mut code, mut explanation) = timed(
        "explanation",
        tokio::task::spawn_blocking(move || {
            let code = compare::code_differences(&tables, &explained, limit as usize);
            let explanation = json!({
                "labels": compare::label_splits(&labels, &groups),
                "placement": compare::finding_splits(&findings, &groups),
                "nodes": explained_nodes,
                "node_wide": compare::node_wide(&tables, &explained, &code),
                "code_note": compare::too_few_to_rank(&tables, &explained),
                "data": compare::data_differences(&data, &explained, limit as usize),
            });
            (code, explanation)
        }),
    )
    .await
    .map_err(|e| AppError::Internal(format!("explaining the bands failed: {e}")))?;
    // The band event's listed functions, read again in each half and tested there.
    explanation["held_out"] = match &halves.held_out {
        Ok(h) => match timed("held out", h.tables(&state.store, &selector, &code, sample.read())).await? {
            Some(tables) => {
                let summary = h.test(&mut code, &groups_explained, &tables);
                json!({"event": h.source.0, "source": h.source.1, "reason": Value::Null, "summary": summary})
            }
            None => json!({"reason": "no function of the band metric's event is listed"}),
        },
        Err(reason) => json!({"reason": reason}),
    };
    explanation["code"] = json!(code);
    answer["explanation"] = explanation;
    Ok(Json(answer))
}

/// The verdict of `two_bands`, said of the hardware classes: bands found within one class are
/// named with it; bands that are the classes themselves are said to be.
fn classes_verdict(w: &Window, metric: &Metric, choice: &BandChoice, verdict: &str) -> String {
    let class = |labels: &std::collections::BTreeMap<String, String>| -> String {
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (&choice.within, choice.classes) {
        (Some(c), ClassSplit::Classes) => format!(
            "within hardware class {} ({} nodes): {verdict}; across the fleet, the best split in {} is the hardware classes themselves",
            class(&c.labels),
            c.nodes.len(),
            metric.name,
        ),
        (Some(c), _) => format!("within hardware class {} ({} nodes): {verdict}", class(&c.labels), c.nodes.len()),
        (None, ClassSplit::Classes) => {
            let classes = compare::hardware_classes(&w.labels());
            let side = |nodes: &[usize]| -> Vec<String> {
                ClassSplit::mostly_in(&classes, nodes)
                    .into_iter()
                    .map(|c| class(&c.labels))
                    .collect()
            };
            let groups = choice.groups.as_ref().expect("a split has groups");
            let (slow, fast) = match groups.slow {
                Some("low") => (&groups.low, &groups.high),
                _ => (&groups.high, &groups.low),
            };
            format!(
                "the bands are hardware classes: {} against {} in {} ({verdict}); within each class the nodes run as one",
                side(slow).join("; "),
                side(fast).join("; "),
                metric.name,
            )
        }
        (None, _) => verdict.to_string(),
    }
}

/// `explained_nodes`: how many nodes of each group the code and data differences are read over
/// ([`compare::EXPLAINED_PER_GROUP`] by default; `all`: every node).
fn explained_per_group(p: &Params) -> Result<usize, AppError> {
    match p.one("explained_nodes") {
        None | Some("") => Ok(compare::EXPLAINED_PER_GROUP),
        Some("all") => Ok(usize::MAX),
        Some(v) => v.parse::<usize>().ok().filter(|n| *n >= 2).ok_or_else(|| {
            AppError::BadRequest(format!(
                "`explained_nodes` must be `all` or a whole number of at least 2, not `{v}`"
            ))
        }),
    }
}

/// The groups the code and data differences are read over: at most `per_group` nodes of each
/// of `groups`, with the names of the window's nodes to read when that is fewer than every node.
struct Sample {
    groups: Groups,
    names: Option<Vec<String>>,
    of: usize,
}

impl Sample {
    fn of(w: &Window, groups: &Groups, per_group: usize) -> Sample {
        let explained = groups.sampled(|i| w.nodes[i].node.as_str(), per_group);
        let names =
            (explained != *groups).then(|| explained.nodes().into_iter().map(|i| w.nodes[i].node.clone()).collect());
        Sample {
            groups: explained,
            names,
            of: w.nodes.len(),
        }
    }

    /// What the per-node reads take.
    fn read(&self) -> NodesRead<'_> {
        match &self.names {
            Some(nodes) => NodesRead::Sample { nodes, of: self.of },
            None => NodesRead::Every,
        }
    }
}

/// The nodes the code and data differences were read over (their `low` and `high` values are
/// those of these nodes that have one, in this order: a node without CPU time has none), the
/// bound they were sampled to, and per event the nodes among them whose functions' totals were
/// not compared, their chains possibly short beside the others' (`short_chains`).
fn explained_json(w: &Window, explained: &Groups, per_group: usize) -> Value {
    let members = NodeSet::of(&explained.nodes());
    let mut short = serde_json::Map::new();
    for (event, _, _) in &w.sources {
        if short.contains_key(*event) {
            continue;
        }
        let left_out: Vec<usize> = w
            .short_chains(event)
            .into_iter()
            .filter(|&i| members.contains(i))
            .collect();
        if !left_out.is_empty() {
            short.insert(event.to_string(), json!(w.names(&left_out)));
        }
    }
    json!({
        "per_group": match per_group {
            usize::MAX => Value::Null,
            n => json!(n),
        },
        "low": w.names(&explained.low),
        "high": w.names(&explained.high),
        "short_chains": short,
    })
}

/// `?a=S&b=S`: two groups the user gave, compared the way bands are explained: each metric
/// tested over nodes, then labels and facts, placement, functions and data objects per node.
/// In the differences, `low` is group `a` and `high` is group `b`.
async fn given_groups(state: &AppState, p: &Params) -> Result<Json<Value>, AppError> {
    if p.one("selector").is_some() || p.one("metric").is_some() {
        return Err(AppError::BadRequest(
            "give either a selector (bands are looked for) or the groups a and b".into(),
        ));
    }
    let parse = |key: &str| -> Result<Selector, AppError> {
        Selector::parse(p.required(key)?).map_err(|e| AppError::BadRequest(format!("`{key}`: {e}")))
    };
    let (a, b) = (parse("a")?, parse("b")?);
    // One read covers both groups: their nodes by name, and the samples of the same processes.
    let within = |x: &Selector, y: &Selector| x.process_matchers().all(|m| y.process_matchers().any(|n| n == m));
    if !within(&a, &b) || !within(&b, &a) {
        return Err(AppError::BadRequest(
            "`a` and `b` must select the same processes (their process labels differ): they compare nodes".into(),
        ));
    }
    let (from, to) = p.time_range(now())?;
    let (from, to) = crate::storage::plan::whole_buckets(from, to);
    let limit = p.bounded("limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let per_group = explained_per_group(p)?;
    let (nodes_a, nodes_b) = tokio::try_join!(state.store.nodes(&a, from, to), state.store.nodes(&b, from, to))?;
    let names = |nodes: &[crate::storage::NodeInfo]| -> Vec<String> { nodes.iter().map(|n| n.node.clone()).collect() };
    let (names_a, names_b) = (names(&nodes_a), names(&nodes_b));
    for (key, group) in [("a", &names_a), ("b", &names_b)] {
        if group.is_empty() {
            return Err(AppError::BadRequest(format!(
                "the group `{key}` has no node in this range"
            )));
        }
    }
    let in_b: HashSet<&str> = names_b.iter().map(String::as_str).collect();
    if let Some(both) = names_a.iter().find(|n| in_b.contains(n.as_str())) {
        return Err(AppError::BadRequest(format!(
            "node `{both}` matches both `a` and `b`: the groups must not overlap"
        )));
    }
    // One selector for both groups: their node names, or, past what a query may name, every
    // node of their processes, the window's nodes in neither group left out of the groups (a
    // regex of 100,000 names is refused: the regex crate's size limit, and ClickHouse's).
    let processes = Selector {
        matchers: a.process_matchers().cloned().collect(),
    };
    let both = match names_a.len() + names_b.len() <= crate::storage::select::INLINE_NODES {
        true => {
            let alternatives: Vec<String> = names_a.iter().chain(&names_b).map(|n| regex::escape(n)).collect();
            processes.and(
                crate::selector::Matcher::new("node", crate::selector::MatchOp::Regex, &alternatives.join("|"))
                    .map_err(|e| AppError::Internal(format!("the groups' node names: {}", e.message)))?,
            )
        }
        false => processes,
    };
    let mut window = timed("window", Window::read(&state.store, &both, from, to, now())).await?;
    let in_a: HashSet<&str> = names_a.iter().map(String::as_str).collect();
    let (mut high, mut low) = (Vec::new(), Vec::new());
    for (i, n) in window.nodes.iter().enumerate() {
        if in_b.contains(n.node.as_str()) {
            high.push(i);
        } else if in_a.contains(n.node.as_str()) {
            low.push(i);
        }
    }
    let groups = Groups { low, high, slow: None };
    let sample = Sample::of(&window, &groups, per_group);
    let (tables, data) = tokio::try_join!(
        timed(
            "functions",
            function_tables(&state.store, &both, from, to, &window, sample.read())
        ),
        timed(
            "data objects",
            data_tables(&state.store, &both, from, to, &window, sample.read())
        ),
    )?;
    let explained = sample.groups;
    let explained_nodes = explained_json(&window, &explained, per_group);
    let (metrics, findings) = (
        std::mem::take(&mut window.metrics),
        std::mem::take(&mut window.findings),
    );
    let group_json = |selector: &Selector, members: &[usize]| json!({"selector": selector.to_string(), "nodes": window.names(members)});
    let labels: Vec<_> = window.nodes.iter().map(|n| n.labels.clone()).collect();
    let mut answer = json!({
        "from": rfc3339(from),
        "to": rfc3339(to),
        "nodes": window.names(&groups.nodes()),
        "groups": {"a": group_json(&a, &groups.low), "b": group_json(&b, &groups.high)},
        "bands": Value::Null,
    });
    let explained = timed(
        "explanation",
        tokio::task::spawn_blocking(move || {
            let metrics = compare::metric_differences(&metrics, &groups);
            let code = compare::code_differences(&tables, &explained, limit as usize);
            let explanation = json!({
                "labels": compare::label_splits(&labels, &groups),
                "placement": compare::finding_splits(&findings, &groups),
                "nodes": explained_nodes,
                "node_wide": compare::node_wide(&tables, &explained, &code),
                "held_out": {"reason": "the groups were given, not chosen from the window's values: their tests stand as they are"},
                "code": code,
                "code_note": compare::too_few_to_rank(&tables, &explained),
                "data": compare::data_differences(&data, &explained, limit as usize),
            });
            (metrics, explanation)
        }),
    )
    .await
    .map_err(|e| AppError::Internal(format!("comparing the groups failed: {e}")))?;
    let (metrics, explanation) = explained;
    answer["verdict"] = json!(match metrics.first() {
        Some(m) if m.p_value <= compare::MAX_LISTED_P => format!(
            "{} differs most between the groups: a median of {} in a, {} in b {}",
            m.name,
            crate::analysis::figure(m.low_median),
            crate::analysis::figure(m.high_median),
            m.unit
        ),
        Some(_) => "no metric differs consistently between the groups".to_owned(),
        None => "no metric is measured on nodes of both groups".to_owned(),
    });
    answer["metrics"] = json!(metrics);
    answer["explanation"] = explanation;
    Ok(Json(answer))
}

/// The chosen metric in the previous window of the same length: its bands, and the nodes of
/// this window's bands that were in another band (or none) then.
#[allow(clippy::too_many_arguments)]
async fn changes(
    state: &AppState,
    selector: &Selector,
    wanted: Option<&str>,
    from: u32,
    to: u32,
    now: &Window,
    metric: &Metric,
    groups: &Groups,
) -> Result<Value, AppError> {
    let (prev_from, prev_to) = (from.saturating_sub(to - from), from);
    let mut before = Window::read(&state.store, selector, prev_from, prev_to, crate::clock::now_secs()).await?;
    // Held to the same level as this window: the same metrics tested, or the one asked for.
    if before.keep_metric(wanted).is_err() {
        before.metrics.clear();
    }
    let (before_metrics, before_choice) = find_bands(&mut before, state.bands_null.clone())
        .await
        .map_err(AppError::Internal)?;
    let position = before_metrics.iter().position(|m| m.kind == metric.kind);
    // The previous window's answer when it chose the same metric (its split may lie within a
    // hardware class), else that metric's test over every node.
    let test_before = position.map(|i| match (&before_choice.answer, before_choice.chosen) {
        (Some(answer), Some(chosen)) if chosen == i => answer,
        _ => &before_choice.tested[i],
    });
    let band_before: HashMap<&str, &str> = match test_before.map(|t| (&t.measured, &t.bands)) {
        Some((measured, Bands::Two(s))) => s
            .low
            .iter()
            .map(|&i| (before.nodes[measured[i]].node.as_str(), "low"))
            .chain(
                s.high
                    .iter()
                    .map(|&i| (before.nodes[measured[i]].node.as_str(), "high")),
            )
            .collect(),
        _ => HashMap::new(),
    };
    let mut changed = Vec::new();
    for (band, members) in [("low", &groups.low), ("high", &groups.high)] {
        for &i in members.iter() {
            let node = now.nodes[i].node.as_str();
            let was = band_before.get(node).copied();
            if was != Some(band) && !band_before.is_empty() {
                changed.push(json!({"node": node, "now": band, "before": was}));
            }
        }
    }
    let found = !band_before.is_empty();
    Ok(json!({
        "from": rfc3339(prev_from),
        "to": rfc3339(prev_to),
        "found": found,
        "reason": position.and_then(|i| match &before_choice.tested[i].bands {
            Bands::None { reason, .. } => Some(reason.to_string()),
            Bands::Two(_) => None,
        }).or_else(|| position.is_none().then(|| "the metric was not measured".to_owned())),
        "changed": changed,
    }))
}

/// What compare read of each half of the window: the nodes that moved band within it, and what
/// the held-out tests of the explanation need.
struct WithinWindow {
    json: Value,
    held_out: Result<HeldOutHalves, &'static str>,
}

/// The chosen metric in each half of the window ([`window::Halves`]): the nodes of the bands
/// that ran clearly in one band in the first half and in the other in the second
/// ([`compare::moved_within`]); and the halves themselves, where the bands are cut on an event's
/// rate, for the held-out tests of that event's functions.
async fn within_window(
    state: &AppState,
    selector: &Selector,
    range: (u32, u32),
    window: &Window,
    metric: &Metric,
    groups: &Groups,
) -> Result<WithinWindow, AppError> {
    let halves = window::Halves::read(&state.store, selector, range, now(), window, metric).await?;
    let Some(halves) = halves else {
        return Ok(WithinWindow {
            json: json!({
                "halves": Value::Null,
                "reason": window::ONE_BUCKET,
                "moved": [],
            }),
            held_out: Err(window::ONE_BUCKET),
        });
    };
    let names: Vec<&str> = window.nodes.iter().map(|n| n.node.as_str()).collect();
    let moved = compare::moved_within(metric, groups, &halves.metrics[0], &halves.metrics[1]);
    let moved: Vec<Value> = moved
        .iter()
        .map(|m| {
            let mut v = json!(m);
            v["node"] = json!(names[m.node]);
            v
        })
        .collect();
    let json = json!({
        "halves": halves.ranges.map(|(from, to)| [rfc3339(from), rfc3339(to)]),
        "reason": Value::Null,
        "moved": moved,
    });
    Ok(WithinWindow {
        json,
        held_out: window::band_source(window, metric).map(|source| HeldOutHalves { halves, source }),
    })
}

/// The bands of `selector` over [from, to) as node names (what `/api/v1/diff?groups=bands`
/// compares), or `None` with the verdict when there are none.
pub(super) struct BandNodes {
    pub metric: String,
    pub low: Vec<String>,
    pub high: Vec<String>,
    pub slow: Option<&'static str>,
}

pub(super) async fn bands_of(
    state: &AppState,
    selector: &Selector,
    metric: Option<&str>,
    from: u32,
    to: u32,
) -> Result<Result<BandNodes, String>, AppError> {
    let mut window = Window::read(&state.store, selector, from, to, now()).await?;
    window.keep_metric(metric).map_err(AppError::BadRequest)?;
    let (metrics, choice) = timed("bands", async {
        find_bands(&mut window, state.bands_null.clone())
            .await
            .map_err(AppError::Internal)
    })
    .await?;
    Ok(match (choice.chosen, &choice.groups) {
        (Some(i), Some(groups)) => Ok(BandNodes {
            metric: metrics[i].name.clone(),
            low: window.names(&groups.low).into_iter().map(str::to_owned).collect(),
            high: window.names(&groups.high).into_iter().map(str::to_owned).collect(),
            slow: groups.slow,
        }),
        _ => Err(no_bands_verdict(&window, &metrics, &choice)),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::analysis::bands::{NoBands, Null};
    use crate::storage::NodeInfo;

    fn window(names: &[&str]) -> Window {
        Window {
            nodes: names
                .iter()
                .map(|&n| NodeInfo {
                    node: n.into(),
                    labels: BTreeMap::new(),
                    first_seen: 0,
                    last_seen: 0,
                    agent_version: "test".into(),
                    facts: None,
                })
                .collect(),
            node_cpu_ns: vec![None; names.len()],
            node_cpu_seconds: vec![None; names.len()],
            metrics: Vec::new(),
            sources: Vec::new(),
            findings: vec![Vec::new(); names.len()],
        }
    }

    fn split(low: Vec<usize>, high: Vec<usize>) -> Split {
        Split {
            levels: vec![low.clone(), high.clone()],
            low,
            high,
            low_median: 100.0,
            high_median: 400.0,
            threshold: 200.0,
            separation: 6.0,
            d: 5.0,
            p_value: 0.001,
            null: Null::OneBand { tail: Some(5.0) },
            outliers: Vec::new(),
        }
    }

    fn faults(values: Vec<Option<f64>>) -> Metric {
        Metric::page_faults(values, None)
    }

    /// A split indexes the nodes measured, not the window's: a node without a value is in
    /// neither band, and the others keep their names.
    #[test]
    fn a_split_names_the_nodes_it_measured() {
        let w = window(&["a", "b", "c", "d"]);
        let metric = faults(vec![Some(100.0), None, Some(400.0), Some(420.0)]);
        let tested = [MetricBands {
            measured: vec![0, 2, 3],
            set_aside: Vec::new(),
            bands: Bands::Two(split(vec![0], vec![1, 2])),
        }];
        let listed = metrics_json(&w, &[metric], &tested);
        let bands = &listed[0]["bands"];
        assert_eq!(bands["found"], true);
        assert_eq!(bands["low"], json!(["a"]));
        assert_eq!(bands["high"], json!(["c", "d"]));
        assert_eq!(bands["null"], "student_t(5)");
        assert_eq!(bands["set_aside"], json!([]));
        assert_eq!(listed[0]["name"], "page_fault per CPU-second");
        assert_eq!(listed[0]["kind"], "event_rate");
        assert_eq!(listed[0]["values"], json!([100.0, null, 400.0, 420.0]));
    }

    /// No bands: the reason in words, and the best split tested, its sides counted.
    #[test]
    fn no_bands_say_why_and_show_the_best_split() {
        let w = window(&["a", "b", "c"]);
        let none = Bands::None {
            reason: NoBands::NotSignificant { p_value: 0.2 },
            best: Some(split(vec![0, 1], vec![2])),
            outliers: Vec::new(),
        };
        let v = bands_json(&w, &[0, 1, 2], &none);
        assert_eq!(v["found"], false);
        assert!(v["reason"].as_str().unwrap().contains("p = 0.200"), "{v}");
        assert_eq!(v["best"]["high_nodes"], 1);
        assert_eq!(v["best"]["low_nodes"], 2);
        assert_eq!(
            v["best"]["high"],
            Value::Null,
            "a refused split is counted, not named: {v}"
        );
        let without = bands_json(
            &w,
            &[],
            &Bands::None {
                reason: NoBands::TooFewNodes { nodes: 0, needed: 5 },
                best: None,
                outliers: Vec::new(),
            },
        );
        assert_eq!(without["best"], Value::Null);
    }

    /// The verdict names the metric, each band's size and median, and the slow band when the
    /// metric says which is; `bands` lists the nodes of each.
    #[test]
    fn the_verdict_names_the_slow_band() {
        let w = window(&["a", "b", "c", "d", "e"]);
        let metric = faults([100.0, 100.0, 400.0, 100.0, 400.0].map(Some).to_vec());
        let groups = Groups {
            low: vec![0, 1, 3],
            high: vec![2, 4],
            slow: Some("high"),
        };
        let measured = [0, 1, 2, 3, 4];
        let (verdict, bands) = two_bands(
            &w,
            &metric,
            &measured,
            &split(vec![0, 1, 3], vec![2, 4]),
            &groups,
            json!({"changed": []}),
            json!({"moved": [{"node": "e"}]}),
        );
        assert_eq!(
            verdict,
            "two bands in page_fault per CPU-second: 2 nodes at a median of 400 and 3 at 100 faults per CPU-second; the high band is slow; 1 node changed band half-way through the window: e"
        );
        assert_eq!(bands["low"], json!(["a", "b", "d"]));
        assert_eq!(bands["high"], json!(["c", "e"]));
        assert_eq!(bands["slow"], "high");
        assert_eq!(bands["previous_window"], json!({"changed": []}));
        assert_eq!(bands["within_window"]["moved"][0]["node"], "e");
        let neither = Groups { slow: None, ..groups };
        let (verdict, _) = two_bands(
            &w,
            &metric,
            &measured,
            &split(vec![], vec![]),
            &neither,
            Value::Null,
            Value::Null,
        );
        assert!(!verdict.as_str().unwrap().contains("slow"), "{verdict}");
    }

    /// Three levels: the verdict names the slowest level against the others, and `levels` lists
    /// each level's nodes and median, lowest first.
    #[test]
    fn the_verdict_names_the_slowest_level() {
        let w = window(&["a", "b", "c", "d", "e", "f"]);
        let metric = faults([100.0, 100.0, 200.0, 400.0, 200.0, 400.0].map(Some).to_vec());
        let mut three = split(vec![0, 1], vec![2, 3, 4, 5]);
        three.levels = vec![vec![0, 1], vec![2, 4], vec![3, 5]];
        let groups = Groups {
            low: vec![0, 1, 2, 4],
            high: vec![3, 5],
            slow: Some("high"),
        };
        let (verdict, bands) = two_bands(
            &w,
            &metric,
            &[0, 1, 2, 3, 4, 5],
            &three,
            &groups,
            Value::Null,
            Value::Null,
        );
        assert_eq!(
            verdict,
            "3 levels in page_fault per CPU-second: the slowest, 2 nodes at a median of 400 faults per CPU-second, against the 4 others at 150"
        );
        assert_eq!(bands["levels"][1], json!({"nodes": ["c", "e"], "median": 200.0}));
        assert_eq!(bands["threshold"], json!((200.0f64 * 400.0).sqrt()));
    }
}
