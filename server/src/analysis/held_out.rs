//! The band metric's own functions tested again where the bands were not chosen.
//!
//! When the bands are cut on an event's rate (page faults per CPU-second), the functions of that
//! event make up the very values the cut was made on. A node whose samples happened to run high
//! in the window lands in the high band, and its functions' values ran high with them: a rank
//! test of those values between the bands finds a difference the cut itself put there, and its
//! p-value says nothing of whether the function differs between the nodes. Other events' values
//! did not choose the bands, and their tests stand as they are.
//!
//! Each half of the window is an independent draw of the nodes' samples. [`held_out`] cuts the
//! explained nodes into bands by one half's metric (at the bands' threshold) and tests each
//! listed function of the band event on the other half's values, both ways; the smaller p-value,
//! doubled for the two tries, is the function's held-out p-value. Noise the cut selected in one
//! half is fresh in the other, so a difference that holds there is the nodes', not the cut's
//! (docs/design/037).

use serde::Serialize;

use super::compare::{order_within_events, CodeDifference, FunctionTable, Groups, Measure, Metric, MAX_LISTED_P};
use super::rank;

/// A listed function's difference tested on the half of the window that did not cut its groups.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HeldOut {
    /// Twice the smaller of the two ways' p-values (one half cuts, the other is tested); a way
    /// whose effect runs against the listed difference counts as 1.
    pub p_value: f64,
    /// Benjamini–Hochberg over the functions tested held out in this comparison.
    pub q_value: f64,
    /// `q_value` at most [`MAX_LISTED_P`]: the difference holds out of sample, among every
    /// function tested so (a cut's noise lists many functions, and p ≤ 0.05 for each would
    /// confirm one of them in a fifth of one-band fleets). A function not confirmed is listed
    /// after the confirmed ones of its event.
    pub confirmed: bool,
}

/// One half of the window, as the held-out test reads it: the band metric in that half and the
/// band event's functions there, both aligned with the window's nodes.
#[derive(Clone, Copy, Debug)]
pub struct Half<'a> {
    pub metric: &'a Metric,
    pub table: &'a FunctionTable,
}

/// What the held-out tests found over one comparison.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HeldOutSummary {
    /// Listed functions of the band event tested held out.
    pub tested: usize,
    pub confirmed: usize,
    /// Listed functions of the band event that neither way could test (outside both halves'
    /// largest functions, or a half's cut left a group without values): not tested, listed after
    /// the confirmed ones.
    pub untested: usize,
}

/// Tests every difference in `listed` of the event and source of `halves` on the window's
/// halves, sets its [`CodeDifference::held_out`], and moves those not confirmed after the
/// confirmed ones of the event, in the places the event holds in the list (functions that follow
/// a node-wide shift stay last). In each half the explained `groups` are cut again by that half's
/// metric, at their own shares: the half's highest values make its high group, as many of its
/// nodes with a value as the high group holds of the explained nodes. A threshold carried over
/// from the window would put every node on one side of it when the whole fleet's rate moves
/// between the halves (load, the time of day).
pub fn held_out(listed: &mut Vec<CodeDifference>, groups: &Groups, halves: [Half<'_>; 2]) -> HeldOutSummary {
    let (event, source) = (&halves[0].table.event, &halves[0].table.source);
    let explained = groups.nodes();
    let high_share = groups.high.len() as f64 / explained.len().max(1) as f64;
    // The explained nodes cut by a half's own metric; a node without a value there sits out.
    let cut = |half: &Metric| -> Groups {
        let mut valued: Vec<(f64, usize)> = explained
            .iter()
            .filter_map(|&i| Some((half.values.get(i).copied().flatten()?, i)))
            .collect();
        valued.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let at = valued.len() - (high_share * valued.len() as f64).round() as usize;
        let mut low: Vec<usize> = valued[..at].iter().map(|v| v.1).collect();
        let mut high: Vec<usize> = valued[at..].iter().map(|v| v.1).collect();
        low.sort_unstable();
        high.sort_unstable();
        Groups {
            low,
            high,
            slow: groups.slow,
        }
    };
    let cuts = [cut(halves[0].metric), cut(halves[1].metric)];
    fn values_in<'t>(table: &'t FunctionTable, d: &CodeDifference) -> Option<&'t super::NodeValues> {
        let f = table
            .functions
            .iter()
            .find(|f| f.function == d.function && f.module == d.module)?;
        Some(match d.measure {
            Measure::SelfValue => &f.self_values,
            Measure::TotalValue => &f.total_values,
        })
    }
    let mut tested: Vec<(usize, f64)> = Vec::new();
    let mut untested = 0;
    for (at, d) in listed.iter().enumerate() {
        if d.difference.event != *event || d.difference.source != *source {
            continue;
        }
        // One way: the groups `by` cut, the values of the other half; its two-sided p-value when
        // its effect runs in the listed difference's direction (`None`: nothing to test, a group
        // without values). Halved to one side, the false confirmations of one-band fleets of 10
        // nodes rose from 1% to 8% (`bands_bench held`).
        let way = |by: usize| -> Option<f64> {
            let values = values_in(halves[1 - by].table, d)?;
            let pick = |nodes: &[usize]| -> Vec<f64> { nodes.iter().filter_map(|&i| values[i]).collect() };
            let (low, high) = (pick(&cuts[by].low), pick(&cuts[by].high));
            if low.is_empty() || high.is_empty() {
                return None;
            }
            let test = rank::mann_whitney(&low, &high);
            let along = test.effect * d.difference.effect > 0.0;
            Some(if along { test.p_value } else { 1.0 })
        };
        match (way(0), way(1)) {
            (None, None) => untested += 1,
            (a, b) => {
                let best = a.unwrap_or(1.0).min(b.unwrap_or(1.0));
                tested.push((at, (2.0 * best).min(1.0)));
            }
        }
    }
    let q = rank::q_values(&tested.iter().map(|t| t.1).collect::<Vec<_>>());
    for (&(at, p_value), q_value) in tested.iter().zip(q) {
        listed[at].held_out = Some(HeldOut {
            p_value,
            q_value,
            confirmed: q_value <= MAX_LISTED_P,
        });
    }
    // The event's places, filled again: confirmed causes, the rest of its causes, then the
    // functions that only follow its whole, each in the order they had. Other events have no
    // confirmation to order by and keep their order.
    let confirmed = |d: &CodeDifference| d.held_out.is_some_and(|h| h.confirmed);
    *listed = order_within_events(std::mem::take(listed), |d| (d.with_whole, !confirmed(d)));
    HeldOutSummary {
        tested: tested.len(),
        confirmed: listed.iter().filter(|d| confirmed(d)).count(),
        untested,
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_distr::Distribution;

    use super::*;
    use crate::analysis::compare::{code_differences, FunctionValues};

    const FUNCTIONS: usize = 8;

    /// A fleet's page-fault functions in each half of a window: function `f` of node `i` at
    /// 100/(f+1) per CPU-second × `factor(i, f)`, times sampling noise drawn anew in each half.
    /// Answers the whole window's table and metric and each half's.
    fn fleet(
        rng: &mut rand_chacha::ChaCha8Rng,
        nodes: usize,
        factor: impl Fn(usize, usize) -> f64,
    ) -> ((FunctionTable, Metric), [(FunctionTable, Metric); 2]) {
        fleet_with_halves(rng, nodes, factor, [1.0, 1.0])
    }

    /// [`fleet`], every node's rate in each half times `halves`' factor (the whole fleet busier
    /// in one half).
    fn fleet_with_halves(
        rng: &mut rand_chacha::ChaCha8Rng,
        nodes: usize,
        factor: impl Fn(usize, usize) -> f64,
        halves: [f64; 2],
    ) -> ((FunctionTable, Metric), [(FunctionTable, Metric); 2]) {
        let noise = rand_distr::LogNormal::new(0.0, 0.2).unwrap();
        let halves: Vec<Vec<Vec<f64>>> = halves
            .iter()
            .map(|&scale| {
                (0..FUNCTIONS)
                    .map(|f| {
                        (0..nodes)
                            .map(|i| scale * 100.0 / (f + 1) as f64 * factor(i, f) * noise.sample(rng))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        // Halves of equal exposure: the window's value is their mean.
        let whole: Vec<Vec<f64>> = (0..FUNCTIONS)
            .map(|f| (0..nodes).map(|i| (halves[0][f][i] + halves[1][f][i]) / 2.0).collect())
            .collect();
        let table_of = |own: &[Vec<f64>]| -> (FunctionTable, Metric) {
            let main: Vec<Option<f64>> = (0..nodes).map(|i| Some(own.iter().map(|f| f[i]).sum())).collect();
            let mut functions = vec![FunctionValues {
                function: "main".into(),
                module: "app".into(),
                self_values: vec![Some(0.0); nodes].into(),
                total_values: main.clone().into(),
            }];
            functions.extend(own.iter().enumerate().map(|(f, values)| {
                let values: Vec<Option<f64>> = values.iter().map(|&v| Some(v)).collect();
                FunctionValues {
                    function: format!("f{f}"),
                    module: "app".into(),
                    self_values: values.clone().into(),
                    total_values: values.into(),
                }
            }));
            let table = FunctionTable {
                event: "page_fault".into(),
                source: "page-faults".into(),
                unit: "faults per CPU-second".into(),
                functions,
            };
            (table, Metric::page_faults(main, None))
        };
        (table_of(&whole), [table_of(&halves[0]), table_of(&halves[1])])
    }

    /// The `high` nodes of highest value in `metric`, against the rest: a cut chosen from the
    /// window's data, as a band found in it is.
    fn cut_at_top(metric: &Metric, high: usize) -> Groups {
        let mut order: Vec<usize> = (0..metric.values.len()).collect();
        order.sort_by(|&a, &b| metric.values[b].unwrap().total_cmp(&metric.values[a].unwrap()));
        let (mut high, mut low) = (order[..high].to_vec(), order[high..].to_vec());
        high.sort_unstable();
        low.sort_unstable();
        Groups {
            low,
            high,
            slow: Some("high"),
        }
    }

    /// The window's explanation of `groups`, tested held out.
    fn explain(
        ((table, _), halves): &((FunctionTable, Metric), [(FunctionTable, Metric); 2]),
        groups: &Groups,
    ) -> Vec<CodeDifference> {
        let mut listed = code_differences(std::slice::from_ref(table), groups, 50);
        held_out(
            &mut listed,
            groups,
            [
                Half {
                    metric: &halves[0].1,
                    table: &halves[0].0,
                },
                Half {
                    metric: &halves[1].1,
                    table: &halves[1].0,
                },
            ],
        );
        listed
    }

    /// The first 6 of 30 nodes high, the rest low.
    fn six_of_thirty() -> Groups {
        Groups {
            low: (6..30).collect(),
            high: (0..6).collect(),
            slow: Some("high"),
        }
    }

    /// Whether `function` is listed first and confirmed held out.
    fn first_confirmed(listed: &[CodeDifference], function: &str) -> bool {
        listed
            .first()
            .is_some_and(|d| d.function == function && d.held_out.is_some_and(|h| h.confirmed))
    }

    /// One band of 30 nodes (every node alike but for sampling noise), cut at its 6 highest page
    /// faults per CPU-second: the cut's own noise lists functions in most fleets, and the half
    /// that did not choose the cut confirms almost none of them.
    #[test]
    fn a_cut_s_own_noise_is_not_confirmed_held_out() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(37);
        let (mut listed_any, mut confirmed_any) = (0, 0);
        const FLEETS: usize = 100;
        for _ in 0..FLEETS {
            let fleet = fleet(&mut rng, 30, |_, _| 1.0);
            let groups = cut_at_top(&fleet.0 .1, 6);
            let listed = explain(&fleet, &groups);
            listed_any += usize::from(!listed.is_empty());
            confirmed_any += usize::from(listed.iter().any(|d| d.held_out.is_some_and(|h| h.confirmed)));
            assert!(listed.iter().all(|d| d.held_out.is_some()), "{listed:#?}");
        }
        assert!(
            listed_any >= FLEETS / 2,
            "the cut listed functions in {listed_any} of {FLEETS}"
        );
        assert!(
            confirmed_any <= FLEETS / 10,
            "confirmed held out in {confirmed_any} of {FLEETS}"
        );
    }

    /// The third function ×5 on 6 nodes of 30 (their page faults 1.5× the others', four times
    /// the noise of a half's: bands a detection finds): listed first and confirmed held out in
    /// nearly every fleet; functions listed beside it by the cut's noise come after it.
    #[test]
    fn a_function_s_own_difference_is_confirmed_held_out() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(38);
        let mut first_and_confirmed = 0;
        const FLEETS: usize = 100;
        for _ in 0..FLEETS {
            let fleet = fleet(&mut rng, 30, |i, f| if i < 6 && f == 2 { 5.0 } else { 1.0 });
            let listed = explain(&fleet, &six_of_thirty());
            first_and_confirmed += usize::from(first_confirmed(&listed, "f2"));
            // Confirmed ones before the others.
            let confirmed: Vec<bool> = listed
                .iter()
                .filter(|d| !d.with_whole)
                .map(|d| d.held_out.is_some_and(|h| h.confirmed))
                .collect();
            assert!(confirmed.windows(2).all(|w| w[0] >= w[1]), "{listed:#?}");
        }
        assert!(
            first_and_confirmed >= FLEETS * 95 / 100,
            "{first_and_confirmed} of {FLEETS}"
        );
    }

    /// The whole fleet at 1.6× its rate in the second half (more load), and the healthy nodes
    /// without a single event of the shifted function: each half is cut at its own level, and
    /// the cause is still confirmed. (The window's threshold lies between the halves' levels
    /// here, so a cut carried over from the window would put slow nodes of the first half and
    /// fast nodes of the second on the wrong side.)
    #[test]
    fn a_fleet_busier_in_one_half_is_cut_in_each_half_at_its_own_level() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(40);
        let mut first_and_confirmed = 0;
        const FLEETS: usize = 50;
        for _ in 0..FLEETS {
            let fleet = fleet_with_halves(
                &mut rng,
                30,
                |i, f| match (i < 6, f == 2) {
                    (true, true) => 5.0,
                    (false, true) => 0.0,
                    _ => 1.0,
                },
                [1.0, 1.6],
            );
            let listed = explain(&fleet, &six_of_thirty());
            first_and_confirmed += usize::from(first_confirmed(&listed, "f2"));
        }
        assert!(
            first_and_confirmed >= FLEETS * 95 / 100,
            "{first_and_confirmed} of {FLEETS}"
        );
    }

    /// Other events did not choose the bands: their differences are not tested held out, and
    /// keep their places.
    #[test]
    fn other_events_are_left_as_they_are() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(39);
        let fleet = fleet(&mut rng, 20, |i, f| if i < 5 && f == 0 { 4.0 } else { 1.0 });
        let groups = Groups {
            low: (5..20).collect(),
            high: (0..5).collect(),
            slow: Some("high"),
        };
        let mut cpu = fleet.0 .0.clone();
        cpu.event = "cpu".into();
        let mut listed = code_differences(&[cpu], &groups, 50);
        let before: Vec<String> = listed.iter().map(|d| d.function.clone()).collect();
        let halves = &fleet.1;
        let summary = held_out(
            &mut listed,
            &groups,
            [
                Half {
                    metric: &halves[0].1,
                    table: &halves[0].0,
                },
                Half {
                    metric: &halves[1].1,
                    table: &halves[1].0,
                },
            ],
        );
        assert_eq!(summary, HeldOutSummary::default());
        assert!(!listed.is_empty() && listed.iter().all(|d| d.held_out.is_none()));
        assert_eq!(listed.iter().map(|d| d.function.clone()).collect::<Vec<_>>(), before);
    }
}
