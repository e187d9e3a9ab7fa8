//! Band detection on seeded synthetic fleets (`make bench`, BENCHMARKS.md "Band detection").
//!
//! Fleets of 20 to 1,000 nodes with log-normal node-to-node noise; in some a band of nodes is
//! a factor slower. Reported per case: how often two bands are found, how often the slow band
//! is exactly the slow nodes, the share of nodes put in the wrong band next to the fewest an
//! ideal classifier that knows both distributions would misplace (the reference: overlap no
//! method can undo), false bands in one-band fleets, and the time per detection.
//!
//! A second table: events that most nodes have none of (remote accesses, major faults): counts
//! drawn from Poisson distributions, a minority with many, the rest with none or a few by
//! chance, and one-band fleets of rare events; what `compare` runs on counts
//! (`detect_counts`), beside `detect` on the same values.
//!
//! A third table: one-band fleets whose node-to-node noise has heavier tails than log-normal
//! (Student's t in log space), where the extreme nodes of a tail must not be called a band.
//!
//! A fourth table: the fleet shapes of issue 48, from 10 to 10,000 nodes: one-band fleets that
//! are not normal (a ramp, log-uniform, skewed, heavy-tailed), where any band is false; small
//! bands (3 nodes, 1%), and three levels, where the answer should be the slowest level exactly.
//!
//! usage: cargo run --release -p bimodal-server --example bands_bench [TRIALS [TABLE...]]
//!   TABLE: bands, sparse, heavy or shapes (default: all four)

use std::time::Instant;

use bimodal_server::analysis::bands::{detect, detect_counts, BandConfig, Bands, Evidence, NullCache};
use rand::SeedableRng;
use rand_distr::{Distribution, Poisson, StandardNormal, StudentT};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let trials: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(200);
    let tables: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let wanted = |t: &str| tables.is_empty() || tables.contains(&t);
    let config = BandConfig::default();
    let mut null = NullCache::default();
    if wanted("bands") {
        bands(trials, &config, &mut null);
    }
    if wanted("sparse") {
        sparse(trials, &config, &mut null);
    }
    if wanted("heavy") {
        heavy(trials, &config, &mut null);
    }
    if wanted("shapes") {
        shapes(trials, &config, &mut null);
    }
}

/// A slow band of a share of the nodes, a factor slower, in log-normal noise; one-band fleets of
/// the same noise beside.
fn bands(trials: usize, config: &BandConfig, null: &mut NullCache) {
    println!("| nodes | slow band | factor | noise σ | bands found | slow band exact | nodes misplaced (ideal) | false bands, one-band fleet | detection p50 / p95 |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for &n in &[20usize, 50, 100, 300, 1000] {
        for &(fraction, factor, sigma) in &[
            (0.1, 1.5, 0.05),
            (0.1, 1.5, 0.1),
            (0.3, 1.5, 0.1),
            (0.1, 3.0, 0.2),
            (0.1, 1.2, 0.1),
        ] {
            let slow = ((n as f64 * fraction).round() as usize).max(1);
            let (mut found, mut exact, mut misplaced, mut false_bands) = (0, 0, 0usize, 0);
            let mut times = Vec::with_capacity(trials);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                n as u64 * 1_000 + (factor * 100.0) as u64 + (sigma * 1e4) as u64,
            );
            // Warm the null distribution for this size: it is drawn once per size and reused.
            let _ = detect(
                &vec![1.0; n]
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v + i as f64)
                    .collect::<Vec<_>>(),
                config,
                null,
            );
            for _ in 0..trials {
                let values: Vec<f64> = (0..n)
                    .map(|i| {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        (if i < slow { factor } else { 1.0 }) * (sigma * z).exp()
                    })
                    .collect();
                let t = Instant::now();
                let got = detect(&values, config, null);
                times.push(t.elapsed().as_secs_f64());
                if let Bands::Two(split) = got {
                    found += 1;
                    let want: Vec<usize> = (0..slow).collect();
                    if split.high == want {
                        exact += 1;
                    }
                    misplaced += split.high.iter().filter(|&&i| i >= slow).count()
                        + (0..slow).filter(|i| !split.high.contains(i)).count();
                } else {
                    misplaced += slow;
                }
                let one: Vec<f64> = (0..n)
                    .map(|_| {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        (sigma * z).exp()
                    })
                    .collect();
                if matches!(detect(&one, config, null), Bands::Two(_)) {
                    false_bands += 1;
                }
            }
            times.sort_by(f64::total_cmp);
            let pct = |x: usize| 100.0 * x as f64 / trials as f64;
            println!(
                "| {n} | {:.0}% ({slow}) | {factor}x | {sigma} | {:.1}% | {:.1}% | {:.2}% ({:.2}%) | {:.1}% | {:.2} / {:.2} ms |",
                fraction * 100.0,
                pct(found),
                pct(exact),
                100.0 * misplaced as f64 / (trials * n) as f64,
                100.0 * ideal_misplaced(n, slow, factor, sigma) / n as f64,
                pct(false_bands),
                times[trials / 2] * 1e3,
                times[trials * 95 / 100] * 1e3,
            );
        }
    }
}

/// A fleet shape: each node's value given its index, the fleet's size and a random source; and
/// the nodes a right answer puts in the slow (high) band, none for a one-band shape.
struct Shape {
    name: &'static str,
    value: fn(usize, usize, &mut rand_chacha::ChaCha8Rng) -> f64,
    slow: fn(usize) -> usize,
}

/// Log-normal node-to-node noise of σ 0.1.
fn noise(rng: &mut rand_chacha::ChaCha8Rng) -> f64 {
    let z: f64 = StandardNormal.sample(rng);
    (0.1 * z).exp()
}

const SHAPES: [Shape; 9] = [
    Shape {
        name: "one band: log-normal, σ 0.1",
        value: |_, _, rng| noise(rng),
        slow: |_| 0,
    },
    Shape {
        name: "one band: ramp 1.00…1.95× in 20 even steps",
        value: |i, n, _| 1.0 + 0.05 * (i * 20 / n) as f64,
        slow: |_| 0,
    },
    Shape {
        name: "one band: log-uniform ±20%",
        value: |_, _, rng| (rand::Rng::random_range(rng, -0.2f64..0.2)).exp(),
        slow: |_| 0,
    },
    Shape {
        name: "one band: skewed (1 + exponential, mean 0.2)",
        value: |_, _, rng| {
            let e: f64 = rand_distr::Exp1.sample(rng);
            1.0 + 0.2 * e
        },
        slow: |_| 0,
    },
    Shape {
        name: "one band: heavy tails (Student's t, 3 degrees, scale 0.1)",
        value: |_, _, rng| (0.1f64 * StudentT::new(3.0).unwrap().sample(rng)).exp(),
        slow: |_| 0,
    },
    Shape {
        name: "3 nodes 5× slower, σ 0.1",
        value: |i, _, rng| if i < 3 { 5.0 } else { 1.0 } * noise(rng),
        slow: |_| 3,
    },
    Shape {
        name: "1% 2× slower, σ 0.1",
        value: |i, n, rng| if i < (n / 100).max(1) { 2.0 } else { 1.0 } * noise(rng),
        slow: |n| (n / 100).max(1),
    },
    Shape {
        name: "12% 3× faster (Netflix's shape), σ 0.1",
        value: |i, n, rng| if i < n * 88 / 100 { 3.0 } else { 1.0 } * noise(rng),
        slow: |n| n * 88 / 100,
    },
    Shape {
        name: "three levels 60/25/15% at 1×/2×/4×, σ 0.1 (the slowest level wanted)",
        value: |i, n, rng| {
            let level = if i < n * 15 / 100 {
                4.0
            } else if i < n * 40 / 100 {
                2.0
            } else {
                1.0
            };
            level * noise(rng)
        },
        slow: |n| n * 15 / 100,
    },
];

/// A blank line, then the head of a Markdown table: `columns`, then a column per fleet size.
fn table_head(columns: &[&str], sizes: &[usize]) {
    println!();
    let named: Vec<String> = columns
        .iter()
        .map(|c| c.to_string())
        .chain(sizes.iter().map(|n| format!("{n} nodes")))
        .collect();
    println!("| {} |", named.join(" | "));
    println!("|{}", " --- |".repeat(named.len()));
}

/// Each shape at 10 to 10,000 nodes: for one-band shapes the share of fleets given two bands
/// (all false), for the others the share whose slow band is exactly the slow nodes.
fn shapes(trials: usize, config: &BandConfig, null: &mut NullCache) {
    const SIZES: [usize; 4] = [10, 100, 1000, 10_000];
    table_head(&["shape", "measure"], &SIZES);
    for (k, shape) in SHAPES.iter().enumerate() {
        let one_band = (shape.slow)(SIZES[0]) == 0;
        print!(
            "| {} | {} |",
            shape.name,
            if one_band { "false bands" } else { "slow band exact" }
        );
        for n in SIZES {
            // Fewer fleets of 10,000 nodes: each detection sorts them, and the null of that size
            // is drawn once.
            let trials = if n >= 10_000 { trials.div_ceil(10) } else { trials };
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed_0000 + k as u64 * 100_000 + n as u64);
            let slow: Vec<usize> = (0..(shape.slow)(n)).collect();
            let hits = (0..trials)
                .filter(|_| {
                    let values: Vec<f64> = (0..n).map(|i| (shape.value)(i, n, &mut rng)).collect();
                    let got = detect(&values, config, null);
                    let outliers = match &got {
                        Bands::Two(split) => &split.outliers,
                        Bands::None { outliers, .. } => outliers,
                    };
                    match (&got, one_band) {
                        (Bands::Two(_), true) => true,
                        (_, true) => false,
                        // Fewer than the smallest band: named as outliers.
                        (_, false) if slow.len() < config.min_band(n) => {
                            let mut named = outliers.clone();
                            named.sort_unstable();
                            named == slow
                        }
                        // The slowest level, when the split has several.
                        (Bands::Two(split), false) => split.levels.last().unwrap_or(&split.high) == &slow,
                        (Bands::None { .. }, false) => false,
                    }
                })
                .count();
            print!(" {:.1}% |", 100.0 * hits as f64 / trials as f64);
        }
        println!();
    }
}

/// False bands in one-band fleets whose log values follow Student's t (scale 0.1) with `df`
/// degrees of freedom: a few nodes far out on either side, as noisy neighbours make them.
fn heavy(trials: usize, config: &BandConfig, null: &mut NullCache) {
    const SIZES: [usize; 5] = [20, 50, 100, 300, 1000];
    table_head(&["tails"], &SIZES);
    for df in [3.0, 5.0, 10.0] {
        print!("| Student's t, {df} degrees of freedom |");
        let t = StudentT::new(df).expect("degrees of freedom above zero");
        for n in SIZES {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(n as u64 + df as u64 * 100);
            let false_bands = (0..trials)
                .filter(|_| {
                    let values: Vec<f64> = (0..n).map(|_| (0.1f64 * t.sample(&mut rng)).exp()).collect();
                    matches!(detect(&values, config, null), Bands::Two(_))
                })
                .count();
            print!(" {:.1}% |", 100.0 * false_bands as f64 / trials as f64);
        }
        println!();
    }
}

/// Bands in counts that are zero on most nodes: each node ran `EXPOSURE` CPU-seconds; a share
/// of the nodes expects `slow_events` events, the rest `rest_events` (0: none at all); one-band
/// fleets expect `rest_events` everywhere, with log-normal (σ 0.3) node-to-node variation.
fn sparse(trials: usize, config: &BandConfig, null: &mut NullCache) {
    const EXPOSURE: f64 = 10.0;
    println!();
    println!("| nodes | band | events expected, band / rest | bands found | band exact | false bands, one-band fleet of the rest | the same by `detect` on the values alone: found / exact / false |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let pipeline = |events: &[f64], null: &mut NullCache| -> Bands {
        let values: Vec<f64> = events.iter().map(|e| e / EXPOSURE).collect();
        let evidence: Vec<Option<Evidence>> = events
            .iter()
            .map(|&events| {
                Some(Evidence {
                    events,
                    exposure: EXPOSURE,
                })
            })
            .collect();
        detect_counts(&values, &evidence, config, null)
    };
    for &n in &[20usize, 100, 1000] {
        for &(fraction, slow_events, rest_events) in &[
            (0.1, 100.0, 0.0),
            (0.1, 100.0, 0.3),
            (0.1, 30.0, 1.0),
            (0.3, 100.0, 0.3),
            (0.1, 100.0, 3.0),
        ] {
            let slow = ((n as f64 * fraction).round() as usize).max(1);
            let mut rng =
                rand_chacha::ChaCha8Rng::seed_from_u64(n as u64 * 7 + slow_events as u64 + (rest_events * 10.0) as u64);
            let mut draw = |mean: f64| -> f64 {
                let z: f64 = StandardNormal.sample(&mut rng);
                let mean = mean * (0.3 * z).exp();
                if mean <= 0.0 {
                    return 0.0;
                }
                Poisson::new(mean).map_or(0.0, |p| p.sample(&mut rng))
            };
            let (mut found, mut exact, mut false_bands) = (0, 0, 0);
            let (mut plain_found, mut plain_exact, mut plain_false) = (0, 0, 0);
            let slow_nodes: Vec<usize> = (0..slow).collect();
            for _ in 0..trials {
                let events: Vec<f64> = (0..n)
                    .map(|i| draw(if i < slow { slow_events } else { rest_events }))
                    .collect();
                if let Bands::Two(split) = pipeline(&events, null) {
                    found += 1;
                    exact += usize::from(split.high == slow_nodes);
                }
                let rates: Vec<f64> = events.iter().map(|e| e / EXPOSURE).collect();
                if let Bands::Two(split) = detect(&rates, config, null) {
                    plain_found += 1;
                    plain_exact += usize::from(split.high == slow_nodes);
                }
                let one: Vec<f64> = (0..n).map(|_| draw(rest_events)).collect();
                false_bands += usize::from(matches!(pipeline(&one, null), Bands::Two(_)));
                let rates: Vec<f64> = one.iter().map(|e| e / EXPOSURE).collect();
                plain_false += usize::from(matches!(detect(&rates, config, null), Bands::Two(_)));
            }
            let pct = |x: usize| 100.0 * x as f64 / trials as f64;
            println!(
                "| {n} | {:.0}% ({slow}) | {slow_events} / {rest_events} | {:.1}% | {:.1}% | {:.1}% | {:.1}% / {:.1}% / {:.1}% |",
                fraction * 100.0,
                pct(found),
                pct(exact),
                pct(false_bands),
                pct(plain_found),
                pct(plain_exact),
                pct(plain_false)
            );
        }
    }
}

/// Expected nodes misplaced by the best threshold between the two known log-normal bands.
fn ideal_misplaced(n: usize, slow: usize, factor: f64, sigma: f64) -> f64 {
    let (fast, slow) = ((n - slow) as f64, slow as f64);
    let d = factor.ln();
    // Scan thresholds in log space between the two means for the fewest expected errors.
    (0..=1000)
        .map(|i| {
            let t = d * i as f64 / 1000.0;
            fast * upper_tail(t / sigma) + slow * upper_tail((d - t) / sigma)
        })
        .fold(f64::INFINITY, f64::min)
}

/// P(Z > z) for a standard normal Z.
fn upper_tail(z: f64) -> f64 {
    0.5 * libm::erfc(z / std::f64::consts::SQRT_2)
}
