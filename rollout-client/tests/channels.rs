//! The channels beside the logprobs, from the wire into `Sample`: routed experts, weight-version spans and
//! sampling masks, each checked like the logprobs (issue #1976's class in its newer forms: miles #861 and
//! #407, verl PR #6029, AReaL PR #1569, TRL #7269).

use mock_server::{Server, ServerConfig, SglangVersion};
use rollout_client::channels::{Asked, RoutesAsked};
use rollout_client::turn::parse_single;
use rollout_client::{
    Client, ClientError, GenerateRequest, ResponseError, RetryPolicy, Sample, SampleError,
    SamplingParams, StreamMode, Turn,
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
