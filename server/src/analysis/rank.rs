//! Tests between two groups of nodes that count each node once: a node's value is one
//! observation, so a function that is large on one node and absent on the others does not look
//! like a difference between the groups (as it would in two summed profiles).
//!
//! - [`mann_whitney`]: does a per-node value differ between the groups (rank test, exact for
//!   small groups without ties), with its effect size (rank-biserial correlation);
//! - [`fisher`]: does a yes/no property of nodes (a label value) go with the group (exact);
//! - [`q_values`]: Benjamini–Hochberg adjusted p-values when many are tested at once.

/// A rank test of values in `low` against values in `high`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankTest {
    /// Two-sided p-value of "both groups come from one distribution".
    pub p_value: f64,
    /// Rank-biserial correlation in [-1, 1]: the share of (low, high) pairs where the high
    /// group's node has the larger value, minus the share where it has the smaller. 1: every
    /// node of `high` is above every node of `low`.
    pub effect: f64,
}

/// Groups up to this many pairs get the exact distribution of U (when no values tie): its cost
/// grows as pairs² × the smaller group (20 × 20: 0.2 M steps; the approximation is close by then).
const EXACT_PAIRS: usize = 400;

/// The Mann–Whitney U test. Exact for small groups without ties, else the normal
/// approximation with the tie correction and a continuity correction.
pub fn mann_whitney(low: &[f64], high: &[f64]) -> RankTest {
    let (m, n) = (low.len(), high.len());
    if m == 0 || n == 0 {
        return RankTest {
            p_value: 1.0,
            effect: 0.0,
        };
    }
    // Midranks of the pooled values; ties get the mean of their ranks.
    let mut all: Vec<(f64, bool)> = low
        .iter()
        .map(|&v| (v, false))
        .chain(high.iter().map(|&v| (v, true)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rank_sum_high = 0.0;
    let mut tie_term = 0.0;
    let mut ties = false;
    let mut i = 0;
    while i < all.len() {
        let mut j = i + 1;
        while j < all.len() && all[j].0 == all[i].0 {
            j += 1;
        }
        let rank = (i + j + 1) as f64 / 2.0; // mean of ranks i+1..=j
        let t = (j - i) as f64;
        if j - i > 1 {
            ties = true;
            tie_term += t * t * t - t;
        }
        rank_sum_high += rank * all[i..j].iter().filter(|x| x.1).count() as f64;
        i = j;
    }
    let (mf, nf) = (m as f64, n as f64);
    // U of the high group: pairs where its node is larger, ties counting a half.
    let u = rank_sum_high - nf * (nf + 1.0) / 2.0;
    let effect = 2.0 * u / (mf * nf) - 1.0;
    let p_value = if !ties && m * n <= EXACT_PAIRS {
        exact_p(m, n, u.round() as usize)
    } else {
        let mean = mf * nf / 2.0;
        let total = mf + nf;
        let var = mf * nf / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)));
        if var <= 0.0 {
            1.0
        } else {
            let z = ((u - mean).abs() - 0.5).max(0.0) / var.sqrt();
            (2.0 * normal_upper(z)).min(1.0)
        }
    };
    RankTest { p_value, effect }
}

/// Two-sided exact p-value of U = `u` for groups of `m` and `n` without ties: the share of
/// the C(m+n, m) arrangements at least as far from the centre.
fn exact_p(m: usize, n: usize, u: usize) -> f64 {
    let max = m * n;
    // f(i, j, u): orderings of i low and j high values with U = u. The largest value is either
    // low (U unchanged) or high (above all i low values):
    // f(i, j, u) = f(i-1, j, u) + f(i, j-1, u-i). `f[j][u]` holds one i at a time.
    let mut f: Vec<Vec<f64>> = (0..=n).map(|_| vec![0.0; max + 1]).collect();
    for row in f.iter_mut() {
        row[0] = 1.0; // i = 0: only U = 0
    }
    for i in 1..=m {
        let mut next: Vec<Vec<f64>> = (0..=n).map(|_| vec![0.0; max + 1]).collect();
        for j in 0..=n {
            for v in 0..=max {
                let mut c = f[j][v];
                if j > 0 && v >= i {
                    c += next[j - 1][v - i];
                }
                next[j][v] = c;
            }
        }
        f = next;
    }
    let counts = &f[n];
    let total: f64 = counts.iter().sum();
    let centre = max as f64 / 2.0;
    let far = (u as f64 - centre).abs();
    let at_least: f64 = counts
        .iter()
        .enumerate()
        .filter(|(v, _)| (*v as f64 - centre).abs() >= far - 1e-9)
        .map(|(_, c)| c)
        .sum();
    (at_least / total).min(1.0)
}

/// P(Z > z) for a standard normal Z (Abramowitz–Stegun 7.1.26 on erfc, error < 1.5e-7).
fn normal_upper(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly =
        t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    let erfc = if x >= 0.0 { erfc } else { 2.0 - erfc };
    0.5 * erfc
}

/// Two-sided Fisher exact test of a 2×2 table: `a` nodes of group one with the property, `b`
/// without, `c` of group two with it, `d` without. The p-value of "the property does not go
/// with the group".
pub fn fisher(a: usize, b: usize, c: usize, d: usize) -> f64 {
    let (row1, col1, n) = (a + b, a + c, a + b + c + d);
    let lf = |k: usize| ln_factorial(k);
    let ln_p = |x: usize| {
        // P(X = x) of the hypergeometric distribution with the table's margins.
        lf(row1) + lf(n - row1) + lf(col1) + lf(n - col1)
            - lf(n)
            - lf(x)
            - lf(row1 - x)
            - lf(col1 - x)
            - lf(n + x - row1 - col1)
    };
    let lo = (row1 + col1).saturating_sub(n);
    let hi = row1.min(col1);
    let observed = ln_p(a);
    let p: f64 = (lo..=hi)
        .map(ln_p)
        .filter(|&l| l <= observed + 1e-7)
        .map(f64::exp)
        .sum();
    p.min(1.0)
}

/// P(X ≤ x) for X binomial over `m` trials of chance `p` each.
pub fn binomial_lower(x: usize, m: usize, p: f64) -> f64 {
    let (ln_p, ln_q) = (p.ln(), (1.0 - p).ln());
    let sum: f64 = (0..=x.min(m))
        .map(|k| {
            let ln_choose = ln_factorial(m) - ln_factorial(k) - ln_factorial(m - k);
            (ln_choose + k as f64 * ln_p + (m - k) as f64 * ln_q).exp()
        })
        .sum();
    sum.min(1.0)
}

/// Counts of `n` at most this are tested exactly; above, the normal approximation is within a
/// hair of the exact tail and the exact sum would cost `n` terms.
const EXACT_COUNTS: usize = 2_000;

/// Two-sided p-value of "one rate of events throughout": `events_a` over `exposure_a` against
/// `events_b` over `exposure_b` (a node's samples in two halves of a window, over its CPU-seconds
/// in each). Given the events of both, those of `a` are binomial with the chance `a`'s share of
/// the exposure (the conditional test of two Poisson rates): exact up to [`EXACT_COUNTS`]
/// events, the normal approximation with a continuity correction above. 1 when there is no
/// exposure on one side or no event on either.
pub fn rate_change(events_a: f64, exposure_a: f64, events_b: f64, exposure_b: f64) -> f64 {
    let (a, n) = (
        events_a.round().max(0.0) as usize,
        (events_a + events_b).round().max(0.0) as usize,
    );
    if n == 0 || exposure_a <= 0.0 || exposure_b <= 0.0 {
        return 1.0;
    }
    let (a, chance) = (a.min(n), exposure_a / (exposure_a + exposure_b));
    let tails = if n <= EXACT_COUNTS {
        let below = binomial_lower(a, n, chance);
        let above = if a == 0 {
            1.0
        } else {
            1.0 - binomial_lower(a - 1, n, chance)
        };
        below.min(above.max(0.0))
    } else {
        let (mean, sd) = (n as f64 * chance, (n as f64 * chance * (1.0 - chance)).sqrt());
        normal_upper(((a as f64 - mean).abs() - 0.5).max(0.0) / sd)
    };
    (2.0 * tails).min(1.0)
}

/// Two-sided p-value of Student's t-test on the logarithms of `low` against `high` (shares of
/// a whole, rates): whether their geometric means differ, with one spread for both (the
/// node-to-node noise, the same in both groups when nothing but the mean moved). Zeros are raised
/// to half the smallest value above zero of either group (the resolution of the values). 1 when
/// the groups have fewer than three values in all, a group none, or no value varies. Where
/// node-to-node noise is log-normal, this tells a shift of a few nodes from noise that a rank
/// test cannot: three nodes against seven reach p = 0.017 at best by ranks, however far apart.
/// Welch's test, which gives each group its own spread, is not used: with three nodes against
/// 27 it finds p < 0.001 in 1.3% of groups drawn from one distribution, 13 times too often.
pub fn log_t_test(low: &[f64], high: &[f64]) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let floor = 0.5
        * low
            .iter()
            .chain(high)
            .copied()
            .filter(|&v| v > 0.0)
            .fold(f64::INFINITY, f64::min);
    if low.is_empty() || high.is_empty() || low.len() + high.len() < 3 || !floor.is_finite() {
        return 1.0;
    }
    let moments = |values: &[f64]| {
        let logs: Vec<f64> = values.iter().map(|&v| v.max(floor).ln()).collect();
        let n = logs.len() as f64;
        let mean = logs.iter().sum::<f64>() / n;
        let squares = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>();
        (mean, squares, n)
    };
    let ((m1, s1, n1), (m2, s2, n2)) = (moments(low), moments(high));
    let df = n1 + n2 - 2.0;
    let se = ((s1 + s2) / df * (1.0 / n1 + 1.0 / n2)).sqrt();
    if se <= 0.0 {
        return if m1 == m2 { 1.0 } else { 0.0 };
    }
    let t = (m2 - m1).abs() / se;
    match StudentsT::new(0.0, 1.0, df) {
        Ok(dist) => (2.0 * dist.sf(t)).min(1.0),
        Err(_) => 1.0,
    }
}

/// ln(k!), from a table built once (Fisher's test needs it for every table of a fleet).
fn ln_factorial(k: usize) -> f64 {
    static TABLE: std::sync::OnceLock<std::sync::Mutex<Vec<f64>>> = std::sync::OnceLock::new();
    let mut table = TABLE
        .get_or_init(|| std::sync::Mutex::new(vec![0.0, 0.0]))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    while table.len() <= k {
        let n = table.len();
        let next = table[n - 1] + (n as f64).ln();
        table.push(next);
    }
    table[k]
}

/// Benjamini–Hochberg q-values of `p`, in the same order.
pub fn q_values(p: &[f64]) -> Vec<f64> {
    let n = p.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
    let mut q = vec![1.0; n];
    let mut running: f64 = 1.0;
    for (i, &k) in order.iter().enumerate() {
        let rank = n - i; // 1-based rank from the smallest
        running = running.min(p[k] * n as f64 / rank as f64);
        q[k] = running.min(1.0);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference values from the tables of the exact distribution of U.
    /// Student's test on log values. Reference: t = 15.900 on 5 degrees of freedom, whose
    /// two-sided tail is 1.7911e-5 (Student's t density integrated numerically); a rank test of
    /// three against four reaches 0.057 at best. Too few values are not tested.
    #[test]
    fn t_test_on_log_values() {
        let p = log_t_test(&[1.0, 1.2, 0.9], &[4.0, 4.4, 3.6, 4.1]);
        assert!((p - 1.7911e-5).abs() < 1e-8, "{p}");
        assert_eq!(log_t_test(&[1.0], &[2.0]), 1.0);
        assert_eq!(log_t_test(&[], &[2.0, 3.0, 4.0]), 1.0);
        assert_eq!(log_t_test(&[1.0, 1.0], &[1.0, 1.0]), 1.0);
        assert!(
            log_t_test(&[0.0, 0.0, 0.0], &[1.0, 1.1, 0.9]) < 1e-3,
            "zeros raised to half the smallest: t = 13.7 on 4 degrees of freedom"
        );
    }

    /// A rate that holds gives large p-values, exact or approximated; one that doubled, a tiny
    /// one; reference: 10 events against 30 over equal exposures is binomial(40, 1/2) ≤ 10,
    /// 0.00111 one-sided (R: binom.test(10, 40)$p.value = 0.002221).
    #[test]
    fn a_rate_that_changed_between_two_spans() {
        assert!((rate_change(10.0, 1.0, 30.0, 1.0) - 0.002_221).abs() < 1e-5);
        assert_eq!(rate_change(0.0, 1.0, 0.0, 1.0), 1.0);
        assert_eq!(rate_change(5.0, 0.0, 5.0, 1.0), 1.0);
        assert!(
            rate_change(20.0, 2.0, 10.0, 1.0) > 0.9,
            "the same rate over twice the exposure"
        );
        // Above the exact range: 50,000 against 50,400 is within noise, 50,000 against 100,000 is not.
        assert!(rate_change(50_000.0, 1.0, 50_400.0, 1.0) > 0.1);
        assert!(rate_change(50_000.0, 1.0, 100_000.0, 1.0) < 1e-12);
    }

    #[test]
    fn binomial() {
        assert!((binomial_lower(0, 3, 0.5) - 0.125).abs() < 1e-12);
        assert!((binomial_lower(2, 4, 0.5) - 11.0 / 16.0).abs() < 1e-12);
        assert!((binomial_lower(10, 10, 0.5) - 1.0).abs() < 1e-12);
        assert!((binomial_lower(0, 2, 1.0 / 3.0) - 4.0 / 9.0).abs() < 1e-12);
    }

    #[test]
    fn exact_mann_whitney() {
        // Complete separation of 3 and 3: 2 of 20 arrangements are as extreme.
        let t = mann_whitney(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]);
        assert!((t.p_value - 0.1).abs() < 1e-12, "{t:?}");
        assert_eq!(t.effect, 1.0);
        // 4 and 4 separated: 2/70.
        let t = mann_whitney(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]);
        assert!((t.p_value - 2.0 / 70.0).abs() < 1e-12, "{t:?}");
        // Reversed groups: the same p, the opposite effect.
        let t = mann_whitney(&[5.0, 6.0, 7.0, 8.0], &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.effect, -1.0);
        // Interleaved: no evidence.
        let t = mann_whitney(&[1.0, 3.0, 5.0, 7.0], &[2.0, 4.0, 6.0, 8.0]);
        assert!(t.p_value > 0.6, "{t:?}");
    }

    /// The normal approximation agrees with the exact test where both apply, and handles ties.
    #[test]
    fn approximate_mann_whitney() {
        // U = 264 of 400 pairs: p ≈ 0.086 by either method.
        let low: Vec<f64> = (0..20).map(|i| i as f64).collect();
        let high: Vec<f64> = (0..20).map(|i| i as f64 + 3.5).collect();
        let exact = mann_whitney(&low, &high);
        let mut tied_low = low.clone();
        tied_low[0] = tied_low[1]; // a tie below every high value: U unchanged, approximated
        let approx = mann_whitney(&tied_low, &high);
        assert_eq!(exact.effect, approx.effect);
        assert!((exact.effect - 0.32).abs() < 1e-12, "{exact:?}");
        assert!(
            (exact.p_value / approx.p_value - 1.0).abs() < 0.15,
            "{exact:?} {approx:?}"
        );
        assert!((0.07..0.1).contains(&approx.p_value), "{approx:?}");
        // All zeros on both sides: no difference, no division by zero.
        let t = mann_whitney(&[0.0; 10], &[0.0; 10]);
        assert_eq!((t.p_value, t.effect), (1.0, 0.0));
    }

    #[test]
    fn fisher_exact() {
        // The tea-tasting table: 3 of 4 right, one-sided 0.243, two-sided 0.486.
        assert!((fisher(3, 1, 1, 3) - 0.4857).abs() < 1e-3);
        // A label that splits 5 slow from 15 fast nodes exactly.
        let p = fisher(5, 0, 0, 15);
        assert!((p - 1.0 / 15504.0).abs() < 1e-9, "{p}");
        assert!((fisher(2, 2, 2, 2) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn benjamini_hochberg() {
        let q = q_values(&[0.01, 0.04, 0.03, 0.5]);
        assert!((q[0] - 0.04).abs() < 1e-12);
        assert!((q[1] - 0.04 * 4.0 / 3.0).abs() < 1e-12);
        assert!((q[2] - 0.04 * 4.0 / 3.0).abs() < 1e-12);
        assert!((q[3] - 0.5).abs() < 1e-12);
    }
}
