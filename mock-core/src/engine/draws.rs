//! The sampler's fresh randomness for samples without a seed (MODEL.md section 8.3): SGLang draws each request
//! anew unless it is seeded, so identical unseeded requests must not give identical answers; the mock numbers
//! them instead, so that a run stays reproducible and every answer can be recomputed.
//!
//! A sample's *draw* is the number of earlier unseeded samples the server ran with the same prompt at the same
//! position of their request: 0 for the first, then 1, 2, ... Draw 0 is the key every such sample had before
//! draws were counted, so a prompt sent once answers as it always did; the `n` requests of a trainer's group
//! (slime sends one request per sample) get draws 0 to `n - 1`, and the same sequence of requests gets the same
//! draws in every run, whatever other prompts were served in between.

use std::collections::HashMap;
use std::sync::Mutex;

use super::plan::GeneratePlan;
use crate::model::mix;

/// The seed of the prompt hash draws are counted by (MODEL.md 8.3's `prompt_hash`).
const PROMPT_HASH_START: u64 = 0x5052_4F4D_5054;

/// MODEL.md 8.3's `prompt_hash`: a fold of [`mix`] over the prompt's ids.
pub(crate) fn prompt_hash(ids: &[u32]) -> u64 {
    ids.iter()
        .fold(PROMPT_HASH_START, |h, &id| mix(h, u64::from(id)))
}

/// How many unseeded samples a server has drawn for each prompt and position: the state behind [`Draws::assign`].
/// One per server (and per oracle, which keeps the same history); `/admin/reset` empties it.
#[derive(Debug, Default)]
pub struct Draws {
    /// `(prompt_hash, sample_index)` to the number of samples drawn so far.
    counts: Mutex<HashMap<(u64, u64), u64>>,
}

impl Draws {
    /// Gives each item of `plan` that samples without a seed its draw, in order, and counts it. Items with a
    /// `sampling_seed` (every item under `--enable-deterministic-inference`, which seeds them all) keep draw 0
    /// and count nothing, and so do items the scheduler refused, which never sample.
    pub fn assign(&self, plan: &mut GeneratePlan) {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for item in &mut plan.items {
            let request = &mut item.request;
            if request.params.sampling_seed.is_some() || item.abort.is_some() {
                continue;
            }
            let count = counts
                .entry((prompt_hash(&request.input_ids), request.sample_index))
                .or_insert(0);
            request.draw = *count;
            *count += 1;
        }
    }

    /// Forgets every draw: the next unseeded sample of any prompt is its draw 0 again.
    pub fn clear(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::plan::PlannedItem;
    use crate::engine::{ItemRequest, Refusal};

    fn planned(ids: &[u32], sample_index: u64, seed: Option<u64>) -> PlannedItem {
        let mut request = ItemRequest::new(ids.to_vec());
        request.sample_index = sample_index;
        request.params.sampling_seed = seed;
        PlannedItem {
            rid: String::new(),
            rid_is_fresh: true,
            request,
            top_logprobs_num: 0,
            token_ids_logprob_requested: false,
            stream_interval: 1,
            abort: None,
            length_as_float: false,
        }
    }

    fn plan(items: Vec<PlannedItem>) -> GeneratePlan {
        GeneratePlan {
            is_batch: items.len() > 1,
            stream: false,
            return_text_in_logprobs: false,
            return_prompt_token_ids: false,
            items,
            parallel_sample_num: 1,
        }
    }

    fn draws_of(draws: &Draws, items: Vec<PlannedItem>) -> Vec<u64> {
        let mut plan = plan(items);
        draws.assign(&mut plan);
        plan.items.iter().map(|i| i.request.draw).collect()
    }

    #[test]
    fn each_prompt_and_position_counts_its_own_draws() {
        let draws = Draws::default();
        let a = || planned(&[1, 2, 3], 0, None);
        assert_eq!(draws_of(&draws, vec![a()]), [0]);
        assert_eq!(draws_of(&draws, vec![a()]), [1]);
        // Another prompt, and the same prompt at another position, start at 0; a batch counts item by item.
        assert_eq!(draws_of(&draws, vec![planned(&[1, 2], 0, None)]), [0]);
        assert_eq!(
            draws_of(&draws, vec![planned(&[1, 2, 3], 1, None), a(), a()]),
            [0, 2, 3]
        );
        draws.clear();
        assert_eq!(draws_of(&draws, vec![a()]), [0]);
    }

    #[test]
    fn seeded_and_refused_items_neither_draw_nor_count() {
        let draws = Draws::default();
        let mut refused = planned(&[7, 8], 0, None);
        refused.abort = Some(Refusal {
            message: "refused".into(),
            err_type: None,
        });
        assert_eq!(
            draws_of(&draws, vec![planned(&[7, 8], 0, Some(5)), refused]),
            [0, 0]
        );
        assert_eq!(draws_of(&draws, vec![planned(&[7, 8], 0, None)]), [0]);
        assert_eq!(draws_of(&draws, vec![planned(&[7, 8], 0, None)]), [1]);
    }
}
