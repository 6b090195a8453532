//! SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014): the one
//! seeded generator of the client, behind the retry jitter, the multi-agent shuffle and the benchmark's bodies,
//! so that a seed reproduces each of them.

/// The golden-ratio increment each draw adds to the state.
pub(crate) const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The output function: the draw for a state that has just been advanced by [`GAMMA`].
pub(crate) fn mix(state: u64) -> u64 {
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A draw as a uniform value in `[0, 1)`: its top 53 bits over 2^53.
pub(crate) fn unit(draw: u64) -> f64 {
    (draw >> 11) as f64 / (1u64 << 53) as f64
}

/// A SplitMix64 stream from `seed`.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next draw.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// The next draw as a uniform value in `[0, 1)`.
    pub(crate) fn next_unit(&mut self) -> f64 {
        unit(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first outputs for seed 1234567, as the reference implementation (Vigna's `splitmix64.c`) prints them.
    #[test]
    fn the_stream_is_splitmix64() {
        let mut rng = SplitMix64::new(1_234_567);
        let draws: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(
            draws,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423
            ]
        );
        assert!((0.0..1.0).contains(&SplitMix64::new(0).next_unit()));
    }
}
