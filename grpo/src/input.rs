//! The trainer's per-token inputs ([`LogProbs`]) and their checks: one entry per token of the batch, finite, present when an option needs them.
//!
//! The checks live here, below both `advantage.rs` and `loss.rs`, because both take per-token inputs.

use crate::batch::Batch;
use crate::error::LossError;

/// Per-token inputs from the trainer, flat in the batch layout (`Batch::num_tokens()` entries each).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogProbs<'a> {
    /// Current policy logprobs `log_pi_theta`.
    pub current: &'a [f32],
    /// Recomputed old-policy logprobs. `None` means the old policy is the current one with the gradient
    /// stopped (ratio 1), unless `use_rollout_log_probs` is on.
    pub old: Option<&'a [f32]>,
    /// Reference-policy logprobs, for the KL loss.
    pub reference: Option<&'a [f32]>,
    /// Per-token entropy, for the entropy term.
    pub entropy: Option<&'a [f32]>,
}

impl<'a> LogProbs<'a> {
    /// Only current logprobs.
    pub fn new(current: &'a [f32]) -> Self {
        Self {
            current,
            ..Self::default()
        }
    }
}

/// Returns an error naming the first non-finite value of `values` (in the batch layout), if any.
pub(crate) fn check_finite(
    batch: &Batch,
    input: &'static str,
    values: &[f32],
) -> Result<(), LossError> {
    if values.iter().fold(0.0f32, |acc, &v| acc + v * 0.0) == 0.0 {
        return Ok(());
    }
    match values.iter().position(|v| !v.is_finite()) {
        Some(t) => Err(non_finite(batch, input, t, values[t])),
        None => Ok(()),
    }
}

fn non_finite(batch: &Batch, input: &'static str, token: usize, value: f32) -> LossError {
    let sample = batch.offsets().partition_point(|&o| o <= token) - 1;
    LossError::NonFinite {
        input,
        sample,
        position: token - batch.offsets()[sample],
        value,
    }
}

impl Batch {
    pub(crate) fn check_len(&self, input: &'static str, values: &[f32]) -> Result<(), LossError> {
        if values.len() == self.num_tokens() {
            Ok(())
        } else {
            Err(LossError::LengthMismatch {
                input,
                len: values.len(),
                expected: self.num_tokens(),
            })
        }
    }

    /// The old-policy logprobs as slime picks them: the rollout logprobs with `use_rollout_log_probs`, else
    /// the recomputed ones, else the current ones (ratio 1).
    pub(crate) fn old_log_probs<'a>(
        &'a self,
        lp: &LogProbs<'a>,
        use_rollout: bool,
    ) -> Result<&'a [f32], LossError> {
        self.check_len("current", lp.current)?;
        let old = if use_rollout {
            self.rollout_log_probs().ok_or(LossError::MissingInput {
                input: "rollout_log_probs",
                needed_by: "use_rollout_log_probs",
            })?
        } else {
            lp.old.unwrap_or(lp.current)
        };
        self.check_len("old", old)?;
        Ok(old)
    }

    /// Locates the token of sample `i` that made `current - old` non-finite.
    pub(crate) fn locate_non_finite(&self, i: usize, current: &[f32], old: &[f32]) -> LossError {
        let r = self.range(i);
        let (current, old) = (&current[r.clone()], &old[r]);
        let t = current
            .iter()
            .zip(old)
            .position(|(&c, &o)| !(c - o).is_finite())
            .unwrap_or(0);
        let (input, value) = if !current[t].is_finite() {
            ("current", current[t])
        } else if !old[t].is_finite() {
            ("old", old[t])
        } else {
            ("current - old", current[t] - old[t])
        };
        LossError::NonFinite {
            input,
            sample: i,
            position: t,
            value,
        }
    }
}
