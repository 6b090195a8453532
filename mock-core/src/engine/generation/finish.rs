//! SGLang's finish rules for a [`Generation`]: the checks in the release's order (`Req.check_finished`,
//! `update_finish_state`), stop-string
//! matching over the newest text only, the suffix a stream must hold back, and the final text's trimming as
//! `DetokenizerManager.trim_matched_stop` does it.

use super::Generation;
use super::detok::{FORCE_STREAM_INTERVAL, holds_stop_prefix, matched_stop};
use crate::engine::StopRegex;
use crate::engine::item::{FinishReason, chunk_due};
use crate::pyfmt::str_repr;
use crate::release::FinishOrder;

/// One of the scheduler's finish checks after a token.
#[derive(Clone, Copy)]
enum Check {
    /// `len(output_ids) >= max_new_tokens`.
    Length,
    /// A stop id (EOS or `stop_token_ids`, unless `ignore_eos`).
    StopId,
    /// A stop string, then a `stop_regex` pattern.
    StopText,
}

/// The checks in the release's order (`Release::finish_order`).
fn checks(order: FinishOrder) -> [Check; 3] {
    match order {
        FinishOrder::LengthTokenText => [Check::Length, Check::StopId, Check::StopText],
        FinishOrder::LengthTextToken => [Check::Length, Check::StopText, Check::StopId],
        FinishOrder::TextTokenLength => [Check::StopText, Check::StopId, Check::Length],
    }
}

impl Generation {
    /// SGLang's finish checks: an abort marked before the step (`to_finish`), then the length, the stop ids
    /// (unless `ignore_eos`) and the stop strings and patterns in the release's order.
    pub(super) fn check_finished(&mut self, id: u32, before: (usize, Vec<u8>)) {
        if let Some(reason) = self.to_finish.clone() {
            self.finish(reason, None);
            return;
        }
        let out_len = (self.context.len() - self.prompt_len) as u32;
        let previous_len = before.0;
        let mut before = Some(before);
        for check in checks(self.params.finish_order) {
            let (reason, trimmed) = match check {
                Check::Length if out_len >= self.params.max_new_tokens => (
                    FinishReason::Length {
                        length: self.params.max_new_tokens,
                    },
                    None,
                ),
                Check::StopId if self.stop_ids.binary_search(&id).is_ok() => (
                    FinishReason::StopToken { matched: id },
                    before.take().filter(|_| !self.params.no_stop_trim),
                ),
                Check::StopText => {
                    let matched = self
                        .matched_stop_str(previous_len)
                        .map(|matched| FinishReason::StopStr { matched })
                        .or_else(|| {
                            self.stop_regex_tail()
                                .and_then(|tail| matched_stop_regex(&self.params.stop_regex, &tail))
                        });
                    match matched {
                        Some(reason) => (reason, None),
                        None => continue,
                    }
                }
                Check::Length | Check::StopId => continue,
            };
            self.finish(reason, trimmed);
            return;
        }
        self.stable_len = self.decoded.len() - self.stop_prefix_suffix_len();
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
        let mut reason = self.to_finish.clone();
        if reason.is_none() {
            for check in checks(self.params.finish_order) {
                reason = match check {
                    Check::Length => (output.len() >= self.params.max_new_tokens as usize)
                        .then_some(FinishReason::Length {
                            length: self.params.max_new_tokens,
                        }),
                    Check::StopId => self
                        .stop_ids
                        .binary_search(&id)
                        .is_ok()
                        .then_some(FinishReason::StopToken { matched: id }),
                    Check::StopText => loaded.stop_tail.as_ref().and_then(|stop_tail| {
                        let tail = stop_tail.tail(vocab, output);
                        let matched = matched_stop(&self.params.stop, &tail);
                        loaded.holds =
                            matched.is_none() && holds_stop_prefix(&self.params.stop, &tail);
                        match matched {
                            Some(matched) => Some(FinishReason::StopStr {
                                matched: matched.to_owned(),
                            }),
                            None => matched_stop_regex(&self.params.stop_regex, &tail),
                        }
                    }),
                };
                if reason.is_some() {
                    break;
                }
            }
        }
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

    /// The text of the tail window for the toy tokenizer's `stop_regex` search (`Req.tail_str`); `None` without
    /// patterns. The toy's stop strings are looked for in the text itself (`matched_stop_str`).
    fn stop_regex_tail(&self) -> Option<String> {
        if self.params.stop_regex.is_empty() {
            return None;
        }
        let output = &self.context[self.prompt_len..];
        let window = self.stop_window.unwrap_or(0).min(output.len());
        Some(
            self.model
                .tokenizer()
                .decode(&output[output.len() - window..], false),
        )
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

/// The first `stop_regex` pattern, in order, that `re.search` finds in `tail`: a match is reported as a stop
/// string's (`FINISHED_MATCHED_REGEX` writes the same `{"type": "stop", "matched": pattern}`, and the
/// detokenizer trims the output at the pattern's first occurrence as text, if any). A pattern the engine gives
/// up on is 0.5.23's abort of an invalid pattern.
fn matched_stop_regex(patterns: &[StopRegex], tail: &str) -> Option<FinishReason> {
    patterns.iter().find_map(|regex| match regex.search(tail) {
        Ok(true) => Some(FinishReason::StopStr {
            matched: regex.pattern().to_owned(),
        }),
        Ok(false) => None,
        Err(err) => Some(FinishReason::Abort {
            message: format!("invalid stop_regex {}: {err}", str_repr(regex.pattern())),
            status_code: Some(400),
            err_type: Some("BadRequestError".to_owned()),
        }),
    })
}
