//! What a server is running and queueing now, item by item, as SGLang's scheduler counts its requests for
//! `/v1/loads` and `/get_load`: the runs add themselves ([`super::Run::with_occupancy`]), the admission queue
//! adds the items that wait for a turn ([`Occupancy::enter_waiting`]), and a load report reads one
//! [`Occupancy::snapshot`].
//!
//! SGLang counts a `Req` per sample (a batch of 3 prompts with `n = 2` is 6 requests) and its tokens as
//! `seqlen`, the prompt plus the output so far. The KV pool's used tokens are not kept here: they are the
//! running requests' tokens less what the prefix cache shares between them ([`used_tokens`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::cache::{InUse, SharedCache, lock};
use super::sched::SchedLoad;

/// The server-wide counts, updated with relaxed atomics (a report reads each count once; one may run a tick
/// ahead of another, as two reads of SGLang's scheduler state a step apart would).
#[derive(Debug, Default)]
pub struct Occupancy {
    running: AtomicUsize,
    running_tokens: AtomicUsize,
    waiting: AtomicUsize,
    waiting_tokens: AtomicUsize,
    /// Prompt tokens prefilled since start-up that the prefix cache did not hold.
    prefill_uncached: AtomicU64,
}

/// One reading of an [`Occupancy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    /// Items generating (`len(running_batch.reqs)`).
    pub running: usize,
    /// Their tokens: prompts and outputs so far.
    pub running_tokens: usize,
    /// Items in the waiting queue, retracted ones included.
    pub waiting: usize,
    /// Their tokens (`req.seqlen`: a retracted item's output so far too).
    pub waiting_tokens: usize,
    /// `total_prefill_uncached_tokens`.
    pub prefill_uncached: u64,
}

/// Where a run's items are counted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Running,
    /// In the waiting queue: waiting for a turn, or sent back by a `retract` pause.
    Waiting,
}

/// Items and tokens, as one party (a run, a waiting request) has put them on the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Count {
    pub items: usize,
    pub tokens: usize,
}

impl Occupancy {
    pub fn new() -> Occupancy {
        Occupancy::default()
    }

    pub fn snapshot(&self) -> Load {
        Load {
            running: self.running.load(Ordering::Relaxed),
            running_tokens: self.running_tokens.load(Ordering::Relaxed),
            waiting: self.waiting.load(Ordering::Relaxed),
            waiting_tokens: self.waiting_tokens.load(Ordering::Relaxed),
            prefill_uncached: self.prefill_uncached.load(Ordering::Relaxed),
        }
    }

    /// Counts `items` items of `tokens` prompt tokens as waiting for a turn until the guard drops.
    pub fn enter_waiting(&self, items: usize, tokens: usize) -> WaitingItems<'_> {
        let count = Count { items, tokens };
        self.apply(Place::Waiting, count, true);
        WaitingItems { board: self, count }
    }

    pub fn prefilled(&self, uncached: usize) {
        self.prefill_uncached
            .fetch_add(uncached as u64, Ordering::Relaxed);
    }

    /// Moves a run's count from `old` at `from` to `new` at `to`.
    /// Replaces what a batch scheduler last put on the board (`old`) with what it runs and queues now.
    pub fn show_schedule(&self, old: &SchedLoad, new: &SchedLoad) {
        let running = |l: &SchedLoad| Count {
            items: l.running,
            tokens: l.running_tokens,
        };
        let waiting = |l: &SchedLoad| Count {
            items: l.waiting,
            tokens: l.waiting_tokens,
        };
        self.shift(Place::Running, running(old), Place::Running, running(new));
        self.shift(Place::Waiting, waiting(old), Place::Waiting, waiting(new));
    }

    pub(crate) fn shift(&self, from: Place, old: Count, to: Place, new: Count) {
        if from == to && old == new {
            return;
        }
        self.apply(from, old, false);
        self.apply(to, new, true);
    }

    /// Adds `count` at `place` (`add`) or takes it away.
    fn apply(&self, place: Place, count: Count, add: bool) {
        let change = |field: &AtomicUsize, n: usize| match add {
            true => field.fetch_add(n, Ordering::Relaxed),
            false => field.fetch_sub(n, Ordering::Relaxed),
        };
        match place {
            Place::Running => {
                change(&self.running, count.items);
                change(&self.running_tokens, count.tokens);
            }
            Place::Waiting => {
                change(&self.waiting, count.items);
                change(&self.waiting_tokens, count.tokens);
            }
        }
    }

    /// Takes a run's count away (the run is over).
    pub(crate) fn leave(&self, place: Place, count: Count) {
        self.apply(place, count, false);
    }
}

/// Items waiting for a turn, counted until dropped.
#[derive(Debug)]
pub struct WaitingItems<'a> {
    board: &'a Occupancy,
    count: Count,
}

impl Drop for WaitingItems<'_> {
    fn drop(&mut self) {
        self.board.apply(Place::Waiting, self.count, false);
    }
}

/// The KV pool's used tokens (SGLang's `max_total_num_tokens - available_size - evictable_size`): the running
/// items' tokens, with a prefix they hold in the cache counted once, plus what else of the tree they hold.
pub fn used_tokens(load: &Load, cache: Option<&SharedCache>) -> usize {
    let InUse { protected, held } = cache.map(|c| lock(c).in_use()).unwrap_or_default();
    (load.running_tokens + protected).saturating_sub(held)
}
