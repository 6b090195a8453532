//! The fused per-token pass of the policy loss: ratio, surrogate, TIS, OPSM, KL and entropy, summed per sample in blocks that stay in L1.

use std::ops::Range;

use crate::advantage::TokenSource;
use crate::batch::Batch;
use multiversion::multiversion;

use crate::config::{Dispatch, PolicyLossConfig, PolicyLossKind, RatioLevel};
use crate::stats::{exp_finish, exp_in_range, exp_reduce};
use crate::token::{KlEstimator, Tis, kl, sequence_log_ratio, tis_weight};

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
    /// The fast path's clip for a positive advantage and for a negative one (see [`fast_ppo_block`]).
    above: FastClip,
    below: FastClip,
}

/// The PPO fast path's clip for one sign of the advantage, in log-ratio space: clipping `rho = exp(v)` to
/// `[lo, hi]` is clipping `v` to `[ln lo, ln hi]`, which folds into the log-ratio bound, so one clamp
/// `[v_lo, v_hi]` and then `exp`. The clip flag is `v` beyond `threshold` (above it for a positive
/// advantage, below it for a negative one).
#[derive(Clone, Copy)]
struct FastClip {
    v_lo: f32,
    v_hi: f32,
    threshold: f32,
}

/// One fast-path block before its reduction to `f64`: the `f32` lanes and in-order tail sums of the masked
/// bounded ratios and log-ratios, and the clip count.
#[derive(Clone, Copy)]
struct BlockLanes {
    bounded: [f32; LANES],
    delta: [f32; LANES],
    tail_bounded: f32,
    tail_delta: f32,
    flags: u32,
}

/// Blocks reduced together on the fast path (a sample of 2,048 tokens is 8 blocks).
const PENDING: usize = 8;

/// Up to [`PENDING`] blocks of one sample waiting for their reduction to `f64`.
///
/// Each block's total is `((l_0 + l_1) + ... + l_15) + tail` in `f64`, sixteen dependent additions; one
/// block at a time that is a serial chain per total, each lane extracted from its register first. Stored
/// lane-major (`[lane][block]`), the same additions for eight blocks are eight-wide vector additions,
/// each block still adding its own lanes in the same order, so every total has the same bits.
struct Pending {
    bounded: [[f32; PENDING]; LANES],
    delta: [[f32; PENDING]; LANES],
    tail_bounded: [f32; PENDING],
    tail_delta: [f32; PENDING],
    flags: [u32; PENDING],
    len: usize,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            bounded: [[0.0; PENDING]; LANES],
            delta: [[0.0; PENDING]; LANES],
            tail_bounded: [0.0; PENDING],
            tail_delta: [0.0; PENDING],
            flags: [0; PENDING],
            len: 0,
        }
    }

    /// Adds a block; the caller takes the totals before a ninth.
    #[inline(always)]
    fn push(&mut self, b: BlockLanes) {
        let q = self.len % PENDING;
        for j in 0..LANES {
            self.bounded[j][q] = b.bounded[j];
            self.delta[j][q] = b.delta[j];
        }
        self.tail_bounded[q] = b.tail_bounded;
        self.tail_delta[q] = b.tail_delta;
        self.flags[q] = b.flags;
        self.len = q + 1;
    }

    /// The pending blocks' totals `[bounded, clip count, delta]` in block order, and an empty queue.
    #[inline(always)]
    fn take_totals(&mut self) -> impl Iterator<Item = [f64; 3]> {
        // `Iterator::sum` of floats starts from -0.0; so do these.
        let (mut b, mut d) = ([-0.0f64; PENDING], [-0.0f64; PENDING]);
        for j in 0..LANES {
            for q in 0..PENDING {
                b[q] += f64::from(self.bounded[j][q]);
                d[q] += f64::from(self.delta[j][q]);
            }
        }
        let (tb, td, flags) = (self.tail_bounded, self.tail_delta, self.flags);
        let n = std::mem::take(&mut self.len);
        (0..n).map(move |q| {
            [
                b[q] + f64::from(tb[q]),
                f64::from(flags[q]),
                d[q] + f64::from(td[q]),
            ]
        })
    }
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

impl KernelParams<'_> {
    /// The settings as the kernel uses them: in `f32`, and the log-ratio bound kept within `exp_in_range`'s
    /// domain whatever the configuration says (a NaN bound becomes 87).
    pub(crate) fn new(config: &PolicyLossConfig) -> KernelParams<'_> {
        let bound = if config.log_ratio_clamp.is_nan() {
            87.0
        } else {
            (config.log_ratio_clamp as f32).clamp(0.0, 87.0)
        };
        let eps_low = config.eps_clip as f32;
        let eps_high = config.eps_clip_high as f32;
        let dual = config.dual_clip.map_or(f32::INFINITY, |c| c as f32);
        // Once per call rather than once per block: `ln` is a libm call.
        let ln_hi = (1.0 + eps_high).ln();
        let lo = 1.0 - eps_low;
        let ln_lo = if lo > 0.0 { lo.ln() } else { f32::NEG_INFINITY };
        KernelParams {
            config,
            bound,
            ppo: config.kind == PolicyLossKind::Ppo,
            eps_low,
            eps_high,
            dual,
            above: FastClip {
                v_lo: -bound,
                v_hi: ln_hi.min(bound),
                threshold: ln_hi,
            },
            below: FastClip {
                v_lo: ln_lo.max(-bound),
                v_hi: dual.ln().min(bound),
                threshold: ln_lo,
            },
        }
    }
}

impl Sums {
    /// Zero sums for `n` samples.
    pub(crate) fn new(n: usize) -> Sums {
        Sums {
            pg: vec![0.0; n],
            clip: vec![0.0; n],
            ppo_kl: vec![0.0; n],
            entropy: vec![0.0; n],
            kl: vec![0.0; n],
            tis_w: vec![0.0; n],
            tis_clip: vec![0.0; n],
            tis_abs: vec![0.0; n],
        }
    }
}

/// Scratch buffers of one block, reused for every block of every sample.
struct Scratch {
    mask: [f32; BLOCK],
    delta: [f32; BLOCK],
    ratio: [f32; BLOCK],
    /// The per-token losses.
    loss: [f32; BLOCK],
    clip: [f32; BLOCK],
    /// TIS weights, clip flags and `|e^d - 1|`; the first one also holds the KL terms.
    extra: [[f32; BLOCK]; 3],
    /// The sample's advantage, when it is one scalar broadcast to its tokens.
    adv: [f32; BLOCK],
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            mask: [0.0; BLOCK],
            delta: [0.0; BLOCK],
            ratio: [0.0; BLOCK],
            loss: [0.0; BLOCK],
            clip: [0.0; BLOCK],
            extra: [[0.0; BLOCK]; 3],
            adv: [0.0; BLOCK],
        }
    }
}

/// What the kernel decides once per sample, before its first block.
struct SamplePlan {
    /// GSPO's ratio of the sample, bounded like a token ratio.
    seq_ratio: f32,
    /// OPSM drops the policy loss of this sample's negative-advantage tokens.
    opsm_drop: bool,
    /// The sample's advantage when it is one scalar for all its tokens, else 0.
    scalar: f32,
    /// The PPO fast path applies (see [`fast_ppo_block`]).
    fast: bool,
}

impl Batch {
    /// The fused per-token pass: for every block of every sample, the ratio, the per-token loss `f(ratio,
    /// advantage, current)`, TIS, OPSM, the KL and entropy terms, and the per-sample masked sums. Runs the
    /// copy of the pass that `config.dispatch` selects (see [`run_dispatched`]).
    pub(crate) fn kernel<F>(
        &self,
        x: &KernelInputs<'_>,
        p: &KernelParams<'_>,
        sums: &mut Sums,
        token_out: Option<&mut [f32]>,
        f: F,
    ) where
        F: Fn(f32, f32, f32) -> (f32, bool),
    {
        let pass = Pass {
            batch: self,
            x,
            p,
            f,
        };
        match p.config.dispatch {
            Dispatch::Detect => run_dispatched(&pass, sums, token_out),
            Dispatch::Fallback => run_fallback(&pass, sums, token_out),
        }
    }
}

/// The pass compiled once for each target below and once for the build's own target, the copy chosen at
/// run time from the CPU's features (the first listed target the CPU has, else the build's; multiversion
/// detects once per process and then dispatches on a cached index). Everything the pass calls is
/// `#[inline(always)]`, so each copy is the whole loop compiled with that target's instructions: 16 `f32`
/// lanes per AVX-512 register make the kernel's 16 partial sums one register each, where SSE2 needs four.
///
/// The copies compute the same bits: the source is the same, and Rust never contracts `a * b + c` into an
/// FMA or reassociates floating-point operations, whatever the target allows, so wider registers change
/// how many lanes one instruction handles, never which operations run in which order.
///
/// multiversion requires Ice Lake's AVX-512 extensions (VBMI2, GFNI, ...) for an AVX-512 target, so that
/// CPUs whose clock drops under AVX-512 (Skylake-X) take the AVX2 copy instead.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
fn run_dispatched<F>(pass: &Pass<'_, F>, sums: &mut Sums, token_out: Option<&mut [f32]>)
where
    F: Fn(f32, f32, f32) -> (f32, bool),
{
    pass.run(sums, token_out);
}

/// The pass compiled for the build's target only, as [`Dispatch::Fallback`] asks.
fn run_fallback<F>(pass: &Pass<'_, F>, sums: &mut Sums, token_out: Option<&mut [f32]>)
where
    F: Fn(f32, f32, f32) -> (f32, bool),
{
    pass.run(sums, token_out);
}

/// One run of the kernel: the batch, its inputs and settings, and the per-token surrogate `f`.
struct Pass<'a, F> {
    batch: &'a Batch,
    x: &'a KernelInputs<'a>,
    p: &'a KernelParams<'a>,
    f: F,
}

impl<F> Pass<'_, F>
where
    F: Fn(f32, f32, f32) -> (f32, bool),
{
    /// Every block of every sample, with one set of scratch buffers. Inlined into each compiled copy of
    /// the pass (see [`run_dispatched`]).
    #[inline(always)]
    fn run(&self, sums: &mut Sums, mut token_out: Option<&mut [f32]>) {
        let (batch, x) = (self.batch, self.x);
        let mut s = Scratch::new();
        for i in 0..batch.len() {
            let plan = self.plan_sample(i, token_out.is_none());
            let range = batch.range(i);
            if plan.fast {
                self.fast_sample(i, range, plan.scalar, &mut s, sums);
                continue;
            }
            if let TokenSource::Broadcast(a) = x.advantages {
                s.adv.fill(a[i] as f32);
            }
            let mut start = range.start;
            while start < range.end {
                let end = (start + BLOCK).min(range.end);
                let out = token_out.as_deref_mut().map(|o| &mut o[start..end]);
                self.general_block(i, start..end, &plan, &mut s, sums, out);
                start = end;
            }
        }
    }

    /// The sequence ratio, the OPSM decision, the scalar advantage and whether the fast path applies.
    #[inline(always)]
    fn plan_sample(&self, i: usize, no_token_out: bool) -> SamplePlan {
        let (x, p) = (self.x, self.p);
        let config = p.config;
        let sequence = config.ratio_level == RatioLevel::Sequence;
        let range = self.batch.range(i);
        let seq_log_ratio = if sequence || config.opsm_delta.is_some() {
            sequence_log_ratio(
                &x.current[range.clone()],
                &x.old[range.clone()],
                &self.batch.loss_mask()[range],
            )
        } else {
            0.0
        };
        let seq_ratio = exp_in_range((seq_log_ratio as f32).clamp(-p.bound, p.bound));
        let opsm_drop = config.opsm_delta.is_some_and(|d| -seq_log_ratio > d);
        let scalar = match x.advantages {
            TokenSource::Broadcast(a) => a[i] as f32,
            TokenSource::Values(_) => 0.0,
        };
        let fast = p.ppo
            && scalar != 0.0
            && !sequence
            && config.tis.is_none()
            && !opsm_drop
            && no_token_out;
        SamplePlan {
            seq_ratio,
            opsm_drop,
            scalar,
            fast,
        }
    }

    /// Sample `i` on the PPO fast path (see [`fast_ppo_block`]), block by block, its block totals reduced
    /// [`PENDING`] blocks at a time and added to its sums in block order; the KL and entropy sums as the
    /// general path computes them.
    #[inline(always)]
    fn fast_sample(
        &self,
        i: usize,
        range: Range<usize>,
        scalar: f32,
        s: &mut Scratch,
        sums: &mut Sums,
    ) {
        let kl_or_entropy = self.x.reference.is_some() || self.x.entropy.is_some();
        let mut pending = Pending::new();
        let mut start = range.start;
        while start < range.end {
            let end = (start + BLOCK).min(range.end);
            let t = start..end;
            let (cur, old) = (&self.x.current[t.clone()], &self.x.old[t.clone()]);
            let mask = &self.batch.loss_mask()[t.clone()];
            if kl_or_entropy {
                let m = &mut s.mask[..mask.len()];
                for (d, &k) in m.iter_mut().zip(mask) {
                    *d = f32::from(k);
                }
                self.kl_and_entropy(i, t, m, &mut s.extra[0][..mask.len()], sums);
            }
            let lanes = if scalar > 0.0 {
                fast_ppo_block::<true>(cur, old, mask, self.p.above)
            } else {
                fast_ppo_block::<false>(cur, old, mask, self.p.below)
            };
            pending.push(lanes);
            if pending.len == PENDING || end == range.end {
                for [sb, cl, sd] in pending.take_totals() {
                    sums.pg[i] -= f64::from(scalar) * sb;
                    sums.clip[i] += cl;
                    sums.ppo_kl[i] -= sd;
                }
            }
            start = end;
        }
    }

    /// One block of sample `i` on the general path: ratios, per-token losses, TIS, OPSM, the masked sums,
    /// the per-token output, KL and entropy.
    #[inline(always)]
    fn general_block(
        &self,
        i: usize,
        t: Range<usize>,
        plan: &SamplePlan,
        s: &mut Scratch,
        sums: &mut Sums,
        token_out: Option<&mut [f32]>,
    ) {
        let (x, p) = (self.x, self.p);
        let config = p.config;
        let len = t.len();
        let (cur, old) = (&x.current[t.clone()], &x.old[t.clone()]);
        let adv: &[f32] = match x.advantages {
            TokenSource::Values(v) => &v[t.clone()],
            TokenSource::Broadcast(_) => &s.adv[..len],
        };
        let m = &mut s.mask[..len];
        for (d, &k) in m.iter_mut().zip(&self.batch.loss_mask()[t.clone()]) {
            *d = f32::from(k);
        }
        let (delta, ratio) = (&mut s.delta[..len], &mut s.ratio[..len]);
        if config.ratio_level == RatioLevel::Sequence {
            sequence_ratios(cur, old, plan.seq_ratio, delta, ratio);
        } else {
            token_ratios(cur, old, p.bound, delta, ratio);
        }
        let (loss, clip) = (&mut s.loss[..len], &mut s.clip[..len]);
        if p.ppo && plan.scalar != 0.0 {
            ppo_scalar_losses(ratio, plan.scalar, p, loss, clip);
        } else {
            per_token_losses(ratio, adv, cur, &self.f, loss, clip);
        }
        if let (Some(tis), Some(rollout)) = (&config.tis, x.rollout) {
            let [w, wc, abs] = &mut s.extra;
            let (w, wc, abs) = (&mut w[..len], &mut wc[..len], &mut abs[..len]);
            tis_weights(old, &rollout[t.clone()], tis, p.bound, w, wc, abs);
            for (l, &w) in loss.iter_mut().zip(w.iter()) {
                *l *= w;
            }
            let [sw, sc, sa] = block_sums3(w, wc, abs, m);
            sums.tis_w[i] += sw;
            sums.tis_clip[i] += sc;
            sums.tis_abs[i] += sa;
        }
        if plan.opsm_drop {
            drop_negative_advantages(loss, adv);
        }
        // `delta` is summed unclamped and multiplied by the mask rather than selected, so a non-finite
        // input makes the ppo_kl sum non-finite even under mask 0.
        let [pg, cl, d] = block_sums3(loss, clip, delta, m);
        sums.pg[i] += pg;
        sums.clip[i] += cl;
        sums.ppo_kl[i] -= d;
        if let Some(out) = token_out {
            out.copy_from_slice(loss);
        }
        self.kl_and_entropy(i, t, m, &mut s.extra[0][..len], sums);
    }

    /// The KL and entropy sums of one block of sample `i`, whichever path its policy loss took: `m` is the
    /// block's mask as `f32`, `k` scratch for the KL terms.
    #[inline(always)]
    fn kl_and_entropy(&self, i: usize, t: Range<usize>, m: &[f32], k: &mut [f32], sums: &mut Sums) {
        let x = self.x;
        if let (Some(kl_cfg), Some(reference)) = (self.p.config.kl_loss, x.reference) {
            kl_terms(
                &x.current[t.clone()],
                &reference[t.clone()],
                kl_cfg.estimator,
                k,
            );
            sums.kl[i] += block_sum(k, m);
        }
        if let Some(entropy) = x.entropy {
            sums.entropy[i] += block_sum(&entropy[t], m);
        }
    }
}

/// The PPO fast path over one block: one non-zero advantage `a` for the whole sample and nothing that needs
/// the per-token loss. Then `L = -a * b` with `b = min(rho, 1 + eps_high)` for `a > 0` (`ABOVE`) and
/// `b = min(max(rho, 1 - eps_low), c)` for `a < 0` (R5 with the sign known), so the kernel sums `b` and
/// multiplies by `-a` once per block. Returns the block's partial sums of the masked `b` and the masked
/// log-ratios, and its count of clipped tokens under mask 1. Matches the general path to f32 rounding (a
/// property test checks it).
///
/// `b` and the log-ratios are summed as [`block_sum`] sums: token `k` of the block into lane `k % LANES`
/// in `f32`, the tail in order; [`Pending`] then adds the lanes and the tail in `f64`. They are summed as
/// they are computed rather than stored and read back, so that the scratch buffers stay out of the fast
/// path; on AVX-512, where the 16 lanes are one register, the 16 dependent additions of each lane then
/// overlap with the loop's other work instead of forming a chain of their own after it.
///
/// The clip flags are counted in integers. The mask is 0 or 1 (`Batch::new` checks it), so the masked
/// flags are 0 or 1, and their sum in `f32` lanes and then in `f64` is an exact integer of at most
/// `BLOCK` in any order: the count, converted once, has the same bits, without the `f32` additions and
/// the 16-term conversion and reduction per block.
#[inline(always)]
fn fast_ppo_block<const ABOVE: bool>(
    cur: &[f32],
    old: &[f32],
    mask: &[u8],
    clip: FastClip,
) -> BlockLanes {
    let len = cur.len().min(old.len()).min(mask.len());
    let n = len / LANES * LANES;
    let (mut acc_b, mut acc_d) = ([0.0f32; LANES], [0.0f32; LANES]);
    let mut flags = [0u32; LANES];
    // Software-pipelined: the first half of chunk `k` (log-ratio, clamp, exp's range reduction, the
    // log-ratio and clip sums) comes before the second half of chunk `k - 2` (exp's polynomial and the
    // ratio sum). A token's chain of dependent operations is about 50 cycles long, and the out-of-order
    // window holds only two or three chunks of it; in this order the polynomial of a chunk enters the
    // window when its inputs are ready, next to independent work. On AVX-512 that measured 12% faster with
    // a distance of one chunk and 6% more with two; SSE2, whose 16 registers the two chunks in flight
    // overfill, lost 5% to the second. Every value is computed by the same operations as in
    // `fast_ppo_token`, and each lane still receives its terms in chunk order.
    let front = |k: usize, acc_d: &mut [f32; LANES], flags: &mut [u32; LANES]| {
        let cs: &[f32; LANES] = cur[k..k + LANES].try_into().unwrap_or(&[0.0; LANES]);
        let os: &[f32; LANES] = old[k..k + LANES].try_into().unwrap_or(&[0.0; LANES]);
        let ms: &[u8; LANES] = mask[k..k + LANES].try_into().unwrap_or(&[0; LANES]);
        let mut half = HalfDone {
            r: [0.0; LANES],
            t: [0.0; LANES],
            m: [0.0; LANES],
        };
        for j in 0..LANES {
            let (r, t, m, f, d) = fast_ppo_front::<ABOVE>(cs[j], os[j], ms[j], clip);
            (half.r[j], half.t[j], half.m[j]) = (r, t, m);
            flags[j] += f;
            acc_d[j] += d;
        }
        half
    };
    if n >= 2 * LANES {
        let mut h0 = front(0, &mut acc_d, &mut flags);
        let mut h1 = front(LANES, &mut acc_d, &mut flags);
        for k in (2 * LANES..n).step_by(LANES) {
            let next = front(k, &mut acc_d, &mut flags);
            h0.finish_into(&mut acc_b);
            h0 = h1;
            h1 = next;
        }
        h0.finish_into(&mut acc_b);
        h1.finish_into(&mut acc_b);
    } else if n > 0 {
        front(0, &mut acc_d, &mut flags).finish_into(&mut acc_b);
    }
    // The tail (fewer than `LANES` tokens, only in a sample's last block) is summed in order, as
    // `block_sum` sums it.
    let (mut tail_b, mut tail_d) = ([0.0f32; LANES], [0.0f32; LANES]);
    let mut tail_flags = 0u32;
    let r = len - n;
    for j in 0..r {
        let (b, f, d) = fast_ppo_token::<ABOVE>(cur[n + j], old[n + j], mask[n + j], clip);
        (tail_b[j], tail_d[j]) = (b, d);
        tail_flags += f;
    }
    BlockLanes {
        bounded: acc_b,
        delta: acc_d,
        tail_bounded: tail_b[..r].iter().sum(),
        tail_delta: tail_d[..r].iter().sum(),
        flags: flags.iter().sum::<u32>() + tail_flags,
    }
}

/// A chunk of the fast path between [`fast_ppo_front`] and the polynomial: per lane, `exp_reduce`'s `r`
/// and `t` and the mask.
struct HalfDone {
    r: [f32; LANES],
    t: [f32; LANES],
    m: [f32; LANES],
}

impl HalfDone {
    /// Adds the masked bounded ratios `exp(bounded) * m` to the lanes of `acc`.
    #[inline(always)]
    fn finish_into(&self, acc: &mut [f32; LANES]) {
        for (a, ((&r, &t), &m)) in acc.iter_mut().zip(self.r.iter().zip(&self.t).zip(&self.m)) {
            *a += exp_finish(r, t) * m;
        }
    }
}

/// One token of the fast path up to `exp`'s range reduction: `r` and `t` of the bounded log-ratio (see
/// [`exp_reduce`]), the mask as `f32`, the masked clip flag (0 or 1) and the masked log-ratio `v`. The
/// values are masked by multiplication, so a non-finite `v` keeps the `ppo_kl` sum non-finite.
#[inline(always)]
fn fast_ppo_front<const ABOVE: bool>(
    c: f32,
    o: f32,
    k: u8,
    clip: FastClip,
) -> (f32, f32, f32, u32, f32) {
    let m = f32::from(k);
    let v = c - o;
    let clipped = if ABOVE {
        v > clip.threshold
    } else {
        v < clip.threshold
    };
    // The same selection as `if v < v_lo { v_lo } else if v > v_hi { v_hi } else { v }`, written so that
    // both comparisons read `v` (they run in parallel) rather than the second waiting for the first: the
    // exp after it is a long chain of dependent operations, and this shortens it.
    let (low, high) = (v < clip.v_lo, v > clip.v_hi);
    let bounded = if high { clip.v_hi } else { v };
    let bounded = if low { clip.v_lo } else { bounded };
    let (r, t) = exp_reduce(bounded);
    (r, t, m, u32::from(clipped) * u32::from(k), v * m)
}

/// One whole token of the fast path: the masked bounded ratio `b = exp(bounded) * m`, the masked clip flag
/// and the masked log-ratio.
#[inline(always)]
fn fast_ppo_token<const ABOVE: bool>(c: f32, o: f32, k: u8, clip: FastClip) -> (f32, u32, f32) {
    let (r, t, m, flag, d) = fast_ppo_front::<ABOVE>(c, o, k, clip);
    (exp_finish(r, t) * m, flag, d)
}

/// Log-ratios `cur - old` into `delta` and the bounded token ratios `exp(clamp(cur - old))` into `ratio`.
#[inline(always)]
fn token_ratios(cur: &[f32], old: &[f32], bound: f32, delta: &mut [f32], ratio: &mut [f32]) {
    for (((d, r), &c), &o) in delta.iter_mut().zip(ratio.iter_mut()).zip(cur).zip(old) {
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

/// Log-ratios `cur - old` into `delta`, and the sample's sequence ratio on every token of `ratio` (GSPO).
#[inline(always)]
fn sequence_ratios(cur: &[f32], old: &[f32], seq_ratio: f32, delta: &mut [f32], ratio: &mut [f32]) {
    for ((d, &c), &o) in delta.iter_mut().zip(cur).zip(old) {
        *d = c - o;
    }
    ratio.fill(seq_ratio);
}

/// PPO with one advantage `a` for the whole sample: the sign is known, so each side of the clip is one min
/// or max. The same expressions as `ppo_clip_loss`, bit for bit.
#[inline(always)]
fn ppo_scalar_losses(
    ratio: &[f32],
    a: f32,
    p: &KernelParams<'_>,
    loss: &mut [f32],
    clip: &mut [f32],
) {
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
}

/// The surrogate `f(ratio, advantage, current)` of every token, with its clip flag.
#[inline(always)]
fn per_token_losses<F>(
    ratio: &[f32],
    adv: &[f32],
    cur: &[f32],
    f: &F,
    loss: &mut [f32],
    clip: &mut [f32],
) where
    F: Fn(f32, f32, f32) -> (f32, bool),
{
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

/// TIS weights of `d = old - rollout` into `w`, their clip flags into `wc`, and the bounded `|e^d - 1|`
/// into `abs`.
#[inline(always)]
fn tis_weights(
    old: &[f32],
    rollout: &[f32],
    tis: &Tis,
    bound: f32,
    w: &mut [f32],
    wc: &mut [f32],
    abs: &mut [f32],
) {
    for (k, ((w, wc), abs)) in w
        .iter_mut()
        .zip(wc.iter_mut())
        .zip(abs.iter_mut())
        .enumerate()
    {
        let d = old[k] - rollout[k];
        let (v, c) = tis_weight(d, tis);
        *w = v;
        *wc = f32::from(u8::from(c));
        // Bounded like the ratio, so that a sum of these metrics cannot overflow.
        *abs = (exp_in_range(d.clamp(-bound, bound)) - 1.0).abs();
    }
}

/// The KL estimate of every token against the reference policy.
#[inline(always)]
fn kl_terms(cur: &[f32], reference: &[f32], estimator: KlEstimator, k: &mut [f32]) {
    for ((k, &c), &r) in k.iter_mut().zip(cur).zip(reference) {
        *k = kl(estimator, c - r);
    }
}

/// OPSM: the tokens with a negative advantage contribute no policy loss.
#[inline(always)]
fn drop_negative_advantages(loss: &mut [f32], adv: &[f32]) {
    for (l, &a) in loss.iter_mut().zip(adv) {
        if a < 0.0 {
            *l = 0.0;
        }
    }
}
