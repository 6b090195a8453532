//! `Sample`: one trajectory for the trainer, with slime's field names and enforced length invariants.
//!
//! The token sequence, `response_length`, `loss_mask` and `rollout_log_probs` are private and only
//! grow through [`Sample::append_response_tokens`], which checks everything before changing
//! anything. So `tokens.len() == prompt_len + response_length` and
//! `rollout_log_probs.len() == loss_mask.len() == response_length` hold after every call, and
//! there is no `None` logprob list to forget (issue #1976).
//!
//! The channels beside the logprobs (routed experts, sampling supports, weight-version spans) grow only
//! through [`Sample::apply_turn`] too, and are held to the tokens by the same invariants (`carried.rs`).
//!
//! A sample also records where its generated tokens are ([`GeneratedSpan`]s, one per generation turn) and
//! how many of them a named policy masked, so every response token is accounted for: a generated token is
//! trained (mask 1, with its logprob) unless a policy such as `--mask-offpolicy-in-partial-rollout` masked it,
//! and an environment token has mask 0 and logprob 0.0. A generated token filed as an environment token, or
//! left untrained without a policy, is an error here, and the rollout command holds the spans against the
//! number of tokens the server generated.
//!
//! What slime v0.3.0's multi-agent example did by hand, growing `tokens` and `response_length`
//! without the logprobs, does not compile:
//!
//! ```compile_fail
//! let mut s = rollout_client::Sample::new("p", vec![1, 2]);
//! s.tokens.extend([7, 8]); // private: the only way in is `append_response_tokens`
//! s.response_length += 2;
//! ```

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::carried::RoutedExperts;
use crate::carried::{Carried, CarriedView, MasksView, TurnPlace};
pub use crate::channels::VersionSpan;
use crate::error::SampleError;
pub use crate::fields::{GeneratedSpan, PrefixCacheInfo, Prompt, Reward, SampleStatus, SpecInfo};
use crate::record::SampleRecord;
use crate::turn::Turn;

/// Response tokens to append: generated ones carry logprobs, environment ones cannot.
#[derive(Debug, Clone, Copy)]
pub enum Segment<'a> {
    /// Tokens the policy sampled: trained on (mask 1), with one logprob each.
    Generated {
        tokens: &'a [u32],
        log_probs: &'a [f32],
    },
    /// Tool or environment output: logprob 0.0 and mask 0, never trained on.
    Environment { tokens: &'a [u32] },
}

/// One trajectory. Field names and JSON keys follow slime's `Sample` (HEAD, `to_dict()`), plus
/// `generated_spans` and `policy_masked_tokens`, which slime keeps as plain attributes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SampleRecord")]
pub struct Sample {
    pub group_index: Option<usize>,
    pub index: Option<usize>,
    pub rollout_id: Option<u64>,
    pub prompt: Prompt,
    tokens: Vec<u32>,
    pub multimodal_inputs: Option<Value>,
    pub multimodal_train_inputs: Option<Value>,
    pub multimodal_train_input_id: Option<String>,
    pub apply_chat_template_kwargs: Map<String, Value>,
    pub response: String,
    response_length: usize,
    pub label: Option<String>,
    pub reward: Option<Reward>,
    loss_mask: Vec<u8>,
    pub weight_versions: Vec<String>,
    rollout_log_probs: Vec<f32>,
    /// The sampler's support per response token, CSR (with `rollout_top_p_token_offsets`).
    rollout_top_p_token_ids: Option<Vec<u32>>,
    rollout_top_p_token_offsets: Option<Vec<u32>>,
    /// `[tokens - 1, num_layers * moe_router_topk]` (rows up to the last generated token).
    rollout_routed_experts: Option<RoutedExperts>,
    pub remove_sample: bool,
    pub teacher_log_probs: Option<Vec<f32>>,
    pub status: SampleStatus,
    pub metadata: Map<String, Value>,
    pub generate_function_path: Option<String>,
    pub custom_rm_path: Option<String>,
    pub train_metadata: Option<Map<String, Value>>,
    pub session_id: Option<String>,
    pub non_generation_time: f64,
    pub spec_info: SpecInfo,
    pub prefix_cache_info: PrefixCacheInfo,
    /// Where the generated tokens are, one span per generation turn, in order.
    generated_spans: Vec<GeneratedSpan>,
    /// Generated tokens whose loss mask a named policy set to 0.
    policy_masked_tokens: usize,
    /// Each response token's logprob renormalised over its sampling support (0.0 for environment tokens),
    /// with the sampling masks.
    rollout_sampling_log_probs: Option<Vec<f32>>,
    /// Which weight version made which response tokens.
    weight_version_spans: Vec<VersionSpan>,
    /// Keys that are not slime fields (e.g. the multi-agent example's `reason_content`); kept
    /// and written back, as slime's `from_dict` does with `setattr`.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Default for Sample {
    fn default() -> Self {
        Sample::new(Prompt::default(), Vec::new())
    }
}

impl Sample {
    /// A PENDING sample whose `tokens` are the prompt ids.
    pub fn new(prompt: impl Into<Prompt>, prompt_tokens: Vec<u32>) -> Sample {
        Sample {
            group_index: None,
            index: None,
            rollout_id: None,
            prompt: prompt.into(),
            tokens: prompt_tokens,
            multimodal_inputs: None,
            multimodal_train_inputs: None,
            multimodal_train_input_id: None,
            apply_chat_template_kwargs: Map::new(),
            response: String::new(),
            response_length: 0,
            label: None,
            reward: None,
            loss_mask: Vec::new(),
            weight_versions: Vec::new(),
            rollout_log_probs: Vec::new(),
            rollout_top_p_token_ids: None,
            rollout_top_p_token_offsets: None,
            rollout_routed_experts: None,
            remove_sample: false,
            teacher_log_probs: None,
            status: SampleStatus::Pending,
            metadata: Map::new(),
            generate_function_path: None,
            custom_rm_path: None,
            train_metadata: None,
            session_id: None,
            non_generation_time: 0.0,
            spec_info: SpecInfo::default(),
            prefix_cache_info: PrefixCacheInfo::default(),
            generated_spans: Vec::new(),
            policy_masked_tokens: 0,
            rollout_sampling_log_probs: None,
            weight_version_spans: Vec::new(),
            extra: Map::new(),
        }
    }

    /// A new PENDING sample for another prompt that keeps this one's identity and bookkeeping
    /// (`group_index`, `index`, `rollout_id`, `label`, `metadata`, `session_id`, paths), as slime's
    /// multi-agent example does with `deepcopy(args.sample)` before setting `prompt` and `tokens`.
    /// Nothing of this sample's response, reward or status is carried over.
    pub fn derive(&self, prompt: impl Into<Prompt>, prompt_tokens: Vec<u32>) -> Sample {
        Sample {
            group_index: self.group_index,
            index: self.index,
            rollout_id: self.rollout_id,
            label: self.label.clone(),
            metadata: self.metadata.clone(),
            session_id: self.session_id.clone(),
            generate_function_path: self.generate_function_path.clone(),
            custom_rm_path: self.custom_rm_path.clone(),
            train_metadata: self.train_metadata.clone(),
            ..Sample::new(prompt, prompt_tokens)
        }
    }

    /// Prompt ids followed by response ids.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn prompt_len(&self) -> usize {
        self.tokens.len() - self.response_length
    }

    pub fn prompt_tokens(&self) -> &[u32] {
        &self.tokens[..self.prompt_len()]
    }

    pub fn response_tokens(&self) -> &[u32] {
        &self.tokens[self.prompt_len()..]
    }

    pub fn response_length(&self) -> usize {
        self.response_length
    }

    /// One entry per response token: 1 = train on it.
    pub fn loss_mask(&self) -> &[u8] {
        &self.loss_mask
    }

    /// One entry per response token: the rollout engine's logprob, or 0.0 for environment tokens.
    pub fn rollout_log_probs(&self) -> &[f32] {
        &self.rollout_log_probs
    }

    /// `sum(loss_mask)`: the number of tokens the trainer learns from.
    pub fn effective_response_length(&self) -> usize {
        self.loss_mask.iter().map(|&m| m as usize).sum()
    }

    /// Where the generated tokens are: one span per generation turn, in response order.
    pub fn generated_spans(&self) -> &[GeneratedSpan] {
        &self.generated_spans
    }

    /// How many response tokens the rollout engine generated (the rest came from the environment).
    pub fn generated_tokens(&self) -> usize {
        self.generated_spans.iter().map(|s| s.len).sum()
    }

    /// Generated tokens that a named policy (`--mask-offpolicy-in-partial-rollout`) excluded from training.
    /// Every other generated token is trained: `generated_tokens() == effective_response_length() +
    /// policy_masked_tokens()`.
    pub fn policy_masked_tokens(&self) -> usize {
        self.policy_masked_tokens
    }

    /// Sets the prompt ids of a sample that has no response yet (slime sets `tokens` to the
    /// prompt ids on the first generate call).
    pub fn set_prompt_tokens(&mut self, prompt_tokens: Vec<u32>) -> Result<(), SampleError> {
        if self.response_length != 0 {
            return Err(SampleError::PromptAfterResponse {
                response_length: self.response_length,
            });
        }
        self.tokens = prompt_tokens;
        Ok(())
    }

    /// The one place a sample grows. Checks everything first, so on error nothing changed. Generated tokens
    /// of a sample that carries routes or sampling masks come through [`Sample::apply_turn`], which brings
    /// theirs; here they would have none.
    pub fn append_response_tokens(&mut self, segment: Segment<'_>) -> Result<(), SampleError> {
        match segment {
            Segment::Generated { tokens, .. } if !tokens.is_empty() => {
                if self.rollout_routed_experts.is_some() {
                    return Err(SampleError::ChannelMissingInTurn {
                        channel: "routed_experts",
                    });
                }
                if self.rollout_top_p_token_ids.is_some() {
                    return Err(SampleError::ChannelMissingInTurn {
                        channel: "output_token_sampling_mask",
                    });
                }
            }
            Segment::Generated { .. } => {}
            Segment::Environment { tokens } => {
                // Environment tokens get empty supports; `push_segment` cannot refuse them.
                if let (Some(offsets), Some(log_probs)) = (
                    &mut self.rollout_top_p_token_offsets,
                    &mut self.rollout_sampling_log_probs,
                ) {
                    let last = offsets.last().copied().unwrap_or(0);
                    offsets.extend(std::iter::repeat_n(last, tokens.len()));
                    log_probs.extend(std::iter::repeat_n(0.0, tokens.len()));
                }
            }
        }
        // `push_segment` refuses a generated segment before changing anything.
        self.push_segment(segment)?;
        self.check_invariants()
    }

    /// Appends a segment's tokens, mask and logprobs, checking the segment's own values; the caller checks the
    /// invariants.
    fn push_segment(&mut self, segment: Segment<'_>) -> Result<(), SampleError> {
        match segment {
            Segment::Generated { tokens, log_probs } => {
                if tokens.len() != log_probs.len() {
                    return Err(SampleError::LengthMismatch {
                        tokens: tokens.len(),
                        log_probs: log_probs.len(),
                    });
                }
                for (i, &value) in log_probs.iter().enumerate() {
                    let index = self.response_length + i;
                    if !value.is_finite() {
                        return Err(SampleError::NonFiniteLogprob { index, value });
                    }
                    if value > 0.0 {
                        return Err(SampleError::PositiveLogprob { index, value });
                    }
                }
                if !tokens.is_empty() {
                    self.generated_spans.push(GeneratedSpan {
                        start: self.response_length,
                        len: tokens.len(),
                    });
                }
                self.tokens.extend_from_slice(tokens);
                self.rollout_log_probs.extend_from_slice(log_probs);
                self.loss_mask
                    .resize(self.loss_mask.len() + tokens.len(), 1);
                self.response_length += tokens.len();
            }
            Segment::Environment { tokens } => {
                self.tokens.extend_from_slice(tokens);
                let n = self.rollout_log_probs.len() + tokens.len();
                self.rollout_log_probs.resize(n, 0.0);
                self.loss_mask.resize(n, 0);
                self.response_length += tokens.len();
            }
        }
        Ok(())
    }

    /// Appends tool or environment output (mask 0, logprob 0.0, an empty sampling support) and its text.
    pub fn append_environment(&mut self, tokens: &[u32], text: &str) -> Result<(), SampleError> {
        self.append_response_tokens(Segment::Environment { tokens })?;
        self.response.push_str(text);
        Ok(())
    }

    /// The channels beside the logprobs, borrowed.
    fn carried_view(&self) -> CarriedView<'_> {
        CarriedView {
            routes: self.rollout_routed_experts.as_ref(),
            masks: match (
                &self.rollout_top_p_token_ids,
                &self.rollout_top_p_token_offsets,
                &self.rollout_sampling_log_probs,
            ) {
                (Some(ids), Some(offsets), Some(logprobs)) => Some(MasksView {
                    ids,
                    offsets,
                    logprobs,
                }),
                _ => None,
            },
            version_spans: &self.weight_version_spans,
        }
    }

    /// The channels beside the logprobs, as one value (a copy: a turn builds the next state from it, so a refused
    /// turn leaves the sample unchanged).
    fn carried(&self) -> Carried {
        self.carried_view().to_carried()
    }

    fn set_carried(&mut self, carried: Carried) {
        self.rollout_routed_experts = carried.routes;
        (
            self.rollout_top_p_token_ids,
            self.rollout_top_p_token_offsets,
            self.rollout_sampling_log_probs,
        ) = match carried.masks {
            Some(m) => (Some(m.ids), Some(m.offsets), Some(m.logprobs)),
            None => (None, None, None),
        };
        self.weight_version_spans = carried.version_spans;
    }

    /// The routed experts: a row per sequence position up to the last generated token (slime's
    /// `rollout_routed_experts`), when the rollout asked for them.
    pub fn rollout_routed_experts(&self) -> Option<&RoutedExperts> {
        self.rollout_routed_experts.as_ref()
    }

    /// The sampler's support of each response token in CSR form (`ids`, `offsets`), empty for environment
    /// tokens, when the rollout asked for sampling masks.
    pub fn rollout_top_p_tokens(&self) -> Option<(&[u32], &[u32])> {
        self.rollout_top_p_token_ids
            .as_deref()
            .zip(self.rollout_top_p_token_offsets.as_deref())
    }

    /// Each response token's logprob renormalised over its sampling support (0.0 for environment tokens).
    pub fn rollout_sampling_log_probs(&self) -> Option<&[f32]> {
        self.rollout_sampling_log_probs.as_deref()
    }

    /// Which weight version made which response tokens, in response positions.
    pub fn weight_version_spans(&self) -> &[VersionSpan] {
        &self.weight_version_spans
    }

    /// How many response tokens the weight-version spans label.
    pub fn weight_versioned_tokens(&self) -> usize {
        self.weight_version_spans
            .iter()
            .map(|span| span.end - span.start)
            .sum()
    }

    /// Appends a validated generation: its tokens and logprobs, its channels (routes, sampling masks,
    /// weight-version spans), its text, the status implied by its finish_reason, the weight version and the
    /// prefix-cache counters. Nothing changes when it is refused.
    pub fn apply_turn(&mut self, turn: &Turn) -> Result<(), SampleError> {
        let carried = self.carried().after_turn(
            &turn.channels,
            &TurnPlace {
                offset: self.response_length,
                output_ids: turn.output_ids.len(),
                tokens_after: self.tokens.len() + turn.output_ids.len(),
                generated_before: self.generated_tokens(),
                weight_version: turn.meta_info.weight_version.clone(),
            },
        )?;
        // Everything that can refuse the turn has been checked: its channels above, its tokens and logprobs by
        // `push_segment` before it changes anything.
        self.append_turn(turn, carried)
    }

    fn append_turn(&mut self, turn: &Turn, carried: Carried) -> Result<(), SampleError> {
        match &turn.logprobs {
            Some(log_probs) => self.push_segment(Segment::Generated {
                tokens: &turn.output_ids,
                log_probs,
            })?,
            None if turn.output_ids.is_empty() => {}
            None => {
                return Err(SampleError::TrainableWithoutLogprobs {
                    tokens: turn.output_ids.len(),
                });
            }
        }
        self.response.push_str(&turn.text);
        if let Some(status) = turn.status() {
            self.status = status;
        }
        let meta = &turn.meta_info;
        if let Some(v) = &meta.weight_version {
            self.weight_versions.push(v.clone());
        }
        self.prefix_cache_info.cached_tokens += meta.cached_tokens.unwrap_or(0) as u64;
        self.prefix_cache_info.total_prompt_tokens += meta.prompt_tokens.unwrap_or(0) as u64;
        if let Some(verify) = meta.spec_verify_ct {
            // Each verify step yields one token of its own; the rest were accepted drafts.
            let completion = turn.output_ids.len() as u64;
            let verify = verify as u64;
            self.spec_info.spec_verify_ct += verify;
            self.spec_info.completion_token_num += completion;
            self.spec_info.spec_accept_token_num += completion.saturating_sub(verify);
        }
        self.set_carried(carried);
        self.check_invariants()
    }

    /// Sets the loss mask of every response token so far to 0, as slime's
    /// `--mask-offpolicy-in-partial-rollout` does before resuming: tokens generated by an older
    /// policy are kept as context but not trained on.
    pub fn mask_offpolicy_prefix(&mut self) {
        self.mask_generated(0..self.response_length);
    }

    /// `--mask-offpolicy-in-partial-rollout` after a resumed turn, by each token's weight version: the generated
    /// tokens that a version other than the newest one made stop being trained on, and those the newest version
    /// made stay trained, however many aborts lie between them (slime PR #2092: requeued groups mixed tokens of
    /// versions 2, 4 and 6 in one sample, unmasked). slime, which knows no token's version, masks everything
    /// before the resume; so does this when the spans do not cover every generated token (a server that sends
    /// no `weight_version`): the tokens before response position `resumed_at`.
    ///
    /// A version is the server's `weight_version` string, so this relies on the trainer naming each weight
    /// update, as slime's weight updaters do.
    pub fn mask_offpolicy(&mut self, resumed_at: usize) {
        let labelled = self.weight_versioned_tokens();
        let newest = self.weight_version_spans.last().map(|s| s.version.clone());
        match newest {
            Some(newest) if labelled == self.generated_tokens() => {
                let stale: Vec<_> = self
                    .weight_version_spans
                    .iter()
                    .filter(|s| s.version != newest)
                    .map(|s| s.start..s.end)
                    .collect();
                for range in stale {
                    self.mask_generated(range);
                }
            }
            _ => self.mask_generated(0..resumed_at.min(self.response_length)),
        }
    }

    /// Masks the trained tokens among response positions `range`, counting them as masked by a policy.
    fn mask_generated(&mut self, range: std::ops::Range<usize>) {
        // Only generated tokens carry mask 1, so every flip masks a generated token.
        for m in &mut self.loss_mask[range] {
            self.policy_masked_tokens += usize::from(*m);
            *m = 0;
        }
    }

    /// Cuts the response to its first `keep` tokens, every per-token channel with it, and marks the sample
    /// TRUNCATED, as miles' `_truncate_sample_output` does to fit a sample into `max_seq_len`. Before miles
    /// PR #893 it cut the tokens, logprobs and loss mask but not `rollout_routed_experts` (miles #861:
    /// `len(tokens) - 1 != routes.shape[0]`); here the routes keep their rows up to the last kept token, the
    /// sampling supports and weight-version spans end where the response ends, and the generated spans are cut
    /// with them. `decode` gives the text of the kept response ids (the trainer's tokenizer: the text of a cut
    /// is not a prefix the server sent). A response no longer than `keep` is left as it is.
    pub fn truncate_response(&mut self, keep: usize, decode: impl FnOnce(&[u32]) -> String) {
        if keep >= self.response_length {
            return;
        }
        self.tokens.truncate(self.prompt_len() + keep);
        self.response_length = keep;
        self.loss_mask.truncate(keep);
        self.rollout_log_probs.truncate(keep);
        if let Some(teacher) = &mut self.teacher_log_probs {
            teacher.truncate(keep);
        }
        self.generated_spans.retain_mut(|span| {
            span.len = span.len.min(keep.saturating_sub(span.start));
            span.len > 0
        });
        self.policy_masked_tokens = self.untrained_generated();
        if let Some(routes) = &mut self.rollout_routed_experts {
            routes.keep_rows(self.tokens.len().saturating_sub(1));
        }
        if let (Some(ids), Some(offsets), Some(log_probs)) = (
            &mut self.rollout_top_p_token_ids,
            &mut self.rollout_top_p_token_offsets,
            &mut self.rollout_sampling_log_probs,
        ) {
            ids.truncate(offsets[keep] as usize);
            offsets.truncate(keep + 1);
            log_probs.truncate(keep);
        }
        self.weight_version_spans.retain_mut(|span| {
            span.end = span.end.min(keep);
            span.start < span.end
        });
        self.response = decode(self.response_tokens());
        self.status = SampleStatus::Truncated;
    }

    /// The invariants every public method maintains; returned as an error rather than assumed.
    ///
    /// Lengths: `rollout_log_probs.len() == loss_mask.len() == response_length <= tokens.len()`. Accounting:
    /// the generated spans are in order inside the response; a token outside them (environment output) has
    /// mask 0 and log prob 0.0; inside them, exactly `policy_masked_tokens` have mask 0.
    pub fn check_invariants(&self) -> Result<(), SampleError> {
        if self.tokens.len() < self.response_length
            || self.loss_mask.len() != self.response_length
            || self.rollout_log_probs.len() != self.response_length
        {
            return Err(SampleError::Invariant {
                tokens: self.tokens.len(),
                response_length: self.response_length,
                loss_mask: self.loss_mask.len(),
                log_probs: self.rollout_log_probs.len(),
            });
        }
        let mut next = 0;
        for span in &self.generated_spans {
            if span.start < next || span.end() > self.response_length || span.len == 0 {
                return Err(SampleError::BadGeneratedSpan {
                    start: span.start,
                    end: span.end(),
                    response_length: self.response_length,
                });
            }
            self.check_environment(next..span.start)?;
            next = span.end();
        }
        self.check_environment(next..self.response_length)?;
        let untrained = self.untrained_generated();
        if untrained != self.policy_masked_tokens {
            return Err(SampleError::GeneratedTokenUntrained {
                untrained,
                policy_masked: self.policy_masked_tokens,
            });
        }
        self.carried_view().check(
            self.prompt_len(),
            self.response_tokens(),
            &self.generated_spans,
        )
    }

    /// Generated tokens with loss mask 0 (the spans must lie inside the response).
    fn untrained_generated(&self) -> usize {
        self.generated_spans
            .iter()
            .map(|span| {
                self.loss_mask[span.start..span.end()]
                    .iter()
                    .filter(|&&m| m == 0)
                    .count()
            })
            .sum()
    }

    /// Environment tokens (response offsets in `range`) have mask 0 and log prob 0.0.
    fn check_environment(&self, range: std::ops::Range<usize>) -> Result<(), SampleError> {
        for index in range {
            let (mask, log_prob) = (self.loss_mask[index], self.rollout_log_probs[index]);
            if mask != 0 || log_prob != 0.0 {
                return Err(SampleError::EnvironmentTokenTrained {
                    index,
                    mask,
                    log_prob,
                });
            }
        }
        Ok(())
    }

    /// One JSON object with slime's `to_dict()` keys.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    pub fn from_json(line: &str) -> Result<Sample, serde_json::Error> {
        serde_json::from_str(line)
    }
}

/// Writes samples as JSON lines (one `to_dict()` object per line).
pub fn write_jsonl<'a, W: Write>(
    mut w: W,
    samples: impl IntoIterator<Item = &'a Sample>,
) -> std::io::Result<()> {
    for s in samples {
        serde_json::to_writer(&mut w, s)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

/// Reads JSON lines written by [`write_jsonl`] or by Python's `json.dumps(sample.to_dict())`,
/// checking every sample's invariants. Blank lines are skipped.
pub fn read_jsonl<R: BufRead>(r: R) -> Result<Vec<Sample>, JsonlError> {
    let mut out = Vec::new();
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(|source| JsonlError::Io {
            line: i + 1,
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(&line).map_err(|source| JsonlError::Json {
                line: i + 1,
                source,
            })?,
        );
    }
    Ok(out)
}

/// A JSONL file that could not be read into samples.
#[derive(Debug, thiserror::Error)]
pub enum JsonlError {
    #[error("could not read line {line}")]
    Io {
        line: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("line {line} is not a valid sample")]
    Json {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
}

impl TryFrom<SampleRecord> for Sample {
    type Error = SampleError;

    fn try_from(mut r: SampleRecord) -> Result<Self, Self::Error> {
        let columns = r.take_columns()?;
        let s = Sample {
            group_index: r.group_index,
            index: r.index,
            rollout_id: r.rollout_id.or(r.group_id),
            prompt: r.prompt,
            tokens: r.tokens,
            multimodal_inputs: r.multimodal_inputs,
            multimodal_train_inputs: r.multimodal_train_inputs,
            multimodal_train_input_id: r.multimodal_train_input_id,
            apply_chat_template_kwargs: r.apply_chat_template_kwargs.unwrap_or_default(),
            response: r.response,
            response_length: r.response_length,
            label: r.label,
            reward: r.reward,
            loss_mask: columns.loss_mask,
            weight_versions: r.weight_versions,
            rollout_log_probs: columns.rollout_log_probs,
            rollout_top_p_token_ids: r.rollout_top_p_token_ids,
            rollout_top_p_token_offsets: r.rollout_top_p_token_offsets,
            rollout_routed_experts: r.rollout_routed_experts,
            remove_sample: r.remove_sample,
            teacher_log_probs: r.teacher_log_probs,
            status: r.status,
            metadata: r.metadata.unwrap_or_default(),
            generate_function_path: r.generate_function_path,
            custom_rm_path: r.custom_rm_path,
            train_metadata: r.train_metadata,
            session_id: r.session_id,
            non_generation_time: r.non_generation_time,
            spec_info: r.spec_info,
            prefix_cache_info: r.prefix_cache_info,
            generated_spans: columns.generated_spans,
            policy_masked_tokens: columns.policy_masked_tokens,
            rollout_sampling_log_probs: r.rollout_sampling_log_probs,
            weight_version_spans: r.weight_version_spans,
            extra: r.extra,
        };
        s.check_invariants()?;
        Ok(s)
    }
}
