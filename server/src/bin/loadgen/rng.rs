//! Deterministic randomness. A batch is a pure function of (seed, node, interval), so a batch
//! that must be sent again is generated again instead of being kept: 10,000 nodes with unacked
//! batches then cost a few bytes each, not a megabyte.

/// SplitMix64: tiny state, fast, and well spread enough for drawing samples.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        finalize(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n); 0 when n is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Mixes values into one well-spread key: the seed of everything that must be stable.
pub fn mix(parts: &[u64]) -> u64 {
    parts.iter().fold(0x6A09_E667_F3BC_C908, |h, &p| {
        finalize(h ^ finalize(p.wrapping_add(0x9E37_79B9_7F4A_7C15)))
    })
}

/// A stable 64-bit hash of a string (FNV-1a, then mixed).
pub fn hash_str(s: &str) -> u64 {
    let h = s.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
    });
    finalize(h)
}

/// Vose's alias table: draws an index with probability proportional to its weight in O(1),
/// which matters at thousands of draws per batch and a thousand batches a second.
#[derive(Debug, Default)]
pub struct Alias {
    prob: Vec<f64>,
    alias: Vec<u32>,
}

impl Alias {
    /// A table over `weights` (non-negative, not all zero).
    pub fn new(weights: &[f64]) -> Self {
        let n = weights.len();
        let total: f64 = weights.iter().sum();
        let mut prob: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut alias = vec![0u32; n];
        let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| prob[i] < 1.0);
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            alias[s] = l as u32;
            prob[l] -= 1.0 - prob[s];
            if prob[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // What is left is 1 up to rounding.
        for i in small.into_iter().chain(large) {
            prob[i] = 1.0;
        }
        Alias { prob, alias }
    }

    /// One index, drawn by weight.
    pub fn draw(&self, rng: &mut Rng) -> usize {
        let i = rng.below(self.prob.len() as u64) as usize;
        if rng.unit() < self.prob[i] {
            i
        } else {
            self.alias[i] as usize
        }
    }
}
