//! The batch scheduler: which samples run in each step of a server whose KV pool is bounded, as SGLang's
//! scheduler decides it (0.5.23, `srt/managers/scheduler.py` and `schedule_policy.py`). Pure and
//! deterministic: the same arrivals and the same ends give the same steps, admissions and retractions.
//!
//! A step is a prefill or a decode, never both (SGLang's default, without `--enable-mixed-chunk`):
//!
//! - **Prefill** when the waiting queue has samples that fit. Samples are taken in queue order (`fcfs`), or by
//!   longest cached prefix first (`lpm`, which SGLang falls back from to `fcfs` past 128 waiting). A sample fits
//!   when `extend + min(max_new − out, 4096) + page` is below what remains: the pool's free tokens, minus what
//!   every running sample may still decode, `min(max_new − out, 4096)` scaled by the new-token ratio (by 1
//!   under `ignore_eos`, `PrefillAdder._get_running_request_total_token_offset`), minus the samples admitted
//!   before it in this step. Admission also stops at `--max-running-requests` running samples, at
//!   `--max-prefill-tokens` prompt tokens in the step (after its first sample), and at `--chunked-prefill-size`
//!   tokens, where a longer prompt is prefilled in chunks over several steps and makes its first token with
//!   its last chunk. A sample that does not fit marks the batch full until a running sample leaves; a prefill
//!   step makes the first token of each sample whose prompt it completed.
//! - **Decode** otherwise: every running sample makes one token. When the pool has fewer free tokens than
//!   running samples, samples are retracted, fewest output tokens first (the longest prompt first among
//!   equals, then the latest in the batch), until the rest fit; they go to the back of the queue with their
//!   output kept, and come back with their prompt and output prefilled again (`ScheduleBatch.retract_decode`).
//!   Retraction sets the new-token ratio to `(Σ out + 20 × n) / (Σ max_new + 1)` of the samples left; each
//!   decode step without one lowers it by `(init − min) / 600` down to `min = init × 0.14`, from
//!   `init = 0.7 × --schedule-conservativeness`; an idle step resets it (`NewTokenRatioTracker`).
//!
//! A sample holds `extend + out` tokens of the pool while it runs (`extend`: the prompt less its cached
//! prefix): its prompt's KV and one slot per output token, the last one allocated a step ahead as the overlap
//! scheduler of 0.5.15 and 0.5.23 allocates it, or one fewer on 0.5.3 ([`DecodeSlot`]). Prefixes in the prefix
//! cache are not charged to the pool. What a sample reserves is its release's ([`Reservations`]); the rules
//! above are 0.5.23's, and each release's recorded batches are replayed in this module's tests.

use std::collections::{BTreeMap, VecDeque};

use crate::config::ServerConfig;
use crate::release::{DecodeSlot, Reservations};

/// `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`: the most new tokens a reservation counts per sample.
pub const CLIP_MAX_NEW_TOKENS: usize = 4096;
/// `SGLANG_INIT_NEW_TOKEN_RATIO`.
const INIT_NEW_TOKEN_RATIO: f64 = 0.7;
/// `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`.
const MIN_NEW_TOKEN_RATIO_FACTOR: f64 = 0.14;
/// `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`.
const NEW_TOKEN_RATIO_DECAY_STEPS: f64 = 600.0;
/// `SGLANG_RETRACT_DECODE_STEPS`: the decode steps a retraction's new ratio assumes each remaining sample
/// still takes.
const RETRACT_DECODE_STEPS: usize = 20;
/// Past this many waiting samples, `lpm` schedules as `fcfs` (`SchedulePolicy._determine_active_policy`).
const LPM_FALLBACK_QUEUE: usize = 128;

/// SGLang's `--schedule-policy`: the order in which waiting samples are admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchedulePolicy {
    /// First come, first served (SGLang's default).
    #[default]
    Fcfs,
    /// Longest cached prefix first.
    Lpm,
}

impl SchedulePolicy {
    /// The policy named as SGLang's flag names it.
    pub fn parse(name: &str) -> Option<SchedulePolicy> {
        match name {
            "fcfs" => Some(SchedulePolicy::Fcfs),
            "lpm" => Some(SchedulePolicy::Lpm),
            _ => None,
        }
    }
}

/// The knobs of SGLang's scheduler that decide admission and retraction.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedConfig {
    /// `--max-total-tokens`: the KV pool's size in tokens.
    pub max_total_tokens: usize,
    /// `--max-running-requests`: most samples running at once.
    pub max_running_requests: Option<usize>,
    /// `--max-prefill-tokens`: most prompt tokens a prefill step takes (its first sample is always taken).
    pub max_prefill_tokens: usize,
    /// `--chunked-prefill-size`: most prompt tokens a prefill step computes; a longer prompt is split.
    pub chunked_prefill_size: Option<usize>,
    /// `--schedule-policy`.
    pub policy: SchedulePolicy,
    /// `--schedule-conservativeness`: scales the new-token ratio's starting value.
    pub conservativeness: f64,
    /// `--page-size`: each sample's reservation counts one page more (0.5.15 on).
    pub page_size: usize,
    /// The release's reservation rules.
    pub reservations: Reservations,
    /// When a decoding sample's next token takes its slot in the pool.
    pub decode_slot: DecodeSlot,
}

impl SchedConfig {
    /// The scheduler of a server configured as `config`, when it schedules: `--max-total-tokens` given, or
    /// `always` (the logical clock, whose times are a batch loop's steps), with a pool of 2^20 tokens.
    pub fn of_server(config: &ServerConfig, always: bool) -> Option<SchedConfig> {
        if config.max_total_tokens.is_none() && !always {
            return None;
        }
        let pool = config.kv_pool_tokens();
        Some(SchedConfig {
            max_total_tokens: usize::try_from(pool).unwrap_or(usize::MAX),
            max_running_requests: config.max_running_requests,
            max_prefill_tokens: config.max_prefill_tokens,
            chunked_prefill_size: usize::try_from(config.chunked_prefill_size)
                .ok()
                .filter(|&size| size > 0),
            policy: SchedulePolicy::parse(&config.schedule_policy).unwrap_or_default(),
            conservativeness: config.schedule_conservativeness,
            page_size: config.page_size as usize,
            reservations: config.sglang_version.reservations,
            decode_slot: config.sglang_version.decode_slot,
        })
    }
}

impl Default for SchedConfig {
    /// SGLang's defaults, with a pool of 2^20 tokens.
    fn default() -> SchedConfig {
        SchedConfig {
            max_total_tokens: 1 << 20,
            max_running_requests: None,
            max_prefill_tokens: 16_384,
            chunked_prefill_size: Some(8192),
            policy: SchedulePolicy::Fcfs,
            conservativeness: 1.0,
            page_size: 1,
            reservations: Reservations::IgnoreEosWhole,
            decode_slot: DecodeSlot::Ahead,
        }
    }
}

/// A sample as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqSpec {
    /// Prompt tokens.
    pub prompt: usize,
    /// How many of them the prefix cache holds (not charged to the pool, not prefilled).
    pub cached: usize,
    /// `max_new_tokens`.
    pub max_new: usize,
    /// `ignore_eos`: the sample reserves all its remaining tokens.
    pub ignore_eos: bool,
}

/// A sample's handle, unique for the scheduler's life.
pub type SeqId = u64;

/// Whether a step prefills or decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    Prefill,
    Decode,
}

/// One step of the batch: what it runs, and what it retracted before running.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub kind: StepKind,
    /// The samples that make a token in this step, in batch order.
    pub stepping: Vec<SeqId>,
    /// Samples whose prompt chunk this step prefills without completing it (no token yet).
    pub chunked: Vec<SeqId>,
    /// Samples sent back to the queue before the step, for want of KV.
    pub retracted: Vec<SeqId>,
    /// The prompt tokens a prefill step computes (0 for a decode step).
    pub prefill_tokens: usize,
    /// The new-token ratio after the step's scheduling.
    pub new_token_ratio: f64,
}

#[derive(Debug, Clone)]
struct Seq {
    spec: SeqSpec,
    /// Output tokens made so far.
    out: usize,
    running: bool,
    /// Output tokens made before the sample was last admitted (its prefill covers them again).
    admit_out: usize,
    /// Tokens prefilled since the sample was last admitted.
    prefilled: usize,
    retractions: u32,
}

impl Seq {
    /// Tokens an admission now must prefill: the prompt less its cached prefix, and any output made before a
    /// retraction.
    fn extend(&self) -> usize {
        self.spec.prompt.saturating_sub(self.spec.cached) + self.out
    }

    /// Tokens the prefill of the current admission covers.
    fn admitted_extend(&self) -> usize {
        self.spec.prompt.saturating_sub(self.spec.cached) + self.admit_out
    }

    /// Tokens the sample holds in the pool: what its prefill has covered, and a slot for each token made since
    /// (but the last with [`DecodeSlot::OnStep`], whose slot the next step takes).
    fn held(&self, slot: DecodeSlot) -> usize {
        if !self.running {
            return 0;
        }
        let made = self.out - self.admit_out;
        let pending = usize::from(slot == DecodeSlot::OnStep && made > 0);
        self.prefilled + made - pending
    }

    /// The new tokens it may still make, as a reservation counts them.
    fn remaining_new(&self) -> usize {
        self.spec
            .max_new
            .saturating_sub(self.out)
            .min(CLIP_MAX_NEW_TOKENS)
    }
}

/// SGLang's new-token ratio: how much of its remaining `max_new_tokens` a running sample is expected to use.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ratio {
    init: f64,
    min: f64,
    decay: f64,
    current: f64,
}

impl Ratio {
    fn new(conservativeness: f64) -> Ratio {
        let init = (INIT_NEW_TOKEN_RATIO * conservativeness).min(1.0);
        let min = (init * MIN_NEW_TOKEN_RATIO_FACTOR).min(1.0);
        Ratio {
            init,
            min,
            decay: (init - min) / NEW_TOKEN_RATIO_DECAY_STEPS,
            current: init,
        }
    }
}

/// The scheduler's state: the waiting queue, the running batch and the pool they share.
#[derive(Debug, Clone)]
pub struct Scheduler {
    config: SchedConfig,
    seqs: BTreeMap<SeqId, Seq>,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
    /// The sample whose prompt is being prefilled in chunks.
    chunked: Option<SeqId>,
    batch_is_full: bool,
    ratio: Ratio,
    next_id: SeqId,
}

/// What runs and waits now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedLoad {
    pub running: usize,
    pub running_tokens: usize,
    pub waiting: usize,
    pub waiting_tokens: usize,
    /// Pool tokens the running samples hold.
    pub used_tokens: usize,
}

impl Scheduler {
    pub fn new(config: SchedConfig) -> Scheduler {
        let ratio = Ratio::new(config.conservativeness);
        Scheduler {
            config,
            seqs: BTreeMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            chunked: None,
            batch_is_full: false,
            ratio,
            next_id: 0,
        }
    }

    /// A sample arrives at the back of the waiting queue.
    pub fn arrive(&mut self, spec: SeqSpec) -> SeqId {
        let id = self.next_id;
        self.next_id += 1;
        self.seqs.insert(
            id,
            Seq {
                spec,
                out: 0,
                running: false,
                admit_out: 0,
                prefilled: 0,
                retractions: 0,
            },
        );
        self.waiting.push_back(id);
        id
    }

    /// A sample ended (a finish rule, an abort) or its client went away: it leaves the queue or the batch and
    /// frees its tokens. Unknown ids are ignored.
    pub fn leave(&mut self, id: SeqId) {
        let Some(seq) = self.seqs.remove(&id) else {
            return;
        };
        if seq.running {
            self.running.retain(|&r| r != id);
            self.batch_is_full = false;
        } else {
            self.waiting.retain(|&w| w != id);
        }
        if self.chunked == Some(id) {
            self.chunked = None;
        }
    }

    /// Whether anything waits or runs.
    pub fn is_idle(&self) -> bool {
        self.seqs.is_empty()
    }

    /// How often sample `id` was retracted.
    pub fn retractions(&self, id: SeqId) -> u32 {
        self.seqs.get(&id).map_or(0, |s| s.retractions)
    }

    /// Output tokens sample `id` has made.
    pub fn output(&self, id: SeqId) -> usize {
        self.seqs.get(&id).map_or(0, |s| s.out)
    }

    /// Whether sample `id` is in the running batch.
    pub fn is_running(&self, id: SeqId) -> bool {
        self.seqs.get(&id).is_some_and(|s| s.running)
    }

    /// The new-token ratio now.
    pub fn new_token_ratio(&self) -> f64 {
        self.ratio.current
    }

    /// Running and waiting samples with their tokens (prompt and output so far), and the pool's use.
    pub fn load(&self) -> SchedLoad {
        let mut load = SchedLoad::default();
        for seq in self.seqs.values() {
            let tokens = seq.spec.prompt + seq.out;
            if seq.running {
                load.running += 1;
                load.running_tokens += tokens;
                load.used_tokens += seq.held(self.config.decode_slot);
            } else {
                load.waiting += 1;
                load.waiting_tokens += tokens;
            }
        }
        load
    }

    /// Pool tokens held: by the running batch and by a prompt being prefilled in chunks.
    fn used(&self) -> usize {
        let slot = self.config.decode_slot;
        self.seqs.values().map(|seq| seq.held(slot)).sum()
    }

    /// Sends every running sample back to the queue (a `retract` pause): each counts one retraction and will
    /// prefill its prompt and output again.
    pub fn retract_all(&mut self) -> Vec<SeqId> {
        let ids = std::mem::take(&mut self.running);
        for &id in &ids {
            self.requeue(id);
        }
        self.batch_is_full = false;
        ids
    }

    fn requeue(&mut self, id: SeqId) {
        let seq = self.seqs.get_mut(&id).expect("a running sample is known");
        seq.running = false;
        seq.admit_out = 0;
        seq.prefilled = 0;
        seq.retractions += 1;
        self.waiting.push_back(id);
    }

    /// Decides the next step, and counts its tokens as made: every sample in [`Step::stepping`] has one more
    /// output token once it returns (the caller reports the ones that then end with [`Scheduler::leave`]).
    /// `None` when nothing can run; an idle scheduler resets its new-token ratio.
    pub fn schedule(&mut self) -> Option<Step> {
        if let Some(step) = self.prefill() {
            return Some(step);
        }
        if self.running.is_empty() {
            if self.seqs.is_empty() {
                self.ratio.current = self.ratio.init;
            }
            return None;
        }
        Some(self.decode())
    }

    /// The waiting queue in the order the policy admits from.
    fn admission_order(&self) -> Vec<SeqId> {
        let mut order: Vec<SeqId> = self.waiting.iter().copied().collect();
        if self.config.policy == SchedulePolicy::Lpm && order.len() <= LPM_FALLBACK_QUEUE {
            // A stable sort: equal prefixes keep their queue order.
            order.sort_by_key(|id| std::cmp::Reverse(self.seqs[id].spec.cached));
        }
        order
    }

    /// What a running sample reserves for the tokens it may still make.
    fn reservation(&self, seq: &Seq) -> f64 {
        let whole = seq.spec.ignore_eos && self.config.reservations == Reservations::IgnoreEosWhole;
        let ratio = if whole { 1.0 } else { self.ratio.current };
        seq.remaining_new() as f64 * ratio
    }

    /// What a sample must find free to be admitted: its extend and the tokens it may make.
    fn admission(&self, seq: &Seq) -> usize {
        match self.config.reservations {
            Reservations::WholeMaxNew => seq.extend() + seq.spec.max_new.min(CLIP_MAX_NEW_TOKENS),
            Reservations::RemainingAndPage | Reservations::IgnoreEosWhole => {
                seq.extend() + seq.remaining_new() + self.config.page_size
            }
        }
    }

    fn prefill(&mut self) -> Option<Step> {
        if (self.batch_is_full || self.waiting.is_empty()) && self.chunked.is_none() {
            return None;
        }
        let running_before = self.running.len();
        let max_running = self
            .config
            .max_running_requests
            .map_or(usize::MAX, |n| n.max(1));
        if running_before >= max_running && self.chunked.is_none() {
            self.batch_is_full = true;
            return None;
        }
        let page = self.config.page_size;
        let mut rem_total = self.config.max_total_tokens as f64
            - self.used() as f64
            - self
                .running
                .iter()
                .map(|id| self.reservation(&self.seqs[id]))
                .sum::<f64>();
        let mut rem_input = self.config.max_prefill_tokens as i64;
        let mut rem_chunk = self.config.chunked_prefill_size.map(|c| c as i64);
        let mut stepping = Vec::new();
        let mut chunked = Vec::new();
        let mut admitted: Vec<SeqId> = Vec::new();
        let mut prefill_tokens = 0;

        // A prompt being prefilled in chunks goes on first, whatever else fits.
        let continued = self.chunked.is_some();
        if let Some(id) = self.chunked {
            let seq = self.seqs.get_mut(&id).expect("the chunked sample is known");
            let left = seq.admitted_extend() - seq.prefilled;
            let chunk = rem_chunk.map_or(left, |c| left.min(c.max(1) as usize));
            seq.prefilled += chunk;
            prefill_tokens += chunk;
            let done = seq.prefilled >= seq.admitted_extend();
            rem_total -= (chunk + page) as f64;
            rem_input -= chunk as i64;
            rem_chunk = rem_chunk.map(|c| c - chunk as i64);
            if done {
                self.chunked = None;
                stepping.push(id);
            } else {
                chunked.push(id);
            }
        }

        let mut no_token = false;
        for id in self.admission_order() {
            if rem_total <= 0.0 {
                no_token = true;
                break;
            }
            if rem_input <= 0 || rem_chunk.is_some_and(|c| c <= 0) || self.chunked.is_some() {
                break;
            }
            if running_before + admitted.len() + usize::from(continued) >= max_running {
                self.batch_is_full = true;
                break;
            }
            let seq = &self.seqs[&id];
            let extend = seq.extend();
            let total = self.admission(seq) as f64;
            // An empty batch always takes its first sample: the server cuts a completion to fit an empty pool,
            // but 0.5.3's rules count a retracted sample's whole `max_new_tokens` again, which may not fit, and
            // nothing would ever free the pool for it.
            let alone = running_before == 0 && !continued && admitted.is_empty();
            if total >= rem_total && !alone {
                no_token = true;
                break;
            }
            if extend as i64 > rem_input && !(admitted.is_empty() && stepping.is_empty()) {
                break;
            }
            let chunk = match rem_chunk {
                Some(c) if extend as i64 > c => c as usize,
                _ => extend,
            };
            rem_total -= total;
            rem_input -= chunk as i64;
            rem_chunk = rem_chunk.map(|c| c - chunk as i64);
            let seq = self.seqs.get_mut(&id).expect("a waiting sample is known");
            seq.running = true;
            seq.admit_out = seq.out;
            seq.prefilled = chunk;
            prefill_tokens += chunk;
            admitted.push(id);
            if chunk < extend {
                self.chunked = Some(id);
                chunked.push(id);
            } else {
                stepping.push(id);
            }
        }
        if no_token {
            // The flag lives on the running batch: a batch that was empty is replaced by this prefill's,
            // which starts without it (`get_next_batch_to_run` merges `last_batch` into an empty batch).
            self.batch_is_full = running_before > 0;
        }
        if stepping.is_empty() && chunked.is_empty() {
            return None;
        }
        self.waiting.retain(|id| !admitted.contains(id));
        // A sample joins the batch with its first token (a chunked prompt with its last chunk).
        for &id in &stepping {
            self.seqs
                .get_mut(&id)
                .expect("a stepping sample is known")
                .out += 1;
            self.running.push(id);
        }
        Some(Step {
            kind: StepKind::Prefill,
            stepping,
            chunked,
            retracted: Vec::new(),
            prefill_tokens,
            new_token_ratio: self.ratio.current,
        })
    }

    fn decode(&mut self) -> Step {
        let mut retracted = Vec::new();
        // No prompt is mid-chunk here (its prefill takes every step until it is done), so the running batch
        // holds all of the pool's used tokens.
        if self.fits(&self.running) {
            self.ratio.current = (self.ratio.current - self.ratio.decay).max(self.ratio.min);
        } else {
            // Most preferred to keep first: most output, then shortest prompt; the sort is stable, so among
            // equals the earliest in the batch stays.
            let mut order = self.running.clone();
            order.sort_by(|a, b| {
                let (a, b) = (&self.seqs[a], &self.seqs[b]);
                (b.out, std::cmp::Reverse(b.spec.prompt))
                    .cmp(&(a.out, std::cmp::Reverse(a.spec.prompt)))
            });
            let mut first = true;
            while order.len() > 1 && (first || !self.fits(&order)) {
                first = false;
                let id = order.pop().expect("more than one sample");
                retracted.push(id);
            }
            self.running.retain(|id| order.contains(id));
            for &id in &retracted {
                self.requeue(id);
            }
            self.batch_is_full = false;
            let (decoded, max_new) = self.running.iter().fold((0, 0), |(d, m), id| {
                let seq = &self.seqs[id];
                (d + seq.out, m + seq.spec.max_new)
            });
            let n = self.running.len();
            self.ratio.current =
                ((decoded + RETRACT_DECODE_STEPS * n) as f64 / (max_new + 1) as f64).min(1.0);
        }
        for &id in &self.running {
            self.seqs
                .get_mut(&id)
                .expect("a running sample is known")
                .out += 1;
        }
        Step {
            kind: StepKind::Decode,
            stepping: self.running.clone(),
            chunked: Vec::new(),
            retracted,
            prefill_tokens: 0,
            new_token_ratio: self.ratio.current,
        }
    }

    /// Whether the next decode step of `ids` fits in the pool: one free token each.
    fn fits(&self, ids: &[SeqId]) -> bool {
        let slot = self.config.decode_slot;
        let used: usize = ids.iter().map(|id| self.seqs[id].held(slot)).sum();
        self.config.max_total_tokens.saturating_sub(used) >= ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prompt: usize, max_new: usize, ignore_eos: bool) -> SeqSpec {
        SeqSpec {
            prompt,
            cached: 0,
            max_new,
            ignore_eos,
        }
    }

    fn pool_of(max_total_tokens: usize) -> SchedConfig {
        pool(max_total_tokens)
    }

    fn chunked(chunked_prefill_size: usize) -> SchedConfig {
        SchedConfig {
            chunked_prefill_size: Some(chunked_prefill_size),
            ..SchedConfig::default()
        }
    }

    fn pool(max_total_tokens: usize) -> SchedConfig {
        SchedConfig {
            max_total_tokens,
            ..SchedConfig::default()
        }
    }

    /// What a whole run did: each step's kind and sizes, and each sample's retractions.
    #[derive(Debug, Default)]
    struct Trace {
        /// `(samples making a token, running after the step)` of each prefill step.
        prefills: Vec<(usize, usize)>,
        /// The ratio before and after each retraction, and the samples it retracted.
        retractions: Vec<(f64, f64, Vec<SeqId>)>,
        peak_running: usize,
    }

    /// Runs every sample to its `max_new` (none ends early), as a server whose model never emits EOS.
    fn run(config: SchedConfig, specs: &[SeqSpec]) -> Trace {
        let mut sched = Scheduler::new(config);
        for &s in specs {
            sched.arrive(s);
        }
        let mut trace = Trace::default();
        let mut steps = 0;
        while !sched.is_idle() {
            steps += 1;
            assert!(steps < 100_000, "the schedule does not end");
            let before = sched.new_token_ratio();
            let step = sched.schedule().expect("work remains, so a step runs");
            if !step.retracted.is_empty() {
                trace
                    .retractions
                    .push((before, step.new_token_ratio, step.retracted.clone()));
            }
            if step.kind == StepKind::Prefill {
                let running = sched.load().running;
                trace.prefills.push((step.stepping.len(), running));
            }
            trace.peak_running = trace.peak_running.max(sched.load().running);
            for &id in &step.stepping {
                if sched.output(id) == specs[id as usize].max_new {
                    sched.leave(id);
                }
            }
        }
        trace
    }

    fn retractions_of(config: SchedConfig, specs: &[SeqSpec]) -> Vec<u32> {
        let mut sched = Scheduler::new(config);
        let ids: Vec<SeqId> = specs.iter().map(|&s| sched.arrive(s)).collect();
        let mut counts = vec![0; ids.len()];
        while let Some(step) = sched.schedule() {
            for &id in &step.stepping {
                if sched.output(id) == specs[id as usize].max_new {
                    counts[id as usize] = sched.retractions(id);
                    sched.leave(id);
                }
            }
        }
        assert!(sched.is_idle());
        counts
    }

    #[test]
    fn ignore_eos_samples_reserve_their_whole_budget_and_queue_without_retraction() {
        // 600 tokens; each sample reserves 20 + 200 + 1 = 221: two fit (442), a third would need 221 of the
        // 158 left. With two running (21 tokens each, 199 to go at ratio 1), 600 − 42 − 398 = 160 < 221.
        let specs = vec![spec(20, 200, true); 8];
        let trace = run(pool(600), &specs);
        assert_eq!(trace.peak_running, 2);
        assert!(trace.retractions.is_empty());
        // 32 samples of 10 + 60: 71 each, eight fit in 600 (568).
        let trace = run(pool(600), &[spec(10, 60, true); 32]);
        assert_eq!(trace.peak_running, 8);
        assert!(trace.retractions.is_empty());
    }

    #[test]
    fn samples_that_may_stop_early_are_admitted_on_the_ratio_and_retracted_when_they_do_not() {
        // The hand computation (0.5.23's rules, 600 tokens, 8 × 20/200 without ignore_eos):
        // step 1 admits #0 and #1 (221 each; #2 needs 221 of 158); the batch was empty, so the next step
        // tries again: 600 − 2 × 21 − 2 × 199 × 0.7 = 279.4 > 221 admits #2, leaving 58.4 for #3.
        // The three decode together; at 180 output tokens each they hold 600 and the step cannot allocate 3:
        // #2, last in the batch among equals, is retracted, after 179 decode steps: ratio 0.7 − 179 × 0.001003.
        let specs = vec![spec(20, 200, false); 8];
        let trace = run(pool(600), &specs);
        assert_eq!(trace.prefills[..2], [(2, 2), (1, 3)]);
        let (before, after, ids) = &trace.retractions[0];
        let decay = (0.7 - 0.7 * 0.14) / 600.0;
        assert!((before - (0.7 - 179.0 * decay)).abs() < 1e-9, "{before}");
        // (180 + 180 + 20 × 2) / (200 + 200 + 1)
        assert!((after - 400.0 / 401.0).abs() < 1e-12, "{after}");
        assert_eq!(ids, &[2]);
        assert_eq!(trace.peak_running, 3);
        // The real 0.5.23 retracted #2 and #7 once each (mock-server/conform/sched/).
        assert_eq!(retractions_of(pool(600), &specs), [0, 0, 1, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn a_sample_that_exactly_fills_what_remains_waits() {
        // `total_tokens < remaining_total` admits (`PrefillBudget.check_prefill`): in a pool of 2 × 221 the
        // second sample of 20 + 200 (+ 1) finds exactly 221 left and waits for the next step, where the first
        // holds 21 and reserves 199, leaving 222.
        let trace = run(pool(442), &[spec(20, 200, true); 2]);
        assert_eq!(trace.prefills, [(1, 1), (1, 2)]);
    }

    #[test]
    fn among_samples_with_as_much_output_the_longest_prompt_is_retracted_first() {
        // B (30 prompt tokens) is admitted alone (110 − 71 leaves 39 of A's 51); A (10) fits the next step
        // beside B's reservation (110 − 31 − 39 × 0.7 = 51.7 > 51). Both then have 35 output tokens when the
        // pool (30 + 35 + 10 + 35) cannot take two more: B goes, first in the batch but with the longer prompt.
        let mut sched = Scheduler::new(pool(110));
        let b = sched.arrive(spec(30, 40, false));
        let a = sched.arrive(spec(10, 40, false));
        let retracted = loop {
            let step = sched.schedule().expect("a step");
            if !step.retracted.is_empty() {
                break step.retracted;
            }
        };
        assert_eq!(retracted, [b]);
        assert_eq!((sched.output(a), sched.retractions(b)), (36, 1));
    }

    #[test]
    fn a_retracted_sample_keeps_its_output_and_prefills_prompt_and_output_again() {
        let specs = vec![spec(20, 200, false); 3];
        let mut sched = Scheduler::new(pool(600));
        for s in &specs {
            sched.arrive(*s);
        }
        let mut retracted = None;
        while retracted.is_none() {
            let step = sched.schedule().unwrap();
            retracted = step.retracted.first().copied();
        }
        let id = retracted.unwrap();
        assert_eq!(sched.output(id), 180);
        assert!(!sched.is_running(id));
        let load = sched.load();
        assert_eq!((load.running, load.waiting), (2, 1));
        assert_eq!(load.waiting_tokens, 200);
        // The two left hold 200 + 1 each after this step's tokens.
        assert_eq!(load.used_tokens, 2 * 201);
        assert_eq!(load.running_tokens, 2 * (20 + 181));
    }

    #[test]
    fn max_running_requests_caps_the_batch_in_samples() {
        let config = SchedConfig {
            max_running_requests: Some(3),
            ..SchedConfig::default()
        };
        let trace = run(config, &[spec(5, 10, true); 7]);
        assert_eq!(trace.peak_running, 3);
        assert_eq!(trace.prefills[0], (3, 3));
    }

    #[test]
    fn a_long_prompt_is_prefilled_in_chunks_and_makes_its_first_token_with_the_last() {
        let mut sched = Scheduler::new(chunked(8));
        let long = sched.arrive(spec(20, 4, true));
        let short = sched.arrive(spec(3, 4, true));
        // 8 + 8 of the long prompt, then its last 4 with the short prompt's 3 in one step.
        let step = sched.schedule().unwrap();
        assert_eq!(
            (step.chunked.clone(), step.stepping.clone()),
            (vec![long], vec![])
        );
        let step = sched.schedule().unwrap();
        assert_eq!(
            (step.chunked.clone(), step.stepping.clone()),
            (vec![long], vec![])
        );
        let step = sched.schedule().unwrap();
        assert_eq!(step.stepping, vec![long, short]);
        assert_eq!(sched.output(long), 1);
        assert_eq!(sched.schedule().unwrap().kind, StepKind::Decode);
    }

    #[test]
    fn a_sample_that_leaves_frees_its_place_and_the_others_go_on() {
        let mut sched = Scheduler::new(SchedConfig::default());
        let ids: Vec<SeqId> = [3, 10, 10].map(|n| sched.arrive(spec(5, n, true))).to_vec();
        while sched.output(ids[0]) < 3 {
            sched.schedule().expect("a step");
        }
        sched.leave(ids[0]);
        assert_eq!(sched.load().running, 2);
        assert!(sched.is_running(ids[1]) && !sched.is_running(ids[0]));
        let step = sched.schedule().expect("a step");
        assert_eq!(step.stepping, ids[1..]);
        // A sample leaving while another's prompt is prefilled in chunks leaves that prefill going on.
        let mut sched = Scheduler::new(chunked(8));
        let short = sched.arrive(spec(3, 2, true));
        let long = sched.arrive(spec(20, 2, true));
        let step = sched.schedule().expect("a step");
        assert_eq!((step.stepping, step.chunked), (vec![short], vec![long]));
        sched.leave(short);
        let mut steps = 0;
        while sched.output(long) == 0 {
            sched.schedule().expect("the long prompt's prefill goes on");
            steps += 1;
        }
        // 5 tokens with the short prompt, then 8 and 7.
        assert_eq!(steps, 2);
    }

    #[test]
    fn a_retracted_sample_is_prefilled_again_in_chunks_with_its_output() {
        let mut sched = Scheduler::new(chunked(8));
        let a = sched.arrive(spec(4, 20, true));
        while sched.output(a) < 10 {
            sched.schedule().expect("a step");
        }
        assert_eq!(sched.retract_all(), [a]);
        // 4 prompt and 10 output tokens again: 8 in one step, the other 6 with the next token.
        let step = sched.schedule().expect("a step");
        assert_eq!((step.chunked, step.prefill_tokens), (vec![a], 8));
        let step = sched.schedule().expect("a step");
        assert_eq!((step.stepping, step.prefill_tokens), (vec![a], 6));
        assert_eq!(sched.output(a), 11);
    }

    #[test]
    fn a_server_schedules_with_a_pool_or_on_demand_with_its_flags_and_release() {
        use crate::SglangVersion;
        let mut config = ServerConfig::default();
        assert_eq!(SchedConfig::of_server(&config, false), None);
        let unbounded = SchedConfig::of_server(&config, true).expect("on demand");
        assert_eq!(unbounded.max_total_tokens, 1 << 20);
        config.max_total_tokens = Some(600);
        config.chunked_prefill_size = -1;
        config.schedule_policy = "lpm".to_owned();
        config.max_running_requests = Some(3);
        config.sglang_version = SglangVersion::V0_5_3;
        let sched = SchedConfig::of_server(&config, false).expect("a pool");
        assert_eq!(
            (
                sched.max_total_tokens,
                sched.chunked_prefill_size,
                sched.policy
            ),
            (600, None, SchedulePolicy::Lpm)
        );
        assert_eq!(sched.max_running_requests, Some(3));
        assert_eq!(
            (sched.reservations, sched.decode_slot),
            (Reservations::WholeMaxNew, DecodeSlot::OnStep)
        );
        config.chunked_prefill_size = 0;
        assert_eq!(
            SchedConfig::of_server(&config, false)
                .unwrap()
                .chunked_prefill_size,
            None
        );
        config.chunked_prefill_size = 1;
        assert_eq!(
            SchedConfig::of_server(&config, false)
                .unwrap()
                .chunked_prefill_size,
            Some(1)
        );
        assert_eq!(SchedulePolicy::parse("fcfs"), Some(SchedulePolicy::Fcfs));
        assert_eq!(SchedulePolicy::parse("dfs-weight"), None);
    }

    #[test]
    fn an_empty_batch_takes_its_first_sample_even_one_the_pool_cannot_hold() {
        // 10 + 1000 (+ 1) never fits a pool of 100: the sample runs alone rather than wait for ever.
        let trace = run(pool(100), &[spec(10, 1000, true)]);
        assert_eq!(trace.prefills, [(1, 1)]);
        // A cap of 0 running samples is a cap of 1.
        let config = SchedConfig {
            max_running_requests: Some(0),
            ..SchedConfig::default()
        };
        assert_eq!(run(config, &[spec(5, 3, true); 2]).peak_running, 1);
    }

    #[test]
    fn max_prefill_tokens_ends_a_prefill_step_after_its_first_sample() {
        let config = SchedConfig {
            max_prefill_tokens: 25,
            ..SchedConfig::default()
        };
        let trace = run(config, &[spec(20, 3, true); 3]);
        assert_eq!(trace.prefills[..2], [(1, 1), (1, 2)]);
    }

    #[test]
    fn lpm_admits_the_longest_cached_prefix_first_and_fcfs_the_oldest() {
        let arrive = |policy| {
            let mut sched = Scheduler::new(SchedConfig {
                policy,
                max_running_requests: Some(1),
                ..SchedConfig::default()
            });
            let mut with_cached = |cached| {
                sched.arrive(SeqSpec {
                    cached,
                    ..spec(30, 2, true)
                })
            };
            let ids = [with_cached(0), with_cached(10), with_cached(20)];
            (sched.schedule().unwrap().stepping, ids)
        };
        let (first, ids) = arrive(SchedulePolicy::Fcfs);
        assert_eq!(first, vec![ids[0]]);
        let (first, ids) = arrive(SchedulePolicy::Lpm);
        assert_eq!(first, vec![ids[2]]);
    }

    #[test]
    fn an_idle_scheduler_resets_its_ratio_and_a_retract_pause_requeues_the_batch() {
        let mut sched = Scheduler::new(pool(10_000));
        let a = sched.arrive(spec(10, 50, false));
        for _ in 0..5 {
            sched.schedule().unwrap();
        }
        assert!(sched.new_token_ratio() < 0.7);
        assert_eq!(sched.retract_all(), vec![a]);
        assert_eq!((sched.retractions(a), sched.output(a)), (1, 5));
        assert_eq!(sched.schedule().unwrap().kind, StepKind::Prefill);
        assert_eq!(sched.output(a), 6);
        sched.leave(a);
        assert_eq!(sched.schedule(), None);
        assert_eq!(sched.new_token_ratio(), 0.7);
    }

    #[test]
    fn the_last_running_sample_is_never_retracted() {
        // One sample outgrowing the pool alone keeps running (SGLang aborts it only when even it cannot fit,
        // which a pool larger than one prompt never reaches here).
        let mut sched = Scheduler::new(pool(30));
        let a = sched.arrive(spec(10, 15, false));
        while sched.output(a) < 15 {
            let step = sched.schedule().unwrap();
            assert!(step.retracted.is_empty());
        }
    }

    /// A recorded release's batches (`scripts/sched_probe.py`, `mock-server/conform/sched/`), scheduled here.
    fn recorded(
        file: &str,
        reservations: Reservations,
        decode_slot: DecodeSlot,
    ) -> Vec<(serde_json::Value, Trace, Vec<u32>)> {
        let path = format!(
            "{}/../mock-server/conform/sched/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).expect("the recording is in the repository");
        let recording: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let pool = recording["max_total_tokens"].as_u64().expect("pool") as usize;
        let scenarios = recording["scenarios"].as_array().expect("scenarios");
        scenarios
            .iter()
            .map(|scenario| {
                let request = &scenario["request"];
                let prompts = request["input_ids"].as_array().expect("a batch");
                let params = request["sampling_params"].as_array().expect("params");
                let specs: Vec<SeqSpec> = prompts
                    .iter()
                    .zip(params)
                    .map(|(ids, p)| {
                        let max_new = p["max_new_tokens"].as_u64().expect("max_new") as usize;
                        let ignore_eos = p["ignore_eos"].as_bool().expect("ignore_eos");
                        spec(ids.as_array().expect("ids").len(), max_new, ignore_eos)
                    })
                    .collect();
                let config = SchedConfig {
                    reservations,
                    decode_slot,
                    ..pool_of(pool)
                };
                let trace = run(config.clone(), &specs);
                (scenario.clone(), trace, retractions_of(config, &specs))
            })
            .collect()
    }

    #[test]
    fn each_release_is_scheduled_as_its_running_server_logged_it() {
        let decay = (0.7 - 0.7 * 0.14) / 600.0;
        for (file, reservations, slot) in [
            (
                "0.5.3-600.json",
                Reservations::WholeMaxNew,
                DecodeSlot::OnStep,
            ),
            (
                "0.5.15-600.json",
                Reservations::RemainingAndPage,
                DecodeSlot::Ahead,
            ),
            (
                "0.5.23-600.json",
                Reservations::IgnoreEosWhole,
                DecodeSlot::Ahead,
            ),
            (
                "0.5.23-2000.json",
                Reservations::IgnoreEosWhole,
                DecodeSlot::Ahead,
            ),
        ] {
            for (scenario, trace, retractions) in recorded(file, reservations, slot) {
                let name = format!("{file} {}", scenario["name"]);
                // 0.5.3 reports no `num_retractions` (null in the recording): its log says how many.
                let real: Vec<Option<u64>> = scenario["items"]
                    .as_array()
                    .expect("items")
                    .iter()
                    .map(|i| i["num_retractions"].as_u64())
                    .collect();
                if real.iter().all(Option::is_some) {
                    let mine: Vec<Option<u64>> =
                        retractions.iter().map(|&r| Some(u64::from(r))).collect();
                    assert_eq!(mine, real, "{name}: retractions per sample");
                }
                // The log's steps, up to the last retraction: after it the release's overlap scheduler admits
                // two retracted samples over two prefill steps, the mock in one (ARCHITECTURE.md).
                let log = scenario["log"].as_array().expect("log");
                let last = log.iter().rposition(|e| e.get("retract").is_some());
                let upto = last.map_or(log.len(), |i| i + 1);
                let mut prefills = trace.prefills.iter();
                let mut retracts = trace.retractions.iter();
                for event in &log[..upto] {
                    if let Some(n) = event.get("prefill") {
                        let (seqs, _) = prefills.next().expect("a prefill step");
                        assert_eq!(*seqs as u64, n.as_u64().expect("n"), "{name}: {event}");
                    } else {
                        let (before, after, ids) = retracts.next().expect("a retraction");
                        assert_eq!(
                            ids.len() as u64,
                            event["retract"].as_u64().expect("n"),
                            "{name}"
                        );
                        let ratio = &event["ratio"];
                        let logged = |i: usize| ratio[i].as_f64().expect("ratio");
                        assert!(
                            (after - logged(1)).abs() < 5e-5,
                            "{name}: ratio after {after}"
                        );
                        // The release's ratio has decayed as far, or up to three steps further: the decode
                        // steps it runs between a batch's last token and its leaving the batch.
                        let behind = (before - logged(0)) / decay;
                        assert!(
                            (-0.5..3.5).contains(&behind),
                            "{name}: ratio before {before}"
                        );
                    }
                }
            }
        }
    }
}
