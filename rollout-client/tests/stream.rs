//! SSE framing and stream reassembly: all three modes, frames split anywhere, errors, batches.

use rollout_client::stream::{SseParser, decode_stream};
use rollout_client::turn::parse_single;
use rollout_client::{ResponseError, StreamMode, Turn};

use crate::common::{check, data, render};

fn whole(
    name: &str,
    mode: StreamMode,
    expected: Option<usize>,
) -> Result<Vec<Turn>, ResponseError> {
    let body = data(name);
    decode_stream([body.as_slice()], mode, true, expected)
}

/// The same body fed in pieces of every size from 1 byte up, which splits frames everywhere.
fn all_splits(name: &str, mode: StreamMode) -> Vec<String> {
    let body = data(name);
    (1..=body.len().min(97))
        .chain([body.len()])
        .map(|size| render(&decode_stream(body.chunks(size), mode, true, Some(1))))
        .collect()
}

const PARIS_IT: &str =
    r#"length (3) ids=[12095, 13, 1084] lps=Some([-0.2031, -0.5522, -1.311]) text=" Paris. It""#;

#[test]
fn every_mode_reassembles_to_the_non_stream_result() {
    let nonstream = parse_single(&data("7_3_nonstream.json"), true).unwrap();
    check(Ok(vec![nonstream.clone()]), PARIS_IT);
    for (file, mode) in [
        ("7_3_stream_cumulative.sse", StreamMode::Cumulative),
        ("7_3_stream_mid.sse", StreamMode::Mid),
        ("7_3_stream_incremental.sse", StreamMode::Incremental),
    ] {
        for m in [mode, StreamMode::Auto] {
            let turns = whole(file, m, Some(1)).unwrap_or_else(|e| panic!("{file} {m:?}: {e:?}"));
            assert_eq!(turns.len(), 1);
            let t = &turns[0];
            assert_eq!(
                (&t.text, &t.output_ids, &t.logprobs, &t.finish_reason),
                (
                    &nonstream.text,
                    &nonstream.output_ids,
                    &nonstream.logprobs,
                    &nonstream.finish_reason
                ),
                "{file} {m:?}"
            );
            assert_eq!(t.meta_info.e2e_latency, Some(0.051));
        }
    }
}

#[test]
fn frames_split_anywhere_give_the_same_result() {
    for (file, mode) in [
        ("7_3_stream_cumulative.sse", StreamMode::Auto),
        ("7_3_stream_mid.sse", StreamMode::Auto),
        ("7_3_stream_incremental.sse", StreamMode::Incremental),
    ] {
        for r in all_splits(file, mode) {
            assert_eq!(r, PARIS_IT, "{file}");
        }
    }
}

/// The fixture with every `"key": [...]` entry removed from every frame.
fn without(name: &str, key: &str) -> String {
    let mut body = String::from_utf8(data(name)).unwrap();
    let pattern = format!("\"{key}\":[");
    while let Some(at) = body.find(&pattern) {
        let open = at + pattern.len() - 1;
        let mut depth = 0;
        let mut end = open;
        for (i, c) in body[open..].char_indices() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = open + i + 1;
                break;
            }
        }
        let end = if body[end..].starts_with(',') {
            end + 1
        } else {
            end
        };
        body.replace_range(at..end, "");
    }
    body
}

#[test]
fn auto_detects_the_mode_from_whatever_the_chunks_carry() {
    // No output_ids (very old servers): the logprobs alone tell cumulative from incremental,
    // and the ids come from the triples.
    for file in ["7_3_stream_cumulative.sse", "7_3_stream_incremental.sse"] {
        let body = without(file, "output_ids");
        assert!(!body.contains("output_ids"));
        check(
            decode_stream([body.as_bytes()], StreamMode::Auto, true, Some(1)),
            PARIS_IT,
        );
    }
    // No logprobs (not requested): delta ids with cumulative text is 0.5.3's mode, with delta text it is
    // incremental.
    for file in [
        "7_3_stream_cumulative.sse",
        "7_3_stream_mid.sse",
        "7_3_stream_incremental.sse",
    ] {
        let body = without(file, "output_token_logprobs");
        assert!(!body.contains("output_token_logprobs"));
        check(
            decode_stream([body.as_bytes()], StreamMode::Auto, false, Some(1)),
            r#"length (3) ids=[12095, 13, 1084] lps=None text=" Paris. It""#,
        );
    }
}

#[test]
fn cumulative_ids_must_extend_the_previous_chunk() {
    let body = String::from_utf8(data("7_3_stream_cumulative.sse")).unwrap();
    for mode in [StreamMode::Cumulative, StreamMode::Auto] {
        // An earlier token rewritten.
        let rewritten = body.replacen(
            r#""output_ids":[12095,13],"#,
            r#""output_ids":[999,13],"#,
            1,
        );
        assert_ne!(rewritten, body);
        check(
            decode_stream([rewritten.as_bytes()], mode, true, Some(1)),
            "StreamModeMismatch { index: 0, chunk: 1, mode: Cumulative, detail: \"cumulative output_ids do not extend the previous chunk\"",
        );
    }
    // A chunk with fewer tokens than before, consistent with its own completion_tokens.
    let frames: Vec<&str> = body.split("\n\n").collect();
    let shrunk = [frames[0], frames[1], frames[0], frames[2], frames[3]].join("\n\n") + "\n\n";
    check(
        decode_stream([shrunk.as_bytes()], StreamMode::Cumulative, true, Some(1)),
        "StreamModeMismatch { index: 0, chunk: 2, mode: Cumulative, detail: \"cumulative output_ids do not extend the previous chunk\"",
    );
    // A chunk that repeats the previous one adds nothing and is fine.
    let repeated = [frames[0], frames[1], frames[1], frames[2], frames[3]].join("\n\n") + "\n\n";
    check(
        decode_stream([repeated.as_bytes()], StreamMode::Cumulative, true, Some(1)),
        PARIS_IT,
    );
}

#[test]
fn a_null_in_a_later_incremental_chunk_is_named_at_its_place_in_the_whole() {
    let body = String::from_utf8(data("7_3_stream_incremental.sse")).unwrap();
    for (from, to, want) in [
        (
            "[-0.5522,13,null]",
            "[null,13,null]",
            "Item { index: 0, source: NullLogprob { index: 1, token_id: 13 } }",
        ),
        (
            "[-1.311,1084,null]",
            "[null,1084,null]",
            "Item { index: 0, source: NullLogprob { index: 2, token_id: 1084 } }",
        ),
    ] {
        let nulled = body.replacen(from, to, 1);
        assert_ne!(nulled, body);
        for mode in [StreamMode::Incremental, StreamMode::Auto] {
            check(
                decode_stream([nulled.as_bytes()], mode, true, Some(1)),
                want,
            );
        }
    }
}

#[test]
fn the_decoder_knows_when_the_stream_is_done() {
    let body = data("7_3_stream_incremental.sse");
    let at = body.windows(12).position(|w| w == b"data: [DONE]").unwrap();
    let mut d = rollout_client::stream::StreamDecoder::new(StreamMode::Auto, true);
    d.push(&body[..at]).unwrap();
    assert_eq!((d.chunks(), d.is_done()), (3, false));
    d.push(&body[at..]).unwrap();
    assert_eq!((d.chunks(), d.is_done()), (3, true));
    check(d.finish(Some(1)), PARIS_IT);
}

#[test]
fn wrong_explicit_mode_is_an_error_not_a_shifted_sample() {
    check(
        whole(
            "7_3_stream_incremental.sse",
            StreamMode::Cumulative,
            Some(1),
        ),
        "StreamModeMismatch { index: 0, chunk: 1, mode: Cumulative, detail: \"output_ids has 1 entries, completion_tokens is 2",
    );
    check(
        whole(
            "7_3_stream_cumulative.sse",
            StreamMode::Incremental,
            Some(1),
        ),
        "StreamModeMismatch { index: 0, chunk: 1, mode: Incremental",
    );
    // A 0.5.3 stream read as incremental: the ids fit, but the logprobs are concatenated cumulative lists,
    // so the final check sees more logprobs than ids.
    check(
        whole("7_3_stream_mid.sse", StreamMode::Incremental, Some(1)),
        "Item { index: 0, source: LengthMismatch { ids: 3, logprobs: 6 } }",
    );
}

#[test]
fn a_lost_mid_delta_is_detected() {
    check(
        whole("7_3_stream_mid.sse", StreamMode::Mid, Some(1)),
        PARIS_IT,
    );
    check(
        whole("stream_mid_lost_delta.sse", StreamMode::Mid, Some(1)),
        "StreamModeMismatch { index: 0, chunk: 1, mode: Mid, detail: \"output_ids has 1 entries, completion_tokens is 3 and 1 tokens arrived before",
    );
    check(
        whole("stream_mid_lost_delta.sse", StreamMode::Auto, Some(1)),
        "StreamModeMismatch { index: 0, chunk: 1, mode: Auto",
    );
}

#[test]
fn stream_errors() {
    check(
        whole("stream_no_done.sse", StreamMode::Auto, Some(1)),
        "StreamEndedWithoutDone { chunks: 3 }",
    );
    check(
        whole("stream_cut_mid_frame.sse", StreamMode::Auto, Some(1)),
        "StreamEndedWithoutDone { chunks: 2 }",
    );
    check(
        whole("stream_error_event.sse", StreamMode::Auto, Some(1)),
        r#"ServerError { message: "Either text, input_ids or input_embeds should be provided." }"#,
    );
    check(
        whole("stream_null_logprob.sse", StreamMode::Auto, Some(1)),
        "Item { index: 0, source: NullLogprob { index: 1, token_id: 13 } }",
    );
    // [DONE] before the final chunk of the item.
    let body = data("7_3_stream_cumulative.sse");
    let text = String::from_utf8(body).unwrap();
    let cut: String = text
        .split("\n\n")
        .take(2)
        .map(|f| format!("{f}\n\n"))
        .collect::<String>()
        + "data: [DONE]\n\n";
    check(
        decode_stream([cut.as_bytes()], StreamMode::Auto, true, Some(1)),
        "StreamIncomplete { index: 0 }",
    );
    // A chunk that is not JSON names its position.
    check(
        decode_stream(
            [&b"data: {\"text\":\n\n"[..]],
            StreamMode::Auto,
            true,
            Some(1),
        ),
        "Chunk { chunk: 0, source: Json(",
    );
    check(
        decode_stream(
            [&b"data: [DONE]\n\ndata: {}\n\n"[..]],
            StreamMode::Auto,
            true,
            Some(1),
        ),
        "DataAfterDone",
    );
}

#[test]
fn abort_chunk_ends_the_item() {
    check(
        whole("stream_abort.sse", StreamMode::Auto, Some(1)),
        r#"abort ("Aborted") ids=[12095, 13] lps=Some([-0.2031, -0.5522]) text=" Paris.""#,
    );
}

#[test]
fn waiting_queue_abort_chunk_with_a_stray_id_keeps_the_consistent_prefix() {
    // 0.5.15's `_handle_abort_req` may send `output_ids: [last_id]` in any mode.
    check(
        whole(
            "stream_abort_waiting_queue_last_id.sse",
            StreamMode::Auto,
            Some(1),
        ),
        r#"abort ("Abort in waiting queue") ids=[12095, 13] lps=Some([-0.2031, -0.5522]) text=" Paris.""#,
    );
    check(
        whole(
            "stream_abort_waiting_queue_first.sse",
            StreamMode::Auto,
            Some(1),
        ),
        r#"abort ("Abort in waiting queue") ids=[] lps=Some([]) text="""#,
    );
}

#[test]
fn interleaved_batch_chunks_are_sorted_by_index() {
    let expected = format!("{PARIS_IT}\n{PARIS_IT}");
    check(
        whole("stream_batch_interleaved.sse", StreamMode::Auto, Some(2)),
        &expected,
    );
    check(
        whole("stream_batch_interleaved.sse", StreamMode::Auto, Some(3)),
        "StreamIncomplete { index: 2 }",
    );
    check(
        whole("stream_batch_interleaved.sse", StreamMode::Auto, Some(1)),
        "ItemCount { expected: 1, got: 2 }",
    );
}

#[test]
fn sse_parser_tolerates_crlf_comments_and_other_fields() {
    let mut out = Vec::new();
    let mut p = SseParser::new();
    let input = b": keep-alive\r\nevent: message\r\nid: 7\r\ndata:{\"a\":1}\r\n\r\ndata: line1\ndata: line2\n\n";
    for b in input.chunks(1) {
        p.push(b, |d| {
            out.push(String::from_utf8(d.to_vec()).unwrap());
            Ok::<(), ()>(())
        })
        .unwrap();
    }
    assert_eq!(out, ["{\"a\":1}", "line1\nline2"]);
    assert!(!p.has_partial());
    p.push(b"data: x", |_| Ok::<(), ()>(())).unwrap();
    assert!(p.has_partial());
}
