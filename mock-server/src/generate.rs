//! Running a planned `/generate` request on the engine: whole bodies for non-stream requests, and lazily
//! generated SSE byte streams that advance one emission point per poll.

use std::collections::hash_map::RandomState;
use std::convert::Infallible;
use std::hash::{BuildHasher, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::Stream;

use crate::config::{Profile, ServerConfig};
use crate::engine::Generation;
use crate::error::ApiError;
use crate::model::{Model, Tokenizer};
use crate::request::{GeneratePlan, PlannedItem, RidSource};
use crate::wire::{self, Chunk, EncodeCtx, Finished, OutputMode, Sent};

/// The terminator of every `/generate` stream.
pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";

/// Steps between cooperative yields inside one chunk, so a huge `stream_interval` cannot hog a worker.
const STEPS_PER_YIELD: usize = 256;

/// Fresh request ids as SGLang makes them: `uuid.uuid4().hex`.
#[derive(Debug, Default)]
pub struct UuidRids;

impl RidSource for UuidRids {
    fn fresh_rid(&mut self) -> String {
        uuid4_hex()
    }
}

/// A random version-4 UUID as 32 lowercase hex digits. Randomness comes from the std hasher's per-process
/// random keys mixed with a counter and the clock; ids only need to be unique, not secret.
pub fn uuid4_hex() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let state = RandomState::new();
    let word = |salt: u64| {
        let mut h = state.build_hasher();
        h.write_u64(count);
        h.write_u64(nanos);
        h.write_u64(salt);
        h.finish()
    };
    let mut bits = (u128::from(word(1)) << 64) | u128::from(word(2));
    bits = (bits & !(0xf << 76)) | (0x4 << 76);
    bits = (bits & !(0x3 << 62)) | (0x2 << 62);
    format!("{bits:032x}")
}

/// Seconds since the Unix epoch, for `response_sent_to_client_ts`.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn encode_ctx<'a>(config: &ServerConfig, model: &'a Model, plan: &GeneratePlan) -> EncodeCtx<'a> {
    EncodeCtx {
        profile: config.profile,
        tokenizer: model.tokenizer(),
        return_text_in_logprobs: plan.return_text_in_logprobs,
        weight_version: wire::WEIGHT_VERSION,
    }
}

/// The finished generations of a non-stream request, one per planned item (`None` for an aborted item).
#[derive(Debug)]
pub struct Completed {
    pub generations: Vec<Option<Generation>>,
    /// Seconds from the request's arrival to each item's end.
    pub latencies: Vec<f64>,
}

/// Run every item of a plan to its end. A scheduler abort of any item fails the whole non-stream request
/// with that item's 400, as `_wait_one_response` raises it.
pub fn run_all(
    model: &Arc<Model>,
    plan: &GeneratePlan,
    started: Instant,
) -> Result<Completed, ApiError> {
    if let Some(message) = plan.items.iter().find_map(|item| item.abort.as_ref()) {
        return Err(ApiError::value(message.clone()));
    }
    let mut generations = Vec::with_capacity(plan.items.len());
    let mut latencies = Vec::with_capacity(plan.items.len());
    for item in &plan.items {
        let generation = guarded(|| {
            let mut generation = Generation::new(Arc::clone(model), item.request.clone());
            generation.run_to_end();
            generation
        })?;
        latencies.push(started.elapsed().as_secs_f64());
        generations.push(Some(generation));
    }
    Ok(Completed {
        generations,
        latencies,
    })
}

/// Run engine code so that a panic becomes a 500 instead of a dropped connection.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, ApiError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let detail = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        ApiError::internal(format!("engine panicked: {detail}"))
    })
}

/// Encode a finished non-stream request: one object, or an array for a batch.
pub fn encode_body(
    config: &ServerConfig,
    model: &Model,
    plan: &GeneratePlan,
    completed: &Completed,
) -> Result<Vec<u8>, ApiError> {
    let ctx = encode_ctx(config, model, plan);
    let ts = unix_now();
    // Sized up front so a long answer is written without regrowing (and re-copying) the buffer.
    let capacity: usize = completed
        .generations
        .iter()
        .flatten()
        .map(estimated_json_len)
        .sum();
    let mut out = Vec::with_capacity(capacity + 64);
    if plan.is_batch {
        out.push(b'[');
    }
    for (i, (item, generation)) in plan.items.iter().zip(&completed.generations).enumerate() {
        let Some(generation) = generation else {
            continue;
        };
        if config.profile == Profile::Mid && wire::has_non_finite_logprob(generation, item) {
            // MID serialises with `allow_nan=False`: a -inf logprob fails the whole response.
            return Err(ApiError::internal(
                "ValueError: Out of range float values are not JSON compliant",
            ));
        }
        if i > 0 {
            out.push(b',');
        }
        wire::encode_item(
            &mut out,
            &ctx,
            item,
            generation,
            Chunk {
                mode: OutputMode::Cumulative,
                sent: Sent::default(),
                finished: Some(Finished {
                    e2e_latency: completed.latencies[i],
                    response_sent_to_client_ts: ts,
                }),
                index: None,
            },
        );
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

/// `data: <json>\n\n`.
pub fn sse_event(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The body of a stream whose request failed validation: the error event, then `[DONE]`.
pub fn error_stream_body(err: &ApiError) -> Bytes {
    let mut out = sse_event(&err.stream_event_json()).to_vec();
    out.extend_from_slice(DONE_EVENT);
    Bytes::from(out)
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

/// SGLang's `check_match_stop_str_prefix`: a due chunk is skipped while the end of the output could be the
/// start of a stop string. Only the last few tokens are decoded, so the check stays O(1) per chunk.
fn holds_stop_prefix(generation: &Generation, item: &PlannedItem, tokenizer: &Tokenizer) -> bool {
    let stops = &item.request.params.stop;
    let longest = stops.iter().map(String::len).max().unwrap_or(0);
    if longest < 2 {
        return false;
    }
    // Every ordinary token decodes to at least one byte; the margin covers skipped special tokens.
    let ids = generation.output_ids();
    let tail_from = ids.len().saturating_sub(longest + 16);
    let tail = tokenizer.decode(&ids[tail_from..], item.request.params.skip_special_tokens);
    stops.iter().any(|stop| {
        stop.char_indices()
            .skip(1)
            .any(|(len, _)| tail.ends_with(&stop[..len]))
    })
}

/// The output mode of streamed chunks under this configuration.
pub fn stream_mode(config: &ServerConfig) -> OutputMode {
    match (config.profile, config.incremental_streaming_output) {
        (Profile::Mid, _) => OutputMode::MidDeltaIds,
        (Profile::Latest, true) => OutputMode::Incremental,
        (Profile::Latest, false) => OutputMode::Cumulative,
    }
}

struct Slot {
    generation: Option<Generation>,
    sent: Sent,
    done: bool,
}

/// The state of one streamed request; each poll produces the next chunk of the next unfinished item.
struct StreamRun<G> {
    config: Arc<ServerConfig>,
    model: Arc<Model>,
    plan: GeneratePlan,
    slots: Vec<Slot>,
    cursor: usize,
    remaining: usize,
    finished: bool,
    started: Instant,
    mode: OutputMode,
    /// Held for the life of the stream (the server's load accounting).
    _guard: G,
}

/// A lazily generated SSE body: items advance round-robin, one chunk per poll, then `data: [DONE]`.
/// Dropping the stream (a client disconnect) stops the generation.
pub fn sse_stream<G: Send + 'static>(
    config: Arc<ServerConfig>,
    model: Arc<Model>,
    plan: GeneratePlan,
    started: Instant,
    guard: G,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let slots = plan
        .items
        .iter()
        .map(|_| Slot {
            generation: None,
            sent: Sent::default(),
            done: false,
        })
        .collect();
    let run = StreamRun {
        mode: stream_mode(&config),
        remaining: plan.items.len(),
        config,
        model,
        plan,
        slots,
        cursor: 0,
        finished: false,
        started,
        _guard: guard,
    };
    futures_util::stream::unfold(run, |mut run| async move {
        if run.finished {
            return None;
        }
        if run.remaining == 0 {
            run.finished = true;
            return Some((Ok(Bytes::from_static(DONE_EVENT)), run));
        }
        let chunk = run.next_chunk().await;
        Some((Ok(chunk), run))
    })
}

impl<G> StreamRun<G> {
    async fn next_chunk(&mut self) -> Bytes {
        let n = self.slots.len();
        let mut i = self.cursor;
        while self.slots[i].done {
            i = (i + 1) % n;
        }
        self.cursor = (i + 1) % n;
        let index = self.plan.is_batch.then_some(i);
        let item = &self.plan.items[i];
        let mut json = Vec::with_capacity(512);
        let ctx = encode_ctx(&self.config, &self.model, &self.plan);

        if let Some(message) = &item.abort {
            wire::encode_aborted(
                &mut json,
                &ctx,
                item,
                message,
                Finished {
                    e2e_latency: self.started.elapsed().as_secs_f64(),
                    response_sent_to_client_ts: unix_now(),
                },
                index,
            );
            self.slots[i].done = true;
            self.remaining -= 1;
            return sse_event(&json);
        }

        let slot = &mut self.slots[i];
        if slot.generation.is_none() {
            let model = Arc::clone(&self.model);
            let request = item.request.clone();
            match guarded(move || Generation::new(model, request)) {
                Ok(generation) => slot.generation = Some(generation),
                Err(err) => {
                    slot.done = true;
                    self.remaining -= 1;
                    tracing::error!(rid = %item.rid, error = %err, "generation failed");
                    return sse_event(&err.stream_event_json());
                }
            }
        }
        if let Some(generation) = slot.generation.as_mut() {
            let mut steps = 0;
            while !generation.is_finished() {
                match guarded(|| generation.step()) {
                    Ok(true) => break,
                    Ok(false) => {
                        if chunk_due(generation.output_ids().len(), item.stream_interval)
                            && !holds_stop_prefix(generation, item, self.model.tokenizer())
                        {
                            break;
                        }
                    }
                    Err(err) => {
                        slot.done = true;
                        self.remaining -= 1;
                        tracing::error!(rid = %item.rid, error = %err, "generation failed");
                        return sse_event(&err.stream_event_json());
                    }
                }
                steps += 1;
                if steps % STEPS_PER_YIELD == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
        let Some(generation) = slot.generation.as_ref() else {
            return Bytes::new();
        };
        let finished = generation.is_finished().then(|| Finished {
            e2e_latency: self.started.elapsed().as_secs_f64(),
            response_sent_to_client_ts: unix_now(),
        });
        wire::encode_item(
            &mut json,
            &ctx,
            item,
            generation,
            Chunk {
                mode: self.mode,
                sent: slot.sent,
                finished,
                index,
            },
        );
        slot.sent = Sent {
            ids: generation.output_ids().len(),
            text_bytes: generation.text().len(),
        };
        if finished.is_some() {
            slot.done = true;
            self.remaining -= 1;
            tracing::debug!(
                rid = %item.rid,
                completion_tokens = generation.output_ids().len(),
                "stream item finished"
            );
        }
        sse_event(&json)
    }
}
