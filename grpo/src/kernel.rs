//! The fused per-token pass of the policy loss: ratio, surrogate, TIS, OPSM, KL and entropy, summed per sample in blocks that stay in L1.

use crate::advantage::TokenSource;
use crate::batch::Batch;
use crate::config::{PolicyLossConfig, RatioLevel};
use crate::stats::exp_in_range;
use crate::token::{kl, sequence_log_ratio, tis_weight};

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
pub(crate) struct KernelInputs<'a> {
    pub(crate) current: &'a [f32],
    pub(crate) old: &'a [f32],
    pub(crate) advantages: TokenSource<'a>,
    pub(crate) rollout: Option<&'a [f32]>,
    pub(crate) reference: Option<&'a [f32]>,
    pub(crate) entropy: Option<&'a [f32]>,
}

pub(crate) struct KernelParams<'a> {
    pub(crate) config: &'a PolicyLossConfig,
    pub(crate) bound: f32,
    /// PPO (not CISPO), with these clip settings, for the per-sample fast path.
    pub(crate) ppo: bool,
    pub(crate) eps_low: f32,
    pub(crate) eps_high: f32,
    pub(crate) dual: f32,
}

/// Per-sample masked sums gathered by the kernel.
pub(crate) struct Sums {
    pub(crate) pg: Vec<f64>,
    pub(crate) clip: Vec<f64>,
    pub(crate) ppo_kl: Vec<f64>,
    pub(crate) entropy: Vec<f64>,
    pub(crate) kl: Vec<f64>,
    pub(crate) tis_w: Vec<f64>,
    pub(crate) tis_clip: Vec<f64>,
    pub(crate) tis_abs: Vec<f64>,
}

impl Batch {
    /// The fused per-token pass: for every block of every sample, the ratio, the per-token loss `f(ratio,
    /// advantage, current)`, TIS, OPSM, the KL and entropy terms, and the per-sample masked sums.
    pub(crate) fn kernel<F>(
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
}
