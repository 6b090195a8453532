//! Whole non-stream bodies: one object per item, or an array for a batch.

use super::aborts::encode_waiting_abort;
use super::item::{
    Chunk, EncodeCtx, Finished, OutputMode, Sent, encode_item, has_non_finite_logprob,
};
use super::json::WaitingAbort;
use crate::config::Profile;
use crate::engine::{GeneratePlan, Generation, Run};
use crate::error::ApiError;

/// Encodes a finished non-stream request from its run: `latencies[i]` is item `i`'s `e2e_latency` and `ts`
/// the `response_sent_to_client_ts` of every item.
pub fn encode_body(
    ctx: &EncodeCtx<'_>,
    plan: &GeneratePlan,
    run: &Run,
    latencies: &[f64],
    ts: f64,
) -> Result<Vec<u8>, ApiError> {
    // Sized up front so a long answer is written without regrowing (and re-copying) the buffer.
    let capacity: usize = (0..plan.items.len())
        .filter_map(|i| run.generation(i))
        .map(estimated_json_len)
        .sum();
    let mut out = Vec::with_capacity(capacity + 64);
    if plan.is_batch {
        out.push(b'[');
    }
    for (i, item) in plan.items.iter().enumerate() {
        let Some(generation) = run.generation(i) else {
            continue;
        };
        if ctx.profile == Profile::Mid && has_non_finite_logprob(generation, item) {
            // MID serialises with `allow_nan=False`: a -inf logprob fails the whole response.
            return Err(ApiError::internal(
                "ValueError: Out of range float values are not JSON compliant",
            ));
        }
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

/// The waiting-queue abort object of every item of a plan (SGLang's `_handle_abort_req`), one per item.
pub fn waiting_abort_objects(
    ctx: &EncodeCtx<'_>,
    plan: &GeneratePlan,
    reason: WaitingAbort<'_>,
    e2e_latency: f64,
    indexed: bool,
) -> Vec<Vec<u8>> {
    plan.items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let mut json = Vec::with_capacity(256);
            let index = (indexed && plan.is_batch).then_some(i);
            encode_waiting_abort(&mut json, ctx, item, reason, e2e_latency, index);
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
