//! SGLang's finish rules for a [`Generation`]: the checks in `Req.check_finished` order, stop-string
//! matching over the newest text only, the suffix a stream must hold back, and the final text's trimming as
//! `DetokenizerManager.trim_matched_stop` does it.

use super::Generation;
use crate::engine::item::FinishReason;

impl Generation {
    /// SGLang's finish checks, in its order: length, then stop tokens (unless `ignore_eos`), then stop strings.
    pub(super) fn check_finished(&mut self, id: u32, before: (usize, Vec<u8>)) {
        let out_len = (self.context.len() - self.prompt_len) as u32;
        if out_len >= self.params.max_new_tokens {
            self.finish(
                FinishReason::Length {
                    length: self.params.max_new_tokens,
                },
                None,
            );
        } else if self.stop_ids.binary_search(&id).is_ok() {
            let trimmed = (!self.params.no_stop_trim).then_some(before);
            self.finish(FinishReason::StopToken { matched: id }, trimmed);
        } else if let Some(matched) = self.matched_stop_str(before.0) {
            self.finish(FinishReason::StopStr { matched }, None);
        } else {
            self.stable_len = self.decoded.len() - self.stop_prefix_suffix_len();
        }
    }

    /// The first stop string (in list order) that now occurs in the output, looking only at text that could contain
    /// an occurrence ending in the newest token.
    fn matched_stop_str(&self, previous_len: usize) -> Option<String> {
        if self.max_stop_len == 0 {
            return None;
        }
        let mut from = previous_len.saturating_sub(self.max_stop_len - 1);
        while !self.decoded.is_char_boundary(from) {
            from -= 1;
        }
        let window = &self.decoded[from..];
        self.params
            .stop
            .iter()
            .find(|s| !s.is_empty() && window.contains(s.as_str()))
            .cloned()
    }

    /// Length of the longest suffix of the output that is a proper prefix of a stop string: text a stream must hold
    /// back, since the next token may complete the stop string and the text would then be trimmed.
    fn stop_prefix_suffix_len(&self) -> usize {
        let mut longest = 0;
        for stop in &self.params.stop {
            for (len, _) in stop.char_indices().skip(1) {
                if len > longest && self.decoded.ends_with(&stop[..len]) {
                    longest = len;
                }
            }
        }
        longest
    }

    /// Records the finish reason and fixes the final text: everything decoded, except that a stop token is trimmed
    /// (the text as it was before it, `trim_to`) and a stop string is cut before (or, with `no_stop_trim`, after) its
    /// first occurrence.
    pub(super) fn finish(&mut self, reason: FinishReason, trim_to: Option<(usize, Vec<u8>)>) {
        let text = match (&reason, trim_to) {
            (_, Some((len, pending))) => {
                let mut text = self.decoded[..len].to_owned();
                text.push_str(&String::from_utf8_lossy(&pending));
                text
            }
            (FinishReason::StopStr { matched }, None) => {
                let at = self
                    .decoded
                    .find(matched.as_str())
                    .unwrap_or(self.decoded.len());
                let cut = if self.params.no_stop_trim {
                    at + matched.len()
                } else {
                    at
                };
                self.decoded[..cut.min(self.decoded.len())].to_owned()
            }
            _ => {
                let mut text = std::mem::take(&mut self.decoded);
                text.push_str(&String::from_utf8_lossy(&self.pending));
                text
            }
        };
        self.pending.clear();
        self.decoded.clear();
        self.stable_len = text.len();
        self.final_text = Some(text);
        self.finish = Some(reason);
    }
}
