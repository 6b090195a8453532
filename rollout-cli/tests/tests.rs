//! Integration tests of rollout-cli, built as one binary (one `mod` per area).

/// The `rollout` command and `run::rollout` on the embedded mock: groups, rewards, advantages, JSONL.
mod command;

/// Writing as groups finish, stopping on signals, `--resume`, exit codes and the retry log.
mod lost_work;

/// `rollout train`: the loop learns, ratios are exactly 1 at the rollout policy, versions follow the updates.
mod train;
