//! The engine: one sample's generation step by step, the plan of a request, and the step core that advances
//! every item of a plan together. Pure: no HTTP, no async, no clock.
//!
//! - `item`: [`ItemRequest`], what one sample asks for, and how it ends ([`FinishReason`]);
//! - `generation`: [`Generation`], one sample with SGLang's finish rules, stop trimming and logprobs;
//! - `plan`: [`GeneratePlan`], what a validated request asks the engine to run;
//! - `draws`: [`Draws`], the numbering of unseeded samples that gives identical requests distinct answers;
//! - `cache`: [`PrefixCache`], SGLang's radix prefix cache over token ids, and the rules by which a run's items
//!   match and fill it;
//! - `load`: [`Occupancy`], what a server runs and queues now, item by item, for its load reports;
//! - `stop_regex`: [`StopRegex`], a `stop_regex` pattern as Python's `re` reads it and the tail window it asks for;
//! - `step`: [`Run`], the one loop that advances a plan's items tick by tick, used by the oracle and by the
//!   server's non-stream and stream drivers.

mod cache;
mod draws;
mod generation;
mod item;
mod load;
mod plan;
mod sched;
mod step;
mod stop_regex;

pub use cache::{Hold, InUse, PrefixCache, SharedCache, flush_shared, match_limit, server_cache};
pub use draws::Draws;
pub use generation::{Generation, MAX_TOP_P_IDS, generate};
pub use item::{
    FinishReason, GREEDY_TEMPERATURE, ItemRequest, LogprobEntry, MaskRows, Rows,
    SamplingLogprobsMode, SamplingParams, chunk_due,
};
pub use load::{Load, Occupancy, WaitingItems, used_tokens};
pub use plan::{GeneratePlan, PlannedItem, Refusal, RidSource};
pub use sched::{
    CLIP_MAX_NEW_TOKENS, SchedConfig, SchedLoad, SchedulePolicy, Scheduler, SeqId, SeqSpec, Step,
    StepKind,
};
pub use step::{ABORT_MESSAGE, Interventions, Outside, Progress, Run, Turn};
pub use stop_regex::StopRegex;
