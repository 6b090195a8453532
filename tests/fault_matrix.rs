//! Every fault kind of the mock's catalogue (`FaultKind::ALL`) against every kind of rollout (single turn,
//! multi-turn with a tool, a group, the multi-agent system), streamed and not, with retries off (the fault on
//! every request) and on (the fault on the first request only). Each case ends in one of three ways: correct
//! samples equal to the oracle, a typed error, or an ABORTED sample whose partial output is the oracle's. No case
//! panics, hangs (the whole matrix runs on tokio's paused clock, so a ten-minute `hang` passes at once) or
//! leaves a sample that breaks an invariant.

use std::time::Duration;

use mock_server::FaultKind;
use mock_server::{ScriptFinish, ScriptRule};
use mock_server::{ServerConfig, SglangVersion};
use rollout_client::multi_agent::{self, MultiAgentConfig};
use rollout_client::rollout::{self, EnvTurn, Environment, RolloutConfig};
use rollout_client::tokenize::PromptTokenizer;
use rollout_client::{
    Client, CustomParams, RetryPolicy, RolloutError, Sample, SampleStatus, SamplingParams,
};
use tokio::runtime::Runtime;

use crate::common::{Mock, Provenance, assert_aligned, assert_oracle_replay, with_channels};

/// What a fault may do to a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Slows the answer down; the rollout must succeed with the normal samples.
    Harmless,
    /// Breaks the answer; the rollout must fail with a typed error, never a sample.
    Breaks,
    /// An abort shape; the sample is ABORTED with the oracle's partial output (or complete, if generation
    /// ended before the abort point).
    Aborts,
    /// Either the normal samples or a typed error (a repeated cumulative chunk carries no new token).
    Tolerated,
}

/// The fault strings a kind is tried with, and what it does to a non-streamed and to a streamed rollout. The
/// match has no catch-all arm: a kind added to the catalogue without a case here does not compile.
fn catalogue_case(kind: FaultKind) -> (&'static [&'static str], Effect, Effect) {
    use Effect::{Aborts, Breaks, Harmless, Tolerated};
    match kind {
        FaultKind::Status => (
            &[
                "status;code=500",
                "status;code=503",
                "status;code=429;retry_after=1",
                "status;code=400",
            ],
            Breaks,
            Breaks,
        ),
        FaultKind::Delay => (&["delay;ms=1500"], Harmless, Harmless),
        FaultKind::Hang => (&["hang"], Breaks, Breaks),
        FaultKind::Reset => (&["reset"], Breaks, Breaks),
        FaultKind::MissingMetaInfo => (&["missing-meta-info"], Breaks, Breaks),
        FaultKind::MissingLogprobs => (&["missing-logprobs"], Breaks, Breaks),
        FaultKind::ShortLogprobs => (&["short-logprobs"], Breaks, Breaks),
        FaultKind::LongLogprobs => (&["long-logprobs;by=2"], Breaks, Breaks),
        FaultKind::NullLogprob => (&["null-logprob;at=1"], Breaks, Breaks),
        FaultKind::NanLogprob => (
            &[
                "nan-logprob",
                "nan-logprob;at=1;value=Infinity",
                "nan-logprob;value=-Infinity",
            ],
            Breaks,
            Breaks,
        ),
        FaultKind::PositiveLogprob => (
            &["positive-logprob;at=1", "positive-logprob;value=1e-30"],
            Breaks,
            Breaks,
        ),
        FaultKind::WrongTokenId => (&["wrong-token-id;at=1"], Breaks, Breaks),
        FaultKind::StringLogprob => (&["string-logprob"], Breaks, Breaks),
        FaultKind::TruncatedBody => (
            &["truncated-body", "truncated-body;keep=10"],
            Breaks,
            Breaks,
        ),
        // Asked of a non-streamed request, a stream framing fault is refused with a 400.
        FaultKind::TruncateStream => (&["truncate-stream;after=1"], Breaks, Breaks),
        FaultKind::CutStream => (
            &["cut-stream;after=1", "cut-stream;after=0"],
            Breaks,
            Breaks,
        ),
        FaultKind::MalformedChunk => (&["malformed-chunk"], Breaks, Breaks),
        FaultKind::DuplicateChunk => (&["duplicate-chunk;at=1"], Breaks, Tolerated),
        FaultKind::ErrorEvent => (&["error-event;after=1"], Breaks, Breaks),
        FaultKind::Stall => (&["stall;ms=250"], Harmless, Harmless),
        // These rollouts ask for no channel, so a channel's fault finds nothing to change, except in the
        // `weight_versions` spans every 0.5.23 answer carries; `every_channel_fault_meets_every_channel_rollout`
        // asks for them all.
        FaultKind::DropChannel => (
            &["drop-channel;channel=weight_versions"],
            Harmless,
            Harmless,
        ),
        FaultKind::ShortRoutes => (&["routes-short"], Harmless, Harmless),
        FaultKind::ExtraRoute => (&["routes-extra-row"], Harmless, Harmless),
        FaultKind::RetractRoutes => (&["retract-routes"], Harmless, Harmless),
        FaultKind::SpansGap => (&["spans-gap"], Breaks, Breaks),
        FaultKind::SpansOverlap => (&["spans-overlap"], Breaks, Breaks),
        FaultKind::StaleVersion => (&["stale-version"], Breaks, Breaks),
        FaultKind::MaskMissingToken => (&["mask-missing-token"], Harmless, Harmless),
        FaultKind::TwoElementLogprobs => (&["two-element-logprobs"], Breaks, Breaks),
        // Every answer here has output tokens.
        FaultKind::PhantomLogprob => (&["phantom-logprob"], Harmless, Harmless),
        FaultKind::AbortWaiting => (&["abort-waiting"], Aborts, Aborts),
        FaultKind::AbortRunning => (&["abort-running;after=2"], Aborts, Aborts),
        FaultKind::AbortBeforePrefill => (&["abort-before-prefill"], Aborts, Aborts),
    }
}

/// Whether the client's retries heal `fault` when only the first request has it: a 5xx or 429, a connection
/// that hangs or is reset, a stream broken before any byte. Everything else that breaks an answer is not retried
/// (the request or the response itself is wrong, or streamed tokens were already received).
fn heals(fault: &str, stream: bool) -> bool {
    matches!(
        fault,
        "status;code=500" | "status;code=503" | "status;code=429;retry_after=1" | "hang" | "reset"
    ) || (stream && fault == "cut-stream;after=0")
}

/// The rollouts every fault meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Single,
    MultiTurn,
    Group,
    MultiAgent,
}

const SHAPES: [Shape; 4] = [
    Shape::Single,
    Shape::MultiTurn,
    Shape::Group,
    Shape::MultiAgent,
];

/// Tokens the tool of a multi-turn rollout answers with, twice at most.
const TOOL_TOKENS: [u32; 3] = [9_001, 9_002, 9_003];
const TOOL_TURNS: usize = 2;
const MAX_NEW_TOKENS: u32 = 12;
const CONTEXT: usize = 4096;

struct Tool {
    turns: usize,
}

impl Environment for Tool {
    async fn step(&mut self, _sample: &Sample) -> Option<EnvTurn> {
        (self.turns > 0).then(|| {
            self.turns -= 1;
            EnvTurn {
                tokens: TOOL_TOKENS.to_vec(),
                text: " [tool]".into(),
            }
        })
    }
}

fn sampling() -> SamplingParams {
    SamplingParams {
        max_new_tokens: Some(MAX_NEW_TOKENS),
        sampling_seed: Some(17),
        ..SamplingParams::default()
    }
}

/// One sample of a finished rollout and what the test knows about it independently.
struct Checked {
    sample: Sample,
    params: SamplingParams,
    provenance: Provenance,
    budget: Box<dyn Fn(usize) -> u32>,
}

/// Runs one rollout of `shape`; `Err` is the rollout's typed error.
async fn run(shape: Shape, client: &Client, stream: bool) -> Result<Vec<Checked>, RolloutError> {
    let config = RolloutConfig {
        sampling_params: sampling(),
        stream,
        ..RolloutConfig::default()
    };
    run_with(shape, client, &config).await
}

/// [`run`] with `config` for the single-turn, multi-turn and group rollouts (the multi-agent system has its
/// own configuration).
async fn run_with(
    shape: Shape,
    client: &Client,
    config: &RolloutConfig,
) -> Result<Vec<Checked>, RolloutError> {
    let stream = config.stream;
    let config = config.clone();
    let whole_budget = |p: usize| MAX_NEW_TOKENS - p as u32;
    match shape {
        Shape::Single => {
            let mut s = Sample::new("p", vec![151_934, 500, 501]);
            rollout::generate(client, &mut s, &config).await?;
            Ok(vec![Checked {
                sample: s,
                params: sampling(),
                provenance: Provenance::default(),
                budget: Box::new(whole_budget),
            }])
        }
        Shape::MultiTurn => {
            let mut s = Sample::new("p", vec![151_934, 600, 601]);
            let mut tool = Tool { turns: TOOL_TURNS };
            rollout::multi_turn(client, &mut s, &config, &mut tool, TOOL_TURNS + 1).await?;
            Ok(vec![Checked {
                sample: s,
                params: sampling(),
                provenance: Provenance {
                    environment_tokens: (TOOL_TURNS - tool.turns) * TOOL_TOKENS.len(),
                    policy_masked_tokens: 0,
                    ..Provenance::default()
                },
                budget: Box::new(whole_budget),
            }])
        }
        Shape::Group => {
            let template = Sample::new("p", vec![151_934, 700, 701]);
            let group = rollout::generate_group(client, &template, 0, 3, &config, Some(40)).await?;
            Ok(group
                .into_iter()
                .enumerate()
                .map(|(i, sample)| Checked {
                    sample,
                    params: SamplingParams {
                        sampling_seed: Some(40 + i as u64),
                        ..sampling()
                    },
                    provenance: Provenance::default(),
                    budget: Box::new(whole_budget),
                })
                .collect())
        }
        Shape::MultiAgent => {
            let config = MultiAgentConfig {
                num_parallel: 2,
                rollout_max_context_len: CONTEXT,
                sampling_params: sampling(),
                stream,
                tokenizer: PromptTokenizer::Server,
                shuffle_seed: Some(3),
                ..MultiAgentConfig::default()
            };
            let mut input = Sample::new("What is 40 + 2?", vec![]);
            input.index = Some(0);
            input.label = Some("42".into());
            let rm = |_: &Sample| 1.0;
            // The system retries and records nothing for a failed call, so it never fails as a whole.
            let samples = multi_agent::run_agent_system(client, &input, &config, &rm).await;
            Ok(samples
                .into_iter()
                .map(|sample| {
                    let seed = sample.metadata["sampling_seed"].as_u64();
                    let budget =
                        (MAX_NEW_TOKENS as usize).min(CONTEXT - sample.prompt_len()) as u32;
                    Checked {
                        params: SamplingParams {
                            sampling_seed: seed,
                            ..sampling()
                        },
                        sample,
                        provenance: Provenance::default(),
                        budget: Box::new(move |_| budget),
                    }
                })
                .collect())
        }
    }
}

/// Checks one case's outcome against what its fault may do.
fn check(mock: &Mock, case: &str, effect: Effect, outcome: Result<Vec<Checked>, RolloutError>) {
    let samples = match (outcome, effect) {
        (Err(e), Effect::Breaks | Effect::Tolerated) => {
            // A typed error, with its cause chain intact down to something that names the problem.
            let mut source: &dyn std::error::Error = &e;
            while let Some(next) = source.source() {
                source = next;
            }
            assert!(!source.to_string().is_empty(), "{case}: {e:?}");
            return;
        }
        (Err(e), _) => panic!("{case}: the rollout failed: {e:?}"),
        (Ok(samples), Effect::Breaks) => {
            // Only the multi-agent system, which records nothing for a failed call, ends without an error.
            assert!(
                samples.is_empty(),
                "{case}: a broken answer became {} samples",
                samples.len()
            );
            return;
        }
        (Ok(samples), _) => samples,
    };
    for c in &samples {
        assert_aligned(&c.sample);
        assert_oracle_replay(&mock.oracle, &c.sample, &c.params, c.provenance, &c.budget);
        let aborted = c.sample.status == SampleStatus::Aborted;
        assert!(
            effect == Effect::Aborts || !aborted,
            "{case}: an ABORTED sample from a fault that does not abort"
        );
    }
}

/// A client that asks for `fault` on every request (retries off), or one that retries.
fn client(mock: &Mock, header: Option<&str>, retries: u32) -> Client {
    let mut builder = Client::builder(&mock.url).retry(RetryPolicy {
        max_retries: retries,
        initial_backoff: Duration::from_millis(50),
        seed: Some(1),
        ..RetryPolicy::default()
    });
    if let Some(fault) = header {
        builder = builder.header("X-Mock-Fault", fault);
    }
    builder.build().expect("client")
}

/// Installs a server-side rule that faults the first `/generate` request only (counters restart).
async fn fault_first_request(mock: &Mock, fault: &str) {
    let body = serde_json::json!({"rules": [{"fault": fault, "first": 1}]});
    let resp = reqwest::Client::new()
        .post(format!("{}/admin/faults", mock.url))
        .body(body.to_string())
        .send()
        .await
        .expect("admin request");
    assert!(
        resp.status().is_success(),
        "installing {fault}: {}",
        resp.status()
    );
}

fn paused_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("tokio runtime")
}

#[test]
fn every_fault_kind_meets_every_rollout_kind() {
    let rt = paused_runtime();
    // Each agent's prompt gets a scripted answer with a `</think>`, so the multi-agent system reaches its
    // rewriters and selector when nothing fails.
    let rule = |marker: &str, answer: &str| ScriptRule {
        prompt_contains: marker.to_owned(),
        answer: answer.to_owned(),
        finish_reason: ScriptFinish::Stop,
    };
    let mock = Mock::start(
        &rt,
        ServerConfig {
            scripted: vec![
                rule(multi_agent::SELECTOR_MARKER, "<think>ok</think>Judgment: 1"),
                rule(multi_agent::REWRITER_MARKER, "<think>ok</think>42"),
                rule(multi_agent::SOLVER_MARKER, "<think>hm</think>42"),
            ],
            ..ServerConfig::default()
        },
    );
    let mut cases = 0;
    for &kind in FaultKind::ALL {
        let (faults, plain, streamed) = catalogue_case(kind);
        for fault in faults {
            assert_eq!(
                fault.split(';').next(),
                Some(kind.name()),
                "{fault} is not a case of {kind}"
            );
            for shape in SHAPES {
                for stream in [false, true] {
                    let effect = if stream { streamed } else { plain };
                    // Retries off: every request carries the fault.
                    let case = format!("{fault}, {shape:?}, stream {stream}, no retries");
                    let outcome = rt.block_on(run(shape, &client(&mock, Some(fault), 0), stream));
                    check(&mock, &case, effect, outcome);
                    // Retries on: only the first request is faulted, so a retryable fault heals.
                    let case =
                        format!("{fault}, {shape:?}, stream {stream}, first request, retries");
                    rt.block_on(fault_first_request(&mock, fault));
                    let outcome = rt.block_on(run(shape, &client(&mock, None, 2), stream));
                    let effect = match effect {
                        Effect::Breaks if heals(fault, stream) => Effect::Harmless,
                        Effect::Breaks => Effect::Tolerated,
                        other => other,
                    };
                    check(&mock, &case, effect, outcome);
                    cases += 2;
                }
            }
        }
    }
    assert!(cases >= FaultKind::ALL.len() * SHAPES.len() * 4);
}

/// A client of `mock` that sends `fault` with every request and never retries.
fn faulted_client(mock: &Mock, fault: &str) -> rollout_client::ClientBuilder {
    Client::builder(&mock.url)
        .header("X-Mock-Fault", fault)
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
}

/// The samples of a rollout that must succeed, `None` for one that must fail with a typed error and did; a
/// rollout that did the other fails the test.
fn expected_outcome(
    outcome: Result<Vec<Checked>, RolloutError>,
    breaks: bool,
    case: &str,
) -> Option<Vec<Checked>> {
    match (outcome, breaks) {
        (Err(_), true) => None,
        (Err(e), false) => panic!("{case}: the rollout failed: {e:?}"),
        (Ok(_), true) => panic!("{case}: a broken channel became samples"),
        (Ok(samples), false) => Some(samples),
    }
}

/// What a channel's fault does to a rollout that asks for every channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChannelEffect {
    /// The rollout succeeds with the oracle's samples and the model's routes.
    Harmless,
    /// A typed error, never a sample.
    Breaks,
    /// The rollout succeeds, but its routes are not the model's: no check on one response can see a retract
    /// that re-captured the routes (miles #3277); replaying them against the model does.
    Misroutes,
}

/// The channel faults against rollouts that ask for routes and sampling masks (single turn, multi-turn with a
/// tool, a group), streamed and not: each is refused with a typed error naming the channel, or, for a change no
/// single response can show, caught by replaying the routes against the model.
#[test]
fn every_channel_fault_meets_every_channel_rollout() {
    use ChannelEffect::{Breaks, Harmless, Misroutes};
    let rt = paused_runtime();
    let mock = Mock::start(&rt, with_channels());
    let cases: [(&str, ChannelEffect); 12] = [
        ("drop-channel", Breaks),
        ("drop-channel;channel=sampling_mask", Breaks),
        ("drop-channel;channel=weight_versions", Harmless),
        ("routes-short", Breaks),
        ("routes-extra-row", Breaks),
        ("retract-routes", Misroutes),
        ("spans-gap", Breaks),
        ("spans-overlap", Breaks),
        ("stale-version", Breaks),
        ("mask-missing-token;at=1", Breaks),
        ("two-element-logprobs", Breaks),
        ("phantom-logprob", Harmless),
    ];
    let params = SamplingParams {
        top_k: Some(20),
        ..sampling()
    };
    for (fault, effect) in cases {
        for shape in [Shape::Single, Shape::MultiTurn, Shape::Group] {
            for stream in [false, true] {
                let case = format!("{fault}, {shape:?}, stream {stream}");
                let config = RolloutConfig {
                    sampling_params: params.clone(),
                    stream,
                    return_routed_experts: true,
                    return_sampling_mask: true,
                    ..RolloutConfig::default()
                };
                let client = faulted_client(&mock, fault).moe_shape(2, 2);
                let outcome =
                    rt.block_on(run_with(shape, &client.build().expect("client"), &config));
                let Some(samples) = expected_outcome(outcome, effect == Breaks, &case) else {
                    continue;
                };
                for c in &samples {
                    assert_aligned(&c.sample);
                    // The replay holds the routes to the model's: equal, or for a retract different.
                    assert_oracle_replay(
                        &mock.oracle,
                        &c.sample,
                        &SamplingParams {
                            sampling_seed: c.params.sampling_seed,
                            ..params.clone()
                        },
                        Provenance {
                            rerouted: effect == Misroutes,
                            ..c.provenance
                        },
                        &c.budget,
                    );
                }
            }
        }
    }
}

/// The channel faults against rollouts that ask for slime's top-p replay from its patched 0.5.15 (single turn,
/// multi-turn with a tool, a group), streamed and not: the rows dropped are a typed error naming them (slime's
/// trainer asserts on them later, far from the cause), the faults of channels this server does not send are
/// harmless, and every sample that comes through carries the server's rows and renormalised logprobs.
#[test]
fn top_p_channel_faults_meet_top_p_rollouts() {
    let rt = paused_runtime();
    let mock = Mock::start(
        &rt,
        ServerConfig {
            sglang_version: SglangVersion::V0_5_15,
            slime_patches: true,
            ..ServerConfig::default()
        },
    );
    let params = SamplingParams {
        top_p: Some(0.9),
        custom_params: Some(CustomParams {
            return_top_p_token_ids: true,
        }),
        ..sampling()
    };
    for (fault, breaks) in [
        ("drop-channel;channel=top_p", true),
        ("two-element-logprobs", true),
        ("drop-channel;channel=sampling_mask", false),
        ("phantom-logprob", false),
    ] {
        for shape in [Shape::Single, Shape::MultiTurn, Shape::Group] {
            for stream in [false, true] {
                let case = format!("{fault}, {shape:?}, stream {stream}");
                let config = RolloutConfig {
                    sampling_params: params.clone(),
                    stream,
                    ..RolloutConfig::default()
                };
                let client = faulted_client(&mock, fault).build().expect("client");
                let outcome = rt.block_on(run_with(shape, &client, &config));
                let Some(samples) = expected_outcome(outcome, breaks, &case) else {
                    continue;
                };
                for c in &samples {
                    assert_aligned(&c.sample);
                    assert!(c.sample.rollout_top_p_tokens().is_some(), "{case}: no rows");
                    assert_oracle_replay(
                        &mock.oracle,
                        &c.sample,
                        &SamplingParams {
                            sampling_seed: c.params.sampling_seed,
                            ..params.clone()
                        },
                        c.provenance,
                        &c.budget,
                    );
                }
            }
        }
    }
}
