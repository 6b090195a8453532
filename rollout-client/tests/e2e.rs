//! End to end against `sglang-mock` (started in-process on 127.0.0.1:0), checked against its oracle.

use mock_server::engine::FinishReason as MockFinish;
use mock_server::oracle::Oracle;
use mock_server::{Server, ServerConfig, SglangVersion};
use rollout_client::rollout::{self, EnvTurn, Environment, RolloutConfig};
use rollout_client::{
    Client, ClientError, FinishReason, GenerateRequest, ResponseError, RetryPolicy, Sample,
    SampleStatus, SamplingParams, StopMatch, StreamMode, Turn,
};

/// Starts the mock; it stops when the test's runtime shuts down.
async fn start(config: ServerConfig) -> Server {
    Server::start(ServerConfig { port: 0, ..config })
        .await
        .expect("mock starts")
}

fn client(url: &str, mode: StreamMode) -> Client {
    Client::builder(url)
        .stream_mode(mode)
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
        .build()
        .unwrap()
}

fn params(max_new_tokens: u32, seed: u64) -> SamplingParams {
    SamplingParams {
        max_new_tokens: Some(max_new_tokens),
        temperature: Some(1.0),
        sampling_seed: Some(seed),
        ..SamplingParams::default()
    }
}

fn same_finish(ours: &FinishReason, theirs: &Option<MockFinish>) -> bool {
    match (ours, theirs) {
        (FinishReason::Length { length }, Some(MockFinish::Length { length: l })) => {
            *length == *l as u64
        }
        (
            FinishReason::Stop {
                matched: Some(StopMatch::Token(t)),
            },
            Some(MockFinish::StopToken { matched }),
        ) => *t == *matched as u64,
        (
            FinishReason::Stop {
                matched: Some(StopMatch::Text(s)),
            },
            Some(MockFinish::StopStr { matched }),
        ) => s == matched,
        (FinishReason::Abort { .. }, Some(MockFinish::Abort { .. })) => true,
        _ => false,
    }
}

/// Asserts our turn is exactly the oracle's answer to the same request bytes.
fn assert_oracle(oracle: &Oracle, req: &GenerateRequest, turns: &[Turn]) {
    let body = serde_json::to_vec(req).unwrap();
    let expected = oracle.expect(&body).expect("oracle accepts the request");
    assert_eq!(turns.len(), expected.items.len());
    for (t, e) in turns.iter().zip(&expected.items) {
        assert_eq!(t.output_ids, e.output_ids);
        assert_eq!(
            t.logprobs.as_deref(),
            Some(e.output_logprobs.as_slice()),
            "logprobs token for token"
        );
        assert_eq!(t.text, e.text);
        assert!(
            same_finish(&t.finish_reason, &e.finish_reason),
            "{:?} vs {:?}",
            t.finish_reason,
            e.finish_reason
        );
    }
}

#[tokio::test]
async fn every_profile_and_stream_mode_matches_the_oracle() {
    let profiles = [
        ("latest", ServerConfig::default(), StreamMode::Auto),
        (
            "latest/incremental",
            ServerConfig {
                incremental_streaming_output: true,
                ..ServerConfig::default()
            },
            StreamMode::Auto,
        ),
        (
            "mid",
            ServerConfig {
                sglang_version: SglangVersion::V0_5_3,
                ..ServerConfig::default()
            },
            StreamMode::Auto,
        ),
        (
            "mid/explicit",
            ServerConfig {
                sglang_version: SglangVersion::V0_5_3,
                ..ServerConfig::default()
            },
            StreamMode::Mid,
        ),
        (
            "interval 3",
            ServerConfig {
                stream_interval: 3,
                ..ServerConfig::default()
            },
            StreamMode::Auto,
        ),
    ];
    for (name, config, mode) in profiles {
        let oracle = Oracle::new(config.clone()).unwrap();
        let server = start(config).await;
        let c = client(&server.url(), mode);
        for seed in 0..3 {
            let mut req =
                GenerateRequest::from_ids(vec![151644, 872, 198, 3838, 374], params(24, seed));
            let plain = c
                .generate(&req)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_oracle(&oracle, &req, std::slice::from_ref(&plain));
            req.stream = true;
            let streamed = c
                .generate(&req)
                .await
                .unwrap_or_else(|e| panic!("{name} stream: {e:?}"));
            assert_eq!(
                (
                    &streamed.output_ids,
                    &streamed.logprobs,
                    &streamed.text,
                    &streamed.finish_reason
                ),
                (
                    &plain.output_ids,
                    &plain.logprobs,
                    &plain.text,
                    &plain.finish_reason
                ),
                "{name}: streamed and non-streamed results differ"
            );
        }
    }
}

#[tokio::test]
async fn n_and_batches_match_the_oracle_streamed_or_not() {
    let config = ServerConfig::default();
    let oracle = Oracle::new(config.clone()).unwrap();
    let server = start(config).await;
    let c = client(&server.url(), StreamMode::Auto);
    let mut n3 = GenerateRequest::from_ids(vec![1, 2, 3, 4], params(12, 5));
    n3.sampling_params.n = Some(3);
    let mut batch = GenerateRequest {
        input_ids: Some(rollout_client::IdsInput::Batch(vec![
            vec![1, 2, 3],
            vec![9, 8, 7, 6],
        ])),
        ..GenerateRequest::from_ids(vec![], params(10, 1))
    };
    for req in [&mut n3, &mut batch] {
        let plain = c.generate_many(req).await.unwrap();
        assert_oracle(&oracle, req, &plain);
        req.stream = true;
        let streamed = c.generate_many(req).await.unwrap();
        for (s, p) in streamed.iter().zip(&plain) {
            assert_eq!((&s.output_ids, &s.logprobs), (&p.output_ids, &p.logprobs));
        }
    }
}

struct Calculator;

impl Environment for Calculator {
    async fn step(&mut self, sample: &Sample) -> Option<EnvTurn> {
        // Two tool calls, then stop.
        (sample.loss_mask().iter().filter(|m| **m == 0).count() < 8).then(|| EnvTurn {
            tokens: vec![1000, 1001, 1002, 1003],
            text: " [tool: 4]".into(),
        })
    }
}

#[tokio::test]
async fn multi_turn_logprobs_equal_the_oracle_token_for_token() {
    let config = ServerConfig::default();
    let oracle = Oracle::new(config.clone()).unwrap();
    let server = start(config).await;
    let c = client(&server.url(), StreamMode::Auto);
    // A stop string ends turns early, so the rollout alternates generation and tool output.
    let mut sp = params(40, 11);
    sp.stop = Some(vec![".".into(), "!".into(), "?".into()]);
    let cfg = RolloutConfig {
        sampling_params: sp,
        ..RolloutConfig::default()
    };
    let mut sample = Sample::new("2+2=", vec![17, 10, 17, 28]);
    // Drive the turns by hand so each request can be replayed through the oracle.
    let mut want_lps: Vec<f32> = Vec::new();
    let mut env = Calculator;
    for _ in 0..5 {
        let Some(req) = rollout::next_request(&sample, &cfg) else {
            break;
        };
        let expected = oracle.expect(&serde_json::to_vec(&req).unwrap()).unwrap();
        rollout::generate(&c, &mut sample, &cfg).await.unwrap();
        want_lps.extend(&expected.items[0].output_logprobs);
        assert_eq!(sample.rollout_log_probs(), want_lps.as_slice());
        if sample.status != SampleStatus::Completed {
            break;
        }
        match env.step(&sample).await {
            Some(t) => {
                sample.append_environment(&t.tokens, &t.text).unwrap();
                want_lps.extend([0.0; 4]);
            }
            None => break,
        }
    }
    sample.check_invariants().unwrap();
    // At least generation, tool output, generation.
    let mask = sample.loss_mask();
    assert!(
        mask.first() == Some(&1) && mask.contains(&0) && mask.last() == Some(&1),
        "{mask:?}"
    );
    assert_eq!(sample.tokens().len(), 4 + sample.response_length());
    assert!(sample.response_length() <= 40);
}

#[tokio::test]
async fn group_rollout_against_the_mock() {
    let server = start(ServerConfig::default()).await;
    let c = client(&server.url(), StreamMode::Auto);
    let cfg = RolloutConfig {
        sampling_params: params(16, 0),
        stream: true,
        ..RolloutConfig::default()
    };
    let group =
        rollout::generate_group(&c, &Sample::new("p", vec![5, 6, 7]), 0, 8, &cfg, Some(1234))
            .await
            .unwrap();
    let distinct: std::collections::HashSet<_> =
        group.iter().map(|s| s.response_tokens().to_vec()).collect();
    assert!(distinct.len() > 1, "seeds must give different samples");
    for s in &group {
        s.check_invariants().unwrap();
        assert!(matches!(
            s.status,
            SampleStatus::Completed | SampleStatus::Truncated
        ));
    }
}

#[tokio::test]
async fn mock_errors_become_typed_errors() {
    let server = start(ServerConfig::default()).await;
    let c = client(&server.url(), StreamMode::Auto);
    let mut req = GenerateRequest::from_ids(vec![], params(4, 0));
    match c.generate(&req).await.unwrap_err() {
        ClientError::Status {
            status: 400,
            message,
            ..
        } => assert_eq!(message, "input_ids cannot be empty."),
        other => panic!("{other:?}"),
    }
    req.stream = true;
    let e = c.generate(&req).await.unwrap_err();
    assert!(
        matches!(e.response_error(), Some(ResponseError::ServerError { message }) if message == "input_ids cannot be empty."),
        "{e:?}"
    );
}

#[tokio::test]
async fn api_key_is_sent() {
    let server = start(ServerConfig {
        api_key: Some("sk-mock".into()),
        ..ServerConfig::default()
    })
    .await;
    let url = server.url();
    let req = GenerateRequest::from_ids(vec![1, 2], params(2, 0));
    let e = client(&url, StreamMode::Auto)
        .generate(&req)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(401), "{e:?}");
    let with_key = Client::builder(&url).api_key("sk-mock").build().unwrap();
    assert!(with_key.generate(&req).await.is_ok());
}
