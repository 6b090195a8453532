//! Aborts during a rollout: the partial sample keeps its tokens, logprobs and channels, resumes, and (optionally)
//! masks the off-policy prefix, and every token still equals the oracle's.

use mock_server::ServerConfig;
use proptest::prelude::*;
use rollout_client::request::IdsInput;
use rollout_client::rollout::{self, RolloutConfig};
use rollout_client::train;
use rollout_client::{
    AbortRequest, Client, GenerateRequest, RetryPolicy, Reward, Sample, SampleStatus,
    SamplingParams,
};

use crate::common::{
    Mock, Provenance, assert_aligned, assert_oracle_replay, block_on, runner, runtime,
    with_channels,
};

fn config(max_new: u32, seed: u64, stream: bool, mask: bool) -> RolloutConfig {
    RolloutConfig {
        sampling_params: SamplingParams {
            max_new_tokens: Some(max_new),
            sampling_seed: Some(seed),
            ..SamplingParams::default()
        },
        stream,
        mask_offpolicy_in_partial_rollout: mask,
        ..RolloutConfig::default()
    }
}

/// What the oracle generates for `input` with `max_new` tokens left, under `params` (the rollout's).
fn oracle_output(
    mock: &Mock,
    input: &[u32],
    max_new: u32,
    params: &SamplingParams,
) -> (Vec<u32>, Vec<f32>) {
    let req = GenerateRequest {
        input_ids: Some(IdsInput::One(input.to_vec())),
        sampling_params: SamplingParams {
            max_new_tokens: Some(max_new),
            ..params.clone()
        },
        return_logprob: true,
        ..GenerateRequest::default()
    };
    let e = mock
        .oracle
        .expect(&serde_json::to_vec(&req).expect("encode"))
        .expect("oracle");
    (
        e.items[0].output_ids.clone(),
        e.items[0].output_logprobs.clone(),
    )
}

#[test]
fn a_running_abort_keeps_the_partial_output_and_resumes() {
    let rt = runtime();
    let mock = Mock::start(&rt, with_channels());
    let plain = mock.client();
    let strategy = (
        prop::collection::vec(256u32..151_000, 1..8),
        1u64..12,
        4u32..24,
        0u64..1 << 40,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    );
    let updates = std::sync::atomic::AtomicUsize::new(0);
    runner(24)
        .run(
            &strategy,
            |(prompt, after, max_new, seed, stream, mask, update, channels)| {
                let aborting = Client::builder(&mock.url)
                    .header("X-Mock-Fault", &format!("abort-running;after={after}"))
                    .retry(RetryPolicy {
                        max_retries: 0,
                        ..RetryPolicy::default()
                    })
                    .build()
                    .expect("client");
                let mut cfg = config(max_new, seed, stream, mask);
                if channels {
                    // Routes and sampling masks through the abort and the resume (a mask needs a bounded top_k).
                    cfg.return_routed_experts = true;
                    cfg.return_sampling_mask = true;
                    cfg.sampling_params.top_k = Some(20);
                }
                let params = &cfg.sampling_params;
                let (full_ids, full_lps) = oracle_output(&mock, &prompt, max_new, params);
                let mut s = Sample::new("p", prompt.clone());
                block_on(&rt, rollout::generate(&aborting, &mut s, &cfg))
                    .expect("an abort is an answer");
                assert_aligned(&s);
                let k = s.response_length();
                if s.status != SampleStatus::Aborted {
                    // The generation ended before the abort point.
                    prop_assert!(after as usize >= full_ids.len(), "status {:?}", s.status);
                    prop_assert_eq!(s.response_tokens(), full_ids.as_slice());
                    return Ok(());
                }
                // The partial output is the oracle's generation cut after `after` tokens, logprobs kept.
                let budget_at = |p: usize| max_new - p as u32;
                assert_oracle_replay(
                    &mock.oracle,
                    &s,
                    &cfg.sampling_params,
                    Provenance::default(),
                    budget_at,
                );
                prop_assert_eq!(k, (after as usize).min(full_ids.len()));
                prop_assert_eq!(s.response_tokens(), &full_ids[..k]);
                prop_assert_eq!(s.rollout_log_probs(), &full_lps[..k]);

                if update {
                    // A training step between the abort and the resume: the resumed tokens come from a new version.
                    let n = updates.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    block_on(&rt, update_weight_version(&mock.url, &format!("step-{n}")));
                }
                block_on(&rt, rollout::resume(&plain, &mut s, &cfg)).expect("resume");
                assert_aligned(&s);
                prop_assert!(matches!(
                    s.status,
                    SampleStatus::Completed | SampleStatus::Truncated
                ));
                let mut input = prompt.clone();
                input.extend(&full_ids[..k]);
                let (rest_ids, rest_lps) = oracle_output(&mock, &input, max_new - k as u32, params);
                prop_assert_eq!(&s.response_tokens()[..k], &full_ids[..k]);
                prop_assert_eq!(&s.response_tokens()[k..], rest_ids.as_slice());
                prop_assert_eq!(&s.rollout_log_probs()[..k], &full_lps[..k]);
                prop_assert_eq!(&s.rollout_log_probs()[k..], rest_lps.as_slice());
                // The prefix is masked when it is off-policy: asked to, and a weight update came between.
                let off_policy = mask && update;
                let want_mask: Vec<u8> = (0..s.response_length())
                    .map(|i| u8::from(!(off_policy && i < k)))
                    .collect();
                prop_assert_eq!(s.loss_mask(), want_mask.as_slice());
                // The same through the replay of each generation: two spans, the first cut where it was aborted.
                let provenance = Provenance {
                    environment_tokens: 0,
                    policy_masked_tokens: if off_policy { k } else { 0 },
                    ..Provenance::default()
                };
                assert_oracle_replay(
                    &mock.oracle,
                    &s,
                    &cfg.sampling_params,
                    provenance,
                    budget_at,
                );

                // The resumed sample is a valid GRPO input, masked prefix and all.
                s.reward = Some(Reward::Scalar(1.0));
                let mut batch = vec![s.clone(), s];
                batch[1].reward = Some(Reward::Scalar(0.0));
                let out = train::grpo_advantages(
                    &mut batch,
                    &train::slime_options(2, 1),
                    &grpo::AdvantageConfig::default(),
                    None,
                )
                .expect("grpo");
                prop_assert!(out.loss.is_finite());
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
}

/// `/update_weight_version`, as a trainer does after a training step.
async fn update_weight_version(url: &str, version: &str) {
    let resp = reqwest::Client::new()
        .post(format!("{url}/update_weight_version"))
        .body(serde_json::json!({"new_version": version}).to_string())
        .send()
        .await
        .expect("update");
    assert!(resp.status().is_success(), "{}", resp.status());
}

/// A count of the mock's first rank in `/v1/loads`: `num_running_reqs` or `num_waiting_reqs`.
async fn load(url: &str, key: &str) -> u64 {
    let bytes = reqwest::get(format!("{url}/v1/loads"))
        .await
        .expect("v1/loads")
        .bytes()
        .await
        .expect("body");
    let body: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    body["loads"][0][key].as_u64().unwrap_or(0)
}

/// Sends `req` in a task of its own and returns once `/v1/loads` counts a request under `key`.
async fn send_until(
    client: &Client,
    req: GenerateRequest,
    url: &str,
    key: &str,
) -> tokio::task::JoinHandle<Result<rollout_client::Turn, rollout_client::ClientError>> {
    let sent = tokio::spawn({
        let client = client.clone();
        async move { client.generate(&req).await }
    });
    while load(url, key).await == 0 {
        tokio::task::yield_now().await;
    }
    sent
}

/// slime's abort path for real: the one running slot is taken, a request waits in the scheduler's queue,
/// `/abort_request` with its rid ends it with "Abort in waiting queue", and once the
/// slot is free the sample resumes to exactly what an uninterrupted rollout gives. (A request held at the
/// pause gate instead never reaches the scheduler, and no abort ends it: mock-server's control tests.)
#[test]
fn an_abort_in_the_waiting_queue_resumes_to_the_uninterrupted_result() {
    let rt = runtime();
    let mock = Mock::start(
        &rt,
        ServerConfig {
            max_running_requests: Some(1),
            latency: mock_server::LatencyConfig {
                itl_ms: 5.0,
                ..mock_server::LatencyConfig::default()
            },
            ..ServerConfig::default()
        },
    );
    let client = mock.client();
    block_on(&rt, async {
        let prompt = vec![151_934, 900, 901, 902];
        let cfg = config(16, 9, false, true);
        let mut want = Sample::new("p", prompt.clone());
        rollout::generate(&client, &mut want, &cfg)
            .await
            .expect("reference");

        // A long request takes the slot (about 50 s at 5 ms a token); it is aborted below.
        let mut blocker = rollout::next_request(
            &Sample::new("b", vec![7, 8]),
            &config(10_000, 1, false, false),
        )
        .expect("req");
        blocker.rid = Some("blocker".into());
        // Polling, not sleeping: first the blocker runs, then the request waits in the queue.
        let blocking = send_until(&client, blocker, &mock.url, "num_running_reqs").await;
        let mut req = rollout::next_request(&Sample::new("p", prompt.clone()), &cfg).expect("req");
        req.rid = Some("rollout-7-sample-0".into());
        let pending = send_until(&client, req, &mock.url, "num_waiting_reqs").await;
        client
            .abort(&AbortRequest {
                rid: "rollout-7-sample-0".into(),
                abort_all: false,
            })
            .await
            .expect("abort");
        let turn = pending.await.expect("join").expect("an abort is an answer");
        assert!(turn.is_abort(), "{:?}", turn.finish_reason);
        let mut s = Sample::new("p", prompt);
        s.apply_turn(&turn).expect("apply");
        assert_eq!(s.status, SampleStatus::Aborted);
        assert_aligned(&s);

        client
            .abort(&AbortRequest {
                rid: "blocker".into(),
                abort_all: false,
            })
            .await
            .expect("abort");
        let blocked = blocking
            .await
            .expect("join")
            .expect("an abort is an answer");
        assert!(blocked.is_abort(), "{:?}", blocked.finish_reason);
        rollout::resume(&client, &mut s, &cfg)
            .await
            .expect("resume");
        assert_eq!(s.response_tokens(), want.response_tokens());
        assert_eq!(s.rollout_log_probs(), want.rollout_log_probs());
        assert_eq!(s.status, want.status);
    });
}

/// A weight update between an abort and its resume (slime's partial rollout across a training
/// step): each generation call records the weight version it ran under.
#[test]
fn a_resume_after_a_weight_update_records_both_versions() {
    let rt = runtime();
    let mock = Mock::start(&rt, ServerConfig::default());
    let plain = mock.client();
    let aborting = Client::builder(&mock.url)
        .header("X-Mock-Fault", "abort-running;after=3")
        .build()
        .expect("client");
    block_on(&rt, async {
        let cfg = config(12, 4, false, true);
        let mut s = Sample::new("p", vec![151_934, 500, 501]);
        rollout::generate(&aborting, &mut s, &cfg)
            .await
            .expect("abort");
        assert_eq!((s.status, s.response_length()), (SampleStatus::Aborted, 3));

        update_weight_version(&mock.url, "step-1").await;

        rollout::resume(&plain, &mut s, &cfg).await.expect("resume");
        assert_eq!(s.weight_versions, ["default", "step-1"]);
        assert_eq!(
            &s.loss_mask()[..3],
            [0, 0, 0],
            "the old policy's tokens are masked"
        );
        assert_aligned(&s);
    });
}
