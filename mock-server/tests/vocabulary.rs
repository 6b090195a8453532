//! The model over a loaded vocabulary (`MODEL.md` section 13), with Qwen's real tokenizer: what the vocabulary
//! derives from the files, the distribution's slots, refused configurations, and generated text.

use std::collections::HashSet;

use mock_server::ServerConfig;
use mock_server::StateError;
use mock_server::model::{LoadError, LoadedTokenizer, ModelError};
use mock_server::oracle::Oracle;
use serde_json::json;

use crate::qwen_tokenizer::{qwen_tokenizer, qwen_tokenizer_dir};

/// Qwen's tokenizer: 151,643 ranks and 26 added tokens (`T`); config.json's padded embedding (`V`).
const T: u32 = 151_669;
const V: u32 = 151_936;
const ENDOFTEXT: u32 = 151_643;
const IM_END: u32 = 151_645;

fn qwen() -> ServerConfig {
    ServerConfig {
        tokenizer: Some(qwen_tokenizer()),
        ..ServerConfig::default()
    }
}

#[test]
fn the_vocabulary_comes_from_the_model_directory() {
    let config = qwen();
    let model = config.build_model().expect("the model builds");
    let tokenizer = model.tokenizer();
    let vocab = tokenizer.hf().expect("a loaded tokenizer");
    assert_eq!(vocab.size(), T);
    // config.json's vocab_size, not the tokenizer's size.
    assert_eq!((config.vocab_size(), tokenizer.vocab_size()), (V, V));
    // generation_config.json's [151645, 151643]; tokenizer_config.json's eos_token is the first of them.
    assert_eq!(tokenizer.eos_token_ids(), &[IM_END, ENDOFTEXT]);
    assert_eq!(tokenizer.end_of_turn_id(), IM_END);
    // tokenizer_config.json's own limit, which is not the model's context.
    assert_eq!(vocab.model_max_length(), Some(131_072));
    // The first fourteen added tokens are special, `<tool_call>` (151657) and the rest are not.
    assert!((ENDOFTEXT..=151_656).all(|id| tokenizer.is_special(id)));
    assert!((151_657..T).all(|id| !tokenizer.is_special(id)));
    assert!(!tokenizer.is_special(0) && !tokenizer.is_special(T) && !tokenizer.is_special(V - 1));
    assert_eq!(
        config.tokenizer_path(),
        qwen_tokenizer_dir().display().to_string()
    );
}

/// Section 13.2's content ids: every id of the 151,643 ranks but the seven punctuation ids (`.`, `,`, `!`,
/// `?`, `:`, `;` at their byte's rank from `!`, and `\n` at 198), in ascending order; no added token.
#[test]
fn the_content_ids_are_the_ranks_without_punctuation() {
    let model = qwen().build_model().expect("the model builds");
    let content = model
        .tokenizer()
        .hf()
        .expect("a loaded tokenizer")
        .content();
    let punctuation = [b'!', b',', b'.', b':', b';', b'?'].map(|b| u32::from(b) - 33);
    let want: Vec<u32> = (0..ENDOFTEXT)
        .filter(|id| !punctuation.contains(id) && *id != 198)
        .collect();
    assert_eq!(content.len(), 151_636);
    assert!(
        content == want.as_slice(),
        "the content ids differ from the ranks less punctuation"
    );
}

/// Section 13.2: the nine explicit entries of any context are distinct; the end-of-turn slot holds
/// `<|im_end|>`; a content slot never holds an added token or a punctuation id; the punctuation slot holds one
/// of the ids of `. , \n ! ? : ;`, which in Qwen's ranks are the byte's rank: printable ASCII from `!` (rank 0),
/// and `\n` at 198.
#[test]
fn explicit_entries_are_distinct_and_drawn_from_the_content_ids() {
    let model = qwen().build_model().expect("the model builds");
    let punctuation: HashSet<u32> = [b'.', b',', b'!', b'?', b':', b';']
        .iter()
        .map(|&b| u32::from(b) - 33)
        .chain([198])
        .collect();
    let mut seen_punctuation = HashSet::new();
    for k in 0..2_000u32 {
        let context = [k * 75 % T, (k * 7_919 + 13) % T, 3 + k];
        let mut top = Vec::new();
        model.distribution(&context, 1.0, &[]).top(9, &mut top);
        let ids: HashSet<u32> = top.iter().map(|&(id, _)| id).collect();
        assert_eq!(ids.len(), 9, "context {context:?}: {top:?}");
        assert!(ids.contains(&IM_END), "context {context:?}");
        let content: Vec<u32> = ids.iter().copied().filter(|&id| id != IM_END).collect();
        assert!(
            content.iter().all(|&id| id < ENDOFTEXT),
            "context {context:?}: {content:?}"
        );
        let marks: Vec<u32> = content
            .iter()
            .copied()
            .filter(|id| punctuation.contains(id))
            .collect();
        assert!(
            marks.len() <= 1,
            "context {context:?}: two punctuation slots {marks:?}"
        );
        seen_punctuation.extend(marks);
    }
    // Every mark turns up, so none of the nine characters is missing from the table.
    assert_eq!(seen_punctuation, punctuation);
}

#[test]
fn a_vocabulary_smaller_than_the_tokenizer_is_refused() {
    let err = ServerConfig {
        vocab_size: Some(T - 1),
        ..qwen()
    }
    .build_model()
    .unwrap_err();
    match err {
        StateError::Model { source, .. } => assert_eq!(
            source,
            ModelError::LoadedVocabSize {
                vocab_size: T - 1,
                tokenizer: T,
                max: (1 << 21) - 1
            }
        ),
        other => panic!("{other:?}"),
    }
    // The tokenizer's own size is enough (the ids of a model without config.json).
    assert!(
        ServerConfig {
            vocab_size: Some(T),
            ..qwen()
        }
        .build_model()
        .is_ok()
    );
}

#[test]
fn unreadable_or_unusable_files_are_named_in_the_error() {
    let missing = LoadedTokenizer::load("/nonexistent/tokenizer.json").unwrap_err();
    assert!(matches!(missing, LoadError::Read { .. }), "{missing:?}");
    assert!(
        missing.to_string().contains("/nonexistent/tokenizer.json"),
        "{missing}"
    );

    // The tokenizer alone, without generation_config.json or an eos_token: no end-of-sequence token.
    let dir = std::env::temp_dir().join(format!("vocabulary-no-eos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        qwen_tokenizer_dir().join("tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    let err = LoadedTokenizer::load(&dir).unwrap_err();
    assert!(
        err.to_string().contains("no end-of-sequence token"),
        "{err}"
    );
    std::fs::write(
        dir.join("generation_config.json"),
        r#"{"eos_token_id": "x"}"#,
    )
    .unwrap();
    let err = LoadedTokenizer::load(&dir).unwrap_err();
    assert!(
        err.to_string()
            .contains("eos_token_id must be an id or a list of ids"),
        "{err}"
    );
    std::fs::write(
        dir.join("generation_config.json"),
        r#"{"eos_token_id": 151645}"#,
    )
    .unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), "{").unwrap();
    let err = LoadedTokenizer::load(&dir).unwrap_err();
    assert!(matches!(err, LoadError::Json { .. }), "{err:?}");
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"chat_template": "{% for %}"}"#,
    )
    .unwrap();
    let err = LoadedTokenizer::load(&dir).unwrap_err();
    assert!(matches!(err, LoadError::Template { .. }), "{err:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Without stop strings, a whole answer's text is the tokenizer's decode of its ids, less a final stop id
/// (the prompt ends on whole characters, so section 13.4's surrogate ids change nothing).
#[test]
fn a_whole_answers_text_is_the_decode_of_its_ids() {
    let tokenizer = qwen_tokenizer();
    let oracle = Oracle::new(qwen()).expect("an oracle");
    for (i, prompt) in [
        "The capital of France is",
        "日本語の文章を書いてください。",
        "emoji 🙂 ok",
    ]
    .into_iter()
    .enumerate()
    {
        for skip in [true, false] {
            let body = json!({"text": prompt, "sampling_params": {"max_new_tokens": 300, "temperature": 1.3,
                "skip_special_tokens": skip, "sampling_seed": i}});
            let expected = oracle
                .expect(body.to_string().as_bytes())
                .expect("an answer");
            let item = &expected.items[0];
            let mut ids = item.output_ids.as_slice();
            if ids.last() == Some(&IM_END) || ids.last() == Some(&ENDOFTEXT) {
                ids = &ids[..ids.len() - 1];
            }
            assert_eq!(
                item.text,
                tokenizer.decode(ids, skip),
                "prompt {prompt:?}, skip {skip}"
            );
            assert_eq!(item.prompt_tokens, tokenizer.encode(prompt).len());
        }
    }
}

/// Streams over a real byte-level BPE (about one content id in a hundred is a piece of a UTF-8 character): each
/// chunk's text extends the one before and never ends in U+FFFD before the last chunk (SGLang's detokenizer
/// commits no text that ends in one and streams only the printable part before it), and the last chunk's text
/// is the whole answer's, the decode of its ids.
#[test]
fn streamed_text_holds_back_incomplete_characters_and_reassembles() {
    let tokenizer = qwen_tokenizer();
    let oracle = Oracle::new(qwen()).expect("an oracle");
    let mut inside_a_character = 0;
    for (seed, interval) in [(1, 1), (2, 1), (3, 3), (4, 1)] {
        let body = json!({"input_ids": [785, 6722, 315, 9625, 374], "sampling_params": {"max_new_tokens": 1000,
            "ignore_eos": true, "temperature": 1.0, "sampling_seed": seed, "stream_interval": interval}});
        let whole = oracle
            .expect(body.to_string().as_bytes())
            .expect("an answer");
        let whole = &whole.items[0];
        assert_eq!(
            whole.text,
            tokenizer.decode(&whole.output_ids, true),
            "seed {seed}"
        );
        let chunks = oracle
            .expect_stream(body.to_string().as_bytes())
            .expect("a stream");
        let mut last = String::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let text = chunk["text"]
                .as_str()
                .expect("a cumulative text")
                .to_owned();
            assert!(
                text.starts_with(&last),
                "seed {seed}: {last:?} then {text:?}"
            );
            let ids = chunk["output_ids"].as_array().expect("ids").len();
            if tokenizer.decode(&whole.output_ids[ids - 1..ids], true) == "\u{FFFD}" {
                inside_a_character += 1;
            }
            if i + 1 < chunks.len() {
                assert!(
                    !text.ends_with('\u{FFFD}'),
                    "seed {seed}: chunk at {ids} ids: {text:?}"
                );
            }
            last = text;
        }
        assert_eq!(
            last, whole.text,
            "seed {seed}: the stream reassembles to the whole answer"
        );
    }
    assert!(
        inside_a_character > 0,
        "no chunk ended on a piece of a character"
    );
}

/// `/tokenize` reports the tokenizer's `model_max_length` (`serving_tokenize.py`), not the context: with Qwen's
/// tokenizer over a 4,096-token context the running 0.5.23 answered `"max_model_len": 131072`; a tokenizer whose
/// file names none falls back to the context length, as 0.5.23 does with transformers' `int(1e30)`.
#[tokio::test]
async fn tokenize_reports_the_tokenizers_own_limit() {
    let server = crate::common::InProcess::new(ServerConfig {
        context_length: Some(4096),
        ..qwen()
    });
    let reply = server.post("/tokenize", r#"{"prompt": "hi"}"#).await;
    assert_eq!(reply.json()["max_model_len"], 131_072, "{}", reply.text());
    let dir = std::env::temp_dir().join(format!("vocabulary-no-limit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["tokenizer.json", "generation_config.json"] {
        std::fs::copy(qwen_tokenizer_dir().join(file), dir.join(file)).unwrap();
    }
    let server = crate::common::InProcess::new(ServerConfig {
        context_length: Some(4096),
        tokenizer: Some(LoadedTokenizer::load(&dir).expect("the tokenizer loads")),
        ..ServerConfig::default()
    });
    let reply = server.post("/tokenize", r#"{"prompt": "hi"}"#).await;
    assert_eq!(reply.json()["max_model_len"], 4096, "{}", reply.text());
    std::fs::remove_dir_all(&dir).ok();
}
