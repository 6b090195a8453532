//! Batch validation and loss-input errors: each invalid input gives the right variant, sample and message.

use grpo::{
    AdvantageConfig, Batch, BatchError, BatchOptions, BehaviourLogProbs, Grouping, LogProbs,
    LossError, PolicyLossConfig, SampleParts, Tis,
};

use crate::util::sample;

fn with_lp(reward: f64, lp: Vec<f32>) -> SampleParts {
    SampleParts {
        response_length: lp.len(),
        rollout_log_probs: Some(lp),
        ..sample(reward, 0)
    }
}

fn good() -> Vec<SampleParts> {
    (0..4)
        .map(|i| with_lp(f64::from(i), vec![-0.5, -1.0, -0.25]))
        .collect()
}

const REQUIRED: BatchOptions = BatchOptions {
    require_rollout_log_probs: true,
    grouping: Grouping::Blocks(2),
    behaviour: BehaviourLogProbs::Rollout,
    require_routed_experts: false,
    require_weight_versions: false,
};

/// Applies `edit` to a valid batch and checks the error and its message.
#[track_caller]
fn rejects(
    edit: impl FnOnce(&mut Vec<SampleParts>),
    options: BatchOptions,
    expected: BatchError,
    message: &str,
) {
    let mut parts = good();
    edit(&mut parts);
    let err = Batch::new(&parts, &options).expect_err("the batch must be rejected");
    assert_eq!(err, expected);
    assert_eq!(err.to_string(), message);
}

#[test]
fn valid_batch_is_accepted() {
    let batch = Batch::new(&good(), &REQUIRED).expect("valid");
    assert_eq!((batch.len(), batch.num_tokens()), (4, 12));
    assert_eq!(batch.offsets(), &[0, 3, 6, 9, 12]);
    assert_eq!(batch.groups().sizes(), &[2, 2]);
    assert_eq!(batch.rollout_log_probs().map(<[f32]>::len), Some(12));
}

#[test]
fn empty_batch() {
    assert_eq!(
        Batch::new(&[], &BatchOptions::default()),
        Err(BatchError::Empty)
    );
}

#[test]
fn missing_and_non_finite_rewards() {
    rejects(
        |p| p[2].reward = None,
        REQUIRED,
        BatchError::MissingReward { sample: 2 },
        "sample 2: reward is missing",
    );
    let mut parts = good();
    parts[1].reward = Some(f64::NAN);
    let err = Batch::new(&parts, &REQUIRED).expect_err("NaN reward");
    assert!(matches!(err, BatchError::NonFiniteReward { sample: 1, reward } if reward.is_nan()));
    assert_eq!(
        err.to_string(),
        "sample 1: reward is NaN, expected a finite number"
    );
    rejects(
        |p| p[3].reward = Some(f64::INFINITY),
        REQUIRED,
        BatchError::NonFiniteReward {
            sample: 3,
            reward: f64::INFINITY,
        },
        "sample 3: reward is inf, expected a finite number",
    );
}

#[test]
fn missing_rollout_log_probs() {
    rejects(
        |p| p[3].rollout_log_probs = None,
        REQUIRED,
        BatchError::MissingRolloutLogProbs { sample: 3 },
        "sample 3: rollout_log_probs is missing but the batch requires rollout logprobs",
    );
    // Issue #1976: none of the samples has logprobs.
    rejects(
        |p| p.iter_mut().for_each(|s| s.rollout_log_probs = None),
        REQUIRED,
        BatchError::MissingRolloutLogProbs { sample: 0 },
        "sample 0: rollout_log_probs is missing but the batch requires rollout logprobs",
    );
}

#[test]
fn mixed_rollout_log_probs() {
    let optional = BatchOptions {
        require_rollout_log_probs: false,
        ..REQUIRED
    };
    rejects(
        |p| p[2].rollout_log_probs = None,
        optional,
        BatchError::InconsistentRolloutLogProbs {
            sample: 2,
            present: false,
            reference: 0,
        },
        "sample 2: rollout_log_probs is missing but sample 0 has them; they must be present on all samples or on none",
    );
    rejects(
        |p| p[0].rollout_log_probs = None,
        optional,
        BatchError::InconsistentRolloutLogProbs {
            sample: 1,
            present: true,
            reference: 0,
        },
        "sample 1: rollout_log_probs is present but sample 0 has none; they must be present on all samples or on none",
    );
    // All absent is fine when they are not required.
    let mut parts = good();
    parts.iter_mut().for_each(|s| s.rollout_log_probs = None);
    assert!(
        Batch::new(&parts, &optional)
            .expect("valid")
            .rollout_log_probs()
            .is_none()
    );
}

#[test]
fn log_prob_length_and_values() {
    rejects(
        |p| p[3].response_length = 7,
        REQUIRED,
        BatchError::RolloutLogProbsLength {
            sample: 3,
            len: 3,
            response_length: 7,
        },
        "sample 3: rollout_log_probs has 3 entries but response_length is 7",
    );
    rejects(
        |p| p[1].rollout_log_probs.as_mut().expect("present")[2] = 0.5,
        REQUIRED,
        BatchError::PositiveLogProb {
            sample: 1,
            position: 2,
            value: 0.5,
        },
        "sample 1: rollout_log_probs[2] is 0.5, a logprob must be <= 0",
    );
    rejects(
        |p| p[2].rollout_log_probs.as_mut().expect("present")[0] = f32::NEG_INFINITY,
        REQUIRED,
        BatchError::NonFiniteLogProb {
            sample: 2,
            position: 0,
            value: f32::NEG_INFINITY,
        },
        "sample 2: rollout_log_probs[0] is -inf, expected a finite number",
    );
    let mut parts = good();
    parts[0].rollout_log_probs.as_mut().expect("present")[1] = f32::NAN;
    assert!(matches!(
        Batch::new(&parts, &REQUIRED),
        Err(BatchError::NonFiniteLogProb { sample: 0, position: 1, value }) if value.is_nan()
    ));
}

#[test]
fn loss_mask_length_and_values() {
    rejects(
        |p| p[2].loss_mask = Some(vec![1, 0]),
        REQUIRED,
        BatchError::LossMaskLength {
            sample: 2,
            len: 2,
            response_length: 3,
        },
        "sample 2: loss_mask has 2 entries but response_length is 3",
    );
    rejects(
        |p| p[1].loss_mask = Some(vec![1, 2, 0]),
        REQUIRED,
        BatchError::InvalidLossMask {
            sample: 1,
            position: 1,
            value: 2,
        },
        "sample 1: loss_mask[1] is 2, expected 0 or 1",
    );
}

#[test]
fn grouping_errors() {
    let blocks3 = BatchOptions {
        grouping: Grouping::Blocks(3),
        ..REQUIRED
    };
    rejects(
        |_| {},
        blocks3,
        BatchError::IndivisibleGroups {
            samples: 4,
            group_size: 3,
        },
        "4 samples cannot be split into groups of 3",
    );
    let zero = BatchOptions {
        grouping: Grouping::Blocks(0),
        ..REQUIRED
    };
    rejects(
        |_| {},
        zero,
        BatchError::ZeroGroupSize,
        "group size is 0, expected at least 1",
    );
    let by_index = BatchOptions {
        grouping: Grouping::ByGroupIndex,
        ..REQUIRED
    };
    rejects(
        |p| {
            p.iter_mut()
                .enumerate()
                .for_each(|(i, s)| s.group_index = Some(i % 2));
            p[2].group_index = None;
        },
        by_index,
        BatchError::MissingGroupIndex { sample: 2 },
        "sample 2: group_index is missing but grouping is by group index",
    );
    // Non-contiguous group indices form groups by value.
    let mut parts = good();
    parts
        .iter_mut()
        .enumerate()
        .for_each(|(i, s)| s.group_index = Some(10 + i % 2));
    let batch = Batch::new(&parts, &by_index).expect("valid");
    assert_eq!(batch.groups().of_sample(), &[0, 1, 0, 1]);
}

#[test]
fn first_error_in_sample_order() {
    let mut parts = good();
    parts[3].reward = None;
    parts[1].rollout_log_probs = Some(vec![-1.0]);
    assert_eq!(
        Batch::new(&parts, &REQUIRED),
        Err(BatchError::RolloutLogProbsLength {
            sample: 1,
            len: 1,
            response_length: 3
        })
    );
}

#[test]
fn loss_input_errors() {
    let batch = Batch::new(&good(), &REQUIRED).expect("valid");
    let adv = batch.advantages(&AdvantageConfig::default());
    let current = vec![-0.5f32; batch.num_tokens()];
    let config = PolicyLossConfig::default();

    let short = vec![-0.5f32; 5];
    let err = batch
        .policy_loss(&adv, &LogProbs::new(&short), &config)
        .expect_err("short current");
    assert_eq!(
        err,
        LossError::LengthMismatch {
            input: "current",
            len: 5,
            expected: 12
        }
    );
    assert_eq!(
        err.to_string(),
        "current has 5 entries but the batch has 12 tokens"
    );

    let mut bad = current.clone();
    bad[7] = f32::NAN;
    let err = batch
        .policy_loss(&adv, &LogProbs::new(&bad), &config)
        .expect_err("NaN current");
    assert!(
        matches!(err, LossError::NonFinite { input: "current", sample: 2, position: 1, value } if value.is_nan())
    );
    // A non-finite value under mask 0 is still an error.
    let mut parts = good();
    parts[3].loss_mask = Some(vec![1, 1, 0]);
    let masked = Batch::new(&parts, &REQUIRED).expect("valid");
    let mut bad = current.clone();
    bad[11] = f32::INFINITY;
    let err = masked
        .policy_loss(&adv, &LogProbs::new(&bad), &config)
        .expect_err("inf current");
    assert_eq!(
        err,
        LossError::NonFinite {
            input: "current",
            sample: 3,
            position: 2,
            value: f32::INFINITY
        }
    );
    assert_eq!(
        err.to_string(),
        "sample 3: current[2] is inf, expected a finite number"
    );

    // The typed form of issue #1976: rollout logprobs asked for but absent.
    let mut none = good();
    none.iter_mut().for_each(|s| s.rollout_log_probs = None);
    let without = Batch::new(
        &none,
        &BatchOptions {
            require_rollout_log_probs: false,
            ..REQUIRED
        },
    )
    .expect("valid");
    let rollout = PolicyLossConfig {
        use_rollout_log_probs: true,
        ..config
    };
    let err = without
        .policy_loss(&adv, &LogProbs::new(&current), &rollout)
        .expect_err("no rollout logprobs");
    assert_eq!(
        err,
        LossError::MissingInput {
            input: "rollout_log_probs",
            needed_by: "use_rollout_log_probs"
        }
    );
    assert_eq!(
        err.to_string(),
        "rollout_log_probs is required by use_rollout_log_probs but was not provided"
    );
    let tis = PolicyLossConfig {
        tis: Some(Tis::default()),
        ..config
    };
    assert_eq!(
        without.policy_loss(&adv, &LogProbs::new(&current), &tis),
        Err(LossError::MissingInput {
            input: "rollout_log_probs",
            needed_by: "tis"
        })
    );
    assert_eq!(
        batch.policy_loss(
            &adv,
            &LogProbs::new(&current),
            &PolicyLossConfig {
                use_rollout_log_probs: true,
                ..tis
            }
        ),
        Err(LossError::TisWithRolloutLogProbs)
    );
    let kl = PolicyLossConfig {
        kl_loss: Some(grpo::KlLoss {
            coef: 0.1,
            estimator: grpo::KlEstimator::K3,
        }),
        ..config
    };
    assert_eq!(
        batch.policy_loss(&adv, &LogProbs::new(&current), &kl),
        Err(LossError::MissingInput {
            input: "reference",
            needed_by: "kl_loss"
        })
    );
    let ent = PolicyLossConfig {
        entropy_coef: 0.01,
        ..config
    };
    assert_eq!(
        batch.policy_loss(&adv, &LogProbs::new(&current), &ent),
        Err(LossError::MissingInput {
            input: "entropy",
            needed_by: "entropy_coef"
        })
    );
    let dual = PolicyLossConfig {
        dual_clip: Some(1.0),
        ..config
    };
    assert_eq!(
        batch.policy_loss(&adv, &LogProbs::new(&current), &dual),
        Err(LossError::InvalidDualClip(1.0))
    );

    // Advantages of another batch layout.
    let other = Batch::new(&good()[..2], &REQUIRED).expect("valid");
    let other_adv = other.advantages(&AdvantageConfig::default());
    assert_eq!(
        batch.policy_loss(&other_adv, &LogProbs::new(&current), &config),
        Err(LossError::AdvantageLayout)
    );
}
