//! Scripted answers: rules that make the mock answer a matching prompt with chosen text, still reporting the
//! true logprob of every token of that text under the model (forced decoding). This module holds the rules
//! and their file; `request::script` applies them to a plan.

use serde::{Deserialize, Serialize};

/// How a scripted answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScriptFinish {
    /// The answer is followed by `<|im_end|>`, so it finishes with `{"type":"stop","matched":<im_end id>}`
    /// (unless the request sets `ignore_eos`, in which case sampling continues after the answer).
    #[default]
    Stop,
    /// No EOS is appended and `max_new_tokens` is lowered to the answer's token count, so the answer finishes
    /// with `{"type":"length","length":<answer tokens>}` (or the request's smaller `max_new_tokens`).
    Length,
}

/// One rule: a prompt whose decoded text contains `prompt_contains` is answered with `answer`.
///
/// The prompt is decoded from its token ids with special tokens kept, so `text` and `input_ids` prompts match
/// alike and a chat template's markers can be part of the pattern. The first matching rule wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptRule {
    /// A substring of the decoded prompt (an empty string matches every prompt).
    pub prompt_contains: String,
    /// The text to answer with.
    pub answer: String,
    /// `"stop"` (default) or `"length"`.
    #[serde(default)]
    pub finish_reason: ScriptFinish,
}

/// Why a rules file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read the script file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the script file {path} is not a JSON list of rules")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ScriptRule {
    /// Load a rules file: a JSON list of [`ScriptRule`]s.
    pub fn load(path: &str) -> Result<Vec<ScriptRule>, ScriptError> {
        load_rules(path)
    }
}

fn load_rules(path: &str) -> Result<Vec<ScriptRule>, ScriptError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ScriptError::Parse {
        path: path.to_owned(),
        source,
    })
}
