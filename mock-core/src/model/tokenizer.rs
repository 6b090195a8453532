//! The model's tokenizer: the toy model's own (`MODEL.md` section 2), or a loaded Hugging Face tokenizer
//! (`--tokenizer PATH`, section 13). Everything outside the model asks this type, so the server, the oracle and
//! the OpenAI layer speak one vocabulary whichever it is.

use std::borrow::Cow;
use std::sync::Arc;

use super::slots::{PUNCTUATION, Slots};
use super::toy::{Piece, Toy};
use super::{ChatTemplate, HfVocab};

/// The tokenizer of the model.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    kind: Kind,
    /// What the model's slots draw from, resolved once: every step reads it.
    slots: Slots,
}

#[derive(Clone, Debug)]
enum Kind {
    Toy(Toy),
    /// A loaded vocabulary in a model of `vocab_size >= vocab.size()` ids.
    Loaded {
        vocab: Arc<HfVocab>,
        vocab_size: u32,
    },
}

impl Tokenizer {
    /// The toy tokenizer over `vocab_size` ids. The caller checks the size against the toy's bounds.
    pub(crate) fn new(vocab_size: u32) -> Tokenizer {
        let toy = Toy::new(vocab_size);
        let (first_word, word_count) = toy.word_range();
        let slots = Slots {
            end_of_turn: toy.im_end_id(),
            first_word,
            table: None,
            word_count,
            punctuation: std::array::from_fn(|i| u32::from(PUNCTUATION[i])),
        };
        Tokenizer {
            kind: Kind::Toy(toy),
            slots,
        }
    }

    /// A loaded tokenizer in a model of `vocab_size` ids; the caller checks that it covers the tokenizer's.
    pub(crate) fn loaded(vocab: Arc<HfVocab>, vocab_size: u32) -> Tokenizer {
        let content = vocab.content();
        let slots = Slots {
            end_of_turn: vocab.eos_token_ids()[0],
            first_word: 0,
            table: Some(content),
            word_count: content.len() as u32,
            punctuation: std::array::from_fn(|i| vocab.punctuation(i)),
        };
        Tokenizer {
            kind: Kind::Loaded { vocab, vocab_size },
            slots,
        }
    }

    /// The toy tokenizer, when the model has no loaded one: its byte-level fast paths.
    #[inline]
    pub(crate) fn toy(&self) -> Option<&Toy> {
        match &self.kind {
            Kind::Toy(toy) => Some(toy),
            Kind::Loaded { .. } => None,
        }
    }

    /// The loaded tokenizer, if there is one.
    pub fn hf(&self) -> Option<&HfVocab> {
        match &self.kind {
            Kind::Toy(_) => None,
            Kind::Loaded { vocab, .. } => Some(vocab),
        }
    }

    /// Number of token ids; valid ids are `0..vocab_size`.
    pub fn vocab_size(&self) -> u32 {
        match &self.kind {
            Kind::Toy(toy) => toy.vocab_size(),
            Kind::Loaded { vocab_size, .. } => *vocab_size,
        }
    }

    /// The ids that end generation (unless `ignore_eos`), the end-of-turn id first: `<|im_end|>` and
    /// `<|endoftext|>` in the toy model.
    pub fn eos_token_ids(&self) -> &[u32] {
        match &self.kind {
            Kind::Toy(toy) => toy.eos_token_ids(),
            Kind::Loaded { vocab, .. } => vocab.eos_token_ids(),
        }
    }

    /// The token the model puts explicit weight on to end a turn: `<|im_end|>` in the toy model, the first
    /// end-of-sequence id of a loaded one.
    #[inline]
    pub fn end_of_turn_id(&self) -> u32 {
        self.slots.end_of_turn
    }

    /// Whether `id` is a special token (the count of tokens since the last one drives the end-of-turn weight).
    #[inline]
    pub fn is_special(&self, id: u32) -> bool {
        match &self.kind {
            Kind::Toy(toy) => toy.is_special(id),
            Kind::Loaded { vocab, .. } => vocab.is_special(id),
        }
    }

    /// What a toy id stands for, or `None` when it is outside the vocabulary or the tokenizer is a loaded one.
    pub fn piece(&self, id: u32) -> Option<Piece> {
        self.toy()?.piece(id)
    }

    /// The ids of a prompt's `text`: the toy's greedy encoding, or the loaded tokenizer's with its special
    /// tokens added, as SGLang's tokenizer manager encodes a prompt.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match &self.kind {
            Kind::Toy(toy) => toy.encode(text),
            Kind::Loaded { vocab, .. } => vocab.encode(text, true),
        }
    }

    /// The ids of `text` without special tokens added: a rendered chat template, which writes its own.
    pub fn encode_plain(&self, text: &str) -> Vec<u32> {
        match &self.kind {
            Kind::Toy(toy) => toy.encode(text),
            Kind::Loaded { vocab, .. } => vocab.encode(text, false),
        }
    }

    /// Decodes `ids` to text, replacing invalid UTF-8 with U+FFFD as Hugging Face tokenizers do.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> String {
        match &self.kind {
            Kind::Toy(toy) => toy.decode(ids, skip_special_tokens),
            Kind::Loaded { vocab, .. } => vocab.decode(ids, skip_special_tokens),
        }
    }

    /// The text of one token on its own, as SGLang reports it with `return_text_in_logprobs`
    /// (`tokenizer.decode([id])`): special tokens by name, a lone byte that is not a whole character as U+FFFD.
    pub fn token_text(&self, id: u32) -> Cow<'static, str> {
        match &self.kind {
            Kind::Toy(toy) => toy.token_text(id),
            Kind::Loaded { vocab, .. } => Cow::Owned(vocab.decode(&[id], false)),
        }
    }

    /// The model's chat template, for a loaded tokenizer that has one; `None` means ChatML (section 8.6).
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.hf()?.chat_template()
    }

    /// The ids section 4.3's slots draw from.
    #[inline(always)]
    pub(crate) fn slots(&self) -> &Slots {
        &self.slots
    }
}
