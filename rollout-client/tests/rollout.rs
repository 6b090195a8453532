//! Rollouts against a scripted generating server: multi-turn, budgets, partial resume, groups.

use rollout_client::rollout::{self, EnvTurn, Environment, RolloutConfig};
use rollout_client::{Client, RetryPolicy, Sample, SampleStatus, SamplingParams};
use serde_json::json;

use crate::common::server::{Recorded, Reply, Server};

/// The scripted model: at most 4 tokens per call, each a function of the seed and its position.
fn oracle(input: &[u32], max_new: u32, seed: u64) -> (Vec<u32>, Vec<f32>, serde_json::Value) {
    let k = max_new.min(4) as usize;
    let ids: Vec<u32> = (0..k)
        .map(|j| (((seed + 1) * 7919 + (input.len() + j) as u64 * 104_729) % 150_000) as u32)
        .collect();
    let lps: Vec<f32> = (0..k)
        .map(|j| -0.125 * (j as f32 + 1.0) - seed as f32 / 64.0)
        .collect();
    let finish = if k < max_new as usize {
        json!({"type": "stop", "matched": ids.last().copied().unwrap_or(0)})
    } else {
        json!({"type": "length", "length": max_new})
    };
    (ids, lps, finish)
}

fn generate_reply(req: &Recorded) -> Reply {
    let body = req.json();
    let input: Vec<u32> = serde_json::from_value(body["input_ids"].clone()).unwrap();
    let max_new = body["sampling_params"]["max_new_tokens"]
        .as_u64()
        .unwrap_or(128) as u32;
    let seed = body["sampling_params"]["sampling_seed"]
        .as_u64()
        .unwrap_or(0);
    let (ids, lps, finish) = oracle(&input, max_new, seed);
    let triples: Vec<_> = ids
        .iter()
        .zip(&lps)
        .map(|(i, l)| json!([l, i, null]))
        .collect();
    Reply::json(
        200,
        json!({"text": format!("<{}>", ids.len()), "output_ids": ids, "meta_info": {
            "id": "x", "finish_reason": finish, "prompt_tokens": input.len(), "weight_version": "v1",
            "output_token_logprobs": triples, "completion_tokens": ids.len(), "cached_tokens": 2,
            "e2e_latency": 0.01}})
        .to_string(),
    )
}

fn client(server: &Server) -> Client {
    Client::builder(&server.url)
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
        .build()
        .unwrap()
}

fn config(budget: u32) -> RolloutConfig {
    RolloutConfig {
        sampling_params: SamplingParams {
            max_new_tokens: Some(budget),
            ..SamplingParams::default()
        },
        ..RolloutConfig::default()
    }
}

#[tokio::test]
async fn one_turn_matches_the_oracle() {
    let server = Server::start(|_, r| generate_reply(r)).await;
    let mut s = Sample::new("p", vec![1, 2, 3]);
    rollout::generate(&client(&server), &mut s, &config(4))
        .await
        .unwrap();
    let (ids, lps, _) = oracle(&[1, 2, 3], 4, 0);
    assert_eq!(s.response_tokens(), ids.as_slice());
    assert_eq!(s.rollout_log_probs(), lps.as_slice());
    assert_eq!(s.status, SampleStatus::Truncated);
    assert_eq!(s.weight_versions, ["v1"]);
}

struct Tool {
    calls: usize,
}

impl Environment for Tool {
    async fn step(&mut self, _sample: &Sample) -> Option<EnvTurn> {
        self.calls += 1;
        (self.calls <= 1).then(|| EnvTurn {
            tokens: vec![900, 901, 902],
            text: "[tool]".into(),
        })
    }
}

#[tokio::test]
async fn multi_turn_continues_from_tokens_with_a_shrinking_budget() {
    let server = Server::start(|_, r| generate_reply(r)).await;
    let c = client(&server);
    let mut s = Sample::new("p", vec![1, 2, 3]);
    // Budget 10: turn 1 asks for 10 and stops after 4; the tool adds 3; turn 2 asks for 3.
    rollout::multi_turn(&c, &mut s, &config(10), &mut Tool { calls: 0 }, 5)
        .await
        .unwrap();
    assert_eq!(server.count(), 2);
    let (r0, r1) = (server.request(0).json(), server.request(1).json());
    assert_eq!(r0["sampling_params"]["max_new_tokens"], 10);
    assert_eq!(r1["sampling_params"]["max_new_tokens"], 3);
    let (ids0, lps0, _) = oracle(&[1, 2, 3], 10, 0);
    let mut ctx = vec![1, 2, 3];
    ctx.extend(&ids0);
    ctx.extend([900, 901, 902]);
    assert_eq!(r1["input_ids"], json!(ctx));
    let (ids1, lps1, _) = oracle(&ctx, 3, 0);

    let mut want_lps = lps0.clone();
    want_lps.extend([0.0; 3]);
    want_lps.extend(&lps1);
    assert_eq!(
        s.rollout_log_probs(),
        want_lps.as_slice(),
        "logprobs equal the oracle's, token for token"
    );
    assert_eq!(s.loss_mask(), [1, 1, 1, 1, 0, 0, 0, 1, 1, 1]);
    ctx.extend(&ids1);
    assert_eq!(s.tokens(), ctx.as_slice());
    assert_eq!(
        (s.response_length(), s.status),
        (10, SampleStatus::Truncated)
    );
    assert_eq!(s.response, "<4>[tool]<3>");

    // The budget is used up: the next call marks TRUNCATED without a request... which it already
    // is, so generating again is refused.
    assert!(rollout::generate(&c, &mut s, &config(10)).await.is_err());
    assert_eq!(server.count(), 2);
}

#[tokio::test]
async fn zero_budget_truncates_without_a_request() {
    let server = Server::start(|_, r| generate_reply(r)).await;
    let mut s = Sample::new("p", vec![1]);
    s.append_environment(&[5, 6], "").unwrap();
    rollout::generate(&client(&server), &mut s, &config(2))
        .await
        .unwrap();
    assert_eq!(s.status, SampleStatus::Truncated);
    assert_eq!(server.count(), 0);
    assert!(rollout::next_request(&Sample::new("p", vec![1]), &config(0)).is_none());
}

#[tokio::test]
async fn aborted_sample_resumes_with_offpolicy_prefix_masked() {
    let server = Server::start(|n, r| {
        if n == 0 {
            Reply::json(
                200,
                r#"{"text":"ab","output_ids":[11,12],"meta_info":{"id":"r","finish_reason":{"type":"abort","message":"Aborted","status_code":null,"err_type":null},"prompt_tokens":3,"weight_version":"v0","output_token_logprobs":[[-0.5,11,null],[-0.25,12,null]],"completion_tokens":2,"cached_tokens":0}}"#,
            )
        } else {
            generate_reply(r)
        }
    })
    .await;
    let c = client(&server);
    let mut s = Sample::new("p", vec![1, 2, 3]);
    rollout::generate(&c, &mut s, &config(6)).await.unwrap();
    assert_eq!(s.status, SampleStatus::Aborted);
    assert_eq!(
        (s.response_tokens(), s.rollout_log_probs()),
        (&[11, 12][..], &[-0.5, -0.25][..])
    );

    let mut cfg = config(6);
    cfg.mask_offpolicy_in_partial_rollout = true;
    rollout::resume(&c, &mut s, &cfg).await.unwrap();
    let r1 = server.request(1).json();
    assert_eq!(r1["input_ids"], json!([1, 2, 3, 11, 12]));
    assert_eq!(r1["sampling_params"]["max_new_tokens"], 4);
    let (_, lps, _) = oracle(&[1, 2, 3, 11, 12], 4, 0);
    assert_eq!(s.loss_mask(), [0, 0, 1, 1, 1, 1]);
    assert_eq!(&s.rollout_log_probs()[2..], lps.as_slice());
    assert_eq!(s.status, SampleStatus::Truncated);
    assert_eq!(s.weight_versions, ["v0", "v1"]);
}

#[tokio::test]
async fn group_rollout_gives_distinct_seeded_samples() {
    let server = Server::start(|_, r| generate_reply(r)).await;
    let template = Sample::new("p", vec![1, 2, 3]);
    let group = rollout::generate_group(&client(&server), &template, 2, 4, &config(4), Some(100))
        .await
        .unwrap();
    assert_eq!(group.len(), 4);
    let mut seeds: Vec<u64> = (0..4)
        .map(|i| {
            server.request(i).json()["sampling_params"]["sampling_seed"]
                .as_u64()
                .unwrap()
        })
        .collect();
    seeds.sort();
    assert_eq!(seeds, [100, 101, 102, 103]);
    for (i, s) in group.iter().enumerate() {
        assert_eq!((s.group_index, s.index), (Some(2), Some(8 + i)));
        let (ids, lps, _) = oracle(&[1, 2, 3], 4, 100 + i as u64);
        assert_eq!(
            (s.response_tokens(), s.rollout_log_probs()),
            (ids.as_slice(), lps.as_slice())
        );
    }
    let distinct: std::collections::HashSet<_> =
        group.iter().map(|s| s.response_tokens().to_vec()).collect();
    assert_eq!(distinct.len(), 4);
}

#[tokio::test]
async fn a_failing_member_fails_the_group_and_is_named() {
    let server = Server::start(|_, r| {
        if r.json()["sampling_params"]["sampling_seed"] == 1 {
            Reply::json(400, r#"{"error":{"message":"bad seed"}}"#)
        } else {
            generate_reply(r)
        }
    })
    .await;
    let e = rollout::generate_group(
        &client(&server),
        &Sample::new("p", vec![1]),
        0,
        3,
        &config(2),
        Some(0),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            rollout_client::RolloutError::GroupMember {
                group_index: 0,
                index: 1,
                ..
            }
        ),
        "{e:?}"
    );
}

/// A multi-agent call as the wire sees it: every attempt asks for logprobs, streams when configured,
/// carries its own seed, and a role gets exactly as many attempts as the example allows.
#[tokio::test]
async fn agent_calls_stream_when_asked_and_retry_as_the_example_does() {
    use rollout_client::multi_agent::{MultiAgentConfig, Role, run_agent};
    use rollout_client::tokenize::PromptTokenizer;

    let config = MultiAgentConfig {
        stream: true,
        sampling_params: SamplingParams {
            max_new_tokens: Some(8),
            sampling_seed: Some(7),
            ..SamplingParams::default()
        },
        tokenizer: PromptTokenizer::local(|text| text.bytes().map(u32::from).collect()),
        ..MultiAgentConfig::default()
    };
    let template = Sample::new("p", vec![]);
    // (role, worker, seeds the attempts carry: 7 * 4096 + role * 1024 + worker * 16 + attempt)
    let cases = [
        (Role::Solver, 2, vec![28_705, 28_706, 28_707]),
        (Role::Rewriter, 0, vec![29_697]),
        (Role::Selector, 0, (1..=10).map(|a| 30_720 + a).collect()),
    ];
    for (role, worker, seeds) in cases {
        let server =
            Server::start(|_, _| Reply::json(500, r#"{"error":{"message":"down","code":500}}"#))
                .await;
        let r = run_agent(&client(&server), &config, &template, "hi", role, worker).await;
        assert!(r.sample.is_none() && r.content.is_none(), "{role:?}");
        assert_eq!(server.count(), seeds.len(), "{role:?} attempts");
        for (i, seed) in seeds.iter().enumerate() {
            let body = server.request(i).json();
            assert_eq!(body["input_ids"], json!([104, 105]), "{role:?}");
            assert_eq!(body["return_logprob"], true, "{role:?}");
            assert_eq!(body["stream"], true, "{role:?}");
            assert_eq!(
                body["sampling_params"]["sampling_seed"], *seed,
                "{role:?} attempt {i}"
            );
            assert_eq!(body["sampling_params"]["max_new_tokens"], 8, "{role:?}");
        }
    }
}
