//! The body faults of the catalogue on OpenAI answers. An OpenAI body has no `meta_info` and no token ids, so
//! each fault lands on its nearest OpenAI counterpart:
//!
//! | fault | OpenAI answer |
//! |---|---|
//! | `missing-meta-info` | no `usage` and no `metadata` |
//! | `missing-logprobs` | a choice's `logprobs` is `null` |
//! | `short-logprobs` / `long-logprobs` | `by` entries fewer / more (the last repeated) in every per-token list |
//! | `null-logprob`, `nan-logprob`, `positive-logprob`, `string-logprob` | the logprob at `at`, as on `/generate` |
//! | `wrong-token-id` | the token text at `at` is another token's |
//! | `drop-channel;channel=weight_versions`, `spans-gap`, `spans-overlap`, `stale-version` | the same on `metadata.weight_versions` |
//! | `drop-channel` (routes), `routes-short`, `routes-extra-row`, `retract-routes` | the same on `sglext.routed_experts` (an `sglext` left empty goes) |
//! | `drop-channel;channel=sampling_mask`, `drop-channel;channel=top_p`, `mask-missing-token`, `two-element-logprobs`, `phantom-logprob` | none: the OpenAI answers carry no masks, top-p rows or triples |

use super::json::{Bare, Omit};
use super::response::{Answer, ChoiceLogprobs, Logprob, Metadata, Routes, Span};
use crate::faults::{BodyFault, Channel};

/// The text given to the token at `at` by `wrong-token-id`.
pub(crate) const WRONG_TOKEN: &str = "<|wrong-token|>";

/// Apply a body fault to an OpenAI answer or chunk, in one exhaustive match: each fault goes to the part of the
/// answer it lands on (the table above). Only choices that carry logprobs are touched by the logprob faults;
/// `routes_row_len` is a routes row's length (`num_hidden_layers * num_experts_per_tok`).
pub(crate) fn mutate(fault: &BodyFault, answer: &mut Answer, routes_row_len: usize) {
    match fault {
        BodyFault::MissingMetaInfo => {
            answer.usage = Omit::Absent;
            answer.metadata = Omit::Absent;
        }
        BodyFault::MissingLogprobs => {
            for choice in &mut answer.choices {
                choice.logprobs = None;
            }
        }
        BodyFault::ShortLogprobs { by } => {
            each_logprobs(answer, |logprobs| {
                Resize::Shorter(*by as usize).apply(logprobs)
            });
        }
        BodyFault::LongLogprobs { by } => {
            each_logprobs(answer, |logprobs| {
                Resize::Longer(*by as usize).apply(logprobs)
            });
        }
        BodyFault::NullLogprob { at } => each_logprobs(answer, |logprobs| {
            set_logprob(logprobs, *at, |_| Logprob::Null)
        }),
        BodyFault::NanLogprob { at, value: literal } => each_logprobs(answer, |logprobs| {
            set_logprob(logprobs, *at, |_| {
                Logprob::Bare(Bare(literal.literal().to_owned()))
            })
        }),
        BodyFault::PositiveLogprob { at, value: number } => each_logprobs(answer, |logprobs| {
            set_logprob(logprobs, *at, |_| {
                Logprob::Bare(Bare(number.as_str().to_owned()))
            })
        }),
        BodyFault::StringLogprob { at } => each_logprobs(answer, |logprobs| {
            set_logprob(logprobs, *at, |slot| Logprob::Text(slot.json_text()))
        }),
        BodyFault::WrongTokenId { at } => {
            each_logprobs(answer, |logprobs| wrong_token(logprobs, *at))
        }
        BodyFault::DropChannel {
            channel: Channel::RoutedExperts,
        } => answer.sglext = None,
        BodyFault::DropChannel {
            channel: Channel::WeightVersions,
        } => {
            if let Omit::Present(metadata) = &mut answer.metadata {
                metadata.weight_versions = None;
            }
        }
        BodyFault::ShortRoutes { by } => edit_routes(answer, |values| {
            values.truncate(values.len().saturating_sub(*by as usize * routes_row_len));
        }),
        // A row to repeat needs a row.
        BodyFault::ExtraRoute => edit_routes(answer, |values| {
            if values.len() >= routes_row_len {
                values.extend_from_within(values.len() - routes_row_len..);
            }
        }),
        BodyFault::RetractRoutes => edit_routes(answer, |values| {
            values.iter_mut().for_each(|e| *e ^= 1);
        }),
        // The last span starts one token later, as long as it stays a span.
        BodyFault::SpansGap => edit_spans(answer, |spans| {
            if let Some(span) = spans.last_mut()
                && span.start < span.end
            {
                span.start += 1;
            }
        }),
        BodyFault::SpansOverlap => edit_spans(answer, |spans| {
            if let Some(last) = spans.last()
                && last.end > 0
            {
                let again = Span {
                    start: last.end - 1,
                    ..last.clone()
                };
                spans.push(again);
            }
        }),
        BodyFault::StaleVersion => edit_spans(answer, |spans| {
            if let Some(span) = spans.last_mut() {
                "stale".clone_into(&mut span.version);
            }
        }),
        // No OpenAI counterpart: the OpenAI answers carry no sampling masks, no top-p rows and no logprob triples.
        BodyFault::DropChannel {
            channel: Channel::SamplingMask | Channel::TopP,
        }
        | BodyFault::MaskMissingToken { .. }
        | BodyFault::TwoElementLogprobs
        | BodyFault::PhantomLogprob => {}
    }
}

/// `edit` on the `logprobs` of every choice that carries them.
fn each_logprobs(answer: &mut Answer, mut edit: impl FnMut(&mut ChoiceLogprobs)) {
    for logprobs in answer
        .choices
        .iter_mut()
        .filter_map(|c| c.logprobs.as_mut())
    {
        edit(logprobs);
    }
}

/// `edit` on `metadata.weight_versions`, when the answer has them.
fn edit_spans(answer: &mut Answer, edit: impl FnOnce(&mut Vec<Span>)) {
    if let Omit::Present(Metadata {
        weight_versions: Some(spans),
        ..
    }) = &mut answer.metadata
    {
        edit(spans);
    }
}

/// `edit` on the expert ids of `sglext.routed_experts`, when the answer carries them.
fn edit_routes(answer: &mut Answer, edit: impl FnOnce(&mut Vec<i32>)) {
    if let Some(Routes(values)) = &mut answer.sglext {
        edit(values);
    }
}

/// `short-logprobs` and `long-logprobs`: every per-token list (chat's `content`, or the four completion
/// lists) `by` entries shorter, or longer by repeating its last entry.
#[derive(Debug, Clone, Copy)]
enum Resize {
    Shorter(usize),
    Longer(usize),
}

impl Resize {
    fn apply(self, logprobs: &mut ChoiceLogprobs) {
        match logprobs {
            ChoiceLogprobs::Completion {
                text_offset,
                token_logprobs,
                tokens,
                top_logprobs,
            } => {
                self.list(text_offset);
                self.list(token_logprobs);
                self.list(tokens);
                self.list(top_logprobs);
            }
            ChoiceLogprobs::Chat { content } => self.list(content),
        }
    }

    fn list<T: Clone>(self, list: &mut Vec<T>) {
        match self {
            Resize::Shorter(by) => list.truncate(list.len().saturating_sub(by)),
            Resize::Longer(by) => {
                if let Some(last) = list.last().cloned() {
                    list.extend(std::iter::repeat_n(last, by));
                }
            }
        }
    }
}

/// The logprob at `at`: chat's `content[at].logprob`, or position `at` of the completion's `token_logprobs`.
fn set_logprob(logprobs: &mut ChoiceLogprobs, at: u64, value: impl FnOnce(&Logprob) -> Logprob) {
    let at = at as usize;
    let slot = match logprobs {
        ChoiceLogprobs::Completion { token_logprobs, .. } => token_logprobs.get_mut(at),
        ChoiceLogprobs::Chat { content } => content.get_mut(at).map(|entry| &mut entry.logprob),
    };
    if let Some(slot) = slot {
        *slot = value(slot);
    }
}

/// The token at `at` is another token's: chat's `content[at]` (its `token`, and so its `bytes`), or position
/// `at` of the completion's `tokens`.
fn wrong_token(logprobs: &mut ChoiceLogprobs, at: u64) {
    let at = at as usize;
    let slot = match logprobs {
        ChoiceLogprobs::Completion { tokens, .. } => tokens.get_mut(at),
        ChoiceLogprobs::Chat { content } => content.get_mut(at).map(|entry| &mut entry.token),
    };
    if let Some(slot) = slot {
        WRONG_TOKEN.clone_into(slot);
    }
}
