//! The `rollout` command's flags and its one entry point, [`run_command`].
//!
//! Without `--url` it starts `sglang-mock` in-process on 127.0.0.1:0 (with scripted answers for
//! some built-in prompts, so rewards are mixed) and stops it afterwards; with `--url` it talks to
//! any SGLang server or router.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use mock_server::model::LoadedTokenizer;
use rollout_client::multi_agent::MultiAgentConfig;
use rollout_client::rollout::RolloutConfig;
use rollout_client::sample;
use rollout_client::tokenize::PromptTokenizer;
use rollout_client::{
    Client, ClientError, CustomParams, Prompt, RetryPolicy, Sample, SamplingParams,
};

use crate::embedded::EmbeddedMock;
use crate::progress;
use crate::prompts::{self, LabeledPrompt, PromptsError};
use crate::run::{self, GroupSink, PromptFormat, Resume, RunConfig, RunError, RunOutput, Stop};
use crate::summary::Summary;

/// Record a GRPO rollout from SGLang (or an embedded sglang-mock) as JSONL samples with rewards and advantages.
///
/// With no arguments, starts sglang-mock in-process and runs 16 built-in arithmetic prompts with
/// 8 samples each. Every flag can also be set through the environment variable shown.
#[derive(Debug, Clone, Parser)]
#[command(name = "rollout", version, about, long_about)]
pub struct RolloutArgs {
    /// SGLang server or router to use, e.g. http://127.0.0.1:30000. Default: an embedded sglang-mock.
    #[arg(long, env = "ROLLOUT_URL")]
    pub url: Option<String>,

    /// Bearer token for a server started with --api-key.
    #[arg(long, env = "ROLLOUT_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// JSONL prompts file, one {"prompt": ..., "label": ...} per line. Default: 16 built-in arithmetic prompts.
    #[arg(long, env = "ROLLOUT_PROMPTS")]
    pub prompts: Option<PathBuf>,

    /// Samples per prompt (the GRPO group size; slime's --n-samples-per-prompt).
    #[arg(
        short = 'n',
        long,
        env = "ROLLOUT_N_SAMPLES_PER_PROMPT",
        default_value_t = 8
    )]
    pub n_samples_per_prompt: usize,

    /// Response budget in tokens per sample (slime's --rollout-max-response-len).
    #[arg(long, env = "ROLLOUT_MAX_NEW_TOKENS", default_value_t = 128)]
    pub max_new_tokens: u32,

    /// Sampling temperature.
    #[arg(long, env = "ROLLOUT_TEMPERATURE", default_value_t = 1.0)]
    pub temperature: f32,

    /// Nucleus sampling: keep the smallest token set with this much probability, in (0, 1].
    #[arg(long, env = "ROLLOUT_TOP_P", default_value_t = 1.0)]
    pub top_p: f32,

    /// Sample from the k most likely tokens only; -1 for the whole vocabulary.
    #[arg(long, env = "ROLLOUT_TOP_K", default_value_t = -1, allow_negative_numbers = true)]
    pub top_k: i32,

    /// DAPO's overlong buffer L_cache: answers longer than max-new-tokens minus this many tokens
    /// lose up to 1 reward, linearly (truncated ones lose 1). 0 turns it off. Not used with
    /// --multi-agent, whose rewards are the example's shaped 0/1 values.
    #[arg(long, env = "ROLLOUT_OVERLONG_BUFFER", default_value_t = 32)]
    pub overlong_buffer: usize,

    /// Base of the per-sample sampling_seed (seed + sample index). Default: 0 with the embedded
    /// mock (so samples differ and runs repeat), none with --url (servers without deterministic
    /// inference reject or ignore it).
    #[arg(long, env = "ROLLOUT_SEED")]
    pub seed: Option<u64>,

    /// Maximum requests in flight.
    #[arg(long, env = "ROLLOUT_CONCURRENCY", default_value_t = 64)]
    pub concurrency: usize,

    /// When an aborted sample is resumed, stop training on the tokens an older weight version made (slime's
    /// --mask-offpolicy-in-partial-rollout; by each token's version, or every earlier token without versions).
    #[arg(long, env = "ROLLOUT_MASK_OFFPOLICY")]
    pub mask_offpolicy_in_partial_rollout: bool,

    /// Stream every generation (results are identical to non-streamed ones).
    #[arg(long, env = "ROLLOUT_STREAM")]
    pub stream: bool,

    /// Run slime's multi-agent example (5 solvers, 5 rewriters, 1 selector, reward shaping) for each sample.
    #[arg(long, env = "ROLLOUT_MULTI_AGENT")]
    pub multi_agent: bool,

    /// Prompt plus response limit of each multi-agent call (slime's --rollout-max-context-len).
    #[arg(long, env = "ROLLOUT_MAX_CONTEXT_LEN", default_value_t = 4096)]
    pub max_context_len: usize,

    /// Send prompts as raw text instead of a user turn in the chat template.
    #[arg(long, env = "ROLLOUT_NO_CHAT_TEMPLATE")]
    pub no_chat_template: bool,

    /// The model's Hugging Face tokenizer (a tokenizer.json or a model directory): prompts are rendered with
    /// its chat template and tokenized with it here, and the embedded mock speaks its vocabulary. Default: the
    /// server tokenizes, and prompts are ChatML.
    #[arg(long, env = "ROLLOUT_TOKENIZER", value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,

    /// Where to write the samples (one slime to_dict() JSON object per line, with reward and advantage).
    #[arg(short, long, env = "ROLLOUT_OUTPUT", default_value = "rollout.jsonl")]
    pub output: PathBuf,

    /// Do not draw a progress bar.
    #[arg(long, env = "ROLLOUT_NO_PROGRESS")]
    pub no_progress: bool,

    /// Keep the groups already in --output (by prompt and group index), run only the others and append
    /// them: how a stopped run is finished. Not with --multi-agent, whose advantages span the whole run.
    #[arg(long, env = "ROLLOUT_RESUME", conflicts_with = "multi_agent")]
    pub resume: bool,

    /// Exit 0 even when some groups failed (they are left out of the output and named in the summary).
    #[arg(long, env = "ROLLOUT_ALLOW_PARTIAL")]
    pub allow_partial: bool,

    /// Ask for each token's routed experts (SGLang 0.5.15 and later with --enable-return-routed-experts;
    /// the embedded mock is started with it) and write them as rollout_routed_experts.
    #[arg(long, env = "ROLLOUT_ROUTED_EXPERTS")]
    pub routed_experts: bool,

    /// The served model's num_hidden_layers and num_experts_per_tok, "LAYERS,TOPK": every routes row must
    /// hold LAYERS * TOPK experts. Default with the embedded mock: its 48,8.
    #[arg(long, env = "ROLLOUT_MOE_SHAPE", value_parser = parse_moe_shape)]
    pub moe_shape: Option<(usize, usize)>,

    /// Ask for each token's sampling support and renormalised logprob (SGLang 0.5.23; needs --top-k or
    /// --temperature 0) and write them as rollout_top_p_token_ids/offsets and rollout_sampling_log_probs.
    #[arg(long, env = "ROLLOUT_SAMPLING_MASK")]
    pub sampling_mask: bool,

    /// Ask for slime's top-p replay (`custom_params.return_top_p_token_ids`, served by slime's patched 0.5.15:
    /// `sglang-mock --sglang-version 0.5.15 --slime-patches`) and write each token's kept ids as
    /// rollout_top_p_token_ids/offsets, as slime does with --rollout-top-p below 1. The rows come with a
    /// sampling filter (--top-p below 1, --top-k or --temperature 0).
    #[arg(
        long,
        env = "ROLLOUT_TOP_P_TOKEN_IDS",
        conflicts_with = "sampling_mask"
    )]
    pub top_p_token_ids: bool,
}

/// `--moe-shape LAYERS,TOPK`.
fn parse_moe_shape(text: &str) -> Result<(usize, usize), String> {
    let (layers, topk) = text
        .split_once(',')
        .ok_or_else(|| format!("{text:?} is not LAYERS,TOPK"))?;
    let number = |s: &str| {
        s.trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{s:?} is not a positive integer"))
    };
    Ok((number(layers)?, number(topk)?))
}

/// Why the command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("could not open the prompts file {path}")]
    OpenPrompts {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not read the prompts file {path}")]
    Prompts {
        path: PathBuf,
        #[source]
        source: PromptsError,
    },
    #[error("could not start the embedded sglang-mock")]
    Mock(#[source] mock_server::StartError),
    #[error("could not load the tokenizer {path}")]
    Tokenizer {
        path: PathBuf,
        #[source]
        source: mock_server::model::LoadError,
    },
    #[error("could not set up the client")]
    Client(#[from] ClientError),
    #[error("the rollout failed")]
    Run(#[from] RunError),
    #[error("could not write {path}")]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--sampling-mask needs --top-k between 2 and the server's --sampling-mask-max-tokens, or --temperature 0: \
         SGLang returns a sampling support only for a bounded top-k (got --top-k {top_k})"
    )]
    SamplingMaskTopK { top_k: i32 },
    #[error("could not resume from {path}")]
    Resume {
        path: PathBuf,
        #[source]
        source: ResumeError,
    },
}

/// Why an existing output cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("could not read it")]
    Read(#[source] std::io::Error),
    #[error("line {line} is not a sample")]
    Line {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line} has no group_index")]
    NoGroup { line: usize },
    #[error(
        "group {group_index} was written for another prompt than prompt {group_index} of this run (or this \
         run has fewer prompts): resume with the same prompts and chat template"
    )]
    OtherPrompt { group_index: usize },
    #[error(
        "group {group_index} has {found} samples before the last group, not {n}: it was not written by a rollout run with -n {n}"
    )]
    PartialGroup {
        group_index: usize,
        found: usize,
        n: usize,
    },
}

/// What the command did, printed at the end.
#[derive(Debug, Clone)]
pub struct Report {
    /// "embedded sglang-mock at ..." or the URL.
    pub server: String,
    pub scripted_prompts: usize,
    pub multi_agent: bool,
    pub overlong_buffer: usize,
    pub max_new_tokens: u32,
    pub output: PathBuf,
    pub summary: Summary,
    /// `--allow-partial`: failed groups do not fail the command.
    pub allow_partial: bool,
}

impl Report {
    /// Whether the run failed as a whole: some group failed and `--allow-partial` was not given.
    pub fn failed(&self) -> bool {
        self.summary.failed_groups > 0 && !self.allow_partial
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "server       {}", self.server)?;
        if self.scripted_prompts > 0 {
            writeln!(
                f,
                "note         the mock model's free text is never a right answer, so only the {} prompts with scripted \
                 answers (forced text, same for a whole group) can be correct; see rollout-cli/README.md",
                self.scripted_prompts
            )?;
        }
        writeln!(
            f,
            "mode         {}",
            if self.multi_agent {
                "multi-agent (slime's example; one batch-wide GRPO group, as slime falls back to)"
            } else {
                "GRPO groups of n samples per prompt"
            }
        )?;
        if self.multi_agent {
            writeln!(
                f,
                "reward fn    last number of the answer == label (1 or 0), shaped x0.8 / x1.2 by the selector"
            )?;
        } else if self.overlong_buffer > 0 {
            writeln!(
                f,
                "reward fn    last number of the answer == label (1 or 0) + DAPO overlong penalty \
                 (0 up to {} tokens, down to -1 at {})",
                (self.max_new_tokens as usize).saturating_sub(self.overlong_buffer),
                self.max_new_tokens
            )?;
        } else {
            writeln!(
                f,
                "reward fn    last number of the answer == label (1 or 0)"
            )?;
        }
        writeln!(f, "{}", self.summary)?;
        write!(f, "output       {}", self.output.display())
    }
}

fn load_prompts(path: Option<&PathBuf>) -> Result<Vec<LabeledPrompt>, CommandError> {
    let Some(path) = path else {
        return Ok(prompts::builtin());
    };
    let file = File::open(path).map_err(|source| CommandError::OpenPrompts {
        path: path.clone(),
        source,
    })?;
    prompts::read_jsonl(BufReader::new(file)).map_err(|source| CommandError::Prompts {
        path: path.clone(),
        source,
    })
}

/// Runs the command: embedded mock or `--url`, the rollout, GRPO, the JSONL file; returns the report.
pub async fn run_command(args: RolloutArgs) -> Result<Report, CommandError> {
    run_command_until(args, Stop::never()).await
}

/// [`run_command`] until `stop` fires: then no group is started, the requests in flight are aborted on the
/// server (one `/abort_request` per rid in flight), and the report covers the groups that had finished,
/// which the output already holds. Each group is appended to the output as it finishes.
pub async fn run_command_until(args: RolloutArgs, stop: Stop) -> Result<Report, CommandError> {
    if args.sampling_mask && args.temperature != 0.0 && args.top_k < 2 {
        return Err(CommandError::SamplingMaskTopK { top_k: args.top_k });
    }
    let prompts = load_prompts(args.prompts.as_ref())?;
    let tokenizer = match &args.tokenizer {
        Some(path) => {
            Some(
                LoadedTokenizer::load(path).map_err(|source| CommandError::Tokenizer {
                    path: path.clone(),
                    source,
                })?,
            )
        }
        None => None,
    };
    let format = prompt_format(&args, tokenizer.as_ref());
    let resume = if args.resume {
        prepare_resume(&args, &prompts, &format)?
    } else {
        Resume::default()
    };
    let mut sink = JsonlSink::open(&args.output, args.resume)?;
    let (mock, url, server, seed, scripted_prompts) = match &args.url {
        Some(url) => (None, url.clone(), url.clone(), args.seed, 0),
        None => {
            let mock = EmbeddedMock::start(
                &prompts,
                args.routed_experts,
                args.top_p_token_ids,
                tokenizer.clone(),
            )
            .await
            .map_err(CommandError::Mock)?;
            let (url, scripted_prompts) = (mock.url.clone(), mock.scripted_prompts);
            let server = format!("embedded sglang-mock at {url}");
            // The mock honours a seed, so samples differ and runs repeat.
            (
                Some(mock),
                url,
                server,
                Some(args.seed.unwrap_or(0)),
                scripted_prompts,
            )
        }
    };
    let result = match build_client(&url, &args) {
        Ok(client) => {
            let config = run_config(&args, seed, tokenizer.as_ref(), format);
            rollout_with_progress(&client, &prompts, &config, &args, &mut sink, stop, resume)
                .await
                .map_err(CommandError::from)
        }
        Err(e) => Err(e),
    };
    if let Some(mock) = mock {
        mock.stop().await;
    }
    let out = result?;
    Ok(Report {
        server,
        scripted_prompts,
        multi_agent: args.multi_agent,
        overlong_buffer: args.overlong_buffer,
        max_new_tokens: args.max_new_tokens,
        output: args.output,
        summary: out.summary,
        allow_partial: args.allow_partial,
    })
}

/// A rid prefix unique to this run, so that its rids name its own requests only.
fn run_rid_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("rollout-{:x}-{:x}-", std::process::id(), nanos)
}

/// The client for `url`: the flags' concurrency and API key, slime's retry schedule.
fn build_client(url: &str, args: &RolloutArgs) -> Result<Client, CommandError> {
    let mut builder = Client::builder(url)
        .rid_prefix(run_rid_prefix())
        .max_concurrency(args.concurrency)
        .connect_timeout(Duration::from_secs(10))
        .retry(RetryPolicy::default());
    if let Some(key) = &args.api_key {
        builder = builder.api_key(key);
    }
    let embedded = (args.url.is_none()).then(|| {
        let shape = mock_server::MoeShape::default();
        (shape.layers as usize, shape.experts_per_token as usize)
    });
    if let Some((layers, topk)) = args.moe_shape.or(embedded) {
        builder = builder.moe_shape(layers, topk);
    }
    Ok(builder.build()?)
}

/// The rollout the flags describe; `seed` is the base `sampling_seed`, if any.
/// How the flags format prompts: raw, a user turn in the model's template (`--tokenizer`), or ChatML.
fn prompt_format(args: &RolloutArgs, tokenizer: Option<&LoadedTokenizer>) -> PromptFormat {
    match (args.no_chat_template, tokenizer) {
        (true, _) => PromptFormat::Raw,
        (false, Some(loaded)) => PromptFormat::Model(loaded.clone()),
        (false, None) => PromptFormat::ChatMl,
    }
}

/// Prompt text to ids: the `--tokenizer` here (slime tokenizes with the model's Hugging Face tokenizer
/// before it sends `input_ids`), or the server.
fn prompt_tokenizer(tokenizer: Option<&LoadedTokenizer>) -> PromptTokenizer {
    match tokenizer {
        Some(loaded) => {
            let loaded = loaded.clone();
            PromptTokenizer::local(move |text| loaded.encode(text))
        }
        None => PromptTokenizer::Server,
    }
}

fn run_config(
    args: &RolloutArgs,
    seed: Option<u64>,
    tokenizer: Option<&LoadedTokenizer>,
    prompt_format: PromptFormat,
) -> RunConfig {
    let sampling_params = SamplingParams {
        max_new_tokens: Some(args.max_new_tokens),
        temperature: Some(args.temperature),
        top_p: Some(args.top_p),
        top_k: Some(args.top_k),
        custom_params: args.top_p_token_ids.then_some(CustomParams {
            return_top_p_token_ids: true,
        }),
        ..SamplingParams::default()
    };
    let multi_agent = args.multi_agent.then(|| MultiAgentConfig {
        rollout_max_context_len: args.max_context_len,
        sampling_params: sampling_params.clone(),
        stream: args.stream,
        return_routed_experts: args.routed_experts,
        return_sampling_mask: args.sampling_mask,
        tokenizer: prompt_tokenizer(tokenizer),
        shuffle_seed: Some(seed.unwrap_or(0)),
        ..MultiAgentConfig::default()
    });
    RunConfig {
        n_samples_per_prompt: args.n_samples_per_prompt,
        rollout: RolloutConfig {
            sampling_params,
            stream: args.stream,
            mask_offpolicy_in_partial_rollout: args.mask_offpolicy_in_partial_rollout,
            return_routed_experts: args.routed_experts,
            return_sampling_mask: args.sampling_mask,
        },
        seed,
        tokenizer: prompt_tokenizer(tokenizer),
        prompt_format,
        multi_agent,
        group_concurrency: args.concurrency,
        overlong_buffer: args.overlong_buffer,
        ..RunConfig::default()
    }
}

/// [`run::rollout_to`] under a progress bar, unless `--no-progress`.
async fn rollout_with_progress(
    client: &Client,
    prompts: &[LabeledPrompt],
    config: &RunConfig,
    args: &RolloutArgs,
    sink: &mut JsonlSink,
    stop: Stop,
    resume: Resume,
) -> Result<RunOutput, RunError> {
    let progress = (!args.no_progress).then(|| {
        let unit = if args.multi_agent {
            "agent runs"
        } else {
            "samples"
        };
        let todo = prompts.len().saturating_sub(resume.groups.len());
        progress::bar(todo * args.n_samples_per_prompt, unit)
    });
    let result = run::rollout_to(
        client,
        prompts,
        config,
        progress.as_ref(),
        sink,
        stop,
        resume,
    )
    .await;
    if let Some(pb) = &progress {
        pb.finish_and_clear();
    }
    result
}

/// The output file: each group is appended as one write of whole lines and flushed, so a killed run leaves
/// every finished group and no torn line (see [`prepare_resume`] for a write the kernel itself cut short).
#[derive(Debug)]
pub struct JsonlSink {
    file: File,
}

impl JsonlSink {
    /// Creates (truncates) `path`, or with `append` opens it for appending.
    pub fn open(path: &Path, append: bool) -> Result<JsonlSink, CommandError> {
        let file = if append {
            OpenOptions::new().create(true).append(true).open(path)
        } else {
            File::create(path)
        };
        let file = file.map_err(|source| CommandError::Output {
            path: path.to_owned(),
            source,
        })?;
        Ok(JsonlSink { file })
    }
}

impl GroupSink for JsonlSink {
    fn write_group(&mut self, samples: &[Sample]) -> std::io::Result<()> {
        let mut lines = Vec::new();
        sample::write_jsonl(&mut lines, samples)?;
        self.file.write_all(&lines)?;
        self.file.flush()
    }
}

/// Reads the groups an earlier run wrote to `--output`, for `--resume`: each must be whole (`n` samples) and
/// belong to the prompt of its index. A last group cut short (the run was killed while the kernel wrote it)
/// and a torn last line are dropped from the file, so that the run writes them again.
pub fn prepare_resume(
    args: &RolloutArgs,
    prompts: &[LabeledPrompt],
    format: &PromptFormat,
) -> Result<Resume, CommandError> {
    let path = &args.output;
    let error = |source| CommandError::Resume {
        path: path.clone(),
        source,
    };
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Resume::default()),
        Err(e) => return Err(error(ResumeError::Read(e))),
    };
    let n = args.n_samples_per_prompt;
    // Everything after the last newline is a torn line.
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut groups: Vec<(usize, Vec<Sample>, usize)> = Vec::new();
    let mut offset = 0;
    for (i, line) in bytes[..whole].split_inclusive(|&b| b == b'\n').enumerate() {
        let start = offset;
        offset += line.len();
        let text = String::from_utf8_lossy(line);
        if text.trim().is_empty() {
            continue;
        }
        let sample = Sample::from_json(&text).map_err(|source| {
            error(ResumeError::Line {
                line: i + 1,
                source,
            })
        })?;
        let group_index = sample
            .group_index
            .ok_or_else(|| error(ResumeError::NoGroup { line: i + 1 }))?;
        match groups.last_mut() {
            Some((g, members, _)) if *g == group_index && members.len() < n => members.push(sample),
            _ => groups.push((group_index, vec![sample], start)),
        }
    }
    let mut keep = whole;
    if let Some((_, members, start)) = groups.last()
        && members.len() < n
    {
        keep = *start;
        groups.pop();
    }
    let mut resume = Resume::default();
    for (group_index, members, _) in groups {
        if members.len() != n {
            return Err(error(ResumeError::PartialGroup {
                group_index,
                found: members.len(),
                n,
            }));
        }
        let expected = match prompts.get(group_index) {
            Some(p) => Some(Prompt::from(format.apply(&p.prompt)?)),
            None => None,
        };
        if expected.as_ref() != Some(&members[0].prompt) || !resume.groups.insert(group_index) {
            return Err(error(ResumeError::OtherPrompt { group_index }));
        }
        resume.samples.extend(members);
    }
    if keep < bytes.len() {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| error(ResumeError::Read(e)))?;
        file.set_len(keep as u64)
            .map_err(|e| error(ResumeError::Read(e)))?;
    }
    Ok(resume)
}
