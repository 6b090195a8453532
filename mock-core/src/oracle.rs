//! The oracle: given the server configuration and one `/generate` body, exactly what the server must answer,
//! computed with the same request parsing, validation, step core and encoder as the server, without HTTP.
//!
//! The server's drivers and the oracle advance the same [`Run`]; what the oracle cannot know by itself is
//! what the outside world did while a request ran (an `/abort_request`, a `retract` pause, the
//! `abort-running` fault). [`Interventions`] say it, in ticks, and [`Oracle::expect_with`] and
//! [`Oracle::expect_stream_with`] then predict the aborted or retracted answer too.

use std::sync::Arc;

use crate::config::{ServerConfig, StateError};
use crate::engine::{
    self, Draws, FinishReason, GeneratePlan, Interventions, RidSource, Run, SharedCache,
};
use crate::error::RequestError;
use crate::model::Model;
use crate::request;
use crate::wire::{self, EncodeCtx, StreamEncoder};

/// The placeholder id the oracle gives to items whose `meta_info.id` the server generates at random.
pub const FRESH_RID: &str = "<fresh uuid4 hex>";

/// The answer the server must give to one request.
#[derive(Debug)]
pub struct Expected {
    /// The non-stream body is a JSON array (batch input or `n > 1`).
    pub is_batch: bool,
    pub items: Vec<ExpectedItem>,
    /// The whole non-stream body as JSON, with `e2e_latency` and `response_sent_to_client_ts` set to 0.0
    /// and generated ids set to [`FRESH_RID`]; compare with [`normalize_body`] applied to the server's body.
    pub body: serde_json::Value,
}

/// One flattened sample of the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedItem {
    /// The caller-determined `meta_info.id`, or `None` when the server generates one.
    pub rid: Option<String>,
    pub text: String,
    pub output_ids: Vec<u32>,
    pub finish_reason: Option<FinishReason>,
    /// Aligned with `output_ids` when `return_logprob`, else empty.
    pub output_logprobs: Vec<f32>,
    pub prompt_tokens: usize,
    /// The sample's draw (MODEL.md section 8.3): what [`Oracle::expect_drawn`] takes to answer it again.
    pub draw: u64,
}

/// Computes expected answers for one server configuration.
///
/// Like the server, an oracle keeps a prefix cache (unless the configuration disables it) and counts the draws
/// of unseeded samples (MODEL.md section 8.3): each answer it predicts leaves its tokens in the cache and takes
/// its draws, so the `cached_tokens` and the sampled tokens it predicts are the server's for the same requests in
/// the same order. A clone shares its history; [`Oracle::flush_cache`] is `/flush_cache`, [`Oracle::reset`]
/// `/admin/reset`. [`Oracle::expect_drawn`] predicts an answer at given draws, without history. Every answer is
/// predicted under the weights the model serves when it is asked (MODEL.md section 14): an oracle that shares a
/// server's model predicts a request served before a weight update only until that update.
#[derive(Debug, Clone)]
pub struct Oracle {
    config: Arc<ServerConfig>,
    model: Arc<Model>,
    cache: Option<SharedCache>,
    draws: Arc<Draws>,
}

struct PlaceholderRids;

impl RidSource for PlaceholderRids {
    fn fresh_rid(&mut self) -> String {
        FRESH_RID.to_owned()
    }
}

impl Oracle {
    pub fn new(config: ServerConfig) -> Result<Oracle, StateError> {
        let model = config.build_model()?;
        Ok(Oracle::with_model(config, Arc::new(model)))
    }

    /// An oracle around an already built model (a server's, so that both share it).
    pub fn with_model(config: ServerConfig, model: Arc<Model>) -> Oracle {
        let cache = engine::server_cache(&config);
        Oracle {
            config: Arc::new(config),
            model,
            cache,
            draws: Arc::default(),
        }
    }

    /// Empties the prefix cache, as `/flush_cache` does on an idle server.
    pub fn flush_cache(&self) {
        if let Some(cache) = &self.cache {
            engine::flush_shared(cache);
        }
    }

    /// Forgets the history, as `/admin/reset` does: the prefix cache is empty and every prompt's next unseeded
    /// sample is its draw 0.
    pub fn reset(&self) {
        self.flush_cache();
        self.draws.clear();
    }

    /// A run of `plan`, with the prefix cache when the oracle keeps one.
    fn start(&self, plan: &GeneratePlan, abort_after: Option<usize>) -> Run {
        let rules = self.config.sglang_version.cache_inserts;
        Run::new(&self.model, plan, abort_after).with_cache(self.cache.as_ref(), rules, plan)
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The validated plan of a body (what the server would run), or the error it answers with.
    pub fn plan(&self, body: &[u8]) -> Result<GeneratePlan, RequestError> {
        let parsed = request::admit_generate(body, self.config.sglang_version)?;
        request::plan_generate(
            &parsed,
            self.config(),
            self.model.tokenizer(),
            &mut PlaceholderRids,
        )
    }

    fn run(&self, plan: &GeneratePlan, interventions: &Interventions) -> Run {
        let mut run = self.start(plan, interventions.abort_after);
        run.run_to_end(interventions);
        run
    }

    fn encode_ctx<'a>(&'a self, plan: &GeneratePlan) -> EncodeCtx<'a> {
        EncodeCtx::new(
            self.config.sglang_version,
            &self.model,
            plan,
            &self.config.weight_version,
        )
    }

    /// Exactly what the server answers to `body` as a non-stream request (the `stream` flag is ignored), or
    /// the error it answers with.
    pub fn expect(&self, body: &[u8]) -> Result<Expected, RequestError> {
        self.expect_with(body, &Interventions::default())
    }

    /// What the server answers to `body` when the outside world acted on the request as `interventions`
    /// say: aborted items keep their partial output, retracted ones count it in `num_retractions`.
    pub fn expect_with(
        &self,
        body: &[u8],
        interventions: &Interventions,
    ) -> Result<Expected, RequestError> {
        let mut plan = self.plan(body)?;
        self.draws.assign(&mut plan);
        self.expect_planned(plan, interventions)
    }

    /// What the server answered to `body` as a non-stream request when its unseeded items took `draws` (item
    /// `i` the `i`-th, as the ledger's entries record them; missing ones draw 0), without the oracle's own count
    /// of draws: the answer to a request that was, say, the third of identical ones.
    pub fn expect_drawn(&self, body: &[u8], draws: &[u64]) -> Result<Expected, RequestError> {
        let mut plan = self.plan(body)?;
        for (item, &draw) in plan.items.iter_mut().zip(draws) {
            if item.request.params.sampling_seed.is_none() {
                item.request.draw = draw;
            }
        }
        self.expect_planned(plan, &Interventions::default())
    }

    fn expect_planned(
        &self,
        plan: GeneratePlan,
        interventions: &Interventions,
    ) -> Result<Expected, RequestError> {
        if let Some(message) = plan.rejection() {
            return Err(RequestError::value(message));
        }
        let run = self.run(&plan, interventions);
        if let Some(err) = run.first_failure() {
            return Err(err.clone());
        }
        let items = (0..plan.items.len())
            .filter_map(|i| {
                let generation = run.generation(i)?;
                let item = &plan.items[i];
                Some(ExpectedItem {
                    rid: (!item.rid_is_fresh).then(|| item.rid.clone()),
                    text: generation.text().to_owned(),
                    output_ids: generation.output_ids().to_vec(),
                    finish_reason: generation.finish_reason().cloned(),
                    output_logprobs: generation.output_logprobs().to_vec(),
                    prompt_tokens: generation.prompt_tokens(),
                    draw: item.request.draw,
                })
            })
            .collect();
        let zeros = vec![0.0; plan.items.len()];
        let bytes = wire::encode_body(&self.encode_ctx(&plan), &plan, &run, &zeros, 0.0)?;
        let mut body: serde_json::Value = serde_json::from_slice(&bytes).map_err(invalid_json)?;
        normalize_body(&mut body, &plan);
        Ok(Expected {
            is_batch: plan.is_batch,
            items,
            body,
        })
    }

    /// Exactly the events the server streams for `body` with `"stream": true` (the flag is implied), as JSON
    /// values without the final `[DONE]`, with wall-clock fields zeroed and generated ids replaced by
    /// [`FRESH_RID`]. A request the server rejects before streaming (type errors, HTTP 500s) is an `Err`; a
    /// `ValueError` is the single error event the server streams for it, in the release's shape.
    pub fn expect_stream(&self, body: &[u8]) -> Result<Vec<serde_json::Value>, RequestError> {
        self.expect_stream_with(body, &Interventions::default())
    }

    /// [`Oracle::expect_stream`] when the outside world acted on the request as `interventions` say.
    pub fn expect_stream_with(
        &self,
        body: &[u8],
        interventions: &Interventions,
    ) -> Result<Vec<serde_json::Value>, RequestError> {
        let mut plan = match self.plan(body) {
            Ok(plan) => plan,
            Err(err @ (RequestError::Value(_) | RequestError::Validation(_))) => {
                let event = wire::error_event(&err.client_message(), self.config.sglang_version);
                return Ok(vec![serde_json::from_slice(&event).map_err(invalid_json)?]);
            }
            Err(err) => return Err(err),
        };
        self.draws.assign(&mut plan);
        // The flag is implied, and with it the stream's detokenizer schedule (a loaded tokenizer's text).
        for item in &mut plan.items {
            item.request.stream_interval = Some(item.stream_interval);
        }
        let mut run = self.start(&plan, interventions.abort_after);
        let mut encoder = StreamEncoder::new(wire::stream_mode(&self.config), plan.items.len());
        let ctx = self.encode_ctx(&plan);
        let mut events = Vec::new();
        let zero = |_| wire::Finished {
            e2e_latency: 0.0,
            response_sent_to_client_ts: 0.0,
        };
        while !run.is_done() {
            run.replay_tick(interventions);
            encoder.after_tick(&ctx, &plan, &run, run.progress(), zero, &mut events);
        }
        let mut out = Vec::with_capacity(events.len());
        for event in events {
            let json = event
                .strip_prefix(b"data: ")
                .and_then(|rest| rest.strip_suffix(b"\n\n"))
                .unwrap_or(&event);
            out.push(serde_json::from_slice(json).map_err(invalid_json)?);
        }
        normalize_stream(&mut out, &plan);
        Ok(out)
    }
}

fn invalid_json(err: serde_json::Error) -> RequestError {
    RequestError::internal(format!("oracle produced invalid JSON: {err}"))
}

/// Make a body comparable with the oracle's: zero the wall-clock fields and replace generated ids with
/// [`FRESH_RID`] (using the plan to know which ids were generated).
pub fn normalize_body(body: &mut serde_json::Value, plan: &GeneratePlan) {
    // A batch or `n > 1` answer is a list of items; anything else is one item.
    if let serde_json::Value::Array(items) = body {
        for (value, item) in items.iter_mut().zip(&plan.items) {
            normalize_item(value, item.rid_is_fresh);
        }
    } else {
        let fresh = plan.items.first().is_some_and(|i| i.rid_is_fresh);
        normalize_item(body, fresh);
    }
}

/// Make a stream's events comparable with the oracle's: each chunk as [`normalize_item`], its generated id
/// found through its `index` in the plan.
pub fn normalize_stream(events: &mut [serde_json::Value], plan: &GeneratePlan) {
    for event in events {
        let index = event
            .get("index")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0) as usize;
        let fresh = plan.items.get(index).is_some_and(|i| i.rid_is_fresh);
        normalize_item(event, fresh);
    }
}

/// Make one object or stream chunk comparable: zero the wall-clock fields and, when the server generated the
/// id, replace it with [`FRESH_RID`].
pub fn normalize_item(value: &mut serde_json::Value, fresh_rid: bool) {
    if let Some(meta) = value.get_mut("meta_info").and_then(|m| m.as_object_mut()) {
        for key in ["e2e_latency", "response_sent_to_client_ts"] {
            if let Some(v) = meta.get_mut(key) {
                *v = serde_json::json!(0.0);
            }
        }
        if fresh_rid {
            meta.insert("id".to_owned(), serde_json::json!(FRESH_RID));
        }
    }
}

/// What the oracle answers for `body` under `config`, building the model once for this call; see
/// [`Oracle::expect`].
pub fn expect(config: &ServerConfig, body: &[u8]) -> Result<Expected, OracleError> {
    let oracle = Oracle::new(config.clone())?;
    Ok(oracle.expect(body)?)
}

/// Why [`expect`] produced no answer.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    #[error("the configuration does not build a model")]
    Config(#[from] StateError),
    #[error("the server answers with an error: {0}")]
    Rejected(#[from] RequestError),
}
