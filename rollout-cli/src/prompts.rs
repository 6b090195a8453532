//! Prompts with labels: a built-in set of simple verifiable math questions, or a JSONL file of them.

use std::io::BufRead;

use serde::{Deserialize, Serialize};

/// One prompt and its ground truth, as a line `{"prompt": ..., "label": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabeledPrompt {
    pub prompt: String,
    pub label: String,
}

/// Sixteen arithmetic questions whose answer is one number.
pub fn builtin() -> Vec<LabeledPrompt> {
    const QUESTIONS: [(&str, i64); 16] = [
        ("What is 17 + 25?", 42),
        ("What is 9 * 8?", 72),
        ("What is 100 - 37?", 63),
        ("What is 144 / 12?", 12),
        ("What is 23 + 19?", 42),
        ("What is 15 * 15?", 225),
        ("What is 81 - 29?", 52),
        ("What is 7 * 13?", 91),
        ("What is 56 / 8?", 7),
        ("What is 250 + 125?", 375),
        ("What is 6 * 7 + 1?", 43),
        ("What is 1000 - 1?", 999),
        ("What is 12 * 12?", 144),
        ("What is 48 + 52?", 100),
        ("What is 90 / 5?", 18),
        ("What is 33 - 45?", -12),
    ];
    QUESTIONS
        .iter()
        .map(|&(q, a)| LabeledPrompt {
            prompt: q.to_owned(),
            label: a.to_string(),
        })
        .collect()
}

/// A prompts file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PromptsError {
    #[error("could not read line {line} of the prompts file")]
    Io {
        line: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("line {line} of the prompts file is not {{\"prompt\": string, \"label\": string}}")]
    Json {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("the prompts file has no prompts")]
    Empty,
}

/// Reads `{"prompt","label"}` lines; blank lines are skipped. A numeric label is accepted too.
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a JSON value's type check: any other JSON type is the refusal"
)]
pub fn read_jsonl<R: BufRead>(r: R) -> Result<Vec<LabeledPrompt>, PromptsError> {
    #[derive(Deserialize)]
    struct Line {
        prompt: String,
        label: serde_json::Value,
    }
    let mut out = Vec::new();
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(|source| PromptsError::Io {
            line: i + 1,
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_str(&line).map_err(|source| PromptsError::Json {
            line: i + 1,
            source,
        })?;
        let label = match l.label {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        out.push(LabeledPrompt {
            prompt: l.prompt,
            label,
        });
    }
    if out.is_empty() {
        return Err(PromptsError::Empty);
    }
    Ok(out)
}
