//! A small, seedable, serialisable random number generator (xoshiro256++ seeded by SplitMix64).
//!
//! Used for parameter init, example sampling and augmentation so that one seed gives one result on
//! every platform, with or without `std`, and so that its whole state can go into a checkpoint.

/// xoshiro256++: fast, 256 bits of state, good statistical quality; not cryptographic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator from a 64-bit seed.
    pub fn new(seed: u64) -> Self {
        let mut s = seed;
        let state = [
            splitmix64(&mut s),
            splitmix64(&mut s),
            splitmix64(&mut s),
            splitmix64(&mut s),
        ];
        Self { state }
    }

    /// An independent stream for `(seed, stream)`, e.g. one per rank or per example generator.
    pub fn with_stream(seed: u64, stream: u64) -> Self {
        let mut s = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        splitmix64(&mut s);
        Self::new(s)
    }

    /// The full state, for checkpoints.
    pub fn state(&self) -> [u64; 4] {
        self.state
    }

    /// Restores a state saved by [`Rng::state`]. An all-zero state is replaced by `Rng::new(0)`'s.
    pub fn from_state(state: [u64; 4]) -> Self {
        if state == [0; 4] {
            Self::new(0)
        } else {
            Self { state }
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, 1)` as f32.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
    }

    /// Uniform integer in `0..n` (`n > 0`), without modulo bias worth noting (Lemire's method).
    pub fn below(&mut self, n: usize) -> usize {
        debug_assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// A standard normal variate (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]
        let u2 = self.next_f64();
        libm::sqrt(-2.0 * libm::log(u1)) * libm::cos(2.0 * core::f64::consts::PI * u2)
    }

    /// Normal with the given stddev, redrawn until within two stddevs (TensorFlow's truncated normal).
    pub fn truncated_normal(&mut self, stddev: f64) -> f64 {
        loop {
            let z = self.normal();
            if z.abs() <= 2.0 {
                return z * stddev;
            }
        }
    }

    /// Fisher-Yates shuffle in place.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_state_round_trip() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Rng::from_state(a.state());
        assert_eq!(a.next_u64(), c.next_u64());
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
    }

    #[test]
    fn truncated_normal_is_bounded_and_centred() {
        let mut r = Rng::new(1);
        let n = 20_000;
        let xs: alloc::vec::Vec<f64> = (0..n).map(|_| r.truncated_normal(0.01)).collect();
        assert!(xs.iter().all(|x| x.abs() <= 0.02));
        let mean = xs.iter().sum::<f64>() / n as f64;
        assert!(mean.abs() < 5e-4, "mean {mean}");
    }

    #[test]
    fn below_stays_in_range_and_shuffle_permutes() {
        let mut r = Rng::new(3);
        assert!((0..1000).all(|_| r.below(5) < 5));
        let mut v: alloc::vec::Vec<u32> = (0..50).collect();
        r.shuffle(&mut v);
        let mut s = v.clone();
        s.sort();
        assert_eq!(s, (0..50).collect::<alloc::vec::Vec<_>>());
        assert_ne!(v, s);
    }
}
