//! A loaded Hugging Face tokenizer (`--tokenizer PATH`) and the vocabulary the model draws from it
//! (`MODEL.md` section 13).
//!
//! The tokenizer itself is Hugging Face's `tokenizers` library reading the model's `tokenizer.json`, so ids and
//! text are what a trainer's `AutoTokenizer` computes. Around it this module reads the files a model directory
//! holds beside it (`tokenizer_config.json`, `chat_template.jinja`, `generation_config.json`, `config.json`) and
//! derives what the model needs from the vocabulary: its end-of-sequence ids, its special ids, the punctuation
//! ids and the ascending list of content ids the word slots draw from.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::chat::ChatTemplate;
use super::loading::{LoadError, SpecialTokenStrings};
use super::slots::PUNCTUATION;

/// A loaded tokenizer and the vocabulary of section 13.2.
pub struct HfVocab {
    /// Where it was loaded from, as given.
    source: PathBuf,
    tokenizer: tokenizers::Tokenizer,
    /// One more than the largest id the tokenizer has (`T`).
    size: u32,
    /// `config.json`'s `vocab_size`, when there is one.
    config_vocab_size: Option<u32>,
    /// Whether each id below `size` is a special added token.
    special: Vec<bool>,
    /// The end-of-sequence ids, the end-of-turn id first.
    eos: Vec<u32>,
    punctuation: [u32; PUNCTUATION.len()],
    /// The content ids `C`, ascending. They live as long as the process: the model's slots index them at every
    /// step, and a reference in its `Copy` slot recipe costs nothing there, where a counted one would cost two
    /// atomic operations a step. A process loads a tokenizer once (the command line; clones of a
    /// [`LoadedTokenizer`] share it), so what is leaked is one table per load.
    content: &'static [u32],
    tokens: SpecialTokenStrings,
    chat_template: Option<ChatTemplate>,
    /// `tokenizer_config.json`'s `model_max_length` when it is a 64-bit integer.
    model_max_length: Option<i128>,
}

impl std::fmt::Debug for HfVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfVocab")
            .field("source", &self.source)
            .field("size", &self.size)
            .field("eos", &self.eos)
            .field("content", &self.content.len())
            .finish_non_exhaustive()
    }
}

impl HfVocab {
    /// Loads `path`: a `tokenizer.json`, or a directory holding one and, optionally, the files of section 13.1.
    pub fn load(path: &Path) -> Result<HfVocab, LoadError> {
        let (dir, file) = if path.is_dir() {
            (path.to_path_buf(), path.join("tokenizer.json"))
        } else {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            (dir, path.to_path_buf())
        };
        let bytes = std::fs::read(&file).map_err(|source| LoadError::Read {
            path: file.clone(),
            source,
        })?;
        let mut tokenizer =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| LoadError::Tokenizer {
                path: file.clone(),
                message: e.to_string(),
            })?;
        // SGLang encodes prompts whole: a truncation or padding setting in the file does not apply, and without
        // them encoding a string cannot fail.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| LoadError::Tokenizer {
                path: file.clone(),
                message: e.to_string(),
            })?;
        let config = read_json(&dir.join("tokenizer_config.json"))?;
        let generation = read_json(&dir.join("generation_config.json"))?;
        let model_config = read_json(&dir.join("config.json"))?;

        let vocab = tokenizer.get_vocab(true);
        let size = vocab.values().max().map_or(0, |&id| id + 1);
        let added = tokenizer.get_added_tokens_decoder();
        let mut special = vec![false; size as usize];
        let mut is_added = vec![false; size as usize];
        for (&id, token) in &added {
            if let Some(slot) = is_added.get_mut(id as usize) {
                *slot = true;
                special[id as usize] = token.special;
            }
        }
        let mut has_token = vec![false; size as usize];
        for &id in vocab.values() {
            has_token[id as usize] = true;
        }

        let tokens = SpecialTokenStrings {
            bos_token: config.as_ref().and_then(|c| token_string(c, "bos_token")),
            eos_token: config.as_ref().and_then(|c| token_string(c, "eos_token")),
            pad_token: config.as_ref().and_then(|c| token_string(c, "pad_token")),
            unk_token: config.as_ref().and_then(|c| token_string(c, "unk_token")),
        };
        let invalid = |path: &Path, message: String| LoadError::Invalid {
            path: path.to_path_buf(),
            message,
        };

        // Section 13.2: generation_config's ids in order, then the tokenizer's eos_token.
        let mut eos = Vec::new();
        if let Some(value) = generation.as_ref().and_then(|g| g.get("eos_token_id")) {
            let ids = match value {
                Value::Array(items) => items.iter().map(Value::as_u64).collect::<Option<Vec<_>>>(),
                Value::Null => Some(Vec::new()),
                other @ (Value::Bool(_)
                | Value::Number(_)
                | Value::String(_)
                | Value::Object(_)) => other.as_u64().map(|id| vec![id]),
            };
            let ids = ids.ok_or_else(|| {
                invalid(
                    &dir.join("generation_config.json"),
                    format!("eos_token_id must be an id or a list of ids, got {value}"),
                )
            })?;
            for id in ids {
                let id = u32::try_from(id).unwrap_or(u32::MAX);
                if !eos.contains(&id) {
                    eos.push(id);
                }
            }
        }
        if let Some(name) = &tokens.eos_token {
            let id = tokenizer.token_to_id(name).ok_or_else(|| {
                invalid(
                    &dir.join("tokenizer_config.json"),
                    format!("eos_token {name:?} is not a token of {}", file.display()),
                )
            })?;
            if !eos.contains(&id) {
                eos.push(id);
            }
        }
        if eos.is_empty() {
            return Err(invalid(
                &file,
                "the model has no end-of-sequence token: neither generation_config.json's eos_token_id \
                 nor tokenizer_config.json's eos_token names one"
                    .into(),
            ));
        }

        let mut punctuation = [0u32; PUNCTUATION.len()];
        for (slot, &byte) in punctuation.iter_mut().zip(PUNCTUATION) {
            let text = char::from(byte).to_string();
            let ids =
                tokenizer
                    .encode_fast(text.as_str(), false)
                    .map_err(|e| LoadError::Tokenizer {
                        path: file.clone(),
                        message: e.to_string(),
                    })?;
            *slot = *ids.get_ids().first().ok_or_else(|| {
                invalid(&file, format!("the tokenizer encodes {text:?} to no token"))
            })?;
            if eos.contains(slot) {
                return Err(invalid(
                    &file,
                    format!("{text:?} encodes to {slot}, an end-of-sequence id"),
                ));
            }
        }

        let content: Vec<u32> = (0..size)
            .filter(|&id| {
                has_token[id as usize]
                    && !is_added[id as usize]
                    && !eos.contains(&id)
                    && !punctuation.contains(&id)
            })
            .collect();
        if content.len() < 16 {
            return Err(invalid(
                &file,
                format!(
                    "the model needs at least 16 ordinary tokens to draw from, this one has {}",
                    content.len()
                ),
            ));
        }

        let config_vocab_size = match model_config.as_ref().and_then(|c| c.get("vocab_size")) {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| {
                        invalid(
                            &dir.join("config.json"),
                            format!("vocab_size must be a count of ids, got {value}"),
                        )
                    })?,
            ),
        };

        let chat_template = chat_template_source(&dir, config.as_ref())?
            .map(|(path, source)| {
                ChatTemplate::new(source, tokens.clone())
                    .map_err(|message| LoadError::Template { path, message })
            })
            .transpose()?;

        let content: &'static [u32] = Box::leak(content.into_boxed_slice());
        Ok(HfVocab {
            source: path.to_path_buf(),
            tokenizer,
            size,
            config_vocab_size,
            special,
            eos,
            punctuation,
            content,
            tokens,
            chat_template,
            model_max_length: config.as_ref().and_then(|c| {
                let value = c.get("model_max_length")?;
                value
                    .as_i64()
                    .map(i128::from)
                    .or_else(|| value.as_u64().map(i128::from))
            }),
        })
    }

    /// The tokenizer's `model_max_length` as transformers reads it from `tokenizer_config.json`, when it is an
    /// integer within 64 bits (`None` when the file leaves it out, where transformers puts `int(1e30)`, or
    /// gives something else).
    pub fn model_max_length(&self) -> Option<i128> {
        self.model_max_length
    }

    /// The path it was loaded from, as given.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// One more than the largest id the tokenizer has (`T`).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// `config.json`'s `vocab_size`, the model's `V` unless `--vocab-size` overrides it.
    pub fn config_vocab_size(&self) -> Option<u32> {
        self.config_vocab_size
    }

    /// The end-of-sequence ids, the end-of-turn id first.
    pub(crate) fn eos_token_ids(&self) -> &[u32] {
        &self.eos
    }

    pub(crate) fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    pub(crate) fn punctuation(&self, index: usize) -> u32 {
        self.punctuation[index]
    }

    /// The content ids `C` of section 13.2, ascending: what the word slots draw from.
    pub fn content(&self) -> &'static [u32] {
        self.content
    }

    /// The special-token strings of `tokenizer_config.json`.
    pub fn special_token_strings(&self) -> &SpecialTokenStrings {
        &self.tokens
    }

    /// The model's chat template, when it has one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// The ids of `text`, with the tokenizer's special tokens added when `add_special_tokens` (a BOS for
    /// Llama's post-processor, nothing for Qwen's).
    pub(crate) fn encode(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        // Without truncation and padding (removed at load), encoding a string does not fail.
        match self.tokenizer.encode_fast(text, add_special_tokens) {
            Ok(encoding) => encoding.get_ids().to_vec(),
            Err(_) => Vec::new(),
        }
    }

    /// The text of `ids`: ids without a token decode to nothing, as the library does.
    pub(crate) fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> String {
        self.tokenizer
            .decode(ids, skip_special_tokens)
            .unwrap_or_default()
    }
}

/// Reads a JSON file that may be absent.
fn read_json(path: &Path) -> Result<Option<Value>, LoadError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LoadError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| LoadError::Json {
            path: path.to_path_buf(),
            source,
        })
}

/// A special token of `tokenizer_config.json`, written as a string or as an `AddedToken` object.
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a JSON value's type check: any other JSON type is the refusal"
)]
fn token_string(config: &Value, key: &str) -> Option<String> {
    match config.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(token) => token.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// The chat template's file and source: `chat_template.jinja` when present (transformers writes it there since
/// 4.43), otherwise `tokenizer_config.json`'s `chat_template`, a string or a list of named templates whose
/// `"default"` entry is used.
fn chat_template_source(
    dir: &Path,
    config: Option<&Value>,
) -> Result<Option<(PathBuf, String)>, LoadError> {
    let jinja = dir.join("chat_template.jinja");
    match std::fs::read_to_string(&jinja) {
        Ok(source) => return Ok(Some((jinja, source))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(LoadError::Read {
                path: jinja,
                source,
            });
        }
    }
    let path = dir.join("tokenizer_config.json");
    let source = match config.and_then(|c| c.get("chat_template")) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template")?.as_str().map(str::to_owned)),
        Some(other) => {
            return Err(LoadError::Invalid {
                path,
                message: format!("chat_template must be a string or a list, got {other}"),
            });
        }
    };
    Ok(source.map(|s| (path, s)))
}

/// A loaded tokenizer as a configuration value (`--tokenizer PATH`): loaded once, shared by every model built
/// from the configuration, and equal to another when both were loaded from the same path.
#[derive(Clone, Debug)]
pub struct LoadedTokenizer(Arc<HfVocab>);

impl LoadedTokenizer {
    /// Loads `path` (section 13.1).
    pub fn load(path: impl AsRef<Path>) -> Result<LoadedTokenizer, LoadError> {
        HfVocab::load(path.as_ref()).map(|vocab| LoadedTokenizer(Arc::new(vocab)))
    }

    /// The loaded vocabulary.
    pub fn vocab(&self) -> &Arc<HfVocab> {
        &self.0
    }

    /// The ids of a prompt's text, special tokens added as a `text` prompt's are (`MODEL.md` section 13.3).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.0.encode(text, true)
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> String {
        self.0.decode(ids, skip_special_tokens)
    }
}

impl PartialEq for LoadedTokenizer {
    fn eq(&self, other: &LoadedTokenizer) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.source == other.0.source
    }
}

impl Eq for LoadedTokenizer {}

impl std::str::FromStr for LoadedTokenizer {
    type Err = LoadError;

    fn from_str(path: &str) -> Result<LoadedTokenizer, LoadError> {
        LoadedTokenizer::load(path)
    }
}
