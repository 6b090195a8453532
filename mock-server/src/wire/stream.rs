//! The events of a stream after each tick of a run: which items have a chunk due, each encoded with the
//! offsets of what that item already sent. The server's stream driver and the oracle share it.

use bytes::Bytes;

use super::item::{Chunk, EncodeCtx, Finished, OutputMode, Sent, encode_aborted, encode_item};
use super::sse::{chunk_due, sse_event};
use crate::engine::{GeneratePlan, Progress, Run};

/// Per-item stream state: the output mode and what each item has sent so far.
#[derive(Debug)]
pub struct StreamEncoder {
    mode: OutputMode,
    sent: Vec<Sent>,
}

impl StreamEncoder {
    pub fn new(mode: OutputMode, items: usize) -> StreamEncoder {
        StreamEncoder {
            mode,
            sent: vec![Sent::default(); items],
        }
    }

    /// Pushes onto `out` the events due after a tick with per-item `progress`, in item order: a chunk for
    /// an item whose chunk is due (`stream_interval`, and no stop string half matched), the final chunk of
    /// an item that ended (timed by `finished(i)`), the abort of a rejected item, the error of a failed one.
    pub fn after_tick(
        &mut self,
        ctx: &EncodeCtx<'_>,
        plan: &GeneratePlan,
        run: &Run,
        progress: &[Progress],
        mut finished: impl FnMut(usize) -> Finished,
        out: &mut impl Extend<Bytes>,
    ) {
        for (i, (item, &progress)) in plan.items.iter().zip(progress).enumerate() {
            let index = plan.is_batch.then_some(i);
            // The buffer is allocated only for an event that is due.
            let json = match progress {
                Progress::Idle => continue,
                Progress::Failed => run
                    .failure(i)
                    .map(|err| err.stream_event_json())
                    .unwrap_or_default(),
                Progress::Rejected => {
                    let message = item.abort.as_deref().unwrap_or_default();
                    let mut json = Vec::with_capacity(512);
                    encode_aborted(&mut json, ctx, item, message, finished(i), index);
                    json
                }
                Progress::Stepped | Progress::Finished => {
                    let Some(generation) = run.generation(i) else {
                        continue;
                    };
                    let done = progress == Progress::Finished;
                    if !done
                        && (!chunk_due(generation.output_ids().len(), item.stream_interval)
                            || generation.holds_stop_prefix())
                    {
                        continue;
                    }
                    let chunk = Chunk {
                        mode: self.mode,
                        sent: self.sent[i],
                        finished: done.then(|| finished(i)),
                        index,
                        num_retractions: run.retractions(i),
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
