//! The toy MoE router: which experts each layer routes a token to, a pure function of the context like the
//! distribution (`mock-server/MODEL.md` section 12).
//!
//! SGLang's `--enable-return-routed-experts` reports, for every token the model ran on, the `top-k` experts of
//! each MoE layer (`RoutedExpertsCapturer`, `srt/state_capturer/routed_experts.py`). The mock's router draws them
//! from the context's hash: row `p` of a sequence is the routing when the token at position `p` was the forward
//! input, so it depends on the server seed and on `tokens[..=p]` through the context hash of section 4.1, and on
//! nothing else. A test can therefore predict every row, and a trainer's replay of the routes meets the same
//! experts whichever request, turn or resume produced them.

use super::dist::{GOLDEN, context_hash, splitmix64};

/// Mixed into the context hash so that routing draws are independent of the distribution's draws.
const ROUTER_SALT: u64 = 0x524F_5554_4552_5321;

/// The MoE shape the router reports: the `hf_text_config` numbers SGLang reads (`num_hidden_layers`,
/// `num_experts_per_tok`) and the number of experts each layer has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    /// Layers per row; every layer is an MoE layer.
    pub layers: u32,
    /// Experts per layer: ids are in `0..experts`.
    pub experts: u32,
    /// Experts each layer routes a token to: entries per layer of a row.
    pub experts_per_token: u32,
}

impl Default for MoeShape {
    /// Qwen3-30B-A3B's shape (48 layers of 128 experts, 8 per token), a model RL trainers run with routing replay.
    fn default() -> MoeShape {
        MoeShape {
            layers: 48,
            experts: 128,
            experts_per_token: 8,
        }
    }
}

impl MoeShape {
    /// Entries in one row: `layers * experts_per_token`.
    pub fn row_len(&self) -> usize {
        self.layers as usize * self.experts_per_token as usize
    }
}

/// Appends the rows of positions `start..tokens.len() - 1` to `out`, each `layers * experts_per_token` expert
/// ids, layer by layer: what `meta_info.routed_experts` encodes for a sequence of `tokens` (prompt and output)
/// with `routed_experts_start_len = start`. The last token has no row: it was never a forward input.
pub fn append_routes(
    seed: u64,
    shape: &MoeShape,
    tokens: &[u32],
    start: usize,
    out: &mut Vec<i32>,
) {
    let end = tokens.len().saturating_sub(1);
    let start = start.min(end);
    out.reserve((end - start) * shape.row_len());
    let k = shape.experts_per_token as usize;
    for p in start..end {
        let h = context_hash(seed, &tokens[..=p]) ^ ROUTER_SALT;
        for layer in 0..u64::from(shape.layers) {
            let row = out.len();
            let mut r = splitmix64(h.wrapping_add((layer + 1).wrapping_mul(GOLDEN)));
            while out.len() - row < k {
                r = splitmix64(r);
                // The high 32 bits scaled to `0..experts`, as the sampler scales its draws.
                let expert = (((r >> 32) * u64::from(shape.experts)) >> 32) as i32;
                if !out[row..].contains(&expert) {
                    out.push(expert);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: MoeShape = MoeShape {
        layers: 3,
        experts: 16,
        experts_per_token: 4,
    };

    #[test]
    fn each_layer_routes_to_distinct_experts_in_range() {
        let mut out = Vec::new();
        append_routes(7, &SHAPE, &[5, 6, 7, 8, 9], 0, &mut out);
        assert_eq!(out.len(), 4 * SHAPE.row_len());
        for layer in out.chunks(4) {
            let mut sorted = layer.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 4, "{layer:?}");
            assert!(layer.iter().all(|&e| (0..16).contains(&e)));
        }
    }

    #[test]
    fn a_row_depends_on_its_prefix_only() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        append_routes(7, &SHAPE, &[5, 6, 7, 8], 0, &mut a);
        append_routes(7, &SHAPE, &[5, 6, 7, 9, 1, 2], 0, &mut b);
        let row = SHAPE.row_len();
        // Rows 0..3 are positions 0..2, whose prefixes agree.
        assert_eq!(a[..3 * row], b[..3 * row]);
        // A start skips rows without changing the others.
        let mut tail = Vec::new();
        append_routes(7, &SHAPE, &[5, 6, 7, 9, 1, 2], 2, &mut tail);
        assert_eq!(tail[..], b[2 * row..]);
        let mut other_seed = Vec::new();
        append_routes(8, &SHAPE, &[5, 6, 7, 8], 0, &mut other_seed);
        assert_ne!(a, other_seed);
    }

    #[test]
    fn a_single_token_or_a_start_at_the_end_has_no_rows() {
        let mut out = Vec::new();
        append_routes(0, &SHAPE, &[5], 0, &mut out);
        append_routes(0, &SHAPE, &[5, 6, 7], 2, &mut out);
        append_routes(0, &SHAPE, &[5, 6, 7], 9, &mut out);
        assert!(out.is_empty());
    }
}
