//! The loss gradient against central finite differences of the loss itself, over random batches, advantages,
//! masks, aggregations and clip settings.

use grpo::{
    AdvantageConfig, Aggregation, Batch, BatchOptions, LogProbs, LossError, PolicyLossConfig,
    PolicyLossKind, SampleParts,
};
use proptest::prelude::*;

use crate::util::proptest_config;

fn aggregation(k: u8) -> Aggregation {
    match k % 5 {
        0 => Aggregation::TokenMean,
        1 => Aggregation::SeqMeanTokenMean,
        2 => Aggregation::SeqMeanTokenSum,
        3 => Aggregation::SeqMeanTokenSumNorm { length: Some(7.0) },
        _ => Aggregation::DrGrpo { max_len: None },
    }
}

proptest! {
    #![proptest_config(proptest_config("proptest-regressions/gradient.txt"))]

    /// Token by token, the closed-form gradient equals `(loss(x + h) - loss(x - h)) / 2h` of
    /// `Batch::policy_loss`, away from the clip's kinks (where the two one-sided slopes differ).
    #[test]
    fn the_gradient_is_the_finite_difference_of_the_loss(
        rewards in proptest::collection::vec(0.0f64..1.0, 4..9),
        lens in proptest::collection::vec(1usize..6, 8),
        deltas in proptest::collection::vec(-0.6f32..0.6, 48),
        masks in proptest::collection::vec(0u8..4, 48),
        agg in 0u8..5,
        dual in proptest::option::of(2.0f64..4.0),
    ) {
        let n = rewards.len() - rewards.len() % 2;
        let mut offset = 0;
        let mut rollout = Vec::new();
        let parts: Vec<SampleParts> = (0..n).map(|i| {
            let len = lens[i];
            let lp: Vec<f32> = (0..len).map(|t| -0.2 - 0.1 * ((i + t) % 7) as f32).collect();
            rollout.extend_from_slice(&lp);
            let mask: Vec<u8> = (0..len).map(|t| u8::from(masks[(offset + t) % 48] != 0)).collect();
            offset += len;
            SampleParts {
                reward: Some(rewards[i]),
                response_length: len,
                loss_mask: Some(mask),
                rollout_log_probs: Some(lp),
                ..SampleParts::default()
            }
        }).collect();
        let batch = Batch::new(&parts, &BatchOptions::grpo(2)).unwrap();
        let advantages = batch.advantages(&AdvantageConfig::default());
        let current: Vec<f32> = rollout.iter().zip(deltas.iter().cycle()).map(|(&o, &d)| o + d).collect();
        let config = PolicyLossConfig {
            use_rollout_log_probs: true,
            eps_clip_high: 0.28,
            dual_clip: dual,
            aggregation: aggregation(agg),
            ..PolicyLossConfig::default()
        };
        let grad = batch.policy_loss_gradient(&advantages, &LogProbs::new(&current), &config).unwrap();
        let loss = |x: &[f32]| batch.policy_loss(&advantages, &LogProbs::new(x), &config).unwrap().loss;
        let h = 1e-3f32;
        for t in 0..current.len() {
            let ratio = (current[t] - rollout[t]).exp();
            let near_kink = [1.0 - 0.2, 1.28].iter().any(|&k| (ratio - k).abs() < 0.01)
                || dual.is_some_and(|c| (ratio - c as f32).abs() < 0.01);
            if near_kink {
                continue;
            }
            let (mut up, mut down) = (current.clone(), current.clone());
            up[t] += h;
            down[t] -= h;
            let span = f64::from(up[t]) - f64::from(down[t]);
            let numeric = (loss(&up) - loss(&down)) / span;
            let closed = grad.values()[t];
            prop_assert!(
                (numeric - closed).abs() < 2e-3 * closed.abs().max(1e-2),
                "token {}: closed form {} vs finite difference {}", t, closed, numeric
            );
        }
    }
}

#[test]
fn options_the_gradient_does_not_cover_are_refused_by_name() {
    let parts = vec![
        SampleParts {
            reward: Some(1.0),
            response_length: 1,
            rollout_log_probs: Some(vec![-0.5]),
            ..SampleParts::default()
        };
        2
    ];
    let batch = Batch::new(&parts, &BatchOptions::grpo(2)).unwrap();
    let advantages = batch.advantages(&AdvantageConfig::default());
    let config = PolicyLossConfig {
        kind: PolicyLossKind::Cispo,
        use_rollout_log_probs: true,
        ..PolicyLossConfig::default()
    };
    let err = batch
        .policy_loss_gradient(&advantages, &LogProbs::new(&[-0.5, -0.5]), &config)
        .unwrap_err();
    assert_eq!(err, LossError::GradientUnsupported("CISPO"));
    assert_eq!(
        err.to_string(),
        "the loss gradient is not available with CISPO"
    );
}
