//! What the command prints at the end of a rollout: counts, tokens, throughput, and reward, advantage and logprob statistics.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rollout_client::train::{self, GrpoOutcome};
use rollout_client::{Sample, SampleStatus};

use crate::reward::math_reward;

/// Count, mean, standard deviation (population), min and max of a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stats {
    pub count: usize,
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Stats {
        let (mut n, mut sum, mut sq) = (0usize, 0.0f64, 0.0f64);
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values {
            n += 1;
            sum += v;
            sq += v * v;
            min = min.min(v);
            max = max.max(v);
        }
        if n == 0 {
            return Stats::default();
        }
        let mean = sum / n as f64;
        let var = (sq / n as f64 - mean * mean).max(0.0);
        Stats {
            count: n,
            mean,
            std: var.sqrt(),
            min,
            max,
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A mean of -1e-17 (rounding in a centred sum) would print as "-0.0000".
        let tidy = |x: f64| if x.abs() < 5e-5 { 0.0 } else { x };
        write!(
            f,
            "mean {:.4}  std {:.4}  min {:.4}  max {:.4}",
            tidy(self.mean),
            self.std,
            self.min,
            self.max
        )
    }
}

/// What the command prints at the end of a rollout.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Prompts whose groups the output holds (finished by this run or skipped as already there).
    pub prompts: usize,
    /// Prompts in the prompt set.
    pub total_prompts: usize,
    pub samples: usize,
    /// Groups this run finished and wrote.
    pub finished_groups: usize,
    /// Groups already in the output (`--resume`), not run again.
    pub skipped_groups: usize,
    pub failed_groups: usize,
    /// The run was stopped (SIGINT or SIGTERM): the groups neither finished, failed nor skipped never ran.
    pub interrupted: bool,
    pub first_failure: Option<String>,
    /// Retried requests by kind of failure (`HTTP 503`, `connect`, ...).
    pub retries: BTreeMap<String, u64>,
    pub by_status: BTreeMap<&'static str, usize>,
    pub prompt_tokens: usize,
    pub response_tokens: usize,
    /// Response tokens the server generated (the rest came from environments).
    pub generated_tokens: usize,
    /// Generated tokens with loss mask 1.
    pub trained_tokens: usize,
    /// Generated tokens masked by `--mask-offpolicy-in-partial-rollout`; with `trained_tokens`, every generated
    /// token.
    pub policy_masked_tokens: usize,
    /// Tokens generated for groups that failed and were left out of the batch.
    pub left_out_tokens: u64,
    pub elapsed: Duration,
    pub rewards: Stats,
    /// Samples with a reward above 0.
    pub rewarded: usize,
    /// Samples whose answer matches their label (before any shaping).
    pub correct: usize,
    pub advantages: Stats,
    pub nonzero_advantages: usize,
    pub logprobs: Stats,
    pub loss: f64,
    /// Samples per `rollout_id` (multi-agent: siblings of one execution), when ids are set.
    pub rollouts: usize,
    /// Samples that carry routed experts, and their rows (each checked against the sample's tokens).
    pub routed_samples: usize,
    pub route_rows: usize,
    /// Samples that carry sampling masks, the generated tokens with a support, and the support ids.
    pub masked_samples: usize,
    pub masked_tokens: usize,
    pub support_ids: usize,
}

fn status_name(s: SampleStatus) -> &'static str {
    match s {
        SampleStatus::Pending => "pending",
        SampleStatus::Completed => "completed",
        SampleStatus::Truncated => "truncated",
        SampleStatus::Aborted => "aborted",
        SampleStatus::Failed => "failed",
    }
}

impl Summary {
    /// The summary of `samples` and what GRPO made of them, over the `prompts` prompts they came from, in
    /// `elapsed`. It says nothing of groups that failed, were skipped or never ran, nor of retries: the run
    /// sets those.
    pub fn of_samples(
        samples: &[Sample],
        grpo: &GrpoOutcome,
        elapsed: Duration,
        prompts: usize,
    ) -> Summary {
        let mut by_status = BTreeMap::new();
        for s in samples {
            *by_status.entry(status_name(s.status)).or_insert(0) += 1;
        }
        let rewards: Vec<f64> = samples
            .iter()
            .filter_map(|s| train::reward_value(s.reward.as_ref(), None))
            .collect();
        let advantages = grpo.advantages.per_sample();
        // Environment tokens carry logprob 0.0 and mask 0; only generated tokens are statistics.
        let logprobs = samples.iter().flat_map(|s| {
            s.rollout_log_probs()
                .iter()
                .zip(s.loss_mask())
                .filter(|(_, m)| **m == 1)
                .map(|(lp, _)| f64::from(*lp))
        });
        let rollout_ids: std::collections::HashSet<u64> =
            samples.iter().filter_map(|s| s.rollout_id).collect();
        Summary {
            prompts,
            total_prompts: prompts,
            samples: samples.len(),
            finished_groups: prompts,
            skipped_groups: 0,
            failed_groups: 0,
            interrupted: false,
            first_failure: None,
            retries: BTreeMap::new(),
            by_status,
            prompt_tokens: samples.iter().map(Sample::prompt_len).sum(),
            response_tokens: samples.iter().map(Sample::response_length).sum(),
            generated_tokens: samples.iter().map(Sample::generated_tokens).sum(),
            trained_tokens: samples.iter().map(Sample::effective_response_length).sum(),
            policy_masked_tokens: samples.iter().map(Sample::policy_masked_tokens).sum(),
            left_out_tokens: 0,
            elapsed,
            rewarded: rewards.iter().filter(|r| **r > 0.0).count(),
            correct: samples
                .iter()
                .filter(|s| {
                    s.label
                        .as_deref()
                        .is_some_and(|l| math_reward(&s.response, l) > 0.0)
                })
                .count(),
            rewards: Stats::of(rewards.iter().copied()),
            nonzero_advantages: advantages.iter().filter(|a| a.abs() > 1e-9).count(),
            advantages: Stats::of(advantages.iter().copied()),
            logprobs: Stats::of(logprobs),
            loss: grpo.loss,
            rollouts: rollout_ids.len(),
            routed_samples: samples
                .iter()
                .filter(|s| s.rollout_routed_experts().is_some())
                .count(),
            route_rows: samples
                .iter()
                .filter_map(Sample::rollout_routed_experts)
                .map(|r| r.rows())
                .sum(),
            masked_samples: samples
                .iter()
                .filter(|s| s.rollout_top_p_tokens().is_some())
                .count(),
            masked_tokens: samples
                .iter()
                .filter(|s| s.rollout_top_p_tokens().is_some())
                .map(Sample::generated_tokens)
                .sum(),
            support_ids: samples
                .iter()
                .filter_map(Sample::rollout_top_p_tokens)
                .map(|(ids, _)| ids.len())
                .sum(),
        }
    }

    /// Response tokens per second of wall time.
    pub fn tokens_per_second(&self) -> f64 {
        self.response_tokens as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let statuses = self
            .by_status
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            f,
            "samples      {} from {} of {} prompts ({statuses})",
            self.samples, self.prompts, self.total_prompts
        )?;
        let not_run = self
            .total_prompts
            .saturating_sub(self.finished_groups + self.skipped_groups + self.failed_groups);
        write!(
            f,
            "groups       {} finished, {} failed, {} already in the output",
            self.finished_groups, self.failed_groups, self.skipped_groups
        )?;
        if not_run > 0 {
            write!(f, ", {not_run} not run")?;
        }
        writeln!(f)?;
        if self.interrupted {
            writeln!(
                f,
                "interrupted  stopped by a signal: the output holds every group that had finished; \
                 --resume runs the rest"
            )?;
        }
        if self.rollouts > 0 {
            writeln!(
                f,
                "rollouts     {} (siblings share a rollout_id)",
                self.rollouts
            )?;
        }
        if self.failed_groups > 0 {
            writeln!(
                f,
                "failed       {} groups left out; first: {}",
                self.failed_groups,
                self.first_failure.as_deref().unwrap_or("?")
            )?;
        }
        writeln!(
            f,
            "tokens       {} prompt, {} response, {} from the environment",
            self.prompt_tokens,
            self.response_tokens,
            self.response_tokens - self.generated_tokens
        )?;
        writeln!(
            f,
            "generated    {} = {} trained (loss mask 1) + {} masked by --mask-offpolicy-in-partial-rollout",
            self.generated_tokens, self.trained_tokens, self.policy_masked_tokens
        )?;
        if !self.retries.is_empty() {
            let total: u64 = self.retries.values().sum();
            writeln!(
                f,
                "retries      {total} ({})",
                rollout_client::client::describe_counts(&self.retries)
            )?;
        }
        if self.left_out_tokens > 0 {
            writeln!(
                f,
                "left out     {} tokens generated for the failed groups",
                self.left_out_tokens
            )?;
        }
        writeln!(
            f,
            "time         {:.2} s, {:.0} response tokens/s",
            self.elapsed.as_secs_f64(),
            self.tokens_per_second()
        )?;
        writeln!(
            f,
            "reward       {}  ({} of {} answers correct)",
            self.rewards, self.correct, self.rewards.count
        )?;
        writeln!(
            f,
            "advantage    {}  ({} non-zero)",
            self.advantages, self.nonzero_advantages
        )?;
        writeln!(
            f,
            "logprob      {}  over {} generated tokens (perplexity {:.2})",
            self.logprobs,
            self.logprobs.count,
            (-self.logprobs.mean).exp()
        )?;
        if self.routed_samples > 0 {
            writeln!(
                f,
                "routes       {} samples, {} rows: one per token up to each sample's last generated one, checked",
                self.routed_samples, self.route_rows
            )?;
        }
        if self.masked_samples > 0 {
            writeln!(
                f,
                "masks        {} samples, {} generated tokens, mean support {:.2} ids, one per generated token, checked",
                self.masked_samples,
                self.masked_tokens,
                self.support_ids as f64 / self.masked_tokens.max(1) as f64
            )?;
        }
        write!(
            f,
            "grpo loss    {:+.6} at the rollout policy (every ratio is 1, so this is the mean of -advantage)",
            self.loss
        )
    }
}
