//! What a JSONL line may hold (Python's `to_dict()`, with `None` where a `Sample` always has a list), and the checks of its response columns.
//!
//! A `Sample` is deserialised through [`SampleRecord`]: the record takes whatever slime or an older writer put
//! in the line, [`SampleRecord::take_columns`] refuses the states a sample cannot be in (a missing logprob list,
//! a non-binary mask, impossible or placeholder logprobs), and `sample.rs` builds the sample and checks its
//! invariants.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::SampleError;
use crate::fields::{GeneratedSpan, PrefixCacheInfo, Prompt, Reward, SampleStatus, SpecInfo};

/// What Python may write: the same keys, with `None` where we always have a list.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct SampleRecord {
    pub(crate) group_index: Option<usize>,
    pub(crate) index: Option<usize>,
    pub(crate) rollout_id: Option<u64>,
    /// v0.3.0 name of `rollout_id`.
    pub(crate) group_id: Option<u64>,
    pub(crate) prompt: Prompt,
    pub(crate) tokens: Vec<u32>,
    pub(crate) multimodal_inputs: Option<Value>,
    pub(crate) multimodal_train_inputs: Option<Value>,
    pub(crate) multimodal_train_input_id: Option<String>,
    pub(crate) apply_chat_template_kwargs: Option<Map<String, Value>>,
    pub(crate) response: String,
    pub(crate) response_length: usize,
    pub(crate) label: Option<String>,
    pub(crate) reward: Option<Reward>,
    pub(crate) loss_mask: Option<Vec<u8>>,
    pub(crate) weight_versions: Vec<String>,
    pub(crate) rollout_log_probs: Option<Vec<f32>>,
    pub(crate) rollout_top_p_token_ids: Option<Vec<u32>>,
    pub(crate) rollout_top_p_token_offsets: Option<Vec<u32>>,
    pub(crate) rollout_routed_experts: Option<crate::carried::RoutedExperts>,
    pub(crate) remove_sample: bool,
    pub(crate) teacher_log_probs: Option<Vec<f32>>,
    pub(crate) status: SampleStatus,
    pub(crate) metadata: Option<Map<String, Value>>,
    pub(crate) generate_function_path: Option<String>,
    pub(crate) custom_rm_path: Option<String>,
    pub(crate) train_metadata: Option<Map<String, Value>>,
    pub(crate) session_id: Option<String>,
    pub(crate) non_generation_time: f64,
    pub(crate) spec_info: SpecInfo,
    pub(crate) prefix_cache_info: PrefixCacheInfo,
    pub(crate) generated_spans: Option<Vec<GeneratedSpan>>,
    pub(crate) policy_masked_tokens: usize,
    pub(crate) rollout_sampling_log_probs: Option<Vec<f32>>,
    pub(crate) weight_version_spans: Vec<crate::channels::VersionSpan>,
    #[serde(flatten)]
    pub(crate) extra: Map<String, Value>,
}

/// The generated spans of a record that has none (slime writes none), and how many of their tokens were
/// masked: a token with mask 1, or with mask 0 and a non-zero log prob (masked by some policy, such as slime's
/// off-policy masking), was generated; a token with mask 0 and log prob 0.0 is environment output. Each
/// maximal run of generated tokens is taken as one span.
pub(crate) fn infer_spans(loss_mask: &[u8], log_probs: &[f32]) -> (Vec<GeneratedSpan>, usize) {
    let mut spans = Vec::new();
    let mut masked = 0;
    let mut start = None;
    let generated = loss_mask
        .iter()
        .zip(log_probs)
        .map(|(&m, &lp)| m == 1 || lp != 0.0);
    for (i, g) in generated.chain([false]).enumerate() {
        match (g, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                spans.push(GeneratedSpan {
                    start: s,
                    len: i - s,
                });
                start = None;
            }
            _ => {}
        }
        if g && loss_mask[i] == 0 {
            masked += 1;
        }
    }
    (spans, masked)
}

/// The response columns of a record, checked value by value: what the sample's private columns are built from.
pub(crate) struct Columns {
    pub(crate) loss_mask: Vec<u8>,
    pub(crate) rollout_log_probs: Vec<f32>,
    pub(crate) generated_spans: Vec<GeneratedSpan>,
    pub(crate) policy_masked_tokens: usize,
}

impl SampleRecord {
    /// Takes the loss mask, rollout logprobs and generated spans out of the record, refusing a missing logprob
    /// list, a mask entry other than 0 and 1, a non-finite or positive logprob and placeholder logprobs. The
    /// lengths are left to the sample's own invariants.
    pub(crate) fn take_columns(&mut self) -> Result<Columns, SampleError> {
        let response_length = self.response_length;
        // slime materialises a missing mask as all ones; a missing logprob list is exactly the
        // issue #1976 state, so it is refused unless there is nothing to have logprobs for.
        let loss_mask = self
            .loss_mask
            .take()
            .unwrap_or_else(|| vec![1; response_length]);
        let rollout_log_probs = match self.rollout_log_probs.take() {
            Some(v) => v,
            None if response_length == 0 => Vec::new(),
            None => return Err(SampleError::MissingRolloutLogProbs { response_length }),
        };
        if let Some((index, &value)) = loss_mask.iter().enumerate().find(|(_, m)| **m > 1) {
            return Err(SampleError::BadLossMask { index, value });
        }
        for (index, &value) in rollout_log_probs.iter().enumerate() {
            if !value.is_finite() {
                return Err(SampleError::NonFiniteLogprob { index, value });
            }
            if value > 0.0 {
                return Err(SampleError::PositiveLogprob { index, value });
            }
        }
        check_not_placeholder(&loss_mask, &rollout_log_probs)?;
        let (generated_spans, policy_masked_tokens) = match self.generated_spans.take() {
            Some(spans) => (spans, self.policy_masked_tokens),
            None => infer_spans(&loss_mask, &rollout_log_probs),
        };
        Ok(Columns {
            loss_mask,
            rollout_log_probs,
            generated_spans,
            policy_masked_tokens,
        })
    }
}

/// A zero-filled list (`[0.0] * n`, what a fallback writes when the engine's logprobs were lost) looks valid
/// value by value; a real rollout of two or more trained tokens all with probability exactly 1 in float32 does
/// not happen outside near-greedy decoding.
fn check_not_placeholder(loss_mask: &[u8], rollout_log_probs: &[f32]) -> Result<(), SampleError> {
    let trained: Vec<f32> = rollout_log_probs
        .iter()
        .zip(loss_mask)
        .filter(|(_, m)| **m == 1)
        .map(|(lp, _)| *lp)
        .collect();
    if trained.len() >= 2 && trained.iter().all(|&lp| lp == 0.0) {
        return Err(SampleError::PlaceholderLogprobs {
            trained: trained.len(),
        });
    }
    Ok(())
}
