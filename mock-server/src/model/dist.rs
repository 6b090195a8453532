//! The next-token distribution: a handful of explicit candidates over a uniform tail, with an exact normaliser.
//!
//! At every context the model gives [`CANDIDATES`] content tokens and `<|im_end|>` an explicit logit; every other
//! id in the vocabulary shares one tail logit, [`TAIL_LOGIT`], which lies below every explicit logit. The
//! normaliser is therefore a closed form, `Z = sum(exp(l_k / T)) + n_tail * exp(l_tail / T)`, and a step costs the
//! same for a vocabulary of 1,024 or 1,000,000 ids. Because the tail sits below the candidates, the sorted order of
//! the whole vocabulary is known without sorting it: the candidates in descending logit, then the tail ids in
//! ascending id order. Every top-k / top-p / min-p filter keeps a prefix of that order, so sampling is exact too.

use super::tokenizer::Tokenizer;

/// Content candidates per context (the end-of-turn token comes on top).
pub const CANDIDATES: usize = 8;
/// The logit every non-candidate id shares.
pub const TAIL_LOGIT: f64 = -12.0;
/// Explicit entries per context: the content candidates and `<|im_end|>`.
const EXPLICIT: usize = CANDIDATES + 1;
/// Single-byte tokens the model proposes as punctuation.
const PUNCTUATION: &[u8] = b".,.,\n!?:;";

/// SplitMix64's output function: a fast, well-mixed bijection on `u64`.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hashes `value` into the running state `state`.
pub(crate) fn mix(state: u64, value: u64) -> u64 {
    splitmix64(state ^ splitmix64(value))
}

/// Maps a hash to a uniform number in `[0, 1)` with 53 bits of precision.
pub(crate) fn unit(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The unscaled logits the model assigns at one context: explicit `(id, logit)` pairs in no particular order.
#[derive(Clone, Debug)]
pub(crate) struct Logits {
    pub(crate) explicit: [(u32, f64); EXPLICIT],
}

/// Computes the model's logits for the next token after `context`.
///
/// The candidates depend on the server seed, the context length and the last three tokens, so text varies along a
/// sequence while the model stays a pure function of the context (a continuation that re-sends earlier output as
/// its prompt sees exactly the distributions the first call saw). The end-of-turn logit grows with the number of
/// tokens since the last special token, so turns end after a few hundred tokens at temperature 1 while long
/// prompts that end in a chat template still get full-length answers.
///
/// `since_special` is the number of tokens at the end of `context` after its last special token (all of them if
/// there is none); callers that extend a context token by token keep it as a running count instead of rescanning.
pub(crate) fn logits(
    seed: u64,
    tokenizer: &Tokenizer,
    context: &[u32],
    since_special: usize,
) -> Logits {
    debug_assert_eq!(since_special, count_since_special(tokenizer, context));
    let mut h = mix(seed, context.len() as u64);
    for back in 1..=3 {
        let id = context
            .len()
            .checked_sub(back)
            .map_or(u64::MAX, |i| u64::from(context[i]));
        h = mix(h, id);
    }
    let im_end = tokenizer.im_end_id();
    let (first_word, words) = tokenizer.word_range();

    // Peakedness varies per context: some positions are nearly certain, others nearly flat.
    let sharpness = 0.3 + 2.7 * unit(mix(h, 0x5348_4152));
    let mut explicit = [(0u32, 0.0f64); EXPLICIT];
    let mut n = 0;
    let mut draw = 0u64;
    while n < CANDIDATES {
        draw += 1;
        let r = mix(h, draw);
        let id = if r % 100 < 12 {
            u32::from(PUNCTUATION[((r >> 8) % PUNCTUATION.len() as u64) as usize])
        } else {
            let mut w = ((r >> 8) % u64::from(words)) as u32;
            // Mostly words that start with a space, so text reads as words.
            if !w.is_multiple_of(2) && !(r >> 48).is_multiple_of(8) {
                w -= 1;
            }
            first_word + w
        };
        if id == im_end || explicit[..n].iter().any(|&(e, _)| e == id) {
            continue;
        }
        let noise = unit(mix(h, 0x4E4F_4953 + n as u64)) - 0.5;
        explicit[n] = (id, 4.0 - sharpness * ((n + 1) as f64).ln() + noise);
        n += 1;
    }
    explicit[CANDIDATES] = (im_end, (-6.0 + 0.05 * since_special as f64).min(2.0));
    Logits { explicit }
}

/// The number of tokens at the end of `context` after its last special token.
pub(crate) fn count_since_special(tokenizer: &Tokenizer, context: &[u32]) -> usize {
    context
        .iter()
        .rev()
        .take_while(|&&id| !tokenizer.is_special(id))
        .count()
}

/// The distribution over the whole vocabulary at one context and temperature, with some ids masked out.
#[derive(Clone, Debug)]
pub struct Distribution<'m> {
    /// Explicit entries that are not masked, as `(id, scaled logit)`, sorted by descending logit then ascending id.
    explicit: [(u32, f64); EXPLICIT],
    n_explicit: usize,
    /// The scaled tail logit.
    tail_logit: f64,
    /// Ids in the tail: every id that is neither explicit nor masked.
    tail_count: u64,
    /// Sorted ids that are not in the tail (explicit ones and masked ones), to enumerate the tail in id order.
    not_tail: [u32; EXPLICIT],
    masked: &'m [u32],
    log_z: f64,
}

impl<'m> Distribution<'m> {
    /// Builds the distribution `softmax(logits / temperature)` with the ids in `masked` (sorted, deduplicated, all
    /// in the vocabulary) given probability zero.
    pub(crate) fn new(
        logits: &Logits,
        vocab_size: u32,
        temperature: f64,
        masked: &'m [u32],
    ) -> Distribution<'m> {
        debug_assert!(masked.windows(2).all(|w| w[0] < w[1]));
        let mut explicit = [(0u32, 0.0f64); EXPLICIT];
        let mut not_tail = [u32::MAX; EXPLICIT];
        let mut n = 0;
        for &(id, logit) in &logits.explicit {
            if masked.binary_search(&id).is_err() {
                explicit[n] = (id, logit / temperature);
                not_tail[n] = id;
                n += 1;
            }
        }
        explicit[..n].sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        not_tail[..n].sort_unstable();
        let tail_logit = TAIL_LOGIT / temperature;
        let tail_count = u64::from(vocab_size) - n as u64 - masked.len() as u64;

        // log-sum-exp in closed form, shifted by the largest logit for stability.
        let max = explicit[..n].iter().map(|e| e.1).fold(tail_logit, f64::max);
        let mut z: f64 = explicit[..n].iter().map(|e| (e.1 - max).exp()).sum();
        z += tail_count as f64 * (tail_logit - max).exp();
        let log_z = max + z.ln();
        Distribution {
            explicit,
            n_explicit: n,
            tail_logit,
            tail_count,
            not_tail,
            masked,
            log_z,
        }
    }

    fn explicit(&self) -> &[(u32, f64)] {
        &self.explicit[..self.n_explicit]
    }

    /// The natural-log probability of `id` (`-inf` for a masked id or one outside the vocabulary).
    pub fn logprob(&self, id: u32) -> f64 {
        if let Some(&(_, l)) = self.explicit().iter().find(|e| e.0 == id) {
            return l - self.log_z;
        }
        if self.masked.binary_search(&id).is_ok() || u64::from(id) >= self.vocab_size() {
            return f64::NEG_INFINITY;
        }
        self.tail_logit - self.log_z
    }

    fn vocab_size(&self) -> u64 {
        self.tail_count + self.n_explicit as u64 + self.masked.len() as u64
    }

    /// The log-probability each tail id has.
    pub fn tail_logprob(&self) -> f64 {
        self.tail_logit - self.log_z
    }

    /// The sum of the probabilities of every id in the vocabulary; 1 up to rounding.
    pub fn total_probability(&self) -> f64 {
        let explicit: f64 = self
            .explicit()
            .iter()
            .map(|e| (e.1 - self.log_z).exp())
            .sum();
        explicit + self.tail_count as f64 * self.tail_logprob().exp()
    }

    /// The `rank`-th id of the tail in ascending id order.
    fn tail_id(&self, rank: u64) -> u32 {
        let mut id = rank;
        // Walk the sorted non-tail ids, skipping each one at or below the candidate.
        let mut masked = self.masked.iter().peekable();
        let mut explicit = self.not_tail[..self.n_explicit].iter().peekable();
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
        for &(id, l) in self.explicit().iter().take(n) {
            out.push((id, l - self.log_z));
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
        let tail_p = self.tail_logprob().exp();
        if top_p < 1.0 {
            let mut before = 0.0;
            let mut n = 0u64;
            for &(_, l) in self.explicit() {
                if before > top_p {
                    break;
                }
                n += 1;
                before += (l - self.log_z).exp();
            }
            if n == self.n_explicit as u64 && before <= top_p && tail_p > 0.0 {
                // Tail id j has `before + j * tail_p` in front of it.
                let j = ((top_p - before) / tail_p).floor();
                n += (j as u64).saturating_add(1).min(self.tail_count);
            }
            keep = keep.min(n);
        }
        if min_p > 0.0 {
            let max_p = self
                .explicit()
                .first()
                .map_or(tail_p, |e| (e.1 - self.log_z).exp());
            let threshold = min_p * max_p;
            let n = self
                .explicit()
                .iter()
                .filter(|e| (e.1 - self.log_z).exp() >= threshold)
                .count() as u64;
            let n = if n == self.n_explicit as u64 && tail_p >= threshold {
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
        let keep = self.kept(top_k, top_p, min_p);
        let from_explicit = (keep as usize).min(self.n_explicit);
        let from_tail = keep - from_explicit as u64;
        let tail_p = self.tail_logprob().exp();
        let explicit_mass: f64 = self.explicit[..from_explicit]
            .iter()
            .map(|e| (e.1 - self.log_z).exp())
            .sum();
        let mut target = u * (explicit_mass + from_tail as f64 * tail_p);
        for &(id, l) in &self.explicit[..from_explicit] {
            let p = (l - self.log_z).exp();
            if target < p {
                return id;
            }
            target -= p;
        }
        if from_tail == 0 {
            // Rounding left a sliver past the last kept explicit id.
            return self.explicit[from_explicit - 1].0;
        }
        let rank = ((target / tail_p) as u64).min(from_tail - 1);
        self.tail_id(rank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(context: &[u32]) -> (Tokenizer, Logits) {
        let t = Tokenizer::new(151_936);
        let l = logits(7, &t, context, count_since_special(&t, context));
        (t, l)
    }

    #[test]
    fn probabilities_sum_to_one_at_any_temperature_and_mask() {
        let (t, l) = setup(&[1, 2, 3]);
        let masked = [5, t.im_end_id()];
        for temp in [0.1, 0.7, 1.0, 2.0, 10.0] {
            for m in [&[][..], &masked[..]] {
                let d = Distribution::new(&l, t.vocab_size(), temp, m);
                assert!((d.total_probability() - 1.0).abs() < 1e-9, "T={temp}");
            }
        }
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
        let min_p = top[2].1.exp() / max;
        assert!(d.kept(None, 1.0, min_p) >= 3);
        assert_eq!(
            d.kept(None, 1.0, 1.0),
            top.iter().filter(|e| e.1.exp() >= max).count() as u64
        );
    }
}
