//! Bytes to wire types: a non-stream body or one SSE payload, through the fast scanner or else serde_json, with typed JSON errors.
//!
//! [`decode_response`] and [`decode_body`] try `fast.rs` first and fall back to serde_json (the derived impls of
//! `wire.rs` plus the visitor of `visitor.rs`) for anything that is not the plain valid case, so a malformed
//! body always gets serde_json's precise error, mapped to a [`ResponseError`] here. Nothing here checks that a
//! response makes sense; that is `validate.rs` and `turn.rs`.

use crate::error::ResponseError;
use crate::fast;
use crate::wire::{ErrorBody, GenerateResponse, ResponseBody};

/// Decodes a non-stream `/generate` body, choosing object or array by its first byte so serde
/// never has to buffer the body to try both.
pub fn decode_body(body: &[u8]) -> Result<ResponseBody, ResponseError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
    if first == Some(b'[') {
        if let Some(v) = fast::responses(body) {
            return Ok(ResponseBody::Many(v));
        }
        serde_json::from_slice(body)
            .map(ResponseBody::Many)
            .map_err(|e| json_error(body, e))
    } else {
        decode_response(body).map(|r| ResponseBody::One(Box::new(r)))
    }
}

/// Decodes a single response object (a non-stream body or one SSE `data:` payload).
///
/// The hand-written fast path (`fast.rs`) handles plain valid bodies; anything else, including
/// every malformed body, goes through serde_json, which gives the same result or the typed error.
pub fn decode_response(body: &[u8]) -> Result<GenerateResponse, ResponseError> {
    match fast::response(body) {
        Some(r) => Ok(r),
        None => decode_response_serde(body),
    }
}

/// The hand-written fast path alone: `None` means the body is not the plain valid case and
/// [`decode_response`] would use serde_json. Exposed so tests can hold the two paths together.
pub fn decode_response_fast(body: &[u8]) -> Option<GenerateResponse> {
    fast::response(body)
}

/// The hand-written fast path alone for an array body (a batch or `n > 1`); `None` means
/// [`decode_body`] would use serde_json.
pub fn decode_array_fast(body: &[u8]) -> Option<Vec<GenerateResponse>> {
    fast::responses(body)
}

/// The serde_json path alone (the derived impls plus the logprob visitor); the reference the fast
/// path is tested against.
pub fn decode_response_serde(body: &[u8]) -> Result<GenerateResponse, ResponseError> {
    serde_json::from_slice(body).map_err(|e| json_error(body, e))
}

/// Decodes an error body of any SGLang shape; `None` when it is not JSON (e.g. plain-text 500).
pub fn decode_error_body(body: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice(body).ok()
}

/// Maps a serde_json error to the typed error a user should see.
///
/// serde_json (correctly) refuses the bare `NaN`/`Infinity` some Python encoders write for a
/// non-finite logprob, but its message is just "expected value at line 1 column 812". When the
/// bytes at that position are such a literal, say so, because that is the actual problem.
fn json_error(body: &[u8], err: serde_json::Error) -> ResponseError {
    if err.is_syntax()
        && let Some(literal) = non_finite_literal_at(body, err.line(), err.column())
    {
        return ResponseError::NonFiniteLiteral {
            literal,
            line: err.line(),
            column: err.column(),
            source: err,
        };
    }
    ResponseError::Json(err)
}

fn non_finite_literal_at(body: &[u8], line: usize, column: usize) -> Option<&'static str> {
    let mut start = 0;
    for _ in 1..line {
        start += body[start..].iter().position(|&b| b == b'\n')? + 1;
    }
    // serde_json reports the peeked byte, 1-based, sometimes one past it; look a little around.
    let at = start + column.saturating_sub(1);
    for off in [at, at.saturating_sub(1), at.saturating_sub(2)] {
        let rest = body.get(off..)?;
        if rest.starts_with(b"NaN") {
            return Some("NaN");
        }
        if rest.starts_with(b"-Infinity") {
            return Some("-Infinity");
        }
        if rest.starts_with(b"Infinity") {
            return Some(if off > 0 && body[off - 1] == b'-' {
                "-Infinity"
            } else {
                "Infinity"
            });
        }
    }
    None
}
