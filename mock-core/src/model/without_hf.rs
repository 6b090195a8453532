//! Stand-ins for a build without Hugging Face tokenizers (the `hf` feature off): the types that hold a loaded
//! tokenizer or a chat template have no values, so every use of one compiles and none can happen, and a load
//! says which feature it needs. The model then speaks the toy tokenizer only.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::loading::{LoadError, SpecialTokenStrings};

/// A loaded tokenizer: none in this build.
#[derive(Debug)]
pub enum HfVocab {}

impl HfVocab {
    /// Refuses: this build cannot load a tokenizer.
    pub fn load(path: &Path) -> Result<HfVocab, LoadError> {
        Err(LoadError::NotBuilt {
            path: path.to_path_buf(),
        })
    }

    pub fn source(&self) -> &Path {
        match *self {}
    }

    pub fn size(&self) -> u32 {
        match *self {}
    }

    pub fn config_vocab_size(&self) -> Option<u32> {
        match *self {}
    }

    pub(crate) fn eos_token_ids(&self) -> &[u32] {
        match *self {}
    }

    pub(crate) fn is_special(&self, _id: u32) -> bool {
        match *self {}
    }

    pub(crate) fn punctuation(&self, _index: usize) -> u32 {
        match *self {}
    }

    pub fn content(&self) -> &'static [u32] {
        match *self {}
    }

    pub fn special_token_strings(&self) -> &SpecialTokenStrings {
        match *self {}
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        match *self {}
    }

    pub fn model_max_length(&self) -> Option<i128> {
        match *self {}
    }

    pub(crate) fn encode(&self, _text: &str, _add_special_tokens: bool) -> Vec<u32> {
        match *self {}
    }

    pub(crate) fn decode(&self, _ids: &[u32], _skip_special_tokens: bool) -> String {
        match *self {}
    }
}

/// A loaded tokenizer as a configuration value: none in this build, so `--tokenizer` is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadedTokenizer {}

impl LoadedTokenizer {
    /// Refuses: this build cannot load a tokenizer.
    pub fn load(path: impl AsRef<Path>) -> Result<LoadedTokenizer, LoadError> {
        Err(LoadError::NotBuilt {
            path: path.as_ref().to_path_buf(),
        })
    }

    pub fn vocab(&self) -> &Arc<HfVocab> {
        match *self {}
    }

    pub fn encode(&self, _text: &str) -> Vec<u32> {
        match *self {}
    }

    pub fn decode(&self, _ids: &[u32], _skip_special_tokens: bool) -> String {
        match *self {}
    }
}

impl std::str::FromStr for LoadedTokenizer {
    type Err = LoadError;

    fn from_str(path: &str) -> Result<LoadedTokenizer, LoadError> {
        LoadedTokenizer::load(path)
    }
}

/// A compiled chat template: none in this build (only a loaded tokenizer has one).
#[derive(Debug)]
pub enum ChatTemplate {}

impl ChatTemplate {
    /// Refuses: this build has no template engine.
    pub fn new(_source: String, _tokens: SpecialTokenStrings) -> Result<ChatTemplate, String> {
        Err("this build has no chat templates (the `hf` feature)".to_owned())
    }

    pub fn render(
        &self,
        _messages: &Value,
        _tools: Option<&Value>,
        _add_generation_prompt: bool,
        _kwargs: &Map<String, Value>,
    ) -> Result<String, String> {
        match *self {}
    }
}
