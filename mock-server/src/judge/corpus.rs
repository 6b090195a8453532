//! The requests `conform` sends: a corpus of named cases, each one request or a scenario of steps (a request
//! sent in the background, a wait for some of its stream's events, a request that acts on it, the join).
//! The built-in corpus ([`Corpus::builtin`], `mock-server/conform/corpus.json`) covers every route and request
//! shape the releases serve, valid and invalid bodies alike; `--corpus FILE` gives another in the same format.
//!
//! ```json
//! {"cases": [
//!   {"name": "generate/text", "send": {"path": "/generate", "body": {"text": "Hi"}}},
//!   {"name": "abort/running", "steps": [
//!     {"as": "long", "background": true, "send": {"path": "/generate", "body": {"text": "Hi", "stream": true}}},
//!     {"wait": "long", "events": 2},
//!     {"send": {"path": "/abort_request", "body": {"rid": "conform-long"}}},
//!     {"join": "long"}]}
//! ]}
//! ```
//!
//! A request with a `body` (JSON) or a `raw` body (bytes, for bodies that are not JSON) is a `POST` unless
//! `method` says otherwise; one with neither is a `GET`. A case may be limited to the target's model
//! (`"model": "moe"`: only against a mixture-of-experts model) and may name releases it is `skip`ped for, with
//! the reason (a request that takes the release down).

use serde::Deserialize;
use serde_json::Value;

/// The built-in corpus's text.
const BUILTIN: &str = include_str!("../../conform/corpus.json");

/// A corpus: cases in the order they are sent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Corpus {
    pub cases: Vec<Case>,
}

/// One case: a request, or a scenario of steps.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Unique in the corpus; `area/what`, so that a known difference can name a whole area.
    pub name: String,
    /// What the case checks, for the reader of a report.
    #[serde(default)]
    pub about: Option<String>,
    /// The model the target must serve for this case to run.
    #[serde(default)]
    pub model: ModelKind,
    /// The answers' lengths are the clock's (a stream aborted after a few events): token counts and array
    /// lengths are not compared, the answers' invariants are.
    #[serde(default)]
    pub clock: bool,
    /// Releases this case is not sent to, each with the reason.
    #[serde(default)]
    pub skip: Vec<Skip>,
    /// A case of one request.
    #[serde(default)]
    pub send: Option<Send>,
    /// A scenario.
    #[serde(default)]
    pub steps: Vec<Step>,
}

/// Which model a case needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Any model: the dense model's cases.
    #[default]
    Dense,
    /// A mixture-of-experts model served with routed experts.
    Moe,
}

/// A release a case is not sent to, and why.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skip {
    pub release: String,
    pub reason: String,
}

/// One request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Send {
    #[serde(default)]
    pub method: Option<String>,
    pub path: String,
    #[serde(default)]
    pub body: Option<Value>,
    #[serde(default)]
    pub raw: Option<String>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
}

impl Send {
    pub fn method(&self) -> &str {
        match (&self.method, self.body.is_some() || self.raw.is_some()) {
            (Some(method), _) => method,
            (None, true) => "POST",
            (None, false) => "GET",
        }
    }

    /// The body's bytes: the raw text as given, or the JSON written compactly in its key order.
    pub fn body_bytes(&self) -> Vec<u8> {
        match (&self.raw, &self.body) {
            (Some(raw), _) => raw.clone().into_bytes(),
            (None, Some(body)) => body.to_string().into_bytes(),
            (None, None) => Vec::new(),
        }
    }
}

/// One step of a scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Step {
    /// Send a request; in the background when `background` is set (its answer is compared at its `join`),
    /// under the name `as`.
    Send {
        send: Send,
        #[serde(default, rename = "as")]
        name: Option<String>,
        #[serde(default)]
        background: bool,
    },
    /// Wait until the background request `wait` has received `events` stream events (or has ended).
    Wait { wait: String, events: usize },
    /// Wait `sleep_ms` milliseconds.
    Sleep { sleep_ms: u64 },
    /// Wait for the background request `join` to end; its answer is compared here.
    Join { join: String },
}

/// Why a corpus could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("the corpus is not valid JSON of the corpus format: {0}")]
    Json(#[from] serde_json::Error),
    #[error("case {case:?}: {what}")]
    Case { case: String, what: String },
}

impl Corpus {
    /// The corpus that ships with the project.
    pub fn builtin() -> Corpus {
        // Checked by a test: the built-in corpus parses and validates.
        Corpus::parse(BUILTIN.as_bytes()).unwrap_or(Corpus { cases: vec![] })
    }

    /// Reads and validates a corpus: unique names, a case is one request or steps, a step names only
    /// requests sent before it in the background, each background request is joined.
    pub fn parse(bytes: &[u8]) -> Result<Corpus, CorpusError> {
        let corpus: Corpus = serde_json::from_slice(bytes)?;
        let mut names = std::collections::HashSet::new();
        for case in &corpus.cases {
            let fail = |what: String| CorpusError::Case {
                case: case.name.clone(),
                what,
            };
            if !names.insert(case.name.as_str()) {
                return Err(fail("the name is used twice".into()));
            }
            match (&case.send, case.steps.is_empty()) {
                (Some(_), false) => return Err(fail("give `send` or `steps`, not both".into())),
                (None, true) => return Err(fail("give `send` or `steps`".into())),
                _ => {}
            }
            let mut running: Vec<&str> = Vec::new();
            for step in &case.steps {
                match step {
                    Step::Send {
                        name, background, ..
                    } => match (name, background) {
                        (Some(name), true) => running.push(name),
                        (None, true) => {
                            return Err(fail("a background request needs a name (`as`)".into()));
                        }
                        _ => {}
                    },
                    Step::Wait { wait: name, .. } if !running.contains(&name.as_str()) => {
                        return Err(fail(format!(
                            "`wait` names {name:?}, not a running request"
                        )));
                    }
                    Step::Join { join: name } => {
                        let Some(i) = running.iter().position(|n| n == name) else {
                            return Err(fail(format!(
                                "`join` names {name:?}, not a running request"
                            )));
                        };
                        running.remove(i);
                    }
                    Step::Wait { .. } | Step::Sleep { .. } => {}
                }
            }
            if !running.is_empty() {
                return Err(fail(format!("{running:?} are never joined")));
            }
        }
        Ok(corpus)
    }

    /// The cases sent to `release` serving a model of `kind`.
    pub fn cases_for<'a>(
        &'a self,
        release: &'a str,
        kind: ModelKind,
    ) -> impl Iterator<Item = &'a Case> {
        self.cases.iter().filter(move |case| {
            case.model == kind && !case.skip.iter().any(|s| s.release == release)
        })
    }
}

impl Case {
    /// The case's steps: its one request is one step.
    pub fn steps(&self) -> Vec<Step> {
        match &self.send {
            Some(send) => vec![Step::Send {
                send: send.clone(),
                name: None,
                background: false,
            }],
            None => self.steps.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_corpus_is_valid() {
        let corpus = Corpus::parse(BUILTIN.as_bytes()).unwrap();
        assert!(corpus.cases.len() >= 60, "{} cases", corpus.cases.len());
    }

    #[test]
    fn a_scenario_must_name_and_join_its_background_requests() {
        let cases = [
            (
                r#"{"cases":[{"name":"a","send":{"path":"/x"}},{"name":"a","send":{"path":"/y"}}]}"#,
                "used twice",
            ),
            (r#"{"cases":[{"name":"a"}]}"#, "give `send` or `steps`"),
            (
                r#"{"cases":[{"name":"a","steps":[{"send":{"path":"/x"},"background":true}]}]}"#,
                "needs a name",
            ),
            (
                r#"{"cases":[{"name":"a","steps":[{"send":{"path":"/x"},"as":"l","background":true}]}]}"#,
                "never joined",
            ),
            (
                r#"{"cases":[{"name":"a","steps":[{"wait":"l","events":1}]}]}"#,
                "not a running request",
            ),
        ];
        for (text, expected) in cases {
            let err = Corpus::parse(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn a_request_with_a_body_is_a_post() {
        let send: Send = serde_json::from_str(r#"{"path":"/generate","raw":"{"}"#).unwrap();
        assert_eq!((send.method(), send.body_bytes()), ("POST", b"{".to_vec()));
        let send: Send = serde_json::from_str(r#"{"path":"/health"}"#).unwrap();
        assert_eq!(send.method(), "GET");
    }
}
