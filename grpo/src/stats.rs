//! Small numeric kernels: NaN-aware statistics, masked lane-parallel sums and a vectorisable `exp`.

/// Lanes for the parallel accumulators. Independent lanes let the compiler keep several additions in flight
/// (and use SIMD), which a single sequential `f64` accumulator forbids under strict IEEE semantics.
const LANES: usize = 8;

/// Mean of the non-NaN values; NaN if there are none (as `torch.nanmean`).
pub fn nanmean(xs: &[f64]) -> f64 {
    let (sum, count) = xs
        .iter()
        .filter(|x| !x.is_nan())
        .fold((0.0, 0usize), |(s, c), &x| (s + x, c + 1));
    if count == 0 {
        f64::NAN
    } else {
        sum / count as f64
    }
}

/// Unbiased (Bessel-corrected) standard deviation of the non-NaN values, as TRL's `nanstd`: NaN when fewer
/// than two values are present.
pub fn nanstd(xs: &[f64]) -> f64 {
    let mean = nanmean(xs);
    let (ss, count) = xs
        .iter()
        .filter(|x| !x.is_nan())
        .fold((0.0, 0usize), |(s, c), &x| {
            (s + (x - mean) * (x - mean), c + 1)
        });
    if count < 2 {
        f64::NAN
    } else {
        (ss / (count - 1) as f64).sqrt()
    }
}

/// `sum(x * m)` over `f32` values and a 0/1 mask, accumulated in `f64`.
pub(crate) fn masked_sum(x: &[f32], m: &[f32]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let xc = x.chunks_exact(LANES);
    let mc = m.chunks_exact(LANES);
    let (xr, mr) = (xc.remainder(), mc.remainder());
    for (xs, ms) in xc.zip(mc) {
        for j in 0..LANES {
            acc[j] += f64::from(xs[j] * ms[j]);
        }
    }
    let tail: f64 = xr.iter().zip(mr).map(|(&a, &b)| f64::from(a * b)).sum();
    acc.iter().sum::<f64>() + tail
}

/// `e^x` in `f32`, written without branches or calls so that loops over it vectorise (the standard
/// library's `exp` is a libm call per element). Cephes' `expf` range reduction and polynomial, evaluated
/// with Estrin's scheme: relative error below 2e-7 over `[-87, 88]` (checked against `f64::exp`); inputs are
/// clamped to that range, so the result is always finite.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    exp_in_range(x.clamp(-87.0, 88.0))
}

/// `e^x` for `x` already within `[-87, 88]` (the kernel clamps log-ratios to a smaller range anyway).
#[inline(always)]
pub(crate) fn exp_in_range(x: f32) -> f32 {
    let (r, t) = exp_reduce(x);
    exp_finish(r, t)
}

/// The first half of [`exp_in_range`]: `x = n ln 2 + r`, returned as `r` and `t`, whose low mantissa bits
/// hold `n`. Split from the polynomial so that a loop can interleave the two halves of different tokens.
#[inline(always)]
pub(crate) fn exp_reduce(x: f32) -> (f32, f32) {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    (r, t)
}

/// The second half of [`exp_in_range`]: `e^r 2^n` from [`exp_reduce`]'s `r` and `t`.
#[inline(always)]
pub(crate) fn exp_finish(r: f32, t: f32) -> f32 {
    // Estrin's scheme rather than Horner's: the same polynomial with a dependency chain half as long, which
    // is what limits a loop of these (the out-of-order window overlaps only a few iterations).
    let r2 = r * r;
    let r4 = r2 * r2;
    let p01 = 0.5_f32 + 1.666_666_5e-1 * r;
    let p23 = 4.166_579_6e-2_f32 + 8.333_452e-3 * r;
    let p45 = 1.398_199_9e-3_f32 + 1.987_569_1e-4 * r;
    let p = (p01 + r2 * p23) + r4 * p45;
    let y = p * r2 + (r + 1.0);
    // The low mantissa bits of `t` hold n; shift it into the exponent field.
    let bits = t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23;
    y * f32::from_bits(bits)
}

/// 1.5 * 2^23: adding it rounds to the nearest integer in the low mantissa bits, without SSE4.1.
const ROUND: f32 = 12_582_912.0;
