//! What the engine is asked to run for one sample, and how a sample ends: [`ItemRequest`] with its validated
//! [`SamplingParams`], the [`LogprobEntry`] of a top list, and SGLang's [`FinishReason`]s.

use super::StopRegex;
use crate::release::{FinishOrder, SglangVersion};

/// Temperatures below this are greedy, as in SGLang (`top_k = 1`, `temperature = 1`).
pub const GREEDY_TEMPERATURE: f64 = 1e-6;

/// The sampling parameters the engine uses, already validated and with SGLang's defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Most tokens to generate.
    pub max_new_tokens: u32,
    /// EOS and stop tokens are masked until this many tokens exist.
    pub min_new_tokens: u32,
    /// Softmax temperature; below [`GREEDY_TEMPERATURE`] means greedy.
    pub temperature: f64,
    /// Nucleus threshold in `(0, 1]`.
    pub top_p: f64,
    /// Keep only the `k` most probable ids; `None` is the whole vocabulary (SGLang's `-1`).
    pub top_k: Option<u32>,
    /// Keep ids whose probability is at least `min_p` times the largest.
    pub min_p: f64,
    /// Stop strings, checked on the decoded output in list order.
    pub stop: Vec<String>,
    /// `stop_regex` patterns, searched after the stop strings in the tail window's text.
    pub stop_regex: Vec<StopRegex>,
    /// Token ids that end generation like EOS does.
    pub stop_token_ids: Vec<u32>,
    /// Disables EOS *and* `stop_token_ids` (stop strings still apply).
    pub ignore_eos: bool,
    /// Leave special tokens out of the output text.
    pub skip_special_tokens: bool,
    /// Keep a matched stop string (or stop token) in the output text.
    pub no_stop_trim: bool,
    /// Seeds the sampler for this request; without it the sampler is seeded from the prompt.
    pub sampling_seed: Option<u64>,
    /// The release's order of the finish checks.
    pub finish_order: FinishOrder,
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams {
            max_new_tokens: 128,
            min_new_tokens: 0,
            temperature: 1.0,
            top_p: 1.0,
            top_k: None,
            min_p: 0.0,
            stop: Vec::new(),
            stop_regex: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            skip_special_tokens: true,
            no_stop_trim: false,
            sampling_seed: None,
            finish_order: SglangVersion::default().finish_order,
        }
    }
}

/// One sample to generate: a prompt, its sampling parameters and what to report.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemRequest {
    /// The prompt's token ids (never empty).
    pub input_ids: Vec<u32>,
    /// Validated sampling parameters.
    pub params: SamplingParams,
    /// Report logprobs at all.
    pub return_logprob: bool,
    /// First prompt position covered by the input logprobs; `input_ids.len()` means none.
    pub logprob_start: usize,
    /// How many top logprobs to report per position (0 for none).
    pub top_logprobs_num: usize,
    /// Ids whose logprob to report at every position (empty for none).
    pub token_ids_logprob: Vec<u32>,
    /// Position of this sample in the flattened request (prompt-major), so that the samples of `n > 1` or of a
    /// batch of equal prompts differ while each stays reproducible.
    pub sample_index: u64,
    /// The sample's draw when it samples without a seed (MODEL.md section 8.3, [`crate::engine::Draws`]): how many
    /// unseeded samples of the same prompt at the same position the server ran before it. 0 for a seeded sample.
    pub draw: u64,
    /// Tokens the generation must produce first, instead of sampling (a scripted answer, usually ending with
    /// `<|im_end|>`). Each still reports its true logprob under the model, and the finish checks apply to it as
    /// to a sampled token; once they are used up, generation samples as usual.
    pub forced_output: Vec<u32>,
    /// `return_sampling_mask` (0.5.23): report each output token's sampling support, with these logprobs.
    pub sampling_mask: Option<SamplingLogprobsMode>,
    /// slime's top-p replay (`--slime-patches`: `custom_params.return_top_p_token_ids` on a request with logprobs
    /// and a top-k, top-p or min-p filter): report each output token's kept ids, and its logprobs renormalised
    /// over them unless it is greedy (MODEL.md section 7.2).
    pub top_p_token_ids: bool,
    /// `return_routed_experts` on a server that returns them: the first position with a routes row
    /// (`routed_experts_start_len`).
    pub routes_from: Option<usize>,
    /// The `stream_interval` of a streamed request, `None` for a whole answer: when SGLang's scheduler hands
    /// the output to its detokenizer, which decides the text of a loaded tokenizer (`MODEL.md` section 13.4).
    pub stream_interval: Option<u32>,
}

/// `sampling_logprobs_mode`: which renormalised logprobs a sampling mask comes with (`SamplingLogprobsMode` in
/// `srt/managers/schedule_batch.py`, 0.5.23).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplingLogprobsMode {
    /// The sampled token's, one per output token.
    Selected,
    /// Every support token's, aligned with the mask.
    Support,
}

/// The sampling masks of a generation's output tokens: per token, the support ids and their renormalised
/// logprobs (MODEL.md section 7.1), stored flat.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MaskRows {
    ids: Vec<u32>,
    /// `ends[i]` is the end of row `i` in `ids`.
    ends: Vec<usize>,
    /// One per row (`selected`) or one per id (`support`).
    logprobs: Vec<f32>,
}

impl MaskRows {
    /// No rows, for shapes that carry empty lists.
    pub const EMPTY: &'static MaskRows = &MaskRows {
        ids: Vec::new(),
        ends: Vec::new(),
        logprobs: Vec::new(),
    };

    /// Appends one output token's row.
    pub(crate) fn push_row(&mut self, ids: &[u32], logprobs: &[f64]) {
        self.ids.extend_from_slice(ids);
        self.ends.push(self.ids.len());
        self.logprobs.extend(logprobs.iter().map(|&lp| lp as f32));
    }

    /// The number of ids in every row.
    pub fn total_ids(&self) -> usize {
        self.ids.len()
    }

    /// The number of rows: output tokens with a mask.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bounds of row `i` in the flat ids (empty past the last row).
    fn bounds(&self, i: usize) -> std::ops::Range<usize> {
        let start = i.checked_sub(1).and_then(|j| self.ends.get(j)).copied();
        let start = start.unwrap_or(0);
        start..self.ends.get(i).copied().unwrap_or(start)
    }

    /// Where row `i` ends in the flat ids (the number of ids up to it; the total past the last row).
    pub fn end(&self, i: usize) -> usize {
        self.bounds(i).end
    }

    /// The support ids of row `i` (empty past the last row).
    pub fn ids(&self, i: usize) -> &[u32] {
        self.ids.get(self.bounds(i)).unwrap_or(&[])
    }

    /// The logprobs of row `i`: the selected token's alone, or one per support id (empty past the last row).
    pub fn logprobs(&self, i: usize, mode: SamplingLogprobsMode) -> &[f32] {
        let range = match mode {
            SamplingLogprobsMode::Selected => i..i + 1,
            SamplingLogprobsMode::Support => self.bounds(i),
        };
        self.logprobs.get(range).unwrap_or(&[])
    }
}

impl ItemRequest {
    /// A request for `input_ids` with default parameters and no logprobs.
    pub fn new(input_ids: Vec<u32>) -> ItemRequest {
        let logprob_start = input_ids.len();
        ItemRequest {
            input_ids,
            params: SamplingParams::default(),
            return_logprob: false,
            logprob_start,
            top_logprobs_num: 0,
            token_ids_logprob: Vec::new(),
            sample_index: 0,
            draw: 0,
            forced_output: Vec::new(),
            sampling_mask: None,
            top_p_token_ids: false,
            routes_from: None,
            stream_interval: None,
        }
    }
}

/// A token id with its log-probability, as in a top-logprob list. The logprob is `-inf` for an id the
/// distribution masks (SGLang then writes `null`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogprobEntry {
    /// Natural-log probability, rounded to `f32` as SGLang's float32 logprobs are.
    pub logprob: f32,
    /// The token id.
    pub id: u32,
}

/// Per-position lists of [`LogprobEntry`] (a top list or the `token_ids_logprob` list of each position), stored
/// flat. Rows can differ in length: a top list has `min(top_logprobs_num, unmasked ids)` entries, and
/// `min_new_tokens` masks ids at some output positions and not at others.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    entries: Vec<LogprobEntry>,
    /// `ends[i]` is the end of row `i` in `entries`.
    ends: Vec<usize>,
}

impl Rows {
    /// No rows, for shapes that carry empty lists.
    pub const EMPTY: &'static Rows = &Rows {
        entries: Vec::new(),
        ends: Vec::new(),
    };

    /// Ends the row made of the entries pushed since the previous row ended.
    pub(crate) fn end_row(&mut self) {
        self.ends.push(self.entries.len());
    }

    /// Appends an entry to the row being built.
    pub(crate) fn push(&mut self, entry: LogprobEntry) {
        self.entries.push(entry);
    }

    /// The entries being built, for a caller that appends a row in bulk.
    pub(crate) fn entries_mut(&mut self) -> &mut Vec<LogprobEntry> {
        &mut self.entries
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Row `i`, or an empty slice past the last row.
    pub fn row(&self, i: usize) -> &[LogprobEntry] {
        match self.ends.get(i) {
            Some(&end) => &self.entries[i.checked_sub(1).map_or(0, |j| self.ends[j])..end],
            None => &[],
        }
    }

    /// The rows from `from` on, in order.
    pub fn rows_from(&self, from: usize) -> impl ExactSizeIterator<Item = &[LogprobEntry]> + Clone {
        (from.min(self.len())..self.len()).map(|i| self.row(i))
    }

    /// Every entry of every row, in order.
    pub fn entries(&self) -> &[LogprobEntry] {
        &self.entries
    }
}

/// Why a generation ended, in the shapes of SGLang's `BaseFinishReason.to_json()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_new_tokens` reached: `{"type":"length","length":max_new_tokens}`.
    Length {
        /// The request's `max_new_tokens` (not the count generated).
        length: u32,
    },
    /// EOS or a `stop_token_ids` hit: `{"type":"stop","matched":id}`.
    StopToken {
        /// The id that ended generation.
        matched: u32,
    },
    /// A stop string: `{"type":"stop","matched":"..."}`.
    StopStr {
        /// The stop string that matched.
        matched: String,
    },
    /// Aborted while running: `{"type":"abort","message":...,"status_code":...,"err_type":...}`.
    Abort {
        /// Human-readable reason, `"Aborted"` for user and weight-update aborts.
        message: String,
        /// HTTP status for server-side error aborts, `None` for user aborts.
        status_code: Option<u16>,
        /// Error type for server-side error aborts, `None` for user aborts.
        err_type: Option<String>,
    },
}

/// Whether a chunk is due after `len` output tokens (`Scheduler.stream_output`): every token for an
/// interval of 1, otherwise at lengths 1, 1 + k, 1 + 2k, ...
pub fn chunk_due(len: usize, interval: u32) -> bool {
    let interval = interval.max(1) as usize;
    if interval > 1 {
        len % interval == 1
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_rows_read_back_row_by_row_and_count_as_rows() {
        assert!(MaskRows::EMPTY.is_empty());
        let mut rows = MaskRows::default();
        rows.push_row(&[4, 9], &[-0.25, -1.5]);
        rows.push_row(&[7], &[0.0]);
        assert!(!rows.is_empty());
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows.ids(0), rows.ids(1), rows.ids(2)),
            (&[4, 9][..], &[7][..], &[][..])
        );
        assert_eq!(rows.logprobs(1, SamplingLogprobsMode::Support), [0.0]);
        assert_eq!(
            rows.logprobs(0, SamplingLogprobsMode::Support),
            [-0.25, -1.5]
        );
    }
}
