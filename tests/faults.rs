//! Faulted server responses become typed client errors and never samples.
//!
//! Each case sends one rollout step with the mock's `X-Mock-Fault` header and checks the typed
//! error (looking through the stream's chunk and item wrappers) and that the sample did not change.

use mock_server::ServerConfig;
use proptest::prelude::*;
use rollout_client::rollout::{self, RolloutConfig};
use rollout_client::{
    Client, ClientError, ResponseError, RetryPolicy, RolloutError, Sample, SamplingParams,
};

use crate::common::{Mock, block_on, runner, runtime};

/// A client that asks the mock for `fault` on every request.
fn faulty(mock: &Mock, fault: &str) -> Client {
    Client::builder(&mock.url)
        .header("X-Mock-Fault", fault)
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
        .build()
        .expect("client")
}

/// The innermost response error, through chunk and item wrappers.
fn innermost(e: &ResponseError) -> &ResponseError {
    match e {
        ResponseError::Chunk { source, .. } | ResponseError::Item { source, .. } => {
            innermost(source)
        }
        other => other,
    }
}

/// A short name of what went wrong, for comparing with what a fault must cause.
fn kind(e: &RolloutError) -> String {
    let RolloutError::Client(c) = e else {
        return format!("not a client error: {e:?}");
    };
    match c {
        ClientError::Status { status, .. } => format!("Status {status}"),
        ClientError::StreamInterrupted { .. } => "StreamInterrupted".into(),
        ClientError::Transport { .. } => "Transport".into(),
        ClientError::Response { source, .. } => {
            let debug = format!("{:?}", innermost(source));
            debug
                .split([' ', '(', '{'])
                .next()
                .unwrap_or_default()
                .to_owned()
        }
        other => format!("{other:?}"),
    }
}

/// Every fault that must make a generation fail, with the error kinds it may produce, and whether it
/// applies to non-streamed requests, streamed ones or both.
const FAULTS: &[(&str, &[&str], Mode)] = &[
    ("missing-logprobs", &["MissingOutputLogprobs"], Mode::Both),
    ("missing-meta-info", &["MissingMetaInfo"], Mode::Both),
    ("null-logprob;at={at}", &["NullLogprob"], Mode::Both),
    ("nan-logprob;at={at}", &["NonFiniteLiteral"], Mode::Both),
    (
        "nan-logprob;at={at};value=-Infinity",
        &["NonFiniteLiteral"],
        Mode::Both,
    ),
    ("positive-logprob;at={at}", &["PositiveLogprob"], Mode::Both),
    (
        "positive-logprob;at={at};value=1e-30",
        &["PositiveLogprob"],
        Mode::Both,
    ),
    ("wrong-token-id;at={at}", &["TokenIdMismatch"], Mode::Both),
    ("short-logprobs", &["LengthMismatch"], Mode::Both),
    ("long-logprobs;by=2", &["LengthMismatch"], Mode::Both),
    ("string-logprob;at={at}", &["Json"], Mode::Both),
    (
        "truncated-body",
        &[
            "Json",
            "StreamEndedWithoutDone",
            "StreamInterrupted",
            "Transport",
        ],
        Mode::Both,
    ),
    (
        "truncate-stream;after={at}",
        &["StreamEndedWithoutDone"],
        Mode::Stream,
    ),
    (
        "cut-stream;after={at}",
        // Cut before any byte arrived, the break is a plain (retryable) transport error.
        &["StreamInterrupted", "StreamEndedWithoutDone", "Transport"],
        Mode::Stream,
    ),
    ("malformed-chunk;at={at}", &["Json"], Mode::Stream),
    ("error-event;after={at}", &["ServerError"], Mode::Stream),
    ("status;code=503", &["Status 503"], Mode::Both),
    ("status;code=400", &["Status 400"], Mode::Both),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Both,
    Stream,
}

#[test]
fn faulted_responses_are_typed_errors_and_never_samples() {
    let rt = runtime();
    let mock = Mock::start(&rt, ServerConfig::default());
    let strategy = (
        0..FAULTS.len(),
        any::<bool>(),
        0u64..6,
        prop::collection::vec(256u32..151_000, 1..8),
        2u32..20,
        // Seeds stay below 2^63: SGLang keeps them in an int64.
        0u64..1 << 40,
    );
    runner(48)
        .run(&strategy, |(f, stream, at, prompt, max_new, seed)| {
            let (spec, expected, mode) = FAULTS[f];
            let stream = stream || mode == Mode::Stream;
            let fault = spec.replace("{at}", &at.to_string());
            let client = faulty(&mock, &fault);
            let cfg = RolloutConfig {
                sampling_params: SamplingParams {
                    max_new_tokens: Some(max_new),
                    sampling_seed: Some(seed),
                    ..SamplingParams::default()
                },
                stream,
                ..RolloutConfig::default()
            };
            let mut sample = Sample::new("p", prompt);
            let before = sample.clone();
            // The normal answer, from the oracle: one stream chunk per token.
            let request = rollout::next_request(&sample, &cfg).expect("a budget");
            let normal = mock
                .oracle
                .expect(&serde_json::to_vec(&request).expect("encode"))
                .expect("a valid request")
                .items
                .remove(0);
            let result = block_on(&rt, rollout::generate(&client, &mut sample, &cfg));
            // A stream fault placed at or after the last chunk (whose finish_reason completes the answer)
            // loses nothing; the answer must then be exactly the normal one.
            let beyond_stream = stream
                && matches!(
                    spec.split(';').next(),
                    Some("truncate-stream" | "cut-stream" | "malformed-chunk" | "error-event")
                )
                && at >= normal.output_ids.len() as u64;
            match result {
                Err(e) => {
                    let k = kind(&e);
                    prop_assert!(
                        expected.contains(&k.as_str()),
                        "fault {} (stream {}): got {} ({:?})",
                        fault,
                        stream,
                        k,
                        e
                    );
                    prop_assert_eq!(&sample, &before, "a failed step must not change the sample");
                }
                Ok(()) => {
                    prop_assert!(
                        beyond_stream,
                        "fault {} (stream {}) produced a sample",
                        fault,
                        stream
                    );
                    crate::common::assert_aligned(&sample);
                    prop_assert_eq!(sample.response_tokens(), normal.output_ids.as_slice());
                    prop_assert_eq!(
                        sample.rollout_log_probs(),
                        normal.output_logprobs.as_slice()
                    );
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A duplicated cumulative chunk repeats a state the client already has: the result is either the
/// normal answer or an error, never a sample with a token counted twice.
#[test]
fn a_duplicated_chunk_never_duplicates_a_token() {
    let rt = runtime();
    let mock = Mock::start(&rt, ServerConfig::default());
    let plain = mock.client();
    runner(16)
        .run(
            &(0u64..8, 2u32..16, 0u64..1 << 40),
            |(at, max_new, seed)| {
                let cfg = RolloutConfig {
                    sampling_params: SamplingParams {
                        max_new_tokens: Some(max_new),
                        sampling_seed: Some(seed),
                        ..SamplingParams::default()
                    },
                    stream: true,
                    ..RolloutConfig::default()
                };
                let client = faulty(&mock, &format!("duplicate-chunk;at={at}"));
                let mut want = Sample::new("p", vec![300, 301, 302]);
                block_on(&rt, rollout::generate(&plain, &mut want, &cfg)).expect("normal answer");
                let mut got = Sample::new("p", vec![300, 301, 302]);
                if block_on(&rt, rollout::generate(&client, &mut got, &cfg)).is_ok() {
                    prop_assert_eq!(got.response_tokens(), want.response_tokens());
                    prop_assert_eq!(got.rollout_log_probs(), want.rollout_log_probs());
                } else {
                    prop_assert_eq!(got.response_length(), 0);
                }
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The abort shapes without output (waiting queue; 0.5.3's before prefill, which has no logprob
/// key at all) are answers, not faults: the sample becomes ABORTED with nothing appended, so it
/// can be resumed, and it never holds a token without a logprob.
#[test]
fn empty_aborts_leave_a_resumable_sample() {
    let rt = runtime();
    let mock = Mock::start(&rt, ServerConfig::default());
    let plain = mock.client();
    for fault in ["abort-waiting", "abort-before-prefill"] {
        for stream in [false, true] {
            let cfg = RolloutConfig {
                sampling_params: SamplingParams {
                    max_new_tokens: Some(8),
                    sampling_seed: Some(2),
                    ..SamplingParams::default()
                },
                stream,
                ..RolloutConfig::default()
            };
            let mut s = Sample::new("p", vec![400, 401]);
            block_on(&rt, rollout::generate(&faulty(&mock, fault), &mut s, &cfg))
                .unwrap_or_else(|e| panic!("{fault} (stream {stream}): {e:?}"));
            assert_eq!(s.status, rollout_client::SampleStatus::Aborted, "{fault}");
            assert_eq!(s.response_length(), 0, "{fault}");
            block_on(&rt, rollout::resume(&plain, &mut s, &cfg)).expect("resume");
            crate::common::assert_aligned(&s);
            assert!(s.response_length() > 0);
        }
    }
}
