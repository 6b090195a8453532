//! The channels beside the logprobs, from the wire into `Sample`: routed experts, weight-version spans and
//! sampling masks, each checked like the logprobs (issue #1976's class in its newer forms: miles #861 and
//! #407, verl PR #6029, AReaL PR #1569, TRL #7269).

use mock_server::{Server, ServerConfig, SglangVersion};
use rollout_client::channels::{Asked, RoutesAsked};
use rollout_client::turn::parse_single;
use rollout_client::{
    Client, ClientError, CustomParams, GenerateRequest, ResponseError, RetryPolicy, Sample,
    SampleError, SamplingParams, StreamMode, Turn,
};
use serde_json::{Value, json};

const LAYERS: usize = 2;
const PER_TOKEN: usize = 3;
const ROW: usize = LAYERS * PER_TOKEN;

async fn start(version: SglangVersion) -> Server {
    Server::start(ServerConfig {
        port: 0,
        sglang_version: version,
        enable_return_routed_experts: true,
        num_hidden_layers: LAYERS as u32,
        num_experts: 8,
        num_experts_per_tok: PER_TOKEN as u32,
        ..ServerConfig::default()
    })
    .await
    .expect("mock starts")
}

fn client(url: &str) -> Client {
    Client::builder(url)
        .moe_shape(LAYERS, PER_TOKEN)
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
        .build()
        .expect("a client")
}

fn request(tokens: &[u32], stream: bool) -> GenerateRequest {
    GenerateRequest {
        return_routed_experts: true,
        return_sampling_mask: true,
        stream,
        ..GenerateRequest::from_ids(
            tokens.to_vec(),
            SamplingParams {
                max_new_tokens: Some(5),
                top_k: Some(4),
                temperature: Some(0.8),
                ignore_eos: Some(true),
                sampling_seed: Some(11),
                ..SamplingParams::default()
            },
        )
    }
}

/// A multi-turn sample (generate, tool output, generate) against 0.5.23, streamed and not: after each turn the
/// routes have one row per token up to the last generated one, equal to the rows the server sent for the whole
/// sequence (replaced, not appended: verl PR #6029 appended and duplicated the prompt's rows); the sampling
/// supports cover every response token (empty for the tool's), each holding its token; and the weight-version
/// spans cover the generated tokens.
#[tokio::test]
async fn a_multi_turn_sample_carries_every_channel_aligned() {
    let server = start(SglangVersion::V0_5_23).await;
    let c = client(&format!("http://{}", server.addr()));
    for stream in [false, true] {
        let mut sample = Sample::new("q", vec![5, 6, 7]);
        let first = c
            .generate(&request(sample.tokens(), stream))
            .await
            .expect("turn 1");
        sample.apply_turn(&first).expect("turn 1 fits");
        let routes = sample.rollout_routed_experts().expect("routes");
        assert_eq!(routes.rows(), sample.tokens().len() - 1, "stream {stream}");
        assert_eq!(routes.row_len(), ROW);
        sample
            .append_environment(&[9, 9], "<tool>")
            .expect("tool output");
        let second = c
            .generate(&request(sample.tokens(), stream))
            .await
            .expect("turn 2");
        sample.apply_turn(&second).expect("turn 2 fits");
        let routes = sample.rollout_routed_experts().expect("routes");
        assert_eq!(routes.rows(), sample.tokens().len() - 1);
        // The second answer's rows are those of the whole sequence; the first turn's rows are their prefix.
        let turn_routes = second.channels.routes.as_ref().expect("turn routes");
        assert_eq!(routes.as_flat(), turn_routes.data.as_slice());
        let first_rows = first.channels.routes.as_ref().expect("turn 1 routes");
        assert_eq!(
            routes.as_flat()[..first_rows.data.len()],
            first_rows.data[..]
        );

        let (ids, offsets) = sample.rollout_top_p_tokens().expect("masks");
        assert_eq!(offsets.len(), sample.response_length() + 1);
        assert_eq!(offsets[0], 0);
        assert_eq!(*offsets.last().unwrap() as usize, ids.len());
        let logprobs = sample
            .rollout_sampling_log_probs()
            .expect("sampling logprobs");
        for (i, &token) in sample.response_tokens().iter().enumerate() {
            let support = &ids[offsets[i] as usize..offsets[i + 1] as usize];
            let tool = (5..7).contains(&i);
            assert_eq!(support.is_empty(), tool, "position {i}");
            assert!(tool || (support.contains(&token) && support.len() <= 4));
            assert!(logprobs[i] <= 0.0 && logprobs[i].is_finite());
        }
        let spans: Vec<(usize, usize)> = sample
            .weight_version_spans()
            .iter()
            .map(|s| (s.start, s.end))
            .collect();
        assert_eq!(spans, [(0, 5), (7, 12)], "stream {stream}");

        // And through JSON and back, with the same channels.
        let again = Sample::from_json(&sample.to_json().unwrap()).expect("valid JSON");
        assert_eq!(again, sample);
    }
}

/// slime's top-p replay on its patched 0.5.15 (`--slime-patches`), over a multi-turn sample (generate, tool
/// output, generate), streamed and not. Each answer's rows and renormalised logprobs are computed here from an
/// independent source, the same request without the patch's `custom_params` but with its top logprobs: the
/// nucleus is the prefix of the top list whose probability *before* each id is at most `top_p`, and the
/// renormalised logprob is the logprob minus the log of the nucleus's mass. The tokens are the unpatched
/// request's (the rows change what is reported, not what is sampled). The sample carries the rows in slime's
/// CSR form, empty for the tool's tokens, with `rollout_sampling_log_probs` equal to its `rollout_log_probs`.
#[tokio::test]
async fn slimes_top_p_replay_rows_are_the_nucleus_of_the_served_distribution() {
    const TOP_P: f32 = 0.8;
    let server = Server::start(ServerConfig {
        port: 0,
        sglang_version: SglangVersion::V0_5_15,
        slime_patches: true,
        ..ServerConfig::default()
    })
    .await
    .expect("mock starts");
    let c = client(&format!("http://{}", server.addr()));
    let request = |tokens: &[u32], stream: bool, patched: bool| GenerateRequest {
        stream,
        top_logprobs_num: (!patched).then_some(9),
        ..GenerateRequest::from_ids(
            tokens.to_vec(),
            SamplingParams {
                max_new_tokens: Some(6),
                top_p: Some(TOP_P),
                ignore_eos: Some(true),
                sampling_seed: Some(5),
                custom_params: patched.then_some(CustomParams {
                    return_top_p_token_ids: true,
                }),
                ..SamplingParams::default()
            },
        )
    };
    let mut nucleus_sizes = Vec::new();
    for stream in [false, true] {
        let mut sample = Sample::new("q", vec![5, 6, 7]);
        for turn in 0..2 {
            if turn == 1 {
                sample
                    .append_environment(&[9, 9], "<tool>")
                    .expect("tool output");
            }
            let patched = c
                .generate(&request(sample.tokens(), stream, true))
                .await
                .expect("patched turn");
            let plain = c
                .generate(&request(sample.tokens(), stream, false))
                .await
                .expect("plain turn");
            assert_eq!(patched.output_ids, plain.output_ids, "stream {stream}");
            let rows = patched.channels.masks.as_ref().expect("rows");
            let renormalised = patched.logprobs.as_ref().expect("logprobs");
            let top = plain.meta_info.output_top_logprobs.as_ref().expect("top");
            for (i, &token) in plain.output_ids.iter().enumerate() {
                let top = top[i].as_ref().expect("a top row");
                let mut before = 0.0f64;
                let mut nucleus = Vec::new();
                let mut mass = 0.0f64;
                for entry in top {
                    if before > f64::from(TOP_P) {
                        break;
                    }
                    let p = f64::from(entry.logprob.expect("finite")).exp();
                    nucleus.push(entry.token_id);
                    before += p;
                    mass += p;
                }
                assert!(before > f64::from(TOP_P), "the top 9 hold the nucleus");
                assert_eq!(
                    rows.support(i),
                    nucleus,
                    "stream {stream}, turn {turn}, token {i}"
                );
                let raw = top.iter().find(|e| e.token_id == token).expect("kept");
                let want = f64::from(raw.logprob.expect("finite")) - mass.ln();
                assert!(
                    (f64::from(renormalised[i]) - want).abs() < 1e-5,
                    "token {i}: {} against {want}",
                    renormalised[i]
                );
                nucleus_sizes.push(nucleus.len());
            }
            sample.apply_turn(&patched).expect("the turn fits");
        }
        let (ids, offsets) = sample.rollout_top_p_tokens().expect("rows");
        assert_eq!(offsets.len(), sample.response_length() + 1);
        let sampling = sample.rollout_sampling_log_probs().expect("logprobs");
        for i in 0..sample.response_length() {
            let row = &ids[offsets[i] as usize..offsets[i + 1] as usize];
            assert_eq!(row.is_empty(), (6..8).contains(&i), "position {i}");
        }
        assert_eq!(sampling, sample.rollout_log_probs());
    }
    // The case is not degenerate: nuclei of one id and of several.
    assert!(nucleus_sizes.contains(&1) || nucleus_sizes.iter().any(|&n| n >= 3));
    assert!(nucleus_sizes.iter().any(|&n| n > 1), "{nucleus_sizes:?}");
    server.shutdown().await.expect("shutdown");
}

/// 0.5.15 has routes and no sampling masks: a request that asks for masks gets a typed error naming the
/// channel, not a sample without them; one that asks for routes alone goes through.
#[tokio::test]
async fn a_channel_asked_for_and_not_sent_is_a_typed_error() {
    let server = start(SglangVersion::V0_5_15).await;
    let c = client(&format!("http://{}", server.addr()));
    let err = c
        .generate(&request(&[5, 6, 7], false))
        .await
        .expect_err("no masks in 0.5.15");
    assert!(
        matches!(
            err,
            ClientError::Response {
                source: ResponseError::MissingChannel {
                    channel: "output_token_sampling_mask"
                },
                ..
            }
        ),
        "{err:?}"
    );
    let routes_only = GenerateRequest {
        return_sampling_mask: false,
        ..request(&[5, 6, 7], false)
    };
    let turn = c.generate(&routes_only).await.expect("routes only");
    assert_eq!(turn.channels.routes.expect("routes").rows(), 3 + 5 - 1);

    // A server without --enable-return-routed-experts sends none (HTTP 200): miles #407's "required" error,
    // raised here by the client at the boundary.
    let plain = Server::start(ServerConfig {
        port: 0,
        ..ServerConfig::default()
    })
    .await
    .expect("mock starts");
    let err = client(&format!("http://{}", plain.addr()))
        .generate(&routes_only)
        .await
        .expect_err("no routes without the flag");
    assert!(
        matches!(
            err,
            ClientError::Response {
                source: ResponseError::MissingChannel {
                    channel: "routed_experts"
                },
                ..
            }
        ),
        "{err:?}"
    );
}

fn body(meta: Value, output_ids: &[u32]) -> Vec<u8> {
    let mut meta = meta;
    meta["id"] = json!("r");
    meta["finish_reason"] = json!({"type": "length", "length": output_ids.len()});
    meta["completion_tokens"] = json!(output_ids.len());
    serde_json::to_vec(&json!({"text": "", "output_ids": output_ids, "meta_info": meta}))
        .expect("JSON")
}

fn routes_b64(values: &[i32]) -> String {
    use base64::Engine;
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn asked(routes: bool, masks: bool) -> Asked {
    Asked {
        logprobs: false,
        routed_experts: routes.then_some(RoutesAsked {
            start: 0,
            row_len: Some(ROW),
        }),
        sampling_mask: masks,
        top_p: false,
    }
}

fn bad_channel(result: Result<Turn, ResponseError>) -> (&'static str, Option<usize>, String) {
    match result {
        Err(ResponseError::BadChannel {
            channel,
            position,
            problem,
        }) => (channel, position, problem),
        other => panic!("want BadChannel, got {other:?}"),
    }
}

/// slime's top-p replay rows (`top_p_token_ids` / `top_p_token_offsets`, base64 int32 in slime's CSR form) are
/// refused at the boundary when their shape is wrong, each naming the key and the row: offsets one short (slime's
/// own `len(offsets) == generated + 1` check) or one long, not starting at 0, an empty row (the sampler keeps at
/// least one id), offsets that do not end at the number of ids, a negative id, text that is not base64, and half
/// of the pair. A row without the sampled token is accepted: the patch keeps the nucleus by its own torch test,
/// which can drop a boundary token the sampling kernel kept, and slime's trainer force-keeps it.
#[test]
fn malformed_top_p_rows_name_the_key_and_the_row() {
    let b64 = |values: &[i32]| Value::from(routes_b64(values));
    let meta = |ids: Value, offsets: Value| {
        let mut meta = json!({"output_token_logprobs": [[-0.5, 1, null], [0.0, 2, null]]});
        if !ids.is_null() {
            meta["top_p_token_ids"] = ids;
        }
        if !offsets.is_null() {
            meta["top_p_token_offsets"] = offsets;
        }
        meta
    };
    let asked = Asked {
        logprobs: true,
        top_p: true,
        ..Asked::default()
    };
    let ok = parse_single(
        &body(meta(b64(&[1, 7, 2]), b64(&[0, 2, 3])), &[1, 2]),
        asked,
    )
    .expect("two rows fit");
    let rows = ok.channels.masks.expect("rows");
    assert_eq!((rows.support(0), rows.support(1)), (&[1, 7][..], &[2][..]));
    // The renormalised logprobs are the output logprobs themselves.
    assert_eq!(rows.logprobs, [-0.5, 0.0]);
    let boundary = parse_single(&body(meta(b64(&[7, 3]), b64(&[0, 1, 2])), &[1, 2]), asked)
        .expect("rows without their token are the patch's boundary case");
    assert_eq!(boundary.channels.masks.expect("rows").support(0), [7]);
    for (ids, offsets, channel, position) in [
        (b64(&[1, 7]), b64(&[0, 2]), "top_p_token_offsets", Some(1)),
        (
            b64(&[1, 7, 2]),
            b64(&[0, 2, 3, 3]),
            "top_p_token_offsets",
            Some(2),
        ),
        (
            b64(&[1, 7, 2]),
            b64(&[1, 2, 3]),
            "top_p_token_offsets",
            Some(0),
        ),
        (
            b64(&[1, 7, 2]),
            b64(&[0, 0, 3]),
            "top_p_token_offsets",
            Some(0),
        ),
        (
            b64(&[1, 7, 2]),
            b64(&[0, 2, 4]),
            "top_p_token_offsets",
            None,
        ),
        (
            b64(&[1, -7, 2]),
            b64(&[0, 2, 3]),
            "top_p_token_ids",
            Some(0),
        ),
        (
            b64(&[1, 7, -2]),
            b64(&[0, 2, 3]),
            "top_p_token_ids",
            Some(1),
        ),
        (
            json!("not base64!"),
            b64(&[0, 2, 3]),
            "top_p_token_ids",
            None,
        ),
        (b64(&[1, 7, 2]), json!("AAA"), "top_p_token_offsets", None),
    ] {
        let (got, at, problem) =
            bad_channel(parse_single(&body(meta(ids, offsets), &[1, 2]), asked));
        assert_eq!((got, at), (channel, position), "{problem}");
    }
    for (ids, offsets, missing) in [
        (Value::Null, Value::Null, "top_p_token_ids"),
        (b64(&[1, 7, 2]), Value::Null, "top_p_token_offsets"),
        (Value::Null, b64(&[0, 2, 3]), "top_p_token_ids"),
    ] {
        match parse_single(&body(meta(ids, offsets), &[1, 2]), asked) {
            Err(ResponseError::MissingChannel { channel }) => assert_eq!(channel, missing),
            other => panic!("want MissingChannel({missing}), got {other:?}"),
        }
    }
    // Rows come only with a token: an answer without output needs none.
    let empty = json!({"output_token_logprobs": []});
    parse_single(&body(empty, &[]), asked).expect("no tokens, no rows");
}

/// Malformed routes are refused at the boundary: not base64, cut shorter than the tokens (miles #861's
/// truncation), a row too many (a duplicated row), rows of the wrong length for the model, a negative expert.
#[test]
fn malformed_routes_name_the_channel_and_what_is_wrong() {
    let rows = |n: usize| -> Vec<i32> { (0..n * ROW).map(|i| (i % 8) as i32).collect() };
    // Prompt 3, output 2: rows for positions 0..4.
    let meta = |routes: String| json!({"prompt_tokens": 3, "routed_experts": routes});
    let ok = parse_single(
        &body(meta(routes_b64(&rows(4))), &[1, 2]),
        asked(true, false),
    )
    .expect("four rows fit");
    assert_eq!(ok.channels.routes.expect("routes").rows(), 4);
    let cases: [(String, &str); 5] = [
        ("***".into(), "not base64"),
        (routes_b64(&rows(3)), "not 4 rows"),
        (routes_b64(&rows(5)), "not 4 rows"),
        (routes_b64(&rows(4)[..4 * ROW - 1]), "not 4 rows"),
        (
            routes_b64(&[0; 4 * (ROW + 2)].map(|x: i32| x)),
            "rows of 8, not of 6",
        ),
    ];
    for (routes, want) in cases {
        let (channel, _, problem) = bad_channel(parse_single(
            &body(meta(routes), &[1, 2]),
            asked(true, false),
        ));
        assert_eq!(channel, "routed_experts");
        assert!(problem.contains(want), "{problem} lacks {want:?}");
    }
    let mut negative = rows(4);
    negative[2 * ROW + 1] = -1;
    let (_, position, _) = bad_channel(parse_single(
        &body(meta(routes_b64(&negative)), &[1, 2]),
        asked(true, false),
    ));
    assert_eq!(position, Some(2));
}

/// Weight-version spans must tile the output tokens: a gap, an overlap, spans short of the end, or a last
/// span whose version is not the answer's `weight_version` (a stale label, AReaL PR #1569) are refused with
/// the position.
#[test]
fn weight_version_spans_must_tile_the_output() {
    let spans = |s: Value, version: &str| json!({"weight_version": version, "weight_versions": s});
    let ok = parse_single(
        &body(
            spans(json!([{"version": "a", "start": 0, "end": 2}, {"version": "b", "start": 2, "end": 4}]), "b"),
            &[1, 2, 3, 4],
        ),
        false,
    )
    .expect("two spans tile four tokens");
    assert_eq!(ok.channels.weight_versions.expect("spans").len(), 2);
    for (s, version, position, want) in [
        (
            json!([{"version": "a", "start": 0, "end": 1}, {"version": "b", "start": 2, "end": 4}]),
            "b",
            Some(1),
            "gap",
        ),
        (
            json!([{"version": "a", "start": 0, "end": 3}, {"version": "b", "start": 2, "end": 4}]),
            "b",
            Some(2),
            "overlap",
        ),
        (
            json!([{"version": "a", "start": 0, "end": 3}]),
            "a",
            Some(3),
            "cover 3 of 4",
        ),
        (
            json!([{"version": "a", "start": 0, "end": 4}]),
            "b",
            Some(0),
            "is not weight_version",
        ),
    ] {
        let (channel, at, problem) =
            bad_channel(parse_single(&body(spans(s, version), &[1, 2, 3, 4]), false));
        assert_eq!(channel, "weight_versions");
        assert_eq!(at, position, "{problem}");
        assert!(problem.contains(want), "{problem} lacks {want:?}");
    }
}

/// Sampling masks need a support per output token holding that token, and a finite logprob `<= 0` for it:
/// a `null` (a NaN serialised, TRL #6166) or a support that lacks the sampled token is refused at its position.
#[test]
fn malformed_sampling_masks_name_the_position() {
    let meta = |masks: Value, logprobs: Value| {
        json!({"output_token_sampling_mask": masks, "output_token_sampling_logprobs": logprobs,
               "output_token_sampling_mask_length": 2})
    };
    let ok = parse_single(
        &body(meta(json!([[1, 7], [2]]), json!([-0.5, 0.0])), &[1, 2]),
        asked(false, true),
    )
    .expect("two masks fit");
    let masks = ok.channels.masks.expect("masks");
    assert_eq!(
        (masks.support(0), masks.support(1)),
        (&[1, 7][..], &[2][..])
    );
    let support = parse_single(
        &body(
            meta(json!([[7, 1], [2]]), json!([[-1.0, -0.4], [0.0]])),
            &[1, 2],
        ),
        asked(false, true),
    )
    .expect("support mode");
    assert_eq!(support.channels.masks.expect("masks").logprobs, [-0.4, 0.0]);
    for (masks, logprobs, position, channel) in [
        (
            json!([[1, 7], [3]]),
            json!([-0.5, 0.0]),
            Some(1),
            "output_token_sampling_mask",
        ),
        (
            json!([[1, 7]]),
            json!([-0.5]),
            Some(1),
            "output_token_sampling_mask",
        ),
        (
            json!([[1, 7], [2]]),
            json!([-0.5, null]),
            Some(1),
            "output_token_sampling_logprobs",
        ),
        (
            json!([[1, 7], [2]]),
            json!([0.5, 0.0]),
            Some(0),
            "output_token_sampling_logprobs",
        ),
        (
            json!([[1, 7], [2]]),
            json!([[-0.5], [0.0]]),
            Some(0),
            "output_token_sampling_logprobs",
        ),
    ] {
        let (got, at, problem) = bad_channel(parse_single(
            &body(meta(masks, logprobs), &[1, 2]),
            asked(false, true),
        ));
        assert_eq!((got, at), (channel, position), "{problem}");
    }
}

/// The sample holds the channels to its tokens: a turn whose routes do not cover the sequence (a turn of
/// another sample, or rows concatenated across resumes) or that lacks the routes the sample carries (miles
/// #407) is refused, and the sample is unchanged.
#[test]
fn a_sample_refuses_turns_that_would_misalign_its_channels() {
    let rows = |n: usize| -> Vec<i32> { vec![1; n * ROW] };
    let turn = |prompt: usize, output: &[u32], routes: Option<usize>| {
        let mut meta = json!({"prompt_tokens": prompt});
        let triples: Vec<Value> = output.iter().map(|&id| json!([-0.5, id, null])).collect();
        meta["output_token_logprobs"] = json!(triples);
        if let Some(n) = routes {
            meta["routed_experts"] = json!(routes_b64(&rows(n)));
        }
        let asked = Asked {
            logprobs: true,
            ..asked(routes.is_some(), false)
        };
        parse_single(&body(meta, output), asked).expect("a valid turn")
    };
    let mut sample = Sample::new("q", vec![5, 6, 7]);
    sample.apply_turn(&turn(3, &[1, 2], Some(4))).expect("fits");
    let before = sample.clone();
    // The server saw a prompt of 2 (not this sample's 5 tokens): its rows cover 3 positions, not 6.
    let err = sample.apply_turn(&turn(2, &[3, 4], Some(3))).unwrap_err();
    assert_eq!(
        err,
        SampleError::ChannelMisaligned {
            channel: "routed_experts",
            expected: 6,
            got: 3
        }
    );
    let err = sample.apply_turn(&turn(5, &[3, 4], None)).unwrap_err();
    assert_eq!(
        err,
        SampleError::ChannelMissingInTurn {
            channel: "routed_experts"
        }
    );
    assert_eq!(sample, before, "a refused turn changes nothing");
    sample
        .apply_turn(&turn(5, &[3, 4], Some(6)))
        .expect("the whole sequence's rows fit");
    assert_eq!(sample.rollout_routed_experts().unwrap().rows(), 6);
}

/// With `--incremental-streaming-output` each frame carries only the new mask rows: the assembled stream has
/// the same masks, routes and spans as the non-streamed answer to the same request.
#[tokio::test]
async fn an_incremental_stream_assembles_the_channels_of_every_frame() {
    let server = Server::start(ServerConfig {
        port: 0,
        enable_return_routed_experts: true,
        num_hidden_layers: LAYERS as u32,
        num_experts: 8,
        num_experts_per_tok: PER_TOKEN as u32,
        incremental_streaming_output: true,
        ..ServerConfig::default()
    })
    .await
    .expect("mock starts");
    let url = format!("http://{}", server.addr());
    let whole = client(&url)
        .generate(&request(&[5, 6, 7], false))
        .await
        .expect("whole");
    for mode in [StreamMode::Incremental, StreamMode::Auto] {
        let streamed = Client::builder(&url)
            .moe_shape(LAYERS, PER_TOKEN)
            .stream_mode(mode)
            .build()
            .expect("a client")
            .generate(&request(&[5, 6, 7], true))
            .await
            .expect("streamed");
        assert_eq!(streamed.output_ids, whole.output_ids);
        assert_eq!(streamed.channels, whole.channels, "{mode:?}");
    }
}

/// The rows of decoded routes and of a sample's routes read back row by row, and a sample's masks count their
/// tokens.
#[test]
fn routes_and_masks_read_back_row_by_row() {
    let values: Vec<i32> = (0..4 * ROW as i32).collect();
    let turn = parse_single(
        &body(
            json!({"prompt_tokens": 3, "routed_experts": routes_b64(&values),
                   "output_token_logprobs": [[-0.5, 1, null], [-0.5, 2, null]],
                   "output_token_sampling_mask": [[1], [2, 5]],
                   "output_token_sampling_logprobs": [0.0, -0.1]}),
            &[1, 2],
        ),
        Asked {
            logprobs: true,
            ..asked(true, true)
        },
    )
    .expect("a valid turn");
    let routes = turn.channels.routes.as_ref().expect("routes");
    for i in 0..4 {
        assert_eq!(routes.row(i), &values[i * ROW..(i + 1) * ROW], "row {i}");
    }
    let masks = turn.channels.masks.as_ref().expect("masks");
    assert_eq!((masks.len(), masks.is_empty()), (2, false));
    let mut sample = Sample::new("q", vec![5, 6, 7]);
    sample.apply_turn(&turn).expect("fits");
    let carried = sample.rollout_routed_experts().expect("routes");
    for i in 0..4 {
        assert_eq!(carried.row(i), routes.row(i), "row {i}");
    }
}

/// A turn asked with `routed_experts_start_len` carries the rows from its start; the sample keeps its own rows
/// before it (slime's splice). A start past the rows the sample has, or rows of another length, is refused.
#[test]
fn routes_from_a_start_are_spliced_after_the_samples_own_rows() {
    let rows = |n: usize, value: i32| -> Vec<i32> { vec![value; n * ROW] };
    let turn = |prompt: usize, output: &[u32], start: usize, values: &[i32]| {
        let triples: Vec<Value> = output.iter().map(|&id| json!([-0.5, id, null])).collect();
        let meta = json!({"prompt_tokens": prompt, "output_token_logprobs": triples,
                          "routed_experts": routes_b64(values)});
        let asked = Asked {
            logprobs: true,
            routed_experts: Some(RoutesAsked {
                start,
                row_len: None,
            }),
            ..Asked::default()
        };
        parse_single(&body(meta, output), asked)
    };
    let mut sample = Sample::new("q", vec![5, 6, 7]);
    sample
        .apply_turn(&turn(3, &[1, 2], 0, &rows(4, 1)).expect("valid"))
        .expect("fits");
    // Prompt 5 (the sample's tokens), output 2, from position 3: rows 3..6.
    let spliced = turn(5, &[3, 4], 3, &rows(3, 2)).expect("valid");
    assert_eq!(spliced.channels.routes.as_ref().unwrap().rows(), 3);
    let mut kept = sample.clone();
    kept.apply_turn(&spliced).expect("fits");
    let routes = kept.rollout_routed_experts().unwrap();
    assert_eq!(routes.rows(), 6);
    assert_eq!(routes.as_flat()[..3 * ROW], rows(3, 1)[..]);
    assert_eq!(routes.as_flat()[3 * ROW..], rows(3, 2)[..]);
    // A start past the four rows the sample has.
    let mut over = sample.clone();
    let beyond = turn(5, &[3, 4], 5, &rows(1, 2)).expect("valid");
    assert_eq!(
        over.apply_turn(&beyond).unwrap_err(),
        SampleError::ChannelMisaligned {
            channel: "routed_experts",
            expected: 5,
            got: 4
        }
    );
    // Rows of another length than the sample's.
    let other = turn(5, &[3, 4], 3, &[2; 3 * (ROW + 1)]).expect("valid");
    assert_eq!(
        over.apply_turn(&other).unwrap_err(),
        SampleError::ChannelMisaligned {
            channel: "routed_experts row length",
            expected: ROW,
            got: ROW + 1
        }
    );
    assert_eq!(over, sample, "refused turns change nothing");
}

/// What a response may lack: an abort in the waiting queue never ran, so it has no channels and is no error;
/// masks without their logprobs are; a sequence with no position for a row has empty routes, and values there
/// are an error; a span that ends before it starts is refused.
#[test]
fn channels_of_aborts_empty_routes_and_backward_spans() {
    let abort = |meta: Value| {
        let mut meta = meta;
        meta["id"] = json!("r");
        meta["finish_reason"] = json!({"type": "abort", "message": "Abort in waiting queue"});
        serde_json::to_vec(&json!({"text": "", "output_ids": [], "meta_info": meta})).unwrap()
    };
    let waiting =
        parse_single(&abort(json!({})), asked(true, true)).expect("an abort that never ran");
    assert_eq!(waiting.channels, Default::default());
    // A sample with masks takes the empty abort.
    let mut sample = Sample::new("q", vec![5, 6, 7]);
    let masked = parse_single(
        &body(
            json!({"output_token_logprobs": [[-0.5, 1, null]],
                   "output_token_sampling_mask": [[1]], "output_token_sampling_logprobs": [0.0]}),
            &[1],
        ),
        Asked {
            logprobs: true,
            ..asked(false, true)
        },
    )
    .expect("valid");
    sample.apply_turn(&masked).expect("fits");
    let empty_abort = parse_single(
        &abort(json!({"output_token_logprobs": []})),
        Asked {
            logprobs: true,
            ..asked(false, true)
        },
    )
    .expect("an abort that never ran");
    sample
        .apply_turn(&empty_abort)
        .expect("an empty turn needs no masks");

    let err = parse_single(
        &body(json!({"output_token_sampling_mask": [[1]]}), &[1]),
        asked(false, true),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ResponseError::MissingChannel {
                channel: "output_token_sampling_logprobs"
            }
        ),
        "{err:?}"
    );

    // One prompt token and a start at 1: no position has a row.
    let start_one = Asked {
        routed_experts: Some(RoutesAsked {
            start: 1,
            row_len: Some(ROW),
        }),
        ..asked(true, false)
    };
    let none = parse_single(
        &body(json!({"prompt_tokens": 1, "routed_experts": ""}), &[1]),
        start_one,
    )
    .expect("no rows");
    assert_eq!(none.channels.routes.unwrap().rows(), 0);
    let (channel, _, problem) = bad_channel(parse_single(
        &body(
            json!({"prompt_tokens": 1, "routed_experts": routes_b64(&[1; ROW])}),
            &[1],
        ),
        start_one,
    ));
    assert_eq!(channel, "routed_experts");
    assert!(problem.contains("no position has a row"), "{problem}");

    let (channel, position, _) = bad_channel(parse_single(
        &body(
            json!({"weight_version": "a", "weight_versions": [{"version": "a", "start": 0, "end": 2},
                                                             {"version": "a", "start": 2, "end": 1}]}),
            &[1, 2],
        ),
        false,
    ));
    assert_eq!((channel, position), ("weight_versions", Some(2)));
}

/// A JSONL record is held to the same alignment as a sample built turn by turn: routes short of the last
/// generated token or past the tokens, supports that lack their token or sit on a tool's, offsets that do not
/// rise, spans that overlap or leave the generated tokens are refused, naming the channel.
#[test]
fn a_record_with_misaligned_channels_is_refused() {
    let rows = |n: usize| -> Vec<i32> { vec![3; n * ROW] };
    let meta = json!({"prompt_tokens": 3, "weight_version": "v1",
                      "output_token_logprobs": [[-0.5, 1, null], [-0.5, 2, null]],
                      "routed_experts": routes_b64(&rows(4)),
                      "output_token_sampling_mask": [[1, 7], [2]],
                      "output_token_sampling_logprobs": [-0.2, 0.0]});
    let turn = parse_single(
        &body(meta, &[1, 2]),
        Asked {
            logprobs: true,
            ..asked(true, true)
        },
    )
    .expect("valid");
    let mut sample = Sample::new("q", vec![5, 6, 7]);
    sample.apply_turn(&turn).expect("fits");
    sample.append_environment(&[9], "<tool>").expect("tool");
    let (ids, offsets) = sample.rollout_top_p_tokens().expect("masks");
    assert_eq!((ids, offsets), (&[1, 7, 2][..], &[0, 2, 3, 3][..]));
    let spans: Vec<(usize, usize)> = sample
        .weight_version_spans()
        .iter()
        .map(|s| (s.start, s.end))
        .collect();
    assert_eq!(
        spans,
        [(0, 2)],
        "a turn without spans is its weight_version's"
    );
    let good: Value = serde_json::from_str(&sample.to_json().unwrap()).unwrap();
    Sample::from_json(&good.to_string()).expect("the record itself is valid");
    let refused = |edit: &dyn Fn(&mut Value), channel: &str| {
        let mut record = good.clone();
        edit(&mut record);
        let err = Sample::from_json(&record.to_string()).expect_err(channel);
        assert!(err.to_string().contains(channel), "{channel}: {err}");
    };
    let routes_rows = |n: usize| json!(vec![vec![3; ROW]; n]);
    // Five tokens up to the last generated one need 4 rows; the six tokens hold at most 5.
    refused(
        &|r| r["rollout_routed_experts"] = routes_rows(3),
        "has 3 rows where the tokens need 4",
    );
    refused(
        &|r| r["rollout_routed_experts"] = routes_rows(6),
        "has 6 rows where the tokens need 5",
    );
    refused(
        &|r| r["rollout_top_p_token_offsets"] = json!([0, 2, 3]),
        "output_token_sampling_mask",
    );
    refused(
        &|r| r["rollout_top_p_token_offsets"] = json!([0, 3, 2, 3]),
        "rollout_top_p_token_offsets",
    );
    refused(
        &|r| r["rollout_top_p_token_offsets"] = json!([1, 2, 3, 3]),
        "rollout_top_p_token_offsets",
    );
    refused(
        &|r| r["rollout_top_p_token_ids"] = json!([1, 7, 2, 4]),
        "rollout_top_p_token_offsets",
    );
    refused(
        &|r| {
            r["rollout_top_p_token_ids"] = json!([1, 7]);
            r["rollout_top_p_token_offsets"] = json!([0, 2, 2, 2]);
        },
        "has an empty support",
    );
    // A row without its token is slime's top-p replay at the nucleus boundary (the patch's torch test dropped
    // a token its sampling kernel kept; the trainer force-keeps it): a record may hold one. A sampling mask
    // without its token is refused on the response, where the channel is known.
    let mut boundary = good.clone();
    boundary["rollout_top_p_token_ids"] = json!([1, 7, 8]);
    Sample::from_json(&boundary.to_string()).expect("a top-p row at the boundary");
    refused(
        &|r| {
            r["rollout_top_p_token_ids"] = json!([1, 7, 2, 9]);
            r["rollout_top_p_token_offsets"] = json!([0, 2, 3, 4]);
        },
        "rollout_top_p_token_ids",
    );
    refused(
        &|r| r["rollout_sampling_log_probs"] = json!([-0.2, 0.0, -0.1]),
        "rollout_top_p_token_ids",
    );
    refused(
        &|r| r["weight_version_spans"] = json!([{"version": "v1", "start": 0, "end": 2}, {"version": "v2", "start": 1, "end": 2}]),
        "weight_version_spans",
    );
    refused(
        &|r| r["weight_version_spans"] = json!([{"version": "v1", "start": 0, "end": 3}]),
        "weight_version_spans",
    );
    refused(
        &|r| r["weight_version_spans"] = json!([{"version": "v1", "start": 1, "end": 1}]),
        "weight_version_spans",
    );
}

/// Tool output before the first masked turn gets empty supports; a generated turn without the masks the sample
/// carries is refused, and an abort that never ran, with its weight version, adds neither a support nor a span.
#[test]
fn masks_begin_after_tool_output_and_every_later_turn_needs_them() {
    let masked = |output: &[u32]| {
        let triples: Vec<Value> = output.iter().map(|&id| json!([-0.5, id, null])).collect();
        let supports: Vec<Value> = output.iter().map(|&id| json!([id])).collect();
        let zeros = vec![0.0; output.len()];
        let meta = json!({"output_token_logprobs": triples, "output_token_sampling_mask": supports,
                          "output_token_sampling_logprobs": zeros});
        parse_single(
            &body(meta, output),
            Asked {
                logprobs: true,
                ..asked(false, true)
            },
        )
        .expect("valid")
    };
    let mut sample = Sample::new("q", vec![5, 6, 7]);
    sample.append_environment(&[9, 9], "<tool>").expect("tool");
    sample.apply_turn(&masked(&[1, 2])).expect("fits");
    let (ids, offsets) = sample.rollout_top_p_tokens().expect("masks");
    assert_eq!((ids, offsets), (&[1, 2][..], &[0, 0, 0, 1, 2][..]));
    assert_eq!(sample.rollout_sampling_log_probs(), Some(&[0.0; 4][..]));
    let plain = parse_single(
        &body(json!({"output_token_logprobs": [[-0.5, 3, null]]}), &[3]),
        true,
    )
    .expect("valid");
    assert_eq!(
        sample.clone().apply_turn(&plain).unwrap_err(),
        SampleError::ChannelMissingInTurn {
            channel: "output_token_sampling_mask"
        }
    );
    let mut abort_body: Value = serde_json::from_slice(&body(
        json!({"weight_version": "v2", "output_token_logprobs": []}),
        &[],
    ))
    .unwrap();
    abort_body["meta_info"]["finish_reason"] =
        json!({"type": "abort", "message": "Abort in waiting queue"});
    let abort = parse_single(
        &serde_json::to_vec(&abort_body).unwrap(),
        Asked {
            logprobs: true,
            ..asked(false, true)
        },
    )
    .expect("an abort that never ran");
    let before = sample.weight_version_spans().to_vec();
    sample.apply_turn(&abort).expect("an empty turn");
    assert_eq!(sample.weight_version_spans(), before);
    assert_eq!(sample.rollout_top_p_tokens().unwrap().1.len(), 5);
}

/// The edges of carrying: a zero-length span (0.5.23's for an answer without tokens) and an answer without
/// tokens whose routes start at the prompt's end (no rows) change nothing; a splice may start right after the
/// sample's last row; spans of a later turn land at its offset; a masked turn after generated tokens without
/// masks is refused; an answer without tokens has no mask rows.
#[test]
fn the_edges_of_carrying_channels() {
    let turn = |prompt: usize, output: &[u32], extra: Value, asked: Asked| {
        let triples: Vec<Value> = output.iter().map(|&id| json!([-0.5, id, null])).collect();
        let mut meta = json!({"prompt_tokens": prompt, "output_token_logprobs": triples});
        for (k, v) in extra.as_object().unwrap() {
            meta[k] = v.clone();
        }
        parse_single(
            &body(meta, output),
            Asked {
                logprobs: true,
                ..asked
            },
        )
        .expect("valid")
    };
    let routes_from = |start: usize| Asked {
        routed_experts: Some(RoutesAsked {
            start,
            row_len: Some(ROW),
        }),
        ..asked(false, false)
    };
    let mut sample = Sample::new("q", vec![5, 6, 7]);
    let first = turn(
        3,
        &[1, 2],
        json!({"routed_experts": routes_b64(&[1; 4 * ROW])}),
        routes_from(0),
    );
    sample.apply_turn(&first).expect("fits");
    // No tokens, routes from the sample's end (position 4 of 5 tokens): no rows, the sample keeps its four.
    let empty = turn(
        5,
        &[],
        json!({"routed_experts": "",
                                    "weight_versions": [{"version": "v", "start": 0, "end": 0}],
                                    "weight_version": "v"}),
        routes_from(4),
    );
    let mut kept = sample.clone();
    kept.apply_turn(&empty).expect("an answer without tokens");
    assert_eq!(kept.rollout_routed_experts().unwrap().rows(), 4);
    assert!(kept.weight_version_spans().is_empty());
    // An answer without tokens and without routes, in a sample that carries them.
    let bare = turn(5, &[], json!({}), asked(false, false));
    kept.apply_turn(&bare).expect("nothing to route");
    // A splice right after the sample's four rows.
    let next = turn(
        5,
        &[3, 4],
        json!({"routed_experts": routes_b64(&[2; 2 * ROW])}),
        routes_from(4),
    );
    kept.apply_turn(&next).expect("rows 4 and 5");
    assert_eq!(kept.rollout_routed_experts().unwrap().rows(), 6);

    // Spans of a later turn, at its offset.
    let mut versioned = Sample::new("q", vec![5, 6, 7]);
    versioned
        .apply_turn(&turn(
            3,
            &[1, 2],
            json!({"weight_version": "a"}),
            asked(false, false),
        ))
        .unwrap();
    versioned.append_environment(&[9], "<tool>").unwrap();
    let two_spans = json!({"weight_version": "c", "weight_versions": [
        {"version": "b", "start": 0, "end": 1}, {"version": "c", "start": 1, "end": 2}]});
    versioned
        .apply_turn(&turn(6, &[3, 4], two_spans, asked(false, false)))
        .unwrap();
    let spans: Vec<(&str, usize, usize)> = versioned
        .weight_version_spans()
        .iter()
        .map(|s| (s.version.as_str(), s.start, s.end))
        .collect();
    assert_eq!(spans, [("a", 0, 2), ("b", 3, 4), ("c", 4, 5)]);

    // Masks after generated tokens that had none.
    let mut unmasked = Sample::new("q", vec![5, 6, 7]);
    unmasked
        .apply_turn(&turn(3, &[1], json!({}), asked(false, false)))
        .unwrap();
    let masked = turn(
        4,
        &[2],
        json!({"output_token_sampling_mask": [[2]], "output_token_sampling_logprobs": [0.0]}),
        asked(false, true),
    );
    assert_eq!(
        unmasked.apply_turn(&masked).unwrap_err(),
        SampleError::ChannelMissingInTurn {
            channel: "output_token_sampling_mask"
        }
    );
    let no_rows = turn(
        4,
        &[],
        json!({"output_token_sampling_mask": [], "output_token_sampling_logprobs": []}),
        asked(false, true),
    );
    let masks = no_rows.channels.masks.expect("masks");
    assert!(masks.is_empty());
}

/// verl's phantom entry: with `max_new_tokens: 0` an answer has no output ids but one logprob entry
/// (`phantom-logprob`). The client refuses it as misaligned instead of dropping the turn as verl does, so the
/// caller learns the server broke the contract.
#[tokio::test]
async fn a_phantom_logprob_without_output_tokens_is_refused() {
    let server = start(SglangVersion::V0_5_23).await;
    let url = format!("http://{}", server.addr());
    let request = GenerateRequest::from_ids(
        vec![5, 6, 7],
        SamplingParams {
            max_new_tokens: Some(0),
            ..SamplingParams::default()
        },
    );
    let empty = client(&url).generate(&request).await.expect("no tokens");
    assert!(empty.output_ids.is_empty());
    let faulted = Client::builder(&url)
        .header("X-Mock-Fault", "phantom-logprob")
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
        .build()
        .expect("a client");
    let err = faulted
        .generate(&request)
        .await
        .expect_err("a phantom entry");
    assert!(
        matches!(
            err,
            ClientError::Response {
                source: ResponseError::LengthMismatch {
                    ids: 0,
                    logprobs: 1
                },
                ..
            }
        ),
        "{err:?}"
    );
}

/// A generation turn of `output` tokens labelled with weight version `version` (none: a server that sends no
/// `weight_version`), finished as `finish`.
fn versioned_turn(prompt: usize, output: &[u32], version: Option<&str>, finish: &str) -> Turn {
    let triples: Vec<Value> = output.iter().map(|&id| json!([-0.25, id, null])).collect();
    let mut meta = json!({"prompt_tokens": prompt, "output_token_logprobs": triples});
    if let Some(v) = version {
        meta["weight_version"] = json!(v);
    }
    let mut body: Value = serde_json::from_slice(&body(meta, output)).expect("JSON");
    body["meta_info"]["finish_reason"] = match finish {
        "abort" => json!({"type": "abort", "message": "Abort before update_weights"}),
        other => json!({"type": other}),
    };
    parse_single(&serde_json::to_vec(&body).unwrap(), true).expect("a valid turn")
}

/// `--mask-offpolicy-in-partial-rollout` by each token's version (slime PR #2092: requeued aborted groups mixed
/// tokens of weight versions 2, 4 and 6 in one sample, all trained): after every resume only the tokens of the
/// newest version stay trained. A resume under the version the sample already had masks nothing, and without
/// versions the tokens before the resume are masked, as slime does.
#[test]
fn offpolicy_masking_follows_each_tokens_weight_version() {
    let resume = |versions: [Option<&str>; 3]| {
        let mut s = Sample::new("q", vec![5, 6, 7]);
        s.apply_turn(&versioned_turn(3, &[1, 2, 3], versions[0], "abort"))
            .expect("turn 1");
        let resumed_at = s.response_length();
        s.apply_turn(&versioned_turn(6, &[4, 5], versions[1], "abort"))
            .expect("turn 2");
        s.mask_offpolicy(resumed_at);
        let resumed_at = s.response_length();
        s.apply_turn(&versioned_turn(8, &[6, 7], versions[2], "stop"))
            .expect("turn 3");
        s.mask_offpolicy(resumed_at);
        // Masking twice changes nothing more.
        s.mask_offpolicy(resumed_at);
        let again = Sample::from_json(&s.to_json().unwrap()).expect("a valid sample");
        assert_eq!(again, s);
        (s.loss_mask().to_vec(), s.policy_masked_tokens())
    };
    assert_eq!(
        resume([Some("2"), Some("4"), Some("6")]),
        (vec![0, 0, 0, 0, 0, 1, 1], 5)
    );
    assert_eq!(
        resume([Some("2"), Some("6"), Some("6")]),
        (vec![0, 0, 0, 1, 1, 1, 1], 3)
    );
    assert_eq!(
        resume([Some("6"), Some("6"), Some("6")]),
        (vec![1; 7], 0),
        "one version throughout is on-policy"
    );
    assert_eq!(
        resume([None, None, None]),
        (vec![0, 0, 0, 0, 0, 1, 1], 5),
        "without versions, everything before the last resume"
    );
    assert_eq!(
        resume([None, Some("6"), Some("6")]),
        (vec![0, 0, 0, 0, 0, 1, 1], 5),
        "a turn without a version: the spans do not say which tokens are stale"
    );
    // A sample with environment tokens: they stay untrained and are not counted as masked.
    let mut s = Sample::new("q", vec![5]);
    s.apply_turn(&versioned_turn(1, &[1, 2], Some("a"), "stop"))
        .expect("turn 1");
    s.append_environment(&[9], "").expect("tool");
    let resumed_at = s.response_length();
    s.apply_turn(&versioned_turn(4, &[3], Some("b"), "stop"))
        .expect("turn 2");
    s.mask_offpolicy(resumed_at);
    assert_eq!(
        (s.loss_mask(), s.policy_masked_tokens()),
        (&[0, 0, 0, 1][..], 2)
    );
}

/// The fields a truncation must cut together, as one comparable value (the text and the server's counters
/// aside).
fn per_token_channels(s: &Sample) -> Value {
    json!({
        "tokens": s.tokens(),
        "loss_mask": s.loss_mask(),
        "rollout_log_probs": s.rollout_log_probs(),
        "generated_spans": s.generated_spans(),
        "policy_masked_tokens": s.policy_masked_tokens(),
        "rollout_top_p_tokens": s.rollout_top_p_tokens(),
        "rollout_sampling_log_probs": s.rollout_sampling_log_probs(),
        "weight_version_spans": s.weight_version_spans(),
    })
}

/// A sample of the prompt `[5, 6, 7]`: a generation of `first` tokens, `tool` tokens of tool output, a
/// generation of `second` tokens (each part left out when 0), against `c`.
async fn rollout(c: &Client, first: u32, tool: usize, second: u32) -> Sample {
    let mut s = Sample::new("q", vec![5, 6, 7]);
    for (part, max_new) in [(0, first), (1, 0), (2, second)] {
        if part == 1 && tool > 0 {
            s.append_environment(&[9, 9][..tool], "<tool>")
                .expect("tool");
        }
        if max_new > 0 {
            let mut req = request(s.tokens(), false);
            req.sampling_params.max_new_tokens = Some(max_new);
            let turn = c.generate(&req).await.expect("a turn");
            s.apply_turn(&turn).expect("the turn fits");
        }
    }
    s
}

/// miles #861 (fixed in PR #893): truncating a sample cut its tokens, logprobs and loss mask but not
/// `rollout_routed_experts`, so `len(tokens) - 1 != routes.shape[0]`. Cutting a multi-turn sample (generate 5,
/// tool 2, generate 5, against 0.5.23 with routes and masks) to `keep` response tokens gives, channel for
/// channel, the sample the same rollout would have built had its budget ended there: the server's own answers
/// to the shorter requests, not a slice computed here. The routes keep `len(tokens) - 1` rows, as miles' fix
/// does: where the cut ends in tool output, that is more than the shorter rollout had, since the second turn's
/// prefill routed the tool tokens too.
#[tokio::test]
async fn truncating_a_sample_cuts_every_channel_as_a_shorter_rollout_would() {
    let server = start(SglangVersion::V0_5_23).await;
    let c = client(&format!("http://{}", server.addr()));
    let full = rollout(&c, 5, 2, 5).await;
    assert_eq!(full.response_length(), 12);
    for keep in 1..12 {
        let mut cut = full.clone();
        cut.truncate_response(keep, |ids| format!("{ids:?}"));
        let (first, tool, second) = match keep {
            1..=5 => (keep as u32, 0, 0),
            6..=7 => (5, keep - 5, 0),
            _ => (5, 2, keep as u32 - 7),
        };
        let shorter = rollout(&c, first, tool, second).await;
        assert_eq!(
            per_token_channels(&cut),
            per_token_channels(&shorter),
            "keep {keep}"
        );
        let routes = cut.rollout_routed_experts().expect("routes");
        assert_eq!(routes.rows(), cut.tokens().len() - 1, "keep {keep}");
        let full_routes = full.rollout_routed_experts().expect("routes");
        assert_eq!(
            routes.as_flat(),
            &full_routes.as_flat()[..routes.rows() * ROW],
            "keep {keep}"
        );
        if tool == 0 || second > 0 {
            assert_eq!(
                Some(routes),
                shorter.rollout_routed_experts(),
                "keep {keep}"
            );
        }
        assert_eq!(cut.response, format!("{:?}", cut.response_tokens()));
        assert_eq!(cut.status, rollout_client::SampleStatus::Truncated);
        // The cut sample is as valid as one built turn by turn: its JSONL record reads back.
        assert_eq!(
            Sample::from_json(&cut.to_json().unwrap()).expect("valid"),
            cut
        );
    }
    // Cut to nothing, the sample keeps the prompt's rows and empty supports: a sample that asked for the
    // channels still has them.
    let mut none = full.clone();
    none.truncate_response(0, |_| String::new());
    assert_eq!(none.tokens(), [5, 6, 7]);
    assert!(none.generated_spans().is_empty() && none.weight_version_spans().is_empty());
    let routes = none.rollout_routed_experts().expect("routes");
    assert_eq!(
        routes.as_flat(),
        &full.rollout_routed_experts().unwrap().as_flat()[..2 * ROW]
    );
    assert_eq!(none.rollout_top_p_tokens(), Some((&[][..], &[0][..])));
    assert_eq!(
        Sample::from_json(&none.to_json().unwrap()).expect("valid"),
        none
    );

    let mut same = full.clone();
    same.truncate_response(12, |_| unreachable!("nothing to cut"));
    assert_eq!(
        same, full,
        "a response no longer than the budget is left as it is"
    );
}
