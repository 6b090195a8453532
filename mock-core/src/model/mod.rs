//! The mock's language model: a tokenizer and a next-token distribution, pure and free of HTTP.
//!
//! The server and the oracle both generate through this module (via [`crate::engine`]), so they cannot disagree.
//! `mock-server/MODEL.md` specifies everything here, and `mock-server/reference/toymodel.py`, an implementation of
//! that document alone, checks the server from outside its code.

#[cfg(feature = "hf")]
mod chat;
mod dist;
#[cfg(feature = "hf")]
mod hf;
mod loading;
mod router;
mod slots;
mod tokenizer;
mod toy;
#[cfg(not(feature = "hf"))]
mod without_hf;

#[cfg(feature = "hf")]
pub use chat::ChatTemplate;
pub use dist::{CANDIDATES, Distribution, TAIL_LOGIT, TAIL_MARGIN};
#[cfg(feature = "hf")]
pub use hf::{HfVocab, LoadedTokenizer};
pub use loading::{LoadError, SpecialTokenStrings};
pub use router::{MoeShape, append_routes};
pub use tokenizer::Tokenizer;
pub use toy::{MAX_VOCAB_SIZE, MIN_VOCAB_SIZE, Piece};
#[cfg(not(feature = "hf"))]
pub use without_hf::{ChatTemplate, HfVocab, LoadedTokenizer};

use std::sync::Arc;

pub(crate) use dist::{Logits, Pick, Turn};
pub use dist::{mix, unit};

/// What defines the model: everything that changes its tokens or logprobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// The server seed: the same seed gives the same model, hence the same answers.
    pub seed: u64,
    /// Number of token ids, like a real model's `vocab_size` (Qwen2.5's 151,936 by default).
    pub vocab_size: u32,
    /// Report logprobs at temperature 1 instead of under the request's temperature (SGLang's
    /// `SGLANG_RETURN_ORIGINAL_LOGPROB` switch). Sampling still uses the request's temperature.
    pub return_original_logprob: bool,
    /// The MoE shape the router reports routes in.
    pub moe: MoeShape,
    /// A loaded tokenizer (`MODEL.md` section 13), or `None` for the toy tokenizer of section 2.
    pub tokenizer: Option<LoadedTokenizer>,
}

impl Default for ModelConfig {
    fn default() -> ModelConfig {
        ModelConfig {
            seed: 0,
            vocab_size: 151_936,
            return_original_logprob: false,
            moe: MoeShape::default(),
            tokenizer: None,
        }
    }
}

/// A configuration the model cannot run with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    /// The vocabulary is smaller or larger than the tokenizer's layout supports.
    #[error("vocab_size must be between {MIN_VOCAB_SIZE} and {MAX_VOCAB_SIZE}, got {0}")]
    VocabSize(u32),
    /// The vocabulary is smaller than the loaded tokenizer's, or larger than the context key holds.
    #[error(
        "vocab_size must be between the tokenizer's {tokenizer} ids and {max}, got {vocab_size}"
    )]
    LoadedVocabSize {
        vocab_size: u32,
        tokenizer: u32,
        max: u32,
    },
    /// The MoE shape has no layer, or routes a token to no expert or to more experts than a layer has.
    #[error(
        "the MoE shape needs at least one layer and 1 <= num_experts_per_tok <= num_experts, got {0:?}"
    )]
    MoeShape(MoeShape),
}

/// The toy model: a seed, a tokenizer and the next-token distribution they define.
#[derive(Clone, Debug)]
pub struct Model {
    config: ModelConfig,
    tokenizer: Tokenizer,
}

impl Model {
    /// Builds the model, checking the configuration.
    pub fn new(config: ModelConfig) -> Result<Model, ModelError> {
        let vocab_size = config.vocab_size;
        let tokenizer = match &config.tokenizer {
            None if !(MIN_VOCAB_SIZE..=MAX_VOCAB_SIZE).contains(&vocab_size) => {
                return Err(ModelError::VocabSize(vocab_size));
            }
            None => Tokenizer::new(vocab_size),
            Some(loaded) => {
                let size = loaded.vocab().size();
                // Section 4.1's context key holds 21 bits of each id.
                let max = (1 << 21) - 1;
                if !(size..=max).contains(&vocab_size) {
                    return Err(ModelError::LoadedVocabSize {
                        vocab_size,
                        tokenizer: size,
                        max,
                    });
                }
                Tokenizer::loaded(Arc::clone(loaded.vocab()), vocab_size)
            }
        };
        let moe = config.moe;
        if moe.layers == 0
            || moe.experts_per_token == 0
            || moe.experts_per_token > moe.experts
            || moe.experts > i32::MAX as u32
        {
            return Err(ModelError::MoeShape(moe));
        }
        Ok(Model { config, tokenizer })
    }

    /// The configuration the model was built with.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The distribution of the token that follows `context`, as `softmax(logits / temperature)` with the ids in
    /// `masked` (sorted, deduplicated, in the vocabulary) set to probability zero.
    pub fn distribution<'m>(
        &self,
        context: &[u32],
        temperature: f64,
        masked: &'m [u32],
    ) -> Distribution<'m> {
        let logits = self.logits(context, Turn::of(&self.tokenizer, context));
        Distribution::new(&logits, self.config.vocab_size, temperature, masked)
    }

    /// Appends the routed experts of `tokens[start..len - 1]` (section 12): one row of `layers * experts_per_token`
    /// ids per position, for a sequence of prompt and output `tokens`.
    pub fn append_routes(&self, tokens: &[u32], start: usize, out: &mut Vec<i32>) {
        router::append_routes(self.config.seed, &self.config.moe, tokens, start, out);
    }

    /// The unscaled logits after `context`, given its running count of tokens since the last special token.
    #[inline(always)]
    pub(crate) fn logits(&self, context: &[u32], turn: Turn) -> Logits {
        dist::logits(self.config.seed, &self.tokenizer, context, turn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_vocabularies_the_layout_cannot_hold() {
        for bad in [0, 300, MIN_VOCAB_SIZE - 1, MAX_VOCAB_SIZE + 1] {
            let err = Model::new(ModelConfig {
                vocab_size: bad,
                ..ModelConfig::default()
            })
            .unwrap_err();
            assert_eq!(err, ModelError::VocabSize(bad));
        }
        assert!(
            Model::new(ModelConfig {
                vocab_size: MAX_VOCAB_SIZE,
                ..ModelConfig::default()
            })
            .is_ok()
        );
    }

    #[test]
    fn the_distribution_depends_on_seed_and_context() {
        let a = Model::new(ModelConfig::default()).unwrap();
        let b = Model::new(ModelConfig {
            seed: 1,
            ..ModelConfig::default()
        })
        .unwrap();
        let top = |m: &Model, ctx: &[u32]| {
            let mut out = Vec::new();
            m.distribution(ctx, 1.0, &[]).top(3, &mut out);
            out
        };
        assert_eq!(top(&a, &[1, 2]), top(&a, &[1, 2]));
        assert_ne!(top(&a, &[1, 2]), top(&b, &[1, 2]));
        assert_ne!(top(&a, &[1, 2]), top(&a, &[1, 3]));
    }

    #[test]
    fn distributions_are_neither_uniform_nor_one_hot() {
        let m = Model::new(ModelConfig::default()).unwrap();
        let mut max_p = Vec::new();
        for ctx in 0..200u32 {
            let d = m.distribution(&[ctx, ctx + 1], 1.0, &[]);
            let mut top = Vec::new();
            d.top(1, &mut top);
            max_p.push(top[0].1.exp());
        }
        let lo = max_p.iter().copied().fold(1.0, f64::min);
        let hi = max_p.iter().copied().fold(0.0, f64::max);
        assert!(
            lo > 0.05 && hi < 0.99 && hi - lo > 0.3,
            "max probabilities span {lo}..{hi}"
        );
    }
}
