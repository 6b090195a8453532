//! Server configuration: everything a flag can change, shared by the server, the oracle and the tests.

use std::fmt;
use std::str::FromStr;

pub use crate::faults::{Fault, FaultConfig, FaultKind, FaultRule, StreamFilter};
pub use crate::latency::LatencyConfig;
pub use crate::script::{ScriptFinish, ScriptRule};

/// Which SGLang release the wire format imitates (section 8 of the spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// SGLang as of 2026: cumulative stream ids, `num_retractions`, `output_token_logprobs_length`, ...
    #[default]
    Latest,
    /// SGLang v0.5.x: delta `output_ids` in streams, `logprob_start_len=-1` covers the last prompt token,
    /// a non-finite logprob in a non-stream body is an HTTP 500, `/health` runs a generation,
    /// `/get_weight_version` is served.
    Mid,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Latest => "latest",
            Profile::Mid => "mid",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a `--profile` value that names no profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown profile {0:?}: expected \"latest\" or \"mid\"")]
pub struct UnknownProfile(pub String);

impl FromStr for Profile {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "latest" => Ok(Profile::Latest),
            "mid" => Ok(Profile::Mid),
            _ => Err(UnknownProfile(s.to_owned())),
        }
    }
}

/// Everything the server needs to know at start-up. `Default` matches the binary's flag defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Reported in `/server_info`; the listener is bound by the caller.
    pub host: String,
    /// Reported in `/server_info`; the listener is bound by the caller.
    pub port: u16,
    /// Seed of the toy model: same seed and request give the same bytes.
    pub seed: u64,
    pub model_path: String,
    /// Defaults to `model_path` when `None`, as in SGLang.
    pub served_model_name: Option<String>,
    pub vocab_size: u32,
    /// Maximum prompt + completion length in tokens.
    pub context_length: u32,
    /// When set, every endpoint except `/health*` and `/metrics` needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Stream `text`, `output_ids` and output logprobs as deltas instead of cumulatively (\[LATEST\] only).
    pub incremental_streaming_output: bool,
    pub profile: Profile,
    /// Emit a stream chunk every this many tokens unless the request overrides it.
    pub stream_interval: u32,
    /// Report logprobs of the untempered (T = 1) distribution.
    pub return_original_logprob: bool,
    /// Largest accepted request body in bytes; larger bodies get a 413 in SGLang's error shape.
    pub max_body_bytes: usize,
    /// The `weight_version` reported until a weight update changes it (SGLang's `--weight-version`).
    pub weight_version: String,
    /// Scripted answers: the first rule whose pattern the decoded prompt contains decides the answer's text.
    pub scripted: Vec<ScriptRule>,
    /// The server-wide fault schedule (replaceable at runtime through `/admin/faults`).
    pub faults: FaultConfig,
    /// Simulated time to first token and inter-token latency; zero by default.
    pub latency: LatencyConfig,
    /// Most requests generating at once (SGLang's `--max-running-requests`); more wait in the queue.
    pub max_running_requests: Option<usize>,
    /// Most requests waiting at once (SGLang's `--max-queued-requests`); more get a 503.
    pub max_queued_requests: Option<usize>,
    /// Simulated time a weight update takes once in-flight requests have drained, in milliseconds.
    pub weight_update_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".to_owned(),
            port: 30000,
            seed: 0,
            model_path: DEFAULT_MODEL_PATH.to_owned(),
            served_model_name: None,
            vocab_size: 151_936,
            context_length: 32_768,
            api_key: None,
            incremental_streaming_output: false,
            profile: Profile::Latest,
            stream_interval: 1,
            return_original_logprob: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            weight_version: DEFAULT_WEIGHT_VERSION.to_owned(),
            scripted: Vec::new(),
            faults: FaultConfig::default(),
            latency: LatencyConfig::default(),
            max_running_requests: None,
            max_queued_requests: None,
            weight_update_ms: 0,
        }
    }
}

/// The model path reported when none is configured.
pub const DEFAULT_MODEL_PATH: &str = "sglang-mock/toy-model";
/// 64 MiB: far above any real prompt, small enough that a hostile body cannot exhaust memory.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// SGLang's default `weight_version`.
pub const DEFAULT_WEIGHT_VERSION: &str = "default";
/// The SGLang version the mock reports in `/server_info`.
pub const SGLANG_VERSION: &str = "0.5.9";

impl ServerConfig {
    /// The name clients see in `/v1/models` and `/server_info`.
    pub fn served_model_name(&self) -> &str {
        self.served_model_name
            .as_deref()
            .unwrap_or(&self.model_path)
    }

    /// Checks the configuration and builds its toy model: what a server and an oracle need before answering.
    pub fn build_model(&self) -> Result<crate::model::Model, StateError> {
        self.faults.validate().map_err(StateError::Faults)?;
        crate::model::Model::new(self.model_config()).map_err(|source| StateError::Model {
            vocab_size: self.vocab_size,
            seed: self.seed,
            source,
        })
    }

    /// The toy model's configuration for this server.
    pub fn model_config(&self) -> crate::model::ModelConfig {
        crate::model::ModelConfig {
            seed: self.seed,
            vocab_size: self.vocab_size,
            return_original_logprob: self.return_original_logprob,
        }
    }
}

/// Why a server (or an oracle) could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot build the toy model (vocab_size {vocab_size}, seed {seed})")]
    Model {
        vocab_size: u32,
        seed: u64,
        #[source]
        source: crate::model::ModelError,
    },
    #[error("the fault configuration is not valid")]
    Faults(#[source] crate::faults::FaultError),
}
