//! A validated `/generate` request as the engine runs it: one [`PlannedItem`] per flattened sample.

use super::item::ItemRequest;

/// One flattened sample, ready for the engine.
#[derive(Debug, Clone)]
pub struct PlannedItem {
    /// `meta_info.id`.
    pub rid: String,
    /// The id was generated (uuid4 hex) rather than given by the caller.
    pub rid_is_fresh: bool,
    pub request: ItemRequest,
    /// Whether `input_top_logprobs`/`output_top_logprobs` are reported (`top_logprobs_num > 0`).
    pub top_logprobs_num: usize,
    /// Whether `input_token_ids_logprobs`/`output_token_ids_logprobs` are reported.
    pub token_ids_logprob_requested: bool,
    /// Chunk cadence of this item's stream.
    pub stream_interval: u32,
    /// The scheduler rejected this item (`logprob_start_len` or `routed_experts_start_len` out of range, a
    /// sampling mask with an unbounded `top_k`): it finishes at once with an abort of status 400.
    pub abort: Option<Refusal>,
    /// `max_new_tokens` was given as a float, so a length finish reports it as one (`"length": 4.0`; 0.5.3,
    /// the release that serves such a request).
    pub length_as_float: bool,
}

/// Why the scheduler refused an item, as its abort's `finish_reason` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    /// `err_type`: `"BadRequestError"` from `set_finish_with_abort`, none from `prepare_abort`.
    pub err_type: Option<&'static str>,
}

/// A validated `/generate` request.
#[derive(Debug, Clone)]
pub struct GeneratePlan {
    /// The response is a JSON array (batch input or `n > 1`), not one object.
    pub is_batch: bool,
    pub stream: bool,
    pub return_text_in_logprobs: bool,
    /// Every object of every item carries the ids its prompt ran as (`return_prompt_token_ids`, 0.5.23).
    pub return_prompt_token_ids: bool,
    /// Prompt-major: `[p0s0, p0s1, ..., p1s0, ...]`.
    pub items: Vec<PlannedItem>,
    /// `n`: samples per prompt (`sampling_params.n`, `parallel_sample_num`).
    pub parallel_sample_num: usize,
}

/// Where fresh request ids come from: uuid4 hex on the server, something reproducible in the oracle.
pub trait RidSource {
    fn fresh_rid(&mut self) -> String;
}

impl GeneratePlan {
    /// The message of the first item the scheduler refused: a non-stream request fails as a whole with it
    /// (`_wait_one_response` raises the first abort), while a stream reports it in that item's chunk.
    pub fn rejection(&self) -> Option<&str> {
        self.items
            .iter()
            .find_map(|item| item.abort.as_ref().map(|r| r.message.as_str()))
    }
}
