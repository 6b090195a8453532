//! The events of a stream after each tick of a run: which items have a chunk due, each encoded with the
//! offsets of what that item already sent. The server's stream driver and the oracle share it.

use bytes::Bytes;

use super::item::{Chunk, EncodeCtx, Finished, OutputMode, Sent, encode_aborted, encode_item};
use super::sse::sse_event;
use crate::engine::{GeneratePlan, Generation, Progress, Refusal, Run, chunk_due};
use crate::error::RequestError;

/// Per-item stream state: the output mode and what each item has sent so far.
#[derive(Debug)]
pub struct StreamEncoder {
    mode: OutputMode,
    sent: Vec<Sent>,
    /// Whether each item has sent an object: the first carries `response_sent_to_client_ts`.
    started: Vec<bool>,
}

impl StreamEncoder {
    pub fn new(mode: OutputMode, items: usize) -> StreamEncoder {
        StreamEncoder {
            mode,
            sent: vec![Sent::default(); items],
            started: vec![false; items],
        }
    }

    /// Pushes onto `out` the events due after a tick with per-item `progress`, in item order (see [`due`]):
    /// a chunk of an item that stepped or ended (its final chunk timed by `finished(i)`), the abort of a
    /// rejected item, the error of a failed one.
    pub fn after_tick(
        &mut self,
        ctx: &EncodeCtx<'_>,
        plan: &GeneratePlan,
        run: &Run,
        progress: &[Progress],
        mut finished: impl FnMut(usize) -> Finished,
        out: &mut impl Extend<Bytes>,
    ) {
        for (i, due) in due(plan, run, progress) {
            let item = &plan.items[i];
            let index = plan.is_batch.then_some(i);
            // The buffer is allocated only for an event that is due.
            let json = match due {
                Due::Failed(err) => super::error_event(&err.client_message(), ctx.version),
                Due::Rejected(refusal) => {
                    let mut json = Vec::with_capacity(512);
                    let step = run.rejected_step(i);
                    encode_aborted(&mut json, ctx, item, refusal, step, finished(i), index);
                    json
                }
                Due::Chunk { generation, done } => {
                    let first = !std::mem::replace(&mut self.started[i], true);
                    let timing = (done || first).then(|| finished(i));
                    let chunk = Chunk {
                        mode: self.mode,
                        sent: self.sent[i],
                        finished: timing.filter(|_| done),
                        index,
                        num_retractions: run.retractions(i),
                        cached_tokens: run.cached_tokens(i),
                        sent_ts: timing
                            .filter(|_| first)
                            .map(|t| t.response_sent_to_client_ts),
                        version_events: ctx.item_version_events(i),
                    };
                    let mut json = Vec::with_capacity(512);
                    encode_item(&mut json, ctx, item, generation, chunk);
                    self.sent[i] = Sent {
                        ids: generation.output_ids().len(),
                        text_bytes: generation.text().len(),
                    };
                    json
                }
            };
            out.extend([sse_event(&json)]);
        }
    }
}

/// What one item owes its stream after a tick.
#[derive(Debug)]
pub enum Due<'a> {
    /// A chunk of its generation; `done` for the item's final chunk.
    Chunk {
        generation: &'a Generation,
        done: bool,
    },
    /// The scheduler refused it, with this message: its abort object.
    Rejected(&'a Refusal),
    /// Its engine code failed: the error event.
    Failed(&'a RequestError),
}

/// The items that owe their stream an event after a tick with per-item `progress`, in item order: an item
/// that ended, or stepped with a chunk due (`stream_interval`) and no stop string half matched; a rejected
/// item; a failed one.
pub fn due<'a>(
    plan: &'a GeneratePlan,
    run: &'a Run,
    progress: &'a [Progress],
) -> impl Iterator<Item = (usize, Due<'a>)> + 'a {
    plan.items
        .iter()
        .zip(progress)
        .enumerate()
        .filter_map(move |(i, (item, &progress))| {
            let due = match progress {
                Progress::Idle => return None,
                Progress::Failed => Due::Failed(run.failure(i)?),
                Progress::Rejected => Due::Rejected(item.abort.as_ref()?),
                Progress::Stepped | Progress::Finished => {
                    let generation = run.generation(i)?;
                    let done = progress == Progress::Finished;
                    if !done
                        && (!chunk_due(generation.output_ids().len(), item.stream_interval)
                            || generation.holds_stop_prefix())
                    {
                        return None;
                    }
                    Due::Chunk { generation, done }
                }
            };
            Some((i, due))
        })
}
