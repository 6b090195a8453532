//! The server's two drivers of the engine's step core ([`Run`]): a non-stream request run to its end, and a
//! lazily generated SSE stream that advances its run one tick per poll until a chunk is due. They add only
//! what the engine does not know: waiting while generation is paused (counted as a retraction in `retract`
//! mode), the latency model, the control plane's aborts, metrics, and yields to the runtime.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::Stream;

use super::metrics::Metrics;
use super::witness::Witness;
use crate::batch::{Batcher, Grant, Lane};
use crate::control::{Admission, Control, CtlHandle, QUEUE_FULL_MESSAGE, RequestCtl, RunTicket};
use crate::error::ApiError;
use mock_core::LatencyConfig;
use mock_core::ServerConfig;
use mock_core::engine::{
    GeneratePlan, Occupancy, Outside, PlannedItem, Progress, Run, SeqSpec, SharedCache, Turn,
};
use mock_core::model::{Model, mix};
use mock_core::wire::{
    self, DONE_EVENT, EncodeCtx, Finished, NeverRan, StreamEncoder, VersionEvent, WaitingAbort,
};

/// Steps between cooperative yields, so a long answer or a wide batch cannot hog a worker thread.
const STEPS_PER_YIELD: usize = 256;

/// Seconds since the Unix epoch, for `response_sent_to_client_ts`.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// What a request's run needs besides its plan: the model, and the server's control plane, latency model
/// and metrics.
#[derive(Clone, Debug)]
pub(crate) struct RunCtx {
    pub config: Arc<ServerConfig>,
    pub model: Arc<Model>,
    pub started: Instant,
    pub control: Arc<Control>,
    /// This request's abort flags.
    pub ctl: Arc<RequestCtl>,
    pub latency: LatencyConfig,
    /// The `abort-running` fault: abort each item after this many output tokens.
    pub abort_after: Option<usize>,
    /// The weight version now, and the updates each item lived through.
    pub versions: VersionLog,
    pub metrics: Arc<Metrics>,
    /// Where a stream's items are recorded as they end, with the server's ledger on.
    pub witness: Option<Witness>,
    /// The server's prefix cache, unless `--disable-radix-cache`.
    pub cache: Option<SharedCache>,
    /// The server's occupancy board, which the run reports to (through the batch loop, when there is one).
    pub occupancy: Arc<Occupancy>,
    /// The batch loop, when the server's KV pool is bounded (`--max-total-tokens`): it decides when each
    /// item steps.
    pub batcher: Option<Arc<Batcher>>,
}

/// The weight versions of a run: the version now, and for each item the version changes while it was live
/// with output (`record_weight_version_events` in `srt/utils/weight_versions.py`, 0.5.23). A version changes
/// during a run by `/update_weight_version`, or by a weight update while generation is paused; the drivers
/// look before every tick.
#[derive(Clone, Debug)]
pub(crate) struct VersionLog {
    pub current: Arc<str>,
    /// The number of the weights that serve now (`Control::weights`): an update that keeps the version string
    /// changes only this, which the ledger's spans record and the wire's do not.
    pub weights: u64,
    /// The control plane's version epoch `current` was read at.
    epoch: u64,
    /// Empty until a version changes during the run; then one list per item.
    pub events: Vec<Vec<VersionEvent>>,
}

impl VersionLog {
    pub(crate) fn new(control: &Control) -> VersionLog {
        let epoch = control.version_epoch();
        VersionLog {
            current: control.weight_version(),
            weights: control.weights(),
            epoch,
            events: Vec::new(),
        }
    }

    /// The weights that serve now: their version and number.
    pub(crate) fn now(&self) -> (&str, u64) {
        (&self.current, self.weights)
    }

    /// Reads the version if it has changed since the last look; each unfinished item with output then records
    /// how many tokens the old version made.
    fn observe(&mut self, control: &Control, run: &Run) {
        let epoch = control.version_epoch();
        if epoch == self.epoch {
            return;
        }
        self.epoch = epoch;
        let now = control.weight_version();
        let weights = control.weights();
        if *now == *self.current && weights == self.weights {
            return;
        }
        let items = run.progress().len();
        self.events.resize_with(items, Vec::new);
        for (i, events) in self.events.iter_mut().enumerate() {
            let Some(generation) = run.generation(i) else {
                continue;
            };
            let tokens = generation.output_ids().len();
            if tokens > 0 && generation.finish_reason().is_none() {
                events.push(VersionEvent {
                    old_version: Arc::clone(&self.current),
                    old_weights: self.weights,
                    tokens,
                });
            }
        }
        self.current = now;
        self.weights = weights;
    }
}

/// The control plane's aborts, as the step core asks for them before every step, and its pauses, which
/// end a run of ticks so that the driver waits them out.
struct ControlAborts<'a> {
    ctl: &'a RequestCtl,
    control: &'a Control,
    /// The version epoch the tick's output reports ([`VersionLog`]).
    epoch: u64,
    /// What the batch loop's grant says each item does in this tick (every item steps without one).
    turns: Option<&'a [Turn]>,
}

impl Outside for ControlAborts<'_> {
    #[inline]
    fn aborted(&self, item: usize, _tick: usize) -> bool {
        // An abort that came with a new weight version (`/update_weight_version` with `abort_all_requests` sets
        // the version, then aborts) lands on the next tick, which reports that version: whichever way the two
        // race the tick, the step the abort lets run makes its token under the new version (as SGLang's, whose
        // scheduler reads the abort one step later).
        self.ctl.any_aborted()
            && self.ctl.is_aborted(item)
            && self.control.version_epoch() == self.epoch
    }

    #[inline]
    fn holds(&self) -> bool {
        self.control.is_paused()
    }

    #[inline]
    fn turn(&self, item: usize) -> Turn {
        self.turns
            .and_then(|turns| turns.get(item).copied())
            .unwrap_or(Turn::Step)
    }
}

/// When each item produced its first token and when it ended, in seconds since the request arrived.
#[derive(Debug)]
struct Timings {
    ttft: Vec<Option<f64>>,
    e2e: Vec<f64>,
}

impl Timings {
    fn new(items: usize) -> Timings {
        Timings {
            ttft: vec![None; items],
            e2e: vec![0.0; items],
        }
    }

    /// Stamps the items the last tick started or ended, with the time since `started`.
    fn observe(&mut self, run: &Run, started: Instant) {
        let mut now = None;
        self.stamp(run, || {
            *now.get_or_insert_with(|| started.elapsed().as_secs_f64())
        });
    }

    /// Stamps the items the last tick started or ended at `seconds` (the logical clock's).
    fn observe_at(&mut self, run: &Run, seconds: f64) {
        self.stamp(run, || seconds);
    }

    fn stamp(&mut self, run: &Run, mut now: impl FnMut() -> f64) {
        for (i, progress) in run.progress().iter().enumerate() {
            if matches!(progress, Progress::Stepped | Progress::Finished) && self.ttft[i].is_none()
            {
                self.ttft[i] = Some(now());
            }
            if matches!(
                progress,
                Progress::Finished | Progress::Rejected | Progress::Failed
            ) {
                self.e2e[i] = now();
            }
        }
    }
}

impl RunCtx {
    fn encode_ctx<'a>(&'a self, plan: &GeneratePlan) -> EncodeCtx<'a> {
        EncodeCtx::new(
            self.config.sglang_version,
            &self.model,
            plan,
            &self.versions.current,
        )
        .with_version_events(&self.versions.events)
    }

    /// Starts the run of `plan`, and joins the batch loop's queue with it when the server has one.
    fn start(&self, plan: &GeneratePlan) -> (Run, Option<Lane>) {
        let run = self.start_run(plan);
        let lane = self.join(&run, plan);
        (run, lane)
    }

    fn start_run(&self, plan: &GeneratePlan) -> Run {
        let rules = self.config.sglang_version.cache_inserts;
        // With a batch loop, the loop puts the run's items on the board as it schedules them.
        let board = self.batcher.is_none().then_some(&self.occupancy);
        let run = Run::new(&self.model, plan, self.abort_after)
            .with_cache(self.cache.as_ref(), rules, plan)
            .with_occupancy(board);
        if self.cache.is_none() {
            return run;
        }
        let running = || (0..plan.items.len()).filter_map(|i| Some((i, run.generation(i)?)));
        let hits = running().map(|(i, _)| run.cached_tokens(i)).sum();
        let prompts = running().map(|(_, g)| g.prompt_tokens()).sum();
        self.metrics.record_prefill(hits, prompts);
        run
    }

    /// The run's place in the batch loop: every generating item a sample of the scheduler's (`None` without a
    /// loop, or when no item generates).
    fn join(&self, run: &Run, plan: &GeneratePlan) -> Option<Lane> {
        let batcher = self.batcher.as_ref()?;
        let specs: Vec<Option<SeqSpec>> = (0..plan.items.len())
            .map(|i| {
                let generation = run.generation(i)?;
                let params = &plan.items[i].request.params;
                Some(SeqSpec {
                    prompt: generation.prompt_tokens(),
                    cached: run.cached_tokens(i),
                    max_new: params.max_new_tokens as usize,
                    ignore_eos: params.ignore_eos,
                })
            })
            .collect();
        if specs.iter().all(Option::is_none) {
            return None;
        }
        let uncached = specs.iter().flatten().map(|s| s.prompt - s.cached).sum();
        self.occupancy.prefilled(uncached);
        Some(batcher.join(Arc::clone(&self.ctl), specs))
    }

    /// One tick as the batch loop grants it: its retractions first, then the items it lets step; the grant is
    /// answered with the items the tick ended.
    fn granted_tick(&mut self, run: &mut Run, timings: &mut Timings, grant: Grant) {
        self.versions.observe(&self.control, run);
        run.retract_items(&grant.retracted);
        let outside = ControlAborts {
            turns: Some(&grant.turns),
            ..self.outside()
        };
        run.tick(&outside);
        match grant.elapsed {
            Some(seconds) => timings.observe_at(run, seconds),
            None => timings.observe(run, self.started),
        }
        let ended = run
            .progress()
            .iter()
            .enumerate()
            .filter(|(_, p)| !matches!(p, Progress::Idle | Progress::Stepped))
            .map(|(i, _)| i)
            .collect();
        grant.done(ended);
    }

    /// What happens between ticks: wait while paused (a `retract` pause counts against every unfinished
    /// item), then the latency model's delay before the tick (time to first token, then inter-token).
    async fn before_tick(&mut self, run: &mut Run, plan: &GeneratePlan) {
        if self.control.is_paused() {
            // A `retract` pause sends the unfinished items back to the queue while it lasts.
            run.set_retracted(self.control.is_retracting());
            if self.control.wait_unpaused(&self.ctl).await {
                run.retract();
            }
            run.set_retracted(false);
        }
        self.versions.observe(&self.control, run);
        if self.latency.is_active() {
            let tick = run.ticks();
            let delay = plan
                .items
                .iter()
                .map(|item| match tick {
                    0 => self
                        .latency
                        .ttft(latency_key(item), item.request.input_ids.len()),
                    _ => self.latency.itl(latency_key(item), tick),
                })
                .max()
                .unwrap_or_default();
            self.sleep(delay).await;
        }
    }

    fn outside(&self) -> ControlAborts<'_> {
        ControlAborts {
            ctl: &self.ctl,
            control: &self.control,
            epoch: self.versions.epoch,
            turns: None,
        }
    }

    /// One tick of the run, then the timings of what it started and ended.
    fn tick(&self, run: &mut Run, timings: &mut Timings) {
        run.tick(&self.outside());
        timings.observe(run, self.started);
    }

    /// Up to `max` ticks without returning to the runtime between them ([`Run::tick_many`]), then the timings
    /// of what the last one started and ended. Returns the number of item reports, as the yield budget counts.
    fn ticks(&self, run: &mut Run, timings: &mut Timings, max: usize) -> usize {
        let steps = run.tick_many(&self.outside(), max);
        timings.observe(run, self.started);
        steps
    }

    /// Sleep for `delay`, waking early if the request is aborted.
    async fn sleep(&self, delay: Duration) {
        if delay.is_zero() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = self.ctl.aborted() => {}
        }
    }

    fn record(&self, run: &Run, i: usize, timings: &Timings) {
        if let Some(generation) = run.generation(i) {
            let e2e = timings.e2e[i];
            let ttft = timings.ttft[i].unwrap_or(e2e);
            self.metrics.record_sample(
                generation.prompt_tokens(),
                generation.output_ids().len(),
                run.cached_tokens(i),
                ttft,
                e2e,
            );
        }
    }
}

/// Counts steps and yields to the runtime every [`STEPS_PER_YIELD`] of them when no latency makes the run
/// sleep anyway.
#[derive(Debug, Default)]
struct Yielder {
    steps: usize,
}

impl Yielder {
    /// Ticks a driver may run in a row before its next yield, for `items` items stepping each tick.
    fn budget(&self, items: usize) -> usize {
        (STEPS_PER_YIELD.saturating_sub(self.steps) / items.max(1)).max(1)
    }

    /// Counts `steps` item reports and yields once they reach [`STEPS_PER_YIELD`].
    async fn count(&mut self, steps: usize) {
        self.steps += steps;
        if self.steps >= STEPS_PER_YIELD {
            self.steps = 0;
            tokio::task::yield_now().await;
        }
    }

    /// Counts the last tick's item reports, unless the latency model makes the run sleep anyway.
    async fn after(&mut self, run: &Run, timed: bool) {
        if !timed {
            let reports = run.progress().iter().filter(|p| **p != Progress::Idle);
            self.count(reports.count()).await;
        }
    }
}

/// A stable per-item key for the latency jitter.
fn latency_key(item: &PlannedItem) -> u64 {
    item.rid
        .bytes()
        .fold(item.request.sample_index, |h, b| mix(h, u64::from(b)))
}

/// A non-stream request that ran to its end: what a route encodes as its body.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) run: Run,
    /// Each item's `e2e_latency`.
    pub(crate) e2e: Vec<f64>,
    /// The `response_sent_to_client_ts` of every item.
    pub(crate) sent_ts: f64,
    /// The versions the answer reports: the one at the end (a request held back by a weight update reports
    /// the new one), and the updates each item lived through.
    pub(crate) versions: VersionLog,
}

impl Ran {
    /// The context to encode this run's answer with.
    pub(crate) fn encode_ctx<'a>(
        &'a self,
        config: &ServerConfig,
        model: &'a Model,
        plan: &GeneratePlan,
    ) -> EncodeCtx<'a> {
        EncodeCtx::new(config.sglang_version, model, plan, &self.versions.current)
            .with_version_events(&self.versions.events)
    }
}

/// Runs a non-stream request to its end. A scheduler rejection of any item fails the whole request with that
/// item's 400, as `_wait_one_response` raises it; an engine panic is a 500. `None`: every item was aborted in
/// the batch loop's waiting queue before any ran.
pub(crate) async fn run_to_end(
    mut ctx: RunCtx,
    plan: &GeneratePlan,
) -> Result<Option<Ran>, ApiError> {
    if let Some(message) = plan.rejection() {
        return Err(ApiError::value(message));
    }
    // Admitted now: the version a request held at the gate runs under.
    ctx.versions = VersionLog::new(&ctx.control);
    let (mut run, mut lane) = ctx.start(plan);
    let mut timings = Timings::new(plan.items.len());
    let mut yielder = Yielder::default();
    let timed = ctx.latency.is_active();
    while !run.is_done() {
        if let Some(scheduled) = lane.as_mut() {
            match scheduled.next().await {
                Some(grant) if grant.never_ran => {
                    grant.done((0..plan.items.len()).collect());
                    return Ok(None);
                }
                Some(grant) => ctx.granted_tick(&mut run, &mut timings, grant),
                // The loop never ends while the server runs; without it the run goes on alone.
                None => lane = None,
            }
            if let Some(err) = run.first_failure() {
                return Err(err.clone().into());
            }
            continue;
        }
        ctx.before_tick(&mut run, plan).await;
        if timed {
            // The latency model sleeps before every tick.
            ctx.tick(&mut run, &mut timings);
        } else {
            let steps = ctx.ticks(&mut run, &mut timings, yielder.budget(plan.items.len()));
            yielder.count(steps).await;
        }
        if let Some(err) = run.first_failure() {
            return Err(err.clone().into());
        }
    }
    for i in 0..plan.items.len() {
        ctx.record(&run, i, &timings);
    }
    Ok(Some(Ran {
        run,
        e2e: timings.e2e,
        sent_ts: unix_now(),
        versions: ctx.versions,
    }))
}

/// How a route writes the events of a stream: the server's stream driver advances the run and asks it for
/// the events due after each tick. `/generate` writes SGLang's native chunks ([`NativeEvents`]); the OpenAI
/// routes write OpenAI chunks from the same typed state.
pub(crate) trait Events: Send + 'static {
    /// The events due after a tick with `run.progress()`; `finished(i)` times item `i`'s final chunk.
    fn after_tick(
        &mut self,
        ctx: &EncodeCtx<'_>,
        plan: &GeneratePlan,
        run: &Run,
        finished: &mut dyn FnMut(usize) -> Finished,
        out: &mut VecDeque<Bytes>,
    );

    /// The events of a request whose items never ran (aborted in the waiting queue, refused by a full
    /// queue, or aborted before prefill).
    fn never_ran(
        &mut self,
        ctx: &EncodeCtx<'_>,
        plan: &GeneratePlan,
        how: NeverRan<'_>,
        out: &mut VecDeque<Bytes>,
    );

    /// The events after the last one: `data: [DONE]` and whatever precedes it; nothing once the stream is
    /// [`closed`](Events::closed).
    fn end(&mut self, out: &mut VecDeque<Bytes>);

    /// Whether the stream has ended early (an error event was sent): nothing more is generated.
    fn closed(&self) -> bool;
}

/// `/generate`'s events: SGLang's native chunks, then `data: [DONE]`.
#[derive(Debug)]
pub(crate) struct NativeEvents(StreamEncoder);

impl NativeEvents {
    pub(crate) fn new(config: &ServerConfig, plan: &GeneratePlan) -> NativeEvents {
        NativeEvents(StreamEncoder::new(
            wire::stream_mode(config),
            plan.items.len(),
        ))
    }
}

impl Events for NativeEvents {
    fn after_tick(
        &mut self,
        ctx: &EncodeCtx<'_>,
        plan: &GeneratePlan,
        run: &Run,
        finished: &mut dyn FnMut(usize) -> Finished,
        out: &mut VecDeque<Bytes>,
    ) {
        self.0
            .after_tick(ctx, plan, run, run.progress(), finished, out);
    }

    fn never_ran(
        &mut self,
        ctx: &EncodeCtx<'_>,
        plan: &GeneratePlan,
        how: NeverRan<'_>,
        out: &mut VecDeque<Bytes>,
    ) {
        out.extend(
            wire::never_ran_objects(ctx, plan, how, true, unix_now())
                .iter()
                .map(|json| wire::sse_event(json)),
        );
    }

    fn end(&mut self, out: &mut VecDeque<Bytes>) {
        out.push_back(Bytes::from_static(DONE_EVENT));
    }

    fn closed(&self) -> bool {
        false
    }
}

/// Where a stream stands before its first chunk.
enum Admit {
    /// Not yet asked (the server's control plane decides when the request may run).
    Pending(CtlHandle),
    /// Running; the ticket and the registration are held until the stream ends.
    Running {
        _held: Option<(RunTicket, CtlHandle)>,
    },
}

/// The state of one streamed request: its run (once admitted), and the events already due but not yet sent.
struct StreamRun<E> {
    ctx: RunCtx,
    plan: GeneratePlan,
    /// Started on admission, so that a request waiting in the queue holds no generation.
    run: Option<Run>,
    /// Its place in the batch loop, when the server has one.
    lane: Option<Lane>,
    events: E,
    timings: Timings,
    queue: VecDeque<Bytes>,
    admit: Admit,
    /// The last events ([`Events::end`]) are queued.
    ended: bool,
    /// Which items have reported their end (and are in the ledger, if there is one).
    items_ended: Vec<bool>,
}

/// A lazily generated SSE body: each poll runs ticks until some item has a chunk due and sends the due
/// events one by one, written by `events`, then its last events. Dropping the stream (a client disconnect)
/// stops the generation.
///
/// The stream first waits for the control plane's permission to run (the HTTP headers are already out, as
/// with SGLang's `StreamingResponse`); an abort or a full queue then ends it with the waiting-queue abort
/// chunk of every item.
pub(crate) fn sse_stream<E: Events>(
    ctx: RunCtx,
    plan: GeneratePlan,
    handle: CtlHandle,
    events: E,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let state = StreamRun {
        run: None,
        lane: None,
        events,
        timings: Timings::new(plan.items.len()),
        queue: VecDeque::new(),
        admit: Admit::Pending(handle),
        ended: false,
        items_ended: vec![false; plan.items.len()],
        ctx,
        plan,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        if let Admit::Pending(_) = state.admit {
            state.admit_now().await;
        }
        if state.queue.is_empty() && !state.ended {
            state.run_until_due().await;
        }
        if state.queue.is_empty() && !state.ended {
            state.ended = true;
            state.events.end(&mut state.queue);
        }
        let event = state.queue.pop_front()?;
        Some((Ok(event), state))
    })
}

/// A stream generated by a task of its own, its events buffered until the client reads them: with a batch
/// loop, a client slow to read must not hold up the other requests' steps (SGLang's tokenizer manager buffers
/// a request's output the same way). The task ends when the stream does or the client goes away.
pub(crate) fn detach<S>(stream: S) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    use futures_util::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if tx.send(event).is_err() {
                break;
            }
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        Some((event, rx))
    })
}

/// The events of a streamed request whose items never ran, then its last events.
pub(crate) fn never_ran_stream<E: Events>(
    ctx: &EncodeCtx<'_>,
    plan: &GeneratePlan,
    how: NeverRan<'_>,
    mut events: E,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static + use<E> {
    let mut queue = VecDeque::new();
    events.never_ran(ctx, plan, how, &mut queue);
    events.end(&mut queue);
    futures_util::stream::iter(queue.into_iter().map(Ok))
}

impl<E: Events> StreamRun<E> {
    async fn admit_now(&mut self) {
        let Admit::Pending(handle) =
            std::mem::replace(&mut self.admit, Admit::Running { _held: None })
        else {
            return;
        };
        let reason = match self.ctx.control.admit(&handle).await {
            Admission::Run(ticket) => {
                self.ctx.versions = VersionLog::new(&self.ctx.control);
                let (run, lane) = self.ctx.start(&self.plan);
                self.run = Some(run);
                self.lane = lane;
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
        self.never_ran(reason);
    }

    /// Ends the stream with the waiting-queue abort objects of every item, none of which ran.
    fn never_ran(&mut self, reason: WaitingAbort) {
        let e2e = self.ctx.started.elapsed().as_secs_f64();
        if let Some(witness) = &self.ctx.witness {
            witness.record_never_ran(&self.plan, &self.ctx.versions.current);
        }
        self.items_ended.fill(true);
        let ctx = self.ctx.encode_ctx(&self.plan);
        let how = NeverRan::Waiting { reason, e2e };
        self.events
            .never_ran(&ctx, &self.plan, how, &mut self.queue);
    }

    /// Runs ticks until some event is due or the run is over; nothing without a run (a request that
    /// ended in the waiting queue).
    async fn run_until_due(&mut self) {
        let Some(run) = self.run.as_mut() else { return };
        let timed = self.ctx.latency.is_active();
        // Counted per call: an event hands control back to the connection anyway, so only a long stretch of
        // ticks without one (a large `stream_interval`) needs to yield.
        let mut yielder = Yielder::default();
        while self.queue.is_empty() && !run.is_done() && !self.events.closed() {
            match self.lane.as_mut() {
                Some(lane) => match lane.next().await {
                    Some(grant) if grant.never_ran => {
                        grant.done((0..self.plan.items.len()).collect());
                        self.lane = None;
                        self.run = None;
                        self.never_ran(WaitingAbort::Aborted);
                        return;
                    }
                    Some(grant) => self.ctx.granted_tick(run, &mut self.timings, grant),
                    None => self.lane = None,
                },
                None => {
                    self.ctx.before_tick(run, &self.plan).await;
                    self.ctx.tick(run, &mut self.timings);
                }
            }
            record_ends(
                &self.ctx,
                &self.plan,
                run,
                &self.timings,
                &mut self.items_ended,
            );
            let e2e = &self.timings.e2e;
            let mut finished = |i: usize| Finished {
                e2e_latency: e2e[i],
                response_sent_to_client_ts: unix_now(),
            };
            let encode = self.ctx.encode_ctx(&self.plan);
            self.events
                .after_tick(&encode, &self.plan, run, &mut finished, &mut self.queue);
            yielder.after(run, timed).await;
        }
    }
}

/// A stream dropped before its items ended (a client that went away, a stream fault that stopped reading)
/// leaves them in the ledger as far as they got.
impl<E> Drop for StreamRun<E> {
    fn drop(&mut self) {
        let (Some(witness), Some(run)) = (&self.ctx.witness, &self.run) else {
            return;
        };
        for (i, ended) in self.items_ended.iter().enumerate() {
            if !ended {
                let versions = &self.ctx.versions;
                witness.record_item(&self.plan, run, i, versions.now(), &versions.events);
            }
        }
    }
}

/// Metrics and the ledger's entries for the items the last tick ended, and a log line for any that failed.
fn record_ends(
    ctx: &RunCtx,
    plan: &GeneratePlan,
    run: &Run,
    timings: &Timings,
    ended: &mut [bool],
) {
    for (i, progress) in run.progress().iter().enumerate() {
        match progress {
            Progress::Finished | Progress::Rejected => {
                ctx.record(run, i, timings);
                if let Some(witness) = &ctx.witness {
                    witness.record_item(plan, run, i, ctx.versions.now(), &ctx.versions.events);
                }
                ended[i] = true;
                tracing::debug!(rid = %plan.items[i].rid, "stream item ended");
            }
            Progress::Failed => {
                ended[i] = true;
                let error = run.failure(i).map(ToString::to_string).unwrap_or_default();
                tracing::error!(rid = %plan.items[i].rid, %error, "generation failed");
            }
            Progress::Idle | Progress::Stepped => {}
        }
    }
}
