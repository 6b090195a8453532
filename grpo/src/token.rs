//! Per-token math of the policy losses: the KL estimators, TIS and IcePop weights, the PPO clip and CISPO surrogates, and GSPO's sequence ratio.
//!
//! Pure functions of one token (or one sample's slices), shared by the fused kernel and by callers who
//! want the formulas themselves.

use crate::stats::exp_f32;

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

impl KlEstimator {
    /// Every estimator, in declaration order: what the property tests range over.
    pub const ALL: [KlEstimator; 5] = [
        KlEstimator::K1,
        KlEstimator::Abs,
        KlEstimator::K2,
        KlEstimator::K3,
        KlEstimator::LowVarKl,
    ];

    /// Whether the estimate is never negative (all but k1, the plain difference).
    pub const fn is_non_negative(self) -> bool {
        match self {
            KlEstimator::K1 => false,
            KlEstimator::Abs | KlEstimator::K2 | KlEstimator::K3 | KlEstimator::LowVarKl => true,
        }
    }
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

pub(crate) fn sequence_log_ratio(current: &[f32], old: &[f32], mask: &[u8]) -> f64 {
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
