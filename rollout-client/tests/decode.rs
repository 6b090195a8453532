//! Non-stream bodies from `tests/data/`: every shape of spec sections 2 and 7 and every malformed variant.

use rollout_client::decode;
use rollout_client::turn::{parse_many, parse_single};
use rollout_client::wire::{self, ResponseBody};
use rollout_client::{FinishReason, ResponseError, StopMatch};

use crate::common::{check, data};

fn single(name: &str) -> Result<Vec<rollout_client::Turn>, ResponseError> {
    parse_single(&data(name), true).map(|t| vec![t])
}

#[test]
fn spec_7_1_mid_and_latest() {
    let expected = r#"stop (token 151645) ids=[12095, 13, 151645] lps=Some([-0.2031, -0.5522, -0.0104]) text=" Paris.""#;
    check(single("7_1_single_mid.json"), expected);
    check(single("7_1_single_latest.json"), expected);
    check(single("7_2_text_in_logprobs.json"), expected);
}

#[test]
fn spec_7_1_keeps_meta_info_and_top_logprobs() {
    let t = parse_single(&data("7_1_single_mid.json"), true).unwrap();
    let m = &t.meta_info;
    assert_eq!(m.id.as_deref(), Some("5f0c1e0b9a3d4c7e8f1a2b3c4d5e6f70"));
    assert_eq!(
        (m.prompt_tokens, m.completion_tokens, m.cached_tokens),
        (Some(5), Some(3), Some(0))
    );
    assert_eq!(m.weight_version.as_deref(), Some("default"));
    assert_eq!(m.e2e_latency, Some(0.0412));
    let input = m.input_token_logprobs.as_ref().unwrap();
    assert_eq!(
        (input.ids.as_slice(), input.nulls.as_slice()),
        (&[374][..], &[0][..])
    );
    let top = m.output_top_logprobs.as_ref().unwrap();
    assert_eq!(top.len(), 3);
    let second = &top[1].as_ref().unwrap()[1];
    assert_eq!(
        (second.logprob, second.token_id, second.text.as_deref()),
        (Some(-1.0833), 11, None)
    );
    assert_eq!(m.input_top_logprobs.as_deref(), Some(&[None][..]));

    let latest = parse_single(&data("7_1_single_latest.json"), true)
        .unwrap()
        .meta_info;
    assert_eq!(latest.output_token_logprobs_length, Some(3));
    assert_eq!(
        (latest.num_retractions, latest.reasoning_tokens),
        (Some(0), Some(0))
    );
    assert_eq!(latest.response_sent_to_client_ts, Some(1767225600.123));
    assert!(latest.input_token_logprobs.unwrap().is_empty());
}

#[test]
fn text_in_logprobs_is_read_but_not_kept_per_token() {
    let t = parse_single(&data("7_2_text_in_logprobs.json"), true).unwrap();
    assert_eq!(t.text, " Paris.");
    assert_eq!(t.output_ids, [12095, 13, 151645]);
}

#[test]
fn finish_reason_shapes() {
    let cases: &[(&str, FinishReason)] = &[
        (
            "7_1_single_mid.json",
            FinishReason::Stop {
                matched: Some(StopMatch::Token(151645)),
            },
        ),
        (
            "stop_matched_str.json",
            FinishReason::Stop {
                matched: Some(StopMatch::Text("\n\n".into())),
            },
        ),
        ("7_3_nonstream.json", FinishReason::Length { length: 3 }),
        (
            "7_5_abort_waiting_queue.json",
            FinishReason::Abort {
                message: Some("Abort in waiting queue".into()),
                status_code: None,
                err_type: None,
            },
        ),
        (
            "7_5_abort_running.json",
            FinishReason::Abort {
                message: Some("Aborted".into()),
                status_code: None,
                err_type: None,
            },
        ),
        (
            "abort_status_400.json",
            FinishReason::Abort {
                message: Some(
                    "req.logprob_start_len=9 is higher than the number of input tokens".into(),
                ),
                status_code: Some(400),
                err_type: Some("BadRequestError".into()),
            },
        ),
        (
            "unknown_finish_type.json",
            FinishReason::Other {
                kind: "timeout".into(),
            },
        ),
    ];
    for (name, want) in cases {
        let t = parse_single(&data(name), true).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(&t.finish_reason, want, "{name}");
    }
}

#[test]
fn statuses_follow_finish_reason() {
    use rollout_client::SampleStatus::*;
    for (name, want) in [
        ("7_1_single_mid.json", Some(Completed)),
        ("7_3_nonstream.json", Some(Truncated)),
        ("7_5_abort_running.json", Some(Aborted)),
        ("unknown_finish_type.json", None),
    ] {
        let turn = parse_single(&data(name), true).unwrap();
        assert_eq!(turn.status(), want, "{name}");
        assert_eq!(turn.is_abort(), want == Some(Aborted), "{name}");
    }
    // The wire `type` string, whatever the finish.
    for (name, kind) in [
        ("7_1_single_mid.json", "stop"),
        ("7_3_nonstream.json", "length"),
        ("7_5_abort_running.json", "abort"),
        ("unknown_finish_type.json", "timeout"),
    ] {
        let turn = parse_single(&data(name), true).unwrap();
        assert_eq!(turn.finish_reason.kind(), kind, "{name}");
    }
}

#[test]
fn aborts() {
    check(
        single("7_5_abort_waiting_queue.json"),
        r#"abort ("Abort in waiting queue") ids=[] lps=Some([]) text="""#,
    );
    // Running abort keeps the partial tokens with their logprobs; completion_tokens (7) is not
    // held against an abort.
    check(
        single("7_5_abort_running.json"),
        r#"abort ("Aborted") ids=[101, 102] lps=Some([-0.75, -0.5]) text=" partial""#,
    );
    // 0.5.3's "Abort before prefill": no output_ids and no logprobs at all.
    check(
        single("abort_before_prefill_mid.json"),
        r#"abort ("Abort before prefill") ids=[] lps=Some([]) text="""#,
    );
    check(
        single("abort_status_400.json"),
        r#"abort ("req.logprob_start_len"#,
    );
    // Logprobs missing on an abort: an empty ABORTED turn, never ids without logprobs.
    check(
        single("abort_no_logprob_key_partial_ids.json"),
        r#"abort ("Unknown error") ids=[] lps=Some([]) text="""#,
    );
}

#[test]
fn other_valid_shapes() {
    check(
        single("max_new_tokens_0.json"),
        r#"length (0) ids=[] lps=Some([]) text="""#,
    );
    check(
        single("stop_matched_str.json"),
        r#"stop ("\n\n") ids=[785, 4226, 13, 13] lps=Some([-1.0, -0.5, -0.25, 0.0])"#,
    );
    // Ids above 100,000 and up to u32::MAX; a subnormal logprob stays finite.
    check(
        single("large_ids.json"),
        "length (2) ids=[151645, 4294967295] lps=Some([-3.0, -1e-45])",
    );
    // Very old servers: no output_ids, so the ids come from the triples (slime's item[1]).
    check(
        single("old_no_output_ids.json"),
        "stop (token 151645) ids=[12095, 13, 151645] lps=Some([-0.2031, -0.5522, -0.0104])",
    );
    check(
        parse_single(&data("no_logprobs_requested.json"), false).map(|t| vec![t]),
        r#"length (2) ids=[1052, 0] lps=None text=" there""#,
    );
}

#[test]
fn batch_and_n_arrays() {
    check(
        parse_many(&data("7_4_batch.json"), false),
        "length (8) ids=[1052, 0, 2585, 646, 358, 1492, 498, 3351] lps=None text=\" there! How can I help\"\n\
         stop (token 151643) ids=[19, 151643] lps=None text=\"4\"",
    );
    check(
        parse_many(&data("n2_logprobs.json"), true),
        "length (2) ids=[5, 6] lps=Some([-0.5, -0.25]) text=\"x\"\nstop (token 2) ids=[7, 2] lps=Some([-1.5, -0.125])",
    );
    // A single object is a batch of one; an array where one object is expected is an error.
    assert_eq!(
        parse_many(&data("7_1_single_mid.json"), true)
            .unwrap()
            .len(),
        1
    );
    check(single("n2_logprobs.json"), "ExpectedObject { len: 2 }");
    assert!(
        matches!(decode::decode_body(b" \n[]").unwrap(), ResponseBody::Many(v) if v.is_empty())
    );
}

#[test]
fn malformed_bodies_are_typed_errors() {
    let cases: &[(&str, &str)] = &[
        ("bad_missing_meta_info.json", "MissingMetaInfo"),
        (
            "bad_missing_logprobs.json",
            r#"MissingOutputLogprobs { finish_reason: "stop (token 151645)" }"#,
        ),
        ("bad_missing_finish_reason.json", "MissingFinishReason"),
        ("bad_null_finish_reason.json", "MissingFinishReason"),
        (
            "bad_length_mismatch.json",
            "LengthMismatch { ids: 3, logprobs: 2 }",
        ),
        (
            "bad_more_logprobs_than_ids.json",
            "LengthMismatch { ids: 3, logprobs: 4 }",
        ),
        (
            "bad_token_id_mismatch.json",
            "TokenIdMismatch { index: 1, expected: 13, got: 14 }",
        ),
        (
            "bad_null_logprob.json",
            "NullLogprob { index: 2, token_id: 151645 }",
        ),
        (
            "bad_positive_logprob.json",
            "PositiveLogprob { index: 1, token_id: 13, value: 0.5 }",
        ),
        (
            "bad_overflow_logprob.json",
            "NonFiniteLogprob { index: 0, token_id: 12095, value: -inf }",
        ),
        (
            "bad_completion_tokens.json",
            "CompletionTokensMismatch { completion_tokens: 8, ids: 3 }",
        ),
        (
            "bad_prompt_leak_17240.json",
            "LengthMismatch { ids: 5, logprobs: 3 }",
        ),
        (
            "bad_logprobs_length_field.json",
            "LogprobsLengthField { declared: 4, actual: 3 }",
        ),
        (
            "bad_nan_literal.json",
            r#"NonFiniteLiteral { literal: "NaN", line: 6"#,
        ),
        (
            "bad_infinity_literal.json",
            r#"NonFiniteLiteral { literal: "Infinity", line: 6"#,
        ),
        (
            "bad_neg_infinity_literal.json",
            r#"NonFiniteLiteral { literal: "-Infinity", line: 6"#,
        ),
        ("bad_truncated_body.json", "Json(Error(\"EOF while parsing"),
        (
            "bad_triple_too_short.json",
            "Json(Error(\"invalid length 2, expected a [logprob, token_id, token_text] triple",
        ),
        (
            "bad_triple_too_long.json",
            "Json(Error(\"invalid length 4, expected a [logprob, token_id, token_text] triple",
        ),
        (
            "bad_negative_id.json",
            "Json(Error(\"invalid value: integer `-13`, expected u32",
        ),
        (
            "bad_string_logprob.json",
            "Json(Error(\"invalid type: string \\\"-0.5\\\", expected f64",
        ),
        (
            "bad_length_without_length.json",
            "Json(Error(\"finish_reason of type \\\"length\\\" has no \\\"length\\\" key",
        ),
    ];
    for (name, want) in cases {
        let got = crate::common::render(&single(name));
        assert!(
            got.starts_with(want),
            "{name}:\n  expected prefix {want}\n  got {got}"
        );
    }
}

#[test]
fn batch_item_errors_name_the_item() {
    check(
        parse_many(&data("bad_n2_second_item.json"), true),
        "Item { index: 1, source: NullLogprob { index: 1, token_id: 2 } }",
    );
}

#[test]
fn error_messages_say_what_and_which_value() {
    let e = parse_single(&data("bad_token_id_mismatch.json"), true).unwrap_err();
    assert_eq!(
        e.to_string(),
        "token id mismatch at index 1: `output_ids` has 13 but `output_token_logprobs` has 14"
    );
    let e = parse_single(&data("bad_nan_literal.json"), true).unwrap_err();
    assert!(
        e.to_string().contains("bare literal `NaN` at line 6"),
        "{e}"
    );
    // The serde_json error is kept as the source, not flattened into a string.
    let source = std::error::Error::source(&e).expect("source kept");
    assert!(source.to_string().contains("line 6"), "{source}");
}

/// A bare `NaN`/`Infinity`/`-Infinity` (what Python's json writes for a non-finite float) is
/// named, on any line, at any position, even as the whole body.
#[test]
fn non_finite_literals_are_named_wherever_they_are() {
    for (body, want) in [
        (
            "NaN",
            r#"NonFiniteLiteral { literal: "NaN", line: 1, column: 1"#,
        ),
        (
            "Infinity",
            r#"NonFiniteLiteral { literal: "Infinity", line: 1, column: 1"#,
        ),
        (
            "-Infinity",
            r#"NonFiniteLiteral { literal: "-Infinity", line: 1, column: 2"#,
        ),
        (
            r#"{"text":"a","output_ids":[1],"meta_info":{"output_token_logprobs":[[NaN,1,null]]}}"#,
            r#"NonFiniteLiteral { literal: "NaN", line: 1"#,
        ),
        (
            "{\"text\":\"a\",\n\"output_ids\":[1],\n\"meta_info\":{\"output_token_logprobs\":[[ -Infinity,1,null]]}}",
            r#"NonFiniteLiteral { literal: "-Infinity", line: 3"#,
        ),
        (
            "{\"text\":\"a\",\n\"output_ids\":[1],\n\n\"meta_info\":{\"output_token_logprobs\":[[\tInfinity ,1,null]]}}",
            r#"NonFiniteLiteral { literal: "Infinity", line: 4"#,
        ),
    ] {
        check(parse_single(body.as_bytes(), true).map(|t| vec![t]), want);
    }
    // Not a literal the encoder writes: plain JSON error.
    check(parse_single(b"[[Nope]]", true).map(|t| vec![t]), "Json(");
}

/// A zero logprob is fine; the error names the first bad entry after it.
#[test]
fn the_first_bad_logprob_is_named() {
    let body = |lps: &str| {
        format!(
            r#"{{"text":"ab","output_ids":[1,2],"meta_info":{{"finish_reason":{{"type":"length","length":2}},"output_token_logprobs":{lps},"completion_tokens":2}}}}"#
        )
    };
    for (lps, want) in [
        (
            "[[0.0,1,null],[null,2,null]]",
            "NullLogprob { index: 1, token_id: 2 }",
        ),
        (
            "[[0,1,null],[0.5,2,null]]",
            "PositiveLogprob { index: 1, token_id: 2, value: 0.5 }",
        ),
        (
            "[[-0.0,1,null],[-1e39,2,null]]",
            "NonFiniteLogprob { index: 1, token_id: 2, value: -inf }",
        ),
        (
            "[[0.0,1,null],[0.0,2,null]]",
            "length (2) ids=[1, 2] lps=Some([0.0, 0.0])",
        ),
    ] {
        check(
            parse_single(body(lps).as_bytes(), true).map(|t| vec![t]),
            want,
        );
    }
    // A wrong type names what was expected.
    let e = parse_single(body("5").as_bytes(), true).unwrap_err();
    assert!(
        format!("{e:?}").contains("expected a list of [logprob, token_id, token_text] triples"),
        "{e:?}"
    );
}

#[test]
fn logprobs_missing_when_not_requested_is_fine_but_ids_are_needed() {
    let body = br#"{"text":"a","meta_info":{"finish_reason":{"type":"stop","matched":2},"completion_tokens":1}}"#;
    check(
        parse_single(body, false).map(|t| vec![t]),
        "MissingOutputIds",
    );
}

#[test]
fn error_bodies_of_every_shape() {
    use rollout_client::client::error_message;
    assert_eq!(
        error_message(&data("error_value_error.json")),
        "Either text, input_ids or input_embeds should be provided."
    );
    assert_eq!(
        error_message(&data("error_object.json")),
        "The server is busy. Please try again later."
    );
    assert!(error_message(&data("error_422_old.json")).contains("value is not a valid list"));
    assert_eq!(
        error_message(b"Internal Server Error"),
        "Internal Server Error"
    );
}

/// The fast path must agree with the serde path bit for bit whenever it answers.
fn assert_paths_agree(body: &[u8]) -> bool {
    let serde = decode::decode_response_serde(body);
    match decode::decode_response_fast(body) {
        Some(fast) => {
            let serde = serde.unwrap_or_else(|e| {
                panic!(
                    "fast path accepted a body serde rejects ({e:?}): {}",
                    String::from_utf8_lossy(body)
                )
            });
            // Debug, because NaN (a null logprob) is not equal to itself.
            assert_eq!(
                format!("{fast:?}"),
                format!("{serde:?}"),
                "{}",
                String::from_utf8_lossy(body)
            );
            true
        }
        None => false,
    }
}

#[test]
fn fast_path_agrees_with_serde_on_every_fixture() {
    let mut taken = Vec::new();
    for entry in std::fs::read_dir(crate::common::data_path("")).unwrap() {
        let path = entry.unwrap().path();
        let body = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".sse") {
            for frame in String::from_utf8(body).unwrap().split("\n\n") {
                if let Some(data) = frame.strip_prefix("data: ") {
                    assert_paths_agree(data.as_bytes());
                }
            }
        } else if assert_paths_agree(&body) {
            taken.push(name);
        }
    }
    // The plain spec examples must take the fast path, or the speed-up silently disappears.
    for name in [
        "7_1_single_mid.json",
        "7_1_single_latest.json",
        "7_2_text_in_logprobs.json",
        "7_3_nonstream.json",
        "7_5_abort_running.json",
    ] {
        assert!(
            taken.iter().any(|t| t == name),
            "{name} did not take the fast path"
        );
    }
    let synth =
        rollout_client::synth::generate_body(4096, 42, rollout_client::synth::TokenText::Pieces);
    assert!(
        assert_paths_agree(&synth),
        "the benchmark body must take the fast path"
    );
}

#[test]
fn batch_and_n_arrays_take_the_fast_path() {
    for name in ["7_4_batch.json", "n2_logprobs.json"] {
        let body = data(name);
        let fast = decode::decode_array_fast(&body)
            .unwrap_or_else(|| panic!("{name} did not take the fast path"));
        let serde: Vec<wire::GenerateResponse> = serde_json::from_slice(&body).unwrap();
        assert_eq!(fast.len(), 2, "{name}");
        assert_eq!(format!("{fast:?}"), format!("{serde:?}"), "{name}");
    }
    assert_eq!(decode::decode_array_fast(b" [ ] "), Some(Vec::new()));

    // Not arrays of responses: the fast path leaves them to serde, which names the error.
    let plain = String::from_utf8(data("n2_logprobs.json")).unwrap();
    assert!(plain.contains("}},{\"text\""));
    for broken in [
        format!("{plain} x"),
        plain.replacen("}},{\"text\"", "}} {\"text\"", 1),
        plain.replacen("}},{\"text\"", "}},,{\"text\"", 1),
        format!("{}}}]", plain.trim_end().trim_end_matches(']')),
    ] {
        assert_eq!(
            decode::decode_array_fast(broken.as_bytes()),
            None,
            "{broken}"
        );
        assert!(decode::decode_body(broken.as_bytes()).is_err(), "{broken}");
    }
}

/// Escaped keys, escapes and non-ASCII characters in token texts, and brackets inside strings:
/// the plain valid cases take the fast path, the rest go to serde, and the result is serde's.
#[test]
fn escapes_and_brackets_meet_the_fast_path() {
    let plain = String::from_utf8(data("7_2_text_in_logprobs.json")).unwrap();
    let decoded = |body: &str| format!("{:?}", decode::decode_response(body.as_bytes()).unwrap());
    let want = decoded(&plain);

    // A key spelled with an escape is the same key to serde; the fast path must not miss it.
    for key in ["output_ids", "meta_info", "output_token_logprobs"] {
        let escaped = key.replacen('_', "\\u005f", 1);
        let body = plain.replacen(&format!("\"{key}\""), &format!("\"{escaped}\""), 1);
        assert_ne!(body, plain);
        assert_eq!(decoded(&body), want, "{key} written as {escaped}");
        assert_paths_agree(body.as_bytes());
    }

    // Valid token texts the fast path reads itself.
    for text in [r#""Parisé""#, r#""巴黎""#, r#""a\"\\\/\b\f\n\r\tb""#] {
        let body = plain.replacen(r#"" Paris""#, text, 1);
        assert!(
            assert_paths_agree(body.as_bytes()),
            "{text} did not take the fast path"
        );
    }
    // An invalid escape is serde's to report, wherever it sits in the text.
    for text in [r#""n\x""#, r#""\x""#, r#""t\q""#] {
        let body = plain.replacen(r#"" Paris""#, text, 1);
        assert_eq!(
            decode::decode_response_fast(body.as_bytes()),
            None,
            "{text}"
        );
        assert!(decode::decode_response(body.as_bytes()).is_err(), "{text}");
    }

    // Brackets and escaped quotes inside a string nested in a value the fast path skips.
    let body = plain.replacen(
        r#""matched":151645"#,
        r#""matched":"]}\"[{","extra":[{"a":"}\\"},"]"]"#,
        1,
    );
    assert!(
        assert_paths_agree(body.as_bytes()),
        "nested strings did not take the fast path"
    );
    let r = decode::decode_response(body.as_bytes()).unwrap();
    assert!(format!("{r:?}").contains(r#"]}\"[{"#), "{r:?}");
}

/// A key given twice is serde's duplicate-field error, never the fast path's last value.
#[test]
fn duplicate_keys_are_left_to_serde() {
    let plain = String::from_utf8(data("7_2_text_in_logprobs.json")).unwrap();
    for (key, value) in [
        ("output_ids", "[1,2]"),
        ("meta_info", r#"{"id":"y"}"#),
        ("output_token_logprobs", "[[-1.0,1,null]]"),
        ("input_token_logprobs", "[]"),
    ] {
        let at = plain.find(&format!("\"{key}\"")).unwrap();
        let body = format!("{}\"{key}\":{value},{}", &plain[..at], &plain[at..]);
        assert_eq!(decode::decode_response_fast(body.as_bytes()), None, "{key}");
        let err = decode::decode_response(body.as_bytes()).unwrap_err();
        assert!(
            format!("{err:?}").contains("duplicate field"),
            "{key}: {err:?}"
        );
    }
}

fn one_triple_body(logprob: &str, id: &str) -> String {
    format!(
        r#"{{"text":"t","output_ids":[{id}],"meta_info":{{"id":"x","finish_reason":{{"type":"length","length":1}},"output_token_logprobs":[[{logprob},{id},null]],"completion_tokens":1}}}}"#
    )
}

/// Every way an encoder writes a plain number or token id is read by the fast path itself, to
/// serde's value; the expected values here are written out by hand.
#[test]
fn plain_numbers_and_ids_take_the_fast_path() {
    let exact = [
        ("-0.5", -0.5f32),
        ("0", 0.0),
        ("-7", -7.0),
        ("-2.5e1", -25.0),
        ("-2.5E1", -25.0),
        ("-2.5e+1", -25.0),
        ("-25e-1", -2.5),
        ("-250E-2", -2.5),
        ("-1.5e0", -1.5),
        ("-0.75E+0", -0.75),
    ];
    for (text, value) in exact {
        let body = one_triple_body(text, "42");
        assert!(
            assert_paths_agree(body.as_bytes()),
            "{text} did not take the fast path"
        );
        let r = decode::decode_response_fast(body.as_bytes()).unwrap();
        let lps = r.meta_info.unwrap().output_token_logprobs.unwrap();
        assert_eq!(lps.logprobs, [value], "{text}");
        assert_eq!((lps.len(), lps.is_empty()), (1, false));
    }
    let empty = one_triple_body("-1.0", "42").replace("[[-1.0,42,null]]", "[]");
    let r = decode::decode_response(empty.as_bytes()).unwrap();
    let lps = r.meta_info.unwrap().output_token_logprobs.unwrap();
    assert_eq!((lps.len(), lps.is_empty()), (0, true));
    // The edges of the exact conversion: 19 significant digits and exponents of ±22.
    for text in [
        "-1234567890.123456789",
        "-1e-22",
        "-1e22",
        "-12.089723587036133",
        "-0.0",
    ] {
        let body = one_triple_body(text, "42");
        assert!(
            assert_paths_agree(body.as_bytes()),
            "{text} did not take the fast path"
        );
    }

    for id in ["0", "7", "151645", "4294967295"] {
        let body = one_triple_body("-1.0", id);
        assert!(
            assert_paths_agree(body.as_bytes()),
            "id {id} did not take the fast path"
        );
        let r = decode::decode_response_fast(body.as_bytes()).unwrap();
        assert_eq!(r.output_ids.unwrap(), [id.parse::<u32>().unwrap()]);
    }
    for id in ["4294967296", "007", "-1", "1.0"] {
        let body = one_triple_body("-1.0", id);
        assert_eq!(
            decode::decode_response_fast(body.as_bytes()),
            None,
            "id {id}"
        );
        assert!(decode::decode_response(body.as_bytes()).is_err(), "id {id}");
    }
}

mod fast_vs_serde {
    use proptest::prelude::*;

    /// A logprob written in one of the many ways a JSON encoder may write a number.
    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => (-30.0f64..0.0).prop_map(|x| format!("{x}")),
            4 => (-30.0f64..0.0).prop_map(|x| format!("{x:e}")),
            2 => (-30.0f64..0.0).prop_map(|x| format!("{x:E}")),
            16 => (-30.0f32..0.0).prop_map(|x| serde_json::to_string(&(x as f64)).unwrap()),
            4 => (-1000i64..=0).prop_map(|x| x.to_string()),
            2 => Just("-0".to_string()),
            2 => Just("-0.0".to_string()),
            2 => Just("0".to_string()),
            4 => ("-?[1-9][0-9]{0,24}", "(\\.[0-9]{1,12})?", "([eE][+-]?[0-9]{1,2})?")
                .prop_map(|(a, b, c)| format!("{a}{b}{c}")),
            1 => Just("1e400".to_string()),
            1 => Just("-.5".to_string()),
            1 => Just("01".to_string()),
            4 => Just("null".to_string()),
        ]
    }

    fn id() -> impl Strategy<Value = String> {
        prop_oneof![
            40 => any::<u32>().prop_map(|x| x.to_string()),
            1 => Just("4294967296".to_string()),
            1 => Just("-1".to_string()),
            1 => Just("7.0".to_string()),
            1 => Just("007".to_string()),
        ]
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            20 => Just("null".to_string()),
            10 => "[a-z .,]{0,6}".prop_map(|s| format!("\"{s}\"")),
            2 => Just(r#"" \"quoted\" \\ \n\t/""#.to_string()),
            1 => Just(r#""\u00e9\ud83d\ude00""#.to_string()),
            2 => Just("\"é 中 😀\"".to_string()),
            1 => Just("\"bad \u{1} control\"".to_string()),
        ]
    }

    fn ws() -> impl Strategy<Value = &'static str> {
        prop_oneof![6 => Just(""), 1 => Just(" "), 1 => Just("\n  "), 1 => Just("\t")]
    }

    fn triple() -> impl Strategy<Value = String> {
        (number(), id(), text(), ws(), ws())
            .prop_map(|(lp, id, t, a, b)| format!("[{a}{lp},{id}{b},{t}]"))
    }

    proptest! {
        #[test]
        fn fast_path_equals_serde(
            triples in prop::collection::vec(triple(), 0..12),
            ids_from_triples in any::<bool>(),
            extra in prop::collection::vec(id(), 0..3),
            w in ws(),
        ) {
            let lp_ids: Vec<String> = triples.iter().map(|t| {
                t.trim_start_matches('[').split(',').nth(1).unwrap_or("0").trim().to_string()
            }).collect();
            let output_ids = if ids_from_triples { lp_ids } else { extra };
            let body = format!(
                r#"{{"text":"t",{w}"output_ids":[{}],"meta_info":{{"id":"x","finish_reason":{{"type":"length","length":3}},{w}"output_token_logprobs":[{}],"input_token_logprobs":[],"completion_tokens":3,"unknown":{{"a":[1,{{"b":null}}]}}}}}}"#,
                output_ids.join(","),
                triples.join(&format!(",{w}")),
            );
            super::assert_paths_agree(body.as_bytes());
        }
    }
}
