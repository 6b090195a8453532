//! Integration tests of rollout-cli, built as one binary (one `mod` per area).

/// The `rollout` command and `run::rollout` on the embedded mock: groups, rewards, advantages, JSONL.
mod command;
