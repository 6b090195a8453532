//! A complete GRPO rollout over a prompt set: groups (or the multi-agent system), rewards, advantages and a summary.
//!
//! [`rollout()`] is what the `rollout` command runs once it has a client: it tokenizes each prompt,
//! generates `n_samples_per_prompt` samples per prompt (resuming aborted ones as a partial rollout
//! would), grades them with [`crate::reward::math_reward`], hands them to `grpo` through
//! [`rollout_client::train::grpo_advantages`] with rollout logprobs required, and returns the samples (each
//! with `reward` and `extra["advantage"]`) with a [`Summary`] (`summary.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream;
use grpo::AdvantageConfig;
use indicatif::ProgressBar;
use mock_server::model::LoadedTokenizer;
use tokio::sync::watch;

use rollout_client::multi_agent::{self, MultiAgentConfig};
use rollout_client::rollout::{self, RolloutConfig};
use rollout_client::tokenize::PromptTokenizer;
use rollout_client::train::{self, GrpoError, GrpoOutcome};
use rollout_client::{AbortRequest, Client, Reward, RolloutError, Sample, SampleStatus};

use crate::prompts::LabeledPrompt;
use crate::reward::{math_reward, overlong_penalty};
use crate::summary::Summary;

/// How a rollout is run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub n_samples_per_prompt: usize,
    /// Sampling parameters (`max_new_tokens` is the response budget), streaming, masking.
    pub rollout: RolloutConfig,
    /// Base of the per-sample `sampling_seed` (`seed + index`); `None` sends no seed.
    pub seed: Option<u64>,
    pub tokenizer: PromptTokenizer,
    /// How each prompt becomes the text of its samples: a ChatML user turn by default.
    pub prompt_format: PromptFormat,
    /// Run slime's multi-agent system for each sample instead of one generation.
    pub multi_agent: Option<MultiAgentConfig>,
    /// Groups (or agent systems) in flight at once; the client's own limit bounds requests.
    pub group_concurrency: usize,
    /// How often an aborted sample is resumed (partial rollout) before its group is given up.
    pub max_resumes: usize,
    /// DAPO's overlong buffer `L_cache` for plain rollouts: the reward gets
    /// [`overlong_penalty`]`(response_length, max_new_tokens, buffer)` added. 0 is off.
    pub overlong_buffer: usize,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            n_samples_per_prompt: 8,
            rollout: RolloutConfig::default(),
            seed: None,
            tokenizer: PromptTokenizer::Server,
            prompt_format: PromptFormat::ChatMl,
            multi_agent: None,
            group_concurrency: 64,
            max_resumes: 3,
            overlong_buffer: 0,
        }
    }
}

/// Why a rollout produced nothing to train on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("there are no prompts")]
    NoPrompts,
    #[error("n_samples_per_prompt must be at least 1")]
    ZeroGroupSize,
    #[error("every group failed; the first failure was group {group_index}")]
    AllGroupsFailed {
        group_index: usize,
        #[source]
        source: RolloutError,
    },
    #[error("the multi-agent system produced no sample for any prompt")]
    NoSamples,
    #[error("stopped before any group finished")]
    StoppedBeforeAnyGroup,
    #[error("the model's chat template cannot render a prompt: {message}")]
    ChatTemplate { message: String },
    #[error("could not write a finished group to the output")]
    Output(#[source] std::io::Error),
    #[error("GRPO rejected the rollout")]
    Grpo(#[from] GrpoError),
    #[error(
        "group {group_index}: the server generated {generated} tokens for it, but its samples hold {in_samples} \
         as generated (trained, or masked by a named policy); a generated token was dropped, duplicated or \
         filed as an environment token"
    )]
    UnaccountedTokens {
        group_index: usize,
        generated: u64,
        in_samples: u64,
    },
}

/// Holds the samples a group produced against the tokens the server generated for it (its client's ledger):
/// every generated token must sit in a generated span of exactly one sample, where the sample's own invariants
/// make it trained or masked by a named policy. Returns the group's generated tokens.
pub fn account_group(
    group_index: usize,
    generated: u64,
    samples: &[Sample],
) -> Result<u64, RunError> {
    let in_samples: u64 = samples.iter().map(|s| s.generated_tokens() as u64).sum();
    if in_samples != generated {
        return Err(RunError::UnaccountedTokens {
            group_index,
            generated,
            in_samples,
        });
    }
    Ok(generated)
}

/// A group that was left out of the batch, and why.
#[derive(Debug)]
pub struct FailedGroup {
    pub group_index: usize,
    pub error: GroupFailure,
}

impl FailedGroup {
    /// `group 3: <error>: <its source>: ...` down the whole cause chain, as the summary prints it.
    pub fn describe(&self) -> String {
        let mut msg = format!("group {}: {}", self.group_index, self.error);
        let mut src = std::error::Error::source(&self.error);
        while let Some(e) = src {
            msg.push_str(&format!(": {e}"));
            src = e.source();
        }
        msg
    }
}

/// Why a group was left out.
#[derive(Debug, thiserror::Error)]
pub enum GroupFailure {
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    #[error("sample {index} was still aborted after {resumes} resumes")]
    StillAborted { index: usize, resumes: usize },
}

/// Everything a rollout produced.
#[derive(Debug)]
pub struct RunOutput {
    /// The groups already in the output (see [`Resume`]) and those of this run, ordered by group, then
    /// index; each has `reward` and `extra["advantage"]`.
    pub samples: Vec<Sample>,
    pub grpo: GrpoOutcome,
    pub failed: Vec<FailedGroup>,
    pub summary: Summary,
}

/// Where a stopped run picks up: the groups an earlier run already wrote, skipped by this one.
#[derive(Debug, Default)]
pub struct Resume {
    /// The samples of those groups, as read back.
    pub samples: Vec<Sample>,
    /// Their group indices.
    pub groups: BTreeSet<usize>,
}

/// Receives each group as soon as it is finished, with its rewards and advantages: the `rollout` command
/// appends it to the output file, so that a stopped or killed run keeps every group it finished.
pub trait GroupSink {
    fn write_group(&mut self, samples: &[Sample]) -> std::io::Result<()>;
}

/// A sink that keeps nothing (the caller takes the samples from [`RunOutput`]).
#[derive(Debug, Default)]
pub struct Discard;

impl GroupSink for Discard {
    fn write_group(&mut self, _samples: &[Sample]) -> std::io::Result<()> {
        Ok(())
    }
}

/// A request to stop a run: [`StopHandle::stop`] makes it stop starting groups and drop the requests it has
/// in flight; the groups finished so far are kept.
#[derive(Debug, Clone)]
pub struct Stop(watch::Receiver<bool>);

/// The sending side of a [`Stop`].
#[derive(Debug)]
pub struct StopHandle(watch::Sender<bool>);

impl Stop {
    pub fn new() -> (StopHandle, Stop) {
        let (tx, rx) = watch::channel(false);
        (StopHandle(tx), Stop(rx))
    }

    /// A stop that never comes.
    pub fn never() -> Stop {
        Stop::new().1
    }

    /// Resolves once a stop was requested (never, if the handle is gone without one).
    async fn requested(&mut self) {
        if self.0.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl StopHandle {
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

/// How long a stopped run waits for the server to take its abort.
const ABORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Aborts on the server every request this run has in flight, one `/abort_request` per rid
/// ([`Client::in_flight_rids`]), as slime aborts its requests before a weight update. A server that is gone
/// only costs the five-second `ABORT_TIMEOUT`.
pub async fn abort_in_flight(client: &Client) {
    let rids = client.in_flight_rids();
    let aborts = rids.into_iter().map(|rid| async move {
        let abort = AbortRequest {
            rid,
            abort_all: false,
        };
        client.abort(&abort).await
    });
    match tokio::time::timeout(ABORT_TIMEOUT, futures_util::future::join_all(aborts)).await {
        Ok(results) => {
            if let Some(error) = results.into_iter().find_map(Result::err) {
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "could not abort a request in flight"
                );
            }
        }
        Err(_) => {
            tracing::warn!("the server did not take the aborts of the requests in flight in time");
        }
    }
}

/// How a prompt becomes the text of its samples.
#[derive(Debug, Clone, Default)]
pub enum PromptFormat {
    /// As written.
    Raw,
    /// One ChatML user turn and the generation prompt: the toy model's template, and Qwen's.
    #[default]
    ChatMl,
    /// One user turn and the generation prompt in this model's chat template (`--tokenizer`), as transformers'
    /// `apply_chat_template` renders it; ChatML when the model has none.
    Model(LoadedTokenizer),
}

impl PromptFormat {
    /// The text of `prompt`; only a model's template can fail (its `raise_exception`, or an error in it).
    pub fn apply(&self, prompt: &str) -> Result<String, RunError> {
        let template = match self {
            PromptFormat::Raw => return Ok(prompt.to_owned()),
            PromptFormat::ChatMl => None,
            PromptFormat::Model(loaded) => loaded.vocab().chat_template(),
        };
        let Some(template) = template else {
            return Ok(multi_agent::wrap_user_turn(prompt));
        };
        let messages = serde_json::json!([{"role": "user", "content": prompt}]);
        template
            .render(&messages, None, true, &serde_json::Map::new())
            .map_err(|message| RunError::ChatTemplate { message })
    }
}

/// Runs the whole rollout; see the module docs. `progress` counts finished samples (or agent
/// systems in multi-agent mode) when given. The samples come back in [`RunOutput`] only; see
/// [`rollout_to`] for a run that hands over each group as it finishes and can be stopped.
pub async fn rollout(
    client: &Client,
    prompts: &[LabeledPrompt],
    config: &RunConfig,
    progress: Option<&ProgressBar>,
) -> Result<RunOutput, RunError> {
    rollout_to(
        client,
        prompts,
        config,
        progress,
        &mut Discard,
        Stop::never(),
        Resume::default(),
    )
    .await
}

/// Runs the rollout over the prompts whose groups `resume` does not already hold, handing each group to
/// `sink` when it finishes (GRPO groups; a multi-agent run, whose advantages are normalised over the whole
/// batch, hands over its samples at the end, or when stopped). Groups are handed over in the order they
/// finish, each whole and in index order, so every group is a contiguous block of `n` samples.
///
/// When `stop` fires, no group is started, the requests in flight are aborted on the server
/// ([`abort_in_flight`]) and dropped, and the output holds what had finished, with `summary.interrupted`
/// set. An error that ends the whole run aborts them the same way before it is returned.
pub async fn rollout_to(
    client: &Client,
    prompts: &[LabeledPrompt],
    config: &RunConfig,
    progress: Option<&ProgressBar>,
    sink: &mut dyn GroupSink,
    mut stop: Stop,
    resume: Resume,
) -> Result<RunOutput, RunError> {
    if prompts.is_empty() {
        return Err(RunError::NoPrompts);
    }
    let n = config.n_samples_per_prompt;
    if n == 0 {
        return Err(RunError::ZeroGroupSize);
    }
    // Each prompt's text once, before any request: a template that cannot render one fails the run here.
    let formatted = prompts
        .iter()
        .map(|p| {
            Ok(LabeledPrompt {
                prompt: config.prompt_format.apply(&p.prompt)?,
                label: p.label.clone(),
            })
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    let prompts = &formatted[..];
    let started = Instant::now();
    let skipped = resume.groups.len();
    let mut samples = resume.samples;
    let mut failed = Vec::new();
    let mut left_out_tokens = 0;
    let mut finished = 0;
    let mut interrupted = false;
    // An error that ends the whole run (a group whose samples do not add up, GRPO refusing a group, the
    // output failing).
    let mut fatal = None;
    {
        let todo = prompts
            .iter()
            .enumerate()
            .filter(|(g, _)| !resume.groups.contains(g));
        let mut results = stream::iter(todo)
            .map(|(g, p)| async move {
                // Each group counts the tokens the server generated for it.
                let client = client.scoped();
                let r = match &config.multi_agent {
                    None => run_group(&client, g, p, config, progress).await,
                    Some(ma) => Ok(run_multi_agent(&client, g, p, config, ma, progress).await),
                };
                (g, r, client.generated_tokens())
            })
            .buffer_unordered(config.group_concurrency.max(1));
        loop {
            let next = tokio::select! {
                biased;
                () = stop.requested() => {
                    interrupted = true;
                    break;
                }
                next = results.next() => next,
            };
            let Some((group_index, r, generated)) = next else {
                break;
            };
            match r {
                Ok(group) => match finish_group(group_index, generated, group, config, sink) {
                    Ok(group) => {
                        finished += 1;
                        samples.extend(group);
                    }
                    Err(error) => {
                        fatal = Some(error);
                        break;
                    }
                },
                Err(error) => {
                    // A failed group is left out whole, with every token generated for it.
                    left_out_tokens += generated;
                    failed.push(FailedGroup { group_index, error });
                }
            }
        }
        if interrupted || fatal.is_some() {
            // The requests in flight end on the server before the client lets go of them.
            abort_in_flight(client).await;
        }
        // Dropping the stream here drops the requests still in flight.
    }
    if let Some(error) = fatal {
        return Err(error);
    }
    let elapsed = started.elapsed();
    // The sink had each group as it finished; the caller gets them in group order (a stable sort keeps each
    // group's own order).
    samples.sort_by_key(|s| s.group_index);
    failed.sort_by_key(|f| f.group_index);
    if samples.is_empty() {
        return Err(match failed.into_iter().next() {
            Some(FailedGroup {
                group_index,
                error: GroupFailure::Rollout(source),
            }) => RunError::AllGroupsFailed {
                group_index,
                source,
            },
            _ if interrupted => RunError::StoppedBeforeAnyGroup,
            _ => RunError::NoSamples,
        });
    }
    let groups = skipped + finished;
    let options = train::slime_options(n, groups);
    let grpo = train::grpo_advantages(&mut samples, &options, &AdvantageConfig::default(), None)?;
    if config.multi_agent.is_some() {
        sink.write_group(&samples).map_err(RunError::Output)?;
    }
    let summary = Summary {
        total_prompts: prompts.len(),
        finished_groups: finished,
        skipped_groups: skipped,
        failed_groups: failed.len(),
        interrupted,
        first_failure: failed.first().map(FailedGroup::describe),
        left_out_tokens,
        retries: client.retries(),
        ..Summary::of_samples(&samples, &grpo, elapsed, groups)
    };
    Ok(RunOutput {
        samples,
        grpo,
        failed,
        summary,
    })
}

/// A finished group checked against its ledger and, for GRPO groups, given its advantages (slime's GRPO
/// normalises within a group, so they are final now) and handed to the sink.
fn finish_group(
    group_index: usize,
    generated: u64,
    mut group: Vec<Sample>,
    config: &RunConfig,
    sink: &mut dyn GroupSink,
) -> Result<Vec<Sample>, RunError> {
    account_group(group_index, generated, &group)?;
    if config.multi_agent.is_none() {
        let options = train::slime_options(config.n_samples_per_prompt, 1);
        train::grpo_advantages(&mut group, &options, &AdvantageConfig::default(), None)?;
        sink.write_group(&group).map_err(RunError::Output)?;
    }
    Ok(group)
}

async fn run_group(
    client: &Client,
    group_index: usize,
    prompt: &LabeledPrompt,
    config: &RunConfig,
    progress: Option<&ProgressBar>,
) -> Result<Vec<Sample>, GroupFailure> {
    let n = config.n_samples_per_prompt;
    let text = prompt.prompt.clone();
    let ids = config
        .tokenizer
        .encode(client, &text)
        .await
        .map_err(RolloutError::from)?;
    let mut template = Sample::new(text, ids);
    template.label = Some(prompt.label.clone());
    let base_seed = config
        .seed
        .map(|s| s.wrapping_add((group_index * n) as u64));
    let mut group = rollout::generate_group(
        client,
        &template,
        group_index,
        n,
        &config.rollout,
        base_seed,
    )
    .await?;
    for (i, s) in group.iter_mut().enumerate() {
        let mut resumes = 0;
        while s.status == SampleStatus::Aborted {
            if resumes == config.max_resumes {
                return Err(GroupFailure::StillAborted {
                    index: s.index.unwrap_or(i),
                    resumes,
                });
            }
            let mut cfg = config.rollout.clone();
            if let Some(seed) = base_seed {
                cfg.sampling_params.sampling_seed = Some(seed.wrapping_add(i as u64));
            }
            rollout::resume(client, s, &cfg).await?;
            resumes += 1;
        }
        let max_len = config
            .rollout
            .sampling_params
            .max_new_tokens
            .map_or(usize::MAX, |m| m as usize);
        let shaping = overlong_penalty(s.response_length(), max_len, config.overlong_buffer);
        s.reward = Some(Reward::Scalar(
            math_reward(&s.response, &prompt.label) + shaping,
        ));
        if let Some(pb) = progress {
            pb.inc(1);
        }
    }
    Ok(group)
}

async fn run_multi_agent(
    client: &Client,
    group_index: usize,
    prompt: &LabeledPrompt,
    config: &RunConfig,
    ma: &MultiAgentConfig,
    progress: Option<&ProgressBar>,
) -> Vec<Sample> {
    let n = config.n_samples_per_prompt;
    let label = prompt.label.clone();
    let rm = move |s: &Sample| math_reward(&s.response, &label);
    let runs = (0..n).map(|k| {
        let mut input = Sample::new(prompt.prompt.clone(), vec![]);
        input.label = Some(prompt.label.clone());
        input.group_index = Some(group_index);
        input.index = Some(group_index * n + k);
        let mut ma = ma.clone();
        ma.shuffle_seed = ma
            .shuffle_seed
            .map(|s| s.wrapping_add((group_index * n + k) as u64));
        if let Some(seed) = config.seed {
            // Distinct seeds per agent call come from the prompt itself (each agent's prompt
            // differs); the sample index separates the runs of one prompt.
            ma.sampling_params.sampling_seed =
                Some(seed.wrapping_add((group_index * n + k) as u64));
        }
        let rm = &rm;
        async move {
            let out = multi_agent::run_agent_system(client, &input, &ma, rm).await;
            if let Some(pb) = progress {
                pb.inc(1);
            }
            out
        }
    });
    futures_util::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect()
}
