//! The `rollout` command: a complete GRPO rollout from SGLang or an embedded sglang-mock, written as JSONL samples.
//!
//! This crate sits on the `rollout-client` library and keeps everything only the command needs out of it:
//! the flags (clap), the embedded mock server and its scripted answers, progress bars, the prompts and the
//! reward. A trainer that wants the client links `rollout-client` alone.
//!
//! - [`command`]: the flags ([`command::RolloutArgs`]) and the entry point, [`command::run_command_until`]
//!   ([`command::run_command`] without a stop), which starts the embedded mock when no `--url` is given and
//!   appends each finished group to the JSONL file.
//! - [`embedded`]: the in-process sglang-mock of a run without `--url`; [`progress`]: its progress bar.
//! - [`run`]: [`run::rollout_to`] (and [`run::rollout`]), the rollout itself, handing each group to a sink
//!   as it finishes and stopping on request: groups (or slime's multi-agent system) per prompt,
//!   rewards, GRPO advantages with rollout logprobs required; [`summary`]: the [`summary::Summary`] it
//!   ends with.
//! - [`prompts`], [`reward`]: labelled prompts (built-in or JSONL) and the last-number math reward with
//!   DAPO's overlong penalty.
//! - [`scripted`]: the embedded mock's scripted answers, so that a toy-model run earns some rewards.
//! - [`train`]: `rollout train`, the loop closed on the toy policy: rollout, GRPO, the exact gradient, an
//!   optimiser step and a weight update from disk, step after step.

pub mod command;
pub mod embedded;
pub mod progress;
pub mod prompts;
pub mod reward;
pub mod run;
pub mod scripted;
pub mod summary;
pub mod train;
