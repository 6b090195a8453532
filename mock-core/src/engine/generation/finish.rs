//! SGLang's finish rules for a [`Generation`]: the checks in `Req.check_finished` order, stop-string
//! matching over the newest text only, the suffix a stream must hold back, and the final text's trimming as
//! `DetokenizerManager.trim_matched_stop` does it.

use super::Generation;
use super::detok::{FORCE_STREAM_INTERVAL, holds_stop_prefix, matched_stop};
use crate::engine::item::{FinishReason, chunk_due};

impl Generation {
    /// SGLang's finish checks, in its order: an abort marked before the step (`to_finish`), then length, then
    /// stop tokens (unless `ignore_eos`), then stop strings.
    pub(super) fn check_finished(&mut self, id: u32, before: (usize, Vec<u8>)) {
        let out_len = (self.context.len() - self.prompt_len) as u32;
        if let Some(reason) = self.to_finish.as_ref() {
            self.finish(reason.clone(), None);
        } else if out_len >= self.params.max_new_tokens {
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

    /// The finish checks over a loaded tokenizer, in the same order, with SGLang's stop-string tail (`MODEL.md`
    /// section 13.4); a sample that runs on hands its output to the detokenizer when the scheduler would.
    pub(super) fn check_finished_loaded(&mut self, id: u32) {
        let (Some(loaded), Some(vocab)) = (self.loaded.as_deref_mut(), self.model.tokenizer().hf())
        else {
            return;
        };
        loaded.detok.push(id);
        let output = &self.context[self.prompt_len..];
        let reason = if let Some(reason) = &self.to_finish {
            Some(reason.clone())
        } else if output.len() >= self.params.max_new_tokens as usize {
            Some(FinishReason::Length {
                length: self.params.max_new_tokens,
            })
        } else if self.stop_ids.binary_search(&id).is_ok() {
            Some(FinishReason::StopToken { matched: id })
        } else if let Some(stop_tail) = &loaded.stop_tail {
            let tail = stop_tail.tail(vocab, output);
            let matched = matched_stop(&self.params.stop, &tail);
            loaded.holds = matched.is_none() && holds_stop_prefix(&self.params.stop, &tail);
            matched.map(|matched| FinishReason::StopStr {
                matched: matched.to_owned(),
            })
        } else {
            None
        };
        match reason {
            Some(reason) => self.finish(reason, None),
            None => {
                // A stream skips a due chunk while the tail holds a stop string's start; the periodic
                // output of a whole answer does not look (`SchedulerOutputStreamer.accept`, 0.5.23).
                let due = match loaded.stream_interval {
                    Some(interval) => chunk_due(output.len(), interval) && !loaded.holds,
                    None => output.len().is_multiple_of(FORCE_STREAM_INTERVAL),
                };
                if due {
                    loaded.detok.call(vocab);
                }
            }
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
        if let (Some(loaded), Some(vocab)) =
            (self.loaded.as_deref_mut(), self.model.tokenizer().hf())
        {
            let no_stop_trim = self.params.no_stop_trim;
            let trim_stop_id = matches!(reason, FinishReason::StopToken { .. }) && !no_stop_trim;
            let stop_str = match &reason {
                FinishReason::StopStr { matched } => Some(matched.as_str()),
                FinishReason::Length { .. }
                | FinishReason::StopToken { .. }
                | FinishReason::Abort { .. } => None,
            };
            loaded
                .detok
                .finish(vocab, trim_stop_id, stop_str, no_stop_trim);
            self.final_text = Some(loaded.detok.text().to_owned());
            self.finish = Some(reason);
            return;
        }
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
