//! The objects of requests that never ran: aborted in the waiting queue, or (0.5.3) before prefill. Their
//! shapes are [`Shape::AbortedWaiting`] and [`Shape::AbortedBeforePrefill`] of the one object writer.

use super::item::EncodeCtx;
use super::json::{FinishJson, WaitingAbort};
use super::meta::{LogprobFields, Meta, Object, Shape};
use super::versions::weight_version_spans;
use crate::engine::PlannedItem;

/// The reduced object SGLang sends for a request aborted in the waiting queue: `meta_info` holds only `id`,
/// `finish_reason`, `weight_version`, `e2e_latency`, the (empty) logprob lists when requested and
/// `completion_tokens`; there is no `prompt_tokens` and no `cached_tokens`.
pub(super) fn encode_waiting_abort(
    out: &mut Vec<u8>,
    ctx: &EncodeCtx<'_>,
    item: &PlannedItem,
    reason: WaitingAbort<'_>,
    e2e_latency: f64,
    sent_ts: f64,
    index: Option<usize>,
) {
    let logprobs = LogprobFields::empty(item);
    // `_make_abort_req`: the spans of an item without output, one empty span of the version now (0.5.23).
    let spans = ctx
        .version
        .weight_version_spans
        .then(|| weight_version_spans(&[], ctx.weight_version, 0));
    Object {
        shape: Shape::AbortedWaiting,
        text: "",
        decode_window: &[],
        output_ids: &[],
        meta: Meta {
            id: &item.rid,
            finish_reason: Some(FinishJson::Waiting(reason)),
            prompt_tokens: 0,
            weight_version: ctx.weight_version,
            num_retractions: 0,
            logprobs,
            completion_tokens: 0,
            cached_tokens: 0,
            weight_versions: spans.as_deref(),
            top_p_token_ids: None,
            sampling_mask: None,
            routed_experts: None,
            e2e_latency: Some(e2e_latency),
            response_sent_to_client_ts: Some(sent_ts),
        },
        prompt_token_ids: ctx
            .return_prompt_token_ids
            .then_some(&item.request.input_ids[..]),
        index,
    }
    .write(out, ctx.version);
}

/// 0.5.3's "Abort before prefill": `{"text":"","meta_info":{"id","finish_reason","prompt_tokens":0,
/// "completion_tokens":0}}`, with no `output_ids` and no logprob keys at all.
pub(super) fn encode_before_prefill(
    out: &mut Vec<u8>,
    ctx: &EncodeCtx<'_>,
    item: &PlannedItem,
    index: Option<usize>,
) {
    Object {
        shape: Shape::AbortedBeforePrefill,
        text: "",
        decode_window: &[],
        output_ids: &[],
        meta: Meta {
            id: &item.rid,
            finish_reason: Some(FinishJson::BeforePrefill),
            prompt_tokens: 0,
            weight_version: ctx.weight_version,
            num_retractions: 0,
            logprobs: None,
            completion_tokens: 0,
            cached_tokens: 0,
            weight_versions: None,
            top_p_token_ids: None,
            sampling_mask: None,
            routed_experts: None,
            e2e_latency: None,
            response_sent_to_client_ts: None,
        },
        // A release with this shape (0.5.3) has no `return_prompt_token_ids`.
        prompt_token_ids: None,
        index,
    }
    .write(out, ctx.version);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ServerConfig, SglangVersion};
    use crate::engine::{GeneratePlan, RidSource};
    use crate::model::Model;

    struct NoFreshRids;

    impl RidSource for NoFreshRids {
        fn fresh_rid(&mut self) -> String {
            "fresh".to_owned()
        }
    }

    fn planned(body: &str) -> (Model, GeneratePlan) {
        let config = ServerConfig::default();
        let model = config.build_model().unwrap();
        let parsed = crate::request::parse_generate(body.as_bytes()).unwrap();
        let plan =
            crate::request::plan_generate(&parsed, &config, model.tokenizer(), &mut NoFreshRids)
                .unwrap();
        (model, plan)
    }

    /// The bytes SGLang's `_handle_abort_req` and 0.5.3's "Abort before prefill" produce, written out by hand:
    /// the shapes' key lists must give exactly these objects.
    #[test]
    fn never_run_objects_are_exactly_sglangs() {
        let (model, plan) = planned(
            r#"{"text":"a","rid":"r1","return_logprob":true,"top_logprobs_num":2,"token_ids_logprob":[5]}"#,
        );
        let ctx = EncodeCtx::new(SglangVersion::V0_5_23, &model, &plan, "v3");
        let item = &plan.items[0];
        let mut out = Vec::new();
        let refused = WaitingAbort::Refused {
            status_code: 503,
            message: "full",
        };
        encode_waiting_abort(&mut out, &ctx, item, refused, 0.25, 7.5, Some(1));
        // 0.5.23's `_handle_abort_req`: the reduced dict with the spans of `_make_abort_req`, then
        // `add_logprob_to_meta_info` (with `output_token_logprobs_length`), `completion_tokens`, and the
        // `response_sent_to_client_ts` of `_stream_one_response`.
        assert_eq!(
            String::from_utf8(out).unwrap(),
            concat!(
                r#"{"text":"","output_ids":[],"meta_info":{"id":"r1","#,
                r#""finish_reason":{"type":"abort","status_code":503,"message":"full"},"#,
                r#""weight_version":"v3","e2e_latency":0.25,"#,
                r#""weight_versions":[{"version":"v3","start":0,"end":0}],"#,
                r#""input_token_logprobs":[],"output_token_logprobs":[],"output_token_logprobs_length":0,"#,
                r#""input_top_logprobs":[],"output_top_logprobs":[],"#,
                r#""input_token_ids_logprobs":[],"output_token_ids_logprobs":[],"#,
                r#""completion_tokens":0,"response_sent_to_client_ts":7.5},"index":1}"#
            )
        );

        let (model, plan) = planned(r#"{"text":"a","rid":"r2"}"#);
        let expected = [
            (
                SglangVersion::V0_5_23,
                concat!(
                    r#"{"text":"","output_ids":[],"meta_info":{"id":"r2","#,
                    r#""finish_reason":{"type":"abort","message":"Abort in waiting queue"},"#,
                    r#""weight_version":"default","e2e_latency":1.5,"#,
                    r#""weight_versions":[{"version":"default","start":0,"end":0}],"#,
                    r#""completion_tokens":0,"response_sent_to_client_ts":7.5}}"#
                ),
            ),
            (
                SglangVersion::V0_5_15,
                concat!(
                    r#"{"text":"","output_ids":[],"meta_info":{"id":"r2","#,
                    r#""finish_reason":{"type":"abort","message":"Abort in waiting queue"},"#,
                    r#""weight_version":"default","e2e_latency":1.5,"#,
                    r#""completion_tokens":0,"response_sent_to_client_ts":7.5}}"#
                ),
            ),
        ];
        for (version, want) in expected {
            let ctx = EncodeCtx::new(version, &model, &plan, "default");
            let mut out = Vec::new();
            encode_waiting_abort(
                &mut out,
                &ctx,
                &plan.items[0],
                WaitingAbort::Aborted,
                1.5,
                7.5,
                None,
            );
            assert_eq!(String::from_utf8(out).unwrap(), want, "{version}");
        }
        for version in [SglangVersion::V0_5_23, SglangVersion::V0_5_3] {
            let ctx = EncodeCtx::new(version, &model, &plan, "default");
            let mut out = Vec::new();
            encode_before_prefill(&mut out, &ctx, &plan.items[0], Some(0));
            assert_eq!(
                String::from_utf8(out).unwrap(),
                concat!(
                    r#"{"text":"","meta_info":{"id":"r2","#,
                    r#""finish_reason":{"type":"abort","message":"Abort before prefill"},"#,
                    r#""prompt_tokens":0,"completion_tokens":0},"index":0}"#
                )
            );
        }
    }
}
