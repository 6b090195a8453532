//! The witness on hand-built ledgers: each problem kind at the positions a hand computation gives, the sample
//! layouts and typed arrays, the store's bound and evictions, and the JSON round trip.

use super::*;
use crate::model::MoeShape;

const SHAPE: MoeShape = MoeShape {
    layers: 2,
    experts: 8,
    experts_per_token: 2,
};

fn router() -> Router {
    Router {
        seed: 7,
        shape: SHAPE,
    }
}

/// An entry that answered `prompt` with `output` and these logprobs, under version "v1".
fn entry(rid: &str, prompt: &[u32], output: &[u32], lps: &[f32]) -> Entry {
    Entry {
        seq: 0,
        rid: rid.to_owned(),
        route: Route::Generate,
        stream: false,
        index: 0,
        draw: 0,
        finish_reason: Some(Finish::Stop),
        weight_version: "v1".to_owned(),
        num_retractions: 0,
        prompt_ids: prompt.to_vec(),
        output_ids: output.to_vec(),
        return_logprob: true,
        logprob_temperature: 1.0,
        output_logprobs: Some(SentLogprobs::numbers(lps)),
        weight_versions: vec![Span {
            version: "v1".to_owned(),
            start: 0,
            end: output.len(),
            weights: 0,
        }],
        routed_experts: None,
        sampling_supports: None,
        fault: None,
    }
}

fn records(entries: Vec<Entry>) -> Records {
    let mut records = Records::new(usize::MAX, router());
    entries.into_iter().for_each(|e| records.push(e));
    records
}

/// A generic sample: `prompt`, then `response` with its mask and logprobs.
fn sample(prompt: &[u32], response: &[u32], mask: &[u8], lps: &[Option<f32>]) -> AuditSample {
    AuditSample {
        id: "s".to_owned(),
        layout: Some(Layout::Generic),
        prompt: prompt.to_vec(),
        response: response.to_vec(),
        loss_mask: mask.to_vec(),
        logprobs: Some(lps.to_vec()),
        routed_experts: None,
        versions: None,
        turn_versions: None,
    }
}

fn run(records: &Records, samples: &[AuditSample]) -> Report {
    audit(records, samples, &AuditOptions::default(), None)
}

/// The problems as (kind, start, end).
fn found(report: &Report) -> Vec<(ProblemKind, usize, usize)> {
    report
        .problems
        .iter()
        .map(|p| (p.kind, p.start, p.end))
        .collect()
}

/// Two turns with a tool's tokens between them: turn 1 answered [1, 2] with [10, 11, 12]; the tool added
/// [90, 91]; turn 2 answered [1, 2, 10, 11, 12, 90, 91] with [13, 14].
fn two_turns() -> (Records, AuditSample) {
    let records = records(vec![
        entry("t1", &[1, 2], &[10, 11, 12], &[-0.5, -1.5, -2.5]),
        entry(
            "t2",
            &[1, 2, 10, 11, 12, 90, 91],
            &[13, 14],
            &[-0.25, -0.75],
        ),
    ]);
    let s = sample(
        &[1, 2],
        &[10, 11, 12, 90, 91, 13, 14],
        &[1, 1, 1, 0, 0, 1, 1],
        &[
            Some(-0.5),
            Some(-1.5),
            Some(-2.5),
            Some(0.0),
            Some(0.0),
            Some(-0.25),
            Some(-0.75),
        ],
    );
    (records, s)
}

/// `records` as if the answer of turn `turn` had carried its routes (a row per position but the last).
fn with_routes_on(records: &Records, turn: usize) -> Records {
    let mut out = Records::new(usize::MAX, router());
    for (i, mut e) in records.entries().cloned().enumerate() {
        if i == turn {
            e.routed_experts = Some(SentRoutes {
                start_len: 0,
                rows: e.seq_len() - 1,
                edit: RoutesEdit::None,
            });
        }
        out.push(e);
    }
    out
}

#[test]
fn a_faithful_multi_turn_sample_passes() {
    let (records, s) = two_turns();
    let report = run(&records, &[s]);
    assert!(report.ok, "{report}");
    assert_eq!(report.checked_logprobs, 5);
    assert_eq!(report.trained_tokens, 5);
    assert_eq!(report.matched_items, 2);
}

#[test]
fn a_resumed_generation_is_two_segments_of_one_trained_run() {
    // Aborted after two tokens, then resumed from the prompt plus those two.
    let records = records(vec![
        entry("a", &[1], &[5, 6], &[-1.0, -2.0]),
        entry("b", &[1, 5, 6], &[7], &[-3.0]),
    ]);
    let s = sample(
        &[1],
        &[5, 6, 7],
        &[1, 1, 1],
        &[Some(-1.0), Some(-2.0), Some(-3.0)],
    );
    assert!(run(&records, &[s]).ok);
}

#[test]
fn a_group_matches_each_sample_to_its_own_answer() {
    // Two samples of one prompt (n = 2): the same first token, different continuations.
    let records = records(vec![
        entry("g0", &[1], &[5, 6], &[-1.0, -2.0]),
        entry("g1", &[1], &[5, 8], &[-1.0, -4.0]),
    ]);
    let a = sample(&[1], &[5, 8], &[1, 1], &[Some(-1.0), Some(-4.0)]);
    let b = sample(&[1], &[5, 6], &[1, 1], &[Some(-1.0), Some(-2.0)]);
    assert!(run(&records, &[a, b]).ok);
}

#[test]
fn missing_logprobs_are_reported_over_the_trained_tokens() {
    let (records, mut s) = two_turns();
    s.logprobs = None;
    let report = run(&records, &[s]);
    assert_eq!(found(&report), [(ProblemKind::LogprobsMissing, 0, 7)]);
    assert_eq!(report.problems[0].rid.as_deref(), Some("t1"));
    assert!(report.problems[0].message.contains("#1976"));
}

#[test]
fn each_wrong_logprob_is_classified_at_its_positions() {
    let (records, s) = two_turns();
    let with = |edits: &[(usize, Option<f32>)]| {
        let mut s = s.clone();
        let lps = s.logprobs.as_mut().expect("logprobs");
        for &(i, v) in edits {
            lps[i] = v;
        }
        found(&run(&records, &[s]))
    };
    assert_eq!(with(&[(1, None)]), [(ProblemKind::LogprobNone, 1, 2)]);
    assert_eq!(
        with(&[(2, Some(f32::NAN))]),
        [(ProblemKind::LogprobNotFinite, 2, 3)]
    );
    assert_eq!(
        with(&[(0, Some(0.0)), (1, Some(0.0))]),
        [(ProblemKind::LogprobZero, 0, 2)]
    );
    // Each of the first turn's tokens holds its successor's logprob: shifted by one.
    assert_eq!(
        with(&[(0, Some(-1.5)), (1, Some(-2.5))]),
        [(ProblemKind::LogprobShifted, 0, 2)]
    );
    assert_eq!(
        with(&[(5, Some(-9.0))]),
        [(ProblemKind::LogprobDiffers, 5, 6)]
    );
    // An environment token's logprob is never compared.
    assert!(with(&[(3, Some(-7.0))]).is_empty());
}

#[test]
fn a_logprob_from_another_answer_names_that_answer() {
    let (mut records, s) = two_turns();
    records.push(entry("other", &[3], &[4], &[-6.5]));
    let mut s = s;
    s.logprobs.as_mut().expect("logprobs")[6] = Some(-6.5);
    let report = run(&records, &[s]);
    assert_eq!(
        found(&report),
        [(ProblemKind::LogprobFromOtherRequest, 6, 7)]
    );
    assert!(report.problems[0].message.contains("rid other"));
}

#[test]
fn fewer_logprobs_than_tokens_is_a_length_problem_then_each_misplaced_value() {
    // A turn's logprobs skipped (verl PR #6299): turn 2's values stand where turn 1's belong.
    let (records, mut s) = two_turns();
    s.logprobs = Some(vec![Some(0.0), Some(0.0), Some(-0.25), Some(-0.75)]);
    let report = run(&records, &[s]);
    let kinds = found(&report);
    assert_eq!(kinds[0], (ProblemKind::LogprobsLength, 4, 7));
    assert!(kinds.contains(&(ProblemKind::LogprobZero, 0, 2)));
    // Response position 2 holds the logprob the server sent for position 5.
    assert!(kinds.contains(&(ProblemKind::LogprobShifted, 2, 3)));
}

#[test]
fn generated_tokens_with_mask_zero_are_reported_unless_allowed() {
    let (records, mut s) = two_turns();
    s.loss_mask = vec![0, 0, 0, 0, 0, 1, 1];
    let report = run(&records, std::slice::from_ref(&s));
    assert_eq!(found(&report), [(ProblemKind::GeneratedUntrained, 0, 3)]);
    let allowed = audit(
        &records,
        &[s],
        &AuditOptions {
            allow_masked_generated: true,
        },
        None,
    );
    assert!(allowed.ok, "{allowed}");
}

#[test]
fn trained_tokens_the_server_never_generated_say_why() {
    let (records, s) = two_turns();
    // Token 11 re-tokenized as 99: the rest of the response has another context.
    let mut drift = s.clone();
    drift.response[1] = 99;
    let report = run(&records, &[drift]);
    // Turn 2 was generated after the true context, not the drifted one: never generated in this one either.
    assert_eq!(
        found(&report),
        [
            (ProblemKind::NeverGenerated, 1, 3),
            (ProblemKind::NeverGenerated, 5, 7)
        ]
    );
    assert!(report.problems[0].message.contains("token 11"), "{report}");
    assert_eq!(report.problems[0].expected.as_deref(), Some("11"));
    assert_eq!(report.problems[0].found.as_deref(), Some("99"));
    assert!(
        report.problems[1].message.contains("no request"),
        "{report}"
    );
    // A synthetic token trained after the server's answer ended.
    let mut appended = s.clone();
    appended.response.push(2);
    appended.loss_mask.push(1);
    appended
        .logprobs
        .as_mut()
        .expect("logprobs")
        .push(Some(0.0));
    let report = run(&records, &[appended]);
    assert_eq!(found(&report), [(ProblemKind::NeverGenerated, 7, 8)]);
    assert!(report.problems[0].message.contains("SkyRL"), "{report}");
    // A tool token marked as trained.
    let mut tool = s;
    tool.loss_mask[3] = 1;
    let report = run(&records, &[tool]);
    assert_eq!(found(&report), [(ProblemKind::NeverGenerated, 3, 4)]);
}

#[test]
fn a_prompt_no_request_had_is_unserved_or_evicted() {
    let (records, mut s) = two_turns();
    s.prompt = vec![7, 7];
    let report = run(&records, std::slice::from_ref(&s));
    assert_eq!(found(&report)[0], (ProblemKind::NeverGenerated, 0, 3));
    assert!(report.problems[0].message.contains("no request"));

    // A store that holds one entry evicts the first turn.
    let (_, s) = two_turns();
    let mut small = Records::new(1, router());
    let (full, _) = two_turns();
    full.entries().cloned().for_each(|e| small.push(e));
    assert_eq!(small.entries().len(), 1);
    assert_eq!(small.evicted(), 1);
    let report = run(&small, &[s]);
    assert_eq!(found(&report), [(ProblemKind::Evicted, 0, 3)]);
}

#[test]
fn logprobs_from_a_request_that_did_not_ask_for_them_are_not_the_servers() {
    let (mut records, s) = two_turns();
    let mut e = entry("quiet", &[1, 2], &[10, 11, 12], &[]);
    e.return_logprob = false;
    e.output_logprobs = None;
    records = {
        let mut r = Records::new(usize::MAX, router());
        r.push(e);
        records.entries().skip(1).cloned().for_each(|x| r.push(x));
        r
    };
    let report = run(&records, &[s]);
    assert_eq!(found(&report), [(ProblemKind::LogprobsNotRequested, 0, 3)]);
}

#[test]
fn mask_and_version_lengths_and_labels() {
    let (records, mut s) = two_turns();
    s.loss_mask.pop();
    s.versions = Some(vec![
        Some(VersionLabel::Name("v1".to_owned())),
        Some(VersionLabel::Name("v2".to_owned())),
        Some(VersionLabel::Name("v2".to_owned())),
        None,
        None,
        Some(VersionLabel::Name("v1".to_owned())),
    ]);
    let report = run(&records, &[s]);
    let kinds = found(&report);
    assert!(
        kinds.contains(&(ProblemKind::MaskLength, 6, 7)),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(ProblemKind::VersionsLength, 6, 7)),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(ProblemKind::VersionMismatch, 1, 3)),
        "{kinds:?}"
    );
}

#[test]
fn a_faulted_answer_is_reported_over_its_segment() {
    let (records, s) = two_turns();
    let mut faulted = Records::new(usize::MAX, router());
    for (i, mut e) in records.entries().cloned().enumerate() {
        if i == 1 {
            e.fault = Some("cut-stream;after=1".to_owned());
        }
        faulted.push(e);
    }
    let report = run(&faulted, &[s]);
    assert_eq!(found(&report), [(ProblemKind::FaultedAnswer, 5, 7)]);
}

/// Routes for the two-turn sample: turn 2 carried rows for positions 0..8 (start 0, prompt + output - 1).
fn routed() -> (Records, AuditSample) {
    let (records, mut s) = two_turns();
    let out = with_routes_on(&records, 1);
    let full: Vec<u32> = s.prompt.iter().chain(&s.response).copied().collect();
    let mut data = Vec::new();
    router().append(&full, 0, &mut data);
    s.routed_experts = Some(Rows {
        data,
        row_len: SHAPE.row_len(),
    });
    (out, s)
}

#[test]
fn routes_are_checked_row_by_row_and_counted() {
    let (records, s) = routed();
    assert!(run(&records, std::slice::from_ref(&s)).ok);

    let mut none = s.clone();
    none.routed_experts = None;
    assert_eq!(
        found(&run(&records, &[none])),
        [(ProblemKind::RoutesMissing, 0, 0)]
    );

    // A row of another position: reported, and recognised as shifted.
    let mut shifted = s.clone();
    let rows = shifted.routed_experts.as_mut().expect("routes");
    let row_len = rows.row_len;
    let row3 = rows.row(3).to_vec();
    rows.data[4 * row_len..5 * row_len].copy_from_slice(&row3);
    let report = run(&records, &[shifted]);
    assert_eq!(found(&report), [(ProblemKind::RoutesDiffer, 4, 5)]);
    assert!(
        report.problems[0].message.contains("position 3"),
        "{report}"
    );

    // Rows left after the tokens were cut (miles #861): one row too many for 9 tokens.
    let mut long = s.clone();
    let rows = long.routed_experts.as_mut().expect("routes");
    let extra = rows.row(7).to_vec();
    rows.data.extend_from_slice(&extra);
    assert_eq!(
        found(&run(&records, &[long])),
        [(ProblemKind::RoutesRowCount, 8, 9)]
    );

    // Rows cut short of the last trained token (sequence position 8 needs rows 0..8).
    let mut short = s;
    let rows = short.routed_experts.as_mut().expect("routes");
    rows.data.truncate(5 * rows.row_len);
    assert_eq!(
        found(&run(&records, &[short])),
        [(ProblemKind::RoutesRowCount, 5, 8)]
    );
}

#[test]
fn the_report_text_names_the_sample_kind_and_range() {
    let (records, mut s) = two_turns();
    s.logprobs.as_mut().expect("logprobs")[0] = None;
    let text = run(&records, &[s]).text();
    assert!(
        text.starts_with("audit FAILED: 1 sample, 1 with problems (1 problem)"),
        "{text}"
    );
    assert!(
        text.contains("- sample s [logprob-none] logprobs[0:1]: "),
        "{text}"
    );
}

#[test]
fn an_audit_of_no_samples_or_of_nothing_trained_fails() {
    let (records, s) = two_turns();
    // No samples at all: an empty dump, a wrong path.
    let report = run(&records, &[]);
    assert!(!report.ok);
    assert_eq!(found(&report), [(ProblemKind::NothingAudited, 0, 0)]);
    let problem = &report.problems[0];
    assert_eq!((problem.sample, problem.sample_id.as_deref()), (None, None));
    assert!(
        problem.message.starts_with("the audit read no samples"),
        "{report}"
    );
    let text = report.text();
    assert!(
        text.starts_with("audit FAILED: 0 samples, 0 with problems (1 problem)"),
        "{text}"
    );
    assert!(
        text.contains("- the batch [nothing-audited]: the audit read no samples"),
        "{text}"
    );
    // Samples whose masks are all 0: nothing was compared with what the server sent, even where the masked
    // generated tokens are allowed.
    let mut untrained = s.clone();
    untrained.loss_mask = vec![0; 7];
    let report = audit(
        &records,
        &[untrained.clone(), untrained],
        &AuditOptions {
            allow_masked_generated: true,
        },
        None,
    );
    assert_eq!(found(&report), [(ProblemKind::NothingAudited, 0, 0)]);
    assert!(
        report.problems[0].message.starts_with(
            "none of the 14 tokens of the 2 samples is trained (every loss mask entry is 0)"
        ),
        "{report}"
    );
    // Samples without a response token.
    let mut empty = s.clone();
    empty.response.clear();
    empty.loss_mask.clear();
    empty.logprobs = Some(Vec::new());
    let report = run(&records, &[empty]);
    assert_eq!(found(&report), [(ProblemKind::NothingAudited, 0, 0)]);
    assert!(
        report.problems[0]
            .message
            .starts_with("the 1 sample has no response token"),
        "{report}"
    );
    // One trained token anywhere is an audit.
    assert!(run(&records, &[s]).ok);
}

#[test]
fn samples_of_the_same_index_are_told_apart_by_their_position() {
    // slime's multi-agent samples all carry index 0.
    let (records, s) = two_turns();
    let mut zeroed = s.clone();
    zeroed.logprobs.as_mut().expect("logprobs")[0] = Some(0.0);
    let mut other = AuditSample {
        id: "7".to_owned(),
        ..zeroed.clone()
    };
    other.logprobs.as_mut().expect("logprobs")[1] = Some(0.0);
    let zero = |s: AuditSample| AuditSample {
        id: "0".to_owned(),
        ..s
    };
    let report = run(
        &records,
        &[zero(s), zero(zeroed.clone()), other, zero(zeroed)],
    );
    let labels: Vec<&str> = report
        .problems
        .iter()
        .map(|p| p.sample_label.as_str())
        .collect();
    assert_eq!(labels, ["0 (samples[1])", "7", "0 (samples[3])"]);
    let ids: Vec<Option<&str>> = report
        .problems
        .iter()
        .map(|p| p.sample_id.as_deref())
        .collect();
    assert_eq!(ids, [Some("0"), Some("7"), Some("0")]);
    let text = report.text();
    assert!(
        text.contains("- sample 0 (samples[1]) [logprob-zero] logprobs[0:1]: "),
        "{text}"
    );
    assert!(
        text.contains("- sample 0 (samples[3]) [logprob-zero] logprobs[0:1]: "),
        "{text}"
    );
    assert!(
        text.contains("- sample 7 [logprob-zero] logprobs[0:2]: "),
        "{text}"
    );
}

#[test]
fn every_problem_kind_has_a_distinct_name() {
    let mut names: Vec<&str> = ProblemKind::ALL.iter().map(|k| k.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), ProblemKind::ALL.len());
}

// Samples in each layout.

fn name(v: &str) -> VersionLabel {
    VersionLabel::Name(v.to_owned())
}

fn parse(json: &str) -> AuditSample {
    parse_sample(json.as_bytes(), 0, None).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn each_layout_is_read_with_its_field_names() {
    let slime = parse(
        r#"{"tokens":[1,2,3,4],"response_length":2,"loss_mask":null,"rollout_log_probs":[-1.0,null],
            "index":9,"weight_version_spans":[{"version":"v1","start":0,"end":1}],
            "weight_versions":["v1"]}"#,
    );
    assert_eq!(slime.layout, Some(Layout::Slime));
    assert_eq!((slime.prompt, slime.response), (vec![1, 2], vec![3, 4]));
    assert_eq!(slime.loss_mask, [1, 1], "slime's missing mask is all ones");
    assert_eq!(slime.logprobs, Some(vec![Some(-1.0), None]));
    assert_eq!(slime.id, "9");
    assert_eq!(slime.versions, Some(vec![Some(name("v1")), None]));
    assert_eq!(slime.turn_versions, Some(vec!["v1".to_owned()]));

    let verl = parse(
        r#"{"prompt_ids":[1],"response_ids":[2,3],"response_mask":[1,0],"response_logprobs":[-1.0,0.0],
            "routed_experts":[[[1,2],[3,4]],[[5,6],[7,8]]]}"#,
    );
    assert_eq!(verl.layout, Some(Layout::Verl));
    assert_eq!(verl.loss_mask, [1, 0]);
    let rows = verl.routed_experts.expect("routes");
    assert_eq!((rows.len(), rows.row_len), (2, 4));
    assert_eq!(rows.row(1), [5, 6, 7, 8]);

    let areal = parse(
        r#"{"input_tokens":[1],"output_tokens":[2,3],"output_logprobs":[-1.0,-2.0],"output_versions":[3,4]}"#,
    );
    assert_eq!(areal.layout, Some(Layout::ArealResponse));
    assert_eq!(areal.loss_mask, [1, 1]);
    assert_eq!(
        areal.versions,
        Some(vec![
            Some(VersionLabel::Number(3)),
            Some(VersionLabel::Number(4))
        ])
    );

    let trajectory = parse(
        r#"{"input_ids":[[1,2,3]],"loss_mask":[[0,1,1]],"logprobs":[[0.0,-1.0,-2.0]],"versions":[[-1,0,0]]}"#,
    );
    assert_eq!(trajectory.layout, Some(Layout::ArealTrajectory));
    assert!(trajectory.prompt.is_empty());
    assert_eq!(trajectory.response, [1, 2, 3]);
    assert_eq!(
        trajectory.versions,
        Some(vec![
            None,
            Some(VersionLabel::Number(0)),
            Some(VersionLabel::Number(0))
        ])
    );

    let generic =
        parse(r#"{"prompt_ids":[1],"response_ids":[2],"loss_mask":[true],"logprobs":["NaN"]}"#);
    assert_eq!(generic.layout, Some(Layout::Generic));
    assert_eq!(generic.loss_mask, [1]);
    assert!(generic.logprobs.expect("logprobs")[0].is_some_and(f32::is_nan));
}

#[test]
fn typed_arrays_carry_every_dtype() {
    use base64::Engine;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let ids: Vec<u8> = [1i64, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mask: Vec<u8> = vec![0, 1, 1];
    let lps: Vec<u8> = [-0.5f32, -1.25]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let json = format!(
        r#"{{"tokens":{{"dtype":"int64","shape":[3],"b64":"{}"}},"response_length":2,
            "loss_mask":{{"dtype":"uint8","shape":[2],"b64":"{}"}},
            "rollout_log_probs":{{"dtype":"float32","shape":[2],"b64":"{}"}}}}"#,
        b64(&ids),
        b64(&mask[1..]),
        b64(&lps)
    );
    let s = parse(&json);
    assert_eq!((s.prompt, s.response), (vec![1], vec![2, 3]));
    assert_eq!(s.loss_mask, [1, 1]);
    assert_eq!(s.logprobs, Some(vec![Some(-0.5), Some(-1.25)]));
}

#[test]
fn an_unreadable_sample_names_its_position_and_field() {
    let err = |json: &str| parse_samples(json.as_bytes(), None).expect_err(json);
    let e = err(
        r#"[{"prompt_ids":[1],"response_ids":[2]},{"prompt_ids":[1],"response_ids":[2],"loss_mask":[2]}]"#,
    );
    assert_eq!((e.sample, e.field.as_str()), (Some(1), "loss_mask[0]"));
    assert_eq!(
        e.to_string(),
        "samples[1].loss_mask[0]: expected 0 or 1 (a loss mask holds 0 and 1), got 2"
    );
    let e = err(r#"[{"foo":1}]"#);
    assert!(e.message.contains("no layout"), "{e}");
    assert!(e.to_string().starts_with("samples[0]: no layout"), "{e}");
    let e = err(r#"[{"prompt_ids":[1],"response_ids":[[1,2],[3]]}]"#);
    assert_eq!(e.field, "response_ids[1]");
    assert!(e.message.contains("rectangular"), "{e}");
    let e = err(r#"[{"prompt_ids":[1],"response_ids":{"dtype":"int8","shape":[1],"b64":"AQ=="}}]"#);
    assert_eq!(e.field, "response_ids");
    assert!(e.message.contains("dtype \"int8\""), "{e}");
    let e =
        err(r#"[{"prompt_ids":[1],"response_ids":{"dtype":"int32","shape":[2],"b64":"AQ=="}}]"#);
    assert!(e.message.contains("holds 8 bytes, not 1"), "{e}");
    let e = err(r#"[{"tokens":[1],"response_length":3}]"#);
    assert_eq!(e.field, "response_length");
}

#[test]
fn a_value_of_the_wrong_type_names_the_sample_the_field_and_the_position_in_it() {
    let err = |json: &str| {
        parse_samples(json.as_bytes(), None)
            .expect_err(json)
            .to_string()
    };
    let good = r#"{"prompt_ids":[1],"response_ids":[2,3]}"#;
    // A string where a logprob belongs, in each form of body: the sample and the element, not the body.
    let bad = r#"{"prompt_ids":[1],"response_ids":[2,3],"logprobs":[-0.5,"abc"]}"#;
    let expected = r#"samples[1].logprobs[1]: expected a number, got the string "abc" (only "NaN", "Infinity" and "-Infinity" stand for numbers)"#;
    assert_eq!(err(&format!("[{good},{bad}]")), expected);
    assert_eq!(err(&format!("{good}\n{bad}\n")), expected);
    assert_eq!(err(&format!(r#"{{"samples":[{good},{bad}]}}"#)), expected);
    // Inside a tensor, a batch dimension, a typed array and rows: the position as the sample holds it.
    assert_eq!(
        err(r#"[{"input_ids":[[1,2,-3]],"loss_mask":[[0,1,1]]}]"#),
        "samples[0].input_ids[0][2]: expected a token id, got -3"
    );
    assert_eq!(
        err(r#"[{"prompt_ids":[1],"response_ids":[2],"routed_experts":[[[1,2]],[[3,1.5]]]}]"#),
        "samples[0].routed_experts[1][0][1]: expected an expert id, got 1.5"
    );
    assert_eq!(
        err(r#"[{"prompt_ids":[1],"response_ids":[2],"routed_experts":[[[1,2]],[[3,{}]]]}]"#),
        "samples[0].routed_experts[1][0][1]: expected a number, got an object"
    );
    assert_eq!(
        err(r#"[{"prompt_ids":[1],"response_ids":[null]}]"#),
        "samples[0].response_ids[0]: expected a token id, got null"
    );
    assert_eq!(
        err(r#"[{"prompt_ids":[1],"response_ids":"abc"}]"#),
        r#"samples[0].response_ids: expected a list of numbers (nested for a tensor) or a typed array {"dtype", "shape", "b64"}, got the string "abc""#
    );
    // Errors the JSON reader raises itself (a typed array without its bytes, a count as a string, an id as
    // a list) name the field too.
    let e = err(r#"[{"prompt_ids":[1],"response_ids":{"dtype":"int32","shape":[1]}}]"#);
    assert!(
        e.starts_with("samples[0].response_ids: missing field `b64`"),
        "{e}"
    );
    let e = err(r#"[{"tokens":[1,2],"response_length":"1"}]"#);
    assert!(
        e.starts_with("samples[0].response_length: invalid type: string \"1\""),
        "{e}"
    );
    let e = err(r#"[{"prompt_ids":[1],"response_ids":[2],"index":[0]}]"#);
    assert!(
        e.starts_with("samples[0].index: invalid type: sequence, expected a string or a number"),
        "{e}"
    );
    // Not a sample at all, and not JSON at all.
    assert_eq!(
        err(&format!("[{good}, 7]")),
        "samples[1]: expected a sample (a JSON object of one layout's keys), got a number"
    );
    let e = err("[{");
    assert!(e.starts_with("the body: not JSON: "), "{e}");
    let e = err(&format!("{good}\n{{\"prompt_ids\": [1\n"));
    assert!(e.starts_with("samples[1]: not JSON: "), "{e}");
}

#[test]
fn a_body_is_a_list_a_wrapped_batch_or_json_lines() {
    let one = r#"{"prompt_ids":[1],"response_ids":[2]}"#;
    let list = format!("[{one},{one}]");
    assert_eq!(
        parse_samples(list.as_bytes(), None)
            .expect("list")
            .samples
            .len(),
        2
    );
    let lines = format!("{one}\n\n{one}\n{one}\n");
    assert_eq!(
        parse_samples(lines.as_bytes(), None)
            .expect("lines")
            .samples
            .len(),
        3
    );
    let wrapped = format!(r#"{{"samples":[{one}],"options":{{"allow_masked_generated":true}}}}"#);
    let batch = parse_samples(wrapped.as_bytes(), None).expect("wrapped");
    assert_eq!(batch.samples.len(), 1);
    assert_eq!(
        batch.options,
        Some(AuditOptions {
            allow_masked_generated: true
        })
    );
    assert_eq!(
        parse_samples(one.as_bytes(), None)
            .expect("one line")
            .samples
            .len(),
        1
    );
    assert!(
        parse_samples(b"  ", None)
            .expect("empty")
            .samples
            .is_empty()
    );
}

// The store.

#[test]
fn the_store_evicts_oldest_first_within_its_bound_and_remembers_what_it_evicted() {
    let e = |i: u32| entry(&format!("r{i}"), &[i], &[i + 100; 50], &[-1.0; 50]);
    let one = e(0).bytes();
    let mut records = Records::new(3 * one, router());
    for i in 0..5 {
        records.push(e(i));
    }
    let seqs: Vec<u64> = records.entries().map(|e| e.seq).collect();
    assert_eq!(seqs, [2, 3, 4]);
    assert!(records.bytes() <= records.max_bytes());
    assert_eq!(records.evicted(), 2);
    assert_eq!(records.evicted_prompt(PromptHash::of(&[0])), Some(true));
    assert_eq!(records.evicted_prompt(PromptHash::of(&[9])), Some(false));
    assert!(records.get(1).is_none());
    assert_eq!(records.get(3).map(|e| e.rid.as_str()), Some("r3"));
    assert_eq!(
        records
            .with_prompt_hash(PromptHash::of(&[4]))
            .map(|e| e.seq)
            .collect::<Vec<_>>(),
        [4]
    );
    records.clear();
    assert_eq!(records.entries().len(), 0);
    assert_eq!(records.evicted(), 0);
    records.push(e(7));
    assert_eq!(records.entries().next().map(|e| e.seq), Some(0));
}

#[test]
fn a_store_forgets_old_evictions_beyond_its_memory_and_says_so() {
    let mut records = Records::new(1, router());
    let n = 5000u32;
    for i in 0..n {
        records.push(entry("r", &[i], &[1], &[-1.0]));
    }
    assert_eq!(records.evicted(), u64::from(n - 1));
    // The oldest evictions are forgotten: the store cannot say whether prompt [0] was one of them.
    assert_eq!(records.evicted_prompt(PromptHash::of(&[0])), None);
    assert_eq!(records.evicted_prompt(PromptHash::of(&[n - 2])), Some(true));
}

#[test]
fn a_dump_reads_back_as_the_same_store() {
    let (records, _) = routed();
    let mut with_odd = records.entries().cloned().collect::<Vec<_>>();
    let lps = with_odd[0].output_logprobs.as_mut().expect("logprobs");
    lps.values[0] = f32::NAN;
    lps.nulls = vec![0];
    lps.values[1] = f32::INFINITY;
    lps.values[2] = f32::NEG_INFINITY;
    let mut store = Records::new(usize::MAX, router());
    with_odd.iter().cloned().for_each(|e| store.push(e));
    let mut json = Vec::new();
    store.write_json(&mut json).expect("writes");
    let text = String::from_utf8(json.clone()).expect("utf-8");
    assert!(
        text.contains(r#""output_logprobs":[null,"Infinity","-Infinity"]"#),
        "{text}"
    );
    // The routes are written out as the answer carried them.
    let mut rows = Vec::new();
    let e = &with_odd[1];
    let tokens: Vec<u32> = e.prompt_ids.iter().chain(&e.output_ids).copied().collect();
    router().append(&tokens, 0, &mut rows);
    assert!(text.contains(&crate::wire::base64_i32(&rows)));
    let back = Records::from_dump(&json).expect("reads back");
    let entries: Vec<&Entry> = back.entries().collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1], &with_odd[1]);
    let lps = entries[0].output_logprobs.as_ref().expect("logprobs");
    assert_eq!(lps.get(0), Some(None));
    assert_eq!(lps.get(1), Some(Some(f32::INFINITY)));
    assert_eq!(back.router(), store.router());
}

#[test]
fn sent_routes_follow_their_edit() {
    let (records, _) = routed();
    let e = records.entries().nth(1).expect("turn 2").clone();
    let router = router();
    let row_len = SHAPE.row_len();
    let plain = e.routes(&router).expect("routes");
    assert_eq!(plain.len(), 8 * row_len);
    let edited = |edit: RoutesEdit, rows: usize| {
        let mut e = e.clone();
        e.routed_experts = Some(SentRoutes {
            start_len: 0,
            rows,
            edit,
        });
        e.routes(&router).expect("routes")
    };
    assert_eq!(edited(RoutesEdit::Short, 6), plain[..6 * row_len]);
    let extra = edited(RoutesEdit::ExtraRow, 9);
    assert_eq!(extra[8 * row_len..], plain[7 * row_len..]);
    let retracted = edited(RoutesEdit::Retracted, 8);
    assert!(retracted.iter().zip(&plain).all(|(a, b)| *a == b ^ 1));
}

#[test]
fn values_where_the_answer_carried_none_are_wrong_and_say_so() {
    // An answer of three tokens that carried two logprobs (`short-logprobs`), padded with 0.0 (vime PR #70).
    let mut short = entry("short", &[1], &[5, 6, 7], &[-1.0, -2.0]);
    short.fault = Some("short-logprobs".to_owned());
    let records = records(vec![short]);
    let padded = sample(
        &[1],
        &[5, 6, 7],
        &[1, 1, 1],
        &[Some(-1.0), Some(-2.0), Some(0.0)],
    );
    let report = run(&records, &[padded]);
    assert_eq!(
        found(&report),
        [
            (ProblemKind::LogprobZero, 2, 3),
            (ProblemKind::FaultedAnswer, 0, 3)
        ]
    );
    assert!(
        report.problems[0].message.contains("sent nothing"),
        "{report}"
    );

    // An answer whose logprobs a fault removed (`missing-logprobs`) was still asked for them.
    let mut removed = entry("removed", &[1], &[5, 6], &[]);
    removed.output_logprobs = None;
    removed.fault = Some("missing-logprobs".to_owned());
    let records = self::records(vec![removed]);
    let made_up = sample(&[1], &[5, 6], &[1, 1], &[Some(-0.5), Some(-0.5)]);
    let report = run(&records, &[made_up]);
    assert_eq!(
        found(&report),
        [
            (ProblemKind::LogprobDiffers, 0, 2),
            (ProblemKind::FaultedAnswer, 0, 2)
        ]
    );
    assert!(
        report.problems[0]
            .message
            .contains("the answer carried fewer logprobs than tokens (or none)"),
        "{report}"
    );
    assert_eq!(report.problems[0].expected.as_deref(), Some("nothing"));
}

#[test]
fn of_two_identical_answers_the_one_the_sample_agrees_with_explains_it() {
    // The same request twice (the model is deterministic): first answered with a fault, then cleanly.
    let mut faulted = entry("first", &[1], &[5, 6], &[-1.0, -2.0]);
    faulted.fault = Some("positive-logprob;at=1".to_owned());
    faulted.output_logprobs.as_mut().expect("logprobs").values[1] = 0.5;
    let clean = entry("retry", &[1], &[5, 6], &[-1.0, -2.0]);
    let records = records(vec![faulted, clean]);
    let from_retry = sample(&[1], &[5, 6], &[1, 1], &[Some(-1.0), Some(-2.0)]);
    assert!(run(&records, std::slice::from_ref(&from_retry)).ok);
    // The sample that kept the faulted value is explained by the faulted answer: its positive logprob and the
    // fault are both reported.
    let from_fault = sample(&[1], &[5, 6], &[1, 1], &[Some(-1.0), Some(0.5)]);
    let report = run(&records, &[from_fault]);
    assert_eq!(
        found(&report),
        [
            (ProblemKind::LogprobPositive, 1, 2),
            (ProblemKind::FaultedAnswer, 0, 2)
        ]
    );
    assert_eq!(report.problems[1].rid.as_deref(), Some("first"));
}

#[test]
fn logprobs_swapped_between_samples_are_one_problem_per_sample() {
    let records = records(vec![
        entry("a", &[1], &[5, 6, 7], &[-1.0, -2.0, -3.0]),
        entry("b", &[2], &[8, 9, 4], &[-4.0, -5.0, -6.0]),
    ]);
    let a = sample(
        &[1],
        &[5, 6, 7],
        &[1, 1, 1],
        &[Some(-4.0), Some(-5.0), Some(-6.0)],
    );
    let b = sample(
        &[2],
        &[8, 9, 4],
        &[1, 1, 1],
        &[Some(-1.0), Some(-2.0), Some(-3.0)],
    );
    let report = run(&records, &[a, b]);
    assert_eq!(
        found(&report),
        [
            (ProblemKind::LogprobFromOtherRequest, 0, 3),
            (ProblemKind::LogprobFromOtherRequest, 0, 3)
        ]
    );
    assert!(
        report.problems[0]
            .message
            .contains("(the answer of sample s (samples[1]))"),
        "{report}"
    );
}

#[test]
fn routes_left_long_after_the_tokens_were_cut_are_counted_not_compared() {
    // miles #861: the sample is cut after 2 of turn 2's tokens, its 8 rows are not.
    let (records, mut s) = routed();
    s.response.truncate(6);
    s.loss_mask.truncate(6);
    s.logprobs.as_mut().expect("logprobs").truncate(6);
    assert_eq!(
        found(&run(&records, &[s])),
        [(ProblemKind::RoutesRowCount, 7, 8)]
    );
}

#[test]
fn a_list_column_must_be_rectangular() {
    let with_routes = |routes: &str| {
        parse_samples(
            format!(r#"[{{"prompt_ids":[1],"response_ids":[2],"routed_experts":{routes}}}]"#)
                .as_bytes(),
            None,
        )
    };
    let rows = with_routes("[[[1,2],[3,4]],[[5,6],[7,8]]]").expect("a [2, 2, 2] tensor");
    let rows = rows.samples[0].routed_experts.clone().expect("routes");
    assert_eq!(
        (rows.len(), rows.row_len, rows.data),
        (2, 4, vec![1, 2, 3, 4, 5, 6, 7, 8])
    );
    for ragged in [
        "[[1,2],[3]]",
        "[[1],2]",
        "[1,[2]]",
        "[[],[1]]",
        "[[[1]],[2]]",
        "[[],2]",
    ] {
        let err = with_routes(ragged).expect_err(ragged);
        assert!(err.message.contains("rectangular"), "{ragged}: {err}");
    }
    let empty = with_routes("[]").expect_err("no rows is no tensor of rows");
    assert!(empty.message.contains("shape [0]"), "{empty}");
}

#[test]
fn a_context_whose_request_ended_without_a_token_says_so() {
    // The request was aborted before it generated anything (in the waiting queue); the sample trains anyway.
    let mut aborted = entry("waited", &[1], &[], &[]);
    aborted.finish_reason = Some(Finish::Abort);
    let records = records(vec![aborted]);
    let report = run(&records, &[sample(&[1], &[5], &[1], &[Some(-1.0)])]);
    assert_eq!(found(&report), [(ProblemKind::NeverGenerated, 0, 1)]);
    assert!(
        report.problems[0].message.contains("without a token"),
        "{report}"
    );
    assert_eq!(report.problems[0].expected, None);
}

#[test]
fn entries_of_one_prompt_are_evicted_oldest_first() {
    // A group's samples share their prompt (n > 1): the index keeps the newest of them.
    let one = entry("g0", &[1], &[5; 10], &[-1.0; 10]).bytes();
    let mut records = Records::new(3 * one, router());
    for i in 0..10 {
        records.push(entry(&format!("g{i}"), &[1], &[5; 10], &[-1.0; 10]));
    }
    let rids: Vec<&str> = records
        .with_prompt_hash(PromptHash::of(&[1]))
        .map(|e| e.rid.as_str())
        .collect();
    assert_eq!(rids, ["g7", "g8", "g9"]);
    assert_eq!(records.evicted(), 7);
}

/// The messages, written out by hand: what a user reads, with its counts, values and positions.
#[test]
fn messages_name_counts_values_and_positions() {
    let (records, s) = two_turns();
    let message = |s: AuditSample| {
        let report = run(&records, &[s]);
        assert_eq!(report.problems.len(), 1, "{report}");
        report.problems[0].message.clone()
    };
    let mut zero = s.clone();
    zero.logprobs.as_mut().expect("logprobs")[2] = Some(0.0);
    assert_eq!(
        message(zero),
        "1 trained token has logprob 0.0 (probability 1); the server sent -2.5 for response[2] (rid t1, output \
         position 2). A zero fill or a placeholder (vime PR #70 pads missing logprobs with 0.0; SkyRL PR #758 \
         gives a synthetic token 0.0) makes every importance ratio at these tokens wrong: keep the server's \
         values, and train only on tokens the server generated"
    );
    let mut nan = s.clone();
    let lps = nan.logprobs.as_mut().expect("logprobs");
    lps[5] = Some(f32::NAN);
    lps[6] = Some(f32::NAN);
    assert_eq!(
        message(nan),
        "2 trained tokens have logprob nan; the server sent -0.25 for response[5] (rid t2, output position 0). \
         A non-finite logprob poisons the loss (TRL #6166, OpenRLHF #1165): refuse such a response instead of \
         keeping it"
    );
    let mut masked = s.clone();
    masked.loss_mask[0] = 0;
    assert_eq!(
        message(masked),
        "1 token the server generated (rid t1) has loss mask 0, so training skips it: generated tokens filed as \
         environment output (the #1976 variant that drops them). If the mask is deliberate (off-policy masking, \
         an overlong filter), audit with allow_masked_generated"
    );
    let mut appended = s.clone();
    appended.response.extend([2, 3]);
    appended.loss_mask.extend([1, 1]);
    appended
        .logprobs
        .as_mut()
        .expect("logprobs")
        .extend([Some(0.0), Some(0.0)]);
    assert_eq!(
        message(appended),
        "response[7:9] (2 trained tokens) was never generated in this context: it follows the end of the \
         server's answer rid t2 (finish_reason stop), and no request continued from there: a token the client \
         appended after the answer's stop (a synthetic EOS, SkyRL PR #758), first 2, must have loss mask 0"
    );
    let mut missing = s;
    missing.logprobs = None;
    let report = run(&records, &[missing]);
    assert_eq!(
        report.problems[0].message,
        "logprobs is None, yet the sample trains on 5 tokens; the server sent a logprob for every token it \
         generated (rid t1, ...). Keep item[0] of each meta_info.output_token_logprobs entry beside the token \
         id item[1] (slime #1976, training-gym PR #75)"
    );
    // The report's totals, and its text as `Display` writes it.
    assert_eq!(
        (
            report.samples,
            report.samples_with_problems,
            report.tokens,
            report.trained_tokens,
            report.checked_logprobs,
            report.matched_items
        ),
        (1, 1, 7, 5, 0, 2)
    );
    assert_eq!(report.to_string(), report.text());
    assert!(
        report
            .text()
            .starts_with("audit FAILED: 1 sample, 1 with problems (1 problem); 5 trained tokens, 0 logprobs compared with 2 served items\n"),
        "{report}"
    );
}

#[test]
fn none_nan_or_positive_values_are_reported_even_where_a_fault_sent_them() {
    // A `null-logprob` at 0 and a `positive-logprob` at 1 on one answer; the sample kept both.
    let mut faulted = entry("f", &[1], &[5, 6, 7], &[-1.0, -2.0, -3.0]);
    let lps = faulted.output_logprobs.as_mut().expect("logprobs");
    lps.values[0] = f32::NAN;
    lps.nulls = vec![0];
    lps.values[1] = 0.5;
    faulted.fault = Some("null-logprob;at=0".to_owned());
    let records = records(vec![faulted]);
    let kept = sample(&[1], &[5, 6, 7], &[1, 1, 1], &[None, Some(0.5), Some(-3.0)]);
    let report = run(&records, &[kept]);
    assert_eq!(
        found(&report),
        [
            (ProblemKind::LogprobNone, 0, 1),
            (ProblemKind::LogprobPositive, 1, 2),
            (ProblemKind::FaultedAnswer, 0, 3)
        ]
    );
    assert_eq!(report.problems[1].expected.as_deref(), Some("0.5"));
    assert_eq!(report.problems[1].found.as_deref(), Some("0.5"));
}

#[test]
fn versions_are_checked_against_the_span_of_each_output_position() {
    // Turn 2 was made by two versions: its first token by "v1", its second by "v2" (a weight update while it ran).
    let (records, mut s) = two_turns();
    let mut split = Records::new(usize::MAX, router());
    for (i, mut e) in records.entries().cloned().enumerate() {
        if i == 1 {
            e.weight_versions = vec![
                Span {
                    version: "v1".to_owned(),
                    start: 0,
                    end: 1,
                    weights: 0,
                },
                Span {
                    version: "v2".to_owned(),
                    start: 1,
                    end: 2,
                    weights: 1,
                },
            ];
        }
        split.push(e);
    }
    let label = |v: &str| Some(VersionLabel::Name(v.to_owned()));
    s.versions = Some(vec![
        label("v1"),
        label("v1"),
        label("v1"),
        None,
        None,
        label("v1"),
        label("v2"),
    ]);
    assert!(run(&split, std::slice::from_ref(&s)).ok);
    // Every token labelled with the version after the round trip (AReaL PR #1569), and one labelled "v0".
    s.versions = Some(vec![
        label("v0"),
        label("v2"),
        label("v2"),
        None,
        None,
        label("v2"),
        label("v2"),
    ]);
    let report = run(&split, &[s]);
    let mismatches: Vec<(usize, usize, Option<&str>, Option<&str>)> = report
        .problems
        .iter()
        .map(|p| (p.start, p.end, p.expected.as_deref(), p.found.as_deref()))
        .collect();
    assert_eq!(
        mismatches,
        [
            (0, 1, Some("v1"), Some("v0")),
            (1, 3, Some("v1"), Some("v2")),
            (5, 6, Some("v1"), Some("v2"))
        ]
    );
}

#[test]
fn routes_of_the_wrong_width_or_wrong_to_the_end_are_one_problem() {
    let (records, s) = routed();
    // Rows of one layer where the model has two.
    let mut narrow = s.clone();
    let rows = narrow.routed_experts.as_mut().expect("routes");
    rows.row_len = SHAPE.row_len() / 2;
    let report = run(&records, &[narrow]);
    assert_eq!(found(&report), [(ProblemKind::RoutesDiffer, 0, 16)]);
    assert!(
        report.problems[0]
            .message
            .contains("rows of 2 expert ids where the server's model has 4")
    );
    // Every row re-captured (miles #3277): one problem over every row the server sent.
    let mut retracted = s;
    let rows = retracted.routed_experts.as_mut().expect("routes");
    rows.data.iter_mut().for_each(|e| *e ^= 1);
    assert_eq!(
        found(&run(&records, &[retracted])),
        [(ProblemKind::RoutesDiffer, 0, 8)]
    );
}

#[test]
fn routes_are_compared_only_where_the_sample_shares_the_answers_context() {
    // The sample drifts from turn 1's answer at response[1] (re-tokenized), so turn 2 never happened for it;
    // give turn 1 routes through its last output token as input.
    let (records, mut s) = two_turns();
    let routed = with_routes_on(&records, 0);
    s.response = vec![10, 99];
    s.loss_mask = vec![1, 0];
    s.logprobs = Some(vec![Some(-0.5), Some(0.0)]);
    let full = [1, 2, 10, 99];
    let mut data = Vec::new();
    router().append(&full, 0, &mut data);
    let row_len = SHAPE.row_len();
    // Row 2 (token 10 as input) is shared with the answer: made wrong, it is reported.
    data[2 * row_len] ^= 1;
    s.routed_experts = Some(Rows { data, row_len });
    let report = run(&routed, &[s]);
    assert_eq!(found(&report), [(ProblemKind::RoutesDiffer, 2, 3)]);
}

#[test]
fn a_wrong_row_is_traced_to_its_neighbour_or_to_another_request() {
    let (records, s) = routed();
    let row_len = SHAPE.row_len();
    let with_row = |r: usize, row: &[i32]| {
        let mut s = s.clone();
        let rows = s.routed_experts.as_mut().expect("routes");
        rows.data[r * row_len..(r + 1) * row_len].copy_from_slice(row);
        let report = run(&records, &[s]);
        assert_eq!(found(&report), [(ProblemKind::RoutesDiffer, r, r + 1)]);
        report.problems[0].message.clone()
    };
    let rows = s.routed_experts.clone().expect("routes");
    // Row 4 holds row 5, and the last row (7) holds row 6.
    assert!(
        with_row(4, rows.row(5)).contains("row 4 is the row of position 5: rows shifted by -1"),
        "{}",
        with_row(4, rows.row(5))
    );
    assert!(with_row(7, rows.row(6)).contains("row 7 is the row of position 6: rows shifted by 1"));
    // Row 1 holds the row another request (prompt [3, 4]) was sent for position 1.
    let mut other = Records::new(usize::MAX, router());
    records.entries().cloned().for_each(|e| other.push(e));
    // An answer sent without routes is not where a row came from.
    let unrouted = entry("unrouted", &[3, 4], &[8, 9], &[-1.0, -1.0]);
    let mut e = entry("elsewhere", &[3, 4], &[8, 9], &[-1.0, -1.0]);
    e.routed_experts = Some(SentRoutes {
        start_len: 0,
        rows: 3,
        edit: RoutesEdit::None,
    });
    let foreign = router().row(&[3, 4, 8, 9], 1);
    let mut s = s;
    let data = &mut s.routed_experts.as_mut().expect("routes").data;
    data[row_len..2 * row_len].copy_from_slice(&foreign);
    let mut none_sent = Records::new(usize::MAX, router());
    records.entries().cloned().for_each(|e| none_sent.push(e));
    none_sent.push(unrouted.clone());
    let report = run(&none_sent, std::slice::from_ref(&s));
    assert_eq!(found(&report), [(ProblemKind::RoutesDiffer, 1, 2)]);
    assert!(!report.problems[0].message.contains("unrouted"), "{report}");
    other.push(unrouted);
    other.push(e);
    let report = run(&other, &[s]);
    assert_eq!(found(&report), [(ProblemKind::RoutesDiffer, 1, 2)]);
    assert!(
        report.problems[0]
            .message
            .contains("row 1 is the row rid elsewhere was sent for its position 1: routes taken from another request"),
        "{report}"
    );
}

#[test]
fn an_entry_counts_what_it_holds() {
    let mut e = entry("rid7", &[1, 2, 3], &[4, 5], &[-1.0, -2.0]);
    e.fault = Some("nan-logprob".to_owned());
    let mut supports = Supports::default();
    assert!(supports.is_empty());
    supports.push(&[4, 9, 11]);
    supports.push(&[5]);
    assert!(!supports.is_empty());
    e.sampling_supports = Some(supports);
    assert!(!e.output_logprobs.as_ref().expect("logprobs").is_empty());
    assert!(SentLogprobs::default().is_empty());
    // 256 fixed, 4 for the rid, 4 * 5 ids, 4 * 2 logprobs, 40 + 2 for the span "v1", 4 * 4 support ids and
    // 8 * 2 row ends, 11 for the fault; a null costs 8 more.
    assert_eq!(e.bytes(), 256 + 4 + 20 + 8 + 42 + 16 + 16 + 11);
    let mut with_null = e.clone();
    let lps = with_null.output_logprobs.as_mut().expect("logprobs");
    lps.values[1] = f32::NAN;
    lps.nulls = vec![1];
    assert_eq!(with_null.bytes(), e.bytes() + 8);
    assert_eq!(e.seq_len(), 5);
    // The supports, with the rest, read back from the ledger's JSON.
    let mut records = Records::new(usize::MAX, router());
    records.push(e.clone());
    let mut json = Vec::new();
    records.write_json(&mut json).expect("writes");
    let back = Records::from_dump(&json).expect("reads");
    assert_eq!(back.entries().next(), Some(&e));
    assert_eq!(back.bytes(), e.bytes());
}

#[test]
fn a_large_store_remembers_eight_evicted_prompts_per_entry_it_holds() {
    // A store that holds 600 entries remembers the prompts of the last 4,800 evictions.
    let one = entry("r", &[0, 0], &[1], &[-1.0]).bytes();
    let mut records = Records::new(600 * one, router());
    let n = 6000u32;
    for i in 0..n {
        records.push(entry("r", &[i / 256, i % 256], &[1], &[-1.0]));
    }
    assert_eq!(records.entries().len(), 600);
    assert_eq!(records.bytes(), 600 * one);
    assert_eq!(records.evicted(), u64::from(n - 600));
    let prompt = |i: u32| PromptHash::of(&[i / 256, i % 256]);
    // Evicted 0..5400: 600..5400 remembered, 599 forgotten, 5400 still held.
    assert_eq!(records.evicted_prompt(prompt(600)), Some(true));
    assert_eq!(records.evicted_prompt(prompt(599)), None);
    assert_eq!(records.evicted_prompt(prompt(5399)), Some(true));
    assert!(records.with_prompt_hash(prompt(5400)).next().is_some());
}

#[test]
fn layouts_are_told_by_all_of_their_keys() {
    let layout = |json: &str| parse_sample(json.as_bytes(), 0, None).map(|s| s.layout);
    let generic = Some(Layout::Generic);
    // slime needs `tokens` and `response_length`; AReaL's response both of its token lists.
    assert_eq!(
        layout(r#"{"prompt_ids":[1],"response_ids":[2],"response_length":1}"#),
        Ok(generic)
    );
    assert_eq!(
        layout(r#"{"prompt_ids":[1],"response_ids":[2],"input_tokens":[1]}"#),
        Ok(generic)
    );
    // verl needs its mask or its logprobs beside the ids.
    assert_eq!(
        layout(r#"{"prompt_ids":[1],"response_ids":[2],"response_logprobs":[-1.0]}"#),
        Ok(Some(Layout::Verl))
    );
    assert_eq!(
        layout(r#"{"prompt_ids":[1],"response_ids":[2],"response_mask":[1]}"#),
        Ok(Some(Layout::Verl))
    );
    // An AReaL trajectory needs `loss_mask` beside `input_ids`: a generic sample may carry `input_ids` too.
    let err = layout(r#"{"input_ids":[1,2]}"#).expect_err("no layout");
    assert!(err.message.contains("no layout has these keys"), "{err}");
    // A generic sample needs both of its token lists.
    for half in [r#"{"prompt_ids":[1]}"#, r#"{"response_ids":[2]}"#] {
        let err = layout(half).expect_err("half a generic sample");
        assert!(
            err.message.contains("no layout has these keys"),
            "{half}: {err}"
        );
    }
    assert_eq!(
        layout(r#"{"prompt_ids":[1],"response_ids":[2],"input_ids":[1,2]}"#),
        Ok(generic)
    );
    assert_eq!(
        layout(r#"{"input_ids":[1,2],"loss_mask":[0,1]}"#),
        Ok(Some(Layout::ArealTrajectory))
    );
    // A layout named without its keys says what is missing, in its name.
    let err =
        parse_sample(br#"{"layout":"slime","prompt_ids":[1]}"#, 3, None).expect_err("no tokens");
    assert_eq!(
        err.to_string(),
        "samples[3].tokens: missing: a slime sample has it"
    );
    let names: Vec<String> = Layout::ALL.iter().map(ToString::to_string).collect();
    assert_eq!(
        names,
        [
            "slime",
            "verl",
            "areal-response",
            "areal-trajectory",
            "generic"
        ]
    );
}

#[test]
fn typed_arrays_of_every_width_and_sign_read_their_values() {
    use base64::Engine;
    let typed = |dtype: &str, bytes: Vec<u8>, n: usize| {
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        format!(r#"{{"dtype":"{dtype}","shape":[{n}],"b64":"{b64}"}}"#)
    };
    let ids = [300i64, 70_000, 151_935];
    let cases = [
        (
            "int64",
            ids.iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
        (
            "int32",
            ids.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
        ),
        (
            "float64",
            ids.iter().flat_map(|&v| (v as f64).to_le_bytes()).collect(),
        ),
    ];
    for (dtype, bytes) in cases {
        let json = format!(
            r#"{{"prompt_ids":[1],"response_ids":{}}}"#,
            typed(dtype, bytes, 3)
        );
        assert_eq!(parse(&json).response, [300, 70_000, 151_935], "{dtype}");
    }
    // Signed 16-bit routes, one row of two experts per position.
    let experts: Vec<u8> = [300i16, -2].iter().flat_map(|v| v.to_le_bytes()).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(experts);
    let json = format!(
        r#"{{"prompt_ids":[1],"response_ids":[2],"routed_experts":{{"dtype":"int16","shape":[1,2],"b64":"{b64}"}}}}"#
    );
    let rows = parse(&json).routed_experts.expect("routes");
    assert_eq!(
        (rows.data.clone(), rows.len(), rows.is_empty()),
        (vec![300, -2], 1, false)
    );
    assert!(Rows::default().is_empty());
}

#[test]
fn values_that_are_not_ids_logprobs_or_expert_ids_are_refused() {
    let err = |json: &str| {
        parse_sample(json.as_bytes(), 0, None)
            .expect_err(json)
            .message
    };
    for bad in ["-1", "1.5", "8589934592"] {
        let message = err(&format!(r#"{{"prompt_ids":[1],"response_ids":[{bad}]}}"#));
        assert_eq!(message, format!("expected a token id, got {bad}"));
    }
    let message = err(r#"{"prompt_ids":[1],"response_ids":[2],"routed_experts":[[1.5]]}"#);
    assert_eq!(message, "expected an expert id, got 1.5");
    let message = err(r#"{"prompt_ids":[1],"response_ids":"abc"}"#);
    assert!(
        message.contains("a list of numbers (nested for a tensor) or a typed array"),
        "{message}"
    );
    let message = err(r#"{"prompt_ids":[1],"response_ids":[{}]}"#);
    assert_eq!(message, "expected a number, got an object");
    let message = err(r#"{"prompt_ids":[1],"response_ids":[2],"logprobs":["-0.5"]}"#);
    assert!(
        message.starts_with(r#"expected a number, got the string "-0.5""#),
        "{message}"
    );
    // The strings that stand for numbers JSON cannot write.
    let s = parse(
        r#"{"prompt_ids":[1],"response_ids":[2,3,4],"logprobs":["Infinity","-Infinity","NaN"]}"#,
    );
    let lps = s.logprobs.expect("logprobs");
    assert_eq!(lps[..2], [Some(f32::INFINITY), Some(f32::NEG_INFINITY)]);
    assert!(lps[2].is_some_and(f32::is_nan));
}

#[test]
fn zero_rows_where_no_answer_sent_routes_are_padding() {
    // verl's layout: turn 1 answered with routes, then two tool tokens, whose rows the sample zero-fills.
    let (records, mut s) = two_turns();
    let routed = with_routes_on(&records, 0);
    s.response.truncate(5);
    s.loss_mask.truncate(5);
    s.logprobs.as_mut().expect("logprobs").truncate(5);
    let full: Vec<u32> = s.prompt.iter().chain(&s.response).copied().collect();
    let mut data = Vec::new();
    router().append(&full, 0, &mut data);
    let row_len = SHAPE.row_len();
    // Rows 4 and 5 (the tool tokens as inputs) were never sent: zeros, and one more zero row past the end.
    data.truncate(4 * row_len);
    data.extend(vec![0; 3 * row_len]);
    s.routed_experts = Some(Rows { data, row_len });
    let report = run(&routed, std::slice::from_ref(&s));
    assert!(report.ok, "{report}");
    // A wrong last sent row is that row alone, not also the unsent zero row after it.
    let rows = s.routed_experts.as_mut().expect("routes");
    rows.data[3 * row_len] ^= 1;
    assert_eq!(
        found(&run(&routed, &[s])),
        [(ProblemKind::RoutesDiffer, 3, 4)]
    );
}

#[test]
fn routes_of_no_rows_are_too_few_not_too_narrow() {
    let (records, mut s) = routed();
    s.routed_experts = Some(Rows {
        data: Vec::new(),
        row_len: 1,
    });
    assert_eq!(
        found(&run(&records, &[s])),
        [(ProblemKind::RoutesRowCount, 0, 8)]
    );
}

#[test]
fn a_row_two_positions_away_is_a_shift_by_two_and_a_made_up_value_differs() {
    let (records, s) = routed();
    let mut shifted = s.clone();
    let row_len = SHAPE.row_len();
    let rows = shifted.routed_experts.as_mut().expect("routes");
    let row3 = rows.row(3).to_vec();
    rows.data[5 * row_len..6 * row_len].copy_from_slice(&row3);
    let report = run(&records, &[shifted]);
    assert!(
        report.problems[0]
            .message
            .contains("row 5 is the row of position 3: rows shifted by 2"),
        "{report}"
    );
    // A logprob that is no value the server sent anywhere.
    let mut differs = s;
    differs.logprobs.as_mut().expect("logprobs")[6] = Some(-9.5);
    let report = run(&records, &[differs]);
    assert_eq!(
        report.problems[0].message,
        "1 trained token has logprob -9.5 where the server sent -0.75 for response[6] (rid t2, output position \
         1): 8.75 from the value sent. The value did not come from this answer: keep the logprob SGLang sent \
         (item[0]) rather than one computed or converted later"
    );
}

#[test]
fn a_value_from_a_later_answer_of_the_same_sample_names_that_answer_not_another_sample() {
    // The sample keeps turn 2's first token only; its first token holds turn 2's second logprob, which no
    // position of the sample was sent.
    let (records, mut s) = two_turns();
    s.response.truncate(6);
    s.loss_mask.truncate(6);
    let lps = s.logprobs.as_mut().expect("logprobs");
    lps.truncate(6);
    lps[0] = Some(-0.75);
    let report = run(&records, &[s]);
    assert_eq!(
        found(&report),
        [(ProblemKind::LogprobFromOtherRequest, 0, 1)]
    );
    let message = &report.problems[0].message;
    assert!(message.contains("rid t2"), "{message}");
    assert!(!message.contains("sample 0"), "{message}");
}

/// One answer of four tokens whose logprobs are typical values, not short binary fractions.
fn typical() -> Records {
    records(vec![entry(
        "r",
        &[1],
        &[5, 6, 7, 8],
        &[-0.731_234_5, -1.234_567_8, -0.012_345_6, -7.2],
    )])
}

#[test]
fn a_value_rounded_from_the_one_sent_says_how_and_by_how_much() {
    let records = typical();
    let with = |lps: [f32; 4]| {
        let s = sample(&[1], &[5, 6, 7, 8], &[1, 1, 1, 1], &lps.map(Some));
        run(&records, &[s])
    };
    // The values bfloat16 holds (torch's round to nearest even, computed by hand): one problem over the run.
    let report = with([-0.730_468_75, -1.234_375, -0.012_329_102, -7.187_5]);
    assert_eq!(found(&report), [(ProblemKind::LogprobDiffers, 0, 4)]);
    let message = &report.problems[0].message;
    assert!(
        message.contains(
            "rounded: 7.7e-4 from the value sent, as bfloat16 rounds it (each of the 4 values is the value sent \
             in bfloat16, at most 0.0125 from it)"
        ),
        "{message}"
    );
    assert!(message.contains("float32"), "{message}");
    assert!(
        !message.contains("did not come from this answer"),
        "{message}"
    );
    // The values rounded to 3 decimals; -7.2 rounds to itself, so the run ends before it.
    let report = with([-0.731, -1.235, -0.012, -7.2]);
    assert_eq!(found(&report), [(ProblemKind::LogprobDiffers, 0, 3)]);
    let message = &report.problems[0].message;
    assert!(
        message
            .contains(
            "rounded: 2.3e-4 from the value sent, as rounding to 3 decimals does (each of the 3 values is the value \
             sent rounded to 3 decimals, at most 4.3e-4 from it)"
        ),
        "{message}"
    );
    // float16 (which -1.2345678 shares with bfloat16).
    let report = with([-0.731_445_3, -1.234_375, -0.012_344_36, -7.199_218_8]);
    assert_eq!(found(&report), [(ProblemKind::LogprobDiffers, 0, 4)]);
    assert!(
        report.problems[0]
            .message
            .contains("rounded: 2.1e-4 from the value sent, as float16 rounds it"),
        "{report}"
    );
    // A value near the one sent that no rounding gives is a value that differs, by how much.
    let report = with([-0.74, -1.234_567_8, -0.012_345_6, -7.2]);
    assert_eq!(found(&report), [(ProblemKind::LogprobDiffers, 0, 1)]);
    let message = &report.problems[0].message;
    assert!(
        message.contains(": 0.00877 from the value sent."),
        "{message}"
    );
    assert!(
        message.contains("did not come from this answer"),
        "{message}"
    );
}

/// The model of a server with seed 7, and the logprob it gives `id` after `context` at temperature `t`.
fn model() -> crate::model::Model {
    crate::model::Model::new(crate::model::ModelConfig {
        seed: 7,
        ..crate::model::ModelConfig::default()
    })
    .expect("a model")
}

/// A generic sample that trains on every token of `output` with logprobs `lps`.
fn trained(prompt: &[u32], output: &[u32], lps: &[f32]) -> AuditSample {
    let mask = vec![1; output.len()];
    let lps: Vec<Option<f32>> = lps.iter().copied().map(Some).collect();
    sample(prompt, output, &mask, &lps)
}

/// The logprob `policy` gives each token of `output` after `prompt` and the tokens before it, at temperature `t`.
fn logprobs_along(
    model: &crate::model::Model,
    policy: &crate::model::Policy,
    prompt: &[u32],
    output: &[u32],
    t: f64,
) -> Vec<f32> {
    (0..output.len())
        .map(|j| {
            let context: Vec<u32> = prompt.iter().chain(&output[..j]).copied().collect();
            model
                .distribution_under(policy, &context, t, &[])
                .logprob(output[j]) as f32
        })
        .collect()
}

#[test]
fn a_rescore_at_temperature_one_of_a_sample_drawn_at_another_says_so() {
    let model = model();
    let (prompt, output) = ([3u32, 4], [10u32, 11, 12]);
    let at = |t: f64| logprobs_along(&model, &model.policy(), &prompt, &output, t);
    let (sent, rescored) = (at(0.7), at(1.0));
    assert!(sent.iter().zip(&rescored).all(|(a, b)| a != b));
    let mut e = entry("hot", &prompt, &output, &sent);
    e.logprob_temperature = 0.7;
    let records = records(vec![e]);
    let s = trained(&prompt, &output, &rescored);
    // With the model the server ran, the values are recognised as its logprobs at temperature 1.
    let report = audit(
        &records,
        std::slice::from_ref(&s),
        &AuditOptions::default(),
        Some(&model),
    );
    assert_eq!(found(&report), [(ProblemKind::LogprobDiffers, 0, 3)]);
    let message = &report.problems[0].message;
    assert!(
        message.contains(&format!(
            "{} is the model's logprob of this token at temperature 1, while rid hot sampled at temperature 0.7",
            rescored[0]
        )),
        "{message}"
    );
    assert!(message.contains("miles PR #1345"), "{message}");
    // Without it (a saved ledger), the message still names the temperature the request sampled at.
    let report = run(&records, std::slice::from_ref(&s));
    let message = &report.problems[0].message;
    assert!(
        message.contains(
            "rid hot sampled at temperature 0.7 and its logprobs are at that temperature"
        ),
        "{message}"
    );
    // A request at temperature 1 gives no such hint.
    let records = self::records(vec![entry("cool", &prompt, &output, &rescored)]);
    let mut other = s;
    other.logprobs = Some(sent.iter().copied().map(Some).collect());
    let report = audit(&records, &[other], &AuditOptions::default(), Some(&model));
    assert_eq!(found(&report), [(ProblemKind::LogprobDiffers, 0, 3)]);
    assert!(
        !report.problems[0].message.contains("temperature"),
        "{report}"
    );
}

/// A policy that moves every slot of every bucket, so that no logprob is the zero policy's.
fn moved_policy() -> crate::model::Policy {
    let offsets = (0..8)
        .map(|b| std::array::from_fn(|s| 0.25 + 0.125 * (b * 9 + s) as f32 / 9.0))
        .collect();
    crate::model::Policy::new(offsets).expect("a policy")
}

/// A span of `n` output tokens from the server's `weights`-th weights, named `version`.
fn span(version: &str, n: usize, weights: u64) -> Vec<Span> {
    vec![Span {
        version: version.to_owned(),
        start: 0,
        end: n,
        weights,
    }]
}

#[test]
fn logprobs_of_older_weights_than_the_tokens_name_the_stale_weights() {
    let model = model();
    let before = model.policy();
    model.set_policy(moved_policy(), 1);
    let after = model.policy();
    let (prompt, output) = ([3u32, 4], [10u32, 11, 12]);
    let under =
        |policy: &crate::model::Policy, t: f64| logprobs_along(&model, policy, &prompt, &output, t);
    let (served, stale) = (under(&after, 0.8), under(&before, 0.8));
    assert!(served.iter().zip(&stale).all(|(a, b)| a != b));
    // An answer under the start-up weights (version "v0") names them; the tokens were generated under weights 1.
    let mut old = entry("old", &[5], &[6], &[-0.5]);
    old.weight_versions = span("v0", 1, 0);
    let mut e = entry("new", &prompt, &output, &served);
    e.logprob_temperature = 0.8;
    e.weight_versions = span("v1", 3, 1);
    let records = records(vec![old, e]);
    let holding = |lps: &[f32]| trained(&prompt, &output, lps);
    let report = audit(
        &records,
        &[holding(&stale)],
        &AuditOptions::default(),
        Some(&model),
    );
    assert_eq!(
        found(&report),
        [(ProblemKind::LogprobStale, 0, 3)],
        "{report}"
    );
    let message = &report.problems[0].message;
    assert!(
        message.contains(&format!(
            "{} is the model's logprob of this token under the server's weights 0 (version \"v0\"), while rid \
             new generated it under weights 1 (version \"v1\")",
            stale[0]
        )),
        "{message}"
    );
    // The served values pass; values under the serving weights at another temperature are not stale; without
    // the model (a saved ledger) stale values are values that differ.
    let report = audit(
        &records,
        &[holding(&served)],
        &AuditOptions::default(),
        Some(&model),
    );
    assert!(report.ok, "{report}");
    let report = audit(
        &records,
        &[holding(&under(&after, 1.1))],
        &AuditOptions::default(),
        Some(&model),
    );
    assert_eq!(
        found(&report),
        [(ProblemKind::LogprobDiffers, 0, 3)],
        "{report}"
    );
    let report = run(&records, &[holding(&stale)]);
    assert_eq!(
        found(&report),
        [(ProblemKind::LogprobDiffers, 0, 3)],
        "{report}"
    );
    // Tokens generated under the start-up weights have no older weights to be stale against.
    let mut records_before = Vec::new();
    let mut e = entry("first", &prompt, &output, &stale);
    e.logprob_temperature = 0.8;
    e.weight_versions = span("v0", 3, 0);
    records_before.push(e);
    let report = audit(
        &self::records(records_before),
        &[holding(&served)],
        &AuditOptions::default(),
        Some(&model),
    );
    assert_eq!(
        found(&report),
        [(ProblemKind::LogprobDiffers, 0, 3)],
        "{report}"
    );
}

#[test]
fn a_stop_token_dropped_from_the_ids_keeps_its_logprob_and_the_report_says_so() {
    // The answer ends with its stop token 2; the client strips it from the ids and keeps every logprob.
    let records = records(vec![entry("r", &[1], &[5, 6, 2], &[-1.0, -2.0, -0.25])]);
    let s = sample(
        &[1],
        &[5, 6],
        &[1, 1],
        &[Some(-1.0), Some(-2.0), Some(-0.25)],
    );
    let report = run(&records, &[s]);
    assert_eq!(found(&report), [(ProblemKind::LogprobsLength, 2, 3)]);
    let message = &report.problems[0].message;
    assert!(
        message.starts_with(
            "3 logprobs for 2 tokens: 1 too many. logprobs[2], -0.25, is the logprob the server sent for token 2 \
             (rid r, output position 2), which the sample's ids leave out: the answer's stop token (finish_reason \
             stop)"
        ),
        "{message}"
    );
    assert!(!message.contains("phantom"), "{message}");
    // Dropped between two turns, the kept logprob puts every later one a position late.
    let (records, mut s) = two_turns();
    let mut with_stop = Records::new(usize::MAX, router());
    let mut first = entry("t1", &[1, 2], &[10, 11, 12, 2], &[-0.5, -1.5, -2.5, -0.125]);
    first.finish_reason = Some(Finish::Stop);
    with_stop.push(first);
    records
        .entries()
        .skip(1)
        .cloned()
        .for_each(|e| with_stop.push(e));
    s.logprobs
        .as_mut()
        .expect("logprobs")
        .insert(3, Some(-0.125));
    let report = run(&with_stop, &[s]);
    assert_eq!(found(&report)[0], (ProblemKind::LogprobsLength, 7, 8));
    assert!(
        report.problems[0].message.contains(
            "logprobs[3], -0.125, is the logprob the server sent for token 2 (rid t1, output position 3), which \
             the sample's ids leave out: the answer's stop token (finish_reason stop); every logprob after it \
             stands a position late"
        ),
        "{report}"
    );
}

#[test]
fn the_chunks_of_a_cumulative_stream_appended_are_named() {
    let records = records(vec![entry("r", &[1], &[5, 6, 7], &[-1.0, -2.0, -3.0])]);
    // The ids from the last chunk, the logprobs of every chunk appended: chunks of 1, 2 and 3 tokens.
    let lps = [-1.0, -1.0, -2.0, -1.0, -2.0, -3.0].map(Some);
    let report = run(&records, &[sample(&[1], &[5, 6, 7], &[1, 1, 1], &lps)]);
    assert_eq!(found(&report)[0], (ProblemKind::LogprobsLength, 3, 6));
    let message = &report.problems[0].message;
    assert!(
        message.starts_with(
            "6 logprobs for 3 tokens: 3 too many. From logprobs[0] they are rid r's logprobs 3 times over, each \
             time from its first (1, 2 and 3 of them): the chunks of a cumulative stream appended"
        ),
        "{message}"
    );
    assert!(message.contains("sglang PR #21583"), "{message}");
    assert!(!message.contains("phantom"), "{message}");
    // The ids appended the same way: the tokens after the first chunk were never generated there, and the
    // report says why instead of blaming a retokenization.
    let ids = [5, 5, 6, 5, 6, 7];
    let report = run(&records, &[sample(&[1], &ids, &[1; 6], &lps)]);
    assert_eq!(found(&report), [(ProblemKind::NeverGenerated, 1, 6)]);
    let message = &report.problems[0].message;
    assert!(
        message.contains(
            "response[0:6] is rid r's output ids 3 times over, each time from its first (1, 2 and 3 of them): \
             the chunks of a cumulative stream appended"
        ),
        "{message}"
    );
    assert!(!message.contains("retokeniz"), "{message}");
    // A delta chunk received twice: the token repeated, then the answer's own tokens again.
    let report = run(&records, &[sample(&[1], &[5, 6, 6, 7], &[1; 4], &lps[..4])]);
    let problem = report
        .problems
        .iter()
        .find(|p| p.kind == ProblemKind::NeverGenerated)
        .expect("never-generated");
    assert_eq!((problem.start, problem.end), (2, 4));
    assert!(
        problem.message.contains(
            "the server's answer rid r went on with token 7; the sample holds 6 there, which repeats the token \
             before it, then rid r's tokens from response[3]: 1 token inserted into the answer"
        ),
        "{report}"
    );
}

#[test]
fn a_resume_that_repeats_the_partial_outputs_last_token_names_the_resume() {
    // Aborted after [5, 6], resumed from the prompt plus those two: the resume generated [7, 8].
    let mut partial = entry("a", &[1], &[5, 6], &[-1.0, -2.0]);
    partial.finish_reason = Some(Finish::Abort);
    let records = records(vec![
        partial,
        entry("b", &[1, 5, 6], &[7, 8], &[-3.0, -4.0]),
    ]);
    let lps = [-1.0, -2.0, -2.0, -3.0, -4.0].map(Some);
    let report = run(&records, &[sample(&[1], &[5, 6, 6, 7, 8], &[1; 5], &lps)]);
    assert_eq!(found(&report), [(ProblemKind::NeverGenerated, 2, 5)]);
    let message = &report.problems[0].message;
    assert!(
        message.contains(
            "the request that continued from there is in the ledger: rid b, whose prompt is the sample's prompt \
             plus response[:2], generated token 7 first. The sample holds 6 there, which repeats the token before \
             it (the last of rid a's output), then rid b's tokens from response[3]: the join of the partial output \
             and its continuation repeated a token"
        ),
        "{message}"
    );
    assert!(!message.contains("no request continued"), "{message}");
    assert!(!message.contains("SkyRL"), "{message}");
    // A resume joined with other ids: the continuation is named, with the token it generated first.
    let report = run(&records, &[sample(&[1], &[5, 6, 9, 9], &[1; 4], &lps[..4])]);
    assert!(
        report.problems[0].message.contains(
            "rid b continued from there (its prompt is the sample's prompt plus response[:2]) with token 7 first, \
             where the sample has 9"
        ),
        "{report}"
    );
    // Without a resume, an aborted answer's tokens were never continued: no synthetic EOS is suggested.
    let unresumed = self::records(records.entries().take(1).cloned().collect());
    let report = run(&unresumed, &[sample(&[1], &[5, 6, 9], &[1; 3], &lps[..3])]);
    assert_eq!(found(&report), [(ProblemKind::NeverGenerated, 2, 3)]);
    let message = &report.problems[0].message;
    assert!(
        message.contains("(finish_reason abort), and no request continued from there"),
        "{message}"
    );
    assert!(message.contains("resumed"), "{message}");
}

#[test]
fn logprobs_missing_for_exactly_a_turn_served_without_them_name_that_turn() {
    // verl PR #6299: turn 1 was asked without logprobs, and the gateway appended none for it.
    let (records, mut s) = two_turns();
    let mut quiet = Records::new(usize::MAX, router());
    for (i, mut e) in records.entries().cloned().enumerate() {
        if i == 0 {
            e.return_logprob = false;
            e.output_logprobs = None;
        }
        quiet.push(e);
    }
    s.logprobs = Some(vec![Some(0.0), Some(0.0), Some(-0.25), Some(-0.75)]);
    let report = run(&quiet, &[s]);
    assert_eq!(found(&report)[0], (ProblemKind::LogprobsLength, 4, 7));
    assert!(
        report.problems[0].message.starts_with(
            "4 logprobs for 7 tokens: the 3 missing are as many as the tokens the server generated without \
             logprobs (rid t1 at response[0:3]: its request did not ask for them), so that turn's logprobs were \
             skipped and every later logprob stands 3 positions early"
        ),
        "{report}"
    );
}

/// Two turns served by a server whose version string never changes (`"default"`) while a weight update
/// between them loaded its weights number 1: what AReaL's run looks like, as it sends no `weight_version`.
fn two_turns_across_an_update() -> (Records, AuditSample) {
    let (records, s) = two_turns();
    let mut updated = Records::new(usize::MAX, router());
    for (i, mut e) in records.entries().cloned().enumerate() {
        e.weight_version = "default".to_owned();
        for span in &mut e.weight_versions {
            span.version = "default".to_owned();
            span.weights = i as u64;
        }
        updated.push(e);
    }
    (updated, s)
}

#[test]
fn whole_number_labels_count_the_weight_updates_the_server_applied() {
    let (records, mut s) = two_turns_across_an_update();
    let number = |n| Some(VersionLabel::Number(n));
    // AReaL's labels: 0 for the weights the server started with, 1 after the update; -1 (none) off the mask.
    s.versions = Some(vec![
        number(0),
        number(0),
        number(0),
        None,
        None,
        number(1),
        number(1),
    ]);
    let report = run(&records, std::slice::from_ref(&s));
    assert!(report.ok, "{report}");
    assert_eq!(report.checked_versions, 5);
    assert_eq!(report.version_fields, ["versions"]);
    assert!(
        report
            .text()
            .contains("weight versions: 5 labels of trained tokens compared (versions)"),
        "{report}"
    );
    // The trainer's version after the round trip (AReaL PR #1569): the first turn labelled 1, one update ahead.
    let mut late = s.clone();
    late.versions.as_mut().expect("versions")[..3].fill(number(1));
    let report = run(&records, &[late]);
    let problem = &report.problems[..];
    assert_eq!(
        found(&report),
        [(ProblemKind::VersionMismatch, 0, 3)],
        "{report}"
    );
    assert_eq!(problem[0].found.as_deref(), Some("1"));
    assert!(
        problem[0].message.contains("1 update ahead")
            && problem[0].message.contains("the server's weights 0"),
        "{}",
        problem[0].message
    );
    // A resumed turn labelled with its first attempt's version: one update behind.
    let mut stale = s.clone();
    stale.versions.as_mut().expect("versions")[5..].fill(number(0));
    let report = run(&records, &[stale]);
    assert_eq!(
        found(&report),
        [(ProblemKind::VersionMismatch, 5, 7)],
        "{report}"
    );
    assert!(
        report.problems[0].message.contains("1 update behind"),
        "{report}"
    );
    // A generated, trained token labelled as not generated.
    let mut unlabelled = s;
    unlabelled.versions.as_mut().expect("versions")[1] = None;
    let report = run(&records, &[unlabelled]);
    assert_eq!(
        found(&report),
        [(ProblemKind::VersionMismatch, 1, 2)],
        "{report}"
    );
    assert!(
        report.problems[0]
            .message
            .contains("labelled as not generated"),
        "{report}"
    );
}

#[test]
fn a_whole_number_label_also_names_a_version_string_that_is_that_number() {
    // slime and AReaL's distributed path send weight_version=str(k): the string "3" is version 3.
    let (records, mut s) = two_turns();
    let mut numbered = Records::new(usize::MAX, router());
    for mut e in records.entries().cloned() {
        e.weight_versions[0].version = "3".to_owned();
        numbered.push(e);
    }
    let three = Some(VersionLabel::Number(3));
    s.versions = Some(vec![
        three.clone(),
        three.clone(),
        three.clone(),
        None,
        None,
        three.clone(),
        three,
    ]);
    assert!(run(&numbered, std::slice::from_ref(&s)).ok);
    // The string "3" names the version string "3" too; "03" does not.
    s.versions.as_mut().expect("versions")[0] = Some(name("03"));
    assert_eq!(
        found(&run(&numbered, &[s])),
        [(ProblemKind::VersionMismatch, 0, 1)]
    );
}

#[test]
fn slimes_weight_versions_are_checked_one_per_answer_in_order() {
    let (records, mut s) = two_turns();
    let turns = |labels: &[&str]| Some(labels.iter().map(|l| l.to_string()).collect());
    s.layout = Some(Layout::Slime);
    s.turn_versions = turns(&["v1", "v1"]);
    let report = run(&records, std::slice::from_ref(&s));
    assert!(report.ok, "{report}");
    assert_eq!(
        (report.checked_versions, &report.version_fields[..]),
        (5, &["weight_versions".to_owned()][..])
    );
    // A request that answered none of the sample's tokens (aborted before its first) has a label of its own.
    s.turn_versions = turns(&["v0", "v1", "v1"]);
    assert!(run(&records, std::slice::from_ref(&s)).ok);
    // One label for two answers: the second turn's was never appended.
    s.turn_versions = turns(&["v1"]);
    let report = run(&records, std::slice::from_ref(&s));
    assert_eq!(
        found(&report),
        [(ProblemKind::VersionMismatch, 5, 7)],
        "{report}"
    );
    assert_eq!(report.problems[0].channel, "weight_versions");
    assert!(
        report.problems[0]
            .message
            .contains("1 label for the 2 requests"),
        "{report}"
    );
    // The trainer's own version where the answer's belongs.
    s.turn_versions = turns(&["v1", "step-7"]);
    let report = run(&records, &[s]);
    assert_eq!(
        found(&report),
        [(ProblemKind::VersionMismatch, 5, 7)],
        "{report}"
    );
    assert_eq!(report.problems[0].found.as_deref(), Some("step-7"));
}

#[test]
fn samples_without_version_labels_say_so_in_the_report() {
    let (records, s) = two_turns();
    let report = run(&records, &[s]);
    assert!(report.ok && report.version_fields.is_empty() && report.checked_versions == 0);
    assert!(
        report.text().contains("weight versions not checked"),
        "{report}"
    );
}

#[test]
fn version_columns_hold_strings_or_whole_numbers_and_refuse_the_rest() {
    let s = parse(
        r#"{"input_tokens":[1],"output_tokens":[2,3,4],"output_logprobs":[-1,-1,-1],
            "output_versions":["default",2,null]}"#,
    );
    assert_eq!(
        s.versions,
        Some(vec![
            Some(name("default")),
            Some(VersionLabel::Number(2)),
            None
        ])
    );
    let trajectory = parse(
        r#"{"input_ids":[[1,2]],"loss_mask":[[0,1]],"logprobs":[[0,-1]],"versions":[[-1,"v3"]]}"#,
    );
    assert_eq!(trajectory.versions, Some(vec![None, Some(name("v3"))]));
    let err = |json: &str| parse_sample(json.as_bytes(), 0, None).expect_err(json);
    let e = err(r#"{"input_tokens":[1],"output_tokens":[2,3],"output_versions":[0,1.5]}"#);
    assert_eq!(
        (e.field.as_str(), e.message.as_str()),
        (
            "output_versions[1]",
            "expected a weight version (a string, or a whole number of weight updates), got 1.5"
        )
    );
    // Strings stand for versions only: a string id is still refused, where it is.
    let e = err(r#"{"prompt_ids":[1],"response_ids":[2,"x"]}"#);
    assert_eq!(e.field, "response_ids[1]");
    assert!(
        e.message
            .starts_with(r#"expected a number, got the string "x""#),
        "{e}"
    );
    let e = err(r#"{"prompt_ids":[1],"response_ids":[2],"routed_experts":[[1],["x"]]}"#);
    assert_eq!(e.field, "routed_experts[1][0]");
    let e = err(
        r#"{"tokens":[1,2],"response_length":1,"weight_version_spans":[{"version":-1,"start":0,"end":1}]}"#,
    );
    assert_eq!(e.field, "weight_version_spans[0].version");
}
