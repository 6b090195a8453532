//! The RL control plane: the registry of in-flight `/generate` requests that `/abort_request` reaches by rid
//! prefix, the pause gate of `/pause_generation`, the running-request limit with its waiting queue, and the
//! current `weight_version`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use mock_core::engine::Occupancy;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};

/// The message of SGLang's `--max-queued-requests` refusal.
pub(crate) const QUEUE_FULL_MESSAGE: &str = "The request queue is full.";

/// How `/pause_generation` treats requests that are already running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PauseMode {
    /// Abort every in-flight request (SGLang's default): running ones return their partial output.
    Abort,
    /// Running requests go back to the waiting queue and resume after `/continue_generation`.
    Retract,
    /// Running requests stay where they are and resume after `/continue_generation`.
    InPlace,
}

impl PauseMode {
    pub(crate) fn parse(mode: &str) -> Option<PauseMode> {
        match mode {
            "abort" => Some(PauseMode::Abort),
            "retract" => Some(PauseMode::Retract),
            "in_place" => Some(PauseMode::InPlace),
            _ => None,
        }
    }
}

/// What a request learns when it asks to run.
#[derive(Debug)]
pub(crate) enum Admission {
    /// It may run; hold the ticket until it is done.
    Run(RunTicket),
    /// The waiting queue is full (`--max-queued-requests`): SGLang answers 503.
    QueueFull,
    /// It was aborted while it waited: "Abort in waiting queue".
    AbortedWaiting,
}

/// Holds a running slot (when `--max-running-requests` is set) and the running count until dropped.
#[derive(Debug)]
pub(crate) struct RunTicket {
    control: Arc<Control>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for RunTicket {
    fn drop(&mut self) {
        if self.control.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.control.drained.notify_waiters();
        }
    }
}

/// Server-wide control state, shared by every handler.
#[derive(Debug)]
pub(crate) struct Control {
    weight_version: RwLock<Arc<str>>,
    /// Which weights serve: the updates applied since start-up, counted from `base_weights`.
    weights: AtomicU64,
    /// The number of the weights the server starts with: its `--weight-version` when that is a number, else 0.
    base_weights: u64,
    /// Held while an update switches the weights and their count.
    switching: std::sync::Mutex<()>,
    /// Counts the changes of `weight_version` and of `weights`, so that a running request notices one with a
    /// single load.
    version_epoch: AtomicU64,
    /// The `model_path` of the last successful `/update_weights_from_disk`; until one, the configured one.
    model_path: RwLock<Option<Arc<str>>>,
    /// `true` while paused; new requests wait and running ones freeze at their next token.
    paused_tx: watch::Sender<bool>,
    paused: AtomicBool,
    /// The mode of the current pause: running requests in a `retract` pause count as retracted.
    retract: AtomicBool,
    /// Requests whose generation has started (or been admitted), for `/flush_cache` and the metrics.
    running: AtomicUsize,
    /// Woken when the last running request ends (a weight update waits for it).
    drained: Notify,
    waiting: AtomicUsize,
    slots: Option<Arc<Semaphore>>,
    max_queued: Option<usize>,
    /// Weight updates in progress: new requests wait for them, as SGLang's writer lock makes them.
    updating: watch::Sender<usize>,
    registry: Mutex<HashMap<u64, Arc<RequestCtl>>>,
    next_id: AtomicU64,
    /// A session opened by `/begin_weight_update` and not yet closed by `/end_weight_update` (0.5.23).
    weight_update_session: AtomicBool,
    /// A held request's rids are known to `/abort_request` (registered before the pause gate).
    held_rids_known: bool,
    /// The server's occupancy board: a request waiting for its turn counts its items there.
    occupancy: Arc<Occupancy>,
    /// Woken by every abort, pause and resume, for the batch loop, which waits on no request's own flags.
    stirred: Notify,
}

impl Control {
    pub(crate) fn new(
        occupancy: Arc<Occupancy>,
        weight_version: &str,
        max_running: Option<usize>,
        max_queued: Option<usize>,
        held_rids_known: bool,
    ) -> Arc<Control> {
        Arc::new(Control {
            weight_version: RwLock::new(Arc::from(weight_version)),
            weights: AtomicU64::new(base_weights(weight_version)),
            base_weights: base_weights(weight_version),
            switching: std::sync::Mutex::new(()),
            version_epoch: AtomicU64::new(0),
            model_path: RwLock::new(None),
            paused_tx: watch::Sender::new(false),
            paused: AtomicBool::new(false),
            retract: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            drained: Notify::new(),
            waiting: AtomicUsize::new(0),
            slots: max_running.map(|n| Arc::new(Semaphore::new(n.max(1)))),
            max_queued,
            updating: watch::Sender::new(0),
            registry: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            weight_update_session: AtomicBool::new(false),
            held_rids_known,
            occupancy,
            stirred: Notify::new(),
        })
    }

    /// Opens the weight-update session; `false` when one is open already.
    pub(crate) fn open_weight_update_session(&self) -> bool {
        !self.weight_update_session.swap(true, Ordering::AcqRel)
    }

    /// Closes the weight-update session; `false` when none is open.
    pub(crate) fn close_weight_update_session(&self) -> bool {
        self.weight_update_session.swap(false, Ordering::AcqRel)
    }

    /// The `weight_version` responses report now.
    pub(crate) fn weight_version(&self) -> Arc<str> {
        self.weight_version
            .read()
            .map(|v| Arc::clone(&v))
            .unwrap_or_else(|poisoned| Arc::clone(&poisoned.into_inner()))
    }

    pub(crate) fn set_weight_version(&self, version: &str) {
        let mut guard = self
            .weight_version
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *guard = Arc::from(version);
        self.version_epoch.fetch_add(1, Ordering::Release);
    }

    /// The number of the weights that serve now: the weight updates applied since start-up (or the last
    /// reset), counted from the start version when that is a number.
    pub(crate) fn weights(&self) -> u64 {
        self.weights.load(Ordering::Acquire)
    }

    /// A weight update loaded new weights (whether or not it set a version). `switch` runs first, with the count
    /// the new weights serve as, one update at a time, so that the policy and its count move together.
    pub(crate) fn weights_loaded(&self, switch: impl FnOnce(u64)) {
        let _one = self.switching.lock().unwrap_or_else(|e| e.into_inner());
        switch(self.weights() + 1);
        self.weights.fetch_add(1, Ordering::AcqRel);
        self.version_epoch.fetch_add(1, Ordering::Release);
    }

    /// Back to the weights the server started with (`/admin/reset`).
    pub(crate) fn reset_weights(&self, version: &str) {
        self.weights.store(self.base_weights, Ordering::Release);
        self.set_weight_version(version);
    }

    /// How many times `weight_version` or the weights have changed: a request compares it before every tick.
    #[inline]
    pub(crate) fn version_epoch(&self) -> u64 {
        self.version_epoch.load(Ordering::Acquire)
    }

    /// The model path that `/update_weights_from_disk` last loaded, if it has loaded one.
    pub(crate) fn updated_model_path(&self) -> Option<Arc<str>> {
        self.model_path
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Records a model path loaded by `/update_weights_from_disk`: SGLang's tokenizer manager then reports it as
    /// `model_path` and as `served_model_name` (`TM: _update_model_path_info`).
    pub(crate) fn set_model_path(&self, path: &str) {
        *self
            .model_path
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Arc::from(path));
    }

    /// The message of a user or weight-update abort of a running request.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Whether generation is paused in `retract` mode (running requests are back in the queue).
    pub(crate) fn is_retracting(&self) -> bool {
        self.is_paused() && self.retract.load(Ordering::Relaxed)
    }

    /// Register a request's rids (one per item; `prompt_tokens` over them all) so that `/abort_request` can
    /// reach it; unregistered when the handle drops. With `unique`, a rid that a live request holds already is
    /// refused: `Err` names it, and nothing is registered.
    pub(crate) fn register(
        self: &Arc<Self>,
        rids: Vec<String>,
        prompt_tokens: usize,
        unique: bool,
    ) -> Result<CtlHandle, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut registry = self.lock_registry();
        if unique
            && let Some(rid) = rids.iter().find(|rid| {
                registry
                    .values()
                    .any(|live| live.rids.iter().any(|r| r == *rid))
            })
        {
            return Err(rid.clone());
        }
        let ctl = Arc::new(RequestCtl {
            aborted: rids.iter().map(|_| AtomicBool::new(false)).collect(),
            held: AtomicBool::new(true),
            prompt_tokens,
            rids,
            any: AtomicBool::new(false),
            notify: Notify::new(),
        });
        registry.insert(id, Arc::clone(&ctl));
        Ok(CtlHandle {
            control: Arc::clone(self),
            id,
            ctl,
        })
    }

    fn lock_registry(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<RequestCtl>>> {
        self.registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `/abort_request`, as SGLang's two stages take it. The tokenizer manager passes an abort on only for a rid
    /// it knows exactly (`TM: abort_request`, `rid_to_state`), so a prefix that is no live rid (a batch's parent
    /// rid, say) does nothing, and an empty rid without `abort_all` neither. The scheduler then aborts every item
    /// it has whose rid starts with `rid`, or everything with `abort_all` (`SCH: abort_request`): requests held
    /// at the pause or weight-update gate are not there, so they survive and run once the gate opens. Returns how
    /// many items were hit.
    pub(crate) fn abort(&self, rid: &str, abort_all: bool) -> usize {
        if rid.is_empty() && !abort_all {
            return 0;
        }
        let registry = self.lock_registry();
        let known = |ctl: &RequestCtl| self.held_rids_known || !ctl.held.load(Ordering::Acquire);
        if !abort_all
            && !registry
                .values()
                .any(|ctl| known(ctl) && ctl.rids.iter().any(|r| r == rid))
        {
            return 0;
        }
        let mut hit = 0;
        for ctl in registry.values() {
            if ctl.held.load(Ordering::Acquire) {
                continue;
            }
            let mut any = false;
            for (i, item_rid) in ctl.rids.iter().enumerate() {
                if abort_all || item_rid.starts_with(rid) {
                    ctl.aborted[i].store(true, Ordering::Relaxed);
                    any = true;
                    hit += 1;
                }
            }
            if any {
                ctl.any.store(true, Ordering::Release);
                ctl.notify.notify_one();
            }
        }
        if hit > 0 {
            self.stirred.notify_waiters();
        }
        hit
    }

    /// Woken by every abort that hits, every pause and every resume.
    pub(crate) fn stirred(&self) -> &Notify {
        &self.stirred
    }

    /// `/pause_generation`: close the gate; with [`PauseMode::Abort`] also abort everything in flight.
    pub(crate) fn pause(&self, mode: PauseMode) {
        self.retract
            .store(mode == PauseMode::Retract, Ordering::Relaxed);
        self.paused.store(true, Ordering::Release);
        self.paused_tx.send_replace(true);
        if mode == PauseMode::Abort {
            self.abort("", true);
        }
        self.stirred.notify_waiters();
    }

    /// `/continue_generation`: open the gate; waiting and frozen requests go on.
    pub(crate) fn resume(&self) {
        self.paused.store(false, Ordering::Release);
        self.paused_tx.send_replace(false);
        self.stirred.notify_waiters();
    }

    /// Mark a weight update as in progress until the guard drops: new requests wait for it.
    pub(crate) fn begin_update(self: &Arc<Self>) -> UpdateGuard {
        self.updating.send_modify(|n| *n += 1);
        UpdateGuard {
            control: Arc::clone(self),
        }
    }

    /// Wait until no request is running (SGLang's weight-update writer lock), unless generation is paused.
    pub(crate) async fn drain_running(&self) {
        let mut rx = self.paused_tx.subscribe();
        loop {
            // Registered before the check, so a request that ends in between still wakes this wait.
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.running.load(Ordering::Acquire) == 0 || self.is_paused() {
                return;
            }
            tokio::select! {
                () = drained => {}
                _ = rx.changed() => {}
            }
        }
    }

    /// Waits until no request runs, paused or not, calling `again` every `period` meanwhile: a pause in abort
    /// mode waits so, re-sending its abort-all every second until no request holds the model-update lock
    /// (`TM: pause_generation`, 0.5.15 and later).
    pub(crate) async fn wait_idle(&self, period: std::time::Duration, mut again: impl FnMut()) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            tokio::select! {
                () = drained => {}
                () = tokio::time::sleep(period) => again(),
            }
        }
    }

    /// Wait for permission to run: the pause gate, a weight update and the running limit. A full waiting queue
    /// refuses at once; an abort while waiting ends the wait.
    pub(crate) async fn admit(self: &Arc<Self>, handle: &CtlHandle) -> Admission {
        self.pass_gates().await;
        handle.ctl.held.store(false, Ordering::Release);
        let gate_open = !self.is_paused() && *self.updating.borrow() == 0;
        if gate_open {
            let permit = match &self.slots {
                None => Some(None),
                Some(slots) => Arc::clone(slots).try_acquire_owned().ok().map(Some),
            };
            if let Some(permit) = permit {
                return Admission::Run(self.ticket(permit));
            }
        }
        if self.max_queued.is_some_and(|limit| self.waiting() >= limit) {
            return Admission::QueueFull;
        }
        // A guard, so that a client that disconnects while waiting (dropping this future) is no longer counted.
        let waiting = Waiting::enter(self);
        let items = self
            .occupancy
            .enter_waiting(handle.ctl.rids.len(), handle.ctl.prompt_tokens);
        let outcome = self.wait_for_turn(handle).await;
        drop((waiting, items));
        match outcome {
            Some(permit) => Admission::Run(self.ticket(permit)),
            None => Admission::AbortedWaiting,
        }
    }

    /// Waits while generation is paused or weights are updating: the tokenizer manager holds a new request
    /// there before the scheduler sees it, so the wait counts in no queue and no abort ends it.
    async fn pass_gates(&self) {
        let mut paused = self.paused_tx.subscribe();
        let mut updating = self.updating.subscribe();
        loop {
            if !*paused.borrow_and_update() && *updating.borrow_and_update() == 0 {
                return;
            }
            // Both senders live as long as `self`, so neither `changed` fails.
            tokio::select! {
                _ = paused.changed() => {}
                _ = updating.changed() => {}
            }
        }
    }

    fn ticket(self: &Arc<Self>, permit: Option<OwnedSemaphorePermit>) -> RunTicket {
        self.running.fetch_add(1, Ordering::Relaxed);
        RunTicket {
            control: Arc::clone(self),
            _permit: permit,
        }
    }

    /// `None` when aborted while waiting.
    async fn wait_for_turn(&self, handle: &CtlHandle) -> Option<Option<OwnedSemaphorePermit>> {
        let mut paused = self.paused_tx.subscribe();
        let mut updating = self.updating.subscribe();
        loop {
            if handle.ctl.any_aborted() {
                return None;
            }
            let open = !*paused.borrow_and_update() && *updating.borrow_and_update() == 0;
            if open {
                match &self.slots {
                    None => return Some(None),
                    Some(slots) => {
                        tokio::select! {
                            permit = Arc::clone(slots).acquire_owned() => {
                                // The semaphore is never closed.
                                let permit = permit.ok()?;
                                if handle.ctl.any_aborted() {
                                    return None;
                                }
                                if !self.is_paused() {
                                    return Some(Some(permit));
                                }
                            }
                            () = handle.ctl.notify.notified() => {}
                        }
                        continue;
                    }
                }
            }
            tokio::select! {
                _ = paused.changed() => {}
                _ = updating.changed() => {}
                () = handle.ctl.notify.notified() => {}
            }
        }
    }

    /// Wait while generation is paused (a retracted or frozen request); returns early when aborted. Returns
    /// whether the pause retracted the request (it then counts as waiting meanwhile).
    pub(crate) async fn wait_unpaused(&self, ctl: &RequestCtl) -> bool {
        let retracted = self.is_paused() && self.retract.load(Ordering::Relaxed);
        let _waiting = retracted.then(|| Waiting::enter(self));
        self.wait_gate(ctl).await;
        retracted
    }

    async fn wait_gate(&self, ctl: &RequestCtl) {
        let mut rx = self.paused_tx.subscribe();
        loop {
            if !*rx.borrow_and_update() || ctl.any_aborted() {
                return;
            }
            tokio::select! {
                _ = rx.changed() => {}
                () = ctl.notify.notified() => {}
            }
        }
    }
}

/// Counts a request as waiting until dropped.
struct Waiting<'a>(&'a Control);

impl<'a> Waiting<'a> {
    fn enter(control: &'a Control) -> Waiting<'a> {
        control.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(control)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Ends a weight update when dropped.
#[derive(Debug)]
pub(crate) struct UpdateGuard {
    control: Arc<Control>,
}

impl Drop for UpdateGuard {
    fn drop(&mut self) {
        self.control
            .updating
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The abort flags of one `/generate` request, one per item.
#[derive(Debug)]
pub(crate) struct RequestCtl {
    rids: Vec<String>,
    /// The prompt tokens of all its items, counted while it waits for a turn.
    prompt_tokens: usize,
    /// Held at the tokenizer manager's gates (a pause, a weight update): the scheduler has not seen the
    /// request, so no abort reaches it (`TM: generate_request` waits there before sending it on).
    held: AtomicBool,
    aborted: Vec<AtomicBool>,
    any: AtomicBool,
    notify: Notify,
}

impl RequestCtl {
    /// Whether any item of the request has been aborted (one relaxed load: cheap enough for every token).
    #[inline]
    pub(crate) fn any_aborted(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    pub(crate) fn is_aborted(&self, item: usize) -> bool {
        self.aborted
            .get(item)
            .is_some_and(|a| a.load(Ordering::Relaxed))
    }

    /// Resolves when an abort reaches this request (or at once if one arrived since the last call).
    pub(crate) async fn aborted(&self) {
        if self.any_aborted() {
            return;
        }
        self.notify.notified().await;
    }
}

/// A registered request; dropping it removes the request from the registry.
#[derive(Debug)]
pub(crate) struct CtlHandle {
    control: Arc<Control>,
    id: u64,
    ctl: Arc<RequestCtl>,
}

impl CtlHandle {
    pub(crate) fn ctl(&self) -> &Arc<RequestCtl> {
        &self.ctl
    }
}

impl Drop for CtlHandle {
    fn drop(&mut self) {
        self.control.lock_registry().remove(&self.id);
    }
}

/// The number of the weights a server started with `version` serves: the version when it is a whole number
/// (a trainer that counts its updates from there), else 0.
fn base_weights(version: &str) -> u64 {
    version.parse().unwrap_or(0)
}
