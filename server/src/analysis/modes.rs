//! Whether a fleet's values have more than one mode, tested against the fleet's own shape.
//!
//! Silverman's test: the *critical bandwidth* is the smallest bandwidth at which a Gaussian
//! kernel density estimate of the values has one mode. A fleet of one band needs little
//! smoothing to lose its spurious modes; two bands apart need enough to fill the gap between
//! them. The null fleets are drawn from the values themselves smoothed at that bandwidth (a
//! smoothed bootstrap, its variance kept that of the values), which is the closest one-mode
//! density to the data: a ramp stays a ramp, a skewed fleet skewed, a heavy tail heavy. The
//! p-value is the share of null fleets that still have more than one mode at the critical
//! bandwidth. The test is known to be conservative (its size is below the level for most
//! one-mode shapes), which errs on the side of "one band".
//!
//! Densities are evaluated on a grid a quarter of the bandwidth apart, from the values binned
//! linearly onto it: a mode narrower than the bandwidth cannot exist, and each evaluation costs
//! O(n + grid × 33), not O(n × grid).
//!
//! A null fleet of many more nodes than the smoothed density has cells (an eighth of the
//! kernel's width apart) is drawn as its count per cell, a multinomial over the cells' masses,
//! rather than node by node: what the density test sees of it is the same up to where in its
//! cell each node lies, and a draw costs O(cells) instead of O(n) (a fleet of 100,000 nodes
//! spends its null draws on a few hundred cells; design 038).

use rand::SeedableRng;
use rand_distr::{Binomial, Distribution, StandardNormal, Uniform};

/// Grid points per bandwidth.
const PER_BANDWIDTH: f64 = 4.0;
/// The most grid points a density is evaluated at (then they lie further apart).
const MAX_GRID: usize = 4096;
/// Kernel reach, in bandwidths.
const REACH: f64 = 4.0;
/// Cells per width of the null fleets' kernel when they are drawn as counts per cell.
const CELLS_PER_KERNEL: f64 = 8.0;
/// Nodes per cell above which null fleets are drawn as counts per cell: a binomial draw per
/// cell costs about what a few nodes drawn one by one do.
const NODES_PER_CELL: usize = 4;

/// The test of one mode against more.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModeTest {
    /// Smallest bandwidth giving one mode (in the values' unit: log space for bands).
    pub bandwidth: f64,
    /// The largest bandwidth found with more than one mode (zero when none has): where
    /// [`dips`] looks.
    pub more: f64,
    /// Share of one-mode fleets drawn from the smoothed values with more than one mode at that
    /// bandwidth (with the observed fleet counted).
    pub p_value: f64,
    /// Null fleets drawn (fewer than asked when the answer was already clear).
    pub draws: usize,
}

/// Tests `values` (ascending, runs of equal values spread by [`untie`]) for more than one mode
/// with up to `draws` null fleets, stopping once the p-value cannot fall to `alpha`. (Counting how often the null fleets' best
/// split by Cohen's d beats the fleet's instead finds a band beside a shoulder more often, but
/// calls 30% of skewed fleets of 10,000 nodes two bands: design 033.)
///
/// The null fleets are drawn from `sorted` smoothed to one mode (see the module): node by node,
/// or as counts per cell when they have many nodes per cell.
pub fn more_than_one(sorted: &[f64], draws: usize, alpha: f64, seed: u64) -> ModeTest {
    let (bandwidth, below) = bracket(sorted);
    if bandwidth == 0.0 {
        return ModeTest {
            bandwidth,
            more: below,
            p_value: 1.0,
            draws: 0,
        };
    }
    let n = sorted.len();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (n as u64).rotate_left(32));
    let mut density = Density::default();
    let mut null = NullFleets::new(sorted, bandwidth);
    // Stop once this many null fleets look as split: the p-value is above alpha.
    let enough = (alpha * (draws + 1) as f64).ceil() as usize;
    let (mut more, mut drawn) = (0, 0);
    while drawn < draws && more < enough {
        drawn += 1;
        if null.draw_modes(&mut rng, &mut density, bandwidth) > 1 {
            more += 1;
        }
    }
    ModeTest {
        bandwidth,
        more: below,
        p_value: (more + 1) as f64 / (drawn + 1) as f64,
        draws: drawn,
    }
}

/// One-mode fleets drawn from values smoothed at a bandwidth, their variance kept.
enum NullFleets<'a> {
    /// Node by node: a value picked at random, moved by the kernel.
    Nodes {
        values: &'a [f64],
        pick: Uniform<usize>,
        shape: Smoothed,
        fleet: Vec<f64>,
    },
    /// Counts per cell of `step` from `lo`: cell `k` holds a node with probability
    /// `mass[k]`, drawn in order as binomials of the nodes left over `rest[k]`, the mass of
    /// cells `k..`.
    Cells {
        nodes: u64,
        lo: f64,
        step: f64,
        mass: Vec<f64>,
        rest: Vec<f64>,
        counts: Vec<f64>,
    },
}

/// Values smoothed at a bandwidth with their variance kept: a null node is
/// `mean + (value - mean + bandwidth × z) × shrink` (smoothing adds the kernel's variance;
/// shrinking towards the mean takes it back out).
#[derive(Clone, Copy)]
struct Smoothed {
    mean: f64,
    bandwidth: f64,
    shrink: f64,
}

impl Smoothed {
    fn of(values: &[f64], bandwidth: f64) -> Smoothed {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        Smoothed {
            mean,
            bandwidth,
            shrink: 1.0 / (1.0 + bandwidth * bandwidth / var).sqrt(),
        }
    }

    /// Where `value` stands once shrunk, before the kernel moves it.
    fn place(&self, value: f64) -> f64 {
        self.mean + (value - self.mean) * self.shrink
    }

    /// A null node drawn from `value`, `z` the kernel's standard normal draw.
    fn moved(&self, value: f64, z: f64) -> f64 {
        self.mean + (value - self.mean + self.bandwidth * z) * self.shrink
    }

    /// The width of the normal each value stands for about its place.
    fn width(&self) -> f64 {
        self.bandwidth * self.shrink
    }

    /// The cells of [`NullFleets::Cells`] for `sorted`: (the first one's place, their step,
    /// how many), a kernel's reach past the lowest and highest places.
    fn cells(&self, sorted: &[f64]) -> (f64, f64, usize) {
        let (lo, hi) = (
            self.place(sorted[0]) - REACH * self.width(),
            self.place(sorted[sorted.len() - 1]) + REACH * self.width(),
        );
        let step = self.width() / CELLS_PER_KERNEL;
        (lo, step, ((hi - lo) / step).ceil() as usize + 1)
    }
}

impl<'a> NullFleets<'a> {
    /// Null fleets of `sorted` smoothed at `bandwidth`: by cell when they have at least
    /// [`NODES_PER_CELL`] nodes per cell, else node by node.
    fn new(sorted: &'a [f64], bandwidth: f64) -> Self {
        let shape = Smoothed::of(sorted, bandwidth);
        let (_, _, cells) = shape.cells(sorted);
        match cells.saturating_mul(NODES_PER_CELL) > sorted.len() {
            true => Self::nodes(sorted, shape),
            false => Self::cells(sorted, shape),
        }
    }

    fn nodes(values: &'a [f64], shape: Smoothed) -> Self {
        NullFleets::Nodes {
            values,
            pick: Uniform::new(0, values.len()).expect("a fleet has nodes"),
            shape,
            fleet: vec![0.0; values.len()],
        }
    }

    fn cells(sorted: &'a [f64], shape: Smoothed) -> Self {
        let (lo, step, cells) = shape.cells(sorted);
        // The shrunk values binned linearly onto the cells, then each cell's share of the
        // kernels of all of them.
        let mut at = vec![0.0; cells];
        for &v in sorted {
            let x = (shape.place(v) - lo) / step;
            let i = (x.floor() as usize).min(cells - 2);
            let w = x - i as f64;
            at[i] += 1.0 - w;
            at[i + 1] += w;
        }
        let reach = ((REACH * CELLS_PER_KERNEL).ceil() as usize).min(cells - 1);
        let kernel: Vec<f64> = (0..=reach)
            .map(|j| (-0.5 * (j as f64 / CELLS_PER_KERNEL).powi(2)).exp())
            .collect();
        let mut mass: Vec<f64> = (0..cells)
            .map(|i| {
                let (from, to) = (i.saturating_sub(reach), (i + reach).min(cells - 1));
                (from..=to).map(|j| at[j] * kernel[i.abs_diff(j)]).sum::<f64>()
            })
            .collect();
        let total: f64 = mass.iter().sum();
        mass.iter_mut().for_each(|m| *m /= total);
        // Summed from the far end, so that the last cells' conditional shares do not suffer
        // the rounding of one minus the rest.
        let mut rest = vec![0.0; cells];
        let mut sum = 0.0;
        for k in (0..cells).rev() {
            sum += mass[k];
            rest[k] = sum;
        }
        NullFleets::Cells {
            nodes: sorted.len() as u64,
            lo,
            step,
            mass,
            rest,
            counts: vec![0.0; cells],
        }
    }

    /// Draws a null fleet and counts the modes of its density at `bandwidth`.
    fn draw_modes(&mut self, rng: &mut rand_chacha::ChaCha8Rng, density: &mut Density, bandwidth: f64) -> usize {
        match self {
            NullFleets::Nodes {
                values,
                pick,
                shape,
                fleet,
            } => {
                for y in fleet.iter_mut() {
                    let z: f64 = StandardNormal.sample(rng);
                    *y = shape.moved(values[pick.sample(rng)], z);
                }
                density.modes(fleet, bandwidth)
            }
            NullFleets::Cells {
                nodes,
                lo,
                step,
                mass,
                rest,
                counts,
            } => {
                let mut left = *nodes;
                for (k, count) in counts.iter_mut().enumerate() {
                    let c = match left {
                        0 => 0,
                        _ if rest[k] <= mass[k] => left,
                        _ => Binomial::new(left, (mass[k] / rest[k]).clamp(0.0, 1.0))
                            .expect("a share between 0 and 1")
                            .sample(rng),
                    };
                    *count = c as f64;
                    left -= c;
                }
                // A cell's nodes stand at its point.
                let (lo, step) = (*lo, *step);
                let first = counts.iter().position(|&c| c > 0.0).unwrap_or(0);
                let last = counts.iter().rposition(|&c| c > 0.0).unwrap_or(0);
                let points = (first..=last)
                    .filter(|&k| counts[k] > 0.0)
                    .map(|k| (lo + k as f64 * step, counts[k]));
                density.evaluate_points(lo + first as f64 * step, lo + last as f64 * step, bandwidth, points);
                density.count_modes()
            }
        }
    }
}

/// `sorted` with each run of equal values spread evenly over the cell it stands for: half-way
/// to the nearer different value on either side. A value many nodes share stands for values
/// that close together, not for a spike a density calls a mode: a fleet of 20 equal steps, 10
/// nodes on each, is a ramp rather than 20 modes. Fleets of two different values are left as
/// they are (their cells would meet and fill the gap between them).
pub fn untie(sorted: &[f64]) -> Vec<f64> {
    let mut runs: Vec<(f64, usize)> = Vec::new();
    for &v in sorted {
        match runs.last_mut() {
            Some((last, count)) if *last == v => *count += 1,
            _ => runs.push((v, 1)),
        }
    }
    if runs.len() < 3 || runs.len() == sorted.len() {
        return sorted.to_vec();
    }
    let mut out = Vec::with_capacity(sorted.len());
    for (r, &(v, count)) in runs.iter().enumerate() {
        let below = r.checked_sub(1).map_or(f64::INFINITY, |p| v - runs[p].0);
        let above = runs.get(r + 1).map_or(f64::INFINITY, |next| next.0 - v);
        let half = 0.5 * below.min(above);
        // Midpoints of `count` equal cells over [v - half, v + half]; a lone value stays put.
        out.extend((0..count).map(|j| v + half * (2.0 * (j as f64 + 0.5) / count as f64 - 1.0)));
    }
    out
}

/// The smallest bandwidth at which the density of `values` has one mode, to 0.5% (zero when
/// they are all equal).
pub fn critical_bandwidth(values: &[f64]) -> f64 {
    bracket(values).0
}

/// (the smallest bandwidth found with one mode, the largest found with more), 0.5% apart; the
/// second is zero when every bandwidth tried gives one mode.
fn bracket(values: &[f64]) -> (f64, f64) {
    let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
        (lo.min(v), hi.max(v))
    });
    let range = hi - lo;
    if range.is_nan() || range <= 0.0 {
        return (0.0, 0.0);
    }
    let mut density = Density::default();
    // Gaussians whose centres lie within a range of 2h of each other sum to one mode.
    let mut one = 0.5 * range;
    while density.modes(values, one) > 1 {
        one *= 2.0;
    }
    let mut more = range / (MAX_GRID as f64 / PER_BANDWIDTH);
    if density.modes(values, more) <= 1 {
        return (more, 0.0);
    }
    while one / more > 1.005 {
        let mid = (one * more).sqrt();
        if density.modes(values, mid) > 1 {
            more = mid;
        } else {
            one = mid;
        }
    }
    (one, more)
}

/// A dip of a density between two of its modes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dip {
    /// The lowest point of the dip, and the density there.
    pub at: f64,
    pub density: f64,
    /// The modes either side.
    pub from: f64,
    pub to: f64,
}

/// Where the values part when smoothed just short of one mode: the dips of their density at
/// `bandwidth` ([`ModeTest::more`]), lowest place first. Empty at a bandwidth of zero.
pub fn dips(values: &[f64], bandwidth: f64) -> Vec<Dip> {
    let more = bandwidth;
    if more == 0.0 {
        return Vec::new();
    }
    let mut density = Density::default();
    let (lo, step) = density.evaluate(values, more);
    let f = &density.densities;
    let place = |i: usize| lo + i as f64 * step;
    // Turning points: peaks and troughs alternate, a peak first and last.
    let mut turns: Vec<usize> = Vec::new();
    let mut rising = true;
    for i in 1..f.len() {
        if f[i] < f[i - 1] && rising {
            turns.push(i - 1);
            rising = false;
        } else if f[i] > f[i - 1] && !rising {
            turns.push(i - 1);
            rising = true;
        }
    }
    turns
        .windows(3)
        .step_by(2)
        .map(|w| Dip {
            at: place(w[1]),
            density: f[w[1]],
            from: place(w[0]),
            to: place(w[2]),
        })
        .collect()
}

/// Buffers reused between density evaluations.
#[derive(Default)]
struct Density {
    bins: Vec<f64>,
    kernel: Vec<f64>,
    densities: Vec<f64>,
}

impl Density {
    /// The Gaussian kernel density of `values` at bandwidth `h` on a grid from the lowest value
    /// to the highest (every mode lies between them), into `self.densities`: (its first point,
    /// the step between points).
    fn evaluate(&mut self, values: &[f64], h: f64) -> (f64, f64) {
        let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
        self.evaluate_points(lo, hi, h, values.iter().map(|&v| (v, 1.0)))
    }

    /// [`Density::evaluate`] of `points` (place, weight) between `lo` and `hi`.
    fn evaluate_points(&mut self, lo: f64, hi: f64, h: f64, points: impl Iterator<Item = (f64, f64)>) -> (f64, f64) {
        let range = hi - lo;
        self.densities.clear();
        if range.is_nan() || range <= 0.0 {
            self.densities.push(points.map(|(_, w)| w).sum());
            return (lo, 0.0);
        }
        let grid = ((range / h * PER_BANDWIDTH).ceil() as usize + 1).clamp(3, MAX_GRID);
        let step = range / (grid - 1) as f64;
        self.bins.clear();
        self.bins.resize(grid, 0.0);
        for (v, weight) in points {
            let at = (v - lo) / step;
            let i = (at.floor() as usize).min(grid - 2);
            let w = at - i as f64;
            self.bins[i] += weight * (1.0 - w);
            self.bins[i + 1] += weight * w;
        }
        let reach = ((REACH * h / step).ceil() as usize).min(grid - 1);
        self.kernel.clear();
        self.kernel
            .extend((0..=reach).map(|j| (-0.5 * (j as f64 * step / h).powi(2)).exp()));
        let (bins, kernel) = (&self.bins, &self.kernel);
        self.densities.extend((0..grid).map(|i| {
            let from = i.saturating_sub(reach);
            let to = (i + reach).min(grid - 1);
            (from..=to).map(|j| bins[j] * kernel[i.abs_diff(j)]).sum::<f64>()
        }));
        (lo, step)
    }

    /// How many modes the Gaussian kernel density of `values` at bandwidth `h` has.
    fn modes(&mut self, values: &[f64], h: f64) -> usize {
        self.evaluate(values, h);
        self.count_modes()
    }

    /// How many modes the density last evaluated has.
    fn count_modes(&self) -> usize {
        let top = self.densities.iter().fold(0.0f64, |a, &b| a.max(b));
        // Differences below this are rounding, not a slope.
        let flat = top * 1e-9;
        // Rising into the first point from below the data; falling after the last.
        let (mut modes, mut rising, mut last) = (0, true, f64::NEG_INFINITY);
        for &f in &self.densities {
            if f > last + flat {
                rising = true;
            } else if f < last - flat {
                if rising {
                    modes += 1;
                }
                rising = false;
            }
            last = f;
        }
        if rising {
            modes += 1;
        }
        modes.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(seed: u64, n: usize, at: f64, sd: f64) -> Vec<f64> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| at + sd * <StandardNormal as Distribution<f64>>::sample(&StandardNormal, &mut rng))
            .collect()
    }

    fn sorted(mut v: Vec<f64>) -> Vec<f64> {
        v.sort_by(f64::total_cmp);
        v
    }

    /// Two values far apart have two modes until the bandwidth reaches about half their distance.
    #[test]
    fn two_points_merge_at_half_their_distance() {
        let h = critical_bandwidth(&[0.0, 2.0]);
        assert!((h - 1.0).abs() < 0.02, "{h}");
        let mut d = Density::default();
        assert_eq!(d.modes(&[0.0, 2.0], 0.9), 2);
        assert_eq!(d.modes(&[0.0, 2.0], 1.1), 1);
        assert_eq!(d.modes(&[0.0, 1.0, 2.0, 3.0], 0.1), 4);
        assert_eq!(critical_bandwidth(&[1.0; 5]), 0.0);
        let values = [0.0, 0.1, 0.2, 2.0, 2.1];
        let parts = dips(&values, bracket(&values).1);
        assert!(
            matches!(parts[..], [Dip { at, from, to, .. }] if from < 0.3 && at > 0.3 && at < 1.9 && to > at),
            "{parts:?}"
        );
        assert_eq!(dips(&[1.0; 5], bracket(&[1.0; 5]).1), []);
    }

    /// Two groups apart: more than one mode (p at its floor); one normal group: not.
    #[test]
    fn two_groups_are_two_modes_and_one_is_one() {
        let mut two = normal(1, 80, 0.0, 0.1);
        two.extend(normal(2, 20, 0.7, 0.1));
        let got = more_than_one(&sorted(two), 999, 0.01, 7);
        assert!(got.p_value <= 0.002, "{got:?}");
        let one = more_than_one(&sorted(normal(3, 100, 0.0, 0.1)), 999, 0.01, 7);
        assert!(one.p_value > 0.01 && one.draws < 999, "{one:?}");
    }

    /// Null fleets drawn as counts per cell look split as often as those drawn node by node:
    /// over a fleet with a shoulder, where about half of them have two modes.
    #[test]
    fn null_fleets_by_cell_are_null_fleets_by_node() {
        let mut values = normal(5, 6000, 0.0, 0.1);
        values.extend(normal(6, 1200, 0.25, 0.06));
        let values = sorted(values);
        let (bandwidth, _) = bracket(&values);
        assert!(
            matches!(NullFleets::new(&values, bandwidth), NullFleets::Cells { .. }),
            "drawn node by node"
        );
        let split = |mut null: NullFleets, seed: u64| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut density = Density::default();
            (0..600)
                .filter(|_| null.draw_modes(&mut rng, &mut density, bandwidth) > 1)
                .count() as f64
                / 600.0
        };
        let shape = Smoothed::of(&values, bandwidth);
        let by_node = split(NullFleets::nodes(&values, shape), 1);
        let by_cell = split(NullFleets::cells(&values, shape), 2);
        assert!(by_node > 0.1 && by_node < 0.9, "the case tells nothing: {by_node}");
        // Two shares of 600 draws: a standard error of at most 0.029 for their difference.
        assert!((by_node - by_cell).abs() < 0.09, "by node {by_node}, by cell {by_cell}");
    }

    /// A ramp of equal steps, ten nodes on each: one mode, its ties spread over the step.
    #[test]
    fn a_ramp_of_ties_is_one_mode() {
        let ramp: Vec<f64> = (0..200).map(|i| (1.0 + 0.05 * (i / 10) as f64).ln()).collect();
        let spread = untie(&ramp);
        assert_eq!(spread.len(), 200);
        assert!(spread.windows(2).all(|w| w[1] > w[0]), "{spread:?}");
        let got = more_than_one(&spread, 999, 0.01, 7);
        assert!(got.p_value > 0.01, "{got:?}");
        // Two values in all are not a lattice.
        assert_eq!(untie(&[0.0, 0.0, 1.0]), [0.0, 0.0, 1.0]);
    }
}
