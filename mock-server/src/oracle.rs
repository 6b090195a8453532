//! The oracle: given the server configuration and one `/generate` body, exactly what the server must answer,
//! computed with the same request parsing, validation, engine and encoder as the server, without HTTP.

use std::sync::Arc;
use std::time::Instant;

use crate::config::ServerConfig;
use crate::engine::FinishReason;
use crate::error::ApiError;
use crate::generate;
use crate::model::Model;
use crate::request::{self, GeneratePlan, RidSource};
use crate::routes::{AppState, StateError};

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
}

/// Computes expected answers for one server configuration.
#[derive(Debug, Clone)]
pub struct Oracle {
    state: AppState,
}

struct PlaceholderRids;

impl RidSource for PlaceholderRids {
    fn fresh_rid(&mut self) -> String {
        FRESH_RID.to_owned()
    }
}

impl Oracle {
    pub fn new(config: ServerConfig) -> Result<Oracle, StateError> {
        Ok(Oracle {
            state: AppState::new(config)?,
        })
    }

    /// An oracle sharing a server's configuration and model.
    pub fn for_state(state: &AppState) -> Oracle {
        Oracle {
            state: state.clone(),
        }
    }

    pub fn config(&self) -> &ServerConfig {
        self.state.config()
    }

    pub fn model(&self) -> &Arc<Model> {
        self.state.model()
    }

    /// The validated plan of a body (what the server would run), or the error it answers with.
    pub fn plan(&self, body: &[u8]) -> Result<GeneratePlan, ApiError> {
        let parsed = request::parse_generate(body)?;
        request::plan_generate(
            &parsed,
            self.config(),
            self.model().tokenizer(),
            &mut PlaceholderRids,
        )
    }

    /// Exactly what the server answers to `body` as a non-stream request (the `stream` flag is ignored), or
    /// the error it answers with.
    pub fn expect(&self, body: &[u8]) -> Result<Expected, ApiError> {
        let plan = self.plan(body)?;
        // One run serves both the body and the per-item view; a rejected item fails the request before it.
        let completed = generate::run_all(self.model(), &plan, Instant::now())?;
        let items = plan
            .items
            .iter()
            .zip(&completed.generations)
            .filter_map(|(item, generation)| {
                let generation = generation.as_ref()?;
                Some(ExpectedItem {
                    rid: (!item.rid_is_fresh).then(|| item.rid.clone()),
                    text: generation.text().to_owned(),
                    output_ids: generation.output_ids().to_vec(),
                    finish_reason: generation.finish_reason().cloned(),
                    output_logprobs: generation.output_logprobs().to_vec(),
                    prompt_tokens: generation.prompt_tokens(),
                })
            })
            .collect();
        let bytes = generate::encode_body(
            self.config(),
            self.model(),
            &plan,
            &completed,
            &self.config().weight_version,
        )?;
        let mut body: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|err| ApiError::internal(format!("oracle produced invalid JSON: {err}")))?;
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
    /// `ValueError` is the single `{"error":{"message"}}` event the server streams for it.
    pub async fn expect_stream(&self, body: &[u8]) -> Result<Vec<serde_json::Value>, ApiError> {
        use futures_util::StreamExt;

        let parsed = request::parse_generate(body)?;
        let plan = match request::plan_generate(
            &parsed,
            self.config(),
            self.model().tokenizer(),
            &mut PlaceholderRids,
        ) {
            Ok(plan) => plan,
            Err(err @ (ApiError::Value(_) | ApiError::Validation(_))) => {
                let event: serde_json::Value = serde_json::from_slice(&err.stream_event_json())
                    .map_err(|e| {
                        ApiError::internal(format!("oracle produced invalid JSON: {e}"))
                    })?;
                return Ok(vec![event]);
            }
            Err(err) => return Err(err),
        };
        let run = generate::RunCtx::plain(
            Arc::new(self.config().clone()),
            Arc::clone(self.model()),
            Instant::now(),
        );
        let events = generate::sse_stream(run, plan.clone(), None, ())
            .collect::<Vec<_>>()
            .await;
        let mut out = Vec::with_capacity(events.len());
        for event in events {
            let Ok(bytes) = event;
            let Some(json) = bytes
                .strip_prefix(b"data: ")
                .and_then(|rest| rest.strip_suffix(b"\n\n"))
            else {
                continue;
            };
            if json == b"[DONE]" {
                break;
            }
            let mut value: serde_json::Value = serde_json::from_slice(json)
                .map_err(|e| ApiError::internal(format!("oracle produced invalid JSON: {e}")))?;
            let index = value
                .get("index")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0) as usize;
            let fresh = plan.items.get(index).is_some_and(|i| i.rid_is_fresh);
            normalize_item(&mut value, fresh);
            out.push(value);
        }
        Ok(out)
    }
}

/// Make a body comparable with the oracle's: zero the wall-clock fields and replace generated ids with
/// [`FRESH_RID`] (using the plan to know which ids were generated).
pub fn normalize_body(body: &mut serde_json::Value, plan: &GeneratePlan) {
    match body {
        serde_json::Value::Array(items) => {
            for (value, item) in items.iter_mut().zip(&plan.items) {
                normalize_item(value, item.rid_is_fresh);
            }
        }
        value => {
            let fresh = plan.items.first().is_some_and(|i| i.rid_is_fresh);
            normalize_item(value, fresh);
        }
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
    Rejected(#[from] ApiError),
}
