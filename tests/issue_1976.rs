//! The #1976 path: what slime v0.3.0's multi-agent example did (kept `item[1]`, dropped `item[0]`) cannot
//! produce a sample here, run for real in Python against the mock it is refused with the sample named, the
//! fixed code's empty-list fallback is shown to lose a response that our client refuses, and a hand-assembled
//! GRPO input without rollout logprobs is a typed error that names the sample, never a panic or NaN.

use grpo::{
    AdvantageConfig, Batch, BatchError, BatchOptions, Grouping, LogProbs, LossError,
    PolicyLossConfig, SampleParts,
};
use mock_server::ServerConfig;
use proptest::prelude::*;
use rollout_client::multi_agent::{self, MultiAgentConfig};
use rollout_client::sample::read_jsonl;
use rollout_client::tokenize::PromptTokenizer;
use rollout_client::train::{self, sample_parts};
use rollout_client::{
    GenerateRequest, Reward, RolloutError, Sample, SampleError, SamplingParams, Segment,
};

use crate::common::{Mock, block_on, runner, runtime};

fn params() -> SamplingParams {
    SamplingParams {
        max_new_tokens: Some(12),
        temperature: Some(1.0),
        sampling_seed: Some(3),
        ..SamplingParams::default()
    }
}

/// The pre-fix extraction: the ids of `output_token_logprobs` without their logprobs. Every way of
/// handing them to a `Sample` is refused, and the sample is left as it was.
#[test]
fn ids_without_logprobs_cannot_become_a_sample() {
    let rt = runtime();
    let mock = Mock::start(&rt, ServerConfig::default());
    let client = mock.client();
    block_on(&rt, async {
        let prompt = vec![151_934, 872, 198, 3838, 374];
        let turn = client
            .generate(&GenerateRequest::from_ids(prompt.clone(), params()))
            .await
            .expect("generate");
        let ids = turn.output_ids.clone();
        assert!(!ids.is_empty());
        let mut s = Sample::new("p", prompt.clone());
        let before = s.clone();

        // `[item[1] for item in output_token_logprobs]` and nothing else.
        assert_eq!(
            s.append_response_tokens(Segment::Generated {
                tokens: &ids,
                log_probs: &[],
            }),
            Err(SampleError::LengthMismatch {
                tokens: ids.len(),
                log_probs: 0,
            })
        );
        assert_eq!(s, before);

        // A turn without logprobs (a request that did not ask for them) is not trainable.
        let mut no_lp = GenerateRequest::from_ids(prompt, params());
        no_lp.return_logprob = false;
        let bare = client.generate(&no_lp).await.expect("generate");
        assert_eq!(bare.logprobs, None);
        assert_eq!(
            s.apply_turn(&bare),
            Err(SampleError::TrainableWithoutLogprobs {
                tokens: bare.output_ids.len(),
            })
        );
        assert_eq!(s, before);

        // The turn with logprobs is accepted and aligned.
        s.apply_turn(&turn).expect("aligned turn");
        assert_eq!(s.rollout_log_probs().len(), ids.len());
    });
}

/// What v0.3.0 wrote for a multi-agent sample (`rollout_log_probs: None`, tokens present) cannot be
/// read back as a sample, alone or in a file.
#[test]
fn a_pre_fix_sample_record_is_refused() {
    let line = r#"{"prompt":"p","tokens":[1,2,3,4,5],"response":"x","response_length":2,"label":"42","reward":1.0,"loss_mask":null,"rollout_log_probs":null,"status":"completed","group_id":7,"reason_content":null,"response_content":null}"#;
    let err = Sample::from_json(line).unwrap_err();
    assert!(
        err.to_string()
            .contains("sample has 2 response tokens but no `rollout_log_probs`"),
        "{err}"
    );
    let file = format!(
        "{}\n{line}\n",
        line.replace(
            r#""rollout_log_probs":null"#,
            r#""rollout_log_probs":[-0.5,-0.25]"#
        )
    );
    let err = read_jsonl(file.as_bytes()).unwrap_err();
    assert!(
        err.to_string().starts_with("line 2 is not a valid sample"),
        "{err}"
    );
}

/// A batch of `lens.len()` samples whose logprobs are present where `present` says.
fn parts(lens: &[usize], present: &[bool]) -> Vec<SampleParts> {
    lens.iter()
        .zip(present)
        .enumerate()
        .map(|(i, (&len, &has))| SampleParts {
            reward: Some((i % 2) as f64),
            response_length: len,
            loss_mask: None,
            rollout_log_probs: has.then(|| (0..len).map(|t| -0.1 * (t as f32 + 1.0)).collect()),
            group_index: Some(i / 2),
            rollout_id: Some(i as u64),
            ..SampleParts::default()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::common::cases(64)))]

    /// Missing logprobs anywhere (after a shuffle, the first sample is arbitrary, which is all slime
    /// checked) are reported at the first sample without them when they are required, and as an
    /// inconsistency at the first sample that disagrees with sample 0 when they are not.
    #[test]
    fn batch_new_names_the_sample_without_logprobs(
        lens in prop::collection::vec(0usize..12, 1..24),
        seed in any::<u64>(),
        missing_share in 1u32..4,
    ) {
        let n = lens.len();
        // At least one sample lacks logprobs; which ones depends on the seed.
        let mut present: Vec<bool> = (0..n)
            .map(|i| !(seed.rotate_left(i as u32 % 64) ^ i as u64).is_multiple_of(missing_share as u64 + 1))
            .collect();
        present[(seed % n as u64) as usize] = false;
        let p = parts(&lens, &present);
        let first_missing = present.iter().position(|h| !h).unwrap();

        let required = BatchOptions { require_rollout_log_probs: true, grouping: Grouping::Single, ..BatchOptions::default() };
        prop_assert_eq!(
            Batch::new(&p, &required).unwrap_err(),
            BatchError::MissingRolloutLogProbs { sample: first_missing }
        );

        let optional = BatchOptions { require_rollout_log_probs: false, grouping: Grouping::Single, ..BatchOptions::default() };
        match present.iter().position(|&h| h != present[0]) {
            Some(sample) => prop_assert_eq!(
                Batch::new(&p, &optional).unwrap_err(),
                BatchError::InconsistentRolloutLogProbs { sample, present: present[sample], reference: 0 }
            ),
            None => {
                // None at all: the batch exists, but a loss that needs them is the typed form of
                // slime's `KeyError: 'rollout_log_probs'` / NoneType crash.
                let batch = Batch::new(&p, &optional).unwrap();
                let adv = batch.advantages(&AdvantageConfig::default());
                prop_assert!(adv.per_sample().iter().all(|a| a.is_finite()));
                let current = vec![-0.5f32; batch.num_tokens()];
                let err = batch
                    .policy_loss(&adv, &LogProbs::new(&current), &PolicyLossConfig {
                        use_rollout_log_probs: true,
                        ..PolicyLossConfig::default()
                    })
                    .unwrap_err();
                let is_missing_input = matches!(err, LossError::MissingInput { .. });
                prop_assert!(is_missing_input, "{:?}", err);
            }
        }
    }
}

/// Real multi-agent samples from the client, shuffled as `generate_with_multi_agents` does, then
/// stripped of logprobs on some samples the way v0.3.0 produced them: GRPO names the first one.
/// Without the stripping the same samples pass.
#[test]
fn shuffled_multi_agent_samples_with_dropped_logprobs_are_named() {
    let rt = runtime();
    let mock = Mock::start(&rt, ServerConfig::default());
    let client = mock.client();
    let config = MultiAgentConfig {
        rollout_max_context_len: 4096,
        sampling_params: SamplingParams {
            max_new_tokens: Some(8),
            sampling_seed: Some(11),
            ..SamplingParams::default()
        },
        tokenizer: PromptTokenizer::Server,
        shuffle_seed: Some(5),
        ..MultiAgentConfig::default()
    };
    let mut samples = block_on(&rt, async {
        let mut all = Vec::new();
        for index in 0..2 {
            let mut input = Sample::new(format!("What is {index} + 1?"), vec![]);
            input.index = Some(index);
            input.label = Some((index + 1).to_string());
            let rm = |_: &Sample| 0.0;
            all.extend(multi_agent::run_agent_system(&client, &input, &config, &rm).await);
        }
        all
    });
    assert!(samples.len() >= 2, "{} samples", samples.len());
    for s in &mut samples {
        s.reward.get_or_insert(Reward::Scalar(0.0));
    }
    let options = train::slime_options(8, 2);
    let good: Vec<SampleParts> = samples.iter().map(|s| sample_parts(s, None)).collect();
    Batch::new(&good, &options).expect("the client's samples all carry logprobs");

    let mut runner = runner(32);
    runner
        .run(
            &(
                prop::collection::vec(any::<bool>(), samples.len()),
                any::<prop::sample::Index>(),
            ),
            |(mut keep, forced)| {
                keep[forced.index(samples.len())] = false;
                let mut p = good.clone();
                for (part, &k) in p.iter_mut().zip(&keep) {
                    if !k {
                        part.rollout_log_probs = None;
                    }
                }
                let first = keep.iter().position(|k| !k).unwrap();
                prop_assert_eq!(
                    Batch::new(&p, &options).unwrap_err(),
                    BatchError::MissingRolloutLogProbs { sample: first }
                );
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Runs `tests/python/slime_extraction.py` (slime's own extraction code, in Python) and returns its output.
fn slime_extraction(args: &[String]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/slime_extraction.py");
    let output = std::process::Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "slime_extraction.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// What slime's trainer takes from a `Sample.to_dict()` record, read without our `Sample` (which would refuse
/// it): the record goes straight into `grpo`, as slime's `_convert_samples_to_train_data` hands it on.
fn parts_from_slime_record(record: &serde_json::Value) -> SampleParts {
    SampleParts {
        reward: record["reward"].as_f64(),
        response_length: record["response_length"].as_u64().expect("response_length") as usize,
        loss_mask: serde_json::from_value(record["loss_mask"].clone()).expect("a mask or null"),
        rollout_log_probs: serde_json::from_value(record["rollout_log_probs"].clone())
            .expect("logprobs or null"),
        group_index: None,
        rollout_id: record["rollout_id"].as_u64(),
        ..SampleParts::default()
    }
}

/// The bug for real: slime v0.3.0's multi-agent extraction (`item[1]` kept, `item[0]` dropped), run in Python
/// against the mock, writes samples with tokens and no logprobs. Our reader refuses the file at its first line,
/// and `grpo` refuses the records, naming the first sample without logprobs, also when a correct sample is
/// shuffled in front of it (slime only ever looked at `samples[0]`).
#[test]
fn the_pre_fix_extractor_run_against_the_mock_is_refused_naming_the_sample() {
    let rt = runtime();
    let mock = Mock::start(&rt, ServerConfig::default());
    let prompt = [151_934u32, 872, 198, 3838];
    let out = slime_extraction(&[
        "prefix".into(),
        mock.url.clone(),
        serde_json::to_string(&prompt).expect("json"),
        "4".into(),
    ]);
    let records: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(records.len(), 4);
    for r in &records {
        assert!(r["response_length"].as_u64() > Some(0), "{r}");
        assert!(r["rollout_log_probs"].is_null(), "{r}");
    }

    let err = read_jsonl(out.as_bytes()).unwrap_err();
    assert_eq!(err.to_string(), "line 1 is not a valid sample");
    let cause = std::error::Error::source(&err)
        .expect("a cause")
        .to_string();
    assert!(
        cause.contains("response tokens but no `rollout_log_probs`"),
        "{cause}"
    );

    let options = train::slime_options(4, 1);
    let mut parts: Vec<SampleParts> = records.iter().map(parts_from_slime_record).collect();
    let err = Batch::new(&parts, &options).unwrap_err();
    assert_eq!(err, BatchError::MissingRolloutLogProbs { sample: 0 });
    assert_eq!(
        err.to_string(),
        "sample 0: rollout_log_probs is missing but the batch requires rollout logprobs"
    );

    // Sample 0 done right (its real logprobs, from our client): the error moves to sample 1.
    let client = mock.client();
    let turn = block_on(
        &rt,
        client.generate(&GenerateRequest::from_ids(
            prompt.to_vec(),
            SamplingParams {
                max_new_tokens: Some(16),
                temperature: Some(1.0),
                sampling_seed: Some(0),
                ..SamplingParams::default()
            },
        )),
    )
    .expect("generate");
    assert_eq!(turn.output_ids.len(), parts[0].response_length);
    parts[0].rollout_log_probs = turn.logprobs;
    assert_eq!(
        Batch::new(&parts, &options).unwrap_err(),
        BatchError::MissingRolloutLogProbs { sample: 1 }
    );
}

/// The fixed rollout path's fallback turns a `meta_info` without `output_token_logprobs` into two empty lists: the
/// server generated a whole answer and the sample receives none of it. Our client refuses that response instead.
#[test]
fn the_fixed_fallback_loses_a_response_that_our_client_refuses() {
    let rt = runtime();
    let mock = Mock::start(&rt, ServerConfig::default());
    let prompt = vec![151_934u32, 872, 198];
    let out = slime_extraction(&[
        "fallback".into(),
        mock.url.clone(),
        serde_json::to_string(&prompt).expect("json"),
        "missing-logprobs".into(),
    ]);
    let seen: serde_json::Value = serde_json::from_str(out.trim()).expect("a JSON line");
    assert!(seen["server_output_ids"].as_u64() > Some(0), "{seen}");
    assert_ne!(seen["server_text"], "", "{seen}");
    assert_ne!(seen["finish_reason"]["type"], "abort", "{seen}");
    assert_eq!(
        seen["sample_tokens_added"], 0,
        "slime's fallback loses the response"
    );
    assert_eq!(seen["sample_log_probs_added"], 0);

    let faulty = rollout_client::Client::builder(&mock.url)
        .header("X-Mock-Fault", "missing-logprobs")
        .build()
        .expect("client");
    let err = block_on(
        &rt,
        faulty.generate(&GenerateRequest::from_ids(
            prompt,
            SamplingParams {
                max_new_tokens: Some(16),
                temperature: Some(1.0),
                sampling_seed: Some(1),
                ..SamplingParams::default()
            },
        )),
    )
    .unwrap_err();
    assert!(
        matches!(
            err.response_error(),
            Some(rollout_client::ResponseError::MissingOutputLogprobs { .. })
        ),
        "{err:?}"
    );
}

/// The error a caller sees is a typed chain, not a string: a real group rollout against a server that drops
/// `output_token_logprobs` (the response shape behind #1976) fails with the member, the URL and the missing
/// field, each a link of the source chain.
#[test]
fn rollout_errors_keep_their_cause() {
    let rt = runtime();
    let mock = Mock::start(&rt, ServerConfig::default());
    let client = rollout_client::Client::builder(&mock.url)
        .header("X-Mock-Fault", "missing-logprobs")
        .retry(rollout_client::RetryPolicy {
            max_retries: 0,
            ..rollout_client::RetryPolicy::default()
        })
        .build()
        .expect("client");
    let config = rollout_client::rollout::RolloutConfig {
        sampling_params: params(),
        ..Default::default()
    };
    let template = Sample::new("p", vec![151_934, 872, 198]);
    let err = block_on(
        &rt,
        rollout_client::rollout::generate_group(&client, &template, 4, 2, &config, Some(9)),
    )
    .unwrap_err();
    let mut chain = vec![err.to_string()];
    let mut source = std::error::Error::source(&err);
    while let Some(e) = source {
        chain.push(e.to_string());
        source = e.source();
    }
    assert!(
        chain[0].starts_with("sample ") && chain[0].ends_with(" of group 4 failed"),
        "{chain:?}"
    );
    assert_eq!(chain[1], "generation request failed");
    assert_eq!(
        chain[2],
        format!("invalid response from {}/generate", mock.url)
    );
    assert!(chain[3].contains("output_token_logprobs"), "{chain:?}");
    assert_eq!(chain.len(), 4, "{chain:?}");
    let RolloutError::GroupMember { source, .. } = &err else {
        panic!("not a group member error: {err:?}");
    };
    let RolloutError::Client(client_error) = source.as_ref() else {
        panic!("not a client error: {source:?}");
    };
    assert!(matches!(
        client_error.response_error(),
        Some(rollout_client::ResponseError::MissingOutputLogprobs { .. })
    ));
}
