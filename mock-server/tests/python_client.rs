//! A Python client written the way slime reads SGLang (`requests`, `item[1]` ids, `item[0]` logprobs), run
//! against the live server, must see exactly the oracle's tokens, logprobs and text, streamed and not.

use mock_server::ServerConfig;
use serde_json::{Value, json};

use crate::common::{Live, python};

fn cases() -> Value {
    json!([
        {"name": "input_ids", "body": {
            "input_ids": [151644, 872, 198, 3838, 374],
            "sampling_params": {"max_new_tokens": 48, "temperature": 1.0, "sampling_seed": 7},
            "return_logprob": true}},
        {"name": "text_stream", "body": {
            "text": "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
            "sampling_params": {"max_new_tokens": 64, "temperature": 0.7, "top_p": 0.9},
            "return_logprob": true, "stream": true}},
        {"name": "greedy_stop", "body": {
            "text": "The capital of France is",
            "sampling_params": {"max_new_tokens": 300, "temperature": 0, "no_stop_trim": true},
            "return_logprob": true, "return_text_in_logprobs": true}},
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slime_style_python_client_sees_the_oracles_logprobs() {
    let live = Live::start(ServerConfig::default()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/slime_client.py");
    let (url, argument) = (live.url(""), cases().to_string());
    let output = python(vec![script.to_owned(), url, argument]).await;
    let seen: Value = serde_json::from_slice(&output.stdout).expect("the client prints JSON");

    for case in cases().as_array().expect("a list") {
        let name = case["name"].as_str().expect("a name");
        let body = serde_json::to_vec(&case["body"]).expect("serialisable");
        let expected = live.oracle.expect(&body).expect("a valid request");
        let want = &expected.items[0];
        let got = &seen[name];
        let ids: Vec<u32> = serde_json::from_value(got["ids"].clone()).expect("ids");
        assert_eq!(ids, want.output_ids, "{name}: token ids");
        let logprobs: Vec<f32> = got["logprobs"]
            .as_array()
            .expect("logprobs")
            .iter()
            .map(|lp| {
                lp.as_str()
                    .and_then(|s| s.parse().ok())
                    .expect("a float repr")
            })
            .collect();
        assert_eq!(
            logprobs, want.output_logprobs,
            "{name}: logprobs, bit for bit"
        );
        assert_eq!(got["text"], want.text.as_str(), "{name}: text");
        assert!(!ids.is_empty(), "{name}: generated nothing");
    }
    live.stop().await.expect("clean shutdown");
}
