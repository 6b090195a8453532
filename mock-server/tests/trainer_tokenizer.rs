//! The server against what a trainer computes from the same model files (`reference/tokenizer_check.py`):
//! Hugging Face's `tokenizers` for ids and text (`/tokenize`, `/detokenize`, generated text, streams) and
//! transformers' `apply_chat_template` for chat prompts; and the Qwen directory the tests build against the
//! tiktoken encoder it was built from (`scripts/check_qwen_tokenizer.py`).

use std::path::{Path, PathBuf};

use mock_server::{ServerConfig, SglangVersion};

use crate::common::{Live, path_arg, python};
use crate::qwen_tokenizer::{qwen_tokenizer, qwen_tokenizer_dir};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Under the releases that serve `/tokenize` and `/detokenize`; 0.5.23 also renders `messages` without the
/// generation prompt when asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_agrees_with_tokenizers_and_transformers_over_qwens_files() {
    for sglang_version in [SglangVersion::V0_5_23, SglangVersion::V0_5_15] {
        let live = Live::start(ServerConfig {
            sglang_version,
            tokenizer: Some(qwen_tokenizer()),
            ..ServerConfig::default()
        })
        .await;
        let output = python(vec![
            path_arg(&workspace().join("mock-server/reference/tokenizer_check.py")),
            "--url".into(),
            live.url(""),
            "--tokenizer".into(),
            path_arg(qwen_tokenizer_dir()),
            "--corpus".into(),
            path_arg(&workspace().join("tests/data/tokenizer_corpus.txt")),
            "--sglang-version".into(),
            sglang_version.as_str().to_owned(),
        ])
        .await;
        let report = String::from_utf8_lossy(&output.stdout);
        assert!(
            report.contains("the server agrees with tokenizers and transformers"),
            "under {sglang_version}:\n{report}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Every id of the built directory decodes, and every line of the corpus encodes, as `qwen-tokenizer`'s tiktoken
/// encoder does; its chat template renders the expected ChatML.
#[tokio::test]
async fn the_built_qwen_tokenizer_agrees_with_tiktoken() {
    let output = python(vec![
        path_arg(&workspace().join("scripts/check_qwen_tokenizer.py")),
        path_arg(qwen_tokenizer_dir()),
    ])
    .await;
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(report.contains("all checks passed"), "{report}");
}
