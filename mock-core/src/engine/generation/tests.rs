//! Unit tests of one generation: determinism, every finish rule, stop trimming, streaming text, logprobs.

use super::*;
use crate::model::ModelConfig;

fn model() -> Arc<Model> {
    Arc::new(Model::new(ModelConfig::default()).unwrap())
}

fn item(prompt: &str, edit: impl FnOnce(&mut ItemRequest)) -> ItemRequest {
    let m = model();
    let mut item = ItemRequest::new(m.tokenizer().encode(prompt));
    item.return_logprob = true;
    edit(&mut item);
    item
}

#[test]
fn same_request_same_output_and_logprobs_are_the_models() {
    let m = model();
    let req = item("The capital of France is", |i| i.params.max_new_tokens = 64);
    let a = generate(m.clone(), req.clone());
    let b = generate(m.clone(), req.clone());
    assert_eq!(a.output_ids(), b.output_ids());
    assert_eq!(a.output_logprobs(), b.output_logprobs());
    assert_eq!(a.output_ids().len(), a.output_logprobs().len());
    let mut context = req.input_ids.clone();
    for (&id, &lp) in a.output_ids().iter().zip(a.output_logprobs()) {
        let expected = m.distribution(&context, 1.0, &[]).logprob(id);
        assert_eq!(lp, expected as f32);
        assert!(lp.is_finite() && lp <= 0.0);
        context.push(id);
    }
}

#[test]
fn sample_index_and_sampling_seed_change_the_sample() {
    let m = model();
    let base = item("Hello", |i| i.params.max_new_tokens = 16);
    let out = |edit: &dyn Fn(&mut ItemRequest)| {
        let mut req = base.clone();
        edit(&mut req);
        generate(m.clone(), req).output_ids().to_vec()
    };
    let first = out(&|_| {});
    assert_ne!(first, out(&|r| r.sample_index = 1));
    assert_ne!(first, out(&|r| r.params.sampling_seed = Some(3)));
    assert_eq!(
        out(&|r| r.params.sampling_seed = Some(3)),
        out(&|r| r.params.sampling_seed = Some(3))
    );
}

#[test]
fn length_finish_reports_max_new_tokens() {
    let g = generate(
        model(),
        item("Hi", |i| {
            i.params.max_new_tokens = 5;
            i.params.ignore_eos = true;
        }),
    );
    assert_eq!(g.output_ids().len(), 5);
    assert_eq!(g.finish_reason(), Some(&FinishReason::Length { length: 5 }));
    assert_eq!(g.text(), g.model.tokenizer().decode(g.output_ids(), true));
}

#[test]
fn max_new_tokens_zero_finishes_at_once() {
    let g = Generation::new(
        model(),
        item("Hi there", |i| {
            i.params.max_new_tokens = 0;
            i.logprob_start = 0;
        }),
    );
    assert!(g.is_finished());
    assert!(g.output_ids().is_empty() && g.text().is_empty());
    assert_eq!(g.finish_reason(), Some(&FinishReason::Length { length: 0 }));
    assert_eq!(g.input_logprobs().len(), g.prompt_tokens());
    assert_eq!(g.input_logprobs()[0], None);
    assert!(
        g.input_logprobs()[1..]
            .iter()
            .all(|lp| lp.is_some_and(|v| v <= 0.0))
    );
}

#[test]
fn eos_ends_generation_and_is_kept_in_ids_but_not_text() {
    // A turn (a prompt that ends in a chat template) at temperature 1 ends on <|im_end|> well before 2,000
    // tokens.
    let m = model();
    let g = generate(
        m.clone(),
        item(
            "<|im_start|>user\nTell me<|im_end|>\n<|im_start|>assistant\n",
            |i| i.params.max_new_tokens = 2000,
        ),
    );
    let eos = m.tokenizer().end_of_turn_id();
    assert_eq!(
        g.finish_reason(),
        Some(&FinishReason::StopToken { matched: eos })
    );
    assert_eq!(*g.output_ids().last().unwrap(), eos);
    assert!(!g.text().contains("<|im_end|>"));
    let ids = g.output_ids();
    assert_eq!(g.text(), m.tokenizer().decode(&ids[..ids.len() - 1], true));
}

#[test]
fn min_new_tokens_masks_eos() {
    let m = model();
    let plain = generate(
        m.clone(),
        item("Tell me", |i| i.params.max_new_tokens = 2000),
    );
    let n = plain.output_ids().len() as u32;
    let g = generate(
        m.clone(),
        item("Tell me", |i| {
            i.params.max_new_tokens = 4000;
            i.params.min_new_tokens = n + 50;
        }),
    );
    assert!(g.output_ids().len() as u32 >= n + 50);
    let eos = m.tokenizer().eos_token_ids();
    assert!(
        g.output_ids()[..(n + 49) as usize]
            .iter()
            .all(|id| !eos.contains(id))
    );
}

#[test]
fn stop_strings_trim_before_or_after_the_match() {
    let m = model();
    let free = generate(
        m.clone(),
        item("Once upon", |i| {
            i.params.max_new_tokens = 40;
            i.params.ignore_eos = true;
        }),
    );
    // Pick a stop string from the middle of the free-running text.
    let full = free.text().to_owned();
    let stop = full[10..14].to_owned();
    let at = full.find(&stop).unwrap();
    for no_stop_trim in [false, true] {
        let g = generate(
            m.clone(),
            item("Once upon", |i| {
                i.params.max_new_tokens = 40;
                i.params.ignore_eos = true;
                i.params.stop = vec!["never-there".into(), stop.clone()];
                i.params.no_stop_trim = no_stop_trim;
            }),
        );
        assert_eq!(
            g.finish_reason(),
            Some(&FinishReason::StopStr {
                matched: stop.clone()
            })
        );
        let want = if no_stop_trim {
            &full[..at + stop.len()]
        } else {
            &full[..at]
        };
        assert_eq!(g.text(), want);
        // Ids are never trimmed: they run to the token that completed the stop string.
        assert!(free.output_ids().starts_with(g.output_ids()));
    }
}

#[test]
fn stop_token_ids_end_generation_unless_ignore_eos() {
    let m = model();
    let free = generate(
        m.clone(),
        item("Go", |i| {
            i.params.max_new_tokens = 30;
            i.params.ignore_eos = true;
        }),
    );
    let target = free.output_ids()[7];
    let g = generate(
        m.clone(),
        item("Go", |i| {
            i.params.max_new_tokens = 30;
            i.params.stop_token_ids = vec![target];
        }),
    );
    let pos = free
        .output_ids()
        .iter()
        .position(|&id| id == target)
        .unwrap();
    assert_eq!(g.output_ids(), &free.output_ids()[..=pos]);
    assert_eq!(
        g.finish_reason(),
        Some(&FinishReason::StopToken { matched: target })
    );
    assert_eq!(
        g.text(),
        m.tokenizer().decode(&free.output_ids()[..pos], true)
    );
    let ignored = generate(
        m,
        item("Go", |i| {
            i.params.max_new_tokens = 30;
            i.params.stop_token_ids = vec![target];
            i.params.ignore_eos = true;
        }),
    );
    assert_eq!(ignored.output_ids(), free.output_ids());
}

#[test]
fn streamed_text_only_grows_and_ends_at_the_final_text() {
    let m = model();
    let free = generate(
        m.clone(),
        item("Once upon", |i| {
            i.params.max_new_tokens = 60;
            i.params.ignore_eos = true;
        }),
    );
    let stop = free.text()[20..23].to_owned();
    let mut g = Generation::new(
        m,
        item("Once upon", |i| {
            i.params.max_new_tokens = 60;
            i.params.ignore_eos = true;
            i.params.stop = vec![stop.clone()];
        }),
    );
    let mut last = String::new();
    loop {
        let done = g.step();
        assert!(
            g.text().starts_with(&last),
            "{:?} does not extend {last:?}",
            g.text()
        );
        assert!(!g.text().contains(&stop));
        last = g.text().to_owned();
        if done {
            break;
        }
    }
    assert!(matches!(
        g.finish_reason(),
        Some(FinishReason::StopStr { .. })
    ));
}

#[test]
fn greedy_is_the_arg_max_and_reports_temperature_one() {
    let m = model();
    let g = generate(
        m.clone(),
        item("Hi", |i| {
            i.params.max_new_tokens = 10;
            i.params.temperature = 0.0;
            i.top_logprobs_num = 2;
        }),
    );
    let mut context = g.input_ids().to_vec();
    for (k, &id) in g.output_ids().iter().enumerate() {
        let d = m.distribution(&context, 1.0, &[]);
        let mut top = Vec::new();
        d.top(2, &mut top);
        assert_eq!(id, top[0].0);
        assert_eq!(
            g.output_top_logprobs().row(k)[0],
            LogprobEntry {
                logprob: top[0].1 as f32,
                id
            }
        );
        context.push(id);
    }
}

#[test]
fn logprobs_are_reported_under_the_request_temperature_or_at_one() {
    let item_at = |t: f64| {
        item("Hi", |i| {
            i.params.max_new_tokens = 8;
            i.params.temperature = t;
        })
    };
    let m = model();
    let g = generate(m.clone(), item_at(0.5));
    let d = m.distribution(g.input_ids(), 0.5, &[]);
    assert_eq!(g.output_logprobs()[0], d.logprob(g.output_ids()[0]) as f32);

    let original = Arc::new(
        Model::new(ModelConfig {
            return_original_logprob: true,
            ..ModelConfig::default()
        })
        .unwrap(),
    );
    let o = generate(original.clone(), item_at(0.5));
    assert_eq!(
        o.output_ids(),
        g.output_ids(),
        "the flag changes reporting, not sampling"
    );
    let d1 = original.distribution(o.input_ids(), 1.0, &[]);
    assert_eq!(o.output_logprobs()[0], d1.logprob(o.output_ids()[0]) as f32);
}

#[test]
fn abort_keeps_partial_output() {
    let mut g = Generation::new(model(), item("Hi", |i| i.params.max_new_tokens = 100));
    for _ in 0..3 {
        g.step();
    }
    g.abort("Aborted", None, None);
    assert_eq!(g.output_ids().len(), 3);
    assert_eq!(g.output_logprobs().len(), 3);
    assert!(matches!(
        g.finish_reason(),
        Some(FinishReason::Abort {
            status_code: None,
            ..
        })
    ));
    assert!(g.step(), "an aborted generation stays finished");
    assert_eq!(g.output_ids().len(), 3);
}

#[test]
fn forced_tokens_come_first_with_their_true_logprobs() {
    let m = model();
    let mut forced = m.tokenizer().encode(" Judgment: 2");
    forced.push(m.tokenizer().end_of_turn_id());
    let g = generate(
        m.clone(),
        item("Pick one", |i| {
            i.params.max_new_tokens = 50;
            i.forced_output = forced.clone();
        }),
    );
    assert_eq!(g.output_ids(), &forced[..]);
    assert_eq!(g.text(), " Judgment: 2");
    assert_eq!(
        g.finish_reason(),
        Some(&FinishReason::StopToken {
            matched: m.tokenizer().end_of_turn_id()
        })
    );
    let mut context = g.input_ids().to_vec();
    for (&id, &lp) in forced.iter().zip(g.output_logprobs()) {
        assert_eq!(lp, m.distribution(&context, 1.0, &[]).logprob(id) as f32);
        context.push(id);
    }
    // A budget shorter than the script truncates it like any other answer.
    let short = generate(
        m.clone(),
        item("Pick one", |i| {
            i.params.max_new_tokens = 2;
            i.forced_output = forced.clone();
        }),
    );
    assert_eq!(short.output_ids(), &forced[..2]);
    assert_eq!(
        short.finish_reason(),
        Some(&FinishReason::Length { length: 2 })
    );
}

#[test]
fn stop_strings_are_found_after_multibyte_characters() {
    // Byte tokens: "x", "é" as its two bytes, then "abcd". When "c" is checked, the search window (the
    // last `max_stop_len - 1` bytes before the newest token) would start inside "é".
    let forced: Vec<u32> = "xéabcd".bytes().map(u32::from).collect();
    let g = generate(
        model(),
        item("Go", |i| {
            i.params.max_new_tokens = 20;
            i.params.ignore_eos = true;
            i.params.stop = vec!["abcd".into()];
            i.forced_output = forced.clone();
        }),
    );
    assert_eq!(
        g.finish_reason(),
        Some(&FinishReason::StopStr {
            matched: "abcd".into()
        })
    );
    assert_eq!(g.output_ids(), &forced[..]);
    assert_eq!(g.text(), "xé");
}

#[test]
fn incomplete_utf8_is_held_back_until_complete() {
    let mut decoded = String::new();
    let mut pending = "é".as_bytes()[..1].to_vec();
    drain_complete_utf8(&mut pending, &mut decoded);
    assert_eq!((decoded.as_str(), pending.len()), ("", 1));
    pending.push("é".as_bytes()[1]);
    pending.extend_from_slice(&[0xFF, b'a']);
    drain_complete_utf8(&mut pending, &mut decoded);
    assert_eq!(decoded, "é\u{FFFD}a");
    assert!(pending.is_empty());
}
