//! Band detection on seeded synthetic fleets (`make bench`, BENCHMARKS.md "Band detection").
//!
//! Fleets of 20 to 1,000 nodes with log-normal node-to-node noise; in some a band of nodes is
//! a factor slower. Reported per case: how often two bands are found, how often the slow band
//! is exactly the slow nodes, the share of nodes put in the wrong band next to the fewest an
//! ideal classifier that knows both distributions would misplace (the reference: overlap no
//! method can undo), false bands in one-band fleets, and the time per detection.
//!
//! usage: cargo run --release -p bimodal-server --example bands_bench [TRIALS]

use std::time::Instant;

use bimodal_server::analysis::bands::{detect, BandConfig, Bands, NullCache};
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

fn main() {
    let trials: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let config = BandConfig::default();
    let mut null = NullCache::default();
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
                &config,
                &mut null,
            );
            for _ in 0..trials {
                let values: Vec<f64> = (0..n)
                    .map(|i| {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        (if i < slow { factor } else { 1.0 }) * (sigma * z).exp()
                    })
                    .collect();
                let t = Instant::now();
                let got = detect(&values, &config, &mut null);
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
                if matches!(detect(&one, &config, &mut null), Bands::Two(_)) {
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
