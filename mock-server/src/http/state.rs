//! The state every handler shares: configuration, model, control plane, faults, metrics and load counters.

use std::sync::Arc;

use super::metrics::Metrics;
use crate::batch::Batcher;
use crate::control::Control;
use crate::faults::Faults;
use mock_core::engine::{Draws, Load, Occupancy, SharedCache, used_tokens};
use mock_core::model::{Model, Policy};
use mock_core::oracle::Oracle;
use mock_core::witness::{Ledger, Router};
use mock_core::{ServerConfig, StateError};

/// Shared server state: configuration, the model, and load counters. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Arc<ServerConfig>,
    model: Arc<Model>,
    /// Whether `--model-path` is a toy policy directory (MODEL.md section 14.4), so that weight updates read
    /// weights.
    serves_policy: bool,
    /// The weights the server started with, which `/admin/reset` restores.
    base_policy: Arc<Policy>,
    /// What the server runs and queues now, item by item (`/v1/loads`, `/get_load`, `/metrics`).
    occupancy: Arc<Occupancy>,
    control: Arc<Control>,
    faults: Faults,
    metrics: Arc<Metrics>,
    /// The ledger of what was served (`--ledger`), if the server keeps one.
    ledger: Option<Arc<Ledger>>,
    /// `true` once the server has begun to shut down: a `hang` ends then instead of holding the shutdown.
    shutting_down: tokio::sync::watch::Sender<bool>,
    /// What `/model_info` says the model is: `model_type` and `architectures`.
    model_card: (String, Vec<String>),
    /// The radix prefix cache, unless `--disable-radix-cache`.
    prefix_cache: Option<SharedCache>,
    /// The batch loop, when the KV pool is bounded (`--max-total-tokens`).
    batcher: Option<Arc<Batcher>>,
    /// The draws of unseeded samples so far (MODEL.md section 8.3).
    draws: Draws,
}

/// `model_type` and `architectures` of the model directory's `config.json`, as SGLang's `ModelConfig` reads
/// them; the toy model's own (`qwen2`, `Qwen2ForCausalLM`: ChatML and Qwen's vocabulary) when the model path holds
/// none.
fn model_card(model_path: &str) -> (String, Vec<String>) {
    let config = std::fs::read(std::path::Path::new(model_path).join("config.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    let model_type = config
        .as_ref()
        .and_then(|c| c["model_type"].as_str())
        .unwrap_or("qwen2")
        .to_owned();
    let architectures = config
        .as_ref()
        .and_then(|c| c["architectures"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_else(|| vec!["Qwen2ForCausalLM".to_owned()]);
    (model_type, architectures)
}

impl AppState {
    pub fn new(config: ServerConfig) -> Result<AppState, StateError> {
        let model = config.build_model()?;
        Ok(AppState::with_model(config, Arc::new(model)))
    }

    /// An oracle sharing this server's configuration and model.
    pub fn oracle(&self) -> Oracle {
        Oracle::with_model(self.config().clone(), Arc::clone(self.model()))
    }

    /// A state around an already built model (the oracle and tests share one).
    pub(crate) fn with_model(config: ServerConfig, model: Arc<Model>) -> AppState {
        let occupancy = Arc::new(Occupancy::new());
        let logical = config.latency.clock == mock_core::Clock::Logical;
        let sched = mock_core::engine::SchedConfig::of_server(&config, logical);
        // With a batch loop, its scheduler caps the running samples; without one, the control plane caps the
        // running requests.
        let control = Control::new(
            Arc::clone(&occupancy),
            &config.weight_version,
            config.max_running_requests.filter(|_| sched.is_none()),
            config.max_queued_requests,
            config.sglang_version.rids_before_pause_gate,
        );
        let faults = Faults::new(config.faults.clone());
        let ledger = config.ledger.then(|| {
            let router = Router {
                seed: config.seed,
                shape: model.config().moe,
            };
            let max_bytes = usize::try_from(config.ledger_max_mib.saturating_mul(1 << 20));
            Arc::new(Ledger::new(max_bytes.unwrap_or(usize::MAX), router))
        });
        let model_card = model_card(&config.model_path);
        let serves_policy =
            mock_core::model::is_policy_dir(std::path::Path::new(&config.model_path));
        let base_policy = model.policy();
        let prefix_cache = mock_core::engine::server_cache(&config);
        let batcher = sched.map(|sched| {
            let occupancy = Arc::clone(&occupancy);
            Batcher::new(sched, Arc::clone(&control), occupancy, config.latency)
        });
        AppState {
            inner: Arc::new(Inner {
                model_card,
                serves_policy,
                base_policy,
                prefix_cache,
                config: Arc::new(config),
                model,
                occupancy,
                control,
                faults,
                metrics: Arc::new(Metrics::default()),
                ledger,
                shutting_down: tokio::sync::watch::Sender::new(false),
                batcher,
                draws: Draws::default(),
            }),
        }
    }

    /// The draws of unseeded samples so far: each request's items take theirs when they are admitted.
    pub(crate) fn draws(&self) -> &Draws {
        &self.inner.draws
    }

    /// The batch loop, when the KV pool is bounded.
    pub(crate) fn batcher(&self) -> Option<&Arc<Batcher>> {
        self.inner.batcher.as_ref()
    }

    /// `model_type` and `architectures`, from the model directory's `config.json` when it has one.
    pub(crate) fn model_card(&self) -> (&str, &[String]) {
        let (model_type, architectures) = &self.inner.model_card;
        (model_type, architectures)
    }

    /// Marks the server as shutting down (the graceful shutdown of [`crate::run`] calls it).
    pub(crate) fn begin_shutdown(&self) {
        self.inner.shutting_down.send_replace(true);
    }

    /// Resolves once the server has begun to shut down.
    pub(crate) async fn shutting_down(&self) {
        let mut rx = self.inner.shutting_down.subscribe();
        // The sender lives as long as the state, so `wait_for` only ends when the flag is set.
        let _ = rx.wait_for(|&down| down).await;
    }

    /// The control plane: in-flight registry, pause gate, queue, weight version.
    /// The model path answers report: the configured one, or the one a weight update from disk loaded.
    pub(crate) fn model_path(&self) -> Arc<str> {
        self.control()
            .updated_model_path()
            .unwrap_or_else(|| Arc::from(self.config().model_path.as_str()))
    }

    /// The served model name: the configured one, until a weight update from disk makes it the new path.
    pub(crate) fn served_model_name(&self) -> Arc<str> {
        self.control()
            .updated_model_path()
            .unwrap_or_else(|| Arc::from(self.config().served_model_name()))
    }

    /// The radix prefix cache, unless the server keeps none.
    pub(crate) fn prefix_cache(&self) -> Option<&SharedCache> {
        self.inner.prefix_cache.as_ref()
    }

    pub(crate) fn control(&self) -> &Arc<Control> {
        &self.inner.control
    }

    /// The fault schedule and its counters.
    pub(crate) fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// The ledger of what was served, if the server keeps one.
    pub fn ledger(&self) -> Option<&Arc<Ledger>> {
        self.inner.ledger.as_ref()
    }

    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// The server's occupancy board, which runs report to.
    pub(crate) fn occupancy(&self) -> &Arc<Occupancy> {
        &self.inner.occupancy
    }

    /// What the server runs and queues now, and the KV pool's used tokens.
    pub(crate) fn load(&self) -> (Load, usize) {
        let load = self.inner.occupancy.snapshot();
        let used = used_tokens(&load, self.prefix_cache());
        (load, used)
    }

    pub(crate) fn shared_config(&self) -> &Arc<ServerConfig> {
        &self.inner.config
    }

    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// Whether the server serves a toy policy's weights from its `--model-path` directory.
    pub(crate) fn serves_policy(&self) -> bool {
        self.inner.serves_policy
    }

    /// The weights the server started with.
    pub(crate) fn base_policy(&self) -> &Arc<Policy> {
        &self.inner.base_policy
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.inner.model
    }
}
