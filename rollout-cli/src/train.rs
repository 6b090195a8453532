//! `rollout train`: the loop closed on two cores. Roll out from a server that serves the toy policy, reward,
//! compute GRPO advantages and the PPO loss, back-propagate the loss into the policy's weights exactly, take an
//! Adam step, write the weights as a model directory, load it with `/update_weights_from_disk` and roll out
//! again (`mock-server/MODEL.md` section 14).
//!
//! The trainer computes the logprobs of its rollouts itself, from the weights it sent, so at the rollout policy
//! every importance ratio is 1 to the last bit: the largest `|ratio - 1|` each step prints is 0 unless something
//! between the weights and the served tokens is wrong (a stale server, a recompute at the wrong temperature, a
//! token lost or shifted).
//!
//! The task is defined on the toy model's own tokens: the reward of an answer is the share of its tokens that are
//! words from the first eighth of the word range (ids `256 .. 256 + block`, MODEL.md section 4.3). In each
//! context one slot draws from there; which one depends on the context's bucket, so the policy has to learn, for
//! every bucket, to raise that slot.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use futures_util::future::try_join_all;
use grpo::{AdvantageConfig, Batch, BatchOptions, LogProbs, PolicyLossConfig};
use mock_server::model::{Model, ModelConfig, Policy, SLOTS};
use mock_server::{Server, ServerConfig};
use rollout_client::rollout::{self, RolloutConfig};
use rollout_client::{Client, ClientError, Reward, RolloutError, Sample, SamplingParams};
use serde::Serialize;

/// Train the toy policy with GRPO against a server that serves it, and watch it learn.
///
/// Without --url it starts sglang-mock in-process, serving the weights it writes under --out. Each step prints
/// the reward mean, the largest |ratio - 1| at the rollout policy (0 when the trainer computes what the server
/// served), the KL from the previous policy and the rollout's tokens per second, and appends them to
/// OUT/train.jsonl; OUT/train.svg draws the curve.
#[derive(Debug, Clone, Parser)]
#[command(name = "rollout train", version)]
pub struct TrainArgs {
    /// A sglang-mock that serves a toy policy directory (`--model-path DIR`) on this machine. Default: an
    /// embedded one.
    #[arg(long, env = "ROLLOUT_URL")]
    pub url: Option<String>,

    /// Training steps (rollout, update, weight sync).
    #[arg(long, default_value_t = 30)]
    pub steps: usize,

    /// Prompts per step.
    #[arg(long, default_value_t = 16)]
    pub prompts: usize,

    /// Samples per prompt (the GRPO group size).
    #[arg(short = 'n', long, default_value_t = 8)]
    pub n_samples_per_prompt: usize,

    /// Response budget in tokens per sample.
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: u32,

    /// Sampling temperature (the trainer recomputes at the same one).
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,

    /// Adam's learning rate on the logit offsets.
    #[arg(long, default_value_t = 0.3)]
    pub lr: f64,

    /// Base of the samples' sampling seeds: each step and sample gets its own, so groups differ.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// The server's --seed and --vocab-size, which the trainer's model must share.
    #[arg(long, default_value_t = 0)]
    pub server_seed: u64,
    #[arg(long, default_value_t = 151_936)]
    pub vocab_size: u32,

    /// Where the weights (OUT/weights/step-N), train.jsonl and train.svg go.
    #[arg(long, default_value = "train")]
    pub out: PathBuf,
}

impl TrainArgs {
    fn config(&self) -> TrainConfig {
        TrainConfig {
            steps: self.steps,
            prompts: self.prompts,
            n: self.n_samples_per_prompt,
            max_new_tokens: self.max_new_tokens,
            temperature: self.temperature,
            lr: self.lr,
            seed: self.seed,
            ignore_eos: false,
        }
    }
}

/// What one run of the loop does.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    pub steps: usize,
    pub prompts: usize,
    pub n: usize,
    pub max_new_tokens: u32,
    pub temperature: f64,
    pub lr: f64,
    pub seed: u64,
    /// Answers run to `max_new_tokens` (a benchmark's fixed length).
    pub ignore_eos: bool,
}

/// One step, as printed and written to `train.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRecord {
    pub step: usize,
    /// The weight version the step's samples were generated under.
    pub weight_version: String,
    pub reward_mean: f64,
    /// The largest `|exp(recomputed - served) - 1|` over the step's tokens: 0 at the rollout policy.
    pub max_abs_ratio_minus_one: f64,
    /// The mean over the step's contexts of `KL(previous policy || updated policy)` at the temperature.
    pub kl_to_previous: f64,
    pub loss: f64,
    pub samples: usize,
    pub tokens: usize,
    /// Generated tokens per second of the rollout (varies between runs).
    pub tokens_per_second: f64,
}

/// Why the loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("the toy model cannot be built")]
    Model(#[from] mock_server::model::ModelError),
    #[error("the server's weights cannot be built")]
    Policy(#[from] mock_server::model::PolicyError),
    #[error("could not start the embedded sglang-mock")]
    Mock(#[from] mock_server::StartError),
    #[error("could not set up the client")]
    Client(#[source] ClientError),
    #[error(
        "step {step}: the weight update failed (does the server serve a toy policy directory?)"
    )]
    Update {
        step: usize,
        #[source]
        source: ClientError,
    },
    #[error("step {step}: the rollout failed")]
    Rollout {
        step: usize,
        #[source]
        source: RolloutError,
    },
    #[error(
        "step {step}: sample {index} was generated under weight version {got:?}, but the server was updated to \
         {expected:?} before the step: the server did not apply the update, or labels tokens with another version"
    )]
    Version {
        step: usize,
        index: usize,
        expected: String,
        got: Vec<String>,
    },
    #[error("step {step}: sample {index} token {position}: id {id} is outside the vocabulary")]
    Token {
        step: usize,
        index: usize,
        position: usize,
        id: u32,
    },
    #[error("step {step}: GRPO rejected the batch")]
    Batch {
        step: usize,
        #[source]
        source: grpo::BatchError,
    },
    #[error("step {step}: the loss cannot be computed")]
    Loss {
        step: usize,
        #[source]
        source: grpo::LossError,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The task: prompts made of toy tokens, and the reward of an answer.
#[derive(Debug, Clone)]
pub struct Task {
    vocab_size: u32,
    block: u32,
}

impl Task {
    pub fn new(vocab_size: u32) -> Task {
        Task {
            vocab_size,
            block: ((vocab_size - 259) / 8) & !1,
        }
    }

    /// `count` chat prompts of the toy vocabulary: `<|im_start|>`, a few words, `<|im_end|>`, `<|im_start|>`.
    pub fn prompts(&self, count: usize) -> Vec<Vec<u32>> {
        let (im_start, im_end) = (self.vocab_size - 2, self.vocab_size - 1);
        (0..count as u32)
            .map(|i| {
                let words = (0..3 + i % 4).map(|k| 256 + 2 * ((i * 7919 + k * 104_729) % 9000));
                std::iter::once(im_start)
                    .chain(words)
                    .chain([im_end, im_start])
                    .collect()
            })
            .collect()
    }

    /// The share of the answer's tokens (its closing special id aside) that are words of the first eighth of
    /// the word range; 0 for an empty answer.
    pub fn reward(&self, response: &[u32]) -> f64 {
        let content: Vec<u32> = response
            .iter()
            .copied()
            .filter(|&id| id < self.vocab_size - 3)
            .collect();
        if content.is_empty() {
            return 0.0;
        }
        let hits = content
            .iter()
            .filter(|&&id| (256..256 + self.block).contains(&id))
            .count();
        hits as f64 / content.len() as f64
    }
}

/// Adam over the offsets, in `f64`.
#[derive(Debug)]
struct Adam {
    lr: f64,
    step: i32,
    m: Vec<f64>,
    v: Vec<f64>,
}

impl Adam {
    fn new(lr: f64, len: usize) -> Adam {
        Adam {
            lr,
            step: 0,
            m: vec![0.0; len],
            v: vec![0.0; len],
        }
    }

    /// One step of descent on `params` with `grad`.
    fn step(&mut self, params: &mut [f64], grad: &[f64]) {
        const B1: f64 = 0.9;
        const B2: f64 = 0.999;
        self.step += 1;
        let (c1, c2) = (1.0 - B1.powi(self.step), 1.0 - B2.powi(self.step));
        for (((p, &g), m), v) in params
            .iter_mut()
            .zip(grad)
            .zip(&mut self.m)
            .zip(&mut self.v)
        {
            *m = B1 * *m + (1.0 - B1) * g;
            *v = B2 * *v + (1.0 - B2) * g * g;
            *p -= self.lr * (*m / c1) / ((*v / c2).sqrt() + 1e-8);
        }
    }
}

/// A token's gradient with respect to the offsets: its context's bucket and `d logprob / d θ[bucket][slot]`.
pub type TokenGradient = (usize, [f64; SLOTS]);

/// The trainer's recompute of one sample: each response token's logprob at `temperature` under `policy`, as
/// the server reports it (`f32`), and its gradient with respect to the offsets (bucket and per-slot values).
pub fn recompute(
    model: &Model,
    policy: &Policy,
    sample: &Sample,
    temperature: f64,
) -> Result<(Vec<f32>, Vec<TokenGradient>), usize> {
    let tokens = sample.tokens();
    let start = sample.prompt_len();
    let mut logprobs = Vec::with_capacity(tokens.len() - start);
    let mut grads = Vec::with_capacity(tokens.len() - start);
    for position in start..tokens.len() {
        // The logits at `position` are those after every token before it, the prompt's last one included.
        let context = &tokens[..position];
        let g = model
            .logprob_gradient(policy, context, temperature, tokens[position])
            .ok_or(position - start)?;
        logprobs.push(g.logprob as f32);
        grads.push((g.bucket, g.d_offsets));
    }
    Ok((logprobs, grads))
}

/// `KL(old || new)` at `temperature` after `context`, in closed form: the nine explicit ids are the same under
/// both policies (the weights move their logits only), so are the tail ids.
pub fn kl_after(
    model: &Model,
    old: &Policy,
    new: &Policy,
    context: &[u32],
    temperature: f64,
) -> f64 {
    let p = model.distribution_under(old, context, temperature, &[]);
    let q = model.distribution_under(new, context, temperature, &[]);
    let mut top = Vec::with_capacity(SLOTS);
    p.top(SLOTS, &mut top);
    let explicit: f64 = top
        .iter()
        .map(|&(id, lp)| lp.exp() * (lp - q.logprob(id)))
        .sum();
    let tail_count = f64::from(model.config().vocab_size) - SLOTS as f64;
    let (tp, tq) = (p.tail_logprob(), q.tail_logprob());
    (explicit + tail_count * tp.exp() * (tp - tq)).max(0.0)
}

/// What the trainer's half of a step measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateStats {
    pub loss: f64,
    /// The largest `|exp(recomputed - served) - 1|` over the samples' tokens.
    pub max_abs_ratio_minus_one: f64,
    /// The mean over the samples' contexts of `KL(previous || updated)`.
    pub kl_to_previous: f64,
    pub tokens: usize,
}

/// The trainer's half of the loop: the policy's weights and Adam's state. [`Trainer::update`] takes one
/// on-policy step from a rollout's samples.
#[derive(Debug)]
pub struct Trainer {
    policy: Policy,
    params: Vec<f64>,
    adam: Adam,
}

impl Trainer {
    /// A trainer starting from the all-zero policy (the base model) with Adam's learning rate `lr`.
    pub fn new(lr: f64) -> Trainer {
        let buckets = mock_server::model::DEFAULT_BUCKETS as usize;
        Trainer {
            policy: Policy::zero(buckets as u32),
            params: vec![0.0; buckets * SLOTS],
            adam: Adam::new(lr, buckets * SLOTS),
        }
    }

    /// The weights the next rollout must be served with.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// One step from `samples` (rewarded, in groups of `group_size`, generated under [`Trainer::policy`] at
    /// `temperature`): recompute every response token's logprob and its gradient, GRPO advantages, the PPO loss
    /// with the rollout logprobs as the old policy's and its gradient, back-propagation into the offsets and an
    /// Adam step. `step` names the step in errors.
    pub fn update(
        &mut self,
        model: &Model,
        samples: &[Sample],
        group_size: usize,
        temperature: f64,
        step: usize,
    ) -> Result<UpdateStats, TrainError> {
        let mut current = Vec::new();
        let mut token_grads = Vec::new();
        for (index, sample) in samples.iter().enumerate() {
            let (lp, grads) =
                recompute(model, &self.policy, sample, temperature).map_err(|position| {
                    TrainError::Token {
                        step,
                        index,
                        position,
                        id: sample.response_tokens()[position],
                    }
                })?;
            current.extend(lp);
            token_grads.extend(grads);
        }
        let parts: Vec<_> = samples
            .iter()
            .map(|s| rollout_client::train::sample_parts(s, None))
            .collect();
        let batch = Batch::new(&parts, &BatchOptions::grpo(group_size))
            .map_err(|source| TrainError::Batch { step, source })?;
        let advantages = batch.advantages(&AdvantageConfig::default());
        let loss_config = PolicyLossConfig {
            use_rollout_log_probs: true,
            eps_clip_high: 0.28,
            ..PolicyLossConfig::default()
        };
        let lp = LogProbs::new(&current);
        let loss = batch
            .policy_loss(&advantages, &lp, &loss_config)
            .map_err(|source| TrainError::Loss { step, source })?;
        let d_loss = batch
            .policy_loss_gradient(&advantages, &lp, &loss_config)
            .map_err(|source| TrainError::Loss { step, source })?;
        let served = batch.rollout_log_probs().unwrap_or(&[]);
        let max_ratio = current
            .iter()
            .zip(served)
            .map(|(&c, &s)| (f64::from(c) - f64::from(s)).exp() - 1.0)
            .fold(0.0f64, |m, x| m.max(x.abs()));
        let mut grad = vec![0.0f64; self.params.len()];
        for (&g, (bucket, d)) in d_loss.values().iter().zip(&token_grads) {
            for (slot, &ds) in d.iter().enumerate() {
                grad[bucket * SLOTS + slot] += g * ds;
            }
        }
        self.adam.step(&mut self.params, &grad);
        let rows = self
            .params
            .chunks_exact(SLOTS)
            .map(|row| std::array::from_fn(|s| row[s] as f32))
            .collect();
        let updated = Policy::new(rows)?;
        let mut kl = 0.0;
        for sample in samples {
            let tokens = sample.tokens();
            for position in sample.prompt_len()..tokens.len() {
                kl += kl_after(
                    model,
                    &self.policy,
                    &updated,
                    &tokens[..position],
                    temperature,
                );
            }
        }
        self.policy = updated;
        Ok(UpdateStats {
            loss: loss.loss,
            max_abs_ratio_minus_one: max_ratio,
            kl_to_previous: kl / current.len().max(1) as f64,
            tokens: current.len(),
        })
    }
}

/// One step's rollout: `config.n` samples of each prompt, each with a sampling seed of its own (so that groups
/// differ), rewarded by `task`.
pub async fn rollout(
    client: &Client,
    task: &Task,
    prompts: &[Vec<u32>],
    config: &TrainConfig,
    step: usize,
) -> Result<Vec<Sample>, TrainError> {
    let rollout_config = RolloutConfig {
        sampling_params: SamplingParams {
            temperature: Some(config.temperature as f32),
            max_new_tokens: Some(config.max_new_tokens),
            ignore_eos: config.ignore_eos.then_some(true),
            ..SamplingParams::default()
        },
        ..RolloutConfig::default()
    };
    let templates: Vec<Sample> = prompts.iter().map(|p| Sample::new("", p.clone())).collect();
    let groups = templates.iter().enumerate().map(|(g, template)| {
        let seed = config
            .seed
            .wrapping_add(((step * config.prompts + g) * config.n) as u64);
        rollout::generate_group(client, template, g, config.n, &rollout_config, Some(seed))
    });
    let mut samples: Vec<Sample> = try_join_all(groups)
        .await
        .map_err(|source| TrainError::Rollout { step, source })?
        .into_iter()
        .flatten()
        .collect();
    let rewards: Vec<f64> = samples
        .iter()
        .map(|s| task.reward(s.response_tokens()))
        .collect();
    for (sample, &reward) in samples.iter_mut().zip(&rewards) {
        sample.reward = Some(Reward::Scalar(reward));
    }
    Ok(samples)
}

/// Runs the loop against `client`, whose server serves the toy policy with `model`'s seed and vocabulary and can
/// read the directories written under `out`. Calls `on_step` with each finished step (a stopped run keeps the
/// steps it finished) and returns them all with the final weights.
pub async fn train(
    client: &Client,
    model: &Model,
    config: &TrainConfig,
    out: &Path,
    mut on_step: impl FnMut(&StepRecord) -> Result<(), TrainError>,
) -> Result<(Vec<StepRecord>, Policy), TrainError> {
    let task = Task::new(model.config().vocab_size);
    let prompts = task.prompts(config.prompts);
    let mut trainer = Trainer::new(config.lr);
    let mut records = Vec::with_capacity(config.steps);
    let vocab_size = model.config().vocab_size;
    sync(client, trainer.policy(), vocab_size, out, 0).await?;
    for step in 0..config.steps {
        let version = step.to_string();
        let started = Instant::now();
        let samples = rollout(client, &task, &prompts, config, step).await?;
        let seconds = started.elapsed().as_secs_f64();
        for (index, sample) in samples.iter().enumerate() {
            if sample.weight_versions.iter().any(|v| *v != version) {
                return Err(TrainError::Version {
                    step,
                    index,
                    expected: version,
                    got: sample.weight_versions.clone(),
                });
            }
        }
        let stats = trainer.update(model, &samples, config.n, config.temperature, step)?;
        let rewards: Vec<f64> = samples
            .iter()
            .map(|s| rollout_client::train::reward_value(s.reward.as_ref(), None).unwrap_or(0.0))
            .collect();
        let record = StepRecord {
            step,
            weight_version: version,
            reward_mean: rewards.iter().sum::<f64>() / rewards.len().max(1) as f64,
            max_abs_ratio_minus_one: stats.max_abs_ratio_minus_one,
            kl_to_previous: stats.kl_to_previous,
            loss: stats.loss,
            samples: samples.len(),
            tokens: stats.tokens,
            tokens_per_second: stats.tokens as f64 / seconds.max(1e-9),
        };
        sync(client, trainer.policy(), vocab_size, out, step + 1).await?;
        on_step(&record)?;
        records.push(record);
    }
    Ok((records, trainer.policy().clone()))
}

/// Writes `policy` as `out/weights/step-N` and has the server load it with version `N`.
async fn sync(
    client: &Client,
    policy: &Policy,
    vocab_size: u32,
    out: &Path,
    step: usize,
) -> Result<(), TrainError> {
    let dir = weights_dir(out, step);
    mock_server::model::save_dir(policy, vocab_size, &dir).map_err(|source| TrainError::Write {
        path: dir.clone(),
        source,
    })?;
    let path = std::fs::canonicalize(&dir).unwrap_or(dir);
    client
        .update_weights_from_disk(&path.display().to_string(), Some(&step.to_string()))
        .await
        .map_err(|source| TrainError::Update { step, source })
}

/// The directory of the weights after `step` updates.
pub fn weights_dir(out: &Path, step: usize) -> PathBuf {
    out.join("weights").join(format!("step-{step:04}"))
}

/// One line of the step's report.
pub fn describe(r: &StepRecord) -> String {
    format!(
        "step {:>3}  reward {:.3}  max|ratio-1| {:.3e}  KL {:.2e}  loss {:+.4}  {:>6.0} tok/s",
        r.step,
        r.reward_mean,
        r.max_abs_ratio_minus_one,
        r.kl_to_previous,
        r.loss,
        r.tokens_per_second
    )
}

/// The reward curve as an SVG picture: reward mean per step, on a 0 to 1 scale.
pub fn curve_svg(records: &[StepRecord]) -> String {
    let (w, h, left, bottom, top, right) = (640.0, 360.0, 56.0, 40.0, 24.0, 16.0);
    let steps = records.len().max(2) - 1;
    let x = |i: usize| left + (w - left - right) * i as f64 / steps as f64;
    let y = |v: f64| top + (h - top - bottom) * (1.0 - v.clamp(0.0, 1.0));
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(svg, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let yy = y(tick);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{yy}" x2="{}" y2="{yy}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{tick:.2}</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0
        );
    }
    let points: Vec<String> = records
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{:.1},{:.1}", x(i), y(r.reward_mean)))
        .collect();
    let _ = write!(
        svg,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{}"/>"##,
        points.join(" ")
    );
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">step (0 to {})</text><text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">reward mean</text>"#,
        (left + w - right) / 2.0,
        h - 8.0,
        records.len().saturating_sub(1),
        h / 2.0,
        h / 2.0
    );
    svg.push_str("</svg>\n");
    svg
}

/// `rollout train`: sets up the output directory, the embedded mock unless `--url`, and the client, then runs
/// the loop, printing each step and appending it to `OUT/train.jsonl`, and draws `OUT/train.svg`.
pub async fn run_train(args: TrainArgs) -> Result<Vec<StepRecord>, TrainError> {
    let config = args.config();
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TrainError::Write { path, source }
    };
    std::fs::create_dir_all(&args.out).map_err(write_err(&args.out))?;
    let model = Model::new(ModelConfig {
        seed: args.server_seed,
        vocab_size: args.vocab_size,
        ..ModelConfig::default()
    })?;
    let start = weights_dir(&args.out, 0);
    mock_server::model::save_dir(&Policy::zero(8), args.vocab_size, &start)
        .map_err(write_err(&start))?;
    let (embedded, url) = match &args.url {
        Some(url) => (None, url.clone()),
        None => {
            let server = Server::start(ServerConfig {
                host: "127.0.0.1".to_owned(),
                port: 0,
                seed: args.server_seed,
                vocab_size: Some(args.vocab_size),
                model_path: start.display().to_string(),
                ..ServerConfig::default()
            })
            .await?;
            let url = server.url();
            (Some(server), url)
        }
    };
    let client = Client::builder(url)
        .max_concurrency(64)
        .build()
        .map_err(TrainError::Client)?;
    let jsonl = args.out.join("train.jsonl");
    let mut file = std::fs::File::create(&jsonl).map_err(write_err(&jsonl))?;
    let result = train(&client, &model, &config, &args.out, |record| {
        println!("{}", describe(record));
        let line = serde_json::to_string(record).expect("a record serialises");
        writeln!(file, "{line}").map_err(write_err(&jsonl))
    })
    .await;
    if let Some(server) = embedded {
        let _ = server.shutdown().await;
    }
    let (records, _) = result?;
    let svg = args.out.join("train.svg");
    std::fs::write(&svg, curve_svg(&records)).map_err(write_err(&svg))?;
    if let (Some(first), Some(last)) = (records.first(), records.last()) {
        println!(
            "reward mean {:.3} at step {} -> {:.3} at step {}; curve in {}",
            first.reward_mean,
            first.step,
            last.reward_mean,
            last.step,
            svg.display()
        );
    }
    Ok(records)
}
