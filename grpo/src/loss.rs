//! Policy losses: token and GSPO sequence ratios, PPO clip with dual clip, CISPO, TIS and IcePop, OPSM, the
//! KL estimators, entropy and KL loss terms, and the fused batch loss with its metrics.

use thiserror::Error;

use crate::advantage::{Advantages, TokenSource};
use crate::aggregate::Aggregation;
use crate::batch::{Batch, Ragged};
use crate::stats::{exp_f32, exp_in_range};

/// Which surrogate the per-token loss uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyLossKind {
    /// PPO clipped surrogate, optionally with dual clip.
    #[default]
    Ppo,
    /// CISPO: `-sg(clip(rho)) * A * log_pi`.
    Cispo,
}

/// Whether the importance ratio is per token or GSPO's per-sequence geometric mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RatioLevel {
    /// `rho_t = exp(log_pi_t - log_pi_old_t)`.
    #[default]
    Token,
    /// GSPO: `rho_i = exp(sum_t (log_pi - log_pi_old) m / max(1, sum_t m))` for every token of sample `i`.
    Sequence,
}

/// KL estimators of `x = log_pi - log_pi_ref` (reference section R7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KlEstimator {
    /// `x` (slime's default `--kl-loss-type`).
    #[default]
    K1,
    /// `|x|`.
    Abs,
    /// `x^2 / 2`.
    K2,
    /// `e^{-x} - 1 + x`.
    K3,
    /// k3 clamped to `[-10, 10]` (verl's default).
    LowVarKl,
}

/// KL estimate of one token from `x = log_pi - log_pi_ref`.
///
/// k3 is evaluated in `f64` as `expm1(-x) + x` and floored at 0, its true lower bound, so rounding can never
/// make it negative; `x` is clamped to `[-20, 20]` for k3 as verl does for `low_var_kl`, which keeps every
/// result finite.
pub fn kl(estimator: KlEstimator, x: f32) -> f32 {
    let x64 = f64::from(x);
    match estimator {
        KlEstimator::K1 => x,
        KlEstimator::Abs => x.abs(),
        KlEstimator::K2 => (x64 * x64 / 2.0) as f32,
        KlEstimator::K3 | KlEstimator::LowVarKl => {
            let x = x64.clamp(-20.0, 20.0);
            let k3 = ((-x).exp_m1() + x).max(0.0);
            let k3 = if estimator == KlEstimator::LowVarKl {
                k3.min(10.0)
            } else {
                k3
            };
            k3 as f32
        }
    }
}

/// Truncated importance sampling between the trainer's old policy and the rollout engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TisMode {
    /// `w = clamp(e^d, low, high)` (slime `--use-tis`).
    #[default]
    Clamp,
    /// IcePop: `w = e^d` inside `[low, high]`, else 0.
    IcePop,
}

/// TIS settings: `--tis-clip-low`, `--tis-clip` and the mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tis {
    /// Lower bound `C_lo` (default 0).
    pub low: f64,
    /// Upper bound `C_hi` (default 2).
    pub high: f64,
    /// Clamp or IcePop.
    pub mode: TisMode,
}

impl Default for Tis {
    fn default() -> Self {
        Self {
            low: 0.0,
            high: 2.0,
            mode: TisMode::Clamp,
        }
    }
}

/// TIS weight for `d = log_pi_old_train - log_pi_rollout`; returns the weight and whether it was clipped
/// (clamped, or zeroed by IcePop).
pub fn tis_weight(d: f32, tis: &Tis) -> (f32, bool) {
    let raw = exp_f32(d);
    let (lo, hi) = (tis.low as f32, tis.high as f32);
    let outside = (raw < lo) | (raw > hi);
    let w = match tis.mode {
        // Selects, not `f32::clamp`: no branch in the kernel, and no panic on a misconfigured `low > high`.
        TisMode::Clamp => {
            if raw < lo {
                lo
            } else if raw > hi {
                hi
            } else {
                raw
            }
        }
        TisMode::IcePop => {
            if outside {
                0.0
            } else {
                raw
            }
        }
    };
    (w, outside)
}

/// PPO clipped surrogate of one token: `max(-rho A, -clip(rho, 1 - eps_low, 1 + eps_high) A)`, then with
/// dual clip `c` (for `A < 0`) `min(L, -c A)`. Returns the loss and the clip indicator
/// `[-clip(rho) A > -rho A]`. `dual_clip = f32::INFINITY` disables dual clip.
#[inline(always)]
pub fn ppo_clip_loss(
    ratio: f32,
    advantage: f32,
    eps_low: f32,
    eps_high: f32,
    dual_clip: f32,
) -> (f32, bool) {
    // Written as comparisons and selects (no `f32::clamp`, whose bound check is a branch, and no
    // `f32::max`, whose NaN handling costs extra instructions) so that loops over it vectorise.
    let (lo, hi) = (1.0 - eps_low, 1.0 + eps_high);
    let clamped = if ratio < lo {
        lo
    } else if ratio > hi {
        hi
    } else {
        ratio
    };
    let unclipped = -ratio * advantage;
    let clipped = -clamped * advantage;
    let is_clipped = clipped > unclipped;
    let loss = if is_clipped { clipped } else { unclipped };
    let cap = -dual_clip * advantage;
    let loss = if advantage < 0.0 && cap < loss {
        cap
    } else {
        loss
    };
    (loss, is_clipped)
}

/// CISPO loss of one token: `-clip(rho, 1 - eps_low, 1 + eps_high) * A * log_pi`, with the clipped ratio
/// treated as a constant (so the gradient with respect to `log_pi` is `-clip(rho) * A`). Returns the loss
/// and whether the ratio was clamped.
#[inline(always)]
pub fn cispo_loss(
    ratio: f32,
    advantage: f32,
    log_prob: f32,
    eps_low: f32,
    eps_high: f32,
) -> (f32, bool) {
    let (lo, hi) = (1.0 - eps_low, 1.0 + eps_high);
    let outside = (ratio < lo) | (ratio > hi);
    let clamped = if ratio < lo {
        lo
    } else if ratio > hi {
        hi
    } else {
        ratio
    };
    (-clamped * advantage * log_prob, outside)
}

/// GSPO's sequence ratio `exp(sum_t (cur - old) m / max(1, sum_t m))` of one sample, accumulated in `f64`.
///
/// # Panics
/// If the slices differ in length.
pub fn sequence_ratio(current: &[f32], old: &[f32], mask: &[u8]) -> f64 {
    sequence_log_ratio(current, old, mask).exp()
}

fn sequence_log_ratio(current: &[f32], old: &[f32], mask: &[u8]) -> f64 {
    assert!(
        current.len() == old.len() && old.len() == mask.len(),
        "current, old and mask must align"
    );
    let (mut s, mut m) = (0.0f64, 0usize);
    for ((&c, &o), &k) in current.iter().zip(old).zip(mask) {
        s += f64::from(c - o) * f64::from(k);
        m += usize::from(k);
    }
    s / m.max(1) as f64
}

/// KL loss term: `+coef * agg(KL_estimator(log_pi, log_pi_ref))` (`--use-kl-loss`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KlLoss {
    /// `--kl-loss-coef`.
    pub coef: f64,
    /// `--kl-loss-type`.
    pub estimator: KlEstimator,
}

/// Settings of [`Batch::policy_loss`]. The default is slime's: PPO with `eps_clip = eps_clip_high = 0.2`, no
/// dual clip, token ratio, seq-mean-token-mean, no TIS, no KL or entropy term.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyLossConfig {
    /// PPO or CISPO.
    pub kind: PolicyLossKind,
    /// Token ratio or GSPO sequence ratio.
    pub ratio_level: RatioLevel,
    /// `--eps-clip` (`epsilon_low`).
    pub eps_clip: f64,
    /// `--eps-clip-high` (`epsilon_high`; DAPO's clip-higher uses 0.28).
    pub eps_clip_high: f64,
    /// `--eps-clip-c`: dual clip constant, must be greater than 1.
    pub dual_clip: Option<f64>,
    /// `--use-rollout-logprobs`: the old policy is the rollout engine's logprobs, as slime does.
    pub use_rollout_log_probs: bool,
    /// `--use-tis` (needs rollout logprobs; not with `use_rollout_log_probs`).
    pub tis: Option<Tis>,
    /// `--use-opsm` with threshold `delta`: samples with `A < 0` whose masked mean of `old - current`
    /// exceeds `delta` contribute no policy loss.
    pub opsm_delta: Option<f64>,
    /// `--use-kl-loss` (needs reference logprobs).
    pub kl_loss: Option<KlLoss>,
    /// `--entropy-coef` (needs per-token entropy when non-zero).
    pub entropy_coef: f64,
    /// Aggregation of every per-token term and metric.
    pub aggregation: Aggregation,
    /// Bound on `|log_pi - log_pi_old|` before `exp` (verl uses 20; slime has none). It keeps the ratio
    /// finite and changes nothing unless a log-ratio exceeds it.
    pub log_ratio_clamp: f64,
}

impl Default for PolicyLossConfig {
    fn default() -> Self {
        Self {
            kind: PolicyLossKind::Ppo,
            ratio_level: RatioLevel::Token,
            eps_clip: 0.2,
            eps_clip_high: 0.2,
            dual_clip: None,
            use_rollout_log_probs: false,
            tis: None,
            opsm_delta: None,
            kl_loss: None,
            entropy_coef: 0.0,
            aggregation: Aggregation::SeqMeanTokenMean,
            log_ratio_clamp: 20.0,
        }
    }
}

/// Per-token inputs from the trainer, flat in the batch layout (`Batch::num_tokens()` entries each).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogProbs<'a> {
    /// Current policy logprobs `log_pi_theta`.
    pub current: &'a [f32],
    /// Recomputed old-policy logprobs. `None` means the old policy is the current one with the gradient
    /// stopped (ratio 1), unless `use_rollout_log_probs` is on.
    pub old: Option<&'a [f32]>,
    /// Reference-policy logprobs, for the KL loss.
    pub reference: Option<&'a [f32]>,
    /// Per-token entropy, for the entropy term.
    pub entropy: Option<&'a [f32]>,
}

impl<'a> LogProbs<'a> {
    /// Only current logprobs.
    pub fn new(current: &'a [f32]) -> Self {
        Self {
            current,
            ..Self::default()
        }
    }
}

/// Why a loss could not be computed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LossError {
    /// A per-token input does not have one entry per token of the batch.
    #[error("{input} has {len} entries but the batch has {expected} tokens")]
    LengthMismatch {
        /// Which input.
        input: &'static str,
        /// Its length.
        len: usize,
        /// The batch's token count.
        expected: usize,
    },
    /// Advantages computed for a batch with a different layout.
    #[error("advantages have a different per-sample layout from the batch")]
    AdvantageLayout,
    /// A per-token input is NaN or infinite.
    #[error("sample {sample}: {input}[{position}] is {value}, expected a finite number")]
    NonFinite {
        /// Which input.
        input: &'static str,
        /// The sample holding the token.
        sample: usize,
        /// Token position within the response.
        position: usize,
        /// The offending value.
        value: f32,
    },
    /// An input that an option needs was not given (the typed form of issue #1976's `NoneType` crash).
    #[error("{input} is required by {needed_by} but was not provided")]
    MissingInput {
        /// The absent input.
        input: &'static str,
        /// The option that needs it.
        needed_by: &'static str,
    },
    /// slime asserts that TIS and `--use-rollout-logprobs` are not combined: the weight would always be 1.
    #[error("tis cannot be combined with use_rollout_log_probs")]
    TisWithRolloutLogProbs,
    /// Dual clip needs `c > 1`.
    #[error("dual_clip is {0}, it must be greater than 1")]
    InvalidDualClip(f64),
}

/// TIS metrics, aggregated like the loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TisMetrics {
    /// Mean weight (`tis`).
    pub weight: f64,
    /// Fraction of tokens whose weight was clipped (`tis_clipfrac`).
    pub clipfrac: f64,
    /// Mean `|e^d - 1|` (`tis_abs`).
    pub abs: f64,
}

/// The total loss and its metrics, each aggregated with the configured [`Aggregation`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyLossOutput {
    /// `pg_loss - entropy_coef * entropy_loss + kl_coef * kl_loss`.
    pub loss: f64,
    /// The aggregated policy-gradient loss.
    pub pg_loss: f64,
    /// Fraction of tokens where the clip was active (`pg_clipfrac`).
    pub pg_clipfrac: f64,
    /// Aggregated `log_pi_old - log_pi` (`ppo_kl`).
    pub ppo_kl: f64,
    /// Aggregated entropy, if an entropy input was given.
    pub entropy_loss: Option<f64>,
    /// Aggregated KL to the reference, if a KL loss is configured.
    pub kl_loss: Option<f64>,
    /// TIS metrics, if TIS is on.
    pub tis: Option<TisMetrics>,
}

/// Tokens per block of the fused kernel: each pass over a block works on scratch buffers that stay in L1.
const BLOCK: usize = 256;

/// Independent partial sums per block. Within a block, each lane adds at most `BLOCK / LANES = 16` terms
/// in `f32` (relative error at most 16 ulp, typically about 4, i.e. below 5e-7); the block totals accumulate
/// in `f64`. Summing in `f64` per token would cost a conversion per term, and a single accumulator would
/// serialise on the adder's latency; both measured slower on SSE2.
const LANES: usize = 16;

/// `sum x m` over one block (at most `BLOCK` values), in `LANES` partial sums, returned as `f64`.
#[inline(always)]
fn block_sum(x: &[f32], m: &[f32]) -> f64 {
    let mut acc = [0.0f32; LANES];
    let n = x.len().min(m.len()) / LANES * LANES;
    for k in (0..n).step_by(LANES) {
        let xs: &[f32; LANES] = x[k..k + LANES].try_into().unwrap_or(&[0.0; LANES]);
        let ms: &[f32; LANES] = m[k..k + LANES].try_into().unwrap_or(&[0.0; LANES]);
        for j in 0..LANES {
            acc[j] += xs[j] * ms[j];
        }
    }
    let tail: f32 = x[n..].iter().zip(&m[n..]).map(|(&a, &b)| a * b).sum();
    acc.iter().map(|&a| f64::from(a)).sum::<f64>() + f64::from(tail)
}

/// `sum x` over one block, in `LANES` partial sums.
#[inline(always)]
fn block_total(x: &[f32]) -> f64 {
    let mut acc = [0.0f32; LANES];
    let n = x.len() / LANES * LANES;
    for k in (0..n).step_by(LANES) {
        let xs: &[f32; LANES] = x[k..k + LANES].try_into().unwrap_or(&[0.0; LANES]);
        for j in 0..LANES {
            acc[j] += xs[j];
        }
    }
    let tail: f32 = x[n..].iter().sum();
    acc.iter().map(|&a| f64::from(a)).sum::<f64>() + f64::from(tail)
}

/// Three block sums with one mask.
#[inline(always)]
fn block_sums3(x: &[f32], y: &[f32], z: &[f32], m: &[f32]) -> [f64; 3] {
    [block_sum(x, m), block_sum(y, m), block_sum(z, m)]
}

/// Per-token slices of the kernel, all in the batch layout.
struct KernelInputs<'a> {
    current: &'a [f32],
    old: &'a [f32],
    advantages: TokenSource<'a>,
    rollout: Option<&'a [f32]>,
    reference: Option<&'a [f32]>,
    entropy: Option<&'a [f32]>,
}

struct KernelParams<'a> {
    config: &'a PolicyLossConfig,
    bound: f32,
    /// PPO (not CISPO), with these clip settings, for the per-sample fast path.
    ppo: bool,
    eps_low: f32,
    eps_high: f32,
    dual: f32,
}

/// Per-sample masked sums gathered by the kernel.
struct Sums {
    pg: Vec<f64>,
    clip: Vec<f64>,
    ppo_kl: Vec<f64>,
    entropy: Vec<f64>,
    kl: Vec<f64>,
    tis_w: Vec<f64>,
    tis_clip: Vec<f64>,
    tis_abs: Vec<f64>,
}

/// Returns an error naming the first non-finite value of `values` (in the batch layout), if any.
pub(crate) fn check_finite(
    batch: &Batch,
    input: &'static str,
    values: &[f32],
) -> Result<(), LossError> {
    if values.iter().fold(0.0f32, |acc, &v| acc + v * 0.0) == 0.0 {
        return Ok(());
    }
    match values.iter().position(|v| !v.is_finite()) {
        Some(t) => Err(non_finite(batch, input, t, values[t])),
        None => Ok(()),
    }
}

fn non_finite(batch: &Batch, input: &'static str, token: usize, value: f32) -> LossError {
    let sample = batch.offsets().partition_point(|&o| o <= token) - 1;
    LossError::NonFinite {
        input,
        sample,
        position: token - batch.offsets()[sample],
        value,
    }
}

impl Batch {
    fn check_len(&self, input: &'static str, values: &[f32]) -> Result<(), LossError> {
        if values.len() == self.num_tokens() {
            Ok(())
        } else {
            Err(LossError::LengthMismatch {
                input,
                len: values.len(),
                expected: self.num_tokens(),
            })
        }
    }

    /// The old-policy logprobs as slime picks them: the rollout logprobs with `use_rollout_log_probs`, else
    /// the recomputed ones, else the current ones (ratio 1).
    fn old_log_probs<'a>(
        &'a self,
        lp: &LogProbs<'a>,
        use_rollout: bool,
    ) -> Result<&'a [f32], LossError> {
        self.check_len("current", lp.current)?;
        let old = if use_rollout {
            self.rollout_log_probs().ok_or(LossError::MissingInput {
                input: "rollout_log_probs",
                needed_by: "use_rollout_log_probs",
            })?
        } else {
            lp.old.unwrap_or(lp.current)
        };
        self.check_len("old", old)?;
        Ok(old)
    }

    /// Locates the token of sample `i` that made `current - old` non-finite.
    fn locate_non_finite(&self, i: usize, current: &[f32], old: &[f32]) -> LossError {
        let r = self.range(i);
        let (current, old) = (&current[r.clone()], &old[r]);
        let t = current
            .iter()
            .zip(old)
            .position(|(&c, &o)| !(c - o).is_finite())
            .unwrap_or(0);
        let (input, value) = if !current[t].is_finite() {
            ("current", current[t])
        } else if !old[t].is_finite() {
            ("old", old[t])
        } else {
            ("current - old", current[t] - old[t])
        };
        LossError::NonFinite {
            input,
            sample: i,
            position: t,
            value,
        }
    }

    /// The fused per-token pass: for every block of every sample, the ratio, the per-token loss `f(ratio,
    /// advantage, current)`, TIS, OPSM, the KL and entropy terms, and the per-sample masked sums.
    fn kernel<F>(
        &self,
        x: &KernelInputs<'_>,
        p: &KernelParams<'_>,
        sums: &mut Sums,
        mut token_out: Option<&mut [f32]>,
        f: F,
    ) where
        F: Fn(f32, f32, f32) -> (f32, bool),
    {
        let config = p.config;
        let bound = p.bound;
        let sequence = config.ratio_level == RatioLevel::Sequence;
        let mut mask = [0.0f32; BLOCK];
        let mut delta = [0.0f32; BLOCK];
        let mut ratio = [0.0f32; BLOCK];
        let mut loss = [0.0f32; BLOCK];
        let mut clip = [0.0f32; BLOCK];
        let mut scratch = [[0.0f32; BLOCK]; 3];
        let mut adv_block = [0.0f32; BLOCK];
        for i in 0..self.len() {
            let range = self.range(i);
            let seq_log_ratio = if sequence || config.opsm_delta.is_some() {
                sequence_log_ratio(
                    &x.current[range.clone()],
                    &x.old[range.clone()],
                    &self.loss_mask()[range.clone()],
                )
            } else {
                0.0
            };
            let seq_ratio = exp_in_range((seq_log_ratio as f32).clamp(-bound, bound));
            let opsm_drop = config.opsm_delta.is_some_and(|d| -seq_log_ratio > d);

            if let TokenSource::Broadcast(a) = x.advantages {
                adv_block.fill(a[i] as f32);
            }
            let scalar = match x.advantages {
                TokenSource::Broadcast(a) => a[i] as f32,
                TokenSource::Values(_) => 0.0,
            };
            let fast = p.ppo
                && scalar != 0.0
                && !sequence
                && config.tis.is_none()
                && !opsm_drop
                && token_out.is_none();
            let mut start = range.start;
            while start < range.end {
                let end = (start + BLOCK).min(range.end);
                let len = end - start;
                let t = start..end;
                let (cur, old) = (&x.current[t.clone()], &x.old[t.clone()]);
                let adv: &[f32] = match x.advantages {
                    TokenSource::Values(v) => &v[t.clone()],
                    TokenSource::Broadcast(_) => &adv_block[..len],
                };
                let (delta, ratio) = (&mut delta[..len], &mut ratio[..len]);
                if fast {
                    // PPO with one non-zero advantage `a` for the whole sample and nothing that needs the
                    // per-token loss: `L = -a * b` with `b = min(rho, 1 + eps_high)` for `a > 0` and
                    // `b = min(max(rho, 1 - eps_low), c)` for `a < 0` (R5 with the sign known), so the kernel
                    // sums `b` and multiplies by `-a` once per block. `ratio` holds `b`, `loss` the clip flags.
                    // Matches the general path to f32 rounding (a property test checks it).
                    let flags = &mut loss[..len];
                    let mask_u8 = &self.loss_mask()[t.clone()];
                    // Clipping `rho = exp(v)` to `[lo, hi]` is clipping `v` to `[ln lo, ln hi]`, which folds
                    // into the log-ratio bound: one clamp, then `exp`. The clip flag is read off `v` directly.
                    let (v_lo, v_hi, flag_above, threshold) = if scalar > 0.0 {
                        let ln_hi = (1.0 + p.eps_high).ln();
                        (-bound, ln_hi.min(bound), true, ln_hi)
                    } else {
                        let lo = 1.0 - p.eps_low;
                        let ln_lo = if lo > 0.0 { lo.ln() } else { f32::NEG_INFINITY };
                        (ln_lo.max(-bound), p.dual.ln().min(bound), false, ln_lo)
                    };
                    for (((((d, b), f), &c), &o), &k) in delta
                        .iter_mut()
                        .zip(ratio.iter_mut())
                        .zip(flags.iter_mut())
                        .zip(cur)
                        .zip(old)
                        .zip(mask_u8)
                    {
                        let m = f32::from(k);
                        let v = c - o;
                        *d = v * m;
                        let clipped = if flag_above {
                            v > threshold
                        } else {
                            v < threshold
                        };
                        let v = if v < v_lo {
                            v_lo
                        } else if v > v_hi {
                            v_hi
                        } else {
                            v
                        };
                        *b = exp_in_range(v) * m;
                        *f = f32::from(u8::from(clipped)) * m;
                    }
                    // The values are already masked (by multiplication, so a non-finite `delta` stays
                    // non-finite); plain sums remain.
                    let [sb, cl, sd] = [block_total(ratio), block_total(flags), block_total(delta)];
                    sums.pg[i] -= f64::from(scalar) * sb;
                    sums.clip[i] += cl;
                    sums.ppo_kl[i] -= sd;
                    start = end;
                    continue;
                }
                let m = &mut mask[..len];
                for (d, &s) in m.iter_mut().zip(&self.loss_mask()[t.clone()]) {
                    *d = f32::from(s);
                }
                if sequence {
                    for ((d, &c), &o) in delta.iter_mut().zip(cur).zip(old) {
                        *d = c - o;
                    }
                    ratio.fill(seq_ratio);
                } else {
                    for (((d, r), &c), &o) in
                        delta.iter_mut().zip(ratio.iter_mut()).zip(cur).zip(old)
                    {
                        let v = c - o;
                        *d = v;
                        // Selects rather than `f32::clamp`, whose bound check is a branch; NaN passes.
                        let v = if v < -bound {
                            -bound
                        } else if v > bound {
                            bound
                        } else {
                            v
                        };
                        *r = exp_in_range(v);
                    }
                }
                let (loss, clip) = (&mut loss[..len], &mut clip[..len]);
                if p.ppo && scalar != 0.0 {
                    // PPO with one advantage for the whole sample: the sign is known, so each side of the clip
                    // is one min or max. The same expressions as `ppo_clip_loss`, bit for bit.
                    let a = scalar;
                    let (lo, hi) = (1.0 - p.eps_low, 1.0 + p.eps_high);
                    let cap = -p.dual * a;
                    for ((l, c), &r) in loss.iter_mut().zip(clip.iter_mut()).zip(ratio.iter()) {
                        let bounded = if a > 0.0 {
                            if r > hi { hi } else { r }
                        } else if r < lo {
                            lo
                        } else {
                            r
                        };
                        let unclipped = -r * a;
                        let clipped = -bounded * a;
                        let is_clipped = clipped > unclipped;
                        let v = if is_clipped { clipped } else { unclipped };
                        *l = if (a < 0.0) & (cap < v) { cap } else { v };
                        *c = f32::from(u8::from(is_clipped));
                    }
                } else {
                    for ((((l, c), &r), &a), &lp) in loss
                        .iter_mut()
                        .zip(clip.iter_mut())
                        .zip(ratio.iter())
                        .zip(adv)
                        .zip(cur)
                    {
                        let (v, k) = f(r, a, lp);
                        *l = v;
                        *c = f32::from(u8::from(k));
                    }
                }

                if let (Some(tis), Some(rollout)) = (&config.tis, x.rollout) {
                    let [w, wc, abs] = &mut scratch;
                    let (w, wc, abs) = (&mut w[..len], &mut wc[..len], &mut abs[..len]);
                    for (k, ((w, wc), abs)) in w
                        .iter_mut()
                        .zip(wc.iter_mut())
                        .zip(abs.iter_mut())
                        .enumerate()
                    {
                        let d = old[k] - rollout[start + k];
                        let (v, c) = tis_weight(d, tis);
                        *w = v;
                        *wc = f32::from(u8::from(c));
                        // Bounded like the ratio, so that a sum of these metrics cannot overflow.
                        *abs = (exp_in_range(d.clamp(-bound, bound)) - 1.0).abs();
                    }
                    for (l, &w) in loss.iter_mut().zip(w.iter()) {
                        *l *= w;
                    }
                    let [sw, sc, sa] = block_sums3(w, wc, abs, m);
                    sums.tis_w[i] += sw;
                    sums.tis_clip[i] += sc;
                    sums.tis_abs[i] += sa;
                }
                if opsm_drop {
                    for (l, &a) in loss.iter_mut().zip(adv) {
                        if a < 0.0 {
                            *l = 0.0;
                        }
                    }
                }
                // `delta` is summed unclamped and multiplied by the mask rather than selected, so a non-finite
                // input makes the ppo_kl sum non-finite even under mask 0.
                let [pg, cl, d] = block_sums3(loss, clip, delta, m);
                sums.pg[i] += pg;
                sums.clip[i] += cl;
                sums.ppo_kl[i] -= d;
                if let Some(out) = token_out.as_deref_mut() {
                    out[t.clone()].copy_from_slice(loss);
                }
                if let (Some(kl_cfg), Some(reference)) = (&config.kl_loss, x.reference) {
                    let k = &mut scratch[0][..len];
                    for ((k, &c), &r) in k.iter_mut().zip(cur).zip(&reference[t.clone()]) {
                        *k = kl(kl_cfg.estimator, c - r);
                    }
                    sums.kl[i] += block_sum(k, m);
                }
                if let Some(entropy) = x.entropy {
                    sums.entropy[i] += block_sum(&entropy[t], m);
                }
                start = end;
            }
        }
    }

    /// Importance ratios in the batch layout: per token, or GSPO's per-sequence ratio broadcast to the tokens.
    pub fn ratios(
        &self,
        lp: &LogProbs<'_>,
        use_rollout_log_probs: bool,
        level: RatioLevel,
    ) -> Result<Ragged<f32>, LossError> {
        let old = self.old_log_probs(lp, use_rollout_log_probs)?;
        check_finite(self, "current", lp.current)?;
        check_finite(self, "old", old)?;
        let mut out = vec![0.0f32; self.num_tokens()];
        for i in 0..self.len() {
            let r = self.range(i);
            match level {
                RatioLevel::Token => {
                    for ((o, &c), &p) in out[r.clone()]
                        .iter_mut()
                        .zip(&lp.current[r.clone()])
                        .zip(&old[r])
                    {
                        *o = exp_f32(c - p);
                    }
                }
                RatioLevel::Sequence => {
                    let s = sequence_ratio(
                        &lp.current[r.clone()],
                        &old[r.clone()],
                        &self.loss_mask()[r.clone()],
                    );
                    out[r].fill(s as f32);
                }
            }
        }
        Ok(self.ragged(out))
    }

    /// Per-token KL estimates of `log_probs` against `reference` in the batch layout. The inputs are not
    /// modified.
    pub fn kl(
        &self,
        log_probs: &[f32],
        reference: &[f32],
        estimator: KlEstimator,
    ) -> Result<Ragged<f32>, LossError> {
        self.check_len("log_probs", log_probs)?;
        self.check_len("reference", reference)?;
        check_finite(self, "log_probs", log_probs)?;
        check_finite(self, "reference", reference)?;
        let values = log_probs
            .iter()
            .zip(reference)
            .map(|(&a, &b)| kl(estimator, a - b))
            .collect();
        Ok(self.ragged(values))
    }

    /// OPSM / TRL's off-policy mask: per sample, false when its advantage is negative and the masked mean of
    /// `old - current` exceeds `delta`.
    pub fn off_policy_mask(
        &self,
        advantages: &Advantages,
        lp: &LogProbs<'_>,
        use_rollout_log_probs: bool,
        delta: f64,
    ) -> Result<Vec<bool>, LossError> {
        let old = self.old_log_probs(lp, use_rollout_log_probs)?;
        check_finite(self, "current", lp.current)?;
        check_finite(self, "old", old)?;
        Ok((0..self.len())
            .map(|i| {
                let r = self.range(i);
                let kl = -sequence_log_ratio(
                    &lp.current[r.clone()],
                    &old[r.clone()],
                    &self.loss_mask()[r],
                );
                !(advantages.sample(i) < 0.0 && kl > delta)
            })
            .collect())
    }

    /// The policy loss and its metrics (reference sections R4 to R8), in one fused pass over the tokens.
    pub fn policy_loss(
        &self,
        advantages: &Advantages,
        lp: &LogProbs<'_>,
        config: &PolicyLossConfig,
    ) -> Result<PolicyLossOutput, LossError> {
        self.run_policy_loss(advantages, lp, config, None)
    }

    /// [`Batch::policy_loss`] that also returns the per-token losses (after TIS and OPSM, before masking).
    pub fn policy_loss_with_tokens(
        &self,
        advantages: &Advantages,
        lp: &LogProbs<'_>,
        config: &PolicyLossConfig,
    ) -> Result<(PolicyLossOutput, Ragged<f32>), LossError> {
        let mut tokens = vec![0.0f32; self.num_tokens()];
        let out = self.run_policy_loss(advantages, lp, config, Some(&mut tokens))?;
        Ok((out, self.ragged(tokens)))
    }

    fn run_policy_loss(
        &self,
        advantages: &Advantages,
        lp: &LogProbs<'_>,
        config: &PolicyLossConfig,
        token_out: Option<&mut [f32]>,
    ) -> Result<PolicyLossOutput, LossError> {
        let old = self.old_log_probs(lp, config.use_rollout_log_probs)?;
        if advantages.offsets() != self.offsets() {
            return Err(LossError::AdvantageLayout);
        }
        if let Some(c) = config.dual_clip
            && c.partial_cmp(&1.0) != Some(std::cmp::Ordering::Greater)
        {
            return Err(LossError::InvalidDualClip(c));
        }
        let rollout = match config.tis {
            Some(_) if config.use_rollout_log_probs => {
                return Err(LossError::TisWithRolloutLogProbs);
            }
            Some(_) => Some(self.rollout_log_probs().ok_or(LossError::MissingInput {
                input: "rollout_log_probs",
                needed_by: "tis",
            })?),
            None => None,
        };
        let reference = match config.kl_loss {
            Some(_) => {
                let r = lp.reference.ok_or(LossError::MissingInput {
                    input: "reference",
                    needed_by: "kl_loss",
                })?;
                self.check_len("reference", r)?;
                check_finite(self, "reference", r)?;
                Some(r)
            }
            None => None,
        };
        let entropy = match lp.entropy {
            None if config.entropy_coef != 0.0 => {
                return Err(LossError::MissingInput {
                    input: "entropy",
                    needed_by: "entropy_coef",
                });
            }
            None => None,
            Some(e) => {
                self.check_len("entropy", e)?;
                check_finite(self, "entropy", e)?;
                Some(e)
            }
        };
        let n = self.len();
        let mut sums = Sums {
            pg: vec![0.0; n],
            clip: vec![0.0; n],
            ppo_kl: vec![0.0; n],
            entropy: vec![0.0; n],
            kl: vec![0.0; n],
            tis_w: vec![0.0; n],
            tis_clip: vec![0.0; n],
            tis_abs: vec![0.0; n],
        };
        let eps_low = config.eps_clip as f32;
        let eps_high = config.eps_clip_high as f32;
        let dual = config.dual_clip.map_or(f32::INFINITY, |c| c as f32);
        // Within `exp_in_range`'s domain whatever the configuration says (a NaN bound becomes 87).
        let bound = if config.log_ratio_clamp.is_nan() {
            87.0
        } else {
            (config.log_ratio_clamp as f32).clamp(0.0, 87.0)
        };

        let inputs = KernelInputs {
            current: lp.current,
            old,
            advantages: advantages.source(),
            rollout,
            reference,
            entropy,
        };
        let params = KernelParams {
            config,
            bound,
            ppo: config.kind == PolicyLossKind::Ppo,
            eps_low,
            eps_high,
            dual,
        };
        match config.kind {
            PolicyLossKind::Ppo => self.kernel(
                &inputs,
                &params,
                &mut sums,
                token_out,
                move |ratio, adv, _| ppo_clip_loss(ratio, adv, eps_low, eps_high, dual),
            ),
            PolicyLossKind::Cispo => self.kernel(
                &inputs,
                &params,
                &mut sums,
                token_out,
                move |ratio, adv, lp| cispo_loss(ratio, adv, lp, eps_low, eps_high),
            ),
        }
        if let Some(i) = sums.ppo_kl.iter().position(|s| !s.is_finite()) {
            return Err(self.locate_non_finite(i, lp.current, old));
        }

        let agg = |s: &[f64]| config.aggregation.reduce(self, s);
        let pg_loss = agg(&sums.pg);
        let entropy_loss = entropy.map(|_| agg(&sums.entropy));
        let kl_loss = config.kl_loss.map(|_| agg(&sums.kl));
        let loss = pg_loss - config.entropy_coef * entropy_loss.unwrap_or(0.0)
            + config.kl_loss.map_or(0.0, |k| k.coef) * kl_loss.unwrap_or(0.0);
        Ok(PolicyLossOutput {
            loss,
            pg_loss,
            pg_clipfrac: agg(&sums.clip),
            ppo_kl: agg(&sums.ppo_kl),
            entropy_loss,
            kl_loss,
            tis: config.tis.map(|_| TisMetrics {
                weight: agg(&sums.tis_w),
                clipfrac: agg(&sums.tis_clip),
                abs: agg(&sums.tis_abs),
            }),
        })
    }
}
