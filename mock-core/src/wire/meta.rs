//! The one writer of an item object and its `meta_info`, for every shape an item can take.
//!
//! Which keys a shape carries, and in what order, is data: [`keys`] gives the list for a release and a
//! [`Shape`] (the release owns the lists, `crate::release`), and [`Object::write`] writes exactly those keys in
//! that order from the values it holds. A new `meta_info` field is a [`Key`], a value in [`Meta`], and its
//! place in the releases' lists; the encoders of items, aborts and stream chunks all write through here.

use crate::config::SglangVersion;
use crate::engine::{MaskRows, PlannedItem, Rows, SamplingLogprobsMode};

use super::json::{
    FinishJson, InputPositions, InputTokenLogprobs, OutputPositions, TokenLogprobs,
    write_base64_i32, write_f32, write_ids, write_ids_after, write_int, write_serde, write_str,
};
use super::versions::VersionSpan;

/// The shapes of an item object in SGLang's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// An item the engine ran: a stream chunk, a finished item, one aborted while it ran.
    Generated,
    /// An item the scheduler refused before running it (`logprob_start_len` too large): a 400 abort with
    /// empty output.
    Failed,
    /// Aborted in the waiting queue (`TokenizerManager._handle_abort_req`): no `prompt_tokens`, no
    /// `cached_tokens`, `e2e_latency` before the logprob keys.
    AbortedWaiting,
    /// "Abort before prefill" (a release whose `waiting_abort` is `BeforePrefill`): no `output_ids`, no logprob
    /// keys.
    AbortedBeforePrefill,
}

/// One key of `meta_info`: the release owns which keys each shape carries.
pub use crate::release::MetaKey as Key;

/// The keys of `meta_info` for `shape` under `version`, in SGLang's insertion order.
pub fn keys(version: SglangVersion, shape: Shape) -> &'static [Key] {
    use Key::*;
    match shape {
        Shape::Generated | Shape::Failed => version.meta_generated,
        Shape::AbortedWaiting => version.meta_aborted_waiting,
        Shape::AbortedBeforePrefill => &[Id, FinishReason, PromptTokens, CompletionTokens],
    }
}

/// Whether objects of `shape` carry `output_ids`.
fn has_output_ids(shape: Shape) -> bool {
    match shape {
        Shape::Generated | Shape::Failed | Shape::AbortedWaiting => true,
        Shape::AbortedBeforePrefill => false,
    }
}

/// One item's object: `{"text", "output_ids", "meta_info", ["index"]}`. Written by hand rather than through
/// serde: a 1,024-token answer has some 3,000 numbers, and serde_json's per-element machinery cost as much as
/// generating them.
pub(super) struct Object<'a> {
    pub(super) shape: Shape,
    pub(super) text: &'a str,
    /// Prompt ids written before `output_ids` in the same list: 0.5.3's detokenizer window
    /// ([`crate::release::Release::decode_window_ids`]), empty otherwise.
    pub(super) decode_window: &'a [u32],
    pub(super) output_ids: &'a [u32],
    pub(super) meta: Meta<'a>,
    /// `Some` when the request asked for them: the ids the prompt ran as, after `meta_info`.
    pub(super) prompt_token_ids: Option<&'a [u32]>,
    /// The position in a streamed batch.
    pub(super) index: Option<usize>,
}

/// Every value `meta_info` can hold; [`keys`] decides which are written.
pub(super) struct Meta<'a> {
    pub(super) id: &'a str,
    /// `None` is `null`: a chunk of an item still running.
    pub(super) finish_reason: Option<FinishJson<'a>>,
    pub(super) prompt_tokens: usize,
    pub(super) weight_version: &'a str,
    pub(super) num_retractions: u32,
    /// `Some` when the request asked for logprobs.
    pub(super) logprobs: Option<LogprobFields<'a>>,
    pub(super) completion_tokens: usize,
    pub(super) cached_tokens: usize,
    /// `Some` on an item's final object where the release reports spans.
    pub(super) weight_versions: Option<&'a [VersionSpan<'a>]>,
    /// `Some` on a finished item's object with top-p replay rows: the kept ids of every output token.
    pub(super) top_p_token_ids: Option<&'a MaskRows>,
    /// `Some` when the request asked for sampling masks.
    pub(super) sampling_mask: Option<MaskFields<'a>>,
    /// `Some` on a finished item's object when routes were asked for and returned: the flat rows.
    pub(super) routed_experts: Option<&'a [i32]>,
    pub(super) e2e_latency: Option<f64>,
    pub(super) response_sent_to_client_ts: Option<f64>,
}

/// The sampling-mask keys of one object: the rows from `from` on (0, or the first not yet sent in an
/// incremental stream), and the count of every row so far.
pub(super) struct MaskFields<'a> {
    pub(super) mode: SamplingLogprobsMode,
    pub(super) rows: &'a MaskRows,
    pub(super) from: usize,
}

impl MaskFields<'_> {
    /// The keys of an object with no mask rows (a refused item's).
    pub(super) fn empty(item: &PlannedItem) -> Option<MaskFields<'static>> {
        item.request.sampling_mask.map(|mode| MaskFields {
            mode,
            rows: MaskRows::EMPTY,
            from: 0,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        let rows = self.from.min(self.rows.len())..self.rows.len();
        out.extend_from_slice(br#""output_token_sampling_mask":["#);
        for (n, i) in rows.clone().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            write_ids(out, self.rows.ids(i));
        }
        out.extend_from_slice(br#"],"output_token_sampling_logprobs":["#);
        for (n, i) in rows.enumerate() {
            if n > 0 {
                out.push(b',');
            }
            match self.mode {
                SamplingLogprobsMode::Selected => {
                    let selected = self.rows.logprobs(i, self.mode).first().copied();
                    write_f32(out, selected.unwrap_or(f32::NAN));
                }
                SamplingLogprobsMode::Support => {
                    out.push(b'[');
                    for (k, &lp) in self.rows.logprobs(i, self.mode).iter().enumerate() {
                        if k > 0 {
                            out.push(b',');
                        }
                        write_f32(out, lp);
                    }
                    out.push(b']');
                }
            }
        }
        // The count of every row so far, also in an incremental stream (`_slice_streaming_output_meta_info`
        // slices only the two lists).
        out.extend_from_slice(br#"],"output_token_sampling_mask_length":"#);
        write_int(out, self.rows.len());
    }
}

/// slime's `_encode_top_p_token_ids`: every row's ids one after the other, and the offsets of the rows (from 0,
/// one more than the rows), each as base64 of little-endian int32.
fn write_top_p(out: &mut Vec<u8>, rows: &MaskRows) {
    let ids: Vec<i32> = (0..rows.len())
        .flat_map(|i| rows.ids(i))
        .map(|&id| id as i32)
        .collect();
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    offsets.push(0);
    offsets.extend((0..rows.len()).map(|i| rows.end(i) as i32));
    out.extend_from_slice(br#""top_p_token_ids":"#);
    write_base64_i32(out, &ids);
    out.extend_from_slice(br#","top_p_token_offsets":"#);
    write_base64_i32(out, &offsets);
}

pub(super) struct LogprobFields<'a> {
    pub(super) input_token_logprobs: InputTokenLogprobs<'a>,
    pub(super) output_token_logprobs: TokenLogprobs<'a>,
    pub(super) output_token_logprobs_length: usize,
    pub(super) top: Option<(InputPositions<'a>, OutputPositions<'a>)>,
    pub(super) token_ids: Option<(InputPositions<'a>, OutputPositions<'a>)>,
}

impl LogprobFields<'_> {
    /// The logprob fields of an item with no output and no input positions, as the shapes of an item that
    /// never ran carry them when `return_logprob` is set: every requested list empty.
    pub(super) fn empty(item: &PlannedItem) -> Option<LogprobFields<'static>> {
        let empty = || {
            (
                InputPositions {
                    positions: 0,
                    rows: Rows::EMPTY,
                    tok: None,
                },
                OutputPositions {
                    rows: Rows::EMPTY,
                    from: 0,
                    tok: None,
                },
            )
        };
        item.request.return_logprob.then(|| LogprobFields {
            input_token_logprobs: InputTokenLogprobs {
                lps: &[],
                ids: &[],
                tok: None,
            },
            output_token_logprobs: TokenLogprobs {
                lps: &[],
                ids: &[],
                tok: None,
            },
            output_token_logprobs_length: 0,
            top: (item.top_logprobs_num > 0).then(empty),
            token_ids: item.token_ids_logprob_requested.then(empty),
        })
    }
}

impl Object<'_> {
    pub(super) fn write(&self, out: &mut Vec<u8>, version: SglangVersion) {
        out.extend_from_slice(br#"{"text":"#);
        write_str(out, self.text);
        if has_output_ids(self.shape) {
            out.extend_from_slice(br#","output_ids":"#);
            write_ids_after(out, self.decode_window, self.output_ids);
        }
        out.extend_from_slice(br#","meta_info":"#);
        self.meta.write(out, keys(version, self.shape));
        if let Some(ids) = self.prompt_token_ids {
            out.extend_from_slice(br#","prompt_token_ids":"#);
            write_ids(out, ids);
        }
        if let Some(index) = self.index {
            out.extend_from_slice(br#","index":"#);
            write_int(out, index);
        }
        out.push(b'}');
    }
}

impl Meta<'_> {
    fn write(&self, out: &mut Vec<u8>, keys: &[Key]) {
        out.push(b'{');
        for (i, &key) in keys.iter().enumerate() {
            // Every list starts with `id`, so only it goes without a comma.
            let sep: &[u8] = if i == 0 { b"" } else { b"," };
            match key {
                Key::Id => {
                    out.extend_from_slice(sep);
                    out.extend_from_slice(br#""id":"#);
                    write_serde(out, self.id);
                }
                Key::FinishReason => {
                    out.extend_from_slice(sep);
                    out.extend_from_slice(br#""finish_reason":"#);
                    write_serde(out, &self.finish_reason);
                }
                Key::PromptTokens => {
                    out.extend_from_slice(sep);
                    out.extend_from_slice(br#""prompt_tokens":"#);
                    write_int(out, self.prompt_tokens);
                }
                Key::WeightVersion => {
                    out.extend_from_slice(sep);
                    out.extend_from_slice(br#""weight_version":"#);
                    write_serde(out, self.weight_version);
                }
                Key::NumRetractions => {
                    out.extend_from_slice(sep);
                    out.extend_from_slice(br#""num_retractions":"#);
                    write_int(out, self.num_retractions);
                }
                Key::TokenLogprobs => {
                    if let Some(lp) = &self.logprobs {
                        out.extend_from_slice(sep);
                        out.extend_from_slice(br#""input_token_logprobs":"#);
                        lp.input_token_logprobs.write(out);
                        out.extend_from_slice(br#","output_token_logprobs":"#);
                        lp.output_token_logprobs.write(out);
                    }
                }
                Key::OutputTokenLogprobsLength => {
                    if let Some(lp) = &self.logprobs {
                        out.extend_from_slice(sep);
                        out.extend_from_slice(br#""output_token_logprobs_length":"#);
                        write_int(out, lp.output_token_logprobs_length);
                    }
                }
                // Top and token-id lists are rarer and smaller; serde writes them.
                Key::TopLogprobs => {
                    if let Some((input, output)) =
                        self.logprobs.as_ref().and_then(|lp| lp.top.as_ref())
                    {
                        out.extend_from_slice(sep);
                        out.extend_from_slice(br#""input_top_logprobs":"#);
                        write_serde(out, input);
                        out.extend_from_slice(br#","output_top_logprobs":"#);
                        write_serde(out, output);
                    }
                }
                Key::TokenIdsLogprobs => {
                    if let Some((input, output)) =
                        self.logprobs.as_ref().and_then(|lp| lp.token_ids.as_ref())
                    {
                        out.extend_from_slice(sep);
                        out.extend_from_slice(br#""input_token_ids_logprobs":"#);
                        write_serde(out, input);
                        out.extend_from_slice(br#","output_token_ids_logprobs":"#);
                        write_serde(out, output);
                    }
                }
                Key::TopPTokenIds => {
                    if let Some(rows) = self.top_p_token_ids.filter(|rows| !rows.is_empty()) {
                        out.extend_from_slice(sep);
                        write_top_p(out, rows);
                    }
                }
                Key::SamplingMask => {
                    if let Some(mask) = &self.sampling_mask {
                        out.extend_from_slice(sep);
                        mask.write(out);
                    }
                }
                Key::RoutedExperts => {
                    if let Some(routes) = self.routed_experts {
                        out.extend_from_slice(sep);
                        out.extend_from_slice(br#""routed_experts":"#);
                        write_base64_i32(out, routes);
                    }
                }
                Key::ReasoningTokens => {
                    out.extend_from_slice(sep);
                    // The toy model does not reason.
                    out.extend_from_slice(br#""reasoning_tokens":0"#);
                }
                Key::CompletionTokens => {
                    out.extend_from_slice(sep);
                    out.extend_from_slice(br#""completion_tokens":"#);
                    write_int(out, self.completion_tokens);
                }
                Key::CachedTokens => {
                    out.extend_from_slice(sep);
                    out.extend_from_slice(br#""cached_tokens":"#);
                    write_int(out, self.cached_tokens);
                }
                Key::WeightVersions => {
                    if let Some(spans) = self.weight_versions {
                        out.extend_from_slice(sep);
                        out.extend_from_slice(br#""weight_versions":"#);
                        write_serde(out, spans);
                    }
                }
                Key::CachedTokensDetails => {
                    out.extend_from_slice(sep);
                    out.extend_from_slice(br#""cached_tokens_details":"#);
                    // The mock's hits are all on the device: SGLang reports `{"device": cached, "host": 0}`
                    // when the request's hits are not broken down by tier.
                    if self.cached_tokens > 0 {
                        out.extend_from_slice(br#"{"device":"#);
                        write_int(out, self.cached_tokens);
                        out.extend_from_slice(br#","host":0}"#);
                    } else {
                        out.extend_from_slice(b"null");
                    }
                }
                Key::DpRank => {
                    out.extend_from_slice(sep);
                    out.extend_from_slice(br#""dp_rank":null"#);
                }
                Key::E2eLatency => {
                    if let Some(latency) = self.e2e_latency {
                        out.extend_from_slice(sep);
                        out.extend_from_slice(br#""e2e_latency":"#);
                        write_serde(out, &latency);
                    }
                }
                Key::ResponseSentToClientTs => {
                    if let Some(ts) = self.response_sent_to_client_ts {
                        out.extend_from_slice(sep);
                        out.extend_from_slice(br#""response_sent_to_client_ts":"#);
                        write_serde(out, &ts);
                    }
                }
            }
        }
        out.push(b'}');
    }
}
