//! What goes into the ledger for one item: its entry from the engine's generation, and the change a fault made
//! to its answer on the way out (`WITNESS.md` section 2.1).

use crate::config::SglangVersion;
use crate::engine::{FinishReason, GREEDY_TEMPERATURE, Generation, PlannedItem};
use crate::faults::{BodyFault, Channel, Fault, StreamFault};
use crate::wire::{VersionEvent, reported_version, tile, weight_version_spans};

use super::ledger::{Entry, Finish, Route, RoutesEdit, SentLogprobs, SentRoutes, Span, Supports};

/// How a request was served: what every entry of its items shares.
#[derive(Debug, Clone, Copy)]
pub struct Served<'a> {
    pub route: Route,
    pub stream: bool,
    pub version: SglangVersion,
    /// The fault that acted on the request's answer, if any (a body, stream or engine fault; an HTTP fault
    /// answers before anything is served).
    pub fault: Option<&'a Fault>,
    /// The server reports logprobs at temperature 1 whatever the request's (`--return-original-logprob`).
    pub original_logprobs: bool,
}

impl Served<'_> {
    /// The entry of item `index`, generated as `generation` (finished, or cut off when a stream stopped before
    /// it ended), with the weights now (their version and number) and the updates it lived through.
    pub fn entry(
        &self,
        index: usize,
        item: &PlannedItem,
        generation: &Generation,
        (current_version, current_weights): (&str, u64),
        events: &[VersionEvent],
        num_retractions: u32,
    ) -> Entry {
        let output_ids = generation.output_ids();
        let finished = generation.finish_reason().is_some();
        let spans = weight_version_spans(events, current_version, output_ids.len());
        // What the answer reported: spans go out on a finished object of a release that has them.
        let reported = (finished && self.version.weight_version_spans).then_some(&spans[..]);
        let weight_version = reported_version(reported, current_version);
        let prompt_ids = generation.input_ids().to_vec();
        // Routes go out on an item's last object, and on the OpenAI routes only the first choice's.
        let routes_sent = finished && (self.route == Route::Generate || index == 0);
        let routed_experts = generation
            .routes_from()
            .filter(|_| routes_sent)
            .map(|start_len| SentRoutes {
                start_len,
                rows: (prompt_ids.len() + output_ids.len())
                    .saturating_sub(1)
                    .saturating_sub(start_len),
                edit: RoutesEdit::None,
            });
        let sampling_supports = generation
            .sampling_mask()
            .filter(|_| self.route == Route::Generate)
            .map(|(_, rows)| {
                let mut supports = Supports::default();
                (0..rows.len()).for_each(|i| supports.push(rows.ids(i)));
                supports
            });
        let mut entry = Entry {
            finish_reason: generation.finish_reason().map(finish_type),
            num_retractions,
            output_ids: output_ids.to_vec(),
            output_logprobs: item
                .request
                .return_logprob
                .then(|| SentLogprobs::numbers(generation.output_logprobs())),
            weight_versions: weights_spans(
                events,
                (current_version, current_weights),
                output_ids.len(),
            ),
            routed_experts,
            sampling_supports,
            ..self.blank(index, item, prompt_ids, weight_version)
        };
        self.apply_fault(&mut entry);
        entry
    }

    /// The entry of item `index`, which never ran: aborted in the waiting queue, before prefill, or refused by
    /// the scheduler; no output.
    pub fn never_ran(&self, index: usize, item: &PlannedItem, weight_version: &str) -> Entry {
        let mut entry = Entry {
            finish_reason: Some(Finish::Abort),
            output_logprobs: item.request.return_logprob.then(SentLogprobs::default),
            weight_versions: vec![Span {
                version: weight_version.to_owned(),
                start: 0,
                end: 0,
                // No token came from any weights.
                weights: 0,
            }],
            ..self.blank(index, item, item.request.input_ids.clone(), weight_version)
        };
        self.apply_fault(&mut entry);
        entry
    }

    /// An entry of item `index` with its prompt and no output, channel or fault yet.
    fn blank(
        &self,
        index: usize,
        item: &PlannedItem,
        prompt_ids: Vec<u32>,
        weight_version: &str,
    ) -> Entry {
        Entry {
            seq: 0,
            rid: item.rid.clone(),
            route: self.route,
            stream: self.stream,
            index,
            draw: item.request.draw,
            finish_reason: None,
            weight_version: weight_version.to_owned(),
            num_retractions: 0,
            prompt_ids,
            output_ids: Vec::new(),
            return_logprob: item.request.return_logprob,
            logprob_temperature: self.logprob_temperature(item),
            output_logprobs: None,
            weight_versions: Vec::new(),
            routed_experts: None,
            sampling_supports: None,
            fault: None,
        }
    }

    /// The temperature of the logprobs item reports: 1 for a greedy request (SGLang's rewrite to temperature 1
    /// and top-k 1) or under `--return-original-logprob`, else the request's.
    fn logprob_temperature(&self, item: &PlannedItem) -> f64 {
        let temperature = item.request.params.temperature;
        if self.original_logprobs || temperature < GREEDY_TEMPERATURE {
            1.0
        } else {
            temperature
        }
    }

    /// Records the fault that changed the answer, and what it changed, as the catalogue defines each kind on
    /// each route (`mock-server/README.md`, "Fault catalogue"). A stream written as deltas takes a body fault
    /// on every chunk; the entry follows the final object, which is exact for the whole answers and the
    /// cumulative streams SGLang sends by default.
    fn apply_fault(&self, entry: &mut Entry) {
        let Some(fault) = self.fault else { return };
        let changed = match fault {
            Fault::Body(body) => self.apply_body_fault(body, entry),
            Fault::Stream(stream) => match stream {
                // A stall delays the answer without changing a byte of it.
                StreamFault::Stall { .. } => false,
                // The answer did not arrive whole: cut, broken, repeated or ended by an error frame.
                StreamFault::TruncatedBody { .. }
                | StreamFault::TruncateStream { .. }
                | StreamFault::CutStream { .. }
                | StreamFault::MalformedChunk { .. }
                | StreamFault::DuplicateChunk { .. }
                | StreamFault::ErrorEvent { .. } => true,
            },
            // Aborts happen in the engine: what the answer says is what was generated.
            Fault::Engine(_) => false,
            // An HTTP fault answers before any item is served.
            Fault::Http(_) => false,
        };
        if changed {
            entry.fault = Some(fault.to_string());
        }
    }

    /// The columns of `entry` as `fault` sent them; whether the fault changed the answer.
    fn apply_body_fault(&self, fault: &BodyFault, entry: &mut Entry) -> bool {
        let native = self.route == Route::Generate;
        let last = |len: usize, at: u64| (len > 0).then(|| (at as usize).min(len - 1));
        match fault {
            BodyFault::MissingMetaInfo => {
                // On the OpenAI routes it removes `usage` and `metadata` (the weight versions).
                if native {
                    entry.output_logprobs = None;
                    entry.routed_experts = None;
                    entry.sampling_supports = None;
                }
            }
            BodyFault::MissingLogprobs => entry.output_logprobs = None,
            BodyFault::ShortLogprobs { by } => {
                if let Some(lps) = &mut entry.output_logprobs {
                    // One fault acts on an answer, so the list has no `null` yet.
                    let keep = lps.len().saturating_sub(*by as usize);
                    lps.values.truncate(keep);
                }
            }
            BodyFault::LongLogprobs { by } => {
                if let Some(lps) = &mut entry.output_logprobs {
                    let extra = lps.values.last().copied().unwrap_or(-0.5);
                    lps.values.extend(std::iter::repeat_n(extra, *by as usize));
                }
            }
            BodyFault::NullLogprob { at } => {
                if let Some(lps) = &mut entry.output_logprobs
                    && let Some(i) = last(lps.len(), *at)
                {
                    lps.values[i] = f32::NAN;
                    if let Err(j) = lps.nulls.binary_search(&i) {
                        lps.nulls.insert(j, i);
                    }
                }
            }
            BodyFault::NanLogprob { at, value } => {
                if let Some(lps) = &mut entry.output_logprobs
                    && let Some(i) = last(lps.len(), *at)
                {
                    lps.values[i] = match value.literal() {
                        "Infinity" => f32::INFINITY,
                        "-Infinity" => f32::NEG_INFINITY,
                        _ => f32::NAN,
                    };
                }
            }
            BodyFault::PositiveLogprob { at, value } => {
                if let Some(lps) = &mut entry.output_logprobs
                    && let Some(i) = last(lps.len(), *at)
                {
                    lps.values[i] = value.as_str().parse().unwrap_or(f32::NAN);
                }
            }
            // The same number, written as a string; another token's id (or text) at `at`; entries of two
            // elements: the values are what they were, the fault says how their form changed.
            BodyFault::StringLogprob { .. }
            | BodyFault::WrongTokenId { .. }
            | BodyFault::TwoElementLogprobs => {}
            BodyFault::PhantomLogprob => {
                if native
                    && entry.output_ids.is_empty()
                    && let Some(lps) = &mut entry.output_logprobs
                {
                    lps.values.push(-0.5);
                }
            }
            BodyFault::DropChannel { channel } => match channel {
                Channel::RoutedExperts => entry.routed_experts = None,
                Channel::SamplingMask => entry.sampling_supports = None,
                // The spans stay: they are which version made each token, sent or not. The ledger does not keep
                // the top-p rows.
                Channel::WeightVersions | Channel::TopP => {}
            },
            BodyFault::ShortRoutes { by } => {
                if let Some(routes) = &mut entry.routed_experts {
                    // Counted from position 0, as the fault cuts them.
                    routes.rows = routes.rows.saturating_sub(*by as usize);
                    routes.edit = RoutesEdit::Short;
                }
            }
            BodyFault::ExtraRoute => {
                if let Some(routes) = entry.routed_experts.as_mut().filter(|r| r.rows > 0) {
                    routes.rows += 1;
                    routes.edit = RoutesEdit::ExtraRow;
                }
            }
            BodyFault::RetractRoutes => {
                if let Some(routes) = &mut entry.routed_experts {
                    routes.edit = RoutesEdit::Retracted;
                }
            }
            // The spans the answer carried were edited; the entry keeps which version made each token.
            BodyFault::SpansGap | BodyFault::SpansOverlap | BodyFault::StaleVersion => {}
            BodyFault::MaskMissingToken { at } => {
                if let Some(supports) = &mut entry.sampling_supports
                    && let Some(i) = last(entry.output_ids.len(), *at)
                {
                    supports.remove(i, entry.output_ids[i]);
                }
            }
        }
        true
    }
}

/// `finish_reason.type` of a finished generation.
fn finish_type(reason: &FinishReason) -> Finish {
    match reason {
        FinishReason::Length { .. } => Finish::Length,
        FinishReason::StopToken { .. } | FinishReason::StopStr { .. } => Finish::Stop,
        FinishReason::Abort { .. } => Finish::Abort,
    }
}

/// The ledger's spans of an item's output: which weights made which tokens, split wherever the version or the
/// weights changed (the wire's spans split on the version alone, `weight_version_spans`). Never empty: an item
/// without output has one span `[0, 0)`.
fn weights_spans(events: &[VersionEvent], current: (&str, u64), tokens: usize) -> Vec<Span> {
    let changes = events
        .iter()
        .map(|e| ((&*e.old_version, e.old_weights), e.tokens));
    tile(changes, current, tokens)
        .into_iter()
        .map(|((version, weights), start, end)| Span {
            version: version.to_owned(),
            start,
            end,
            weights,
        })
        .collect()
}
