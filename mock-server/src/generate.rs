//! Running a planned `/generate` request on the engine: whole bodies for non-stream requests, and lazily
//! generated SSE byte streams that advance one emission point per poll.

use std::collections::hash_map::RandomState;
use std::convert::Infallible;
use std::hash::{BuildHasher, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::Stream;

use crate::config::{Profile, ServerConfig};
use crate::control::{Admission, Control, CtlHandle, RequestCtl, RunTicket};
use crate::engine::Generation;
use crate::error::ApiError;
use crate::latency::LatencyConfig;
use crate::metrics::Metrics;
use crate::model::{Model, mix};
use crate::request::{GeneratePlan, PlannedItem, RidSource};
use crate::wire::{self, Chunk, EncodeCtx, Finished, OutputMode, Sent, WaitingAbort};

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

fn encode_ctx<'a>(
    config: &ServerConfig,
    model: &'a Model,
    plan: &GeneratePlan,
    weight_version: &'a str,
) -> EncodeCtx<'a> {
    EncodeCtx {
        profile: config.profile,
        tokenizer: model.tokenizer(),
        return_text_in_logprobs: plan.return_text_in_logprobs,
        weight_version,
    }
}

/// The finished generations of a non-stream request, one per planned item (`None` for an aborted item).
#[derive(Debug)]
pub struct Completed {
    pub generations: Vec<Option<Generation>>,
    /// Seconds from the request's arrival to each item's end.
    pub latencies: Vec<f64>,
    /// How often each item was retracted by a `retract` pause.
    pub retractions: Vec<u32>,
}

/// Run every item of a plan to its end, synchronously and without control-plane checks (the oracle's path).
/// A scheduler abort of any item fails the whole non-stream request with that item's 400, as
/// `_wait_one_response` raises it.
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
        retractions: vec![0; generations.len()],
        generations,
        latencies,
    })
}

/// What a request's run needs besides its plan: the model, and the server's control plane, latency model and
/// metrics (all absent for the oracle, which runs without them).
#[derive(Clone, Debug)]
pub struct RunCtx {
    pub config: Arc<ServerConfig>,
    pub model: Arc<Model>,
    pub started: Instant,
    /// The server's control plane and this request's abort flags.
    pub control: Option<(Arc<Control>, Arc<RequestCtl>)>,
    pub latency: LatencyConfig,
    /// The `abort-running` fault: abort each item after this many output tokens.
    pub abort_after: Option<usize>,
    pub weight_version: Arc<str>,
    pub metrics: Option<Arc<Metrics>>,
}

impl RunCtx {
    /// A run without control plane, latency or metrics (the oracle's).
    pub fn plain(config: Arc<ServerConfig>, model: Arc<Model>, started: Instant) -> RunCtx {
        let weight_version = Arc::from(config.weight_version.as_str());
        RunCtx {
            config,
            model,
            started,
            control: None,
            latency: LatencyConfig::default(),
            abort_after: None,
            weight_version,
            metrics: None,
        }
    }

    fn encode_ctx<'a>(&'a self, plan: &GeneratePlan) -> EncodeCtx<'a> {
        encode_ctx(&self.config, &self.model, plan, &self.weight_version)
    }

    fn abort_message(&self) -> &'static str {
        match &self.control {
            Some((control, _)) => control.abort_message(),
            None => "Aborted",
        }
    }

    /// Whether item `i` must stop now: aborted through the control plane or by the `abort-running` fault.
    #[inline]
    fn must_abort(&self, i: usize, generation: &Generation) -> bool {
        self.control
            .as_ref()
            .is_some_and(|(_, ctl)| ctl.any_aborted() && ctl.is_aborted(i))
            || self
                .abort_after
                .is_some_and(|after| generation.output_ids().len() >= after)
    }

    /// Sleep for `delay`, waking early if the request is aborted.
    async fn sleep(&self, delay: Duration) {
        if delay.is_zero() {
            return;
        }
        match &self.control {
            Some((_, ctl)) => {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = ctl.aborted() => {}
                }
            }
            None => tokio::time::sleep(delay).await,
        }
    }

    /// Wait while generation is paused (retract / in_place); returns at once otherwise. Returns whether the
    /// pause retracted the request.
    async fn wait_if_paused(&self) -> bool {
        match &self.control {
            Some((control, ctl)) if control.is_paused() => control.wait_unpaused(ctl).await,
            _ => false,
        }
    }

    fn record(&self, generation: &Generation, ttft: Option<f64>, e2e: f64) {
        if let Some(metrics) = &self.metrics {
            metrics.record_sample(
                generation.prompt_tokens(),
                generation.output_ids().len(),
                ttft.unwrap_or(e2e),
                e2e,
            );
        }
    }
}

/// A stable per-item key for the latency jitter.
fn latency_key(item: &PlannedItem) -> u64 {
    item.rid
        .bytes()
        .fold(item.request.sample_index, |h, b| mix(h, u64::from(b)))
}

/// Run every item of a plan to its end on the server: items advance together one token per tick, and between
/// ticks the run observes aborts and pauses (a relaxed atomic load each) and sleeps when latency is configured.
/// Without latency it only yields to the runtime now and then, so a long answer costs what it did synchronously.
pub async fn run_items(run: &RunCtx, plan: &GeneratePlan) -> Result<Completed, ApiError> {
    if let Some(message) = plan.items.iter().find_map(|item| item.abort.as_ref()) {
        return Err(ApiError::value(message.clone()));
    }
    let n = plan.items.len();
    let mut generations = Vec::with_capacity(n);
    for item in &plan.items {
        let model = Arc::clone(&run.model);
        let request = item.request.clone();
        generations.push(guarded(move || Generation::new(model, request))?);
    }
    let mut latencies = vec![0.0; n];
    let mut ttfts: Vec<Option<f64>> = vec![None; n];
    let mut retractions = vec![0u32; n];
    let timed = run.latency.is_active();
    if timed {
        let ttft = plan
            .items
            .iter()
            .map(|item| {
                run.latency
                    .ttft(latency_key(item), item.request.input_ids.len())
            })
            .max()
            .unwrap_or_default();
        run.sleep(ttft).await;
    }
    let mut tick = 0usize;
    let mut steps = 0usize;
    loop {
        let mut unfinished = 0;
        for (i, generation) in generations.iter_mut().enumerate() {
            if generation.is_finished() {
                continue;
            }
            if run.must_abort(i, generation) {
                generation.abort(run.abort_message(), None, None);
            } else {
                guarded(|| generation.step())?;
            }
            if ttfts[i].is_none() && !generation.output_ids().is_empty() {
                ttfts[i] = Some(run.started.elapsed().as_secs_f64());
            }
            if generation.is_finished() {
                latencies[i] = run.started.elapsed().as_secs_f64();
            } else {
                unfinished += 1;
            }
            // Counted in tokens, not ticks, so that a wide batch cannot hog its worker thread either.
            steps += 1;
            if !timed && steps.is_multiple_of(STEPS_PER_YIELD) {
                tokio::task::yield_now().await;
            }
        }
        if unfinished == 0 {
            break;
        }
        tick += 1;
        if run.wait_if_paused().await {
            for (i, generation) in generations.iter().enumerate() {
                if !generation.is_finished() {
                    retractions[i] += 1;
                }
            }
        }
        if timed {
            let delay = plan
                .items
                .iter()
                .map(|item| run.latency.itl(latency_key(item), tick))
                .max()
                .unwrap_or_default();
            run.sleep(delay).await;
        }
    }
    for (i, generation) in generations.iter().enumerate() {
        run.record(generation, ttfts[i], latencies[i]);
    }
    Ok(Completed {
        generations: generations.into_iter().map(Some).collect(),
        latencies,
        retractions,
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
    weight_version: &str,
) -> Result<Vec<u8>, ApiError> {
    let ctx = encode_ctx(config, model, plan, weight_version);
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
                num_retractions: completed.retractions.get(i).copied().unwrap_or(0),
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
    ttft: Option<f64>,
    retractions: u32,
}

/// Where a stream stands before its first chunk.
enum Admit {
    /// Not yet asked (the server's control plane decides when the request may run).
    Pending(Arc<Control>, CtlHandle),
    /// Running; the ticket and the registration are held until the stream ends.
    Running {
        _held: Option<(RunTicket, CtlHandle)>,
    },
}

/// The state of one streamed request; each poll produces the next chunk of the next unfinished item.
struct StreamRun<G> {
    run: RunCtx,
    plan: GeneratePlan,
    slots: Vec<Slot>,
    cursor: usize,
    remaining: usize,
    finished: bool,
    mode: OutputMode,
    admit: Admit,
    /// Chunks that end the stream early (an abort in the waiting queue or a refusal), sent before `[DONE]`.
    preamble: Vec<Bytes>,
    /// Held for the life of the stream (the server's load accounting).
    _guard: G,
}

/// A lazily generated SSE body: items advance round-robin, one chunk per poll, then `data: [DONE]`.
/// Dropping the stream (a client disconnect) stops the generation.
///
/// With `admission`, the stream first waits for the control plane's permission to run (the HTTP headers are
/// already out, as with SGLang's `StreamingResponse`); an abort or a full queue then ends it with the
/// waiting-queue abort chunk of every item.
pub fn sse_stream<G: Send + 'static>(
    run: RunCtx,
    plan: GeneratePlan,
    admission: Option<(Arc<Control>, CtlHandle)>,
    guard: G,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let slots = plan
        .items
        .iter()
        .map(|_| Slot {
            generation: None,
            sent: Sent::default(),
            done: false,
            ttft: None,
            retractions: 0,
        })
        .collect();
    let admit = match admission {
        Some((control, handle)) => Admit::Pending(control, handle),
        None => Admit::Running { _held: None },
    };
    let state = StreamRun {
        mode: stream_mode(&run.config),
        remaining: plan.items.len(),
        run,
        plan,
        slots,
        cursor: 0,
        finished: false,
        admit,
        preamble: Vec::new(),
        _guard: guard,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        if state.finished {
            return None;
        }
        if let Admit::Pending(..) = state.admit {
            state.admit_now().await;
        }
        if let Some(chunk) = state.preamble.pop() {
            return Some((Ok(chunk), state));
        }
        if state.remaining == 0 {
            state.finished = true;
            return Some((Ok(Bytes::from_static(DONE_EVENT)), state));
        }
        let chunk = state.next_chunk().await;
        Some((Ok(chunk), state))
    })
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
            wire::encode_waiting_abort(&mut json, ctx, item, reason, e2e_latency, index);
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

impl<G> StreamRun<G> {
    async fn admit_now(&mut self) {
        let Admit::Pending(control, handle) =
            std::mem::replace(&mut self.admit, Admit::Running { _held: None })
        else {
            return;
        };
        let reason = match control.admit(&handle).await {
            Admission::Run(ticket) => {
                self.run.weight_version = control.weight_version();
                self.admit = Admit::Running {
                    _held: Some((ticket, handle)),
                };
                return;
            }
            Admission::QueueFull => WaitingAbort::Refused {
                status_code: 503,
                message: QUEUE_FULL_MESSAGE,
            },
            Admission::AbortedWaiting => WaitingAbort::Aborted,
        };
        if let Some(metrics) = &self.run.metrics {
            metrics
                .aborted_requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let ctx = self.run.encode_ctx(&self.plan);
        let e2e = self.run.started.elapsed().as_secs_f64();
        let mut chunks: Vec<Bytes> = waiting_abort_objects(&ctx, &self.plan, reason, e2e, true)
            .iter()
            .map(|json| sse_event(json))
            .collect();
        chunks.reverse();
        self.preamble = chunks;
        self.remaining = 0;
    }

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
        let run = &self.run;

        if let Some(message) = &item.abort {
            let ctx = run.encode_ctx(&self.plan);
            wire::encode_aborted(
                &mut json,
                &ctx,
                item,
                message,
                Finished {
                    e2e_latency: run.started.elapsed().as_secs_f64(),
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
            let model = Arc::clone(&run.model);
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
        let timed = run.latency.is_active();
        if let Some(generation) = slot.generation.as_mut() {
            let mut steps = 0;
            while !generation.is_finished() {
                if run.must_abort(i, generation) {
                    generation.abort(run.abort_message(), None, None);
                    break;
                }
                if run.wait_if_paused().await {
                    slot.retractions += 1;
                }
                if run.must_abort(i, generation) {
                    generation.abort(run.abort_message(), None, None);
                    break;
                }
                if timed {
                    let produced = generation.output_ids().len();
                    let delay = if produced == 0 {
                        run.latency
                            .ttft(latency_key(item), item.request.input_ids.len())
                    } else {
                        run.latency.itl(latency_key(item), produced)
                    };
                    run.sleep(delay).await;
                    if run.must_abort(i, generation) {
                        generation.abort(run.abort_message(), None, None);
                        break;
                    }
                }
                match guarded(|| generation.step()) {
                    Ok(true) => break,
                    Ok(false) => {
                        if slot.ttft.is_none() {
                            slot.ttft = Some(run.started.elapsed().as_secs_f64());
                        }
                        if chunk_due(generation.output_ids().len(), item.stream_interval)
                            && !generation.holds_stop_prefix()
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
            e2e_latency: run.started.elapsed().as_secs_f64(),
            response_sent_to_client_ts: unix_now(),
        });
        let ctx = run.encode_ctx(&self.plan);
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
                num_retractions: slot.retractions,
            },
        );
        slot.sent = Sent {
            ids: generation.output_ids().len(),
            text_bytes: generation.text().len(),
        };
        if let Some(finished) = finished {
            slot.done = true;
            self.remaining -= 1;
            run.record(generation, slot.ttft, finished.e2e_latency);
            tracing::debug!(
                rid = %item.rid,
                completion_tokens = generation.output_ids().len(),
                "stream item finished"
            );
        }
        sse_event(&json)
    }
}

/// The message of SGLang's `--max-queued-requests` refusal.
pub const QUEUE_FULL_MESSAGE: &str = "The request queue is full.";

/// Faults applied to a finished non-stream body or to the events of a stream.
pub mod stream_faults {
    use std::convert::Infallible;
    use std::time::Duration;

    use axum::response::{IntoResponse, Response};
    use bytes::Bytes;
    use futures_util::{Stream, StreamExt};

    use super::{DONE_EVENT, sse_event};
    use crate::error::ApiError;
    use crate::fault::{self, Fault, FaultKind};

    /// How a route writes its answers, for the faults that rewrite them.
    #[derive(Debug, Clone, Copy)]
    pub struct Format {
        /// A body or one stream event (JSON) under a body fault.
        pub mutate: fn(&Fault, &[u8]) -> Vec<u8>,
        /// The JSON of the event that `error-event` sends, from its message.
        pub error_event: fn(&str) -> Vec<u8>,
    }

    /// `/generate`'s answers: body faults splice SGLang's objects; the error event is `{"error":{"message"}}`,
    /// as SGLang's `stream_results` writes a `ValueError`.
    pub const NATIVE: Format = Format {
        mutate: fault::mutate_body,
        error_event: native_error_event,
    };

    fn native_error_event(message: &str) -> Vec<u8> {
        ApiError::value(message).stream_event_json()
    }

    /// The non-stream body under `fault`: mutated, cut, or sent after a stall. A stream-only fault on a
    /// non-stream request is a 400 that says so. Faults that act elsewhere leave the body alone.
    pub async fn non_stream_body(
        fault: &Fault,
        body: Vec<u8>,
        format: Format,
    ) -> Result<Vec<u8>, Response> {
        match fault.kind {
            kind if fault::is_body_fault(kind) => Ok((format.mutate)(fault, &body)),
            FaultKind::TruncatedBody => {
                let keep = fault.u64("keep", body.len() as u64 / 2) as usize;
                Ok(body[..keep.min(body.len().saturating_sub(1))].to_vec())
            }
            FaultKind::Stall => {
                tokio::time::sleep(Duration::from_millis(fault.u64("ms", 0))).await;
                Ok(body)
            }
            FaultKind::TruncateStream
            | FaultKind::CutStream
            | FaultKind::MalformedChunk
            | FaultKind::DuplicateChunk
            | FaultKind::ErrorEvent => Err(ApiError::Http {
                status: 400,
                message: format!(
                    "fault {} only applies to streamed requests (\"stream\": true)",
                    fault.kind
                ),
            }
            .into_response()),
            _ => Ok(body),
        }
    }

    struct State<S> {
        inner: std::pin::Pin<Box<S>>,
        fault: Fault,
        format: Format,
        /// Data events passed on so far.
        sent: u64,
        queued: Vec<Result<Bytes, std::io::Error>>,
        over: bool,
    }

    fn broken() -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "stream cut by the `cut-stream` fault",
        )
    }

    /// The events of `inner` under a stream or body fault, written in `format`. Faults that act elsewhere pass
    /// the events on unchanged.
    pub fn apply<S>(
        inner: S,
        fault: Fault,
        format: Format,
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static
    where
        S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
    {
        let state = State {
            inner: Box::pin(inner),
            fault,
            format,
            sent: 0,
            queued: Vec::new(),
            over: false,
        };
        futures_util::stream::unfold(state, |mut st| async move {
            if let Some(item) = st.queued.pop() {
                if item.is_err() {
                    // Let the server flush what it has before the connection breaks.
                    tokio::task::yield_now().await;
                }
                return Some((item, st));
            }
            if st.over {
                return None;
            }
            let Some(Ok(event)) = st.inner.next().await else {
                return None;
            };
            let is_done = &event[..] == DONE_EVENT;
            let f = &st.fault;
            if f.kind == FaultKind::Stall {
                tokio::time::sleep(Duration::from_millis(f.u64("ms", 0))).await;
            }
            if is_done {
                return Some((Ok(event), st));
            }
            let n = st.sent;
            st.sent += 1;
            let out = match f.kind {
                kind if fault::is_body_fault(kind) => {
                    let json = &event[b"data: ".len()..event.len() - 2];
                    if json.starts_with(br#"{"error""#) {
                        event
                    } else {
                        sse_event(&(st.format.mutate)(f, json))
                    }
                }
                FaultKind::TruncatedBody => {
                    st.over = true;
                    st.queued.push(Err(broken()));
                    event.slice(..event.len() / 2)
                }
                FaultKind::TruncateStream | FaultKind::CutStream | FaultKind::ErrorEvent
                    if n >= f.u64("after", 1) =>
                {
                    st.over = true;
                    match f.kind {
                        FaultKind::TruncateStream => return None,
                        FaultKind::CutStream => {
                            // Let the server flush what it has before the connection breaks.
                            tokio::task::yield_now().await;
                            return Some((Err(broken()), st));
                        }
                        _ => {
                            let message = f
                                .str("message")
                                .unwrap_or("Internal server error (injected mid-stream).");
                            st.queued.push(Ok(Bytes::from_static(DONE_EVENT)));
                            (st.format.error_event)(message).into()
                        }
                    }
                }
                FaultKind::MalformedChunk if n == f.u64("at", 0) => {
                    let json = &event[b"data: ".len()..event.len() - 2];
                    let mut broken_json = json[..json.len() / 2].to_vec();
                    broken_json.extend_from_slice(b"\"}");
                    sse_event(&broken_json)
                }
                FaultKind::DuplicateChunk if n == f.u64("at", 0) => {
                    st.queued.push(Ok(event.clone()));
                    event
                }
                _ => event,
            };
            // An error event is framed here; everything else already is.
            let out = if out.starts_with(b"data: ") {
                out
            } else {
                sse_event(&out)
            };
            Some((Ok(out), st))
        })
    }
}
