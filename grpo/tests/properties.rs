//! Property tests of reference section R9, the no-NaN guarantee and typed rejection, with proptest.

use grpo::{
    AdvantageConfig, Aggregation, Batch, BatchError, BatchOptions, Convention, Estimator, Grouping,
    KlEstimator, KlLoss, LogProbs, PolicyLossConfig, PolicyLossKind, RatioLevel, SampleParts,
    StdScale, Tis, TisMode, kl, masked_whiten, ppo_clip_loss, tis_weight,
};
use proptest::prelude::*;

use crate::util::reward_batch;

fn reward() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0), Just(0.8), Just(1.2), -1e3..1e3f64]
}

fn sample_parts() -> impl Strategy<Value = SampleParts> {
    (0usize..=12).prop_flat_map(|len| {
        (
            reward(),
            proptest::collection::vec(any::<bool>(), len),
            proptest::collection::vec(-50.0f32..=0.0, len),
            proptest::option::of(0u64..3),
        )
            .prop_map(move |(reward, mask, lp, rollout_id)| SampleParts {
                reward: Some(reward),
                response_length: len,
                loss_mask: Some(mask.into_iter().map(u8::from).collect()),
                rollout_log_probs: Some(lp),
                group_index: None,
                rollout_id,
                ..SampleParts::default()
            })
    })
}

/// Valid parts in `groups * n` samples, with the group size `n`.
fn batch_parts() -> impl Strategy<Value = (Vec<SampleParts>, usize)> {
    (1usize..=4, 1usize..=5).prop_flat_map(|(groups, n)| {
        proptest::collection::vec(sample_parts(), groups * n).prop_map(move |parts| (parts, n))
    })
}

fn group_rewards() -> impl Strategy<Value = Vec<f64>> {
    proptest::collection::vec(-10.0..10.0f64, 2..12)
}

fn unbiased_std(xs: &[f64]) -> f64 {
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    (xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

fn grpo(convention: Convention, scale: StdScale) -> AdvantageConfig {
    AdvantageConfig {
        convention,
        std_scale: scale,
        ..AdvantageConfig::default()
    }
}

fn normalised(rewards: &[f64], config: AdvantageConfig) -> Vec<f64> {
    reward_batch(rewards, Grouping::Single)
        .advantages(&config)
        .per_sample()
        .to_vec()
}

fn convention() -> impl Strategy<Value = Convention> {
    prop_oneof![
        Just(Convention::Slime),
        Just(Convention::Verl),
        Just(Convention::Trl)
    ]
}

#[derive(Debug, Clone, Copy)]
enum Corruption {
    NoReward,
    NanReward,
    NoLogProbs,
    ShortLogProbs,
    PositiveLogProb,
    NanLogProb,
    LongMask,
    BadMask,
}

proptest! {
    #![proptest_config(crate::util::proptest_config("proptest-regressions/properties.txt"))]

    /// R9.1: per group the normalised rewards sum to about 0 (all conventions, with and without std).
    #[test]
    fn group_sums_are_zero(rewards in group_rewards(), c in convention(), dr in any::<bool>()) {
        let scale = if dr { StdScale::None } else { StdScale::Group };
        let a = normalised(&rewards, grpo(c, scale));
        let abs: f64 = a.iter().map(|x| x.abs()).sum();
        prop_assert!(a.iter().sum::<f64>().abs() <= 1e-9 * (1.0 + abs), "{a:?}");
    }

    /// R9.2: with std normalisation the result has std sigma / (sigma + eps).
    #[test]
    fn group_std_is_one(rewards in group_rewards(), c in convention()) {
        let sigma = unbiased_std(&rewards);
        prop_assume!(sigma > 0.0);
        let a = normalised(&rewards, grpo(c, StdScale::Group));
        let expected = sigma / (sigma + c.epsilon());
        prop_assert!((unbiased_std(&a) - expected).abs() <= 1e-9, "{} vs {expected}", unbiased_std(&a));
    }

    /// R9.3: shifting all rewards of a group changes nothing.
    #[test]
    fn shift_invariance(rewards in group_rewards(), shift in -10.0..10.0f64, c in convention(), dr in any::<bool>()) {
        let scale = if dr { StdScale::None } else { StdScale::Group };
        let a = normalised(&rewards, grpo(c, scale));
        let shifted: Vec<f64> = rewards.iter().map(|r| r + shift).collect();
        let b = normalised(&shifted, grpo(c, scale));
        for (x, y) in a.iter().zip(&b) {
            prop_assert!((x - y).abs() <= 1e-7, "{a:?} vs {b:?}");
        }
    }

    /// R9.4: scaling by k > 0 changes nothing with std normalisation (up to eps), and scales by k without.
    #[test]
    fn scale_behaviour(rewards in group_rewards(), k in 0.5..4.0f64, c in convention()) {
        prop_assume!(unbiased_std(&rewards) >= 0.1);
        let scaled: Vec<f64> = rewards.iter().map(|r| r * k).collect();
        let (a, b) = (normalised(&rewards, grpo(c, StdScale::Group)), normalised(&scaled, grpo(c, StdScale::Group)));
        for (x, y) in a.iter().zip(&b) {
            prop_assert!((x - y).abs() <= 1e-3, "{a:?} vs {b:?}");
        }
        let (a, b) = (normalised(&rewards, grpo(c, StdScale::None)), normalised(&scaled, grpo(c, StdScale::None)));
        for (x, y) in a.iter().zip(&b) {
            prop_assert!((k * x - y).abs() <= 1e-9 * (1.0 + y.abs()), "{a:?} vs {b:?}");
        }
    }

    /// R9.5: permuting a group permutes its advantages.
    #[test]
    fn permutation_equivariance(rewards in group_rewards(), seed in any::<u64>(), c in convention()) {
        let mut order: Vec<usize> = (0..rewards.len()).collect();
        // A simple deterministic shuffle from the seed.
        let mut s = seed;
        for i in (1..order.len()).rev() {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            order.swap(i, (s >> 33) as usize % (i + 1));
        }
        let permuted: Vec<f64> = order.iter().map(|&i| rewards[i]).collect();
        let a = normalised(&rewards, grpo(c, StdScale::Group));
        let b = normalised(&permuted, grpo(c, StdScale::Group));
        for (j, &i) in order.iter().enumerate() {
            prop_assert!((a[i] - b[j]).abs() <= 1e-9, "{a:?} vs {b:?}");
        }
    }

    /// R9.6: a constant group gives 0: exactly for dyadic rewards (as the spec requires) and, because the
    /// mean is taken relative to the group's first reward, exactly for any other value too.
    #[test]
    fn constant_group(eighths in -80i32..80, other in -10.0..10.0f64, n in 2usize..10, c in convention()) {
        let dyadic = f64::from(eighths) / 8.0;
        for scale in [StdScale::Group, StdScale::None] {
            prop_assert!(normalised(&vec![dyadic; n], grpo(c, scale)).iter().all(|&a| a == 0.0));
            prop_assert!(normalised(&vec![other; n], grpo(c, scale)).iter().all(|&a| a == 0.0));
        }
    }

    /// R9.7: with rho = 1 the loss is -A and nothing is clipped, at token and sequence level.
    #[test]
    fn unit_ratio((parts, n) in batch_parts(), dual in proptest::option::of(1.01..5.0f64), seq in any::<bool>()) {
        let batch = Batch::new(&parts, &BatchOptions::grpo(n)).expect("valid");
        let adv = batch.advantages(&AdvantageConfig::default());
        let current = batch.rollout_log_probs().expect("present").to_vec();
        let config = PolicyLossConfig {
            use_rollout_log_probs: true,
            dual_clip: dual,
            eps_clip_high: 0.28,
            ratio_level: if seq { RatioLevel::Sequence } else { RatioLevel::Token },
            ..Default::default()
        };
        let (out, tokens) = batch.policy_loss_with_tokens(&adv, &LogProbs::new(&current), &config).expect("loss");
        prop_assert_eq!(out.pg_clipfrac, 0.0);
        prop_assert_eq!(out.ppo_kl, 0.0);
        for (l, a) in tokens.values().iter().zip(adv.per_token().values()) {
            prop_assert_eq!(*l, -*a);
        }
    }

    /// R9.8: the loss is monotone in rho (non-increasing for A >= 0, non-decreasing for A < 0) and bounded.
    #[test]
    fn loss_monotone_and_bounded(
        r1 in 0.0..10.0f32, r2 in 0.0..10.0f32, a in -5.0..5.0f32,
        eps_low in 0.0..0.5f32, eps_high in 0.0..0.5f32, dual in proptest::option::of(1.01..5.0f32),
    ) {
        let (lo, hi) = if r1 <= r2 { (r1, r2) } else { (r2, r1) };
        let c = dual.unwrap_or(f32::INFINITY);
        let (l_lo, _) = ppo_clip_loss(lo, a, eps_low, eps_high, c);
        let (l_hi, _) = ppo_clip_loss(hi, a, eps_low, eps_high, c);
        if a >= 0.0 {
            prop_assert!(l_hi <= l_lo);
            prop_assert!(l_hi >= -a * (1.0 + eps_high) - 1e-6);
        } else {
            prop_assert!(l_hi >= l_lo);
            prop_assert!(l_lo >= -a * (1.0 - eps_low) - 1e-6);
            if let Some(c) = dual {
                prop_assert!(l_hi <= -c * a + 1e-6);
            }
        }
    }

    /// R9.9: |x|, k2, k3 and low_var_kl are non-negative, and every estimator is 0 at x = 0.
    #[test]
    fn kl_non_negative(x in -30.0..30.0f32) {
        // Which estimators are bounded below by 0 is the reference's (R9.9), not `is_non_negative`'s say.
        let non_negative: Vec<_> = KlEstimator::ALL.into_iter().filter(|e| e.is_non_negative()).collect();
        prop_assert_eq!(
            &non_negative,
            &vec![KlEstimator::Abs, KlEstimator::K2, KlEstimator::K3, KlEstimator::LowVarKl]
        );
        for &e in &non_negative {
            prop_assert!(kl(e, x) >= 0.0 && kl(e, x).is_finite());
        }
        prop_assert!(kl(KlEstimator::LowVarKl, x) <= 10.0);
        for e in KlEstimator::ALL {
            prop_assert_eq!(kl(e, 0.0), 0.0);
        }
    }

    /// The vectorisable `exp` behind every ratio is within 2e-7 of the true value, and finite everywhere.
    #[test]
    fn exp_accuracy(x in -87.0..88.0f32, wild in any::<f32>()) {
        let exact = f64::from(x).exp();
        let rel = ((f64::from(grpo::exp_f32(x)) - exact) / exact).abs();
        prop_assert!(rel <= 2e-7, "exp({x}): relative error {rel:e}");
        prop_assume!(!wild.is_nan());
        prop_assert!(grpo::exp_f32(wild).is_finite());
    }

    /// R9.10: TIS weights lie in [low, high]; IcePop weights are 0 or inside it.
    #[test]
    fn tis_bounds(d in -30.0..30.0f32, low in 0.0..1.0f64, width in 0.0..4.0f64) {
        let high = low + width;
        // The weights are f32, so the bounds are too.
        let (lo, hi) = (low as f32, high as f32);
        let (w, _) = tis_weight(d, &Tis { low, high, mode: TisMode::Clamp });
        prop_assert!((lo..=hi).contains(&w), "{w} not in [{lo}, {hi}]");
        let (w, _) = tis_weight(d, &Tis { low, high, mode: TisMode::IcePop });
        prop_assert!(w == 0.0 || (lo..=hi).contains(&w), "{w} not in [{lo}, {hi}]");
    }

    /// R9.11: token-mean equals seq-mean-token-mean when every sample has the same mask count.
    #[test]
    fn token_mean_equals_seq_mean(
        count in 1usize..8, extra in proptest::collection::vec(0usize..4, 1..8), seed in any::<u32>(),
    ) {
        let parts: Vec<SampleParts> = extra
            .iter()
            .map(|&e| SampleParts {
                reward: Some(0.0),
                response_length: count + e,
                loss_mask: Some((0..count + e).map(|t| u8::from(t < count)).collect()),
                ..SampleParts::default()
            })
            .collect();
        let batch = Batch::new(&parts, &BatchOptions::default()).expect("valid");
        let values: Vec<f32> =
            (0..batch.num_tokens()).map(|t| ((t as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / 1e9).collect();
        let a = batch.aggregate(&values, Aggregation::TokenMean);
        let b = batch.aggregate(&values, Aggregation::SeqMeanTokenMean);
        prop_assert!((a - b).abs() <= 1e-9 * (1.0 + a.abs()), "{a} vs {b}");
    }

    /// R9.12: whitened values have masked mean 0 and masked unbiased std about 1.
    #[test]
    fn whitening(values in proptest::collection::vec(-10.0..10.0f32, 2..50), mask_bits in any::<u64>()) {
        let mut mask: Vec<u8> = (0..values.len()).map(|i| u8::from(mask_bits >> (i % 64) & 1 == 1)).collect();
        mask[0] = 1;
        mask[1] = 1;
        let masked: Vec<f64> = values.iter().zip(&mask).filter(|&(_, &m)| m == 1).map(|(&v, _)| f64::from(v)).collect();
        prop_assume!(unbiased_std(&masked) > 0.1);
        let mut w = values.clone();
        masked_whiten(&mut w, &mask);
        let out: Vec<f64> = w.iter().zip(&mask).filter(|&(_, &m)| m == 1).map(|(&v, _)| f64::from(v)).collect();
        let mean = out.iter().sum::<f64>() / out.len() as f64;
        prop_assert!(mean.abs() <= 1e-5, "mean {mean}");
        prop_assert!((unbiased_std(&out) - 1.0).abs() <= 1e-5, "std {}", unbiased_std(&out));
    }

    /// No output is NaN or infinite for finite inputs, whatever the configuration.
    #[test]
    fn outputs_are_finite(
        (parts, n) in batch_parts(),
        current_seed in any::<u64>(),
        estimator in proptest::sample::select(Estimator::ALL.to_vec()),
        c in convention(),
        scale in prop_oneof![Just(StdScale::Group), Just(StdScale::Batch), Just(StdScale::None)],
        whiten in any::<bool>(),
        kind in proptest::sample::select(PolicyLossKind::ALL.to_vec()),
        seq in any::<bool>(),
        dual in proptest::option::of(1.01..5.0f64),
        tis in proptest::option::of(prop_oneof![Just(TisMode::Clamp), Just(TisMode::IcePop)]),
        aggregation in prop_oneof![
            Just(Aggregation::TokenMean), Just(Aggregation::SeqMeanTokenMean), Just(Aggregation::SeqMeanTokenSum),
            Just(Aggregation::DrGrpo { max_len: None }), Just(Aggregation::SeqMeanTokenSumNorm { length: None }),
        ],
    ) {
        let batch = Batch::new(&parts, &BatchOptions::grpo(n)).expect("valid");
        let tokens = batch.num_tokens();
        // Current, old and reference logprobs anywhere in [-60, 0], from a cheap generator.
        let mut s = current_seed;
        let mut next = move || {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            -((s >> 40) as f32 / (1u64 << 24) as f32) * 60.0
        };
        let current: Vec<f32> = (0..tokens).map(|_| next()).collect();
        let old: Vec<f32> = (0..tokens).map(|_| next()).collect();
        let reference: Vec<f32> = (0..tokens).map(|_| next()).collect();
        let entropy: Vec<f32> = (0..tokens).map(|_| -next()).collect();

        let kl_values = batch.kl(&old, &reference, KlEstimator::LowVarKl).expect("kl");
        let config = AdvantageConfig { estimator, convention: c, std_scale: scale, whiten, kl_coef: 0.1, gamma: 0.99, ..Default::default() };
        let adv = batch.advantages_with_kl(&config, kl_values.values()).expect("advantages");
        prop_assert!(adv.per_sample().iter().all(|a| a.is_finite()));
        prop_assert!(adv.per_token().values().iter().all(|a| a.is_finite()));

        let loss_config = PolicyLossConfig {
            kind,
            ratio_level: if seq { RatioLevel::Sequence } else { RatioLevel::Token },
            dual_clip: dual,
            tis: tis.map(|mode| Tis { mode, ..Tis::default() }),
            kl_loss: Some(KlLoss { coef: 0.01, estimator: KlEstimator::K3 }),
            entropy_coef: 0.01,
            aggregation,
            ..Default::default()
        };
        let lp = LogProbs { current: &current, old: Some(&old), reference: Some(&reference), entropy: Some(&entropy) };
        let (out, per_token) = batch.policy_loss_with_tokens(&adv, &lp, &loss_config).expect("loss");
        prop_assert!(per_token.values().iter().all(|l| l.is_finite()));
        let metrics = [out.loss, out.pg_loss, out.pg_clipfrac, out.ppo_kl];
        prop_assert!(metrics.iter().all(|m| m.is_finite()), "{out:?}");
        prop_assert!(out.entropy_loss.is_some_and(f64::is_finite) && out.kl_loss.is_some_and(f64::is_finite));
        prop_assert!((0.0..=1.0).contains(&out.pg_clipfrac) || aggregation != Aggregation::TokenMean);
        if let Some(t) = out.tis {
            prop_assert!(t.weight.is_finite() && t.clipfrac.is_finite() && t.abs.is_finite());
        }
    }

    /// Every invalid batch is rejected with the right error and sample index.
    #[test]
    fn invalid_batches_are_rejected(
        (mut parts, _) in batch_parts(),
        which in any::<prop::sample::Index>(),
        corruption in prop_oneof![
            Just(Corruption::NoReward), Just(Corruption::NanReward), Just(Corruption::NoLogProbs),
            Just(Corruption::ShortLogProbs), Just(Corruption::PositiveLogProb), Just(Corruption::NanLogProb),
            Just(Corruption::LongMask), Just(Corruption::BadMask),
        ],
        position in any::<prop::sample::Index>(),
    ) {
        let sample = which.index(parts.len());
        let p = &mut parts[sample];
        let len = p.response_length;
        let expected_matches: Box<dyn Fn(&BatchError) -> bool> = match corruption {
            Corruption::NoReward => {
                p.reward = None;
                Box::new(move |e| *e == BatchError::MissingReward { sample })
            }
            Corruption::NanReward => {
                p.reward = Some(f64::NAN);
                Box::new(move |e| matches!(e, BatchError::NonFiniteReward { sample: s, .. } if *s == sample))
            }
            Corruption::NoLogProbs => {
                p.rollout_log_probs = None;
                Box::new(move |e| *e == BatchError::MissingRolloutLogProbs { sample })
            }
            Corruption::ShortLogProbs => {
                p.rollout_log_probs.as_mut().expect("present").push(-1.0);
                Box::new(move |e| *e == BatchError::RolloutLogProbsLength { sample, len: len + 1, response_length: len })
            }
            Corruption::PositiveLogProb | Corruption::NanLogProb if len == 0 => {
                p.reward = None;
                Box::new(move |e| *e == BatchError::MissingReward { sample })
            }
            Corruption::PositiveLogProb => {
                let t = position.index(len);
                p.rollout_log_probs.as_mut().expect("present")[t] = 1e-3;
                Box::new(move |e| *e == BatchError::PositiveLogProb { sample, position: t, value: 1e-3 })
            }
            Corruption::NanLogProb => {
                let t = position.index(len);
                p.rollout_log_probs.as_mut().expect("present")[t] = f32::NAN;
                Box::new(move |e| matches!(e, BatchError::NonFiniteLogProb { sample: s, position: q, .. } if *s == sample && *q == t))
            }
            Corruption::LongMask => {
                p.loss_mask.as_mut().expect("present").push(1);
                Box::new(move |e| *e == BatchError::LossMaskLength { sample, len: len + 1, response_length: len })
            }
            Corruption::BadMask if len == 0 => {
                p.reward = None;
                Box::new(move |e| *e == BatchError::MissingReward { sample })
            }
            Corruption::BadMask => {
                let t = position.index(len);
                p.loss_mask.as_mut().expect("present")[t] = 3;
                Box::new(move |e| *e == BatchError::InvalidLossMask { sample, position: t, value: 3 })
            }
        };
        let options = BatchOptions { require_rollout_log_probs: true, grouping: Grouping::Single, ..BatchOptions::default() };
        let err = Batch::new(&parts, &options).expect_err("must be rejected");
        prop_assert!(expected_matches(&err), "sample {sample}, {corruption:?}: got {err}");
        prop_assert!(err.to_string().starts_with(&format!("sample {sample}:")), "{err}");
    }
}

proptest! {
    #![proptest_config(crate::util::proptest_config("proptest-regressions/properties.txt"))]

    /// Broadcast advantages (GRPO's scalar per sample, which take the kernel's fast path) and the same values
    /// materialised per token give the same loss, and so does the variant that also returns per-token losses.
    #[test]
    fn broadcast_and_materialised_agree((parts, n) in batch_parts(), c in convention(), seed in any::<u64>()) {
        let batch = Batch::new(&parts, &BatchOptions::grpo(n)).expect("valid");
        let broadcast = batch.advantages(&AdvantageConfig { estimator: Estimator::DrGrpo, convention: c, ..Default::default() });
        prop_assert!(broadcast.is_broadcast());
        // REINFORCE++-baseline with a zero KL has the same values, but shaped per token.
        let zeros = vec![0.0f32; batch.num_tokens()];
        let config = AdvantageConfig { estimator: Estimator::ReinforcePlusPlusBaseline, convention: c, kl_coef: 0.5, ..Default::default() };
        let materialised = batch.advantages_with_kl(&config, &zeros).expect("advantages");
        prop_assert!(!materialised.is_broadcast());
        prop_assert_eq!(broadcast.per_token(), materialised.per_token());

        let mut s = seed;
        let current: Vec<f32> = batch
            .rollout_log_probs()
            .expect("present")
            .iter()
            .map(|&lp| {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                lp + ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
            })
            .collect();
        // The KL and entropy terms must be summed whichever path a sample takes.
        let reference: Vec<f32> = current.iter().map(|&c| c - 0.25).collect();
        let entropy: Vec<f32> = current.iter().map(|&c| c.abs()).collect();
        let plain = LogProbs::new(&current);
        let with_terms = LogProbs { reference: Some(&reference), entropy: Some(&entropy), ..plain };
        let base = PolicyLossConfig { use_rollout_log_probs: true, dual_clip: Some(3.0), ..Default::default() };
        let kl_entropy = PolicyLossConfig {
            kl_loss: Some(KlLoss { coef: 0.1, estimator: KlEstimator::K3 }),
            entropy_coef: 0.01,
            ..base
        };
        for (lp, loss_config) in [(plain, base), (with_terms, kl_entropy)] {
            // The broadcast path multiplies the summed clipped ratios by the advantage once per block instead
            // of per token, so the results agree to f32 rounding, not bit for bit.
            let a = batch.policy_loss(&broadcast, &lp, &loss_config).expect("loss");
            let b = batch.policy_loss(&materialised, &lp, &loss_config).expect("loss");
            let (with_tokens, tokens) = batch.policy_loss_with_tokens(&broadcast, &lp, &loss_config).expect("loss");
            prop_assert_eq!(tokens.offsets(), batch.offsets());
            // Per-token losses are bounded by 3 |A| (dual clip 3, clip-high 1.2), and the aggregate can cancel
            // terms of that size, so the tolerance scales with the largest advantage, not with the result.
            let scale = 1.0 + 3.0 * broadcast.per_sample().iter().fold(0.0f64, |m, a| m.max(a.abs()));
            for other in [b, with_tokens] {
                for (x, y) in [(a.loss, other.loss), (a.pg_loss, other.pg_loss), (a.pg_clipfrac, other.pg_clipfrac), (a.ppo_kl, other.ppo_kl)] {
                    prop_assert!((x - y).abs() <= 1e-6 * scale, "{a:?} vs {other:?}");
                }
                // The same per-token terms summed the same way: equal.
                prop_assert_eq!(a.kl_loss, other.kl_loss);
                prop_assert_eq!(a.entropy_loss, other.entropy_loss);
            }
        }
    }
}
