//! The batch loop of a server with a bounded KV pool (`--max-total-tokens`): one task that steps every running
//! sample of every request together, as SGLang's scheduler does, deciding each step with the engine's
//! [`Scheduler`] (admission on the pool and the new-token ratio, chunked prefill, retraction for want of KV).
//!
//! Each request's driver still owns its [`Run`](mock_core::engine::Run) and encodes its own answer; it joins the
//! loop with a [`Lane`] and, before every tick, waits for the loop's [`Grant`]: which of its items step, which
//! wait, which were retracted. It acknowledges the tick with the items that ended, and the loop goes on to the
//! next step once every granted request has. Streams run in a task of their own
//! ([`detach`](crate::http::drive)), so a client slow to read holds up no one.
//!
//! Each step takes the latency model's time for its batch ([`LatencyConfig::step`]) before its tokens come out.
//! On the logical clock the loop also counts those times, and each grant says how long its request has been in
//! the loop then, which is what the request reports as its times: the same for the same requests, whatever the
//! machine does meanwhile.
//!
//! The loop also carries out what the control plane asks of running samples: while generation is paused it
//! steps no one, except samples aborted by the pause (or any abort), which take the one more step an abort
//! gets; a `retract` pause sends the whole batch back to the queue; a sample aborted in the queue ends there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mock_core::engine::{
    Occupancy, SchedConfig, SchedLoad, Scheduler, SeqId, SeqSpec, StepKind, Turn,
};
use mock_core::{Clock, LatencyConfig};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::control::{Control, RequestCtl};

/// What a request's items do in one step of the batch.
#[derive(Debug)]
pub(crate) struct Grant {
    /// Per item: step, wait, or end aborted in the queue.
    pub(crate) turns: Vec<Turn>,
    /// Items retracted before the step (for want of KV, or by a `retract` pause).
    pub(crate) retracted: Vec<usize>,
    /// Every sample of the request was aborted in the waiting queue before any of them ran: SGLang answers
    /// such a request with its waiting-queue abort objects.
    pub(crate) never_ran: bool,
    /// On the logical clock, the seconds since the request joined the loop when this step's tokens come out.
    pub(crate) elapsed: Option<f64>,
    /// Where the driver reports the items its tick ended.
    ack: oneshot::Sender<Vec<usize>>,
}

impl Grant {
    /// Reports the tick's ends: the items whose progress was an end.
    pub(crate) fn done(self, ended: Vec<usize>) {
        // A loop that is gone has nothing to learn.
        let _ = self.ack.send(ended);
    }
}

/// A request's place in the batch loop; leaving it (dropping it) takes its samples out of the scheduler.
#[derive(Debug)]
pub(crate) struct Lane {
    batcher: Arc<Batcher>,
    id: u64,
    grants: mpsc::UnboundedReceiver<Grant>,
}

impl Lane {
    /// The next step's grant; `None` only if the loop is gone.
    pub(crate) async fn next(&mut self) -> Option<Grant> {
        self.grants.recv().await
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.batcher.leave(self.id);
    }
}

#[derive(Debug)]
struct LaneState {
    grants: mpsc::UnboundedSender<Grant>,
    ctl: Arc<RequestCtl>,
    /// Each item's sample, while it is in the scheduler.
    seqs: Vec<Option<SeqId>>,
    /// Whether any of its samples has been prefilled.
    ran: bool,
    /// The logical clock's time when it joined.
    joined: Duration,
}

#[derive(Debug)]
struct Lanes {
    sched: Scheduler,
    lanes: HashMap<u64, LaneState>,
    /// Which lane and item each sample is.
    owners: HashMap<SeqId, (u64, usize)>,
    next_lane: u64,
    /// What the loop last put on the occupancy board.
    shown: SchedLoad,
    /// The logical clock: the steps' times so far.
    now: Duration,
    /// Steps so far, which seed the latency model's jitter.
    steps: u64,
}

impl Lanes {
    /// Takes item `item` of lane `lane` out of the scheduler: it ended, or was aborted in the queue.
    fn forget(&mut self, lane: u64, item: usize) {
        let seq = self
            .lanes
            .get_mut(&lane)
            .and_then(|l| l.seqs.get_mut(item))
            .and_then(Option::take);
        if let Some(seq) = seq {
            self.drop_seq(seq);
        }
    }

    fn drop_seq(&mut self, seq: SeqId) {
        self.sched.leave(seq);
        self.owners.remove(&seq);
    }
}

/// The batch loop's shared state.
#[derive(Debug)]
pub(crate) struct Batcher {
    lanes: Mutex<Lanes>,
    /// Woken when a request joins or leaves.
    wake: Notify,
    started: AtomicBool,
    control: Arc<Control>,
    occupancy: Arc<Occupancy>,
    latency: LatencyConfig,
}

/// One step as the loop hands it out.
struct Planned {
    grants: Vec<(mpsc::UnboundedSender<Grant>, Grant)>,
    acks: Vec<(u64, oneshot::Receiver<Vec<usize>>)>,
    delay: Duration,
}

impl Batcher {
    pub(crate) fn new(
        config: SchedConfig,
        control: Arc<Control>,
        occupancy: Arc<Occupancy>,
        latency: LatencyConfig,
    ) -> Arc<Batcher> {
        Arc::new(Batcher {
            lanes: Mutex::new(Lanes {
                sched: Scheduler::new(config),
                lanes: HashMap::new(),
                owners: HashMap::new(),
                next_lane: 0,
                shown: SchedLoad::default(),
                now: Duration::ZERO,
                steps: 0,
            }),
            wake: Notify::new(),
            started: AtomicBool::new(false),
            control,
            occupancy,
            latency,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A request joins the queue with its items' samples (`None` for an item that does not generate: refused
    /// or failed at the start).
    pub(crate) fn join(
        self: &Arc<Self>,
        ctl: Arc<RequestCtl>,
        specs: Vec<Option<SeqSpec>>,
    ) -> Lane {
        if !self.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(Arc::clone(self).run());
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let id = {
            let mut lanes = self.lock();
            let id = lanes.next_lane;
            lanes.next_lane += 1;
            let seqs: Vec<Option<SeqId>> = specs
                .into_iter()
                .map(|spec| spec.map(|spec| lanes.sched.arrive(spec)))
                .collect();
            for (item, seq) in seqs.iter().enumerate() {
                if let Some(seq) = seq {
                    lanes.owners.insert(*seq, (id, item));
                }
            }
            let joined = lanes.now;
            lanes.lanes.insert(
                id,
                LaneState {
                    grants: tx,
                    ctl,
                    seqs,
                    ran: false,
                    joined,
                },
            );
            self.show(&mut lanes);
            id
        };
        self.wake.notify_one();
        Lane {
            batcher: Arc::clone(self),
            id,
            grants: rx,
        }
    }

    fn leave(&self, id: u64) {
        let mut lanes = self.lock();
        if let Some(lane) = lanes.lanes.remove(&id) {
            for seq in lane.seqs.into_iter().flatten() {
                lanes.drop_seq(seq);
            }
        }
        self.show(&mut lanes);
        drop(lanes);
        self.wake.notify_one();
    }

    /// Puts the scheduler's running and waiting samples on the occupancy board.
    fn show(&self, lanes: &mut Lanes) {
        let now = lanes.sched.load();
        self.occupancy.show_schedule(&lanes.shown, &now);
        lanes.shown = now;
    }

    async fn run(self: Arc<Self>) {
        loop {
            let wake = self.wake.notified();
            let stirred = self.control.stirred().notified();
            tokio::pin!(wake, stirred);
            wake.as_mut().enable();
            stirred.as_mut().enable();
            let Some(planned) = self.plan() else {
                tokio::select! {
                    () = wake => {}
                    () = stirred => {}
                }
                continue;
            };
            // The step takes its time before its tokens come out; on the logical clock, that time divided by the
            // clock's speed.
            let wait = match self.latency.clock {
                Clock::Wall => planned.delay,
                Clock::Logical => {
                    let seconds = planned.delay.as_secs_f64() / self.latency.clock_speed;
                    Duration::try_from_secs_f64(seconds).unwrap_or(Duration::ZERO)
                }
            };
            if wait.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(wait).await;
            }
            for (tx, grant) in planned.grants {
                // A lane whose driver is gone leaves on its own; its grant is dropped with it.
                let _ = tx.send(grant);
            }
            let mut ended = Vec::new();
            for (lane, ack) in planned.acks {
                if let Ok(items) = ack.await {
                    ended.extend(items.into_iter().map(|item| (lane, item)));
                }
            }
            {
                let mut lanes = self.lock();
                for (lane, item) in ended {
                    lanes.forget(lane, item);
                }
                self.show(&mut lanes);
            }
        }
    }

    /// Decides the next step and the grants that carry it out; `None` when there is nothing to do until a
    /// request joins or leaves, or the control plane stirs.
    fn plan(&self) -> Option<Planned> {
        let mut lanes = self.lock();
        let lanes = &mut *lanes;
        let mut grants = Grants::default();

        // Samples aborted in the queue end there.
        let mut aborted_waiting = Vec::new();
        for (&id, lane) in &lanes.lanes {
            if !lane.ctl.any_aborted() {
                continue;
            }
            for (item, seq) in lane.seqs.iter().enumerate() {
                if let Some(seq) = seq
                    && lane.ctl.is_aborted(item)
                    && !lanes.sched.is_running(*seq)
                {
                    aborted_waiting.push((id, item));
                }
            }
        }
        for (lane, item) in aborted_waiting {
            lanes.forget(lane, item);
            if let Some(g) = grants.of(lanes, lane) {
                g.turns[item] = Turn::AbortWaiting;
            }
        }
        for (&id, grant) in &mut grants.of_lane {
            let lane = &lanes.lanes[&id];
            let aborted = |item: usize| grant.turns[item] == Turn::AbortWaiting;
            grant.never_ran = !lane.ran
                && lane
                    .seqs
                    .iter()
                    .enumerate()
                    .all(|(item, seq)| seq.is_none() || aborted(item));
        }

        let mut stepping: Vec<SeqId> = Vec::new();
        let mut retracted: Vec<SeqId> = Vec::new();
        let mut kind = StepKind::Decode;
        let mut prefill_tokens = 0;
        // A step the scheduler took, even one that only prefills a chunk of a prompt (no grant then).
        let mut scheduled = false;
        if self.control.is_paused() {
            if self.control.is_retracting() {
                retracted = lanes.sched.retract_all();
            }
            // Only an abort moves a sample while paused: it takes its one more step and ends.
            for (&seq, &(lane, item)) in &lanes.owners {
                if lanes.sched.is_running(seq) && lanes.lanes[&lane].ctl.is_aborted(item) {
                    stepping.push(seq);
                }
            }
            stepping.sort_unstable();
        } else if let Some(step) = lanes.sched.schedule() {
            scheduled = true;
            kind = step.kind;
            stepping = step.stepping;
            retracted = step.retracted;
            prefill_tokens = step.prefill_tokens;
        }
        for &seq in &retracted {
            if let Some(&(lane, item)) = lanes.owners.get(&seq)
                && let Some(g) = grants.of(lanes, lane)
            {
                g.retracted.push(item);
            }
        }
        for &seq in &stepping {
            let Some(&(lane, item)) = lanes.owners.get(&seq) else {
                continue;
            };
            if let Some(g) = grants.of(lanes, lane) {
                g.turns[item] = Turn::Step;
            }
            if let Some(state) = lanes.lanes.get_mut(&lane) {
                state.ran = true;
            }
        }
        self.show(lanes);
        if grants.of_lane.is_empty() && !scheduled {
            return None;
        }
        // A step that computes nothing (it only tells of retractions or aborts in the queue) takes no time.
        let computes = !stepping.is_empty() || prefill_tokens > 0;
        let delay = if self.latency.is_active() && computes {
            let prefill = (kind == StepKind::Prefill).then_some(prefill_tokens);
            self.latency.step(prefill, stepping.len(), lanes.steps)
        } else {
            Duration::ZERO
        };
        lanes.steps += 1;
        if self.latency.clock == Clock::Logical {
            lanes.now += delay;
            for (id, grant) in &mut grants.of_lane {
                let joined = lanes.lanes[id].joined;
                grant.elapsed = Some(lanes.now.saturating_sub(joined).as_secs_f64());
            }
        }
        Some(Planned {
            grants: grants
                .of_lane
                .into_iter()
                .map(|(lane, grant)| (lanes.lanes[&lane].grants.clone(), grant))
                .collect(),
            acks: grants.acks,
            delay,
        })
    }
}

/// The grants of one step as the loop builds them, one per request it moves.
#[derive(Default)]
struct Grants {
    of_lane: HashMap<u64, Grant>,
    acks: Vec<(u64, oneshot::Receiver<Vec<usize>>)>,
}

impl Grants {
    /// The grant of lane `lane` (every item waiting until told otherwise); `None` for a lane that left.
    fn of(&mut self, lanes: &Lanes, lane: u64) -> Option<&mut Grant> {
        let items = lanes.lanes.get(&lane)?.seqs.len();
        Some(self.of_lane.entry(lane).or_insert_with(|| {
            let (ack, rx) = oneshot::channel();
            self.acks.push((lane, rx));
            Grant {
                turns: vec![Turn::Wait; items],
                retracted: Vec::new(),
                never_ran: false,
                elapsed: None,
                ack,
            }
        }))
    }
}
