//! The server's side of the witness: recording each item a route served into the ledger, and the endpoints
//! that read it (`GET /admin/ledger`) and audit samples against it (`POST /admin/audit`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::extract::read_limited;
use super::respond::json_response;
use super::state::AppState;
use crate::error::ApiError;
use crate::faults::Fault;
use mock_core::engine::{GeneratePlan, Run};
use mock_core::release::SglangVersion;
use mock_core::wire::VersionEvent;
use mock_core::witness::{Layout, Ledger, Report, Route, Served, audit, parse_samples};

/// What a request's items are recorded with: the ledger, and how the request was served. `None` without a
/// ledger, so that a server without one does nothing per item.
#[derive(Debug, Clone)]
pub(crate) struct Witness {
    ledger: Arc<Ledger>,
    route: Route,
    stream: bool,
    version: SglangVersion,
    fault: Option<Fault>,
    original_logprobs: bool,
}

impl Witness {
    /// The witness of a request on `route`, if the server keeps a ledger.
    pub(crate) fn of(
        state: &AppState,
        route: Route,
        stream: bool,
        fault: Option<&Fault>,
    ) -> Option<Witness> {
        state.ledger().map(|ledger| Witness {
            ledger: Arc::clone(ledger),
            route,
            stream,
            version: state.config().sglang_version,
            fault: fault.cloned(),
            original_logprobs: state.model().config().return_original_logprob,
        })
    }

    fn served(&self) -> Served<'_> {
        Served {
            route: self.route,
            stream: self.stream,
            version: self.version,
            fault: self.fault.as_ref(),
            original_logprobs: self.original_logprobs,
        }
    }

    /// Records item `i` of a run as it stands: finished, or cut off if its stream ended first. A refused item
    /// is recorded as an item that never ran. `now` is the weights' version and number now, and `events` each
    /// item's weight changes while it ran.
    pub(crate) fn record_item(
        &self,
        plan: &GeneratePlan,
        run: &Run,
        i: usize,
        now: (&str, u64),
        events: &[Vec<VersionEvent>],
    ) {
        let item = &plan.items[i];
        let entry = match run.generation(i) {
            Some(generation) => self.served().entry(
                i,
                item,
                generation,
                now,
                events.get(i).map_or(&[], Vec::as_slice),
                run.retractions(i),
            ),
            None => self.served().never_ran(i, item, now.0),
        };
        self.ledger.record(entry);
    }

    /// Records every item of a finished run.
    pub(crate) fn record_run(
        &self,
        plan: &GeneratePlan,
        run: &Run,
        now: (&str, u64),
        events: &[Vec<VersionEvent>],
    ) {
        for i in 0..plan.items.len() {
            self.record_item(plan, run, i, now, events);
        }
    }

    /// Records every item of a request that never ran (aborted while waiting, or before prefill).
    pub(crate) fn record_never_ran(&self, plan: &GeneratePlan, weight_version: &str) {
        for (i, item) in plan.items.iter().enumerate() {
            self.ledger
                .record(self.served().never_ran(i, item, weight_version));
        }
    }
}

/// A report as JSON, with its text for clients that print it.
#[derive(Serialize)]
struct WithText<'a> {
    #[serde(flatten)]
    report: &'a Report,
    text: String,
}

/// The largest audit batch: 1,000 samples of 32,768 tokens each, sent as typed arrays, fit well within it.
const AUDIT_MAX_BODY_BYTES: usize = 1 << 31;

/// An answer for a server without a ledger.
fn no_ledger() -> Response {
    ApiError::Http {
        status: 400,
        message: "the ledger is off: start the server with --ledger (or SGLANG_MOCK_LEDGER=true) to record \
                  what it serves"
            .to_owned(),
    }
    .into_response()
}

/// `GET /admin/ledger`: every entry the ledger holds, oldest first, with its bounds and the router the routes
/// come from (`WITNESS.md` section 2.2).
pub(crate) async fn ledger(State(state): State<AppState>) -> Response {
    let Some(ledger) = state.ledger().cloned() else {
        return no_ledger();
    };
    // A large ledger takes a while to write: off the async workers.
    let written = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        ledger.read().write_json(&mut out).map(|()| out)
    })
    .await;
    match written {
        Ok(Ok(out)) => json_response(StatusCode::OK, out),
        Ok(Err(err)) => {
            ApiError::Internal(format!("cannot write the ledger: {err}")).into_response()
        }
        Err(err) => ApiError::Internal(format!("cannot write the ledger: {err}")).into_response(),
    }
}

/// `/admin/audit`'s query: the layout of every sample, the options, and `format=text` for the report as text.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct AuditQuery {
    layout: Option<Layout>,
    allow_masked_generated: Option<bool>,
    format: Option<String>,
}

/// `POST /admin/audit`: the samples of the body (a JSON list, `{"samples": [...], "layout", "options"}`, or
/// JSON lines) audited against the ledger; the report as JSON, or as text with `?format=text`. A sample that
/// cannot be read is a 400 naming it.
pub(crate) async fn audit_samples(State(state): State<AppState>, uri: Uri, body: Body) -> Response {
    // Read before anything answers, so that the connection stays usable (`extract::read_whole_body`).
    let limit = state.config().max_body_bytes.max(AUDIT_MAX_BODY_BYTES);
    let body = match read_limited(body, limit).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    let Some(ledger) = state.ledger().cloned() else {
        return no_ledger();
    };
    let query = match Query::<AuditQuery>::try_from_uri(&uri) {
        Ok(Query(query)) => query,
        Err(err) => {
            return ApiError::Http {
                status: 400,
                message: format!("the query of /admin/audit: {}", err.body_text()),
            }
            .into_response();
        }
    };
    let text = match query.format.as_deref() {
        None | Some("json") => false,
        Some("text") => true,
        Some(other) => {
            return ApiError::Http {
                status: 400,
                message: format!("format={other:?}: the report is json (the default) or text"),
            }
            .into_response();
        }
    };
    // Reading and auditing a large batch takes a while: off the async workers.
    let model = Arc::clone(state.model());
    let report = tokio::task::spawn_blocking(move || {
        let batch = parse_samples(&body, query.layout)?;
        let mut options = batch.options.unwrap_or_default();
        if let Some(allow) = query.allow_masked_generated {
            options.allow_masked_generated = allow;
        }
        Ok::<_, mock_core::witness::SampleError>(audit(
            &ledger.read(),
            &batch.samples,
            &options,
            Some(&model),
        ))
    })
    .await;
    match report {
        Ok(Ok(report)) if text => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            report.text(),
        )
            .into_response(),
        Ok(Ok(report)) => match serde_json::to_vec(&WithText {
            text: report.text(),
            report: &report,
        }) {
            Ok(out) => json_response(StatusCode::OK, out),
            Err(err) => {
                ApiError::Internal(format!("cannot write the report: {err}")).into_response()
            }
        },
        Ok(Err(err)) => ApiError::Http {
            status: 400,
            message: err.to_string(),
        }
        .into_response(),
        Err(err) => ApiError::Internal(format!("the audit failed: {err}")).into_response(),
    }
}
