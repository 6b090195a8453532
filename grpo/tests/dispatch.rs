//! The kernel's copy chosen at run time from the CPU's features returns the same bits as the copy compiled
//! for the build's target ([`Dispatch::Fallback`]), for every loss configuration and advantage layout.
//!
//! On a CPU without AVX2 both settings run the same copy and these tests compare it with itself; the
//! README's performance section names the machine they were written on (AVX-512).

use grpo::{
    AdvantageConfig, Advantages, Aggregation, Batch, BatchOptions, Dispatch, Estimator,
    KlEstimator, KlLoss, LogProbs, PolicyLossConfig, PolicyLossKind, PolicyLossOutput, RatioLevel,
    SampleParts, Tis, TisMode,
};
use proptest::prelude::*;

/// SplitMix64: fills a batch's values from one seed, so that proptest varies (and shrinks) the shape and
/// the seed rather than hundreds of thousands of floats.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[lo, hi)`.
    fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }
}

/// A batch and the trainer's per-token inputs for it.
struct Case {
    batch: Batch,
    current: Vec<f32>,
    old: Vec<f32>,
    reference: Vec<f32>,
    entropy: Vec<f32>,
}

impl Case {
    /// Samples of the given lengths in groups of `n` (the last group may be short: grouping by index),
    /// rewards from a few levels so that some groups are constant (advantage 0: the kernel's general
    /// path) and others are not (the PPO fast path), 85% of tokens trained, and a few log-ratios beyond any
    /// clamp.
    fn new(lengths: &[usize], n: usize, seed: u64) -> Case {
        let mut rng = SplitMix(seed);
        let (mut current, mut old, mut reference, mut entropy) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let parts: Vec<SampleParts> = lengths
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let levels = [0.0, 1.0, 0.5, f64::from(rng.range(-3.0, 3.0))];
                let reward = levels[(rng.next_u64() % 4) as usize];
                let mask: Vec<u8> = (0..len).map(|_| u8::from(rng.unit() < 0.85)).collect();
                let rollout: Vec<f32> = (0..len).map(|_| rng.range(-12.0, 0.0)).collect();
                for &r in &rollout {
                    // Mostly near the rollout policy, sometimes far from it (beyond the ratio clamps).
                    let spread = if rng.unit() < 0.02 { 30.0 } else { 0.6 };
                    let c = r + rng.range(-spread, spread);
                    current.push(c);
                    old.push(r + rng.range(-0.3, 0.3));
                    reference.push(c + rng.range(-1.0, 1.0));
                    entropy.push(rng.range(0.0, 4.0));
                }
                SampleParts {
                    reward: Some(reward),
                    response_length: len,
                    loss_mask: Some(mask),
                    rollout_log_probs: Some(rollout),
                    group_index: Some(i / n),
                    // Pools of two samples for seq-mean-token-mean.
                    rollout_id: Some((i / 2) as u64),
                    ..SampleParts::default()
                }
            })
            .collect();
        let options = BatchOptions {
            require_rollout_log_probs: true,
            grouping: grpo::Grouping::ByGroupIndex,
            ..BatchOptions::default()
        };
        Case {
            batch: Batch::new(&parts, &options).expect("valid batch"),
            current,
            old,
            reference,
            entropy,
        }
    }

    /// Advantages in both layouts the kernel reads: one scalar per sample (GRPO, RLOO) and one value per
    /// token (REINFORCE++ shaped by the old-to-reference KL, and whitened GRPO).
    fn advantages(&self) -> Vec<(&'static str, Advantages)> {
        let b = &self.batch;
        let kl = b
            .kl(&self.old, &self.reference, KlEstimator::K3)
            .expect("finite inputs");
        let reinforce = AdvantageConfig {
            estimator: Estimator::ReinforcePlusPlus,
            gamma: 0.99,
            kl_coef: 0.05,
            whiten: true,
            ..AdvantageConfig::default()
        };
        let whitened = AdvantageConfig {
            whiten: true,
            ..AdvantageConfig::default()
        };
        let rloo = AdvantageConfig {
            estimator: Estimator::Rloo,
            ..AdvantageConfig::default()
        };
        vec![
            ("grpo", b.advantages(&AdvantageConfig::default())),
            ("rloo", b.advantages(&rloo)),
            ("grpo whitened", b.advantages(&whitened)),
            (
                "reinforce++ with kl",
                b.advantages_with_kl(&reinforce, kl.values())
                    .expect("finite kl"),
            ),
        ]
    }

    fn log_probs(&self) -> LogProbs<'_> {
        LogProbs {
            current: &self.current,
            old: Some(&self.old),
            reference: Some(&self.reference),
            entropy: Some(&self.entropy),
        }
    }
}

/// The loss configurations: every branch of the kernel (PPO fast path, dual clip, TIS clamp and IcePop,
/// OPSM, GSPO's sequence ratio, CISPO, each KL estimator, entropy, a tight log-ratio clamp) under every
/// aggregation.
fn loss_configs() -> Vec<(&'static str, PolicyLossConfig)> {
    let base = PolicyLossConfig::default();
    let kl = |estimator| {
        Some(KlLoss {
            coef: 0.01,
            estimator,
        })
    };
    vec![
        (
            "ppo, dual clip, rollout logprobs as old",
            PolicyLossConfig {
                use_rollout_log_probs: true,
                eps_clip_high: 0.28,
                dual_clip: Some(3.0),
                ..base
            },
        ),
        (
            "ppo, tis clamp, k3, entropy, token mean",
            PolicyLossConfig {
                tis: Some(Tis::default()),
                kl_loss: kl(KlEstimator::K3),
                entropy_coef: 0.001,
                aggregation: Aggregation::TokenMean,
                ..base
            },
        ),
        (
            "ppo, dual clip, icepop, low-var kl, seq-mean-token-sum",
            PolicyLossConfig {
                dual_clip: Some(2.5),
                tis: Some(Tis {
                    low: 0.5,
                    high: 2.0,
                    mode: TisMode::IcePop,
                }),
                kl_loss: kl(KlEstimator::LowVarKl),
                aggregation: Aggregation::SeqMeanTokenSum,
                ..base
            },
        ),
        (
            "gspo sequence ratio, k2, seq-mean-token-sum-norm",
            PolicyLossConfig {
                ratio_level: RatioLevel::Sequence,
                eps_clip: 3e-4,
                eps_clip_high: 4e-4,
                kl_loss: kl(KlEstimator::K2),
                aggregation: Aggregation::SeqMeanTokenSumNorm { length: None },
                ..base
            },
        ),
        (
            "cispo, abs kl, entropy, dr grpo",
            PolicyLossConfig {
                kind: PolicyLossKind::Cispo,
                eps_clip_high: 5.0,
                kl_loss: kl(KlEstimator::Abs),
                entropy_coef: 0.01,
                aggregation: Aggregation::DrGrpo {
                    max_len: Some(4096.0),
                },
                ..base
            },
        ),
        (
            "ppo, opsm, k1, rollout logprobs as old",
            PolicyLossConfig {
                use_rollout_log_probs: true,
                opsm_delta: Some(1e-3),
                kl_loss: kl(KlEstimator::K1),
                ..base
            },
        ),
        (
            "ppo, dual clip, log-ratio clamp 1",
            PolicyLossConfig {
                dual_clip: Some(3.0),
                log_ratio_clamp: 1.0,
                ..base
            },
        ),
    ]
}

/// Every number of the output, as bits (an absent one as a marker no `f64` has in these tests).
fn bits(out: &PolicyLossOutput) -> Vec<u64> {
    let absent = u64::MAX;
    let opt = |v: Option<f64>| v.map_or(absent, f64::to_bits);
    let tis = out.tis.map(|t| [t.weight, t.clipfrac, t.abs]);
    let mut v = vec![
        out.loss.to_bits(),
        out.pg_loss.to_bits(),
        out.pg_clipfrac.to_bits(),
        out.ppo_kl.to_bits(),
        opt(out.entropy_loss),
        opt(out.kl_loss),
    ];
    v.extend(tis.map_or([absent; 3], |t| t.map(f64::to_bits)));
    v
}

/// Runs every advantage layout and loss configuration on `case` with both settings of `dispatch`, plain
/// and with per-token losses, and returns the first difference in bits, described.
fn first_difference(case: &Case) -> Option<String> {
    let lp = case.log_probs();
    for (adv_name, adv) in case.advantages() {
        for (name, config) in loss_configs() {
            let detect = PolicyLossConfig {
                dispatch: Dispatch::Detect,
                ..config
            };
            let fallback = PolicyLossConfig {
                dispatch: Dispatch::Fallback,
                ..config
            };
            let what = format!("{adv_name} / {name}");
            let (d, f) = (
                case.batch.policy_loss(&adv, &lp, &detect),
                case.batch.policy_loss(&adv, &lp, &fallback),
            );
            let (d, f) = (d.expect("valid inputs"), f.expect("valid inputs"));
            if bits(&d) != bits(&f) {
                return Some(format!("{what}: dispatched {d:?} vs fallback {f:?}"));
            }
            let (d, dt) = case
                .batch
                .policy_loss_with_tokens(&adv, &lp, &detect)
                .expect("valid inputs");
            let (f, ft) = case
                .batch
                .policy_loss_with_tokens(&adv, &lp, &fallback)
                .expect("valid inputs");
            if bits(&d) != bits(&f) {
                return Some(format!(
                    "{what}, with tokens: dispatched {d:?} vs fallback {f:?}"
                ));
            }
            let differ = dt
                .values()
                .iter()
                .zip(ft.values())
                .position(|(a, b)| a.to_bits() != b.to_bits());
            if let Some(t) = differ {
                let (a, b) = (dt.values()[t], ft.values()[t]);
                return Some(format!(
                    "{what}: token {t}: dispatched {a:e} vs fallback {b:e}"
                ));
            }
        }
    }
    None
}

/// Sample lengths: mostly within one or two of the kernel's 256-token blocks, often not a multiple of its
/// 16 lanes, sometimes empty or a single token.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..=20, 20usize..=600, Just(256), Just(257), Just(255)]
}

proptest! {
    #![proptest_config(crate::util::proptest_config("proptest-regressions/dispatch.txt"))]

    #[test]
    fn dispatched_and_fallback_agree_bitwise(
        lengths in proptest::collection::vec(length(), 1..=10),
        n in 1usize..=4,
        seed in any::<u64>(),
    ) {
        let case = Case::new(&lengths, n, seed);
        let difference = first_difference(&case);
        prop_assert!(difference.is_none(), "{}", difference.unwrap_or_default());
    }
}

/// One larger batch with a fixed seed: 64 samples of 1 to 2,100 tokens, several full blocks each.
#[test]
fn dispatched_and_fallback_agree_bitwise_on_a_large_batch() {
    let mut rng = SplitMix(1976);
    let lengths: Vec<usize> = (0..64)
        .map(|_| 1 + (rng.next_u64() % 2100) as usize)
        .collect();
    let case = Case::new(&lengths, 8, 12);
    assert_eq!(first_difference(&case), None);
}
