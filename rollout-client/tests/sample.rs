//! `Sample`: invariants (including proptest over random appends), status mapping, JSONL.

use proptest::prelude::*;
use rollout_client::sample::{read_jsonl, write_jsonl};
use rollout_client::turn::parse_single;
use rollout_client::{Sample, SampleError, SampleStatus, Segment};

use crate::common::data;

fn sample() -> Sample {
    Sample::new(
        "What is the capital of France?",
        vec![151644, 872, 198, 3838, 374],
    )
}

#[test]
fn trainable_and_environment_tokens() {
    let mut s = sample();
    s.append_response_tokens(Segment::Generated {
        tokens: &[1, 2],
        log_probs: &[-0.5, -0.25],
    })
    .unwrap();
    s.append_environment(&[9, 9, 9], "<tool>").unwrap();
    s.append_response_tokens(Segment::Generated {
        tokens: &[3],
        log_probs: &[0.0],
    })
    .unwrap();
    assert_eq!(s.tokens(), [151644, 872, 198, 3838, 374, 1, 2, 9, 9, 9, 3]);
    assert_eq!((s.prompt_len(), s.response_length()), (5, 6));
    assert_eq!(s.response_tokens(), [1, 2, 9, 9, 9, 3]);
    assert_eq!(s.loss_mask(), [1, 1, 0, 0, 0, 1]);
    assert_eq!(s.rollout_log_probs(), [-0.5, -0.25, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(s.effective_response_length(), 3);
    assert_eq!(s.response, "<tool>");
    // Each generation is a span; the environment output between them is not.
    let spans: Vec<(usize, usize)> = s
        .generated_spans()
        .iter()
        .map(|g| (g.start, g.len))
        .collect();
    assert_eq!(spans, [(0, 2), (5, 1)]);
    assert_eq!((s.generated_tokens(), s.policy_masked_tokens()), (3, 0));
}

/// The record a sample keeps of its generated tokens survives JSON, and a record that contradicts its masks or
/// logprobs is refused with the reason.
#[test]
fn generated_spans_account_for_every_response_token() {
    let mut s = sample();
    s.append_response_tokens(Segment::Generated {
        tokens: &[1, 2],
        log_probs: &[-0.5, -0.25],
    })
    .unwrap();
    s.append_environment(&[9], "<tool>").unwrap();
    s.mask_offpolicy_prefix();
    s.append_response_tokens(Segment::Generated {
        tokens: &[3],
        log_probs: &[-2.0],
    })
    .unwrap();
    assert_eq!(
        (
            s.generated_tokens(),
            s.effective_response_length(),
            s.policy_masked_tokens()
        ),
        (3, 1, 2)
    );
    let line = s.to_json().unwrap();
    assert_eq!(Sample::from_json(&line).unwrap(), s);

    let edit = |from: &str, to: &str| {
        assert!(line.contains(from), "{line}");
        Sample::from_json(&line.replace(from, to))
            .unwrap_err()
            .to_string()
    };
    // A generated token left untrained without a policy: the #1976 class in its quiet form.
    let err = edit(r#""policy_masked_tokens":2"#, r#""policy_masked_tokens":0"#);
    assert!(
        err.contains("2 generated tokens have loss mask 0 but only 0 were masked"),
        "{err}"
    );
    // The environment token trained on.
    let err = edit(r#""loss_mask":[0,0,0,1]"#, r#""loss_mask":[0,0,1,1]"#);
    assert!(
        err.contains("response token 2 lies outside every generated span"),
        "{err}"
    );
    // Spans that overlap or run past the response.
    let err = edit(r#"{"start":3,"len":1}"#, r#"{"start":3,"len":2}"#);
    assert!(
        err.contains("generated span 3..5 is out of order or outside"),
        "{err}"
    );
}

/// slime writes no spans: they are inferred, a mask-0 token with a real logprob counting as generated and
/// masked by a policy.
#[test]
fn spans_are_inferred_for_records_written_by_slime() {
    let line = r#"{"prompt":"p","tokens":[1,2,3,4,5,6],"response_length":5,"loss_mask":[0,1,0,0,1],"rollout_log_probs":[-0.5,-0.25,0.0,0.0,-1.0],"status":"completed"}"#;
    let s = Sample::from_json(line).unwrap();
    let spans: Vec<(usize, usize)> = s
        .generated_spans()
        .iter()
        .map(|g| (g.start, g.len))
        .collect();
    assert_eq!(spans, [(0, 2), (4, 1)]);
    assert_eq!((s.generated_tokens(), s.policy_masked_tokens()), (3, 1));
}

/// A zero-filled logprob list (what a fallback writes once the engine's values are lost) is refused; one trained
/// token with probability 1 is not.
#[test]
fn placeholder_logprobs_are_refused() {
    let zeros = r#"{"prompt":"p","tokens":[1,2,3,4],"response_length":3,"loss_mask":[1,1,1],"rollout_log_probs":[0.0,0.0,0.0]}"#;
    assert_eq!(
        Sample::from_json(zeros).unwrap_err().to_string(),
        "all 3 trained log probs are exactly 0.0: placeholder values (a zero-filled list), not the rollout \
         engine's"
    );
    let one = r#"{"prompt":"p","tokens":[1,2],"response_length":1,"loss_mask":[1],"rollout_log_probs":[0.0]}"#;
    assert!(Sample::from_json(one).is_ok());
    let mixed = zeros.replace("[0.0,0.0,0.0]", "[0.0,-0.1,0.0]");
    assert!(Sample::from_json(&mixed).is_ok());
}

#[test]
fn bad_appends_are_refused_and_change_nothing() {
    let mut s = sample();
    s.append_response_tokens(Segment::Generated {
        tokens: &[1],
        log_probs: &[-1.0],
    })
    .unwrap();
    let before = s.clone();
    let cases: &[(&[u32], &[f32], SampleError)] = &[
        (
            &[1, 2],
            &[-1.0],
            SampleError::LengthMismatch {
                tokens: 2,
                log_probs: 1,
            },
        ),
        (
            &[1, 2],
            &[-1.0, f32::NAN],
            SampleError::NonFiniteLogprob {
                index: 2,
                value: f32::NAN,
            },
        ),
        (
            &[1],
            &[f32::NEG_INFINITY],
            SampleError::NonFiniteLogprob {
                index: 1,
                value: f32::NEG_INFINITY,
            },
        ),
        (
            &[1],
            &[0.25],
            SampleError::PositiveLogprob {
                index: 1,
                value: 0.25,
            },
        ),
    ];
    for (tokens, log_probs, want) in cases {
        let err = s
            .append_response_tokens(Segment::Generated { tokens, log_probs })
            .unwrap_err();
        // NaN != NaN, so compare the rendering.
        assert_eq!(format!("{err:?}"), format!("{want:?}"));
        assert_eq!(format!("{s:?}"), format!("{before:?}"));
    }
    assert_eq!(
        s.set_prompt_tokens(vec![1]).unwrap_err(),
        SampleError::PromptAfterResponse { response_length: 1 }
    );
}

#[test]
fn apply_turn_sets_status_weight_version_and_cache_info() {
    let mut s = sample();
    let t = parse_single(&data("7_1_single_mid.json"), true).unwrap();
    s.apply_turn(&t).unwrap();
    assert_eq!(s.status, SampleStatus::Completed);
    assert_eq!(s.response, " Paris.");
    assert_eq!(s.rollout_log_probs(), [-0.2031, -0.5522, -0.0104]);
    assert_eq!(s.weight_versions, ["default"]);
    assert_eq!(s.prefix_cache_info.total_prompt_tokens, 5);

    for (file, status) in [
        ("7_3_nonstream.json", SampleStatus::Truncated),
        ("7_5_abort_running.json", SampleStatus::Aborted),
    ] {
        let mut s = sample();
        s.apply_turn(&parse_single(&data(file), true).unwrap())
            .unwrap();
        assert_eq!(s.status, status, "{file}");
    }
    // An unknown finish type leaves the status alone, as slime does.
    let mut s = sample();
    s.apply_turn(&parse_single(&data("unknown_finish_type.json"), true).unwrap())
        .unwrap();
    assert_eq!(s.status, SampleStatus::Pending);
}

#[test]
fn abort_without_logprobs_keeps_earlier_data() {
    let mut s = sample();
    s.apply_turn(&parse_single(&data("7_5_abort_running.json"), true).unwrap())
        .unwrap();
    let before = (
        s.tokens().to_vec(),
        s.rollout_log_probs().to_vec(),
        s.response.clone(),
    );
    s.apply_turn(&parse_single(&data("abort_no_logprob_key_partial_ids.json"), true).unwrap())
        .unwrap();
    assert_eq!(s.status, SampleStatus::Aborted);
    assert_eq!(
        (
            s.tokens().to_vec(),
            s.rollout_log_probs().to_vec(),
            s.response.clone()
        ),
        before
    );
}

#[test]
fn a_turn_without_logprobs_cannot_be_trained_on() {
    let mut s = sample();
    let t = parse_single(&data("no_logprobs_requested.json"), false).unwrap();
    assert_eq!(
        s.apply_turn(&t).unwrap_err(),
        SampleError::TrainableWithoutLogprobs { tokens: 2 }
    );
    assert_eq!(s.response_length(), 0);
}

#[test]
fn offpolicy_masking() {
    let mut s = sample();
    s.apply_turn(&parse_single(&data("7_5_abort_running.json"), true).unwrap())
        .unwrap();
    s.mask_offpolicy_prefix();
    s.append_response_tokens(Segment::Generated {
        tokens: &[5],
        log_probs: &[-0.1],
    })
    .unwrap();
    assert_eq!(s.loss_mask(), [0, 0, 1]);
    assert_eq!(s.rollout_log_probs(), [-0.75, -0.5, -0.1]);
}

#[test]
fn jsonl_uses_slime_keys_and_round_trips() {
    let mut s = sample();
    s.group_index = Some(3);
    s.index = Some(25);
    s.label = Some("Paris".into());
    s.apply_turn(&parse_single(&data("7_1_single_mid.json"), true).unwrap())
        .unwrap();
    s.append_environment(&[7, 8], " ok").unwrap();
    s.extra
        .insert("reason_content".into(), serde_json::json!("think"));
    let mut buf = Vec::new();
    write_jsonl(&mut buf, [&s, &sample()]).unwrap();
    let line = std::str::from_utf8(&buf).unwrap().lines().next().unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    for k in [
        "group_index",
        "index",
        "rollout_id",
        "prompt",
        "tokens",
        "multimodal_inputs",
        "multimodal_train_inputs",
        "multimodal_train_input_id",
        "apply_chat_template_kwargs",
        "response",
        "response_length",
        "label",
        "reward",
        "loss_mask",
        "weight_versions",
        "rollout_log_probs",
        "rollout_top_p_token_ids",
        "rollout_top_p_token_offsets",
        "rollout_routed_experts",
        "remove_sample",
        "teacher_log_probs",
        "status",
        "metadata",
        "generate_function_path",
        "custom_rm_path",
        "train_metadata",
        "session_id",
        "non_generation_time",
        "spec_info",
        "prefix_cache_info",
        "reason_content",
    ] {
        assert!(keys.contains(&k), "missing key {k} in {keys:?}");
    }
    assert_eq!(v["status"], "completed");
    assert_eq!(v["loss_mask"], serde_json::json!([1, 1, 1, 0, 0]));
    // f32 written as f32: -0.5522, not -0.5522000193595886.
    assert!(line.contains("[-0.2031,-0.5522,-0.0104,0.0,0.0]"), "{line}");
    assert_eq!(v["prefix_cache_info"]["total_prompt_tokens"], 5);

    let back = read_jsonl(buf.as_slice()).unwrap();
    assert_eq!(back, vec![s, sample()]);
}

#[test]
fn jsonl_from_python_is_checked() {
    // What Python's to_dict() can hold: None lists, v0.3.0's group_id.
    let ok = r#"{"prompt":"p","tokens":[1,2,3],"response_length":1,"loss_mask":null,"rollout_log_probs":[-0.5],"status":"truncated","group_id":4}"#;
    let s = Sample::from_json(ok).unwrap();
    assert_eq!(
        (s.loss_mask(), s.rollout_id, s.status),
        (&[1u8][..], Some(4), SampleStatus::Truncated)
    );
    for (bad, want) in [
        (
            r#"{"tokens":[1,2],"response_length":1,"rollout_log_probs":null}"#,
            "has 1 response tokens but no `rollout_log_probs`",
        ),
        (
            r#"{"tokens":[1,2],"response_length":1,"rollout_log_probs":[-0.5,-0.5]}"#,
            "sample invariant broken",
        ),
        (
            r#"{"tokens":[1],"response_length":2,"rollout_log_probs":[-0.5,-0.5]}"#,
            "sample invariant broken",
        ),
        (
            r#"{"tokens":[1,2],"response_length":1,"rollout_log_probs":[0.5]}"#,
            "is 0.5, but a log-probability is <= 0",
        ),
        (
            r#"{"tokens":[1,2],"response_length":1,"rollout_log_probs":[-0.5],"loss_mask":[2]}"#,
            "loss mask at response index 0 is 2",
        ),
    ] {
        let e = Sample::from_json(bad).unwrap_err().to_string();
        assert!(e.contains(want), "{bad}: {e}");
    }
    let e = read_jsonl(&b"\n{\"tokens\":[1],\"status\":\"weird\"}\n"[..]).unwrap_err();
    assert!(
        e.to_string().starts_with("line 2 is not a valid sample"),
        "{e}"
    );
}

/// One random operation on a sample.
#[derive(Debug, Clone)]
enum Op {
    Generated(Vec<u32>, Vec<f32>),
    Environment(Vec<u32>),
    /// Lengths that disagree, or an impossible logprob: must be refused.
    Bad(Vec<u32>, Vec<f32>),
    Abort(Vec<u32>, Vec<f32>),
    Mask,
}

fn op() -> impl Strategy<Value = Op> {
    let lp = -20.0f32..=0.0;
    prop_oneof![
        4 => (0usize..8).prop_flat_map(move |n| (
            prop::collection::vec(any::<u32>(), n),
            prop::collection::vec(lp.clone(), n)
        )).prop_map(|(t, l)| Op::Generated(t, l)),
        2 => prop::collection::vec(any::<u32>(), 0..6).prop_map(Op::Environment),
        2 => (prop::collection::vec(any::<u32>(), 1..5), prop::collection::vec(
            prop_oneof![Just(f32::NAN), Just(f32::INFINITY), Just(f32::NEG_INFINITY), 0.001f32..5.0, -1.0f32..0.0], 0..5
        )).prop_map(|(t, l)| Op::Bad(t, l)),
        1 => (0usize..4).prop_flat_map(|n| (
            prop::collection::vec(any::<u32>(), n),
            prop::collection::vec(-5.0f32..=0.0, n)
        )).prop_map(|(t, l)| Op::Abort(t, l)),
        1 => Just(Op::Mask),
    ]
}

proptest! {
    #[test]
    fn invariants_hold_after_any_sequence(prompt in prop::collection::vec(any::<u32>(), 0..10), ops in prop::collection::vec(op(), 0..30)) {
        let mut s = Sample::new("p", prompt.clone());
        // A model of what the sample must contain.
        let (mut toks, mut lps, mut mask) = (prompt.clone(), Vec::<f32>::new(), Vec::<u8>::new());
        for op in ops {
            match op {
                Op::Generated(t, l) => {
                    s.append_response_tokens(Segment::Generated { tokens: &t, log_probs: &l }).unwrap();
                    toks.extend(&t); lps.extend(&l); mask.extend(std::iter::repeat_n(1, t.len()));
                }
                Op::Environment(t) => {
                    s.append_environment(&t, "env").unwrap();
                    toks.extend(&t); lps.extend(std::iter::repeat_n(0.0, t.len())); mask.extend(std::iter::repeat_n(0, t.len()));
                }
                Op::Bad(t, l) => {
                    let valid = t.len() == l.len() && l.iter().all(|x| x.is_finite() && *x <= 0.0);
                    let before = format!("{s:?}");
                    let r = s.append_response_tokens(Segment::Generated { tokens: &t, log_probs: &l });
                    if valid {
                        prop_assert!(r.is_ok());
                        toks.extend(&t); lps.extend(&l); mask.extend(std::iter::repeat_n(1, t.len()));
                    } else {
                        prop_assert!(r.is_err());
                        prop_assert_eq!(format!("{s:?}"), before);
                    }
                }
                Op::Abort(t, l) => {
                    // A partial generation cut by an abort, then resumed later.
                    let triples: Vec<String> = t.iter().zip(&l).map(|(id, lp)| format!("[{lp},{id},null]")).collect();
                    let body = format!(
                        r#"{{"text":"","output_ids":{t:?},"meta_info":{{"finish_reason":{{"type":"abort","message":"Aborted","status_code":null,"err_type":null}},"output_token_logprobs":[{}]}}}}"#,
                        triples.join(",")
                    );
                    let turn = rollout_client::turn::parse_single(body.as_bytes(), true).unwrap();
                    s.apply_turn(&turn).unwrap();
                    prop_assert_eq!(s.status, SampleStatus::Aborted);
                    toks.extend(&t); lps.extend(&l); mask.extend(std::iter::repeat_n(1, t.len()));
                }
                Op::Mask => {
                    s.mask_offpolicy_prefix();
                    mask.iter_mut().for_each(|m| *m = 0);
                }
            }
            prop_assert!(s.check_invariants().is_ok());
            prop_assert_eq!(s.tokens().len(), prompt.len() + s.response_length());
            prop_assert_eq!(s.rollout_log_probs().len(), s.response_length());
            prop_assert_eq!(s.loss_mask().len(), s.response_length());
            prop_assert!(s.rollout_log_probs().iter().all(|x| x.is_finite() && *x <= 0.0));
            prop_assert_eq!(s.tokens(), toks.as_slice());
            prop_assert_eq!(s.rollout_log_probs(), lps.as_slice());
            prop_assert_eq!(s.loss_mask(), mask.as_slice());
        }
        // And the JSONL round trip preserves all of it.
        let back = Sample::from_json(&s.to_json().unwrap()).unwrap();
        prop_assert_eq!(back.tokens(), s.tokens());
        prop_assert_eq!(back.rollout_log_probs(), s.rollout_log_probs());
        prop_assert_eq!(back.loss_mask(), s.loss_mask());
    }
}

/// A non-stream body with `n` generated tokens (logprob -0.5 each) and the given counters.
fn turn_body(n: u32, prompt: u32, cached: u32, verify: Option<u32>) -> Vec<u8> {
    let ids: Vec<u32> = (100..100 + n).collect();
    let lps: Vec<_> = ids
        .iter()
        .map(|i| serde_json::json!([-0.5, i, null]))
        .collect();
    let mut meta = serde_json::json!({
        "id": "t", "finish_reason": {"type": "length", "length": n}, "prompt_tokens": prompt,
        "completion_tokens": n, "cached_tokens": cached, "output_token_logprobs": lps,
    });
    if let Some(v) = verify {
        meta["spec_verify_ct"] = v.into();
    }
    serde_json::json!({"text": "x", "output_ids": ids, "meta_info": meta})
        .to_string()
        .into_bytes()
}

#[test]
fn apply_turn_adds_up_the_engine_counters_over_turns() {
    let mut s = sample();
    s.apply_turn(&parse_single(&turn_body(5, 5, 3, Some(2)), true).unwrap())
        .unwrap();
    s.apply_turn(&parse_single(&turn_body(2, 9, 4, Some(1)), true).unwrap())
        .unwrap();
    s.apply_turn(&parse_single(&turn_body(1, 12, 0, None), true).unwrap())
        .unwrap();
    assert_eq!(s.prefix_cache_info.cached_tokens, 3 + 4);
    assert_eq!(s.prefix_cache_info.total_prompt_tokens, 5 + 9 + 12);
    // Verify steps 2 + 1 over 5 + 2 tokens: the other 3 + 1 were accepted drafts. The third turn
    // reports no speculative decoding and adds nothing.
    assert_eq!(s.spec_info.spec_verify_ct, 3);
    assert_eq!(s.spec_info.completion_token_num, 7);
    assert_eq!(s.spec_info.spec_accept_token_num, 4);
    assert_eq!(s.response_length(), 8);
}

#[test]
fn an_empty_turn_needs_no_logprobs() {
    let body = br#"{"text":"","output_ids":[],"meta_info":{"id":"a","finish_reason":{"type":"abort","message":"Abort before prefill"},"prompt_tokens":5,"completion_tokens":0,"cached_tokens":0}}"#;
    let mut s = sample();
    let t = parse_single(body, false).unwrap();
    assert!(t.logprobs.is_none());
    s.apply_turn(&t).unwrap();
    assert_eq!(s.status, SampleStatus::Aborted);
    assert_eq!(s.response_length(), 0);
}

#[test]
fn derive_keeps_identity_and_bookkeeping_and_nothing_else() {
    let mut t = sample();
    t.group_index = Some(2);
    t.index = Some(9);
    t.rollout_id = Some(4);
    t.label = Some("42".into());
    t.metadata.insert("k".into(), "v".into());
    t.session_id = Some("s".into());
    t.generate_function_path = Some("gen.py".into());
    t.custom_rm_path = Some("rm.py".into());
    t.train_metadata = serde_json::json!({"w": 1}).as_object().cloned();
    t.apply_turn(&parse_single(&data("7_1_single_mid.json"), true).unwrap())
        .unwrap();
    let d = t.derive("other", vec![7, 8]);
    assert_eq!(
        (d.group_index, d.index, d.rollout_id, d.label.as_deref()),
        (Some(2), Some(9), Some(4), Some("42"))
    );
    assert_eq!(d.metadata, t.metadata);
    assert_eq!(d.session_id.as_deref(), Some("s"));
    assert_eq!(d.generate_function_path.as_deref(), Some("gen.py"));
    assert_eq!(d.custom_rm_path.as_deref(), Some("rm.py"));
    assert_eq!(d.train_metadata, t.train_metadata);
    assert_eq!(d.prompt, rollout_client::Prompt::from("other"));
    assert_eq!(d.prompt, rollout_client::Prompt::Text("other".into()));
    assert_eq!(d.prompt_tokens(), [7, 8]);
    assert_eq!((d.response_length(), d.status), (0, SampleStatus::Pending));
    assert!(d.response.is_empty() && d.weight_versions.is_empty());
}

#[test]
fn prompt_and_response_tokens_split_at_the_response_length() {
    let mut s = sample();
    s.apply_turn(&parse_single(&data("7_1_single_mid.json"), true).unwrap())
        .unwrap();
    assert_eq!(s.prompt_tokens(), [151644, 872, 198, 3838, 374]);
    assert_eq!(s.response_tokens().len(), 3);
    assert_eq!(s.tokens().len(), 8);
}

#[test]
fn a_pending_record_needs_no_logprobs() {
    // slime writes `rollout_log_probs: None` until something was generated.
    let s = Sample::from_json(r#"{"prompt":"p","tokens":[1,2],"response_length":0,"rollout_log_probs":null,"status":"pending"}"#)
        .unwrap();
    assert_eq!(
        (s.response_length(), s.prompt_tokens()),
        (0, &[1u32, 2][..])
    );
}

#[test]
fn unreadable_lines_are_named() {
    let ok = sample().to_json().unwrap();
    let mut input = format!("{ok}\n").into_bytes();
    input.extend(b"\xff\xfe\n");
    let e = read_jsonl(input.as_slice()).unwrap_err();
    assert_eq!(e.to_string(), "could not read line 2");
}
