//! Known-answer vectors of section 6 (published upstream and computed), each row through `check`.

use grpo::{
    AdvantageConfig, Aggregation, Batch, BatchError, BatchOptions, BehaviourLogProbs, Convention,
    Estimator, Grouping, KlEstimator, LogProbs, PolicyLossConfig, PolicyLossKind, RatioLevel,
    SampleParts, StdScale, Tis, TisMode, cispo_loss, discounted_returns, kl, masked_whiten, nanstd,
    ppo_clip_loss, tis_weight,
};

use crate::util::{reward_batch, sample};

/// Checks `actual` against a vector printed as in the spec: `"[0.866024, −0.866024]"`, with `x ×3` for a
/// repeated value and `nan` for NaN. Each value must match to one unit in its last printed decimal, and
/// never looser than the spec's 6 d.p.: values printed with fewer decimals are exact. A relative slack of
/// one `f32` epsilon allows for per-token values computed in `f32`.
#[track_caller]
fn check(what: &str, actual: &[f64], expected: &str) {
    let expected: Vec<(f64, usize)> = expected
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .replace('−', "-")
        .split(',')
        .flat_map(|item| {
            let (value, times) = match item.split_once('×') {
                Some((v, n)) => (
                    v.trim().to_owned(),
                    n.trim().parse::<usize>().expect("repeat count"),
                ),
                None => (item.trim().to_owned(), 1),
            };
            let decimals = value.split_once('.').map_or(0, |(_, frac)| frac.len());
            let parsed = value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("{what}: cannot parse {value:?}"));
            std::iter::repeat_n((parsed, decimals), times)
        })
        .collect();
    assert_eq!(
        actual.len(),
        expected.len(),
        "{what}: got {actual:?}, expected {} values",
        expected.len()
    );
    for (i, (&a, &(e, decimals))) in actual.iter().zip(&expected).enumerate() {
        if e.is_nan() {
            assert!(a.is_nan(), "{what}[{i}]: got {a}, expected NaN");
            continue;
        }
        let tol = 10f64.powi(-(decimals.max(6) as i32)) + e.abs() * f64::from(f32::EPSILON);
        assert!(
            (a - e).abs() <= tol,
            "{what}[{i}]: got {a}, expected {e} (tolerance {tol:e}); all: {actual:?}"
        );
    }
}

fn f64s(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| f64::from(v)).collect()
}

fn advantages(rewards: &[f64], grouping: Grouping, config: AdvantageConfig) -> Vec<f64> {
    let batch = reward_batch(rewards, grouping);
    let adv = batch.advantages(&config);
    // Per-token values must be the per-sample scalar broadcast (one token per sample here).
    for i in 0..batch.len() {
        assert!(
            (f64::from(adv.tokens(i)[0]) - adv.sample(i)).abs()
                <= 1e-6 * adv.sample(i).abs().max(1.0)
        );
    }
    adv.per_sample().to_vec()
}

fn config(estimator: Estimator, convention: Convention) -> AdvantageConfig {
    AdvantageConfig {
        estimator,
        convention,
        ..AdvantageConfig::default()
    }
}

#[test]
fn group_advantages() {
    let slime = config(Estimator::Grpo, Convention::Slime);
    let verl = config(Estimator::Grpo, Convention::Verl);
    let trl = config(Estimator::Grpo, Convention::Trl);
    let dr_slime = config(Estimator::DrGrpo, Convention::Slime);
    let dr_verl = config(Estimator::DrGrpo, Convention::Verl);
    let dr_trl = config(Estimator::DrGrpo, Convention::Trl);
    let rloo = config(Estimator::Rloo, Convention::Slime);
    #[rustfmt::skip]
    let rows: &[(&[f64], AdvantageConfig, &str)] = &[
        (&[1.0, 0.0, 1.0, 0.0], slime, "[0.866024, −0.866024, 0.866024, −0.866024]"),
        (&[1.0, 0.0, 1.0, 0.0], verl, "[0.866024, −0.866024, 0.866024, −0.866024]"),
        (&[1.0, 0.0, 1.0, 0.0], dr_slime, "[0.5, −0.5, 0.5, −0.5]"),
        (&[1.0, 0.0, 1.0, 0.0], dr_trl, "[0.5, −0.5, 0.5, −0.5]"),
        // "[0.865875, …]" in the table; the rest re-derived by symmetry.
        (&[1.0, 0.0, 1.0, 0.0], trl, "[0.865875, −0.865875, 0.865875, −0.865875]"),
        (&[1.0, 0.0, 1.0, 0.0], rloo, "[0.666667, −0.666667, 0.666667, −0.666667]"),
        (&[1.0, 1.0, 1.0, 0.0], slime, "[0.499999 ×3, −1.499997]"),
        (&[1.0, 1.0, 1.0, 0.0], verl, "[0.499999 ×3, −1.499997]"),
        (&[1.0, 1.0, 1.0, 0.0], dr_slime, "[0.25 ×3, −0.75]"),
        (&[1.0, 1.0, 1.0, 0.0], trl, "[0.4999 ×3, −1.4997]"),
        (&[1.0, 1.0, 1.0, 0.0], rloo, "[0.333333 ×3, −1.0]"),
        (&[1.0, 1.0, 1.0, 1.0], slime, "[0, 0, 0, 0]"),
        (&[1.0, 1.0, 1.0, 1.0], verl, "[0, 0, 0, 0]"),
        (&[1.0, 1.0, 1.0, 1.0], dr_slime, "[0, 0, 0, 0]"),
        (&[1.0, 1.0, 1.0, 1.0], trl, "[0, 0, 0, 0]"),
        (&[1.0, 1.0, 1.0, 1.0], rloo, "[0, 0, 0, 0]"),
        (&[0.5, 1.0, 0.0, 0.25, 0.75], slime, "[0, 1.264908, −1.264908, −0.632454, 0.632454]"),
        (&[0.5, 1.0, 0.0, 0.25, 0.75], dr_slime, "[0, 0.5, −0.5, −0.25, 0.25]"),
        // "[0, 1.264591, …]" in the table; the rest re-derived: 0.25 / (0.395285 + 1e-4) = 0.632296.
        (&[0.5, 1.0, 0.0, 0.25, 0.75], trl, "[0, 1.264591, −1.264591, −0.632296, 0.632296]"),
        (&[0.5, 1.0, 0.0, 0.25, 0.75], rloo, "[0, 0.625, −0.625, −0.3125, 0.3125]"),
        (&[1.0, 0.0], slime, "[0.707106, −0.707106]"),
        (&[1.0, 0.0], dr_slime, "[0.5, −0.5]"),
        (&[1.0, 0.0], trl, "[0.707007, −0.707007]"),
        (&[1.0, 0.0], rloo, "[1, −1]"),
        (&[2.0], slime, "[0]"),
        (&[2.0], verl, "[1.999998]"),
        (&[2.0], dr_slime, "[0]"),
        (&[2.0], dr_verl, "[2.0]"),
        (&[2.0], trl, "[0]"),
        (&[2.0], rloo, "[2.0]"),
    ];
    for (i, (rewards, config, expected)) in rows.iter().enumerate() {
        let what = format!(
            "row {i}: {:?}/{:?} of {rewards:?}",
            config.estimator, config.convention
        );
        check(
            &what,
            &advantages(rewards, Grouping::Single, *config),
            expected,
        );
    }
}

const EIGHT: [f64; 8] = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0];

#[test]
fn trl_batch_std_and_slime_fallback() {
    let trl_batch = AdvantageConfig {
        convention: Convention::Trl,
        std_scale: StdScale::Batch,
        ..Default::default()
    };
    check(
        "TRL scale_rewards=batch",
        &advantages(&EIGHT, Grouping::Blocks(4), trl_batch),
        "[0.965905, −0.965905, 0.965905, −0.965905, 0.482953, 0.482953, 0.482953, −1.448858]",
    );
    check("batch std", &[nanstd(&EIGHT)], "[0.517549]");
    // 8 samples != 4 * 3: slime falls back to one group of all 8.
    let fallback = Grouping::SlimeBlocks {
        n_samples_per_prompt: 4,
        rollout_batch_size: 3,
    };
    check(
        "slime fallback",
        &advantages(&EIGHT, fallback, AdvantageConfig::default()),
        "[0.724567, −1.207612, 0.724567, −1.207612, 0.724567, 0.724567, 0.724567, −1.207612]",
    );
    // 8 samples == 4 * 2: positional groups of 4.
    let blocks = Grouping::SlimeBlocks {
        n_samples_per_prompt: 4,
        rollout_batch_size: 2,
    };
    check(
        "slime blocks",
        &advantages(&EIGHT, blocks, AdvantageConfig::default()),
        "[0.866024, −0.866024, 0.866024, −0.866024, 0.499999 ×3, −1.499997]",
    );
}

/// A batch of one-token samples whose advantages equal `advantages` (rewards normalisation off), with
/// rollout logprobs `old`.
fn one_token_batch(advantages: &[f64], old: &[f32]) -> (Batch, grpo::Advantages) {
    let parts: Vec<_> = advantages
        .iter()
        .zip(old)
        .map(|(&a, &o)| SampleParts {
            rollout_log_probs: Some(vec![o]),
            ..sample(a, 1)
        })
        .collect();
    let batch = Batch::new(&parts, &BatchOptions::default()).expect("valid batch");
    let adv = batch.advantages(&AdvantageConfig {
        normalize_rewards: false,
        ..Default::default()
    });
    (batch, adv)
}

/// Per-token losses and clip flags through the whole batch path, for ratios and advantages.
fn batch_losses(ratios: &[f32], advantages: &[f64], config: PolicyLossConfig) -> (Vec<f64>, f64) {
    let old = vec![-3.0f32; ratios.len()];
    let current: Vec<f32> = ratios.iter().zip(&old).map(|(r, o)| o + r.ln()).collect();
    let (batch, adv) = one_token_batch(advantages, &old);
    let config = PolicyLossConfig {
        use_rollout_log_probs: true,
        aggregation: Aggregation::TokenMean,
        ..config
    };
    let lp = LogProbs::new(&current);
    let (out, tokens) = batch
        .policy_loss_with_tokens(&adv, &lp, &config)
        .expect("loss");
    // `policy_loss` alone takes the kernel's fast path for broadcast advantages; it must agree.
    let fast = batch.policy_loss(&adv, &lp, &config).expect("loss");
    let mean =
        tokens.values().iter().map(|&l| f64::from(l)).sum::<f64>() / tokens.values().len() as f64;
    assert!(
        (fast.pg_loss - mean).abs() <= 1e-6 * (1.0 + mean.abs()),
        "{fast:?} vs {mean}"
    );
    assert_eq!(fast.pg_clipfrac, out.pg_clipfrac);
    (f64s(tokens.values()), out.pg_clipfrac)
}

#[test]
fn slime_policy_loss_test() {
    // slime tests/test_policy_loss.py: eps 0.2/0.2, dual clip 1.5.
    let config = PolicyLossConfig {
        eps_clip: 0.2,
        eps_clip_high: 0.2,
        dual_clip: Some(1.5),
        ..Default::default()
    };
    let (losses, _) = batch_losses(&[2.0, 2.0, 0.5], &[2.0, -2.0, 2.0], config);
    check("slime test_policy_loss", &losses, "[-2.4, 3.0, -1.0]");
}

#[test]
fn ppo_per_token_loss_table() {
    #[rustfmt::skip]
    let rows: &[(f32, f32, f64, Option<f32>, &str)] = &[
        // (ratio, advantage, eps_high, dual clip, loss); eps_low = 0.2 throughout.
        (2.0, 2.0, 0.28, None, "[-2.56]"),
        (2.0, -2.0, 0.28, None, "[4.0]"),
        (2.0, -2.0, 0.28, Some(3.0), "[4.0]"),
        (2.0, -2.0, 0.2, Some(1.5), "[3.0]"),
        (0.5, 2.0, 0.28, None, "[-1.0]"),
        (0.5, -2.0, 0.28, None, "[1.6]"),
        (1.1, 1.0, 0.28, None, "[-1.1]"),
        (1.3, 1.0, 0.28, None, "[-1.28]"),
        (1.3, 1.0, 0.2, None, "[-1.2]"),
        (0.7, -1.0, 0.28, None, "[0.8]"),
        (1.7, 0.0, 0.28, None, "[0]"),
        (0.3, 0.0, 0.28, Some(3.0), "[0]"),
    ];
    for &(ratio, adv, eps_high, dual, expected) in rows {
        let what = format!("rho={ratio} A={adv} eps_high={eps_high} c={dual:?}");
        let (scalar, _) = ppo_clip_loss(
            ratio,
            adv,
            0.2,
            eps_high as f32,
            dual.unwrap_or(f32::INFINITY),
        );
        check(&what, &[f64::from(scalar)], expected);
        let config = PolicyLossConfig {
            eps_clip_high: eps_high,
            dual_clip: dual.map(f64::from),
            ..Default::default()
        };
        let (batched, _) = batch_losses(&[ratio], &[f64::from(adv)], config);
        check(&format!("{what} (batch)"), &batched, expected);
    }
}

#[test]
fn cispo_loss_test() {
    // slime tests/test_cispo_loss.py.
    let adv = [1.0, -0.5, 2.0, -1.0];
    let log_probs = [-0.7f32, -1.2, -0.4, -2.1];
    let rows: &[(f32, f32, [f32; 4], &str, &str)] = &[
        (
            0.2,
            0.28,
            [1.0, 1.14, 1.56, 0.4],
            "[1, 1.14, 1.28, 0.8]",
            "[0, 0, 1, 1]",
        ),
        (
            1.0,
            4.0,
            [1.0, 3.0, 9.0, 0.4],
            "[1, 3, 5, 0.4]",
            "[0, 0, 1, 0]",
        ),
    ];
    for &(lo, hi, ratios, clamped, clipped) in rows {
        let clamped_values: Vec<f64> = ratios
            .iter()
            .map(|r| f64::from(r.clamp(1.0 - lo, 1.0 + hi)))
            .collect();
        check("cispo clamp", &clamped_values, clamped);
        let expected: Vec<String> = clamped_values
            .iter()
            .zip(adv)
            .zip(log_probs)
            .map(|((c, a), lp)| format!("{:.6}", -c * a * f64::from(lp)))
            .collect();
        let expected = format!("[{}]", expected.join(", "));
        let scalar: Vec<(f32, bool)> = ratios
            .iter()
            .zip(adv)
            .zip(log_probs)
            .map(|((&r, a), lp)| cispo_loss(r, a as f32, lp, lo, hi))
            .collect();
        check(
            "cispo loss",
            &scalar.iter().map(|s| f64::from(s.0)).collect::<Vec<_>>(),
            &expected,
        );
        let flags: Vec<f64> = scalar.iter().map(|s| f64::from(u8::from(s.1))).collect();
        check("cispo clipfrac", &flags, clipped);

        // The same through the batch: old = log_pi - ln(ratio), so the ratio is as given.
        let old: Vec<f32> = log_probs
            .iter()
            .zip(ratios)
            .map(|(lp, r)| (lp - r.ln()).min(0.0))
            .collect();
        let current: Vec<f32> = old.iter().zip(ratios).map(|(o, r)| o + r.ln()).collect();
        let (batch, a) = one_token_batch(&adv, &old);
        let config = PolicyLossConfig {
            kind: PolicyLossKind::Cispo,
            eps_clip: f64::from(lo),
            eps_clip_high: f64::from(hi),
            use_rollout_log_probs: true,
            aggregation: Aggregation::TokenMean,
            ..Default::default()
        };
        let (out, tokens) = batch
            .policy_loss_with_tokens(&a, &LogProbs::new(&current), &config)
            .expect("loss");
        check("cispo loss (batch)", &f64s(tokens.values()), &expected);
        let frac = flags.iter().sum::<f64>() / 4.0;
        check(
            "cispo clipfrac (batch)",
            &[out.pg_clipfrac],
            &format!("[{frac}]"),
        );
    }
}

#[test]
fn kl_estimators() {
    #[rustfmt::skip]
    let rows: &[(f32, KlEstimator, &str)] = &[
        (0.5, KlEstimator::K1, "[0.5]"), (0.5, KlEstimator::K2, "[0.125]"), (0.5, KlEstimator::K3, "[0.106531]"),
        (0.5, KlEstimator::LowVarKl, "[0.106531]"),
        (-1.0, KlEstimator::K1, "[-1]"), (-1.0, KlEstimator::K2, "[0.5]"), (-1.0, KlEstimator::K3, "[0.718282]"),
        (-1.0, KlEstimator::LowVarKl, "[0.718282]"), (-1.0, KlEstimator::Abs, "[1]"),
        (0.0, KlEstimator::K1, "[0]"), (0.0, KlEstimator::K2, "[0]"), (0.0, KlEstimator::K3, "[0]"),
        (0.0, KlEstimator::LowVarKl, "[0]"), (0.0, KlEstimator::Abs, "[0]"),
    ];
    for &(x, estimator, expected) in rows {
        check(
            &format!("{estimator:?}({x})"),
            &[f64::from(kl(estimator, x))],
            expected,
        );
    }
}

#[test]
fn slime_ppo_kl_metric_does_not_mutate() {
    // slime tests/test_ppo_kl_metric.py: k1 of log_probs against ref.
    let log_probs = vec![0.5f32, 0.7, 0.9];
    let reference = vec![0.4f32, 0.5, 0.6];
    let (lp_before, ref_before) = (log_probs.clone(), reference.clone());
    let batch = Batch::new(&[sample(0.0, 3)], &BatchOptions::default()).expect("valid batch");
    let kl = batch
        .kl(&log_probs, &reference, KlEstimator::K1)
        .expect("kl");
    check("rollout_data[kl]", &f64s(kl.values()), "[0.1, 0.2, 0.3]");
    assert_eq!((log_probs, reference), (lp_before, ref_before));
}

#[test]
fn trl_nanstd() {
    check(
        "nanstd([1,2,3,nan])",
        &[nanstd(&[1.0, 2.0, 3.0, f64::NAN])],
        "[1.0]",
    );
    let rows = [[1.0, f64::NAN], [3.0, 5.0]];
    check(
        "nanstd rows",
        &rows.iter().map(|r| nanstd(r)).collect::<Vec<_>>(),
        "[nan, 1.4142135]",
    );
    check("nanstd all NaN", &[nanstd(&[f64::NAN, f64::NAN])], "[nan]");
}

#[test]
fn trl_nan_aware_rewards() {
    // Reference section 5.4: TRL ignores a NaN reward in the group statistics and gives it advantage 0; slime
    // and verl propagate it through the group. (A `Batch` rejects NaN rewards; this is the pure function.)
    let rewards = [1.0, f64::NAN, 0.0, 1.0, f64::NAN, f64::NAN];
    let groups = grpo::Groups::from_labels([0, 0, 0, 0, 1, 1]);
    let trl = grpo::normalize_rewards(&rewards, &groups, Convention::Trl, StdScale::Group);
    check(
        "TRL NaN-aware",
        &trl,
        "[0.577250, 0, −1.154501, 0.577250, 0, 0]",
    );
    let slime = grpo::normalize_rewards(&rewards, &groups, Convention::Slime, StdScale::Group);
    check(
        "slime propagates NaN",
        &slime,
        "[nan, nan, nan, nan, nan, nan]",
    );
}

#[test]
fn trl_off_policy_mask() {
    // TRL test_get_off_policy_mask: A = [1, -1, -1], log_pi = -2, -0.5, -2, sampling logprobs 0, threshold 1.
    let (batch, adv) = one_token_batch(&[1.0, -1.0, -1.0], &[0.0, 0.0, 0.0]);
    let current = [-2.0f32, -0.5, -2.0];
    let mask = batch
        .off_policy_mask(&adv, &LogProbs::new(&current), true, 1.0)
        .expect("mask");
    check(
        "off-policy mask",
        &mask
            .iter()
            .map(|&k| f64::from(u8::from(k)))
            .collect::<Vec<_>>(),
        "[1, 1, 0]",
    );
    // OPSM in the loss drops the third sample's policy loss.
    let config = PolicyLossConfig {
        use_rollout_log_probs: true,
        opsm_delta: Some(1.0),
        aggregation: Aggregation::TokenMean,
        ..Default::default()
    };
    let (_, tokens) = batch
        .policy_loss_with_tokens(&adv, &LogProbs::new(&current), &config)
        .expect("loss");
    assert_eq!(tokens.sample(2), &[0.0]);
    assert_ne!(tokens.sample(1), &[0.0]);
}

#[test]
fn gspo_ratios() {
    let parts = [SampleParts {
        rollout_log_probs: Some(vec![-1.2, -1.9, -0.6]),
        ..sample(1.0, 3)
    }];
    let batch = Batch::new(&parts, &BatchOptions::default()).expect("valid batch");
    let current = [-1.0f32, -2.0, -0.5];
    let lp = LogProbs::new(&current);
    let seq = batch
        .ratios(&lp, true, RatioLevel::Sequence)
        .expect("ratios");
    check("GSPO s", &f64s(seq.values()), "[1.068939 ×3]");
    let tok = batch.ratios(&lp, true, RatioLevel::Token).expect("ratios");
    check(
        "token ratios",
        &f64s(tok.values()),
        "[1.221403, 0.904837, 1.105171]",
    );
    check(
        "sequence_ratio",
        &[grpo::sequence_ratio(
            &current,
            &[-1.2, -1.9, -0.6],
            &[1, 1, 1],
        )],
        "[1.068939]",
    );
}

#[test]
fn aggregation() {
    let batch = Batch::new(&[sample(0.0, 2), sample(0.0, 4)], &BatchOptions::default())
        .expect("valid batch");
    let losses = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    #[rustfmt::skip]
    let rows: &[(Aggregation, &str)] = &[
        (Aggregation::TokenMean, "[3.5]"),
        (Aggregation::SeqMeanTokenMean, "[3.0]"),
        (Aggregation::SeqMeanTokenSum, "[10.5]"),
        (Aggregation::DrGrpo { max_len: Some(8.0) }, "[1.3125]"),
        (Aggregation::SeqMeanTokenSumNorm { length: Some(8.0) }, "[2.625]"),
        // Without a constant, L is the longest response (4).
        (Aggregation::DrGrpo { max_len: None }, "[2.625]"),
    ];
    for &(mode, expected) in rows {
        check(
            &format!("{mode:?}"),
            &[batch.aggregate(&losses, mode)],
            expected,
        );
    }
    // slime pools samples that share a rollout id: one rollout, token-weighted inside it.
    let pooled = [
        SampleParts {
            rollout_id: Some(7),
            ..sample(0.0, 2)
        },
        SampleParts {
            rollout_id: Some(7),
            ..sample(0.0, 4)
        },
    ];
    let pooled = Batch::new(&pooled, &BatchOptions::default()).expect("valid batch");
    check(
        "pooled seq-mean-token-mean",
        &[pooled.aggregate(&losses, Aggregation::SeqMeanTokenMean)],
        "[3.5]",
    );
}

#[test]
fn tis_weights() {
    let clamp = Tis {
        low: 0.0,
        high: 2.0,
        mode: TisMode::Clamp,
    };
    let icepop = Tis {
        low: 0.5,
        high: 2.0,
        mode: TisMode::IcePop,
    };
    let raw = Tis {
        low: 0.0,
        high: f64::INFINITY,
        mode: TisMode::Clamp,
    };
    #[rustfmt::skip]
    let rows: &[(f32, Tis, &str)] = &[
        (0.0, clamp, "[1]"), (0.0, icepop, "[1]"),
        (1.0, raw, "[2.718282]"), (1.0, clamp, "[2]"), (1.0, icepop, "[0]"),
        (-1.0, raw, "[0.367879]"), (-1.0, clamp, "[0.367879]"), (-1.0, icepop, "[0]"),
    ];
    for (d, tis, expected) in rows {
        check(
            &format!("tis({d}, {tis:?})"),
            &[f64::from(tis_weight(*d, tis).0)],
            expected,
        );
    }
}

#[test]
fn masked_whitening() {
    let mut a = [1.0f32, 1.0, -1.0, -1.0, -1.0];
    masked_whiten(&mut a, &[1, 1, 1, 1, 0]);
    check(
        "masked whiten",
        &f64s(&a),
        "[0.866025, 0.866025, −0.866025, −0.866025, −0.866025]",
    );
}

#[test]
fn reinforce_plus_plus_returns() {
    let kl_values = [0.1f32, 0.2, 0.0, 0.3];
    let mut token_rewards = [0.0f32; 4];
    // gamma = 0 leaves the token rewards themselves.
    discounted_returns(
        1.0,
        Some(&kl_values),
        &[1, 1, 1, 1],
        0.0,
        0.5,
        &mut token_rewards,
    );
    check(
        "token rewards",
        &f64s(&token_rewards),
        "[−0.05, −0.1, 0, 0.85]",
    );

    let batch = Batch::new(&[sample(1.0, 4)], &BatchOptions::default()).expect("valid batch");
    let config = AdvantageConfig {
        estimator: Estimator::ReinforcePlusPlus,
        gamma: 0.9,
        kl_coef: 0.5,
        ..Default::default()
    };
    let adv = batch
        .advantages_with_kl(&config, &kl_values)
        .expect("advantages");
    check(
        "returns",
        &f64s(&adv.tokens(0)),
        "[0.47965, 0.5885, 0.765, 0.85]",
    );
}

/// REINFORCE++-baseline: the group-centred reward minus `kl_coef` times each token's KL; with no KL
/// given, or a zero coefficient, the centred reward alone, broadcast over the tokens.
#[test]
fn reinforce_plus_plus_baseline_subtracts_the_kl_per_token() {
    // One group of two: rewards 1 and 0 centre to 0.5 and -0.5 (no std scaling for this estimator).
    let options = BatchOptions {
        require_rollout_log_probs: false,
        grouping: Grouping::Blocks(2),
        ..BatchOptions::default()
    };
    let batch = Batch::new(&[sample(1.0, 2), sample(0.0, 3)], &options).expect("valid");
    let kl = [0.1f32, 0.2, 0.0, 0.4, 1.0];
    let config = AdvantageConfig {
        estimator: Estimator::ReinforcePlusPlusBaseline,
        kl_coef: 0.5,
        ..Default::default()
    };
    let adv = batch.advantages_with_kl(&config, &kl).expect("advantages");
    assert!(!adv.is_broadcast());
    check("sample 0", &f64s(&adv.tokens(0)), "[0.45, 0.4]");
    check("sample 1", &f64s(&adv.tokens(1)), "[−0.5, −0.7, −1.0]");

    let unshaped = [
        batch.advantages(&config),
        batch
            .advantages_with_kl(
                &AdvantageConfig {
                    kl_coef: 0.0,
                    ..config
                },
                &kl,
            )
            .expect("advantages"),
    ];
    for adv in unshaped {
        assert!(adv.is_broadcast());
        check("sample 0", &f64s(&adv.tokens(0)), "[0.5, 0.5]");
        check("sample 1", &f64s(&adv.tokens(1)), "[−0.5 ×3]");
    }

    // Whitened without a KL: the same tokens as Dr. GRPO's (also centred, unscaled), whitened.
    let whiten = |estimator| {
        batch
            .advantages(&AdvantageConfig {
                estimator,
                whiten: true,
                ..config
            })
            .per_token()
            .into_owned()
    };
    let whitened = whiten(Estimator::ReinforcePlusPlusBaseline);
    assert_eq!(whitened, whiten(Estimator::DrGrpo));
    // Mean -0.1 and unbiased std sqrt(0.3) over the five tokens.
    check(
        "whitened",
        &f64s(whitened.values()),
        "[1.095445 ×2, −0.730297 ×3]",
    );
}

#[test]
fn groups_from_labels_count_their_members() {
    let groups = grpo::Groups::from_labels(["b", "a", "b", "c", "b"]);
    assert_eq!(groups.of_sample(), [0, 1, 0, 2, 0]);
    assert_eq!(groups.sizes(), [3, 1, 1]);
    assert_eq!(groups.count(), 3);
    // verl treats a group of one differently from slime: r / (1 + eps) against 0.
    let rewards = [1.0, 2.0, 0.0, 4.0, 2.0];
    let verl = grpo::normalize_rewards(&rewards, &groups, Convention::Verl, StdScale::Group);
    check("verl", &verl, "[0, 1.999998, −1.0, 3.999996, 1.0]");
    let slime = grpo::normalize_rewards(&rewards, &groups, Convention::Slime, StdScale::Group);
    check("slime", &slime, "[0, 0, −1.0, 0, 1.0]");
}

#[test]
fn ragged_arrays_hold_each_sample_in_order() {
    let mut r = grpo::Ragged::from_parts(vec![0, 2, 2, 5], vec![1, 2, 3, 4, 5]);
    assert_eq!((r.len(), r.is_empty()), (3, false));
    assert_eq!(r.iter().collect::<Vec<_>>(), [&[1, 2][..], &[], &[3, 4, 5]]);
    assert_eq!(r.sample(2), [3, 4, 5]);
    r.values_mut()[2] = 30;
    assert_eq!(r.offsets(), [0, 2, 2, 5]);
    assert_eq!(r.into_values(), [1, 2, 30, 4, 5]);
    let empty = grpo::Ragged::<f32>::from_parts(vec![0], Vec::new());
    assert_eq!(
        (empty.len(), empty.is_empty(), empty.iter().count()),
        (0, true, 0)
    );

    let batch = reward_batch(&[1.0, 0.0], Grouping::Single);
    assert_eq!((batch.len(), batch.is_empty()), (2, false));
}

/// The behaviour logprob in the ratio (TRL #7269). A token drawn under top-p or top-k has probability
/// `p / kept` under the sampler, `p` under the whole distribution: SGLang's `output_token_logprobs` is
/// `ln p`, its `output_token_sampling_logprobs` is `ln p - ln kept`. A trainer that computes its current
/// logprobs under the same support (here equal to the behaviour's: the policy has not moved) sees ratio 1 and
/// `ppo_kl` 0 with the renormalised behaviour; with the whole-distribution one every ratio carries `1 / kept`
/// and `ppo_kl` the mean `ln kept`, by hand: `(ln 0.8 + ln 0.9) / 2 = -0.164252`.
#[test]
fn sampling_mask_behaviour_logprobs_take_the_kept_mass_out_of_the_ratio() {
    let (kept, full) = ([0.8f64, 0.9], [-1.0f64, -0.5]);
    let renormalised: Vec<f32> = full
        .iter()
        .zip(kept)
        .map(|(lp, k)| (lp - k.ln()) as f32)
        .collect();
    let parts = [SampleParts {
        rollout_log_probs: Some(full.iter().map(|&lp| lp as f32).collect()),
        sampling_log_probs: Some(renormalised.clone()),
        ..sample(1.0, 2)
    }];
    let current = LogProbs::new(&renormalised);
    let config = PolicyLossConfig {
        use_rollout_log_probs: true,
        aggregation: Aggregation::TokenMean,
        ..Default::default()
    };
    for (behaviour, ratios, ppo_kl) in [
        (
            BehaviourLogProbs::Rollout,
            "[1.250000, 1.111111]",
            -0.164252,
        ),
        (BehaviourLogProbs::SamplingMask, "[1.000000, 1.000000]", 0.0),
    ] {
        let options = BatchOptions {
            behaviour,
            ..BatchOptions::default()
        };
        let batch = Batch::new(&parts, &options).expect("valid batch");
        let r = batch
            .ratios(&current, true, RatioLevel::Token)
            .expect("ratios");
        check(&format!("{behaviour:?} ratios"), &f64s(r.values()), ratios);
        let adv = batch.advantages(&AdvantageConfig::default());
        let out = batch
            .policy_loss(&adv, &current, &config)
            .expect("the loss");
        assert!(
            (out.ppo_kl - ppo_kl).abs() < 1e-6,
            "{behaviour:?}: ppo_kl {} vs {ppo_kl}",
            out.ppo_kl
        );
    }
    // A batch that takes its behaviour from the masks needs them on every sample.
    let without = [sample(1.0, 2)];
    let options = BatchOptions {
        behaviour: BehaviourLogProbs::SamplingMask,
        ..BatchOptions::default()
    };
    assert_eq!(
        Batch::new(&without, &options).unwrap_err(),
        BatchError::MissingSamplingLogProbs { sample: 0 }
    );
}

/// A batch for routing replay requires routes for the forward pass of every response token up to the last
/// trained one, and one for off-policy correction the weight version of every trained token; a sample short of
/// either is named.
#[test]
fn a_batch_can_require_routes_and_weight_versions() {
    let options = BatchOptions {
        require_routed_experts: true,
        require_weight_versions: true,
        ..BatchOptions::default()
    };
    let ok = SampleParts {
        routed_response_tokens: Some(4),
        weight_versioned_tokens: Some(4),
        ..sample(1.0, 4)
    };
    Batch::new(std::slice::from_ref(&ok), &options).expect("both carried");
    for (bad, want) in [
        (
            SampleParts {
                routed_response_tokens: None,
                ..ok.clone()
            },
            BatchError::MissingRoutedExperts { sample: 1 },
        ),
        (
            SampleParts {
                routed_response_tokens: Some(3),
                ..ok.clone()
            },
            BatchError::RoutedExpertsShort {
                sample: 1,
                routed: 3,
                needed: 4,
            },
        ),
        (
            // The last token is trained, so its forward pass needs routes even after an untrained one.
            SampleParts {
                loss_mask: Some(vec![1, 0, 0, 1]),
                routed_response_tokens: Some(3),
                ..ok.clone()
            },
            BatchError::RoutedExpertsShort {
                sample: 1,
                routed: 3,
                needed: 4,
            },
        ),
        (
            SampleParts {
                weight_versioned_tokens: Some(3),
                ..ok.clone()
            },
            BatchError::MissingWeightVersions {
                sample: 1,
                versioned: 3,
                trained: 4,
            },
        ),
    ] {
        assert_eq!(Batch::new(&[ok.clone(), bad], &options).unwrap_err(), want);
    }
    // Untrained tokens need no version.
    let masked = SampleParts {
        loss_mask: Some(vec![1, 1, 0, 0]),
        weight_versioned_tokens: Some(2),
        ..ok.clone()
    };
    Batch::new(std::slice::from_ref(&masked), &options).expect("the trained tokens are versioned");
    // A tool's output after the last trained token changes no trained logit: it needs no routes.
    let tool_tail = SampleParts {
        routed_response_tokens: Some(2),
        ..masked
    };
    Batch::new(&[tool_tail], &options).expect("routes through the last trained token");
}
