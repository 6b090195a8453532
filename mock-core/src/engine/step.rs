//! The step core: every item of a plan advanced together, one token per tick, with the checks SGLang's
//! scheduler makes between decode steps (an abort from outside, the `abort-running` fault, a finished item
//! leaving the batch). The oracle, the server's non-stream path and its stream path all drive a [`Run`];
//! the server's async drivers add only what is not the engine's: waiting while paused, latency, yields.
//!
//! A tick steps every unfinished item once, in item order, and reports per item what happened
//! ([`Progress`]). Every item reports its end exactly once: `Finished` for a generation (at its last
//! token, at an abort, or in the first tick for one that was finished from the start, such as
//! `max_new_tokens: 0`), `Rejected` for an item the scheduler refused (`PlannedItem::abort`), `Failed` for
//! one whose engine code panicked.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::cache::{CacheLink, SharedCache};
use super::generation::Generation;
use super::item::{FinishReason, ItemRequest};
use super::load::{Count, Occupancy, Place};
use super::plan::GeneratePlan;
use crate::error::RequestError;
use crate::model::Model;
use crate::release::CacheInserts;

/// The message of an abort from outside, as SGLang's scheduler writes it in every release: `FINISH_ABORT`'s
/// `message or "Aborted"` (`srt/managers/schedule_batch.py`).
pub const ABORT_MESSAGE: &str = "Aborted";

/// What happened to one item in a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Nothing: the item had ended in an earlier tick.
    Idle,
    /// It generated one token and goes on.
    Stepped,
    /// Its generation ended in this tick: a finish rule, an abort, or finished from the start.
    Finished,
    /// The scheduler refused it (`PlannedItem::abort`); reported in the first tick.
    Rejected,
    /// Its engine code panicked; [`Run::failure`] has the error. Reported once.
    Failed,
}

/// Aborts from outside the engine, asked before every step of an item.
pub trait Outside {
    /// Whether item `item` was aborted before its step in tick `tick`, which is then its last.
    fn aborted(&self, item: usize, tick: usize) -> bool;

    /// Whether [`Run::tick_many`] must hand back to its driver before its next tick (the driver has
    /// something to do between ticks, such as waiting out a pause).
    fn holds(&self) -> bool {
        false
    }

    /// What item `item`, still generating, does in this tick: a batch scheduler steps only the samples it
    /// runs ([`Turn`]). Every item steps unless told otherwise.
    #[inline]
    fn turn(&self, _item: usize) -> Turn {
        Turn::Step
    }
}

/// What a generating item does in a tick, as the batch scheduler decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// It makes its next token.
    Step,
    /// It waits (in the queue, or with its prompt prefilled in chunks): no token, and it reports
    /// [`Progress::Idle`].
    Wait,
    /// It was aborted in the waiting queue: it ends now, aborted, with the output it has.
    AbortWaiting,
}

/// A record of what the outside world did to a request while it ran, in ticks, for the oracle to replay.
/// Tick `t` is the step that produces an item's token `t + 1`; an item aborted before tick `t` still makes
/// that token and ends aborted with `t + 1` output tokens (if it had not finished earlier), as SGLang runs an
/// aborted request one more decode step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interventions {
    /// `(item, tick)`: the item was aborted (`/abort_request`, a pause in `abort` mode) before that tick, whose
    /// step is its last.
    pub aborts: Vec<(usize, usize)>,
    /// Ticks before which a `retract` pause sent every unfinished item back to the queue.
    pub retractions: Vec<usize>,
    /// The `abort-running` fault: every item stops once it has this many output tokens.
    pub abort_after: Option<usize>,
}

impl Outside for Interventions {
    fn aborted(&self, item: usize, tick: usize) -> bool {
        self.aborts.iter().any(|&(i, t)| i == item && t <= tick)
    }
}

#[derive(Debug)]
enum Item {
    /// A generation; `ended` once it has reported its end (it stays readable).
    Generating {
        generation: Box<Generation>,
        ended: bool,
    },
    /// Refused by the scheduler; `step` is the one token it still makes ([`aborted_step`]).
    Rejected {
        reported: bool,
        step: Option<Box<Generation>>,
    },
    Failed {
        error: RequestError,
        reported: bool,
    },
}

/// The items of one request and their progress: the one loop that advances a plan's generations.
#[derive(Debug)]
pub struct Run {
    items: Vec<Item>,
    retractions: Vec<u32>,
    progress: Vec<Progress>,
    tick: usize,
    /// The `abort-running` fault: every item stops once it has this many output tokens.
    abort_after: Option<usize>,
    open: usize,
    /// The server's prefix cache, when it keeps one ([`Run::with_cache`]).
    cache: Option<Box<CacheLink>>,
    /// The server's occupancy board, when the run reports to one ([`Run::with_occupancy`]).
    board: Option<Box<Board>>,
}

/// What a run has put on the server's [`Occupancy`], and where.
#[derive(Debug)]
struct Board {
    occupancy: Arc<Occupancy>,
    place: Place,
    count: Count,
}

impl Run {
    /// Starts every item of `plan`: computes prompt logprobs, and marks the items the scheduler refused.
    pub fn new(model: &Arc<Model>, plan: &GeneratePlan, abort_after: Option<usize>) -> Run {
        let items: Vec<Item> = plan
            .items
            .iter()
            .map(|item| {
                if item.abort.is_some() {
                    return Item::Rejected {
                        reported: false,
                        step: aborted_step(model, &item.request),
                    };
                }
                let model = Arc::clone(model);
                let request = item.request.clone();
                match guarded(move || Generation::new(model, request)) {
                    Ok(generation) => Item::Generating {
                        generation: Box::new(generation),
                        ended: false,
                    },
                    Err(error) => Item::Failed {
                        error,
                        reported: false,
                    },
                }
            })
            .collect();
        let n = items.len();
        Run {
            items,
            retractions: vec![0; n],
            progress: vec![Progress::Idle; n],
            tick: 0,
            abort_after,
            open: n,
            cache: None,
            board: None,
        }
    }

    /// The run with a prefix cache, when the server keeps one: its items are matched now (before the first
    /// tick, as one prefill batch), each keys its prompt once its first token is made and its prompt and
    /// output when it ends, as `rules` (its release's) say; [`Run::cached_tokens`] then reports the hits.
    pub fn with_cache(
        mut self,
        cache: Option<&SharedCache>,
        rules: CacheInserts,
        plan: &GeneratePlan,
    ) -> Run {
        let Some(cache) = cache else {
            return self;
        };
        let items = &self.items;
        let running = |i: usize| matches!(items[i], Item::Generating { .. });
        self.cache = Some(Box::new(CacheLink::start(cache, rules, plan, running)));
        self
    }

    /// The run counted on the server's occupancy board from now until its items end (or it is dropped): its
    /// generating items as running with their tokens, and the prompt tokens the cache did not hold as
    /// prefilled. Attach it after [`Run::with_cache`], whose hits it counts.
    pub fn with_occupancy(mut self, occupancy: Option<&Arc<Occupancy>>) -> Run {
        let Some(occupancy) = occupancy else {
            return self;
        };
        let uncached = (0..self.items.len())
            .filter_map(|i| Some(self.generation(i)?.prompt_tokens() - self.cached_tokens(i)))
            .sum();
        occupancy.prefilled(uncached);
        self.board = Some(Box::new(Board {
            occupancy: Arc::clone(occupancy),
            place: Place::Running,
            count: Count::default(),
        }));
        self.sync_board();
        self
    }

    /// A `retract` pause sent the run's unfinished items back to the queue (`true`), or they run again.
    pub fn set_retracted(&mut self, retracted: bool) {
        let place = match retracted {
            true => Place::Waiting,
            false => Place::Running,
        };
        self.put_on_board(Some(place));
    }

    /// Puts the run's unfinished items and their tokens on the board in place of what it last put there.
    fn sync_board(&mut self) {
        self.put_on_board(None);
    }

    /// Replaces what the run last put on the board with its unfinished items and their tokens, at `place`
    /// (`None`: where they were).
    fn put_on_board(&mut self, place: Option<Place>) {
        if let Some(board) = &mut self.board {
            let live = live(&self.items);
            let place = place.unwrap_or(board.place);
            board.occupancy.shift(board.place, board.count, place, live);
            board.place = place;
            board.count = live;
        }
    }

    /// Item `i`'s `cached_tokens`: how much of its prompt the prefix cache held when it started (0 without
    /// a cache).
    pub fn cached_tokens(&self, i: usize) -> usize {
        self.cache.as_ref().map_or(0, |link| link.cached(i))
    }

    /// Advances every item by one step; [`Run::progress`] then says what happened to each.
    pub fn tick(&mut self, outside: &dyn Outside) {
        let tick = self.tick;
        for (i, item) in self.items.iter_mut().enumerate() {
            let progress = match item {
                Item::Generating {
                    generation,
                    ended: false,
                } => match outside.turn(i) {
                    Turn::Step => {
                        let aborted = outside.aborted(i, tick);
                        let (after, message) = (self.abort_after, ABORT_MESSAGE);
                        let outcome = guarded(|| advance(generation, aborted, after, message));
                        settle(item, outcome)
                    }
                    Turn::Wait => Progress::Idle,
                    Turn::AbortWaiting => {
                        let outcome = guarded(|| {
                            generation.abort(ABORT_MESSAGE, None, None);
                            true
                        });
                        settle(item, outcome)
                    }
                },
                Item::Rejected {
                    reported: reported @ false,
                    ..
                } => {
                    *reported = true;
                    Progress::Rejected
                }
                Item::Failed {
                    reported: reported @ false,
                    ..
                } => {
                    *reported = true;
                    Progress::Failed
                }
                Item::Generating { .. } | Item::Rejected { .. } | Item::Failed { .. } => {
                    Progress::Idle
                }
            };
            if !matches!(progress, Progress::Idle | Progress::Stepped) {
                self.open -= 1;
            }
            if let Some(link) = &mut self.cache {
                keep(link, i, item, progress);
            }
            self.progress[i] = progress;
        }
        self.tick += 1;
        self.sync_board();
    }

    /// Up to `max` ticks in a row, each exactly a [`Run::tick`], for a driver with nothing to do between
    /// them. Stops after a tick that did more than step items already under way (the first tick, an end, a
    /// failure), so that [`Run::progress`] still shows the driver every such event; stops before a tick when
    /// `outside` holds. Returns the number of item reports the ticks made (a step, an end, a rejection or a
    /// failure each), which is what a driver's yield budget counts.
    pub fn tick_many(&mut self, outside: &dyn Outside, max: usize) -> usize {
        if let Some(reports) = self.tick_alone(outside, max) {
            return reports;
        }
        let mut reports = 0;
        for n in 0..max {
            if self.is_done() || (n > 0 && outside.holds()) {
                break;
            }
            self.tick(outside);
            let mut eventful = self.tick == 1;
            for progress in &self.progress {
                match progress {
                    Progress::Idle => {}
                    Progress::Stepped => reports += 1,
                    Progress::Finished | Progress::Rejected | Progress::Failed => {
                        reports += 1;
                        eventful = true;
                    }
                }
            }
            if eventful {
                break;
            }
        }
        reports
    }

    /// [`Run::tick_many`] for a run whose one item is still generating (`None` for any other run): the same
    /// ticks, in a loop that matches the item once and guards against a panic once for the whole stretch
    /// instead of once per tick.
    fn tick_alone(&mut self, outside: &dyn Outside, max: usize) -> Option<usize> {
        let [
            Item::Generating {
                generation,
                ended: false,
            },
        ] = &mut self.items[..]
        else {
            return None;
        };
        // The first tick hands back on its own (the first token's time).
        let max = if self.tick == 0 { max.min(1) } else { max };
        if max == 0 {
            return Some(0);
        }
        let (after, message) = (self.abort_after, ABORT_MESSAGE);
        let start = self.tick;
        let mut tick = start;
        let outcome = guarded(|| {
            while tick - start < max {
                if tick > start && outside.holds() {
                    break;
                }
                let ended = advance(generation, outside.aborted(0, tick), after, message);
                tick += 1;
                if ended {
                    return true;
                }
            }
            false
        });
        // A tick whose step panicked counts as run, as in `tick`.
        let ran = tick - start + usize::from(outcome.is_err());
        self.tick = start + ran;
        let progress = settle(&mut self.items[0], outcome);
        if progress != Progress::Stepped {
            self.open -= 1;
        }
        if let Some(link) = &mut self.cache {
            keep(link, 0, &self.items[0], progress);
        }
        self.progress[0] = progress;
        self.sync_board();
        Some(ran)
    }

    /// What the last tick did to each item, in item order.
    pub fn progress(&self) -> &[Progress] {
        &self.progress
    }

    /// A `retract` pause: every item still generating goes back to the queue once more.
    pub fn retract(&mut self) {
        for (item, count) in self.items.iter().zip(&mut self.retractions) {
            if matches!(item, Item::Generating { ended: false, .. }) {
                *count += 1;
            }
        }
    }

    /// The batch scheduler sent items `items` back to the queue (for want of KV, or a `retract` pause): each
    /// still generating counts one more retraction.
    pub fn retract_items(&mut self, items: &[usize]) {
        for &i in items {
            if matches!(
                self.items.get(i),
                Some(Item::Generating { ended: false, .. })
            ) {
                self.retractions[i] += 1;
            }
        }
    }

    /// One tick as the server would have run it under `interventions`: a `retract` pause scheduled before
    /// this tick first, then the tick with their aborts (the oracle's driver, tick by tick).
    pub fn replay_tick(&mut self, interventions: &Interventions) {
        if interventions.retractions.contains(&self.tick) {
            self.retract();
        }
        self.tick(interventions);
    }

    /// Runs every item to its end, replaying `interventions`.
    pub fn run_to_end(&mut self, interventions: &Interventions) {
        while !self.is_done() {
            self.replay_tick(interventions);
        }
    }

    /// Whether every item has reported its end.
    pub fn is_done(&self) -> bool {
        self.open == 0
    }

    /// The number of ticks so far.
    pub fn ticks(&self) -> usize {
        self.tick
    }

    /// Item `i`'s generation, unless it was rejected or failed.
    pub fn generation(&self, i: usize) -> Option<&Generation> {
        match &self.items[i] {
            Item::Generating { generation, .. } => Some(generation),
            Item::Rejected { .. } | Item::Failed { .. } => None,
        }
    }

    /// The token the scheduler made for item `i` after refusing it ([`aborted_step`]), if it was refused.
    pub fn rejected_step(&self, i: usize) -> Option<&Generation> {
        match &self.items[i] {
            Item::Rejected { step, .. } => step.as_deref(),
            Item::Generating { .. } | Item::Failed { .. } => None,
        }
    }

    /// How often item `i` was retracted.
    pub fn retractions(&self, i: usize) -> u32 {
        self.retractions[i]
    }

    /// The error of a failed item.
    pub fn failure(&self, i: usize) -> Option<&RequestError> {
        match &self.items[i] {
            Item::Failed { error, .. } => Some(error),
            Item::Generating { .. } | Item::Rejected { .. } => None,
        }
    }

    /// The first failure of any item, for a non-stream request that fails as a whole.
    pub fn first_failure(&self) -> Option<&RequestError> {
        (0..self.items.len()).find_map(|i| self.failure(i))
    }
}

impl Drop for Run {
    /// A run dropped before its items ended (its client went away) leaves the board.
    fn drop(&mut self) {
        if let Some(board) = &self.board {
            board.occupancy.leave(board.place, board.count);
        }
    }
}

/// The items still generating and their tokens (prompt and output so far).
fn live(items: &[Item]) -> Count {
    let mut count = Count::default();
    for item in items {
        if let Item::Generating {
            generation,
            ended: false,
        } = item
        {
            count.items += 1;
            count.tokens += generation.tokens().len();
        }
    }
    count
}

/// One item's step: the `abort-running` fault's count first, then one token, which ends the generation
/// aborted when an abort from outside reached it before the step (SGLang's scheduler reads an abort at its next
/// iteration and runs the request one more decode step; [`Generation::abort_after_step`]). Returns whether
/// the generation has ended. A generation that was finished from the start ends here without a step.
#[inline(always)]
fn advance(
    generation: &mut Generation,
    aborted: bool,
    abort_after: Option<usize>,
    message: &str,
) -> bool {
    if generation.is_finished() {
        return true;
    }
    if abort_after.is_some_and(|after| generation.output_ids().len() >= after) {
        generation.abort(message, None, None);
        return true;
    }
    if aborted {
        generation.abort_after_step(message);
        return true;
    }
    generation.step()
}

/// What the prefix cache keeps of item `i` after its tick: its prompt after the step that made its first
/// token (its prefill), its prompt and output at its end; a failed item gives back its hold.
fn keep(link: &mut CacheLink, i: usize, item: &Item, progress: Progress) {
    match (progress, item) {
        (Progress::Stepped, Item::Generating { generation, .. })
            if generation.output_ids().len() == 1 =>
        {
            link.prefilled(i, generation.tokens(), generation.prompt_tokens());
        }
        (Progress::Finished, Item::Generating { generation, .. }) => {
            let aborted = matches!(generation.finish_reason(), Some(FinishReason::Abort { .. }));
            link.ended(i, generation.tokens(), generation.prompt_tokens(), aborted);
        }
        (Progress::Failed, _) => link.release(i),
        _ => {}
    }
}

/// What a generating item's step outcome makes of it: still stepping, ended (reported now), or failed
/// (reported now).
fn settle(item: &mut Item, outcome: Result<bool, RequestError>) -> Progress {
    match outcome {
        Ok(false) => Progress::Stepped,
        Ok(true) => {
            if let Item::Generating { ended, .. } = item {
                *ended = true;
            }
            Progress::Finished
        }
        Err(error) => {
            *item = Item::Failed {
                error,
                reported: true,
            };
            Progress::Failed
        }
    }
}

/// The one decode step SGLang's scheduler still runs for an item it refused: `set_finish_with_abort` replaces the
/// prompt with `[0]` ("to skip the long prefill") and turns its logprobs off, and the item leaves after its first
/// token with the abort (a stream's abort chunk carries that token; 0.5.23 answered so live, `prompt_tokens` 1 and
/// `completion_tokens` 1 whatever the prompt). `None` if the step fails: the abort then carries no token.
// Out of line and cold: a refused item is rare, and its copy of the step must not crowd the decode loop's.
#[cold]
#[inline(never)]
fn aborted_step(model: &Arc<Model>, request: &ItemRequest) -> Option<Box<Generation>> {
    let mut request = request.clone();
    request.input_ids = vec![0];
    request.return_logprob = false;
    request.logprob_start = 1;
    request.top_logprobs_num = 0;
    request.token_ids_logprob.clear();
    request.forced_output.clear();
    request.sampling_mask = None;
    request.top_p_token_ids = false;
    request.routes_from = None;
    request.params.max_new_tokens = 1;
    request.params.min_new_tokens = 0;
    let model = Arc::clone(model);
    guarded(move || {
        let mut generation = Generation::new(model, request);
        generation.run_to_end();
        Box::new(generation)
    })
    .ok()
}

/// Runs engine code so that a panic becomes a 500 instead of a dropped connection.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, RequestError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let detail = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        RequestError::internal(format!("engine panicked: {detail}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{FinishReason, ItemRequest, PlannedItem};
    use crate::model::ModelConfig;

    /// One item per length, all ignoring EOS so that the length decides; `rejected` is refused by the
    /// scheduler.
    fn plan(lengths: &[u32], rejected: Option<usize>) -> GeneratePlan {
        let items = lengths
            .iter()
            .enumerate()
            .map(|(i, &max_new_tokens)| {
                let mut request = ItemRequest::new(vec![7, 8, 9]);
                request.params.max_new_tokens = max_new_tokens;
                request.params.ignore_eos = true;
                request.sample_index = i as u64;
                PlannedItem {
                    rid: format!("r{i}"),
                    rid_is_fresh: false,
                    request,
                    top_logprobs_num: 0,
                    token_ids_logprob_requested: false,
                    stream_interval: 1,
                    length_as_float: false,
                    abort: (rejected == Some(i)).then(|| crate::engine::Refusal {
                        message: "logprob_start_len is too large".to_owned(),
                        err_type: Some("BadRequestError"),
                    }),
                }
            })
            .collect();
        GeneratePlan {
            is_batch: true,
            stream: false,
            return_text_in_logprobs: false,
            return_prompt_token_ids: false,
            items,
            parallel_sample_num: 1,
        }
    }

    /// One item of `prompt` generating `max_new_tokens`, ignoring EOS.
    fn plan_of(prompt: &[u32], max_new_tokens: u32) -> GeneratePlan {
        let mut plan = plan(&[max_new_tokens], None);
        plan.items[0].request.input_ids = prompt.to_vec();
        plan
    }

    fn model() -> Arc<Model> {
        Arc::new(Model::new(ModelConfig::default()).expect("the default model builds"))
    }

    /// How much of `tokens` the cache holds (a match with no limit but the sequence's length).
    fn held(cache: &SharedCache, tokens: &[u32]) -> usize {
        let mut tree = cache.lock().unwrap();
        let (n, hold) = tree.match_prefix(tokens, tokens.len());
        tree.release(hold);
        n
    }

    fn rules(
        prefill_first_token: bool,
        finish_last_token: bool,
        abort_last_token: bool,
    ) -> CacheInserts {
        CacheInserts {
            prefill_first_token,
            finish_last_token,
            abort_last_token,
        }
    }

    /// A run of `plan` against `cache` under `rules`.
    fn cached_run(plan: &GeneratePlan, cache: &SharedCache, rules: CacheInserts) -> Run {
        Run::new(&model(), plan, None).with_cache(Some(cache), rules, plan)
    }

    fn empty_cache() -> SharedCache {
        Arc::new(std::sync::Mutex::new(super::super::PrefixCache::new(
            1,
            1 << 20,
        )))
    }

    #[test]
    fn a_run_leaves_its_prompt_after_prefill_and_its_output_at_its_end_as_the_release_says() {
        for (first, last) in [(false, false), (true, true)] {
            let cache = empty_cache();
            let plan = plan(&[4], None);
            let mut run = cached_run(&plan, &cache, rules(first, last, last));
            assert_eq!(run.cached_tokens(0), 0);
            run.tick(&Interventions::default());
            let tokens = run.generation(0).unwrap().tokens().to_vec();
            assert_eq!(
                held(&cache, &tokens),
                3 + usize::from(first),
                "after the prefill"
            );
            run.run_to_end(&Interventions::default());
            let tokens = run.generation(0).unwrap().tokens().to_vec();
            assert_eq!(tokens.len(), 7);
            assert_eq!(held(&cache, &tokens), 7 - usize::from(!last), "at the end");
            // The same prompt again hits all but its last token.
            let mut again = cached_run(&plan, &cache, rules(first, last, last));
            assert_eq!(again.cached_tokens(0), 2);
            again.run_to_end(&Interventions::default());
        }
    }

    /// The same rules when a lone item runs through `tick_many`'s fast loop: its first tick is its prefill.
    #[test]
    fn a_lone_item_run_tick_by_many_leaves_its_prompt_after_its_first_tick() {
        let cache = empty_cache();
        let plan = plan(&[6], None);
        let mut run = cached_run(&plan, &cache, rules(true, false, false));
        assert_eq!(
            run.tick_many(&Interventions::default(), 16),
            1,
            "the first tick alone"
        );
        let tokens = run.generation(0).unwrap().tokens().to_vec();
        assert_eq!(held(&cache, &tokens), 4, "the prompt and the first token");
        while !run.is_done() {
            run.tick_many(&Interventions::default(), 2);
        }
        let tokens = run.generation(0).unwrap().tokens().to_vec();
        assert_eq!(
            held(&cache, &tokens),
            tokens.len() - 1,
            "all but the last output token"
        );
    }

    #[test]
    fn an_aborted_item_leaves_what_it_computed_and_one_never_prefilled_leaves_nothing() {
        for (abort_last, finish_last) in [(true, false), (false, false), (false, true)] {
            let cache = empty_cache();
            let plan = plan(&[6, 6], None);
            let mut run = cached_run(&plan, &cache, rules(false, finish_last, abort_last));
            let interventions = Interventions {
                aborts: vec![(1, 2)],
                ..Interventions::default()
            };
            run.run_to_end(&interventions);
            let aborted = run.generation(1).unwrap().tokens().to_vec();
            assert_eq!(aborted.len(), 6, "two tokens, then the abort's last step");
            assert_eq!(held(&cache, &aborted), 6 - usize::from(!abort_last));
            // Stopped before its first token (the `abort-running` fault at 0): never prefilled, it leaves
            // nothing.
            let cache = empty_cache();
            let plan = plan_of(&[1, 2, 3, 4], 6);
            let mut run = Run::new(&model(), &plan, Some(0)).with_cache(
                Some(&cache),
                rules(false, finish_last, abort_last),
                &plan,
            );
            run.run_to_end(&Interventions::default());
            assert_eq!(run.generation(0).unwrap().output_ids().len(), 0);
            assert_eq!(held(&cache, &[1, 2, 3, 4]), 0, "never prefilled");
        }
    }

    #[test]
    fn an_item_of_no_new_tokens_leaves_its_whole_prompt() {
        let cache = empty_cache();
        let plan = plan(&[0], None);
        let mut run = cached_run(&plan, &cache, rules(false, false, false));
        run.run_to_end(&Interventions::default());
        assert_eq!(held(&cache, &[7, 8, 9, 10]), 3);
    }

    /// What an item held is given back whether it failed or its request was dropped: past the bound, its
    /// prefix can be evicted again.
    #[test]
    fn a_failed_item_and_a_dropped_run_give_back_what_they_held() {
        let bounded = || Arc::new(std::sync::Mutex::new(super::super::PrefixCache::new(1, 3)));
        let fill = |cache: &SharedCache, tokens: &[u32]| {
            let mut tree = cache.lock().unwrap();
            let hold = tree.insert(tokens);
            tree.release(hold);
        };
        // A generation that panics in its first tick (the top-logprob list cannot be held).
        let cache = bounded();
        fill(&cache, &[7, 8, 9]);
        let mut failing = plan(&[3], None);
        failing.items[0].request.top_logprobs_num = usize::MAX;
        failing.items[0].request.return_logprob = true;
        // No input logprobs (they would fail before the run starts): the first step's top-logprob list does.
        failing.items[0].request.logprob_start = 3;
        let mut run = cached_run(&failing, &cache, rules(false, false, false));
        assert_eq!(run.cached_tokens(0), 2);
        run.tick(&Interventions::default());
        assert_eq!(run.progress(), [Progress::Failed]);
        fill(&cache, &[50, 51, 52]);
        assert_eq!(
            held(&cache, &[7, 8, 9]),
            0,
            "the failed item's prefix was evicted"
        );
        // A run dropped after its prefill, as a request whose client went away.
        let cache = bounded();
        let plan = plan(&[5], None);
        let mut run = cached_run(&plan, &cache, rules(false, false, false));
        run.tick(&Interventions::default());
        assert_eq!(held(&cache, &[7, 8, 9]), 3);
        drop(run);
        fill(&cache, &[50, 51, 52]);
        assert_eq!(
            held(&cache, &[7, 8, 9]),
            0,
            "the dropped run's prompt was evicted"
        );
    }

    #[test]
    fn samples_of_one_prompt_hit_all_but_its_last_token_and_a_batch_does_not_hit_itself() {
        let cache = empty_cache();
        let mut batch = plan(&[2, 2], None);
        let run = cached_run(&batch, &cache, rules(false, false, false));
        assert_eq!((run.cached_tokens(0), run.cached_tokens(1)), (0, 0));
        drop(run);
        let cache = empty_cache();
        batch.parallel_sample_num = 2;
        let run = cached_run(&batch, &cache, rules(false, false, false));
        assert_eq!((run.cached_tokens(0), run.cached_tokens(1)), (2, 2));
    }

    #[test]
    fn every_item_reports_its_end_once_and_only_running_items_are_retracted() {
        use Progress::{Finished, Idle, Rejected, Stepped};
        let mut run = Run::new(&model(), &plan(&[1, 3, 0, 5], Some(3)), None);
        run.tick(&Interventions::default());
        // One token ends the first; `max_new_tokens: 0` ended before any step; the refused item is reported.
        assert_eq!(run.progress(), [Finished, Stepped, Finished, Rejected]);
        run.retract();
        run.tick(&Interventions::default());
        assert_eq!(run.progress(), [Idle, Stepped, Idle, Idle]);
        assert!(!run.is_done());
        run.tick(&Interventions::default());
        assert_eq!(run.progress(), [Idle, Finished, Idle, Idle]);
        assert!(run.is_done());
        assert_eq!(
            (0..4).map(|i| run.retractions(i)).collect::<Vec<_>>(),
            [0, 1, 0, 0]
        );
        let lengths: Vec<Option<usize>> = (0..4)
            .map(|i| run.generation(i).map(|g| g.output_ids().len()))
            .collect();
        assert_eq!(lengths, [Some(1), Some(3), Some(0), None]);
        assert_eq!(run.ticks(), 3);
    }

    /// An outside world that aborts like `Interventions` and holds a run of ticks before chosen ticks.
    struct Holding {
        aborts: Interventions,
        hold_before: Vec<usize>,
        next_tick: std::cell::Cell<usize>,
    }

    impl Outside for Holding {
        fn aborted(&self, item: usize, tick: usize) -> bool {
            self.next_tick.set(tick + 1);
            self.aborts.aborted(item, tick)
        }

        fn holds(&self) -> bool {
            self.hold_before.contains(&self.next_tick.get())
        }
    }

    /// Drives `plan` once tick by tick and once through `tick_many`, and checks that `tick_many` handed back
    /// exactly where the driver had something to see (the first tick, an end, a failure, a hold) with the
    /// same progress, reported every item report, and left the same generations.
    fn check_tick_many(plan: &GeneratePlan, outside: &Holding, abort_after: Option<usize>) {
        let events = |run: &Run| {
            (
                run.ticks(),
                run.progress().to_vec(),
                run.first_failure().is_some(),
            )
        };
        let mut one = Run::new(&model(), plan, abort_after);
        let mut want = Vec::new();
        let mut want_reports = 0;
        while !one.is_done() {
            one.tick(outside);
            want_reports += one
                .progress()
                .iter()
                .filter(|p| **p != Progress::Idle)
                .count();
            let eventful = one.ticks() == 1
                || outside.hold_before.contains(&one.ticks())
                || one
                    .progress()
                    .iter()
                    .any(|p| !matches!(p, Progress::Stepped | Progress::Idle));
            if eventful || one.is_done() {
                want.push(events(&one));
            }
        }
        let mut many = Run::new(&model(), plan, abort_after);
        let mut got = Vec::new();
        let mut reports = 0;
        while !many.is_done() {
            reports += many.tick_many(outside, 1000);
            got.push(events(&many));
        }
        assert_eq!(got, want);
        assert_eq!(reports, want_reports);
        for i in 0..plan.items.len() {
            assert_eq!(
                many.generation(i).map(Generation::output_ids),
                one.generation(i).map(Generation::output_ids),
                "item {i}"
            );
        }
    }

    fn holding(aborts: Vec<(usize, usize)>, hold_before: Vec<usize>) -> Holding {
        Holding {
            aborts: Interventions {
                aborts,
                ..Interventions::default()
            },
            hold_before,
            next_tick: std::cell::Cell::new(0),
        }
    }

    /// `tick_many` is a run of `tick`s, for a batch (where some items end, fail or were refused at once) and
    /// for a single item (which takes a tighter loop): aborted from outside, cut by the `abort-running`
    /// fault, run to its length, and panicking in its first step.
    #[test]
    fn ticking_many_at_once_stops_at_every_event_and_ends_as_ticking_one_at_a_time() {
        let mut mixed = plan(&[6, 40, 0, 25, 31], Some(4));
        // A panic in tick 0: the planner caps top-logprob lists, the engine asked for this many cannot.
        mixed.items[2].request.params.max_new_tokens = 9;
        mixed.items[2].request.top_logprobs_num = usize::MAX;
        mixed.items[2].request.return_logprob = true;
        let holds = vec![12, 13, 30];
        check_tick_many(&mixed, &holding(vec![(3, 17)], holds.clone()), None);
        // Item 0 reports 6 steps (the last as its end), item 1 40, item 3 17 and its abort, items 2 and 4
        // their failure and rejection; the batch hands back at tick 1, 6, 12, 13, 18, 30 and 40.
        let mut run = Run::new(&model(), &mixed, None);
        let outside = holding(vec![(3, 17)], holds.clone());
        let mut reports = 0;
        let mut handed_back = Vec::new();
        while !run.is_done() {
            reports += run.tick_many(&outside, 1000);
            handed_back.push(run.ticks());
        }
        assert_eq!(reports, 6 + 40 + (17 + 1) + 1 + 1);
        assert_eq!(handed_back, [1, 6, 12, 13, 18, 30, 40]);

        let single = plan(&[50], None);
        check_tick_many(&single, &holding(vec![(0, 21)], holds.clone()), None);
        check_tick_many(&single, &holding(vec![], holds.clone()), Some(33));
        check_tick_many(&single, &holding(vec![], vec![]), None);
        let mut panicking = plan(&[50], None);
        panicking.items[0].request.top_logprobs_num = usize::MAX;
        panicking.items[0].request.return_logprob = true;
        // No prompt logprobs, so the generation starts and its first step panics.
        panicking.items[0].request.logprob_start = 3;
        check_tick_many(&panicking, &holding(vec![], vec![]), None);

        // With nothing refused or failing, the first tick alone still hands back (the first token's time).
        let mut fresh = Run::new(&model(), &plan(&[5], None), None);
        assert_eq!(fresh.tick_many(&Interventions::default(), 100), 1);
        assert_eq!(fresh.ticks(), 1);
        assert_eq!(fresh.tick_many(&Interventions::default(), 100), 4);
        assert!(fresh.is_done());
        assert_eq!(fresh.tick_many(&Interventions::default(), 100), 0);

        // `max` bounds the ticks, for one item and for a batch alike.
        for lengths in [&[50][..], &[50, 40]] {
            let mut bounded = Run::new(&model(), &plan(lengths, None), None);
            bounded.tick_many(&Interventions::default(), 100);
            let reports = bounded.tick_many(&Interventions::default(), 3);
            assert_eq!((reports, bounded.ticks()), (3 * lengths.len(), 4));
        }
    }

    #[test]
    fn a_generation_that_panics_is_reported_failed_once_and_the_run_ends() {
        let mut plan = plan(&[3, 2], None);
        // The planner caps top-logprob lists; asked for more than memory can hold, the engine panics.
        plan.items[0].request.top_logprobs_num = usize::MAX;
        plan.items[0].request.return_logprob = true;
        plan.items[0].request.logprob_start = 0;
        let mut run = Run::new(&model(), &plan, None);
        run.tick(&Interventions::default());
        assert_eq!(run.progress(), [Progress::Failed, Progress::Stepped]);
        let error = run
            .first_failure()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(error.contains("engine panicked"), "{error}");
        run.run_to_end(&Interventions::default());
        assert!(run.is_done());
        assert!(run.generation(0).is_none());
        assert_eq!(run.generation(1).map(|g| g.output_ids().len()), Some(2));
    }

    /// SGLang runs an aborted request one more decode step ("The request will still run one decode forward
    /// pass", `Scheduler.abort_request`) and its finish check reads the abort before the length rule.
    #[test]
    fn an_abort_before_tick_t_keeps_t_plus_one_tokens_with_the_releases_message() {
        let interventions = Interventions {
            aborts: vec![(0, 2), (2, 2)],
            ..Interventions::default()
        };
        let mut run = Run::new(&model(), &plan(&[6, 6, 3], None), None);
        run.run_to_end(&interventions);
        let first = run.generation(0).expect("a generation");
        assert_eq!(
            first.output_ids().len(),
            3,
            "two tokens, then the step the abort lets run"
        );
        assert!(
            matches!(first.finish_reason(), Some(FinishReason::Abort { message, .. }) if message == "Aborted")
        );
        let last = run.generation(2).expect("a generation");
        assert_eq!(last.output_ids().len(), 3, "its last token");
        assert!(
            matches!(last.finish_reason(), Some(FinishReason::Abort { .. })),
            "the abort, not the length: {:?}",
            last.finish_reason()
        );
        assert_eq!(
            run.generation(1).expect("a generation").output_ids().len(),
            6
        );

        // The abort-running fault stops every item at its count, with the scheduler's message.
        let mut run = Run::new(&model(), &plan(&[6, 1], None), Some(2));
        run.run_to_end(&Interventions::default());
        let first = run.generation(0).expect("a generation");
        assert_eq!(first.output_ids().len(), 2);
        assert!(
            matches!(first.finish_reason(), Some(FinishReason::Abort { message, .. }) if message == "Aborted")
        );
        assert!(matches!(
            run.generation(1).and_then(|g| g.finish_reason()),
            Some(FinishReason::Length { .. })
        ));
    }

    /// The board: `(running items, their tokens, waiting items, their tokens)`.
    fn board(occupancy: &Occupancy) -> (usize, usize, usize, usize) {
        let l = occupancy.snapshot();
        (l.running, l.running_tokens, l.waiting, l.waiting_tokens)
    }

    #[test]
    fn a_run_counts_its_generating_items_and_their_tokens_on_the_board_until_they_end() {
        let occupancy = Arc::new(Occupancy::new());
        // Three prompts of 3 tokens: one of 2 new tokens, one of 4, one refused.
        let plan = plan(&[2, 4, 3], Some(2));
        let mut run = Run::new(&model(), &plan, None).with_occupancy(Some(&occupancy));
        assert_eq!(board(&occupancy), (2, 6, 0, 0), "admitted: two prompts");
        assert_eq!(occupancy.snapshot().prefill_uncached, 6);
        run.tick(&Interventions::default());
        assert_eq!(board(&occupancy), (2, 8, 0, 0), "a token each");
        run.tick(&Interventions::default());
        assert_eq!(
            board(&occupancy),
            (1, 5, 0, 0),
            "the first has its 2 tokens and ends"
        );
        run.set_retracted(true);
        assert_eq!(board(&occupancy), (0, 0, 1, 5), "back in the queue");
        run.set_retracted(false);
        run.run_to_end(&Interventions::default());
        assert_eq!(board(&occupancy), (0, 0, 0, 0), "over");
        drop(run);
        assert_eq!(board(&occupancy), (0, 0, 0, 0), "nothing left to give back");
    }

    #[test]
    fn a_dropped_run_leaves_the_board_and_waiting_items_leave_with_their_guard() {
        let occupancy = Arc::new(Occupancy::new());
        let plan = plan(&[5], None);
        let mut run = Run::new(&model(), &plan, None).with_occupancy(Some(&occupancy));
        run.tick(&Interventions::default());
        run.set_retracted(true);
        let waiting = occupancy.enter_waiting(2, 40);
        assert_eq!(board(&occupancy), (0, 0, 3, 44));
        drop(run);
        assert_eq!(board(&occupancy), (0, 0, 2, 40));
        drop(waiting);
        assert_eq!(board(&occupancy), (0, 0, 0, 0));
    }

    #[test]
    fn only_what_the_cache_did_not_hold_counts_as_prefilled_and_a_shared_prefix_is_used_once() {
        let cache = empty_cache();
        let occupancy = Arc::new(Occupancy::new());
        let plan = plan_of(&(100..164).collect::<Vec<u32>>(), 8);
        let start = || {
            cached_run(&plan, &cache, rules(false, false, false)).with_occupancy(Some(&occupancy))
        };
        let mut first = start();
        first.tick(&Interventions::default());
        // 64 prompt tokens in the tree, held, and one output token of its own.
        assert_eq!(
            super::super::used_tokens(&occupancy.snapshot(), Some(&cache)),
            65
        );
        let mut second = start();
        assert_eq!(second.cached_tokens(0), 63);
        assert_eq!(occupancy.snapshot().prefill_uncached, 64 + 1);
        // Its prefill computes the one prompt token it missed.
        assert_eq!(
            super::super::used_tokens(&occupancy.snapshot(), Some(&cache)),
            65 + 1
        );
        second.tick(&Interventions::default());
        // Its prefill keyed a prompt the tree already had: of its tokens only its output is its own.
        assert_eq!(
            super::super::used_tokens(&occupancy.snapshot(), Some(&cache)),
            65 + 1
        );
        first.run_to_end(&Interventions::default());
        second.run_to_end(&Interventions::default());
        assert_eq!(
            super::super::used_tokens(&occupancy.snapshot(), Some(&cache)),
            0,
            "all evictable"
        );
    }
}
