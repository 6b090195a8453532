//! Whole non-stream bodies: one object per item, or an array for a batch.

use super::aborts::{encode_before_prefill, encode_waiting_abort};
use super::item::{
    Chunk, EncodeCtx, Finished, OutputMode, Sent, encode_item, has_non_finite_logprob,
};
use super::json::WaitingAbort;
use crate::config::SglangVersion;
use crate::engine::{GeneratePlan, Generation, Run};
use crate::error::RequestError;
use crate::release::{NonFiniteBody, WaitingAbortShape};

/// Whether a finished non-stream answer can be serialised at all: 0.5.3 serialises with `allow_nan=False`, so a
/// NaN or infinite logprob in any item fails the whole response with a 500. Every non-stream route (native or
/// OpenAI) asks this before writing its body.
pub fn check_serialisable(
    version: SglangVersion,
    plan: &GeneratePlan,
    run: &Run,
) -> Result<(), RequestError> {
    let bad = |(i, item)| {
        run.generation(i)
            .is_some_and(|g| has_non_finite_logprob(g, item))
    };
    if version.non_finite_body == NonFiniteBody::ServerError
        && plan.items.iter().enumerate().any(bad)
    {
        return Err(RequestError::internal(
            "ValueError: Out of range float values are not JSON compliant",
        ));
    }
    Ok(())
}

/// Encodes a finished non-stream request from its run: `latencies[i]` is item `i`'s `e2e_latency` and `ts`
/// the `response_sent_to_client_ts` of every item.
pub fn encode_body(
    ctx: &EncodeCtx<'_>,
    plan: &GeneratePlan,
    run: &Run,
    latencies: &[f64],
    ts: f64,
) -> Result<Vec<u8>, RequestError> {
    // Sized up front so a long answer is written without regrowing (and re-copying) the buffer.
    let capacity: usize = (0..plan.items.len())
        .filter_map(|i| run.generation(i))
        .map(estimated_json_len)
        .sum();
    let mut out = Vec::with_capacity(capacity + 64);
    if plan.is_batch {
        out.push(b'[');
    }
    check_serialisable(ctx.version, plan, run)?;
    for (i, item) in plan.items.iter().enumerate() {
        let Some(generation) = run.generation(i) else {
            continue;
        };
        if i > 0 {
            out.push(b',');
        }
        let chunk = Chunk {
            mode: OutputMode::Cumulative,
            sent: Sent::default(),
            finished: Some(Finished {
                e2e_latency: latencies[i],
                response_sent_to_client_ts: ts,
            }),
            index: None,
            num_retractions: run.retractions(i),
            cached_tokens: run.cached_tokens(i),
            sent_ts: Some(ts),
            version_events: ctx.item_version_events(i),
        };
        encode_item(&mut out, ctx, item, generation, chunk);
    }
    if plan.is_batch {
        out.push(b']');
    }
    Ok(out)
}

/// A generous estimate of one finished item's JSON size: about 12 bytes per output id and text byte, 32 per
/// logprob triple, and a fixed allowance for `meta_info`.
fn estimated_json_len(generation: &Generation) -> usize {
    let per_position = generation.top_logprobs_num() + generation.token_ids_logprob().len();
    let triples = generation.output_logprobs().len() * (1 + per_position)
        + generation.input_logprobs().len() * (1 + per_position);
    512 + 12 * generation.output_ids().len() + generation.text().len() + 32 * triples
}

/// Where a request whose items never ran was stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NeverRan<'a> {
    /// In the waiting queue (SGLang's `_handle_abort_req`), `e2e` seconds after it arrived.
    Waiting { reason: WaitingAbort<'a>, e2e: f64 },
    /// Before prefill: 0.5.3's answer to a waiting-queue abort, and the `abort-before-prefill` fault.
    BeforePrefill,
}

impl NeverRan<'_> {
    /// What `version` answers for it: 0.5.3's tokenizer manager reports a request the scheduler aborted in
    /// its waiting queue as "Abort before prefill" (`_handle_abort_req`); a refusal with its own reason (a full
    /// queue) keeps the waiting shape.
    pub fn in_release(self, version: SglangVersion) -> Self {
        match (version.waiting_abort, self) {
            (
                WaitingAbortShape::BeforePrefill,
                NeverRan::Waiting {
                    reason: WaitingAbort::Aborted,
                    ..
                },
            ) => NeverRan::BeforePrefill,
            (WaitingAbortShape::BeforePrefill | WaitingAbortShape::WaitingQueue, how) => how,
        }
    }
}

/// The object of every item of a plan that never ran, one per item; `indexed` gives a streamed batch's
/// objects their `index`.
pub fn never_ran_objects(
    ctx: &EncodeCtx<'_>,
    plan: &GeneratePlan,
    how: NeverRan<'_>,
    indexed: bool,
    sent_ts: f64,
) -> Vec<Vec<u8>> {
    plan.items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let mut json = Vec::with_capacity(256);
            let index = (indexed && plan.is_batch).then_some(i);
            match how.in_release(ctx.version) {
                NeverRan::Waiting { reason, e2e } => {
                    encode_waiting_abort(&mut json, ctx, item, reason, e2e, sent_ts, index);
                }
                NeverRan::BeforePrefill => encode_before_prefill(&mut json, ctx, item, index),
            }
            json
        })
        .collect()
}

/// A non-stream body from per-item objects: the object itself, or an array for a batch.
pub fn join_body(plan: &GeneratePlan, objects: Vec<Vec<u8>>) -> Vec<u8> {
    if !plan.is_batch {
        return objects.into_iter().next().unwrap_or_default();
    }
    let mut out = vec![b'['];
    for (i, object) in objects.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&object);
    }
    out.push(b']');
    out
}
