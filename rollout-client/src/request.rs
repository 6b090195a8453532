//! Typed `/generate` request bodies (spec section 1), serialised with only the keys that are set.

use serde::Serialize;

use crate::channels::{Asked, RoutesAsked};

/// `text`: one prompt or a batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum TextInput {
    One(String),
    Batch(Vec<String>),
}

/// `input_ids`: one prompt or a batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum IdsInput {
    One(Vec<u32>),
    Batch(Vec<Vec<u32>>),
}

/// `sampling_params`. Unset fields are omitted so the server's defaults apply; note an unknown key
/// here makes SGLang answer 500, so there is deliberately no free-form map.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SamplingParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_new_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spaces_between_special_tokens: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_stop_trim: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_interval: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_seed: Option<u64>,
    /// `custom_params`: what slime's patched SGLang reads beyond the standard keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_params: Option<CustomParams>,
}

/// `sampling_params.custom_params`, as slime sends it (`slime/rollout/sglang_rollout.py`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CustomParams {
    /// slime's top-p replay (`docker/patch/v0.5.15.post1/sglang-top_p.patch`): a request with logprobs and a
    /// sampling filter gets each output token's kept ids (`meta_info.top_p_token_ids` and
    /// `top_p_token_offsets`) and logprobs renormalised over them.
    pub return_top_p_token_ids: bool,
}

impl SamplingParams {
    /// Whether the sampler filters this request (`_top_p_filter_rows` of slime's patch): greedy (SGLang samples it
    /// with `top_k` 1), a `top_k` other than -1, a `top_p` below 1 or a positive `min_p`.
    pub fn filters(&self) -> bool {
        self.temperature.is_some_and(|t| t < 1e-6)
            || self.top_k.is_some_and(|k| k != -1 && k != 1 << 30)
            || self.top_p.is_some_and(|p| p != 1.0)
            || self.min_p.is_some_and(|m| m > 0.0)
    }
}

/// A `/generate` request.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GenerateRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<TextInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_ids: Option<IdsInput>,
    pub sampling_params: SamplingParams,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rid: Option<String>,
    pub return_logprob: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprob_start_len: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_logprobs_num: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub return_text_in_logprobs: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// \[0.5.15\] The server (with `--enable-return-routed-experts`) sends `meta_info.routed_experts`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub return_routed_experts: bool,
    /// The first position with a routes row (SGLang's default 0: the whole sequence).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routed_experts_start_len: Option<u32>,
    /// \[0.5.23\] The server sends each output token's sampling support and renormalised logprob (it
    /// needs greedy sampling or a `top_k` up to its `--sampling-mask-max-tokens`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub return_sampling_mask: bool,
}

impl GenerateRequest {
    /// A request for one prompt given as token ids, with logprobs (what slime sends).
    pub fn from_ids(input_ids: Vec<u32>, sampling_params: SamplingParams) -> GenerateRequest {
        GenerateRequest {
            input_ids: Some(IdsInput::One(input_ids)),
            sampling_params,
            return_logprob: true,
            ..GenerateRequest::default()
        }
    }

    /// A request for one text prompt, with logprobs.
    pub fn from_text(text: impl Into<String>, sampling_params: SamplingParams) -> GenerateRequest {
        GenerateRequest {
            text: Some(TextInput::One(text.into())),
            sampling_params,
            return_logprob: true,
            ..GenerateRequest::default()
        }
    }

    /// What the response must carry, with the served model's routes row length when known.
    pub fn asked(&self, routes_row_len: Option<usize>) -> Asked {
        Asked {
            logprobs: self.return_logprob,
            routed_experts: self.return_routed_experts.then(|| RoutesAsked {
                start: self.routed_experts_start_len.unwrap_or(0) as usize,
                row_len: routes_row_len,
            }),
            sampling_mask: self.return_sampling_mask,
            top_p: self.return_logprob
                && self.sampling_params.filters()
                && self
                    .sampling_params
                    .custom_params
                    .is_some_and(|c| c.return_top_p_token_ids),
        }
    }

    /// Number of prompts. As in SGLang, `text` decides when both inputs are given.
    pub fn batch_size(&self) -> Option<usize> {
        match (&self.text, &self.input_ids) {
            (Some(TextInput::Batch(v)), _) => Some(v.len()),
            (Some(TextInput::One(_)), _) => None,
            (None, Some(IdsInput::Batch(v))) => Some(v.len()),
            _ => None,
        }
    }

    /// Whether the non-stream answer is an array: a batch, or `n > 1`.
    pub fn expects_array(&self) -> bool {
        self.batch_size().is_some() || self.sampling_params.n.unwrap_or(1) > 1
    }

    /// How many result items the server returns: `batch_size * n`, prompt-major.
    pub fn expected_items(&self) -> usize {
        self.batch_size().unwrap_or(1) * self.sampling_params.n.unwrap_or(1).max(1) as usize
    }
}

/// `/abort_request` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AbortRequest {
    pub rid: String,
    pub abort_all: bool,
}
