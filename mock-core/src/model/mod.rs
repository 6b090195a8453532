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
mod policy;
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
pub use policy::{
    ARCHITECTURE, DEFAULT_BUCKETS, MAX_BUCKETS, OFFSET_MAX, OFFSET_MIN, Policy, PolicyError, SLOTS,
    TENSOR_NAME, config_json, is_policy_dir, save_dir, to_safetensors,
};
pub use router::{MoeShape, append_routes};
pub use tokenizer::Tokenizer;
pub use toy::{MAX_VOCAB_SIZE, MIN_VOCAB_SIZE, Piece};
#[cfg(not(feature = "hf"))]
pub use without_hf::{ChatTemplate, HfVocab, LoadedTokenizer};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

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

/// A digest of a policy's weights, to tell two policies apart in `/model_info`: SplitMix64 mixing of the bucket
/// count and every offset's bits in order, as 16 hexadecimal digits.
pub fn digest(policy: &Policy) -> String {
    let mut h = u64::from(policy.buckets());
    for v in policy.offsets().iter().flatten() {
        h = mix(h, u64::from(v.to_bits()));
    }
    format!("{h:016x}")
}

/// The toy model: a seed, a tokenizer, the policy's weights and the next-token distribution they define.
///
/// The weights can change while the model serves (a weight update): each change gets the next *epoch*, and a
/// generation keeps the policy it read with the epoch it read it at, so that a step costs one atomic load to learn
/// whether the weights changed under it. The model also keeps the policies it served before, by the server's
/// weights count (the ledger's `weights`), so that an audit can recompute a logprob under the weights that served
/// it, or recognise one computed under older weights.
#[derive(Debug)]
pub struct Model {
    config: ModelConfig,
    tokenizer: Tokenizer,
    policy: RwLock<Arc<Policy>>,
    epoch: AtomicU64,
    /// Each policy served, with the weights count from which it served, oldest first; at most
    /// [`POLICY_HISTORY`] of them, the first from count 0.
    history: RwLock<Vec<(u64, Arc<Policy>)>>,
}

/// How many policies a model remembers: the start-up policy and the last updates, enough to name the weights a
/// stale worker or a stale recompute used in any run whose ledger holds them.
pub const POLICY_HISTORY: usize = 64;

/// The gradient of one token's logprob with respect to the policy's offsets: nonzero in one bucket only.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gradient {
    /// `log p(id | context)` at the temperature, as the server reports it before rounding to `f32`.
    pub logprob: f64,
    /// The context's bucket: the row of `logit_offsets` the gradient lives in.
    pub bucket: usize,
    /// `d logprob / d logit_offsets[bucket][slot]` for each slot.
    pub d_offsets: [f64; SLOTS],
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
        let policy = Arc::new(Policy::zero(DEFAULT_BUCKETS));
        Ok(Model {
            config,
            tokenizer,
            policy: RwLock::new(Arc::clone(&policy)),
            epoch: AtomicU64::new(0),
            history: RwLock::new(vec![(0, policy)]),
        })
    }

    /// The model with `policy` as its weights from start-up.
    pub fn with_policy(self, policy: Policy) -> Model {
        self.restart_with(policy);
        self
    }

    /// The weights serving now.
    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The number of times the weights have been replaced: a generation compares it with the one it read.
    #[inline(always)]
    pub fn policy_epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The weights serving now and their epoch; the policy is at least as new as the epoch says.
    pub(crate) fn policy_with_epoch(&self) -> (Arc<Policy>, u64) {
        let epoch = self.policy_epoch();
        (self.policy(), epoch)
    }

    /// Replaces the weights: every step from now on, of new and of running generations, uses `policy`, which
    /// serves from the server's `weights`-th weights on (the count the update moves it to).
    pub fn set_policy(&self, policy: Policy, weights: u64) {
        let policy = Arc::new(policy);
        {
            let mut history = self.history.write().unwrap_or_else(|e| e.into_inner());
            // A count served by no token (two updates before the next step) keeps only its last policy.
            history.retain(|(from, _)| *from < weights);
            history.push((weights, Arc::clone(&policy)));
            if history.len() > POLICY_HISTORY {
                history.remove(0);
            }
        }
        self.replace(policy);
    }

    /// The weights as at start-up: `policy` serves from count 0 and the policies served before are forgotten
    /// (`/admin/reset`, which empties the ledger too).
    pub fn restart_with(&self, policy: Policy) {
        let policy = Arc::new(policy);
        *self.history.write().unwrap_or_else(|e| e.into_inner()) = vec![(0, Arc::clone(&policy))];
        self.replace(policy);
    }

    fn replace(&self, policy: Arc<Policy>) {
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = policy;
        self.epoch.fetch_add(1, Ordering::Release);
    }

    /// The policy that served the server's `weights`-th weights: the last one set at or before that count.
    /// `None` when the history no longer reaches back that far.
    pub fn policy_at(&self, weights: u64) -> Option<Arc<Policy>> {
        let history = self.history.read().unwrap_or_else(|e| e.into_inner());
        let i = history.partition_point(|(from, _)| *from <= weights);
        // The first entry serves from count 0 until the history is trimmed.
        (i > 0).then(|| Arc::clone(&history[i - 1].1))
    }

    /// The policies that served before the `weights`-th weights and differ from theirs, newest first, each
    /// with the weights count it served from.
    pub fn policies_before(&self, weights: u64) -> Vec<(u64, Arc<Policy>)> {
        let Some(current) = self.policy_at(weights) else {
            return Vec::new();
        };
        let history = self.history.read().unwrap_or_else(|e| e.into_inner());
        let mut older: Vec<(u64, Arc<Policy>)> = Vec::new();
        for (from, policy) in history.iter().rev().filter(|(from, _)| *from < weights) {
            if **policy != *current && older.iter().all(|(_, p)| **p != **policy) {
                older.push((*from, Arc::clone(policy)));
            }
        }
        older
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
        self.distribution_under(&self.policy(), context, temperature, masked)
    }

    /// [`Model::distribution`] under the weights `policy` instead of those serving now.
    pub fn distribution_under<'m>(
        &self,
        policy: &Policy,
        context: &[u32],
        temperature: f64,
        masked: &'m [u32],
    ) -> Distribution<'m> {
        let logits = self.logits(policy, context, Turn::of(&self.tokenizer, context));
        Distribution::new(&logits, self.config.vocab_size, temperature, masked)
    }

    /// The logprob of `id` after `context` at `temperature` under `policy`, and its gradient with respect to the
    /// policy's offsets (MODEL.md section 14.3): with `p_s` the slots' probabilities at `temperature`,
    /// `d logprob / d θ[bucket][s] = (1[id is slot s] - p_s) / temperature` for every offset that is not clamped,
    /// and 0 for one that is. `None` for an id outside the vocabulary.
    pub fn logprob_gradient(
        &self,
        policy: &Policy,
        context: &[u32],
        temperature: f64,
        id: u32,
    ) -> Option<Gradient> {
        if id >= self.config.vocab_size {
            return None;
        }
        let logits = self.logits(policy, context, Turn::of(&self.tokenizer, context));
        let dist = Distribution::new(&logits, self.config.vocab_size, temperature, &[]);
        let bucket = policy.bucket(logits.layout());
        let chosen = dist.slot_of(id);
        let slot_logprobs = dist.slot_logprobs();
        let inv_t = 1.0 / temperature;
        let d_offsets = std::array::from_fn(|s| {
            if !policy.is_active(bucket, s) {
                return 0.0;
            }
            let hit = if chosen == Some(s) { 1.0 } else { 0.0 };
            (hit - slot_logprobs[s].exp()) * inv_t
        });
        Some(Gradient {
            logprob: dist.logprob(id),
            bucket,
            d_offsets,
        })
    }

    /// Appends the routed experts of `tokens[start..len - 1]` (section 12): one row of `layers * experts_per_token`
    /// ids per position, for a sequence of prompt and output `tokens`.
    pub fn append_routes(&self, tokens: &[u32], start: usize, out: &mut Vec<i32>) {
        router::append_routes(self.config.seed, &self.config.moe, tokens, start, out);
    }

    /// The unscaled logits after `context` under `policy`, given its running count of tokens since the last
    /// special token.
    #[inline(always)]
    pub(crate) fn logits(&self, policy: &Policy, context: &[u32], turn: Turn) -> Logits {
        dist::logits(self.config.seed, &self.tokenizer, context, turn, policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    proptest! {
        /// The closed-form gradient of MODEL.md section 14.3 against central finite differences of the logprob
        /// itself, for every offset of the context's bucket, at temperatures around 1, for candidate, end-of-turn
        /// and tail ids; a clamped offset has gradient 0 and its finite difference is 0 too.
        #[test]
        fn the_gradient_is_the_finite_difference_of_the_logprob(
            offsets in proptest::collection::vec(-3.0f32..17.0, 2 * SLOTS),
            context in proptest::collection::vec(0u32..151_000, 1..6),
            temperature in 0.5f64..2.0,
            pick in 0usize..11,
        ) {
            let rows: Vec<[f32; SLOTS]> =
                offsets.chunks_exact(SLOTS).map(|r| r.try_into().unwrap()).collect();
            let model = Model::new(ModelConfig::default()).unwrap();
            let policy = Policy::new(rows.clone()).unwrap();
            let mut top = Vec::new();
            model.distribution_under(&policy, &context, temperature, &[]).top(SLOTS + 2, &mut top);
            // One of the nine explicit ids (by rank) or one of the first tail ids.
            let id = top[pick].0;
            let g = model.logprob_gradient(&policy, &context, temperature, id).unwrap();
            prop_assert_eq!(g.logprob, model.distribution_under(&policy, &context, temperature, &[]).logprob(id));
            for slot in 0..SLOTS {
                let at = |delta: f32| {
                    let mut moved = rows.clone();
                    moved[g.bucket][slot] += delta;
                    let p = Policy::new(moved).unwrap();
                    (model.distribution_under(&p, &context, temperature, &[]).logprob(id), p)
                };
                let h = 1.0e-2f32;
                let ((up, p_up), (down, p_down)) = (at(h), at(-h));
                let span = f64::from(p_up.offsets()[g.bucket][slot]) - f64::from(p_down.offsets()[g.bucket][slot]);
                let numeric = (up - down) / span;
                if policy.is_active(g.bucket, slot) && p_up.is_active(g.bucket, slot) && p_down.is_active(g.bucket, slot) {
                    prop_assert!(
                        (numeric - g.d_offsets[slot]).abs() < 1e-4,
                        "slot {}: closed form {} vs finite difference {}", slot, g.d_offsets[slot], numeric
                    );
                } else if !policy.is_active(g.bucket, slot) && !p_up.is_active(g.bucket, slot) && !p_down.is_active(g.bucket, slot) {
                    prop_assert_eq!(g.d_offsets[slot], 0.0);
                    prop_assert_eq!(numeric, 0.0);
                }
            }
        }
    }

    #[test]
    fn the_history_gives_the_policy_that_served_each_weights_count() {
        let model = Model::new(ModelConfig::default()).expect("model");
        let zero = model.policy();
        let moved = |x: f32| Policy::new(vec![[x; SLOTS]; 8]).expect("policy");
        model.set_policy(moved(0.5), 2);
        model.set_policy(moved(1.0), 5);
        let at = |w: u64| model.policy_at(w).map(|p| p.offsets()[0][0]);
        assert_eq!(
            (0..7).map(at).collect::<Vec<_>>(),
            [0.0, 0.0, 0.5, 0.5, 0.5, 1.0, 1.0].map(Some)
        );
        assert_eq!(*model.policy(), moved(1.0));
        let before = |w: u64| -> Vec<(u64, f32)> {
            model
                .policies_before(w)
                .iter()
                .map(|(from, p)| (*from, p.offsets()[0][0]))
                .collect()
        };
        assert_eq!(before(5), [(2, 0.5), (0, 0.0)]);
        assert_eq!(before(4), [(0, 0.0)]);
        assert_eq!(before(0), []);
        // An update to weights equal to older ones: the older ones are not older weights.
        model.set_policy(Policy::clone(&zero), 6);
        assert_eq!(before(6), [(5, 1.0), (2, 0.5)]);
        // Two updates to one count keep the last; a restart forgets the rest.
        model.set_policy(moved(2.0), 6);
        assert_eq!(at(6), Some(2.0));
        model.restart_with(Policy::clone(&zero));
        assert_eq!((at(0), at(9)), (Some(0.0), Some(0.0)));
        assert_eq!(before(9), []);
    }

    #[test]
    fn the_history_keeps_the_last_policies() {
        let model = Model::new(ModelConfig::default()).expect("model");
        let n = POLICY_HISTORY as u64 + 3;
        for w in 1..=n {
            model.set_policy(
                Policy::new(vec![[w as f32 / 100.0; SLOTS]; 8]).expect("policy"),
                w,
            );
        }
        assert_eq!(model.policy_at(3), None);
        assert_eq!(model.policy_at(4).map(|p| p.offsets()[0][0]), Some(0.04));
        assert_eq!(model.policies_before(n + 1).len(), POLICY_HISTORY - 1);
    }

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
