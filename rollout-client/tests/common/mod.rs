//! Test helpers: fixtures under `tests/data/`, the data-driven `check`, and a scripted HTTP/1.1 server.

pub(crate) mod server;

use std::path::PathBuf;

use rollout_client::{ResponseError, Turn};

pub(crate) fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

pub(crate) fn data(name: &str) -> Vec<u8> {
    std::fs::read(data_path(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// One line per turn: finish kind, ids, logprobs and text; the stable thing tests compare.
pub(crate) fn render(result: &Result<Vec<Turn>, ResponseError>) -> String {
    match result {
        Ok(turns) => turns
            .iter()
            .map(|t| {
                format!(
                    "{} ids={:?} lps={:?} text={:?}",
                    t.finish_reason, t.output_ids, t.logprobs, t.text
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("{e:?}"),
    }
}

/// Data-driven check: the rendered result must start with `expected` (errors render as their
/// `Debug`, so the variant and its fields come first and the serde_json detail can be elided).
#[track_caller]
pub(crate) fn check(result: Result<Vec<Turn>, ResponseError>, expected: &str) {
    let actual = render(&result);
    assert!(
        actual.starts_with(expected.trim()),
        "\nexpected (prefix):\n{}\nactual:\n{actual}\n",
        expected.trim()
    );
}
