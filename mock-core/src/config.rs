//! Server configuration: everything a flag can change, shared by the server, the oracle and the tests.

use crate::faults::FaultConfig;
use crate::latency::LatencyConfig;
use crate::model::{LoadedTokenizer, MoeShape};
pub(crate) use crate::release::SglangVersion;
use crate::release::{self, WeightVersionRoute};

/// The toy model's vocabulary size, Qwen2.5's 151,936.
const DEFAULT_VOCAB_SIZE: u32 = 151_936;
use crate::script::ScriptRule;

/// Everything the server needs to know at start-up, and the one definition of the binary's flags.
///
/// Each field is a flag of `sglang-mock` (with the `cli` feature, clap reads this struct): its doc comment is
/// the flag's help, `SGLANG_MOCK_<FIELD>` its environment variable, and [`Default`] its default. The fields
/// set from files (`scripted`, `faults`) have their own flags in the server's command line (`mock_server::cli`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ServerConfig {
    /// Address to listen on.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_HOST", default_value_t = ServerConfig::default().host))]
    pub host: String,
    /// Port to listen on (0 picks a free port; the ready line on stdout carries the bound URL).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_PORT", default_value_t = ServerConfig::default().port))]
    pub port: u16,
    /// Seed of the toy model: same seed and request give the same bytes.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_SEED", default_value_t = ServerConfig::default().seed))]
    pub seed: u64,
    /// Model path reported by /model_info and /server_info.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_MODEL_PATH", default_value_t = ServerConfig::default().model_path))]
    pub model_path: String,
    /// SGLang's `--load-format`: how the weights would be loaded (`dummy` for random weights), reported by
    /// `/model_info` and `/server_info`; the toy model has no weights to load.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_LOAD_FORMAT", default_value_t = ServerConfig::default().load_format))]
    pub load_format: String,
    /// Name reported by /v1/models (defaults to the model path, as in SGLang).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_SERVED_MODEL_NAME"))]
    pub served_model_name: Option<String>,
    /// Vocabulary size of the model [default: 151936, or with --tokenizer its config.json's vocab_size, else
    /// the tokenizer's size].
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_VOCAB_SIZE"))]
    pub vocab_size: Option<u32>,
    /// A Hugging Face tokenizer (a tokenizer.json, or a model directory holding one with tokenizer_config.json,
    /// generation_config.json and config.json): the model speaks its vocabulary and chat template.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SGLANG_MOCK_TOKENIZER", value_name = "PATH")
    )]
    pub tokenizer: Option<LoadedTokenizer>,
    /// Context length: maximum prompt plus completion tokens [default: what the config.json of a --model-path
    /// directory says, as SGLang derives it, else 32768]. Above the directory's, the server refuses to start
    /// unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set, as SGLang does.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_CONTEXT_LENGTH"))]
    pub context_length: Option<u32>,
    /// The context length the model directory's `config.json` gives, read on first use: leave it at its default.
    #[cfg_attr(feature = "cli", arg(skip))]
    pub model_context_length: DerivedContextLength,
    /// Require `Authorization: Bearer <key>` on every endpoint except /health* and /metrics.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_API_KEY"))]
    pub api_key: Option<String>,
    /// 0.5.15 and later: the only key the control endpoints (aborts, pauses, weight updates, `/admin/*`)
    /// accept; the others keep `--api-key`'s rule.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_ADMIN_API_KEY"))]
    pub admin_api_key: Option<String>,
    /// Stream text, output_ids and output logprobs as deltas instead of cumulatively (the releases whose streams
    /// are cumulative: 0.5.15 and later).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SGLANG_MOCK_INCREMENTAL_STREAMING_OUTPUT")
    )]
    pub incremental_streaming_output: bool,
    /// SGLang release to answer as (`sglang-mock releases` lists them; `mock-server/VERSIONS.md` says how they
    /// differ).
    #[cfg_attr(feature = "cli", arg(long, visible_alias = "profile", env = "SGLANG_MOCK_SGLANG_VERSION", default_value_t = ServerConfig::default().sglang_version, help = format!("SGLang release to answer as: {}", release::listed())))]
    pub sglang_version: SglangVersion,
    /// Answer as slime's patched 0.5.15.post1 (its `docker/patch/`) where the mock covers it:
    /// `/get_weight_version` and `/weight_version` answer the version again, `/post_process_weights` is
    /// served, and `custom_params.return_top_p_token_ids` gets the top-p replay (MODEL.md section 7.2). Only with
    /// `--sglang-version 0.5.15`.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_SLIME_PATCHES"))]
    pub slime_patches: bool,
    /// SGLang's `--enable-deterministic-inference`: a request without `sampling_seed` samples with seed 42, and
    /// every sample of a request draws as the first does, so `n > 1` without seeds gives identical samples.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SGLANG_MOCK_ENABLE_DETERMINISTIC_INFERENCE")
    )]
    pub enable_deterministic_inference: bool,
    /// SGLang's `--enable-return-routed-experts`: a request with `return_routed_experts` gets
    /// `meta_info.routed_experts`, the toy router's experts (MODEL.md section 12); without it, none (0.5.15 and
    /// later).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SGLANG_MOCK_ENABLE_RETURN_ROUTED_EXPERTS")
    )]
    pub enable_return_routed_experts: bool,
    /// The MoE model's `num_hidden_layers`: layers per routed-experts row.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_NUM_HIDDEN_LAYERS", default_value_t = ServerConfig::default().num_hidden_layers))]
    pub num_hidden_layers: u32,
    /// Experts per MoE layer: routed expert ids are below this.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_NUM_EXPERTS", default_value_t = ServerConfig::default().num_experts))]
    pub num_experts: u32,
    /// The MoE model's `num_experts_per_tok`: experts per layer in a routed-experts row.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_NUM_EXPERTS_PER_TOK", default_value_t = ServerConfig::default().num_experts_per_tok))]
    pub num_experts_per_tok: u32,
    /// SGLang's `--sampling-mask-max-tokens` (0.5.23): the largest `top_k` a `return_sampling_mask` request may
    /// sample with.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_SAMPLING_MASK_MAX_TOKENS", default_value_t = ServerConfig::default().sampling_mask_max_tokens, value_parser = clap::value_parser!(u32).range(1..)))]
    pub sampling_mask_max_tokens: u32,
    /// Emit a stream chunk every this many tokens (requests may override it).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_STREAM_INTERVAL", default_value_t = ServerConfig::default().stream_interval, value_parser = clap::value_parser!(u32).range(1..)))]
    pub stream_interval: u32,
    /// SGLang's `--enable-metrics`: serve Prometheus metrics at `/metrics` (without it, as in SGLang, `/metrics`
    /// is a 404).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_ENABLE_METRICS"))]
    pub enable_metrics: bool,
    /// Report logprobs of the untempered (T = 1) distribution.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SGLANG_MOCK_RETURN_ORIGINAL_LOGPROB")
    )]
    pub return_original_logprob: bool,
    /// Largest accepted request body in bytes; larger bodies get a 413 in SGLang's error shape.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_MAX_BODY_BYTES", default_value_t = ServerConfig::default().max_body_bytes))]
    pub max_body_bytes: usize,
    /// The weight_version reported until a weight update changes it (SGLang's --weight-version).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_WEIGHT_VERSION", default_value_t = ServerConfig::default().weight_version))]
    pub weight_version: String,
    /// Scripted answers: the first rule whose pattern the decoded prompt contains decides the answer's text.
    #[cfg_attr(feature = "cli", arg(skip))]
    pub scripted: Vec<ScriptRule>,
    /// The server-wide fault schedule (replaceable at runtime through `/admin/faults`).
    #[cfg_attr(feature = "cli", arg(skip))]
    pub faults: FaultConfig,
    /// Simulated time to first token and inter-token latency; zero by default.
    #[cfg_attr(feature = "cli", command(flatten))]
    pub latency: LatencyConfig,
    /// Most requests generating at once; more wait in the queue (SGLang's --max-running-requests).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_MAX_RUNNING_REQUESTS"))]
    pub max_running_requests: Option<usize>,
    /// Most requests waiting at once; more get a 503 (SGLang's --max-queued-requests).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_MAX_QUEUED_REQUESTS"))]
    pub max_queued_requests: Option<usize>,
    /// SGLang's `--disable-radix-cache`: keep no prefix cache, so every `cached_tokens` is 0.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_DISABLE_RADIX_CACHE"))]
    pub disable_radix_cache: bool,
    /// SGLang's `--page-size`: the prefix cache matches and keeps whole pages of this many tokens.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_PAGE_SIZE", default_value_t = ServerConfig::default().page_size, value_parser = clap::value_parser!(u32).range(1..)))]
    pub page_size: u32,
    /// SGLang's `--max-total-tokens`: the KV pool's size in tokens. Given, the server schedules as SGLang does
    /// (`mock_core::engine::Scheduler`): samples wait while the pool or `--max-running-requests` is full,
    /// and are retracted when decoding outgrows it. Without it the pool is 2^20 tokens (more than an 80 GB GPU
    /// holds for an 8B model, about 400,000), which bounds only the prefix cache, and every request runs at once.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_MAX_TOTAL_TOKENS", value_parser = clap::value_parser!(u64).range(1..)))]
    pub max_total_tokens: Option<u64>,
    /// SGLang's `--chunked-prefill-size`: most prompt tokens one prefill step computes, a longer prompt being
    /// split over several steps; -1 does not split. Applies with `--max-total-tokens`.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_CHUNKED_PREFILL_SIZE", default_value_t = ServerConfig::default().chunked_prefill_size, allow_negative_numbers = true))]
    pub chunked_prefill_size: i64,
    /// SGLang's `--max-prefill-tokens`: most prompt tokens one prefill step admits (its first sample is always
    /// admitted). Applies with `--max-total-tokens`.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_MAX_PREFILL_TOKENS", default_value_t = ServerConfig::default().max_prefill_tokens))]
    pub max_prefill_tokens: usize,
    /// SGLang's `--schedule-policy`: `fcfs` admits waiting samples in arrival order, `lpm` the longest cached
    /// prefix first. Applies with `--max-total-tokens`.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_SCHEDULE_POLICY", default_value = "fcfs", value_parser = ["fcfs", "lpm"]))]
    pub schedule_policy: String,
    /// SGLang's `--schedule-conservativeness`: scales the share of its remaining `max_new_tokens` a running
    /// sample is assumed to use. Applies with `--max-total-tokens`.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_SCHEDULE_CONSERVATIVENESS", default_value_t = ServerConfig::default().schedule_conservativeness))]
    pub schedule_conservativeness: f64,
    /// SGLang's `--enable-cache-report`: OpenAI answers report the prefix-cache hits in
    /// `usage.prompt_tokens_details.cached_tokens`.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_ENABLE_CACHE_REPORT"))]
    pub enable_cache_report: bool,
    /// Keep a ledger of every item served, for `/admin/ledger` and `/admin/audit` (mock-server/WITNESS.md).
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_LEDGER"))]
    pub ledger: bool,
    /// The ledger's bound in MiB: beyond it, the oldest entries are evicted first.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_LEDGER_MAX_MIB", default_value_t = ServerConfig::default().ledger_max_mib, value_parser = clap::value_parser!(u64).range(1..)))]
    pub ledger_max_mib: u64,
    /// Simulated duration of a weight update once in-flight requests have drained, in milliseconds.
    #[cfg_attr(feature = "cli", arg(long, env = "SGLANG_MOCK_WEIGHT_UPDATE_MS", default_value_t = ServerConfig::default().weight_update_ms))]
    pub weight_update_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".to_owned(),
            port: 30000,
            seed: 0,
            model_path: DEFAULT_MODEL_PATH.to_owned(),
            load_format: "auto".to_owned(),
            served_model_name: None,
            vocab_size: None,
            tokenizer: None,
            context_length: None,
            model_context_length: DerivedContextLength::default(),
            api_key: None,
            admin_api_key: None,
            incremental_streaming_output: false,
            sglang_version: SglangVersion::default(),
            slime_patches: false,
            enable_deterministic_inference: false,
            enable_return_routed_experts: false,
            num_hidden_layers: MoeShape::default().layers,
            num_experts: MoeShape::default().experts,
            num_experts_per_tok: MoeShape::default().experts_per_token,
            sampling_mask_max_tokens: 4096,
            stream_interval: 1,
            return_original_logprob: false,
            enable_metrics: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            weight_version: DEFAULT_WEIGHT_VERSION.to_owned(),
            scripted: Vec::new(),
            faults: FaultConfig::default(),
            latency: LatencyConfig::default(),
            max_running_requests: None,
            max_queued_requests: None,
            disable_radix_cache: false,
            page_size: 1,
            max_total_tokens: None,
            chunked_prefill_size: 8192,
            max_prefill_tokens: 16_384,
            schedule_policy: "fcfs".to_owned(),
            schedule_conservativeness: 1.0,
            enable_cache_report: false,
            weight_update_ms: 0,
            ledger: false,
            ledger_max_mib: DEFAULT_LEDGER_MAX_MIB,
        }
    }
}

/// The context length of a model path that is no directory, or whose `config.json` names none: Qwen2.5's.
pub(crate) const DEFAULT_CONTEXT_LENGTH: u32 = 32_768;

/// The context length a model directory's `config.json` gives, read once ([`ServerConfig::context_len`]) with the
/// path it was read from, so that a configuration copied and given another `model_path` reads its own. Two
/// configurations compare equal whatever it holds: it follows from `model_path`.
#[derive(Debug, Clone, Default)]
pub struct DerivedContextLength(std::sync::OnceLock<(String, Option<u32>)>);

impl PartialEq for DerivedContextLength {
    fn eq(&self, _: &DerivedContextLength) -> bool {
        true
    }
}

/// The keys SGLang reads a context length from, in its order (`CONTEXT_LENGTH_KEYS` in
/// `srt/utils/hf_transformers/common.py`).
const CONTEXT_LENGTH_KEYS: [&str; 5] = [
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
];

/// The context length of the model directory `path`, as SGLang's `get_context_length` derives it from the text
/// model's config: the first of [`CONTEXT_LENGTH_KEYS`] that is set, times `rope_scaling`'s `factor` unless the
/// scaling names `original_max_position_embeddings` or is `llama3`'s. The text model's config is `text_config`
/// when there is one (a multimodal model's), else the whole file. `None` for a path without a readable
/// `config.json` or one that names none of the keys.
pub(crate) fn model_dir_context_length(path: &std::path::Path) -> Option<u32> {
    let text = std::fs::read(path.join("config.json")).ok()?;
    let config: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let config = match config.get("text_config") {
        Some(sub) if sub.is_object() => sub,
        _ => &config,
    };
    let factor = match config.get("rope_scaling") {
        Some(scaling) if scaling.as_object().is_some_and(|o| !o.is_empty()) => {
            if scaling.get("original_max_position_embeddings").is_some()
                || scaling.get("rope_type").and_then(|t| t.as_str()) == Some("llama3")
            {
                1.0
            } else {
                scaling
                    .get("factor")
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(1.0)
            }
        }
        _ => 1.0,
    };
    let value = CONTEXT_LENGTH_KEYS
        .iter()
        .find_map(|key| config.get(*key).filter(|v| !v.is_null()))?
        .as_f64()?;
    // Python's `int()` truncates toward zero.
    let length = (factor * value).trunc();
    (1.0..=f64::from(u32::MAX))
        .contains(&length)
        .then_some(length as u32)
}

/// The model path reported when none is configured.
pub(crate) const DEFAULT_MODEL_PATH: &str = "sglang-mock/toy-model";
/// 64 MiB: far above any real prompt, small enough that a hostile body cannot exhaust memory.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// The ledger's default bound, in MiB: about 18,000 samples of 4,096 tokens in four turns (58 KiB each, each
/// turn's prompt repeating the context before it; `bench/audit.py`).
pub(crate) const DEFAULT_LEDGER_MAX_MIB: u64 = 1024;
/// The KV pool's default size in tokens, 2^20. SGLang sizes its pool from the GPU's free memory: for an 8B
/// model of 32 layers and 8 KV heads of 128 dimensions in bf16 a token takes 128 KiB, so an 80 GB GPU that
/// keeps about 54 GB for the KV cache holds about 400,000 tokens.
pub(crate) const DEFAULT_MAX_TOTAL_TOKENS: u64 = 1 << 20;
/// SGLang's default `weight_version`.
pub(crate) const DEFAULT_WEIGHT_VERSION: &str = "default";

impl ServerConfig {
    /// The context length the server serves: `--context-length`, else the model directory's
    /// ([`model_dir_context_length`]), else 32,768.
    #[inline]
    pub fn context_len(&self) -> u32 {
        self.context_length.unwrap_or_else(|| {
            self.model_dir_context_length()
                .unwrap_or(DEFAULT_CONTEXT_LENGTH)
        })
    }

    /// The context length `--model-path`'s `config.json` gives, if it is a directory that has one.
    pub fn model_dir_context_length(&self) -> Option<u32> {
        let read = |path: &str| model_dir_context_length(std::path::Path::new(path));
        let (path, length) = self
            .model_context_length
            .0
            .get_or_init(|| (self.model_path.clone(), read(&self.model_path)));
        if *path == self.model_path {
            *length
        } else {
            read(&self.model_path)
        }
    }

    /// The KV pool's size in tokens: `--max-total-tokens`, or 2^20.
    pub fn kv_pool_tokens(&self) -> u64 {
        self.max_total_tokens.unwrap_or(DEFAULT_MAX_TOTAL_TOKENS)
    }

    /// `/get_weight_version` answers the version (0.5.3, and 0.5.15 with slime's patches) rather than a
    /// deprecation 404 (0.5.15) or no route (0.5.23).
    pub fn serves_weight_version(&self) -> bool {
        match self.sglang_version.weight_version_route {
            WeightVersionRoute::Served => true,
            WeightVersionRoute::Deprecated => self.slime_patches,
            WeightVersionRoute::Absent => false,
        }
    }

    /// The name clients see in `/v1/models` and `/server_info`.
    pub fn served_model_name(&self) -> &str {
        self.served_model_name
            .as_deref()
            .unwrap_or(&self.model_path)
    }

    /// The tokenizer path `/server_info` and `/model_info` report: `--tokenizer`'s, or the model path, as
    /// SGLang defaults `--tokenizer-path` to `--model-path`.
    pub fn tokenizer_path(&self) -> String {
        match &self.tokenizer {
            Some(loaded) => loaded.vocab().source().display().to_string(),
            None => self.model_path.clone(),
        }
    }

    /// The model's vocabulary size: `vocab_size` when set, otherwise the loaded tokenizer's model's (its
    /// `config.json`'s `vocab_size`, else the tokenizer's own size), otherwise the toy model's 151,936.
    pub fn vocab_size(&self) -> u32 {
        self.vocab_size.unwrap_or_else(|| match &self.tokenizer {
            Some(loaded) => {
                let vocab = loaded.vocab();
                vocab.config_vocab_size().unwrap_or(vocab.size())
            }
            None => DEFAULT_VOCAB_SIZE,
        })
    }

    /// Checks the configuration and builds its toy model: what a server and an oracle need before answering.
    pub fn build_model(&self) -> Result<crate::model::Model, StateError> {
        if self.slime_patches && !self.sglang_version.slime_patches {
            return Err(StateError::SlimePatches(self.sglang_version));
        }
        if self.admin_api_key.is_some() && !self.sglang_version.admin_api_key {
            return Err(StateError::AdminApiKey(self.sglang_version));
        }
        self.faults.validate().map_err(StateError::Faults)?;
        // `ModelConfig._derive_context_length`: a longer context than the model's is refused unless allowed.
        if let (Some(flag), Some(derived)) = (self.context_length, self.model_dir_context_length())
            && flag > derived
            && !std::env::var("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN").is_ok_and(|v| {
                matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "y")
            })
        {
            return Err(StateError::ContextLength { flag, derived });
        }
        let model =
            crate::model::Model::new(self.model_config()).map_err(|source| StateError::Model {
                vocab_size: self.vocab_size(),
                seed: self.seed,
                source,
            })?;
        // A toy policy directory (MODEL.md section 14.4) is served with its weights; any other path is a name.
        let path = std::path::Path::new(&self.model_path);
        match crate::model::Policy::load_dir(path) {
            Ok(Some(policy)) => Ok(model.with_policy(policy)),
            Ok(None) => Ok(model),
            Err(source) => Err(StateError::Policy {
                path: self.model_path.clone(),
                source,
            }),
        }
    }

    /// The toy model's configuration for this server.
    pub fn model_config(&self) -> crate::model::ModelConfig {
        crate::model::ModelConfig {
            seed: self.seed,
            vocab_size: self.vocab_size(),
            return_original_logprob: self.return_original_logprob,
            moe: MoeShape {
                layers: self.num_hidden_layers,
                experts: self.num_experts,
                experts_per_token: self.num_experts_per_tok,
            },
            tokenizer: self.tokenizer.clone(),
        }
    }
}

/// Why a server (or an oracle) could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot build the model (vocab_size {vocab_size}, seed {seed})")]
    Model {
        vocab_size: u32,
        seed: u64,
        #[source]
        source: crate::model::ModelError,
    },
    #[error("the fault configuration is not valid")]
    Faults(#[source] crate::faults::FaultError),
    #[error("cannot load the weights of --model-path {path}")]
    Policy {
        path: String,
        #[source]
        source: crate::model::PolicyError,
    },
    #[error(
        "--slime-patches applies to the SGLang releases slime patches ({patched}), not {0}",
        patched = release::numbers_where(|r| r.slime_patches)
    )]
    SlimePatches(SglangVersion),
    #[error(
        "--admin-api-key is a flag of SGLang {with_key}, not of {0}",
        with_key = release::numbers_where(|r| r.admin_api_key)
    )]
    AdminApiKey(SglangVersion),
    #[error(
        "Warning: User-specified context_length ({flag}) is greater than the derived context_length ({derived}). \
         This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ \
         from max_position_embeddings in the model's config. To allow overriding this maximum, set the env var \
         SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    )]
    ContextLength { flag: u32, derived: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model directory whose `config.json` is `config`.
    fn model_dir(name: &str, config: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sglang-mock-context-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        std::fs::write(dir.join("config.json"), config).expect("config.json");
        dir
    }

    /// Each case's expected length computed by hand from `get_context_length` in SGLang 0.5.23's
    /// `srt/utils/hf_transformers/common.py`.
    #[test]
    fn the_context_length_is_derived_as_sglang_derives_it() {
        for (name, config, expected) in [
            ("plain", r#"{"max_position_embeddings": 4096}"#, Some(4096)),
            // `seq_length` comes before `max_position_embeddings` in the keys' order; a null is unset.
            (
                "order",
                r#"{"max_position_embeddings": 4096, "seq_length": 8192}"#,
                Some(8192),
            ),
            (
                "null",
                r#"{"seq_length": null, "max_position_embeddings": 4096}"#,
                Some(4096),
            ),
            (
                "first",
                r#"{"model_max_length": 100, "max_sequence_length": 300}"#,
                Some(300),
            ),
            (
                "yarn",
                r#"{"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0}}"#,
                Some(131_072),
            ),
            // `int(1.5 * 3001)` truncates 4501.5.
            (
                "truncated",
                r#"{"max_position_embeddings": 3001, "rope_scaling": {"factor": 1.5}}"#,
                Some(4501),
            ),
            (
                "original",
                r#"{"max_position_embeddings": 8192, "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 2048}}"#,
                Some(8192),
            ),
            (
                "llama3",
                r#"{"max_position_embeddings": 131072, "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}}"#,
                Some(131_072),
            ),
            (
                "empty-scaling",
                r#"{"max_position_embeddings": 4096, "rope_scaling": {}}"#,
                Some(4096),
            ),
            (
                "multimodal",
                r#"{"max_position_embeddings": 2048, "text_config": {"max_position_embeddings": 8192}}"#,
                Some(8192),
            ),
            ("none", r#"{"hidden_size": 64}"#, None),
            ("broken", "{", None),
        ] {
            let dir = model_dir(name, config);
            assert_eq!(model_dir_context_length(&dir), expected, "{name}: {config}");
            let served = ServerConfig {
                model_path: dir.display().to_string(),
                ..ServerConfig::default()
            };
            assert_eq!(served.context_len(), expected.unwrap_or(32_768), "{name}");
            // The flag wins, and a path that is no directory has the default.
            let flagged = ServerConfig {
                context_length: Some(1000),
                ..served
            };
            assert_eq!(flagged.context_len(), 1000, "{name}");
            let _ = std::fs::remove_dir_all(dir);
        }
        assert_eq!(ServerConfig::default().context_len(), 32_768);
        // A configuration copied after its length was read, then pointed at another directory, reads that one.
        let first = ServerConfig {
            model_path: model_dir("copied-a", r#"{"max_position_embeddings": 4096}"#)
                .display()
                .to_string(),
            ..ServerConfig::default()
        };
        assert_eq!(first.context_len(), 4096);
        let other = model_dir("copied-b", r#"{"max_position_embeddings": 1024}"#);
        let mut second = first.clone();
        second.model_path = other.display().to_string();
        assert_eq!((first.context_len(), second.context_len()), (4096, 1024));
        let _ = std::fs::remove_dir_all(&first.model_path);
        let _ = std::fs::remove_dir_all(other);
    }

    #[test]
    fn a_context_longer_than_the_model_directory_s_refuses_to_start() {
        if std::env::var_os("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN").is_some() {
            return;
        }
        let dir = model_dir("refuse", r#"{"max_position_embeddings": 4096}"#);
        let config = |flag: u32| ServerConfig {
            model_path: dir.display().to_string(),
            context_length: Some(flag),
            ..ServerConfig::default()
        };
        let err = config(8192)
            .build_model()
            .expect_err("a longer context is refused");
        assert!(
            matches!(
                err,
                StateError::ContextLength {
                    flag: 8192,
                    derived: 4096
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().starts_with(
            "Warning: User-specified context_length (8192) is greater than the derived context_length (4096). "
        ));
        assert!(config(4096).build_model().is_ok());
        assert!(config(1024).build_model().is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }
}
