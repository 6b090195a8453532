//! One item object (a non-stream body, an element of a batch body, or a stream chunk) in SGLang's
//! `meta_info` insertion order, and the object of an item the scheduler rejected.

use crate::config::SglangVersion;
use crate::engine::{FinishReason, GeneratePlan, Generation, PlannedItem, Refusal};
use crate::model::{Model, Tokenizer};

use super::json::{
    Abort, FinishJson, InputPositions, InputTokenLogprobs, OutputPositions, TokenLogprobs,
};
use super::meta::{LogprobFields, MaskFields, Meta, Object, Shape};
use super::versions::{VersionEvent, reported_version, weight_version_spans};
/// How the output fields of one chunk relate to earlier chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// Everything so far (non-stream bodies, and streams of a release whose `stream_ids` are cumulative).
    Cumulative,
    /// Only what is new since the previous chunk (`--incremental-streaming-output`).
    Incremental,
    /// Streams of a release whose `stream_ids` are deltas: cumulative `text` and logprobs, delta `output_ids`.
    DeltaIds,
}

/// What has already been sent of one item's stream; the offsets of the next delta.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    pub ids: usize,
    pub text_bytes: usize,
}

/// Timing fields that only the final chunk of an item carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    pub e2e_latency: f64,
    /// Unix time in seconds, where the release's keys have `response_sent_to_client_ts`.
    pub response_sent_to_client_ts: f64,
}

/// Everything [`encode_item`] needs besides the generation itself.
#[derive(Debug, Clone, Copy)]
pub struct EncodeCtx<'a> {
    pub version: SglangVersion,
    pub tokenizer: &'a Tokenizer,
    pub return_text_in_logprobs: bool,
    /// Whether each object carries its prompt's ids after `meta_info` (`return_prompt_token_ids`).
    pub return_prompt_token_ids: bool,
    /// The version now: what every object reports, and the last span of a finished item.
    pub weight_version: &'a str,
    /// Each item's weight updates while it was live (none unless a version changed during the run).
    pub version_events: &'a [Vec<VersionEvent>],
}

impl<'a> EncodeCtx<'a> {
    /// The context of `plan`'s answer under `version`, with the weight version the request ran under.
    pub fn new(
        version: SglangVersion,
        model: &'a Model,
        plan: &GeneratePlan,
        weight_version: &'a str,
    ) -> Self {
        EncodeCtx {
            version,
            tokenizer: model.tokenizer(),
            return_text_in_logprobs: plan.return_text_in_logprobs,
            return_prompt_token_ids: plan.return_prompt_token_ids,
            weight_version,
            version_events: &[],
        }
    }

    /// The same context, with each item's weight updates while it was live.
    pub fn with_version_events(self, version_events: &'a [Vec<VersionEvent>]) -> Self {
        EncodeCtx {
            version_events,
            ..self
        }
    }

    /// Item `i`'s weight updates while it was live.
    pub fn item_version_events(&self, i: usize) -> &'a [VersionEvent] {
        self.version_events.get(i).map_or(&[], Vec::as_slice)
    }
}

/// Which part of an item one encoded object shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chunk<'a> {
    pub mode: OutputMode,
    /// The offsets of the previous chunk, for the delta modes.
    pub sent: Sent,
    /// `Some` for the final object of an item.
    pub finished: Option<Finished>,
    /// The position in a streamed batch.
    pub index: Option<usize>,
    /// How often `/pause_generation` with `mode: "retract"` sent the item back to the queue (where the
    /// release's keys have `num_retractions`).
    pub num_retractions: u32,
    /// How much of the prompt the prefix cache held when the item started (`cached_tokens`).
    pub cached_tokens: usize,
    /// `response_sent_to_client_ts` (0.5.15 and later): on the first object of an item, stream or not.
    pub sent_ts: Option<f64>,
    /// The weight updates while the item was live, for its final object's `weight_versions` (0.5.23).
    pub version_events: &'a [VersionEvent],
}

/// How many prompt ids 0.5.3's detokenizer window holds at most (`INIT_INCREMENTAL_DETOKENIZATION_OFFSET`,
/// `srt/managers/schedule_batch.py`).
const DECODE_WINDOW: usize = 5;

/// Encode one item (a non-stream body, an element of a batch body, or a stream chunk) as JSON bytes.
pub fn encode_item(
    out: &mut Vec<u8>,
    ctx: &EncodeCtx<'_>,
    item: &PlannedItem,
    generation: &Generation,
    chunk: Chunk<'_>,
) {
    let Chunk {
        mode,
        sent,
        finished,
        index,
        num_retractions,
        cached_tokens,
        sent_ts,
        version_events,
    } = chunk;
    let ids = generation.output_ids();
    let full_text = generation.text();
    let (text, ids_from, lp_from) = match mode {
        OutputMode::Cumulative => (full_text, 0, 0),
        OutputMode::Incremental => (
            full_text.get(sent.text_bytes..).unwrap_or(""),
            sent.ids.min(ids.len()),
            sent.ids.min(ids.len()),
        ),
        OutputMode::DeltaIds => (full_text, sent.ids.min(ids.len()), 0),
    };
    let logprobs = item
        .request
        .return_logprob
        .then(|| logprob_fields(ctx, item, generation, lp_from));
    let spans = (finished.is_some() && ctx.version.weight_version_spans)
        .then(|| weight_version_spans(version_events, ctx.weight_version, ids.len()));
    let sampling_mask = generation.sampling_mask().map(|(mode, rows)| MaskFields {
        mode,
        rows,
        from: lp_from,
    });
    // Routes are read out when the item finishes (`_maybe_collect_routed_experts`): only its last object has them.
    let routes = finished.and_then(|_| generation.routed_experts());
    let weight_version = reported_version(spans.as_deref(), ctx.weight_version);
    // 0.5.3 sends the ids its detokenizer decodes: the prompt's last few, then the output; a stream's first
    // object carries the window, the later ones only what is new.
    let decode_window = match ids_from {
        0 if ctx.version.decode_window_ids => {
            let prompt = &item.request.input_ids;
            &prompt[prompt.len().saturating_sub(DECODE_WINDOW)..]
        }
        _ => &[],
    };
    Object {
        shape: Shape::Generated,
        text,
        decode_window,
        output_ids: &ids[ids_from..],
        meta: Meta {
            id: &item.rid,
            finish_reason: generation.finish_reason().map(|reason| match reason {
                FinishReason::Length { length } if item.length_as_float => {
                    FinishJson::FloatLength(*length)
                }
                FinishReason::Length { .. }
                | FinishReason::StopToken { .. }
                | FinishReason::StopStr { .. }
                | FinishReason::Abort { .. } => FinishJson::Engine(reason),
            }),
            prompt_tokens: generation.prompt_tokens(),
            weight_version,
            num_retractions,
            logprobs,
            completion_tokens: ids.len(),
            cached_tokens,
            weight_versions: spans.as_deref(),
            // Written with the finish reason (`meta_info.get("finish_reason") is not None`), whole.
            top_p_token_ids: finished.and_then(|_| generation.top_p_token_ids()),
            sampling_mask,
            routed_experts: routes.as_deref(),
            e2e_latency: finished.map(|f| f.e2e_latency),
            response_sent_to_client_ts: sent_ts,
        },
        prompt_token_ids: ctx
            .return_prompt_token_ids
            .then_some(&item.request.input_ids[..]),
        index,
    }
    .write(out, ctx.version);
}

/// The logprob fields of an item from output position `lp_from` on (0, or the first position not yet sent
/// in an incremental stream).
fn logprob_fields<'a>(
    ctx: &EncodeCtx<'a>,
    item: &'a PlannedItem,
    generation: &'a Generation,
    lp_from: usize,
) -> LogprobFields<'a> {
    let tok = ctx.return_text_in_logprobs.then_some(ctx.tokenizer);
    let ids = generation.output_ids();
    let lps = generation.output_logprobs();
    let n_out = lps.len();
    let k = item.top_logprobs_num;
    let in_ids = generation.input_logprob_ids();
    LogprobFields {
        input_token_logprobs: InputTokenLogprobs {
            lps: generation.input_logprobs(),
            ids: in_ids,
            tok,
        },
        output_token_logprobs: TokenLogprobs {
            lps: &lps[lp_from.min(n_out)..],
            ids: &ids[lp_from.min(n_out)..n_out.min(ids.len())],
            tok,
        },
        output_token_logprobs_length: n_out,
        top: (k > 0).then(|| {
            (
                InputPositions {
                    positions: in_ids.len(),
                    rows: generation.input_top_logprobs(),
                    tok,
                },
                OutputPositions {
                    rows: generation.output_top_logprobs(),
                    from: lp_from,
                    tok,
                },
            )
        }),
        token_ids: item.token_ids_logprob_requested.then(|| {
            (
                InputPositions {
                    positions: in_ids.len(),
                    rows: generation.input_token_ids_logprobs(),
                    tok,
                },
                OutputPositions {
                    rows: generation.output_token_ids_logprobs(),
                    from: lp_from,
                    tok,
                },
            )
        }),
    }
}

/// The abort of an item the scheduler refused (`logprob_start_len` too large, a grammar without a backend),
/// encoded as SGLang reports it: the one token `step` made from the prompt `[0]` (none if it failed), empty
/// logprob lists.
pub fn encode_aborted(
    out: &mut Vec<u8>,
    ctx: &EncodeCtx<'_>,
    item: &PlannedItem,
    refusal: &Refusal,
    step: Option<&Generation>,
    finished: Finished,
    index: Option<usize>,
) {
    let req = &item.request;
    let logprobs = LogprobFields::empty(item);
    // The token the scheduler made from the prompt `[0]` it put in the refused prompt's place, in one span of the
    // version now.
    let (output_ids, text) = step.map_or((&[][..], ""), |g| (g.output_ids(), g.text()));
    // 0.5.3 sends its detokenizer's window too: the prompt it ran, `[0]`.
    let decode_window: &[u32] = match step {
        Some(_) if ctx.version.decode_window_ids => &[0],
        Some(_) | None => &[],
    };
    let spans = ctx
        .version
        .weight_version_spans
        .then(|| weight_version_spans(&[], ctx.weight_version, output_ids.len()));
    Object {
        shape: Shape::Failed,
        text,
        decode_window,
        output_ids,
        meta: Meta {
            id: &item.rid,
            finish_reason: Some(FinishJson::Abort(Abort {
                message: &refusal.message,
                status_code: 400,
                err_type: refusal.err_type,
            })),
            prompt_tokens: if step.is_some() {
                1
            } else {
                req.input_ids.len()
            },
            weight_version: ctx.weight_version,
            num_retractions: 0,
            logprobs,
            completion_tokens: output_ids.len(),
            cached_tokens: 0,
            weight_versions: spans.as_deref(),
            top_p_token_ids: None,
            sampling_mask: MaskFields::empty(item),
            routed_experts: None,
            e2e_latency: Some(finished.e2e_latency),
            response_sent_to_client_ts: Some(finished.response_sent_to_client_ts),
        },
        prompt_token_ids: ctx
            .return_prompt_token_ids
            .then_some(&item.request.input_ids[..]),
        index,
    }
    .write(out, ctx.version);
}

/// Whether any logprob this item would report is NaN or infinite (a non-stream body then fails with 500 where
/// the release's `non_finite_body` says so).
pub(super) fn has_non_finite_logprob(generation: &Generation, item: &PlannedItem) -> bool {
    if !item.request.return_logprob {
        return false;
    }
    let bad = |x: f32| !x.is_finite();
    generation.output_logprobs().iter().any(|&x| bad(x))
        || generation
            .input_logprobs()
            .iter()
            .flatten()
            .any(|&x| bad(x))
        || (item.top_logprobs_num > 0
            && (generation
                .output_top_logprobs()
                .entries()
                .iter()
                .any(|e| bad(e.logprob))
                || generation
                    .input_top_logprobs()
                    .entries()
                    .iter()
                    .any(|e| bad(e.logprob))))
        || (item.token_ids_logprob_requested
            && (generation
                .output_token_ids_logprobs()
                .entries()
                .iter()
                .any(|e| bad(e.logprob))
                || generation
                    .input_token_ids_logprobs()
                    .entries()
                    .iter()
                    .any(|e| bad(e.logprob))))
}

#[cfg(test)]
mod tests {
    use super::super::json::{
        InputTokenLogprobs, TokenLogprobs, write_ids, write_int, write_str, write_triple,
    };

    #[test]
    fn integers_are_written_in_decimal() {
        let mut out = b"[".to_vec();
        for id in [0, 7, 10, 99, 100, 151_935, u32::MAX] {
            write_int(&mut out, id);
            out.push(b',');
        }
        assert_eq!(out, b"[0,7,10,99,100,151935,4294967295,");
    }

    /// `write_str` against serde_json, the writer it replaces: every ASCII character alone and inside runs
    /// that straddle the eight-byte words, and arbitrary strings.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let check = |text: &str| {
            let mut out = Vec::new();
            write_str(&mut out, text);
            let want = serde_json::to_string(text).expect("serialisable");
            assert_eq!(String::from_utf8_lossy(&out), want, "{text:?}");
        };
        for b in 0..=0x7Fu8 {
            let c = char::from(b);
            for pad in 0..17 {
                check(&format!("{}{c}{}", "x".repeat(pad), "y".repeat(16 - pad)));
            }
        }
        check("");
        check(" ka rito\n\t\"é€😀\u{7f}\u{1f}");
        proptest::proptest!(|(text in ".*")| check(&text));
    }

    /// The batched writers of id lists and logprob triples against serde_json, over lists long enough to
    /// flush their buffer many times and values of every length.
    #[test]
    fn id_lists_and_triple_lists_match_what_serde_json_writes() {
        // Every digit count at its edges, then spread values.
        let edges = (0..10u32).flat_map(|k| {
            let p = 10u32.pow(k);
            [p - 1, p, p + 1]
        });
        let ids: Vec<u32> = edges
            .chain([u32::MAX - 1, u32::MAX])
            .chain((0..3000u32).map(|i| match i % 3 {
                0 => i,
                1 => u32::MAX - i,
                _ => i.wrapping_mul(2_654_435_761),
            }))
            .take(3000)
            .collect();
        let lps: Vec<f32> = (0..3000u32)
            .map(|i| match i % 7 {
                0 => f32::NEG_INFINITY,
                1 => f32::NAN,
                2 => -f32::from_bits(i.wrapping_mul(2_654_435_761) >> 1),
                3 => -1.175_494_4e-38,
                4 => 0.0,
                _ => -(i as f32) / 7.0,
            })
            .collect();
        let mut out = Vec::new();
        write_ids(&mut out, &ids);
        assert_eq!(out, serde_json::to_vec(&ids).expect("serialisable"));
        out.clear();
        TokenLogprobs {
            lps: &lps,
            ids: &ids,
            tok: None,
        }
        .write(&mut out);
        let triples: Vec<(f32, u32, ())> = lps
            .iter()
            .zip(&ids)
            .map(|(&lp, &id)| (lp, id, ()))
            .collect();
        assert_eq!(
            String::from_utf8_lossy(&out),
            serde_json::to_string(&triples).expect("serialisable")
        );

        // Input logprobs take the same writer, with a missing value (the first position's) as `null`.
        let input: Vec<Option<f32>> = lps
            .iter()
            .enumerate()
            .map(|(i, &lp)| (i % 11 != 0).then_some(lp))
            .collect();
        out.clear();
        InputTokenLogprobs {
            lps: &input,
            ids: &ids,
            tok: None,
        }
        .write(&mut out);
        let triples: Vec<(Option<f32>, u32, ())> = input
            .iter()
            .zip(&ids)
            .map(|(&lp, &id)| (lp, id, ()))
            .collect();
        assert_eq!(
            String::from_utf8_lossy(&out),
            serde_json::to_string(&triples).expect("serialisable")
        );
    }

    #[test]
    fn triples_match_what_serde_json_writes() {
        for (logprob, id) in [
            (Some(-0.203_125f32), 12_095),
            (Some(-1e-7), 0),
            (None, 42),
            (Some(f32::NEG_INFINITY), 7),
        ] {
            let mut out = Vec::new();
            write_triple(&mut out, logprob, id, None);
            let want = serde_json::to_vec(&(logprob, id, ())).expect("serialisable");
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&want)
            );
        }
    }
}
