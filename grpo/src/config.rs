//! Settings of the policy loss: PPO or CISPO, token or sequence ratio, clipping, TIS, OPSM, the KL and entropy terms, aggregation.

use crate::aggregate::Aggregation;
use crate::token::{KlEstimator, Tis};

/// Which surrogate the per-token loss uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyLossKind {
    /// PPO clipped surrogate, optionally with dual clip.
    #[default]
    Ppo,
    /// CISPO: `-sg(clip(rho)) * A * log_pi`.
    Cispo,
}

impl PolicyLossKind {
    /// Every surrogate: what the property tests range over.
    pub const ALL: [PolicyLossKind; 2] = [PolicyLossKind::Ppo, PolicyLossKind::Cispo];
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

/// KL loss term: `+coef * agg(KL_estimator(log_pi, log_pi_ref))` (`--use-kl-loss`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KlLoss {
    /// `--kl-loss-coef`.
    pub coef: f64,
    /// `--kl-loss-type`.
    pub estimator: KlEstimator,
}

/// Which compiled copy of the fused per-token kernel [`Batch::policy_loss`](crate::batch::Batch::policy_loss)
/// runs.
///
/// The kernel is compiled several times from the same source: for the build's target (SSE2 on a default
/// x86-64 build) and, on x86-64, for AVX2 + FMA and for AVX-512; which one runs is decided at run time
/// from the CPU's features, once per process. The copies perform the same floating-point operations in the
/// same order (Rust neither fuses `a * b + c` into an FMA nor reassociates sums), so they return the same
/// bits: the choice changes speed only. The integration test `dispatch::dispatched_and_fallback_agree_bitwise`
/// checks that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dispatch {
    /// The widest instruction set the CPU supports among those the kernel was compiled for.
    #[default]
    Detect,
    /// The copy compiled for the build's target only, as every CPU of that target can run it: what the crate
    /// did before it dispatched at run time. For tests and benchmarks that compare the two.
    Fallback,
}

/// Settings of [`Batch::policy_loss`](crate::batch::Batch::policy_loss). The default is slime's: PPO with `eps_clip = eps_clip_high = 0.2`, no
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
    /// Which compiled copy of the kernel runs; every choice gives the same bits.
    pub dispatch: Dispatch,
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
            dispatch: Dispatch::Detect,
        }
    }
}
