//! The latency model: time to first token (constant plus per prompt token) and inter-token latency with capped,
//! seeded jitter, all multiplied by a time-scale factor. Zero by default, so tests and benchmarks stay fast.
//!
//! A server with a batch loop (`--max-total-tokens`, or the logical clock) times each step of the batch
//! instead ([`LatencyConfig::step`]): a prefill step takes the time to first token of all the prompt tokens it
//! prefills, a decode step the inter-token latency plus `itl_per_sample_ms` for each sample it decodes. On the
//! logical clock ([`Clock::Logical`]) the reported times (`e2e_latency`, the metrics' time to first token) are
//! the sums of these step times, the same in every run of the same requests, whatever the machine does.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{mix, unit};

/// Simulated latency. Every field is in milliseconds of simulated time; `time_scale` turns them into real time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct LatencyConfig {
    /// Simulated time to first token, constant part (ms).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_TTFT_MS", default_value_t = LatencyConfig::default().ttft_ms))]
    pub ttft_ms: f64,
    /// Simulated time to first token per prompt token, the prefill cost (ms).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_TTFT_PER_TOKEN_MS", default_value_t = LatencyConfig::default().ttft_per_token_ms))]
    pub ttft_per_token_ms: f64,
    /// Simulated inter-token latency (ms).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_ITL_MS", default_value_t = LatencyConfig::default().itl_ms))]
    pub itl_ms: f64,
    /// Largest jitter added to or removed from each delay; a delay never goes below zero (ms).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_JITTER_MS", default_value_t = LatencyConfig::default().jitter_ms))]
    pub jitter_ms: f64,
    /// Seed of the jitter: the same seed, request and token position give the same delay.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_JITTER_SEED", default_value_t = LatencyConfig::default().jitter_seed))]
    pub jitter_seed: u64,
    /// Multiplies every simulated delay (0.5 runs twice as fast; 0 disables latency).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_TIME_SCALE", default_value_t = LatencyConfig::default().time_scale))]
    pub time_scale: f64,
    /// A decode step's time per sample it decodes, on top of `--itl-ms` (ms; batch loop only).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_ITL_PER_SAMPLE_MS", default_value_t = LatencyConfig::default().itl_per_sample_ms))]
    pub itl_per_sample_ms: f64,
    /// `wall`: times are measured; `logical`: times are the sums of the simulated step times, deterministic
    /// (runs the batch loop).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_CLOCK", value_enum, default_value_t = Clock::Wall))]
    pub clock: Clock,
    /// On the logical clock, simulated seconds per real second: the server waits each step's time divided by
    /// it (`inf`: not at all).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_CLOCK_SPEED", default_value_t = LatencyConfig::default().clock_speed))]
    pub clock_speed: f64,
}

/// A named set of the batch model's coefficients, fitted to published measurements of a model on a GPU
/// ([`LatencyProfile::coefficients`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum LatencyProfile {
    /// Llama-3.3-70B-Instruct in FP8 on two H100 80GB (tensor parallel 2), served by NVIDIA NIM 1.8.0: NVIDIA's
    /// published benchmark, <https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance>, at concurrency 1
    /// and 50. Time to first token 47.77 ms for 500 input tokens and 406.77 ms for 5,000, so 0.0798 ms a
    /// prompt token over a 7.88 ms constant; inter-token latency 18.58 ms at concurrency 1 and 59.73 ms at 50
    /// (5,000 input and 500 output tokens), so 0.840 ms a sample over a 17.74 ms constant (the fit at 50 keeps
    /// what the other requests' prefills add to a decode).
    #[cfg_attr(feature = "cli", value(name = "llama-3.3-70b-fp8-2xh100"))]
    #[serde(rename = "llama-3.3-70b-fp8-2xh100")]
    Llama33_70bFp8TwoH100,
}

impl LatencyProfile {
    /// `(ttft_ms, ttft_per_token_ms, itl_ms, itl_per_sample_ms)`, from the measurements its documentation cites.
    pub fn coefficients(self) -> (f64, f64, f64, f64) {
        match self {
            LatencyProfile::Llama33_70bFp8TwoH100 => {
                let per_token = (406.77 - 47.77) / (5000.0 - 500.0);
                let per_sample = (59.73 - 18.58) / (50.0 - 1.0);
                (
                    47.77 - 500.0 * per_token,
                    per_token,
                    18.58 - per_sample,
                    per_sample,
                )
            }
        }
    }

    /// `latency` with the profile's coefficients in place of those it leaves at zero (a flag given explicitly
    /// wins).
    pub fn apply(self, latency: LatencyConfig) -> LatencyConfig {
        let (ttft, per_token, itl, per_sample) = self.coefficients();
        let or = |set: f64, profile: f64| if set == 0.0 { profile } else { set };
        LatencyConfig {
            ttft_ms: or(latency.ttft_ms, ttft),
            ttft_per_token_ms: or(latency.ttft_per_token_ms, per_token),
            itl_ms: or(latency.itl_ms, itl),
            itl_per_sample_ms: or(latency.itl_per_sample_ms, per_sample),
            ..latency
        }
    }
}

/// Which clock a server's reported times come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Clock {
    /// The machine's: what the steps really took, the simulated delays included.
    #[default]
    Wall,
    /// The simulated one: the batch loop's steps, each as long as the latency model says.
    Logical,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        LatencyConfig {
            ttft_ms: 0.0,
            ttft_per_token_ms: 0.0,
            itl_ms: 0.0,
            jitter_ms: 0.0,
            jitter_seed: 0,
            time_scale: 1.0,
            itl_per_sample_ms: 0.0,
            clock: Clock::Wall,
            clock_speed: 1.0,
        }
    }
}

impl LatencyConfig {
    /// Whether any delay can be non-zero (the fast path skips the timers otherwise).
    pub fn is_active(&self) -> bool {
        self.time_scale > 0.0
            && (self.ttft_ms > 0.0
                || self.ttft_per_token_ms > 0.0
                || self.itl_ms > 0.0
                || self.itl_per_sample_ms > 0.0
                || self.jitter_ms > 0.0)
    }

    /// The time of one step of a batch loop: a prefill step of `prefill_tokens` prompt tokens (`Some`), or a
    /// decode step of `samples` samples (`None`); `step` seeds its jitter.
    pub fn step(&self, prefill_tokens: Option<usize>, samples: usize, step: u64) -> Duration {
        let base = match prefill_tokens {
            Some(tokens) => self.ttft_ms + self.ttft_per_token_ms * tokens as f64,
            None => self.itl_ms + self.itl_per_sample_ms * samples as f64,
        };
        self.scaled(base + self.jitter(step, u64::MAX - 1))
    }

    /// The delay before the first output token of a sample whose prompt has `prompt_len` tokens.
    pub fn ttft(&self, key: u64, prompt_len: usize) -> Duration {
        let base = self.ttft_ms + self.ttft_per_token_ms * prompt_len as f64;
        self.scaled(base + self.jitter(key, u64::MAX))
    }

    /// The delay before output token `position` (1-based positions after the first token).
    pub fn itl(&self, key: u64, position: usize) -> Duration {
        self.scaled(self.itl_ms + self.jitter(key, position as u64))
    }

    fn jitter(&self, key: u64, position: u64) -> f64 {
        if self.jitter_ms <= 0.0 {
            return 0.0;
        }
        let u = unit(mix(mix(self.jitter_seed, key), position));
        (2.0 * u - 1.0) * self.jitter_ms
    }

    fn scaled(&self, ms: f64) -> Duration {
        let ms = (ms * self.time_scale).max(0.0);
        if ms.is_finite() {
            Duration::from_secs_f64(ms / 1000.0)
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_capped_seeded_and_never_negative() {
        let config = LatencyConfig {
            itl_ms: 10.0,
            jitter_ms: 4.0,
            jitter_seed: 9,
            ..LatencyConfig::default()
        };
        for k in 0..1000 {
            let d = config.itl(7, k).as_secs_f64() * 1000.0;
            assert!((6.0 - 1e-9..=14.0 + 1e-9).contains(&d), "{d}");
            assert_eq!(config.itl(7, k), config.itl(7, k));
        }
        let big = LatencyConfig {
            jitter_ms: 50.0,
            ..config
        };
        assert!((0..100).all(|k| big.itl(1, k) >= Duration::ZERO));
        assert!(!LatencyConfig::default().is_active());
    }

    #[test]
    fn a_profile_reproduces_the_measurements_it_cites() {
        let latency = LatencyProfile::Llama33_70bFp8TwoH100.apply(LatencyConfig::default());
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        // NIM 1.8.0, Llama-3.3-70B-Instruct FP8 on 2 x H100: time to first token alone, 500 and 5,000 input
        // tokens; inter-token latency at concurrency 1 and 50.
        for (prefill, published) in [(500, 47.77), (5000, 406.77)] {
            assert!((ms(latency.step(Some(prefill), 1, 0)) - published).abs() < 1e-6);
        }
        for (samples, published) in [(1, 18.58), (50, 59.73)] {
            assert!((ms(latency.step(None, samples, 0)) - published).abs() < 1e-6);
        }
        // An explicit value wins over the profile's.
        let own = LatencyConfig {
            itl_ms: 5.0,
            ..LatencyConfig::default()
        };
        assert_eq!(LatencyProfile::Llama33_70bFp8TwoH100.apply(own).itl_ms, 5.0);
    }

    #[test]
    fn a_batch_step_takes_its_prefill_tokens_or_its_samples_time() {
        let config = LatencyConfig {
            ttft_ms: 100.0,
            ttft_per_token_ms: 0.5,
            itl_ms: 10.0,
            itl_per_sample_ms: 2.0,
            time_scale: 2.0,
            ..LatencyConfig::default()
        };
        // (100 + 0.5 × 40) × 2 and (10 + 2 × 3) × 2.
        assert_eq!(config.step(Some(40), 2, 0), Duration::from_millis(240));
        assert_eq!(config.step(None, 3, 1), Duration::from_millis(32));
        let per_sample = LatencyConfig {
            itl_per_sample_ms: 1.0,
            ..LatencyConfig::default()
        };
        assert!(per_sample.is_active());
    }

    #[test]
    fn ttft_grows_with_the_prompt_and_scales() {
        let config = LatencyConfig {
            ttft_ms: 100.0,
            ttft_per_token_ms: 2.0,
            time_scale: 0.5,
            ..LatencyConfig::default()
        };
        assert_eq!(config.ttft(0, 50), Duration::from_millis(100));
    }
}
