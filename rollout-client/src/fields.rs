//! The plain-data fields of a `Sample`, with slime's names and JSON shapes: status, prompt, reward, counters, spans.
//!
//! They sit below `sample.rs` because turns (what a finish implies for the status) and errors (which status
//! a rollout refused) need some of them without needing a `Sample`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// slime's `Sample.Status`, serialised as its lowercase string value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleStatus {
    #[default]
    Pending,
    Completed,
    Truncated,
    Aborted,
    /// A recoverable failure (tool, API or parse error); may hold partial output.
    Failed,
}

/// A raw prompt or a list of chat messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Messages(Vec<Map<String, Value>>),
}

impl Default for Prompt {
    fn default() -> Self {
        Prompt::Text(String::new())
    }
}

impl From<&str> for Prompt {
    fn from(s: &str) -> Self {
        Prompt::Text(s.to_owned())
    }
}

impl From<String> for Prompt {
    fn from(s: String) -> Self {
        Prompt::Text(s)
    }
}

/// A scalar reward, or a dict from which `--reward-key` selects one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reward {
    Scalar(f64),
    Keyed(Map<String, Value>),
}

/// Speculative-decoding counters, accumulated over engine calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpecInfo {
    pub spec_accept_token_num: u64,
    pub spec_draft_token_num: u64,
    pub spec_verify_ct: u64,
    pub completion_token_num: u64,
}

/// Prefix-cache counters, accumulated over engine calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrefixCacheInfo {
    pub cached_tokens: u64,
    pub total_prompt_tokens: u64,
}

/// The response tokens one generation turn produced: response offsets `start..start + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeneratedSpan {
    pub start: usize,
    pub len: usize,
}

impl GeneratedSpan {
    /// One past the last response offset of the span.
    pub fn end(&self) -> usize {
        self.start + self.len
    }
}
