//! What every build knows of loaded tokenizers, whether or not it can load one (the `hf` feature): the
//! special-token strings a model directory names, and why a load failed.

use std::path::PathBuf;

/// The special-token strings `tokenizer_config.json` names, which chat templates read as variables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokenStrings {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
}

/// What [`HfVocab::load`](super::HfVocab::load) could not read or use.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `tokenizer.json` is not a tokenizer the library can load.
    #[error("cannot load the tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    /// A JSON file beside it is not valid JSON.
    #[error("{path} is not valid JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A file is readable but says something the model cannot run with.
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// The chat template does not compile.
    #[error("the chat template of {path} does not compile: {message}")]
    Template { path: PathBuf, message: String },
    /// This build has no Hugging Face tokenizers: the `hf` feature of `mock-core` (and of `mock-server`) was off.
    #[error(
        "cannot load the tokenizer {path}: this build has no Hugging Face tokenizers (the `hf` feature)"
    )]
    NotBuilt { path: PathBuf },
}
