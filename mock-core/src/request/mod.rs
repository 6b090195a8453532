//! Typed parsing of a `/generate` body (`GenerateReqInput`) and SGLang's normalisation and validation of it,
//! ending in one engine [`ItemRequest`](crate::engine::ItemRequest) per flattened sample.
//!
//! The order of the checks follows SGLang: Pydantic type validation (400 `{"object":"error",...}`), then, in
//! 0.5.23, the JSON contract gate (400 `{"error": <text>}`), then `GenerateReqInput.normalize_batch_and_arguments` (400 `{"error":{"message"}}`), then per item the tokenizer
//! manager's checks and `SamplingParams(**d).verify()`, then the scheduler's `logprob_start_len` check, which
//! aborts only that item.
//!
//! - `body`: the raw, typed body, decoded in one pass;
//! - `contract`: 0.5.23's contract gate, a transcription of the decoder SGLang generates from its proto files;
//! - `lax`: the lax Python-style field types it is made of;
//! - `plan`: normalisation and the per-item checks, ending in a [`GeneratePlan`](crate::engine::GeneratePlan);
//! - `sampling`: `SamplingParams` resolution and verification;
//! - `script`: scripted answers forced onto the items whose prompt matches a rule.

mod body;
mod contract;
mod json_error;
mod lax;
mod plan;
mod pydantic;

pub use crate::pyfmt::bytes_repr;
pub use pydantic::{control_errors, openai_errors, py_repr, query_int};
mod sampling;
mod script;

pub use body::{CustomLogitProcessor, GenerateReqInput, parse_generate, parse_generate_as};
pub use body::{json_decode_error, validation_error};
pub use contract::generate_contract_error;

use crate::config::SglangVersion;
use crate::error::RequestError;

/// A `/generate` body as the release's HTTP layer admits it: FastAPI's parse, then (in the releases that have
/// one) the JSON contract gate. The server and the oracle both start here.
pub fn admit_generate(
    body: &[u8],
    version: SglangVersion,
) -> Result<GenerateReqInput, RequestError> {
    let parsed = parse_generate_as(body, version)?;
    if parsed.return_hidden_states_last && !version.hidden_states_last {
        return Err(validation_error(
            "bool_type",
            "'return_hidden_states'",
            "invalid value: string \"last\", expected a valid boolean",
        ));
    }
    if version.json_contract
        && let Some(violation) = generate_contract_error(body)
    {
        return Err(RequestError::Contract(violation));
    }
    Ok(parsed)
}
pub use lax::{
    Ids, OneOrMany, RawSamplingParams, SamplingInput, SamplingKey, pydantic_bool, pydantic_int,
};
pub use plan::{MAX_LOGPROB_ENTRIES, MAX_SAMPLES, default_logprob_start, plan_generate};
pub use sampling::{DEFAULT_MAX_NEW_TOKENS, ResolvedSampling, resolve_sampling_params};
