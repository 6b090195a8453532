//! The reduced objects of requests that never ran: aborted in the waiting queue, or (MID) before prefill.

use super::item::EncodeCtx;
use crate::engine::PlannedItem;

/// The finish reason of a request that ended in the waiting queue (`TokenizerManager._handle_abort_req`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitingAbort<'a> {
    /// `/abort_request` or a pause reached it before it ran: `{"type":"abort","message":"Abort in waiting queue"}`.
    Aborted,
    /// The scheduler refused it, e.g. a full queue: `{"type":"abort","status_code":503,"message":...}`.
    Refused { status_code: u16, message: &'a str },
}

/// The reduced object SGLang sends for a request aborted in the waiting queue: `meta_info` holds only `id`,
/// `finish_reason`, `weight_version`, `e2e_latency`, the (empty) logprob lists when requested and
/// `completion_tokens`; there is no `prompt_tokens` and no `cached_tokens`.
pub fn encode_waiting_abort(
    out: &mut Vec<u8>,
    ctx: &EncodeCtx<'_>,
    item: &PlannedItem,
    reason: WaitingAbort<'_>,
    e2e_latency: f64,
    index: Option<usize>,
) {
    let string = |out: &mut Vec<u8>, s: &str| {
        let _ = serde_json::to_writer(&mut *out, s);
    };
    out.extend_from_slice(br#"{"text":"","output_ids":[],"meta_info":{"id":"#);
    string(out, &item.rid);
    out.extend_from_slice(br#","finish_reason":{"type":"abort","#);
    match reason {
        WaitingAbort::Aborted => out.extend_from_slice(br#""message":"Abort in waiting queue""#),
        WaitingAbort::Refused {
            status_code,
            message,
        } => {
            out.extend_from_slice(format!(r#""status_code":{status_code},"message":"#).as_bytes());
            string(out, message);
        }
    }
    out.extend_from_slice(br#"},"weight_version":"#);
    string(out, ctx.weight_version);
    out.extend_from_slice(br#","e2e_latency":"#);
    let _ = serde_json::to_writer(&mut *out, &e2e_latency);
    if item.request.return_logprob {
        out.extend_from_slice(br#","input_token_logprobs":[],"output_token_logprobs":[]"#);
        if item.top_logprobs_num > 0 {
            out.extend_from_slice(br#","input_top_logprobs":[],"output_top_logprobs":[]"#);
        }
        if item.token_ids_logprob_requested {
            out.extend_from_slice(
                br#","input_token_ids_logprobs":[],"output_token_ids_logprobs":[]"#,
            );
        }
    }
    out.extend_from_slice(br#","completion_tokens":0}"#);
    if let Some(index) = index {
        out.extend_from_slice(format!(r#","index":{index}"#).as_bytes());
    }
    out.push(b'}');
}

/// \[MID\] "Abort before prefill": `{"text":"","meta_info":{"id","finish_reason","prompt_tokens":0,
/// "completion_tokens":0}}`, with no `output_ids` and no logprob keys at all.
pub fn encode_before_prefill(out: &mut Vec<u8>, item: &PlannedItem, index: Option<usize>) {
    out.extend_from_slice(br#"{"text":"","meta_info":{"id":"#);
    let _ = serde_json::to_writer(&mut *out, &item.rid);
    out.extend_from_slice(
        br#","finish_reason":{"type":"abort","message":"Abort before prefill"},"prompt_tokens":0,"completion_tokens":0}"#,
    );
    if let Some(index) = index {
        out.extend_from_slice(format!(r#","index":{index}"#).as_bytes());
    }
    out.push(b'}');
}
