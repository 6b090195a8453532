//! Scripted answers: rules from `ServerConfig.scripted` or a `--script` file make the server answer matching
//! prompts with chosen text, each token still carrying its true logprob; the oracle follows the same rules.

use mock_server::{ScriptFinish, ScriptRule, ServerConfig};
use serde_json::{Value, json};

use crate::common::{InProcess, data_path, sse_json};

fn scripted() -> ServerConfig {
    ServerConfig {
        scripted: vec![
            ScriptRule {
                prompt_contains: "Judgment".to_owned(),
                answer: "Judgment: 2".to_owned(),
                finish_reason: ScriptFinish::Stop,
            },
            ScriptRule {
                prompt_contains: "count".to_owned(),
                answer: " one two three".to_owned(),
                finish_reason: ScriptFinish::Length,
            },
            ScriptRule {
                prompt_contains: "Judg".to_owned(),
                answer: "never used: the first match wins".to_owned(),
                finish_reason: ScriptFinish::Stop,
            },
        ],
        ..ServerConfig::default()
    }
}

/// `(request, expected text, expected finish type)`.
fn check(server: &InProcess, body: &Value, text: &str, finish: &str) -> impl Future<Output = ()> {
    let server = server.clone();
    let body = body.clone();
    let (text, finish) = (text.to_owned(), finish.to_owned());
    async move {
        let reply = server.generate(&body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let v = reply.json();
        assert_eq!(v["text"], text, "{body}");
        assert_eq!(v["meta_info"]["finish_reason"]["type"], finish, "{body}");
        // The oracle knows the rules: the whole body is what it computes, logprobs included.
        let bytes = serde_json::to_vec(&body).unwrap();
        let expected = server.oracle.expect(&bytes).unwrap();
        let plan = server.oracle.plan(&bytes).unwrap();
        let mut got = v.clone();
        mock_server::oracle::normalize_body(&mut got, &plan);
        assert_eq!(got, expected.body, "{body}");
        let lps = v["meta_info"]["output_token_logprobs"].as_array().unwrap();
        assert_eq!(lps.len(), v["output_ids"].as_array().unwrap().len());
        assert!(
            lps.iter()
                .all(|t| t[0].as_f64().is_some_and(|lp| lp <= 0.0))
        );
    }
}

#[tokio::test]
async fn matching_prompts_get_the_scripted_text_with_true_logprobs() {
    let server = InProcess::new(scripted());
    let model = server.oracle.model().clone();
    let judged = "Pick the best answer. Judgment";
    let ids: Vec<u32> = model.tokenizer().encode(judged);
    let cases = [
        (
            json!({"text": judged, "sampling_params": {"max_new_tokens": 64}, "return_logprob": true}),
            "Judgment: 2",
            "stop",
        ),
        // input_ids prompts are decoded before matching.
        (
            json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 64}, "return_logprob": true}),
            "Judgment: 2",
            "stop",
        ),
        (
            json!({"text": "please count", "sampling_params": {"max_new_tokens": 64}, "return_logprob": true}),
            " one two three",
            "length",
        ),
    ];
    for (body, text, finish) in &cases {
        check(&server, body, text, finish).await;
    }
    let v = server.generate(&cases[0].0).await.json();
    let im_end = model.tokenizer().end_of_turn_id();
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "stop", "matched": im_end})
    );
    let length = server.generate(&cases[2].0).await.json();
    let n = length["output_ids"].as_array().unwrap().len();
    assert_eq!(
        length["meta_info"]["finish_reason"],
        json!({"type": "length", "length": n})
    );
    // A prompt no rule matches is sampled as usual.
    let plain =
        json!({"text": "hello", "sampling_params": {"max_new_tokens": 8}, "return_logprob": true});
    let reply = server.generate(&plain).await.json();
    let unscripted = InProcess::new(ServerConfig::default())
        .generate(&plain)
        .await
        .json();
    assert_eq!(reply["output_ids"], unscripted["output_ids"]);
}

#[tokio::test]
async fn scripted_streams_equal_the_oracles_stream() {
    let server = InProcess::new(scripted());
    let body = json!({"text": "Judgment please", "stream": true, "rid": "s",
                      "sampling_params": {"max_new_tokens": 64}, "return_logprob": true});
    let chunks = sse_json(&server.generate(&body).await.body);
    let mut expected = server
        .oracle
        .expect_stream(&serde_json::to_vec(&body).unwrap())
        .unwrap();
    let mut got = chunks.clone();
    for v in got.iter_mut().chain(expected.iter_mut()) {
        mock_server::oracle::normalize_item(v, false);
    }
    assert_eq!(got, expected);
    assert_eq!(chunks.last().unwrap()["text"], "Judgment: 2");
}

#[tokio::test]
async fn a_budget_shorter_than_the_answer_truncates_it() {
    let server = InProcess::new(scripted());
    let body = json!({"text": "Judgment", "sampling_params": {"max_new_tokens": 2}});
    let v = server.generate(&body).await.json();
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 2})
    );
    assert!("Judgment: 2".starts_with(v["text"].as_str().unwrap()));
}

#[test]
fn rules_files_load_and_bad_ones_name_the_file() {
    let rules = mock_server::ScriptRule::load(data_path("script.json").to_str().unwrap()).unwrap();
    assert_eq!(
        rules[0],
        ScriptRule {
            prompt_contains: "Judgment".to_owned(),
            answer: "Judgment: 2".to_owned(),
            finish_reason: ScriptFinish::Stop,
        }
    );
    assert_eq!(rules[1].finish_reason, ScriptFinish::Length);
    let err =
        mock_server::ScriptRule::load(data_path("requests.json").to_str().unwrap()).unwrap_err();
    assert!(err.to_string().contains("requests.json"), "{err}");
    let err = mock_server::ScriptRule::load("/nonexistent/rules.json").unwrap_err();
    assert!(err.to_string().contains("/nonexistent/rules.json"), "{err}");
}

#[tokio::test]
async fn a_scripted_stop_inside_min_new_tokens_has_a_masked_logprob() {
    // The script ends its answer with EOS, which `min_new_tokens` masks: the true logprob of that token is
    // -inf, which 0.5.15 and later write as null and which fails 0.5.3's whole non-stream body with a 500.
    let body = json!({"text": "Judgment please", "return_logprob": true,
                      "sampling_params": {"max_new_tokens": 30, "min_new_tokens": 20}});
    let latest = InProcess::new(scripted());
    let reply = latest.generate(&body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = reply.json();
    let lps = v["meta_info"]["output_token_logprobs"]
        .as_array()
        .unwrap()
        .clone();
    let eos = latest.oracle.model().tokenizer().end_of_turn_id();
    let last = lps.last().unwrap();
    assert_eq!((&last[0], &last[1]), (&Value::Null, &json!(eos)));
    assert!(lps[..lps.len() - 1].iter().all(|t| t[0].is_f64()));

    let mid = InProcess::new(ServerConfig {
        sglang_version: mock_server::SglangVersion::V0_5_3,
        ..scripted()
    });
    let reply = mid.generate(&body).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.text(), "Internal Server Error");
}
