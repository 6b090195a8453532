//! The next-token distribution: a handful of explicit candidates over a uniform tail, with an exact normaliser.
//!
//! At every context the model gives [`CANDIDATES`] content tokens and `<|im_end|>` an explicit weight (the
//! exponential of a logit); every other id in the vocabulary shares one tail logit, [`TAIL_LOGIT`]. The normaliser is
//! therefore a closed form, `Z = sum(exp(l_k / T)) + n_tail * exp(l_tail / T)`, and a step costs the same for a
//! vocabulary of 1,024 or 1,000,000 ids. Every explicit logit lies at least [`TAIL_MARGIN`] nats above the tail by
//! construction, so the sorted order of the whole vocabulary is known without sorting it: the explicit entries in
//! descending weight, then the tail ids in ascending id order. Every top-k / top-p / min-p filter keeps a prefix of
//! that order, so sampling is exact too. `mock-server/MODEL.md` specifies all of it.
//!
//! The model is defined in the weight domain: each candidate's weight is the one before it times a random ratio
//! below 1. At temperature 1, the default of RL rollouts, a step therefore needs no `exp` for the candidates and
//! one `ln` for the reported logprob. At any other temperature logprobs are computed in log space,
//! `l / T - log Z`, so they stay finite however far below the top a token lies.

use super::policy::Policy;
use super::slots::PUNCTUATION;
use super::tokenizer::Tokenizer;

/// Content candidates per context (the end-of-turn token comes on top).
pub const CANDIDATES: usize = 8;
/// The logit every non-candidate id shares.
pub const TAIL_LOGIT: f64 = -12.0;
/// `exp(TAIL_LOGIT)`, the tail's weight at temperature 1.
const TAIL_WEIGHT: f64 = 6.144_212_353_328_21e-6;
/// The least gap, in nats, between the lowest explicit logit and the tail: the first weight is at least 50, each of
/// the seven ratios at least `FLATNESS_MIN * 0.55`, so the lowest candidate's logit is at least
/// `ln(50) + 7 * ln(0.143) = -9.70`, and `<|im_end|>`'s at least -6.
pub const TAIL_MARGIN: f64 = 2.0;
/// The range of a context's flatness, the common factor of its weight ratios.
const FLATNESS_MIN: f64 = 0.26;
const FLATNESS_SPAN: f64 = 0.69;
/// Explicit entries per context: the content candidates and `<|im_end|>`.
pub(crate) const EXPLICIT: usize = CANDIDATES + 1;
// A policy's rows are the explicit entries, and its least offset keeps every explicit logit above the tail.
const _: () =
    assert!(super::policy::SLOTS == EXPLICIT && super::policy::OFFSET_MIN >= -TAIL_MARGIN);

/// SplitMix64's output function: a fast, well-mixed bijection on `u64`.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hashes `value` into the running state `state`.
pub fn mix(state: u64, value: u64) -> u64 {
    splitmix64(state ^ splitmix64(value))
}

/// Maps a hash to a uniform number in `[0, 1)` with 53 bits of precision.
pub fn unit(h: u64) -> f64 {
    // Through `i64`: the value is below 2^53, so the conversion is exact either way, and x86-64 has a signed
    // conversion instruction but no unsigned one before AVX-512.
    ((h >> 11) as i64) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// What the model assigns at one context at temperature 1: a weight (`exp(logit)`) per slot, the content
/// candidates first and `<|im_end|>` last, and the recipe for each slot's id.
#[derive(Clone, Debug)]
pub(crate) struct Logits {
    weights: [f64; EXPLICIT],
    ids: CandidateIds,
    /// Whether the content candidates fall strictly, as the base model makes them: a policy's offsets can reorder
    /// them (MODEL.md section 14), and then the nine entries are sorted in full.
    sorted: bool,
    /// The context's `layout` draw, which picks its bucket of the policy.
    layout: u64,
}

/// How a slot's token id is drawn. Ids are computed only when something asks for them: a step at temperature 1
/// without masks needs the id of the sampled slot alone.
#[derive(Clone, Copy, Debug)]
struct CandidateIds {
    /// The state the per-slot draws continue from.
    stream: u64,
    rotation: u32,
    punctuation_rank: usize,
    punctuation: u32,
    block: u32,
    /// The word slots' ids: `first_word + index` for the toy, `table[index]` for a loaded vocabulary.
    first_word: u32,
    table: Option<&'static [u32]>,
    /// The end-of-turn id (`<|im_end|>` in the toy model).
    im_end: u32,
}

impl CandidateIds {
    /// The id of `slot`: `<|im_end|>` for the last slot, punctuation for one rank in most contexts, otherwise a
    /// word from block `(slot + rotation) % 8` of the word range, so the slots are distinct by construction.
    #[inline]
    fn id(&self, slot: usize) -> u32 {
        if slot == CANDIDATES {
            return self.im_end;
        }
        if slot == self.punctuation_rank {
            return self.punctuation;
        }
        let r = splitmix64(
            self.stream
                .wrapping_add((slot as u64 + 1).wrapping_mul(GOLDEN)),
        ) >> 32;
        let start = ((slot as u32 + self.rotation) % CANDIDATES as u32) * self.block;
        // An even offset within the block (a word that starts with a space), odd one time in eight.
        let pair = ((r * u64::from(self.block / 2)) >> 32) as u32;
        let index = start + 2 * pair + u32::from(r & 7 == 0);
        match self.table {
            None => self.first_word + index,
            Some(ids) => ids[index as usize],
        }
    }
}

/// The SplitMix64 increment.
pub(crate) const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The hash of a context (MODEL.md section 4.1): the context key packs the last three ids into one word (21 bits
/// each is enough for every vocabulary the tokenizer supports), so two rounds of mixing cover seed, tokens and
/// length.
#[inline(always)]
pub(crate) fn context_hash(seed: u64, context: &[u32]) -> u64 {
    let back = |k: usize| {
        context
            .len()
            .checked_sub(k)
            .map_or(0x1F_FFFF, |i| u64::from(context[i]))
    };
    let tokens = back(1) | back(2) << 21 | back(3) << 42;
    splitmix64(splitmix64(seed ^ tokens) ^ context.len() as u64)
}

/// Computes the model's weights for the next token after `context`.
///
/// The candidates depend on the server seed, the context length and the last three tokens, so text varies along a
/// sequence while the model stays a pure function of the context (a continuation that re-sends earlier output as
/// its prompt sees exactly the distributions the first call saw). The end-of-turn logit grows with the number of
/// tokens since the last special token, so turns end after a few hundred tokens at temperature 1 while long
/// prompts that end in a chat template still get full-length answers; a context without a special token is plain
/// text, in no turn, and its end-of-turn logit stays at its least however long the text.
///
/// `turn` is where `context` stands in its turn ([`Turn::of`]); callers that extend a context token by token keep
/// it with [`Turn::then`] instead of rescanning.
// Inlined so the arrays it returns are built in the caller's frame, not copied out.
///
/// `policy` moves the nine weights by the offsets of the context's bucket (MODEL.md section 14); an all-zero policy
/// leaves them as they are.
#[inline(always)]
pub(crate) fn logits(
    seed: u64,
    tokenizer: &Tokenizer,
    context: &[u32],
    turn: Turn,
    policy: &Policy,
) -> Logits {
    debug_assert_eq!(turn, Turn::of(tokenizer, context));
    let h = context_hash(seed, context);
    let slots = tokenizer.slots();

    // One SplitMix64 stream per context supplies every random choice.
    let mut stream = h;
    let mut next = || {
        stream = stream.wrapping_add(GOLDEN);
        splitmix64(stream)
    };
    // Peakedness varies per context: with `flatness` at its least the first candidate takes most of the mass, near 1
    // the eight share it. Each weight is the one before times `flatness` and a jitter in [0.55, 1), so weights
    // fall strictly and the candidates are generated in sorted order; the least flatness keeps the last of them
    // above the tail (`TAIL_MARGIN`).
    let shape = next();
    let flatness = FLATNESS_MIN + FLATNESS_SPAN * unit(shape);
    let mut weight = 50.0 + 40.0 * (f64::from((shape & 0x7FF) as u32) / 2048.0);
    // Eight 21-bit jitters from three draws.
    let jitters = [next(), next(), next()];
    let mut weights = [0.0f64; EXPLICIT];
    for (k, slot) in weights[..CANDIDATES].iter_mut().enumerate() {
        *slot = weight;
        let jitter = f64::from(((jitters[k / 3] >> (21 * (k % 3))) & 0x1F_FFFF) as u32)
            / f64::from(1u32 << 21);
        weight *= flatness * (0.55 + 0.45 * jitter);
    }
    weights[CANDIDATES] = end_of_turn_weight(turn);
    let layout = next();
    let mut sorted = true;
    if let Some(factors) = policy.factors(layout) {
        for (w, f) in weights.iter_mut().zip(factors) {
            *w *= f;
        }
        sorted = false;
    }
    let ids = CandidateIds {
        stream: next(),
        rotation: (layout & 7) as u32,
        punctuation_rank: ((layout >> 3) % 10) as usize,
        punctuation: slots.punctuation[((layout >> 8) % PUNCTUATION.len() as u64) as usize],
        block: (slots.word_count / CANDIDATES as u32) & !1,
        first_word: slots.first_word,
        table: slots.table,
        im_end: slots.end_of_turn,
    };
    Logits {
        weights,
        ids,
        sorted,
        layout,
    }
}

/// Sorts explicit entries `(slot, weight)` into the order of MODEL.md section 5: descending weight, ties by
/// ascending id. With `sorted` (the base model's candidates, which fall strictly, and `<|im_end|>` last if present)
/// only the end-of-turn entry moves, up past every candidate it outweighs; otherwise an insertion sort of all of
/// them, which gives the same order when both apply.
#[inline(always)]
fn sort_explicit(entries: &mut [(usize, f64)], ids: &CandidateIds, sorted: bool) {
    let before =
        |a: (usize, f64), b: (usize, f64)| a.1 > b.1 || (a.1 == b.1 && ids.id(a.0) < ids.id(b.0));
    let n = entries.len();
    if !sorted && n == EXPLICIT {
        // The nine entries of an unmasked step, the common case under a policy: each entry's rank is the number
        // of heavier ones, counted without a data-dependent branch (a comparison sort's branches mispredict on
        // moved weights). Distinct weights give distinct ranks; equal ones share a rank and take the insertion
        // sort below, which orders them by id.
        let weights: [f64; EXPLICIT] = std::array::from_fn(|k| entries[k].1);
        let mut placed = [(0usize, 0.0f64); EXPLICIT];
        let mut seen = 0u32;
        for (k, &w) in weights.iter().enumerate() {
            let rank = weights.iter().map(|&v| usize::from(v > w)).sum::<usize>();
            seen |= 1 << rank;
            placed[rank] = entries[k];
        }
        if seen == (1 << EXPLICIT) - 1 {
            entries.copy_from_slice(&placed);
            return;
        }
    }
    if sorted {
        if n > 0 && entries[n - 1].0 == CANDIDATES {
            let mut at = n - 1;
            while at > 0 && before(entries[at], entries[at - 1]) {
                entries.swap(at - 1, at);
                at -= 1;
            }
        }
        return;
    }
    for i in 1..n {
        let mut at = i;
        while at > 0 && before(entries[at], entries[at - 1]) {
            entries.swap(at - 1, at);
            at -= 1;
        }
    }
}

impl Logits {
    /// The context's `layout` draw (MODEL.md section 4.3), which picks its bucket of a policy.
    pub(crate) fn layout(&self) -> u64 {
        self.layout
    }

    /// The draw of [`Distribution::pick`] for the plainest and most common step of a rollout: temperature 1,
    /// reported at temperature 1, nothing masked and no top-k / top-p / min-p filter. Returns the id and its
    /// probability `w / Z`, whose `ln` is [`Distribution::logprob_of`] (taken only when a logprob is reported).
    /// It does the same arithmetic in the same order (sorted order with `<|im_end|>` moved to its rank, the
    /// normaliser summed in that order, the draw walked down it) without building the distribution, so the id and
    /// the logprob are the same bits. A draw that lands in the uniform tail returns `None`, and the caller takes
    /// the general path for it (about one step in a hundred).
    #[inline(always)]
    pub(crate) fn pick_plain(&self, vocab_size: u32, u: f64) -> Option<(u32, f64)> {
        if !self.sorted {
            return self.pick_plain_moved(vocab_size, u);
        }
        let mut entries: [(usize, f64); EXPLICIT] =
            std::array::from_fn(|slot| (slot, self.weights[slot]));
        sort_explicit(&mut entries, &self.ids, self.sorted);
        let tail_count = f64::from(vocab_size - EXPLICIT as u32);
        let z = entries.iter().map(|e| e.1).sum::<f64>() + tail_count * TAIL_WEIGHT;
        let mut target = u * z;
        for &(slot, weight) in &entries {
            if target < weight {
                return Some((self.ids.id(slot), weight / z));
            }
            target -= weight;
        }
        None
    }
}

impl Logits {
    /// [`Logits::pick_plain`] for weights a policy moved, in any order: the weights alone go through a sorting
    /// network of selects (no data-dependent branch), the normaliser is summed and the draw walked in that
    /// order, and only the drawn weight's slot is looked up. Equal weights are ordered by id (section 5), which
    /// the values alone cannot tell; but tied values are the same numbers in either order, so the normaliser and
    /// the walk come out the same, and only a draw that lands on a tied weight is left to the general path
    /// (`None`), as is a draw in the tail.
    #[inline(always)]
    fn pick_plain_moved(&self, vocab_size: u32, u: f64) -> Option<(u32, f64)> {
        let sorted = sort_nine_descending(self.weights);
        let tail_count = f64::from(vocab_size - EXPLICIT as u32);
        let z = sorted.iter().sum::<f64>() + tail_count * TAIL_WEIGHT;
        let mut target = u * z;
        for &weight in &sorted {
            if target < weight {
                // The slots that hold the drawn weight, found without a branch on where they stand.
                let at = self
                    .weights
                    .iter()
                    .enumerate()
                    .fold(0u32, |at, (k, &w)| at | (u32::from(w == weight) << k));
                if !at.is_power_of_two() {
                    return None;
                }
                return Some((self.ids.id(at.trailing_zeros() as usize), weight / z));
            }
            target -= weight;
        }
        None
    }
}

/// Nine values in descending order, by a sorting network of 25 comparators in 7 layers, the least of both for nine
/// inputs (<https://bertdobbelaere.github.io/sorting_networks.html#N9L25D7>), made of selects: no branch depends on
/// the data, and no value waits on more than seven comparators. Checked on every input of zeros and ones (which
/// suffices, by the 0-1 principle) by `the_sorting_network_sorts_every_zero_one_input`.
#[inline(always)]
fn sort_nine_descending(values: [f64; EXPLICIT]) -> [f64; EXPLICIT] {
    // Unrolled over nine locals, so the network runs in registers (a loop over the array's indices goes
    // through memory at every comparator).
    let [
        mut w0,
        mut w1,
        mut w2,
        mut w3,
        mut w4,
        mut w5,
        mut w6,
        mut w7,
        mut w8,
    ] = values;
    macro_rules! network {
        ($(($a:ident, $b:ident)),*) => {$(
            let (high, low) = if $b > $a { ($b, $a) } else { ($a, $b) };
            $a = high;
            $b = low;
        )*};
    }
    network!(
        (w0, w3),
        (w1, w7),
        (w2, w5),
        (w4, w8),
        (w0, w7),
        (w2, w4),
        (w3, w8),
        (w5, w6),
        (w0, w2),
        (w1, w3),
        (w4, w5),
        (w7, w8),
        (w1, w4),
        (w3, w6),
        (w5, w7),
        (w0, w1),
        (w2, w4),
        (w3, w5),
        (w6, w8),
        (w2, w3),
        (w4, w5),
        (w6, w7),
        (w1, w2),
        (w3, w4),
        (w5, w6)
    );
    [w0, w1, w2, w3, w4, w5, w6, w7, w8]
}

/// Where a context stands in its turn: the number of tokens after its last special token, or no turn at all when it
/// holds no special token (a completion's prompt, raw `input_ids`, a base model's text), since the turn clock
/// starts at a special token. A pure function of the context, as the model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Turn(Option<usize>);

impl Turn {
    /// The turn of `context`, read from its end.
    pub(crate) fn of(tokenizer: &Tokenizer, context: &[u32]) -> Turn {
        let after = context
            .iter()
            .rev()
            .take_while(|&&id| !tokenizer.is_special(id))
            .count();
        Turn((after < context.len()).then_some(after))
    }

    /// The turn of the context extended by `id`.
    pub(crate) fn then(self, tokenizer: &Tokenizer, id: u32) -> Turn {
        match tokenizer.is_special(id) {
            true => Turn(Some(0)),
            false => Turn(self.0.map(|t| t + 1)),
        }
    }

    /// `t` of MODEL.md section 4.2: the tokens since the turn began, 0 outside any turn.
    fn length(self) -> usize {
        self.0.unwrap_or(0)
    }
}

/// The weight of `<|im_end|>` `t` tokens into a turn: `exp(min(-6 + 0.05 * t, 5))`, which reaches its cap at 220
/// tokens, above every candidate's weight (at most 90): even a greedy turn ends. Outside a turn `t` is 0. The
/// values are tabulated once, since every step needs one.
fn end_of_turn_weight(turn: Turn) -> f64 {
    static TABLE: std::sync::LazyLock<[f64; 221]> = std::sync::LazyLock::new(|| {
        std::array::from_fn(|n| (-6.0 + 0.05 * n as f64).min(5.0).exp())
    });
    TABLE[turn.length().min(220)]
}

/// The distribution over the whole vocabulary at one context and temperature, with some ids masked out.
#[derive(Clone, Debug)]
pub struct Distribution<'m> {
    /// Explicit entries that are not masked, as `(slot, weight)`, sorted by descending weight then ascending id.
    /// A weight is an unnormalised probability: `exp(logit / T)` up to a common factor (which may underflow to 0
    /// for an entry far below the top; its logprob is computed in log space and stays finite).
    explicit: [(usize, f64); EXPLICIT],
    n_explicit: usize,
    ids: CandidateIds,
    /// The weight every tail id has, in the same units.
    tail_weight: f64,
    /// Ids in the tail: every id that is neither explicit nor masked.
    tail_count: u64,
    masked: &'m [u32],
    /// Sum of all weights: the normaliser.
    z: f64,
    /// How logprobs are computed from the weights.
    log: LogSpace,
}

/// How a [`Distribution`] turns a weight into a logprob.
#[derive(Clone, Copy, Debug)]
enum LogSpace {
    /// Temperature 1: weights are the model's own and no logprob can underflow, so `ln(w / Z)`.
    Unit,
    /// Any other temperature: `l / T - log Z`, from the scaled logits of the explicit entries (in the order of
    /// `explicit`), the scaled tail logit, and `log Z = shift + ln(Z)`.
    Scaled {
        logits: [f64; EXPLICIT],
        tail_logit: f64,
        /// The largest scaled logit, subtracted from every scaled logit to make the weights.
        shift: f64,
        log_z: f64,
    },
}

impl<'m> Distribution<'m> {
    /// Builds the distribution `softmax(logits / temperature)` with the ids in `masked` (sorted, deduplicated, all
    /// in the vocabulary) given probability zero.
    #[inline(always)]
    pub(crate) fn new(
        logits: &Logits,
        vocab_size: u32,
        temperature: f64,
        masked: &'m [u32],
    ) -> Distribution<'m> {
        debug_assert!(masked.windows(2).all(|w| w[0] < w[1]));
        let ids = logits.ids;
        let mut explicit: [(usize, f64); EXPLICIT] =
            std::array::from_fn(|slot| (slot, logits.weights[slot]));
        let mut n = EXPLICIT;
        if !masked.is_empty() {
            n = 0;
            for i in 0..EXPLICIT {
                if masked.binary_search(&ids.id(explicit[i].0)).is_err() {
                    explicit[n] = explicit[i];
                    n += 1;
                }
            }
        }
        sort_explicit(&mut explicit[..n], &ids, logits.sorted);
        let tail_count = u64::from(vocab_size) - n as u64 - masked.len() as u64;
        let mut tail_weight = TAIL_WEIGHT;
        let mut scaled_logits = None;
        if temperature != 1.0 {
            // Scaled logits `ln(w) / T`, shifted by the largest so no weight overflows at small T; a weight that
            // underflows is below e^-745 of the top and cannot be drawn, and its logprob comes from its logit.
            let inv_t = 1.0 / temperature;
            let tail_logit = TAIL_LOGIT * inv_t;
            let mut scaled = [0.0f64; EXPLICIT];
            for (x, e) in scaled.iter_mut().zip(&explicit[..n]) {
                *x = e.1.ln() * inv_t;
            }
            let shift = if n > 0 { scaled[0] } else { tail_logit };
            for (e, &x) in explicit[..n].iter_mut().zip(&scaled) {
                e.1 = (x - shift).exp();
            }
            tail_weight = (tail_logit - shift).exp();
            scaled_logits = Some((scaled, tail_logit, shift));
        }
        let z = explicit[..n].iter().map(|e| e.1).sum::<f64>() + tail_count as f64 * tail_weight;
        let log = match scaled_logits {
            None => LogSpace::Unit,
            // The largest weight is exp(0) = 1, so `z >= 1` and its logarithm is finite.
            Some((logits, tail_logit, shift)) => LogSpace::Scaled {
                logits,
                tail_logit,
                shift,
                log_z: shift + z.ln(),
            },
        };
        Distribution {
            explicit,
            n_explicit: n,
            ids,
            tail_weight,
            tail_count,
            masked,
            z,
            log,
        }
    }

    /// The log-probability of the explicit entry at `position` of the sorted order.
    fn explicit_logprob(&self, position: usize) -> f64 {
        match &self.log {
            LogSpace::Unit => (self.explicit[position].1 / self.z).ln(),
            LogSpace::Scaled { logits, log_z, .. } => logits[position] - log_z,
        }
    }

    fn explicit(&self) -> &[(usize, f64)] {
        &self.explicit[..self.n_explicit]
    }

    /// The logprob of each explicit slot (`-inf` for a masked one), indexed by slot: what the gradient of
    /// MODEL.md section 14.3 needs.
    pub(crate) fn slot_logprobs(&self) -> [f64; EXPLICIT] {
        let mut out = [f64::NEG_INFINITY; EXPLICIT];
        for position in 0..self.n_explicit {
            out[self.explicit[position].0] = self.explicit_logprob(position);
        }
        out
    }

    /// The slot whose id is `id`, if it is an unmasked explicit entry.
    pub(crate) fn slot_of(&self, id: u32) -> Option<usize> {
        (0..self.n_explicit)
            .find(|&p| self.id_at(p) == id)
            .map(|p| self.explicit[p].0)
    }

    /// The id at a position of the sorted explicit entries.
    fn id_at(&self, position: usize) -> u32 {
        self.ids.id(self.explicit[position].0)
    }

    /// The natural-log probability of `id` (`-inf` for a masked id or one outside the vocabulary).
    pub fn logprob(&self, id: u32) -> f64 {
        if let Some(position) = (0..self.n_explicit).find(|&p| self.id_at(p) == id) {
            return self.explicit_logprob(position);
        }
        if self.masked.binary_search(&id).is_ok() || u64::from(id) >= self.vocab_size() {
            return f64::NEG_INFINITY;
        }
        self.tail_logprob()
    }

    fn vocab_size(&self) -> u64 {
        self.tail_count + self.n_explicit as u64 + self.masked.len() as u64
    }

    /// The log-probability each tail id has.
    pub fn tail_logprob(&self) -> f64 {
        match &self.log {
            LogSpace::Unit => (self.tail_weight / self.z).ln(),
            LogSpace::Scaled {
                tail_logit, log_z, ..
            } => tail_logit - log_z,
        }
    }

    /// The `rank`-th id of the tail in ascending id order.
    fn tail_id(&self, rank: u64) -> u32 {
        // The ids that are not in the tail, sorted: the explicit ones and the masked ones.
        let mut not_tail = [u32::MAX; EXPLICIT];
        for (position, slot) in not_tail[..self.n_explicit].iter_mut().enumerate() {
            *slot = self.id_at(position);
        }
        not_tail[..self.n_explicit].sort_unstable();
        let mut explicit = not_tail[..self.n_explicit].iter().peekable();
        let mut masked = self.masked.iter().peekable();
        // Walk them in ascending order, stepping past each one at or below the candidate id.
        let mut id = rank;
        loop {
            let next = match (masked.peek(), explicit.peek()) {
                (Some(&&m), Some(&&e)) => m.min(e),
                (Some(&&m), None) => m,
                (None, Some(&&e)) => e,
                (None, None) => break,
            };
            if u64::from(next) > id {
                break;
            }
            id += 1;
            if masked.peek() == Some(&&next) {
                masked.next();
            } else {
                explicit.next();
            }
        }
        id as u32
    }

    /// The `n` most probable ids with their log-probabilities, in descending order (ties in ascending id order),
    /// appended to `out`. Fewer than `n` only if the vocabulary has fewer unmasked ids.
    pub fn top(&self, n: usize, out: &mut Vec<(u32, f64)>) {
        for position in 0..n.min(self.n_explicit) {
            out.push((self.id_at(position), self.explicit_logprob(position)));
        }
        let from_tail = (n.saturating_sub(self.n_explicit) as u64).min(self.tail_count);
        let lp = self.tail_logprob();
        for rank in 0..from_tail {
            out.push((self.tail_id(rank), lp));
        }
    }

    /// How many ids of the sorted order survive the filters, as SGLang applies them to the sorted probabilities:
    /// the first `top_k`; those whose cumulative probability *before* them is at most `top_p`; those with
    /// probability at least `min_p` times the largest. Each filter keeps a prefix, so together they keep one.
    fn kept(&self, top_k: Option<u32>, top_p: f64, min_p: f64) -> u64 {
        let total = self.n_explicit as u64 + self.tail_count;
        let mut keep = top_k.map_or(total, |k| u64::from(k).min(total));
        let weights = self.explicit().iter().map(|e| e.1);
        let tail_p = self.tail_weight / self.z;
        if top_p < 1.0 {
            let mut before = 0.0;
            let mut n = 0u64;
            for w in weights.clone() {
                if before > top_p {
                    break;
                }
                n += 1;
                before += w / self.z;
            }
            if n == self.n_explicit as u64 && before <= top_p && tail_p > 0.0 {
                // Tail id j has `before + j * tail_p` in front of it.
                let j = ((top_p - before) / tail_p).floor();
                n += (j as u64).saturating_add(1).min(self.tail_count);
            }
            keep = keep.min(n);
        }
        if min_p > 0.0 {
            let max_w = self.explicit().first().map_or(self.tail_weight, |e| e.1);
            let threshold = min_p * max_w;
            let n = weights.filter(|&w| w >= threshold).count() as u64;
            let n = if n == self.n_explicit as u64 && self.tail_weight >= threshold {
                n + self.tail_count
            } else {
                n
            };
            keep = keep.min(n);
        }
        keep.max(1)
    }

    /// Draws an id from the distribution restricted to what the filters keep and renormalised, using the uniform
    /// number `u` in `[0, 1)`.
    pub fn sample(&self, top_k: Option<u32>, top_p: f64, min_p: f64, u: f64) -> u32 {
        self.pick(top_k, top_p, min_p, u).id
    }

    /// [`Distribution::sample`], also saying where the id sits, so that its logprob needs no search.
    pub(crate) fn pick(&self, top_k: Option<u32>, top_p: f64, min_p: f64, u: f64) -> Pick {
        let keep = self.kept(top_k, top_p, min_p);
        let (from_explicit, from_tail, kept_weight) = self.kept_split(keep);
        let kept = &self.explicit[..from_explicit];
        let mut target = u * kept_weight;
        for (position, &(_, w)) in kept.iter().enumerate() {
            if target < w {
                return Pick {
                    id: self.id_at(position),
                    position: Some(position),
                };
            }
            target -= w;
        }
        if from_tail == 0 || self.tail_weight == 0.0 {
            // Rounding left a sliver past the last kept explicit id, or the kept tail has no weight at all (it lies
            // more than e^745 below the top at a small temperature).
            let position = from_explicit - 1;
            return Pick {
                id: self.id_at(position),
                position: Some(position),
            };
        }
        let rank = ((target / self.tail_weight) as u64).min(from_tail - 1);
        Pick {
            id: self.tail_id(rank),
            position: None,
        }
    }

    /// The first `keep` ids of the sorted order as explicit entries and tail ids, and their total weight: `Z` when
    /// they are the whole order (section 7's `total`).
    fn kept_split(&self, keep: u64) -> (usize, u64, f64) {
        let from_explicit = (keep as usize).min(self.n_explicit);
        let from_tail = keep - from_explicit as u64;
        let total = if from_explicit == self.n_explicit && from_tail == self.tail_count {
            self.z
        } else {
            self.explicit[..from_explicit]
                .iter()
                .map(|e| e.1)
                .sum::<f64>()
                + from_tail as f64 * self.tail_weight
        };
        (from_explicit, from_tail, total)
    }

    /// The sampler's support under the filters: the ids the draw of [`Distribution::pick`] chooses from that have
    /// a positive weight, in the sorted order (SGLang's `return_sampling_mask`, MODEL.md section 7.1). Appends
    /// them to `ids` and their logprobs under the distribution renormalised over them to `logprobs`, and returns
    /// the logprob of `chosen` under it (`-inf` if `chosen` is not in the support).
    pub(crate) fn support(
        &self,
        (top_k, top_p, min_p): (Option<u32>, f64, f64),
        chosen: u32,
        ids: &mut Vec<u32>,
        logprobs: &mut Vec<f64>,
    ) -> f64 {
        let keep = self.kept(top_k, top_p, min_p);
        let (from_explicit, from_tail, total) = self.kept_split(keep);
        // `ln(v / total)`, from the scaled logit away from temperature 1 so that it stays finite.
        let renormalised = |position: Option<usize>| match &self.log {
            LogSpace::Unit => {
                let v = position.map_or(self.tail_weight, |p| self.explicit[p].1);
                (v / total).ln()
            }
            LogSpace::Scaled {
                logits,
                tail_logit,
                shift,
                ..
            } => position.map_or(*tail_logit, |p| logits[p]) - (shift + total.ln()),
        };
        let mut selected = f64::NEG_INFINITY;
        // Weights fall along the order, so the entries with a positive weight are a prefix of the kept ones.
        for position in (0..from_explicit).take_while(|&p| self.explicit[p].1 > 0.0) {
            let (id, lp) = (self.id_at(position), renormalised(Some(position)));
            if id == chosen {
                selected = lp;
            }
            ids.push(id);
            logprobs.push(lp);
        }
        if self.tail_weight > 0.0 && from_tail > 0 {
            let lp = renormalised(None);
            for rank in 0..from_tail {
                let id = self.tail_id(rank);
                if id == chosen {
                    selected = lp;
                }
                ids.push(id);
                logprobs.push(lp);
            }
        }
        selected
    }

    /// The kept prefix of the sorted order under the filters, and this distribution renormalised over it: slime's
    /// top-p replay (`sglang-top_p.patch`, MODEL.md section 7.2).
    pub(crate) fn kept_prefix(
        &self,
        (top_k, top_p, min_p): (Option<u32>, f64, f64),
    ) -> Kept<'_, 'm> {
        let keep = self.kept(top_k, top_p, min_p);
        let (from_explicit, from_tail, total) = self.kept_split(keep);
        let log_total = match &self.log {
            LogSpace::Unit => total.ln(),
            LogSpace::Scaled { shift, .. } => shift + total.ln(),
        };
        Kept {
            dist: self,
            from_explicit,
            from_tail,
            total,
            log_total,
        }
    }

    /// The ids that are not in the tail (the unmasked explicit ones and the masked ones), sorted.
    fn not_tail(&self) -> Vec<u32> {
        let mut not_tail: Vec<u32> = (0..self.n_explicit).map(|p| self.id_at(p)).collect();
        not_tail.extend_from_slice(self.masked);
        not_tail.sort_unstable();
        not_tail
    }

    /// The rank of `id` among the tail ids (ascending), `None` if it is not a tail id.
    fn tail_rank(&self, id: u32) -> Option<u64> {
        if u64::from(id) >= self.vocab_size() {
            return None;
        }
        let not_tail = self.not_tail();
        match not_tail.binary_search(&id) {
            Ok(_) => None,
            Err(below) => Some(u64::from(id) - below as u64),
        }
    }

    /// The logprob of a pick made from this distribution or from one of the same context and mask at another
    /// temperature (the order of the explicit entries is the same at every temperature).
    pub(crate) fn logprob_of(&self, pick: &Pick) -> f64 {
        match pick.position {
            Some(position) => self.explicit_logprob(position),
            None => self.logprob(pick.id),
        }
    }
}

/// The prefix of a [`Distribution`]'s sorted order that the filters keep, with the distribution renormalised over
/// it: what slime's patched sampler reports for a request with `custom_params.return_top_p_token_ids`
/// (`_top_p_keep_mask_sorted` and `renorm_logprob_over_top_p` in its `sglang-top_p.patch`, MODEL.md section 7.2).
/// Unlike the sampling mask's support, the prefix keeps ids whose weight underflowed to 0, as the patch's rank
/// and cumulative tests do.
pub(crate) struct Kept<'d, 'm> {
    dist: &'d Distribution<'m>,
    from_explicit: usize,
    from_tail: u64,
    /// The kept weights' sum, in the distribution's units (section 7's `total`).
    total: f64,
    /// `ln(total)` at temperature 1, `shift + ln(total)` at any other.
    log_total: f64,
}

impl Kept<'_, '_> {
    /// Appends the kept ids in the sorted order: the kept explicit entries, then the kept tail ids ascending.
    pub(crate) fn ids(&self, out: &mut Vec<u32>) {
        let d = self.dist;
        out.extend((0..self.from_explicit).map(|p| d.id_at(p)));
        if self.from_tail == 0 {
            return;
        }
        // One walk up the ids, stepping over those that are not in the tail.
        let not_tail = d.not_tail();
        let mut skip = not_tail.iter().peekable();
        let mut id = 0u32;
        for _ in 0..self.from_tail {
            while skip.next_if(|&&n| n == id).is_some() {
                id += 1;
            }
            out.push(id);
            id += 1;
        }
    }

    /// The renormalised logprob of the explicit entry at `position`, or of a tail id for `None`.
    fn at(&self, position: Option<usize>) -> f64 {
        let d = self.dist;
        match &d.log {
            LogSpace::Unit => {
                let v = position.map_or(d.tail_weight, |p| d.explicit[p].1);
                (v / self.total).ln()
            }
            LogSpace::Scaled {
                logits, tail_logit, ..
            } => position.map_or(*tail_logit, |p| logits[p]) - self.log_total,
        }
    }

    /// The renormalised logprob of `id`: `-inf` unless it is kept.
    pub(crate) fn logprob(&self, id: u32) -> f64 {
        let d = self.dist;
        if let Some(position) = (0..d.n_explicit).find(|&p| d.id_at(p) == id) {
            return match position < self.from_explicit {
                true => self.at(Some(position)),
                false => f64::NEG_INFINITY,
            };
        }
        match d.tail_rank(id) {
            Some(rank) if rank < self.from_tail => self.at(None),
            _ => f64::NEG_INFINITY,
        }
    }

    /// The renormalised logprob of a pick made from the distribution with the same filters: always kept.
    pub(crate) fn logprob_of(&self, pick: &Pick) -> f64 {
        match pick.position {
            Some(position) => self.at(Some(position)),
            None => self.logprob(pick.id),
        }
    }

    /// [`Distribution::top`] with the renormalised logprobs: the sorted order's first `n` ids, `-inf` past the
    /// kept prefix.
    pub(crate) fn top(&self, n: usize, out: &mut Vec<(u32, f64)>) {
        let start = out.len();
        self.dist.top(n, out);
        for (rank, entry) in out[start..].iter_mut().enumerate() {
            entry.1 = match rank < self.from_explicit {
                true => self.at(Some(rank)),
                false
                    if rank >= self.dist.n_explicit
                        && ((rank - self.dist.n_explicit) as u64) < self.from_tail =>
                {
                    self.at(None)
                }
                false => f64::NEG_INFINITY,
            };
        }
    }
}

/// A sampled id and its position among the explicit entries (`None` for a tail id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pick {
    pub(crate) id: u32,
    position: Option<usize>,
}

impl Pick {
    /// An id chosen outside the sampler (a forced token): its logprob is looked up by id.
    pub(crate) fn forced(id: u32) -> Pick {
        Pick { id, position: None }
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::Policy;
    use super::*;

    /// The base model's logits: every test here but the policy's runs with all-zero weights.
    fn logits(seed: u64, t: &Tokenizer, context: &[u32], turn: Turn) -> Logits {
        super::logits(seed, t, context, turn, &Policy::zero(8))
    }

    /// A policy of `buckets` rows drawn from `h`: offsets spread over and beyond the clamped range, with some rows
    /// left all zero.
    fn random_policy(h: u64, buckets: usize) -> Policy {
        let rows = (0..buckets)
            .map(|b| {
                let row = mix(h, b as u64);
                if row.is_multiple_of(4) {
                    return [0.0; EXPLICIT];
                }
                std::array::from_fn(|s| (unit(mix(row, s as u64)) * 22.0 - 4.0) as f32)
            })
            .collect();
        Policy::new(rows).unwrap()
    }

    /// Under a policy the order, the normaliser and the fast path follow the moved weights (MODEL.md section 14):
    /// the top list is the nine explicit entries sorted by descending logprob (ties by id) above the tail, the
    /// logprobs sum to one, a logprob moves by its slot's clamped offset (up to the shared normaliser), and
    /// `pick_plain` draws what the general path draws, to the bit.
    #[test]
    fn a_policy_moves_every_path_of_the_distribution_alike() {
        let t = Tokenizer::new(151_936);
        let vocab = t.vocab_size();
        let base = Policy::zero(8);
        let mut reordered = 0;
        for case in 0..400u64 {
            let h = mix(0x901, case);
            let buckets = [1usize, 3, 8, 16][(h % 4) as usize];
            let policy = random_policy(h >> 2, buckets);
            let context: Vec<u32> = (0..1 + (h >> 9) % 12)
                .map(|i| (mix(h, i) % 150_000) as u32)
                .collect();
            let turn = Turn::of(&t, &context);
            let moved = super::logits(h >> 5, &t, &context, turn, &policy);
            let plain = super::logits(h >> 5, &t, &context, turn, &base);
            let bucket = policy.bucket(moved.layout);
            reordered += usize::from(
                moved
                    .weights
                    .windows(2)
                    .take(CANDIDATES - 1)
                    .any(|w| w[0] < w[1]),
            );
            for temperature in [1.0, 0.6, 1.7] {
                let d = Distribution::new(&moved, vocab, temperature, &[]);
                let mut top = Vec::new();
                d.top(EXPLICIT + 2, &mut top);
                let explicit: Vec<u32> = (0..EXPLICIT).map(|s| moved.ids.id(s)).collect();
                assert!(
                    top[..EXPLICIT].iter().all(|e| explicit.contains(&e.0)),
                    "case {case}"
                );
                assert!(
                    top.windows(2)
                        .all(|w| w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0)),
                    "case {case}: {top:?}"
                );
                let total = top[..EXPLICIT].iter().map(|e| e.1.exp()).sum::<f64>()
                    + (vocab - EXPLICIT as u32) as f64 * d.tail_logprob().exp();
                assert!((total - 1.0).abs() < 1e-12, "case {case}: {total}");
                let base_d = Distribution::new(&plain, vocab, temperature, &[]);
                let shift = |s: usize| d.logprob(explicit[s]) - base_d.logprob(explicit[s]);
                for s in 0..EXPLICIT {
                    let theta = f64::from(policy.offsets()[bucket][s]).clamp(-2.0, 16.0);
                    let want = (theta - f64::from(policy.offsets()[bucket][0]).clamp(-2.0, 16.0))
                        / temperature;
                    let got = shift(s) - shift(0);
                    assert!(
                        (got - want).abs() < 1e-9 * want.abs().max(1.0),
                        "case {case} slot {s}: {got} vs {want}"
                    );
                }
            }
            for k in 0..64 {
                plain_pick_is_general(&moved, vocab, unit(mix(h, 1000 + k)), case);
            }
        }
        assert!(
            reordered > 100,
            "offsets reorder the candidates in {reordered} of 400 contexts"
        );
    }

    /// The network sorts any input if it sorts every input of zeros and ones (Knuth's 0-1 principle).
    #[test]
    fn the_sorting_network_sorts_every_zero_one_input() {
        for bits in 0u32..1 << EXPLICIT {
            let v: [f64; EXPLICIT] = std::array::from_fn(|k| f64::from((bits >> k) & 1));
            let sorted = sort_nine_descending(v);
            assert!(
                sorted.windows(2).all(|w| w[0] >= w[1]),
                "{bits:09b}: {sorted:?}"
            );
        }
    }

    /// Equal weights keep the order by id (MODEL.md section 5) on the ranking path too: every pattern of equal
    /// and distinct weights over the nine entries.
    #[test]
    fn equal_weights_are_ordered_by_id() {
        let t = Tokenizer::new(151_936);
        let context = [5u32, 6, 7];
        let l = logits(3, &t, &context, Turn::of(&t, &context));
        for pattern in 0u32..64 {
            let mut entries: [(usize, f64); EXPLICIT] =
                std::array::from_fn(|s| (s, f64::from((pattern >> (s % 6)) & 1)));
            sort_explicit(&mut entries, &l.ids, false);
            let key = |e: &(usize, f64)| (std::cmp::Reverse(e.1.to_bits()), l.ids.id(e.0));
            assert!(
                entries.windows(2).all(|w| key(&w[0]) < key(&w[1])),
                "{pattern}: {entries:?}"
            );
        }
    }

    /// Under a policy, equal weights are ordered by id (section 5), which the plain path's sort of values cannot
    /// see: a draw that lands on a tied weight is left to the general path, and every other draw, ties elsewhere
    /// or not, is the general path's to the bit. Every pattern of three values over the nine slots.
    #[test]
    fn a_draw_beside_tied_moved_weights_is_the_general_draw() {
        let t = Tokenizer::new(151_936);
        let context = [5u32, 6, 7];
        let base = logits(3, &t, &context, Turn::of(&t, &context));
        let vocab = t.vocab_size();
        let (mut beside_ties, mut on_ties) = (0, 0);
        for pattern in 0u32..3u32.pow(EXPLICIT as u32) {
            let weights: [f64; EXPLICIT] = std::array::from_fn(|s| {
                [40.0, 20.0, 10.0][(pattern / 3u32.pow(s as u32) % 3) as usize]
            });
            let l = Logits {
                weights,
                sorted: false,
                ..base.clone()
            };
            let d = Distribution::new(&l, vocab, 1.0, &[]);
            for u in [0.05, 0.3, 0.6, 0.95] {
                let general = d.pick(None, 1.0, 0.0, u);
                let Some(position) = general.position else {
                    continue;
                };
                let drawn = d.explicit()[position].1;
                match l.pick_plain(vocab, u) {
                    Some((id, p)) => {
                        assert_eq!(id, general.id, "{pattern} at {u}");
                        assert_eq!(p.ln().to_bits(), d.logprob_of(&general).to_bits());
                        beside_ties += 1;
                    }
                    None => {
                        let holders = weights.iter().filter(|&&w| w == drawn).count();
                        assert!(
                            holders > 1,
                            "{pattern} at {u}: a draw on a weight of its own was left"
                        );
                        on_ties += 1;
                    }
                }
            }
        }
        // Nine slots of three values always tie somewhere, so every plain draw here had ties beside it.
        assert!(
            beside_ties > 100 && on_ties > 100,
            "{beside_ties} plain, {on_ties} left"
        );
    }

    /// A bucket whose offsets are all zero, or an all-zero policy, gives the base model's weights and order bit for
    /// bit, and marks them sorted so the default path stays the base model's.
    #[test]
    fn zero_offsets_leave_the_weights_and_the_shortcut_alone() {
        let t = Tokenizer::new(151_936);
        for case in 0..200u64 {
            let context = [(case * 7919 % 150_000) as u32, 5, 6];
            let turn = Turn::of(&t, &context);
            let base = super::logits(case, &t, &context, turn, &Policy::zero(8));
            let mut rows = vec![[0.0f32; EXPLICIT]; 8];
            rows[((base.layout + 1) % 8) as usize] = [1.5; EXPLICIT];
            let elsewhere = super::logits(case, &t, &context, turn, &Policy::new(rows).unwrap());
            for l in [&base, &elsewhere] {
                assert!(l.sorted);
                assert_eq!(l.weights.map(f64::to_bits), base.weights.map(f64::to_bits));
            }
        }
    }

    fn setup(context: &[u32]) -> (Tokenizer, Logits) {
        let t = Tokenizer::new(151_936);
        let l = logits(7, &t, context, Turn::of(&t, context));
        assert_eq!(TAIL_WEIGHT, TAIL_LOGIT.exp());
        (t, l)
    }

    #[test]
    fn probabilities_sum_to_one_at_any_temperature_and_mask() {
        let (t, l) = setup(&[1, 2, 3]);
        let masked = [5, t.end_of_turn_id()];
        for temp in [1e-5, 0.01, 0.1, 0.7, 1.0, 2.0, 10.0] {
            for m in [&[][..], &masked[..]] {
                let d = Distribution::new(&l, t.vocab_size(), temp, m);
                // Id by id, through the same `logprob` that the server reports.
                let total: f64 = (0..t.vocab_size()).map(|id| d.logprob(id).exp()).sum();
                assert!((total - 1.0).abs() < 1e-9, "T={temp}: {total}");
                for &id in m {
                    assert_eq!(d.logprob(id), f64::NEG_INFINITY);
                }
                assert_eq!(d.logprob(t.vocab_size()), f64::NEG_INFINITY);
            }
        }
    }

    /// The worked example of `MODEL.md` section 11, whose numbers were computed from the document, not from this
    /// code: seed 0, `encode("Hello world")`, T = 0.7. The document fixes the order of every operation, so the
    /// values agree to the bit.
    /// `Logits::pick_plain` skips building the distribution; it must draw the same id with the same logprob bits
    /// as the general path wherever it answers, and leave exactly the tail draws to it. Contexts, seeds and
    /// draws from a hash, the smallest vocabulary among them (where the tail is likeliest), and contexts that
    /// end a turn (where `<|im_end|>` outweighs every candidate) as well as long ones (where it sits mid-list).
    /// Checks [`Logits::pick_plain`] at `u` against the general path: the same id and logprob bits where it
    /// answers, and only a tail draw left to the general path. Returns whether the draw was left.
    fn plain_pick_is_general(l: &Logits, vocab: u32, u: f64, case: u64) -> bool {
        let d = Distribution::new(l, vocab, 1.0, &[]);
        let general = d.pick(None, 1.0, 0.0, u);
        match l.pick_plain(vocab, u) {
            Some((id, p)) => {
                assert_eq!(id, general.id, "case {case}");
                assert_eq!(
                    p.ln().to_bits(),
                    d.logprob_of(&general).to_bits(),
                    "case {case}"
                );
                false
            }
            None => {
                assert_eq!(
                    general.position, None,
                    "case {case}: an explicit draw was left"
                );
                true
            }
        }
    }

    #[test]
    fn the_plain_pick_is_the_general_pick_bit_for_bit() {
        let mut tails = 0;
        use crate::model::{MAX_VOCAB_SIZE, MIN_VOCAB_SIZE};
        for (n, vocab) in [MIN_VOCAB_SIZE, 151_936, MAX_VOCAB_SIZE]
            .into_iter()
            .enumerate()
        {
            let t = Tokenizer::new(vocab);
            for case in 0..20_000u64 {
                let h = mix(n as u64, case);
                let len = (h % 300) as usize;
                let mut context: Vec<u32> = (0..len as u64)
                    .map(|i| (mix(h, i) % u64::from(vocab - 3)) as u32)
                    .collect();
                // A whole turn (the end of turn leads late in it), a turn just begun, and plain text.
                match case % 3 {
                    0 => context.insert(0, t.end_of_turn_id()),
                    1 => context.push(t.end_of_turn_id()),
                    _ => {}
                }
                let l = logits(h >> 7, &t, &context, Turn::of(&t, &context));
                tails += usize::from(plain_pick_is_general(&l, vocab, unit(mix(h, 99)), case));
            }
        }
        assert!(tails > 0, "no draw reached the tail");
    }

    /// `<|im_end|>`'s weight outgrows every candidate's by 210 tokens into a turn, so greedy turns end; before
    /// 160 tokens it never leads (MODEL.md section 4.2). Over contexts from a hash (a special id, then the turn),
    /// at every turn length from 0 to 260.
    #[test]
    fn the_end_of_turn_leads_the_sorted_order_late_in_every_turn_and_never_early() {
        let t = Tokenizer::new(151_936);
        let mut leads_between = 0;
        for case in 0..200u64 {
            let h = mix(0xE07, case);
            let mut context = vec![t.end_of_turn_id()];
            for since in 0..=260usize {
                if since > 0 {
                    context.push((mix(h, since as u64) % 150_000) as u32);
                }
                let l = logits(h >> 3, &t, &context, Turn::of(&t, &context));
                let mut first = Vec::new();
                Distribution::new(&l, t.vocab_size(), 1.0, &[]).top(1, &mut first);
                let leads = first[0].0 == t.end_of_turn_id();
                match since {
                    0..160 => assert!(!leads, "case {case}: it leads at {since}"),
                    210.. => assert!(leads, "case {case}: it does not lead at {since}"),
                    _ => leads_between += usize::from(leads),
                }
            }
        }
        assert!(
            leads_between > 0,
            "between 160 and 210 it leads where the candidates are light"
        );
    }

    /// Plain text is in no turn: however long a context without a special id, `<|im_end|>` keeps the weight
    /// `exp(-6)` it has right after a special id (MODEL.md section 4.2), so a long completion prompt is answered as
    /// a short one is; the first special id starts the clock.
    #[test]
    fn plain_text_keeps_the_least_end_of_turn_weight_at_any_length() {
        let t = Tokenizer::new(151_936);
        let least = (-6.0f64).exp();
        let mut context = Vec::new();
        for len in 1..=1_000u64 {
            context.push((mix(0x9A1, len) % 150_000) as u32);
            assert_eq!(Turn::of(&t, &context), Turn(None));
            let l = logits(3, &t, &context, Turn::of(&t, &context));
            assert_eq!(l.weights[CANDIDATES], least, "at {len} plain tokens");
        }
        context.push(t.end_of_turn_id());
        assert_eq!(Turn::of(&t, &context), Turn(Some(0)));
        for n in 1..=300usize {
            context.push((mix(0x9A2, n as u64) % 150_000) as u32);
            let turn = Turn::of(&t, &context);
            assert_eq!(turn, Turn(Some(n)));
            let expected = (-6.0 + 0.05 * n as f64).min(5.0).exp();
            assert_eq!(logits(3, &t, &context, turn).weights[CANDIDATES], expected);
        }
        // The running count agrees with the scan through a special id and past it.
        let mut running = Turn::of(&t, &context[..1]);
        for end in 2..=context.len() {
            running = running.then(&t, context[end - 1]);
            assert_eq!(running, Turn::of(&t, &context[..end]), "at {end}");
        }
    }

    #[test]
    fn worked_example_of_model_md() {
        let t = Tokenizer::new(151_936);
        let context = [72, 101, 108, 343, 422, 114, 108, 100];
        assert_eq!(t.encode("Hello world"), context);
        let l = logits(0, &t, &context, Turn::of(&t, &context));
        let weights = [
            65.3125,
            47.15271195642678,
            24.512487371440127,
            13.47523155334709,
            7.86431394865603,
            4.366604566707059,
            3.2790600939124657,
            1.555590041959089,
            0.0024787521766663585,
        ];
        let ids = [33, 5794, 37060, 50244, 65720, 93668, 110106, 126853, 151935];
        for slot in 0..EXPLICIT {
            assert_eq!(l.weights[slot], weights[slot], "slot {slot}");
            assert_eq!(l.ids.id(slot), ids[slot], "slot {slot}");
        }
        let d = Distribution::new(&l, t.vocab_size(), 0.7, &[]);
        let logprobs = [
            -0.726431189224507,
            -1.1918482136532011,
            -2.1264322832607503,
            -2.9811885343528632,
            -3.750499957582658,
            -4.590999363633156,
            -5.000183500027804,
            -6.065471932503072,
            -15.268121820880406,
        ];
        let mut top = Vec::new();
        d.top(11, &mut top);
        for (k, &(id, lp)) in top[..EXPLICIT].iter().enumerate() {
            assert_eq!((id, lp), (ids[k], logprobs[k]));
        }
        assert_eq!((top[9].0, top[10].0), (0, 1));
        assert_eq!(d.tail_logprob(), -23.83955039230898);
        // u_0 of the single request for this prompt, and the id it draws.
        assert_eq!(d.sample(None, 1.0, 0.0, 0.9932351963286613), 110106);
    }

    #[test]
    fn every_explicit_logit_lies_above_the_tail_in_every_context() {
        // The property the sorted order (and so every filter) rests on, over seeds, context lengths and turn
        // lengths; the issue that found it broken saw it fail in about 8% of contexts.
        let t = Tokenizer::new(151_936);
        let mut lowest = f64::INFINITY;
        for seed in 0..40u64 {
            for len in 1..60u64 {
                let context: Vec<u32> = (0..len)
                    .map(|i| (splitmix64(seed * 1000 + i) % 151_000) as u32)
                    .collect();
                let l = logits(seed, &t, &context, Turn::of(&t, &context));
                for w in l.weights {
                    lowest = lowest.min(w.ln());
                }
            }
        }
        assert!(
            lowest >= TAIL_LOGIT + TAIL_MARGIN,
            "an explicit logit at {lowest}"
        );
    }

    #[test]
    fn logprobs_stay_finite_at_temperatures_down_to_the_greedy_cut_off() {
        // Issue: weights computed as exp(l / T - shift) underflowed below about -745, so logprobs became -inf
        // (null on the wire) at T = 0.01 and below.
        let (t, l) = setup(&[785, 6722, 315, 9625, 374]);
        let masked = [t.end_of_turn_id()];
        for temp in [1.000_001e-6, 1e-5, 1e-3, 0.01, 0.3, 0.7, 1.3, 1e6] {
            let d = Distribution::new(&l, t.vocab_size(), temp, &masked);
            let mut top = Vec::new();
            d.top(EXPLICIT + 3, &mut top);
            assert_eq!(top.len(), EXPLICIT + 3);
            for &(id, lp) in &top {
                assert!(lp.is_finite() && lp <= 0.0, "T={temp} id {id}: {lp}");
                assert!((lp as f32).is_finite(), "T={temp} id {id}: {lp} as f32");
                assert_eq!(d.logprob(id), lp);
            }
            assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "T={temp}");
            // The logprobs are those of l / T: differences are the logit differences scaled by 1/T.
            let ln_w =
                |id: u32| l.weights[(0..EXPLICIT).find(|&s| l.ids.id(s) == id).unwrap()].ln();
            let (a, b) = (top[0], top[1]);
            let want = (ln_w(a.0) - ln_w(b.0)) / temp;
            assert!(
                ((a.1 - b.1) - want).abs() <= 1e-9 * want.abs().max(1.0),
                "T={temp}: {} vs {want}",
                a.1 - b.1
            );
            let tail_gap = (ln_w(a.0) - TAIL_LOGIT) / temp;
            assert!(((a.1 - d.tail_logprob()) - tail_gap).abs() <= 1e-9 * tail_gap.max(1.0));
        }
    }

    /// The filters keep the prefix their rules give, computed here from the probabilities themselves.
    #[test]
    fn filters_keep_the_prefix_their_rules_give() {
        let (t, l) = setup(&[11, 12]);
        let d = Distribution::new(&l, t.vocab_size(), 1.0, &[]);
        let total = d.n_explicit as u64 + d.tail_count;
        let probs: Vec<f64> = d.explicit().iter().map(|e| e.1 / d.z).collect();
        assert!(probs.windows(2).all(|w| w[0] >= w[1]));
        for i in 0..probs.len() {
            // top_p: an id is kept when the probability before it is at most top_p.
            let before: f64 = probs[..i].iter().sum();
            let top_p = before + 0.25 * probs[i];
            assert_eq!(d.kept(None, top_p, 0.0), i as u64 + 1, "top_p {top_p}");
            // min_p: an id is kept when its probability is at least min_p times the largest.
            let next = probs.get(i + 1).copied().unwrap_or(d.tail_weight / d.z);
            let min_p = (probs[i] + next) / 2.0 / probs[0];
            assert_eq!(d.kept(None, 1.0, min_p), i as u64 + 1, "min_p {min_p}");
            assert_eq!(d.kept(Some(i as u32 + 1), 1.0, 0.0), i as u64 + 1);
        }
        assert_eq!(d.kept(None, 1.0, 0.0), total);
        assert_eq!(d.kept(Some(u32::MAX), 1.0, 0.0), total);
    }

    /// Sampling restricted by top_k renormalises over the kept ids: a fine grid of `u` splits between them in
    /// proportion to their probabilities.
    #[test]
    fn filtered_sampling_renormalises_over_the_kept_ids() {
        let (t, l) = setup(&[11, 12]);
        let d = Distribution::new(&l, t.vocab_size(), 5.0, &[]);
        let (p0, p1) = (d.explicit()[0].1, d.explicit()[1].1);
        // Renormalising must matter: the two kept ids hold well under all of the mass.
        assert!((p0 + p1) / d.z < 0.9, "{}", (p0 + p1) / d.z);
        let n = 100_000;
        let first = (0..n)
            .filter(|&i| {
                let u = (f64::from(i) + 0.5) / f64::from(n);
                d.sample(Some(2), 1.0, 0.0, u) == d.id_at(0)
            })
            .count();
        let want = f64::from(n) * p0 / (p0 + p1);
        assert!(
            (first as f64 - want).abs() <= 1.0,
            "{first} of {n}, want {want}"
        );
    }

    /// Rounding can leave the scaled uniform just past the last kept weight; `u = 1` lands there exactly. The draw
    /// then stays inside what the filters keep.
    #[test]
    fn a_draw_past_the_last_weight_stays_among_the_kept_ids() {
        let (t, l) = setup(&[11, 12]);
        let d = Distribution::new(&l, t.vocab_size(), 1.0, &[5]);
        assert_eq!(d.sample(Some(2), 1.0, 0.0, 1.0), d.id_at(1));
        assert_eq!(d.sample(Some(1), 1.0, 0.0, 1.0), d.id_at(0));
        // Unfiltered, the last id is the largest tail id: neither explicit nor masked.
        let explicit: Vec<u32> = (0..d.n_explicit).map(|p| d.id_at(p)).collect();
        let largest_tail = (0..t.vocab_size())
            .rev()
            .find(|id| !explicit.contains(id) && *id != 5)
            .unwrap();
        assert_eq!(d.sample(None, 1.0, 0.0, 1.0), largest_tail);
    }

    #[test]
    fn top_is_descending_and_matches_logprob() {
        let (t, l) = setup(&[42]);
        let d = Distribution::new(&l, t.vocab_size(), 1.0, &[]);
        let mut top = Vec::new();
        d.top(20, &mut top);
        assert_eq!(top.len(), 20);
        assert!(top.windows(2).all(|w| w[0].1 >= w[1].1));
        for (id, lp) in top {
            assert_eq!(d.logprob(id), lp);
        }
    }

    #[test]
    fn tail_ids_skip_explicit_and_masked_ids() {
        let (t, l) = setup(&[9, 9]);
        let masked = [0, 1, 3];
        let d = Distribution::new(&l, t.vocab_size(), 1.0, &masked);
        let mut top = Vec::new();
        d.top(EXPLICIT + 4, &mut top);
        let tail: Vec<u32> = top[EXPLICIT..].iter().map(|e| e.0).collect();
        assert_eq!(tail, vec![2, 4, 5, 6]);
    }

    #[test]
    fn greedy_takes_the_arg_max() {
        let (t, l) = setup(&[1]);
        let d = Distribution::new(&l, t.vocab_size(), 1.0, &[]);
        let mut top = Vec::new();
        d.top(1, &mut top);
        for u in [0.0, 0.5, 0.999_999] {
            assert_eq!(d.sample(Some(1), 1.0, 0.0, u), top[0].0);
        }
    }

    #[test]
    fn sampling_frequencies_follow_the_filtered_distribution() {
        let (t, l) = setup(&[3, 1, 4]);
        let d = Distribution::new(&l, t.vocab_size(), 1.0, &[]);
        let mut top = Vec::new();
        d.top(3, &mut top);
        let mass: f64 = top.iter().map(|e| e.1.exp()).sum();
        let n = 20_000;
        let mut counts = [0usize; 3];
        for i in 0..n {
            let id = d.sample(Some(3), 1.0, 0.0, unit(splitmix64(i)));
            let k = top
                .iter()
                .position(|e| e.0 == id)
                .expect("sampled outside the top 3");
            counts[k] += 1;
        }
        for (k, &(_, lp)) in top.iter().enumerate() {
            let expected = lp.exp() / mass;
            let seen = counts[k] as f64 / n as f64;
            assert!(
                (seen - expected).abs() < 0.02,
                "rank {k}: {seen} vs {expected}"
            );
        }
    }

    #[test]
    fn top_p_keeps_the_prefix_whose_preceding_mass_is_at_most_p() {
        let (t, l) = setup(&[2, 7]);
        let d = Distribution::new(&l, t.vocab_size(), 1.0, &[]);
        let mut top = Vec::new();
        d.top(EXPLICIT, &mut top);
        let p0 = top[0].1.exp();
        // Only the first token has preceding mass (0) at most p when p is below its own probability.
        assert_eq!(d.kept(None, p0 * 0.5, 0.0), 1);
        assert_eq!(d.kept(None, p0 + 1e-12, 0.0), 2);
        // Keeping everything explicit and part of the tail.
        let explicit: f64 = top.iter().map(|e| e.1.exp()).sum();
        let want = 10;
        let p = explicit + (want as f64 - 0.5) * d.tail_logprob().exp();
        assert_eq!(d.kept(None, p, 0.0), (EXPLICIT + want) as u64);
    }

    #[test]
    fn min_p_keeps_tokens_above_the_relative_threshold() {
        let (t, l) = setup(&[5]);
        let d = Distribution::new(&l, t.vocab_size(), 1.0, &[]);
        let mut top = Vec::new();
        d.top(EXPLICIT, &mut top);
        let max = top[0].1.exp();
        // Just below the third token's relative probability, so rounding cannot decide the boundary.
        let min_p = top[2].1.exp() / max * (1.0 - 1e-9);
        assert!(d.kept(None, 1.0, min_p) >= 3);
        assert_eq!(
            d.kept(None, 1.0, 1.0),
            top.iter().filter(|e| e.1.exp() >= max).count() as u64
        );
    }
}
