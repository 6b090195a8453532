//! Generation: turns one validated request item into tokens, logprobs, text and a finish reason, step by step.
//!
//! Parsing (`request`) validates and normalises requests into [`ItemRequest`]s; this module trusts them. Both the server
//! (streamed or not) and the oracle drive a [`Generation`], so what the server sends and what a test expects come
//! from the same code. The rules follow SGLang: finish checks in `Req.check_finished` order, stop-string trimming as
//! `DetokenizerManager.trim_matched_stop` does it, logprobs under `softmax(logits / T)` before top-k / top-p / min-p
//! filtering, and `[None] + raw[:-1]` input logprobs.
//!
//! Penalties (`frequency_penalty`, `presence_penalty`, `repetition_penalty`) and `logit_bias` are validated by the
//! request layer and deliberately not applied: the model's distribution stays a pure function of the context, which
//! is what lets a test recompute every logprob. The finish rules are in `finish`.

mod detok;
mod finish;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use self::detok::{Detokenizer, StopTail};
use super::draws::prompt_hash;
use crate::engine::StopRegex;
use crate::engine::item::{
    FinishReason, GREEDY_TEMPERATURE, ItemRequest, LogprobEntry, MaskRows, Rows,
    SamplingLogprobsMode, SamplingParams,
};
use crate::model::{Distribution, Logits, Model, Pick, Policy, Tokenizer, Turn, mix, unit};

/// Output tokens a generation makes room for when it starts (at most its `max_new_tokens`).
const RESERVED_TOKENS: usize = 256;
/// Text bytes per output token to make room for: a word piece is a space and up to three syllables.
const BYTES_PER_TOKEN: usize = 6;

/// The most kept ids slime's top-p replay reports for one answer (a mock-only bound, as
/// `request::MAX_LOGPROB_ENTRIES`): 80 MB of rows.
pub const MAX_TOP_P_IDS: usize = 20_000_000;

/// The state of one sample being generated.
#[derive(Clone, Debug)]
pub struct Generation {
    model: Arc<Model>,
    /// The weights the steps use, read at `policy_epoch`; a step re-reads them when the model's epoch moves on, so
    /// a generation paused across a weight update continues under the new weights, as SGLang's does.
    policy: Arc<Policy>,
    policy_epoch: u64,
    params: SamplingParams,
    return_logprob: bool,
    top_logprobs_num: usize,
    token_ids_logprob: Vec<u32>,
    /// Temperature used for sampling after the greedy rewrite.
    temperature: f64,
    /// Temperature the reported logprobs are computed under.
    report_temperature: f64,
    top_k: Option<u32>,
    /// Whether every step without a mask or a forced token can take [`Logits::pick_plain`]: temperature 1 for
    /// sampling and reporting, no filter, and no top or token-id logprobs.
    plain: bool,
    /// Sorted EOS and stop ids: what `min_new_tokens` masks.
    min_tokens_mask: Vec<u32>,
    /// Sorted stop ids that end generation, EOS included; empty with `ignore_eos`.
    stop_ids: Vec<u32>,
    max_stop_len: usize,
    /// The tail window of the stop conditions in tokens (`stop_window`); `None` without any.
    stop_window: Option<usize>,
    key: u64,
    forced_output: Vec<u32>,
    /// `return_sampling_mask`: each step records the sampler's support.
    sampling_mask: Option<SamplingLogprobsMode>,
    mask_rows: MaskRows,
    /// slime's top-p replay: each step's kept ids (`None` unless asked for).
    top_p_rows: Option<MaskRows>,
    /// Whether the reported logprobs are renormalised over the kept ids (top-p replay of a sampled request).
    renormalise: bool,
    routes_from: Option<usize>,

    /// Prompt followed by output.
    context: Vec<u32>,
    prompt_len: usize,
    turn: Turn,

    output_logprobs: Vec<f32>,
    output_top: Rows,
    output_ids_lp: Rows,
    input_logprobs: Vec<Option<f32>>,
    input_top: Rows,
    input_ids_lp: Rows,
    logprob_start: usize,

    /// Output text decoded so far, up to the last complete character.
    decoded: String,
    /// Bytes of an incomplete UTF-8 character at the end of the output.
    pending: Vec<u8>,
    /// Length of the prefix of `decoded` that is safe to stream (no trailing start of a stop string).
    stable_len: usize,
    /// The final text, set when the generation finishes.
    final_text: Option<String>,
    finish: Option<FinishReason>,
    /// How the next step ends the generation whatever its token (SGLang's `Req.to_finish`, which the finish
    /// check reads first): an abort from outside ([`Generation::abort_after_step`]).
    to_finish: Option<FinishReason>,
    /// With a loaded tokenizer, the text comes from SGLang's detokenizer instead of `decoded` and `pending`.
    loaded: Option<Box<LoadedText>>,
}

/// The text state of a generation over a loaded tokenizer (`MODEL.md` section 13.4).
#[derive(Clone, Debug)]
struct LoadedText {
    detok: Detokenizer,
    /// The stop strings' tail window; `None` without stop strings.
    stop_tail: Option<StopTail>,
    /// Whether the tail holds a stop string's start, so the scheduler sends nothing this step.
    holds: bool,
    /// The request's `stream_interval` when it streams.
    stream_interval: Option<u32>,
}

impl Generation {
    /// Starts generating `item` with `model`: computes the input logprobs and, for `max_new_tokens: 0`, finishes at
    /// once with a length reason.
    pub fn new(model: Arc<Model>, item: ItemRequest) -> Generation {
        let ItemRequest {
            input_ids,
            params,
            return_logprob,
            logprob_start,
            top_logprobs_num,
            token_ids_logprob,
            sample_index,
            draw,
            forced_output,
            sampling_mask,
            top_p_token_ids,
            routes_from,
            stream_interval,
        } = item;
        let greedy = params.temperature < GREEDY_TEMPERATURE;
        let temperature = if greedy { 1.0 } else { params.temperature };
        let top_k = if greedy { Some(1) } else { params.top_k };
        let report_temperature = if model.config().return_original_logprob {
            1.0
        } else {
            temperature
        };

        // SGLang's greedy path (`is_all_greedy`: every `top_k` at most 1, which temperature 0 sets), and its
        // original-logprob mode, report the model's logprobs as they are.
        let renormalise =
            top_p_token_ids && top_k != Some(1) && !model.config().return_original_logprob;
        let vocab = model.config().vocab_size;
        let eos = model.tokenizer().eos_token_ids();
        let mut min_tokens_mask: Vec<u32> = eos
            .iter()
            .chain(&params.stop_token_ids)
            .copied()
            .filter(|&id| id < vocab)
            .collect();
        min_tokens_mask.sort_unstable();
        min_tokens_mask.dedup();
        let stop_ids = if params.ignore_eos {
            Vec::new()
        } else {
            min_tokens_mask.clone()
        };
        let max_stop_len = params.stop.iter().map(String::len).max().unwrap_or(0);
        let stop_window = stop_window(model.tokenizer(), &params);
        let plain = temperature == 1.0
            && report_temperature == 1.0
            && top_k.is_none()
            && params.top_p >= 1.0
            && params.min_p <= 0.0
            && sampling_mask.is_none()
            && !top_p_token_ids
            && (!return_logprob || (top_logprobs_num == 0 && token_ids_logprob.is_empty()));

        let prompt_hash = prompt_hash(&input_ids);
        // A seed, else the sample's draw: the first draw of a prompt keeps the key it always had.
        let seed_part = match (params.sampling_seed, draw) {
            (Some(seed), _) => mix(0x5345_4544, seed),
            (None, 0) => u64::MAX,
            (None, draw) => mix(0x4452_4157, draw),
        };
        let key = mix(
            mix(mix(model.config().seed, prompt_hash), seed_part),
            sample_index,
        );

        let prompt_len = input_ids.len();
        let turn = Turn::of(model.tokenizer(), &input_ids);
        let (policy, policy_epoch) = model.policy_with_epoch();
        let loaded = model.tokenizer().hf().map(|_| {
            Box::new(LoadedText {
                detok: Detokenizer::new(&input_ids, params.skip_special_tokens),
                stop_tail: StopTail::new(stop_window),
                holds: false,
                stream_interval,
            })
        });
        let max_new_tokens = params.max_new_tokens;
        // Room for the answer up front, so that a short answer allocates once and a long one regrows a few
        // times rather than from empty; bounded, so that a large limit on an answer that ends early holds no
        // memory it does not use.
        let expected = (max_new_tokens as usize).min(RESERVED_TOKENS);
        let mut context = input_ids;
        context.reserve(expected);
        let mut generation = Generation {
            model,
            policy,
            policy_epoch,
            params,
            return_logprob,
            top_logprobs_num: if return_logprob { top_logprobs_num } else { 0 },
            token_ids_logprob: if return_logprob {
                token_ids_logprob
            } else {
                Vec::new()
            },
            temperature,
            report_temperature,
            top_k,
            plain,
            min_tokens_mask,
            stop_ids,
            max_stop_len,
            stop_window,
            key,
            forced_output,
            sampling_mask,
            mask_rows: MaskRows::default(),
            top_p_rows: top_p_token_ids.then(MaskRows::default),
            renormalise,
            routes_from,
            context,
            prompt_len,
            turn,
            output_logprobs: Vec::with_capacity(if return_logprob { expected } else { 0 }),
            output_top: Rows::default(),
            output_ids_lp: Rows::default(),
            input_logprobs: Vec::new(),
            input_top: Rows::default(),
            input_ids_lp: Rows::default(),
            logprob_start: logprob_start.min(prompt_len),
            decoded: String::with_capacity(expected * BYTES_PER_TOKEN),
            pending: Vec::new(),
            stable_len: 0,
            final_text: None,
            finish: None,
            to_finish: None,
            loaded,
        };
        if return_logprob {
            generation.compute_input_logprobs();
        }
        if max_new_tokens == 0 {
            generation.finish(FinishReason::Length { length: 0 }, None);
        }
        generation
    }

    fn compute_input_logprobs(&mut self) {
        let start = self.logprob_start;
        if start >= self.prompt_len {
            return;
        }
        let tokenizer = self.model.tokenizer();
        let mut top = Vec::with_capacity(self.top_logprobs_num);
        for p in start..self.prompt_len {
            if p == start {
                // SGLang reports `[None] + raw[:-1]`: the first covered position never has a value.
                self.input_logprobs.push(None);
                continue;
            }
            let context = &self.context[..p];
            let logits = self
                .model
                .logits(&self.policy, context, Turn::of(tokenizer, context));
            let dist = Distribution::new(
                &logits,
                self.model.config().vocab_size,
                self.report_temperature,
                &[],
            );
            self.input_logprobs
                .push(Some(dist.logprob(self.context[p]) as f32));
            push_top(&dist, self.top_logprobs_num, &mut top, &mut self.input_top);
            push_token_ids(&dist, &self.token_ids_logprob, &mut self.input_ids_lp);
        }
    }

    /// Generates one token, unless the generation has finished. Returns whether it has finished.
    pub fn step(&mut self) -> bool {
        if self.finish.is_some() {
            return true;
        }
        let out_len = self.context.len() - self.prompt_len;
        // `min_new_tokens` masks EOS and the stop ids until that many tokens are out.
        let masking = out_len < self.params.min_new_tokens as usize;
        let epoch = self.model.policy_epoch();
        if epoch != self.policy_epoch {
            (self.policy, self.policy_epoch) = self.model.policy_with_epoch();
        }
        let logits = self.model.logits(&self.policy, &self.context, self.turn);
        let forced = self.forced_output.get(out_len).copied();
        let u = unit(mix(self.key, out_len as u64));
        let plain = match forced {
            None if self.plain && !masking => logits.pick_plain(self.model.config().vocab_size, u),
            _ => None,
        };
        let id = match plain {
            Some((id, p)) => {
                // The logarithm only when it is reported: a step without logprobs skips it.
                if self.return_logprob {
                    self.output_logprobs.push(p.ln() as f32);
                }
                id
            }
            None => self.pick(&logits, masking, forced, u),
        };

        self.context.push(id);
        self.turn = self.turn.then(self.model.tokenizer(), id);
        if self.loaded.is_some() {
            self.check_finished_loaded(id);
        } else {
            let before = (self.decoded.len(), self.pending.clone());
            self.push_text(id);
            self.check_finished(id, before);
        }
        // A hot nucleus (a temperature above 1 with `top_p` near 1) can keep most of the vocabulary at every
        // token; past the bound the item ends, without the rows, rather than the server's memory.
        if let Some(rows) = self
            .top_p_rows
            .as_mut()
            .filter(|rows| rows.total_ids() > MAX_TOP_P_IDS)
        {
            *rows = MaskRows::default();
            self.abort(
                &format!(
                    "top-p replay rows of more than {MAX_TOP_P_IDS} ids in one answer; the mock stops there"
                ),
                Some(400),
                Some("BadRequestError"),
            );
        }
        self.finish.is_some()
    }

    /// A step's token and logprobs through the whole distribution: any temperature, mask, filter, forced
    /// token, or top / token-id logprobs.
    fn pick(&mut self, logits: &Logits, masking: bool, forced: Option<u32>, u: f64) -> u32 {
        let masked: &[u32] = if masking { &self.min_tokens_mask } else { &[] };
        let vocab = self.model.config().vocab_size;
        let dist = Distribution::new(logits, vocab, self.temperature, masked);
        let filters = (self.top_k, self.params.top_p, self.params.min_p);
        let pick = match forced {
            Some(forced) => Pick::forced(forced),
            None => dist.pick(filters.0, filters.1, filters.2, u),
        };
        if self.sampling_mask.is_some() {
            match forced {
                // A scripted token is forced decoding: the sampler had that one choice, as under a grammar that
                // allows a single token.
                Some(id) => self.mask_rows.push_row(&[id], &[0.0]),
                None => {
                    // The support and its logprobs under the sampling distribution, whatever the report
                    // temperature.
                    let (mut ids, mut logprobs) = (Vec::new(), Vec::new());
                    let selected = dist.support(filters, pick.id, &mut ids, &mut logprobs);
                    match self.sampling_mask {
                        Some(SamplingLogprobsMode::Support) => {
                            self.mask_rows.push_row(&ids, &logprobs)
                        }
                        _ => self.mask_rows.push_row(&ids, &[selected]),
                    }
                }
            }
        }
        // slime's top-p replay: the kept prefix, and the logprobs renormalised over it. A scripted token is not
        // sampled: its row is itself and its logprobs are the model's.
        let kept = match (&mut self.top_p_rows, forced) {
            (None, _) => None,
            (Some(rows), Some(id)) => {
                rows.push_row(&[id], &[]);
                None
            }
            (Some(rows), None) => {
                let kept = dist.kept_prefix(filters);
                let mut ids = Vec::new();
                kept.ids(&mut ids);
                rows.push_row(&ids, &[]);
                Some(kept)
            }
        };
        if let Some(kept) = kept.filter(|_| self.renormalise && self.return_logprob) {
            self.output_logprobs.push(kept.logprob_of(&pick) as f32);
            if self.top_logprobs_num > 0 {
                let mut top = Vec::with_capacity(self.top_logprobs_num);
                kept.top(self.top_logprobs_num, &mut top);
                push_entries(&top, &mut self.output_top);
            }
            if !self.token_ids_logprob.is_empty() {
                let row: Vec<(u32, f64)> = self
                    .token_ids_logprob
                    .iter()
                    .map(|&id| (id, kept.logprob(id)))
                    .collect();
                push_entries(&row, &mut self.output_ids_lp);
            }
        } else if self.return_logprob {
            // Borrowed, not moved: the distribution is a few hundred bytes and this runs once per token.
            let untempered;
            let report = if self.report_temperature == self.temperature {
                &dist
            } else {
                untempered = Distribution::new(logits, vocab, self.report_temperature, masked);
                &untempered
            };
            self.output_logprobs.push(report.logprob_of(&pick) as f32);
            let mut top = Vec::with_capacity(self.top_logprobs_num);
            push_top(
                report,
                self.top_logprobs_num,
                &mut top,
                &mut self.output_top,
            );
            push_token_ids(report, &self.token_ids_logprob, &mut self.output_ids_lp);
        }
        pick.id
    }

    /// Generates until the generation finishes.
    pub fn run_to_end(&mut self) {
        while !self.step() {}
    }

    /// Makes one more step, whose token is kept, and ends the generation with an abort whatever that token
    /// is: an abort from outside, which SGLang's scheduler reads at its next iteration and marks `to_finish`
    /// ("The request will still run one decode forward pass", `Scheduler.abort_request`), and which its finish
    /// check reads before the length, stop and EOS rules (`update_finish_state`). Does nothing once finished.
    pub fn abort_after_step(&mut self, message: &str) {
        if self.finish.is_none() {
            self.to_finish = Some(FinishReason::Abort {
                message: message.to_owned(),
                status_code: None,
                err_type: None,
            });
            self.step();
        }
    }

    /// Ends a running generation with an abort reason, keeping its partial output. Does nothing once finished.
    pub fn abort(&mut self, message: &str, status_code: Option<u16>, err_type: Option<&str>) {
        if self.finish.is_none() {
            let reason = FinishReason::Abort {
                message: message.to_owned(),
                status_code,
                err_type: err_type.map(str::to_owned),
            };
            self.finish(reason, None);
        }
    }

    /// Decodes token `id` onto the output text, keeping an incomplete trailing UTF-8 character aside.
    fn push_text(&mut self, id: u32) {
        let skip = self.params.skip_special_tokens;
        let Some(tokenizer) = self.model.tokenizer().toy() else {
            return;
        };
        // Almost every token is ASCII on its own; only bytes of multi-byte characters need the UTF-8 buffer.
        if !(self.pending.is_empty() && tokenizer.push_ascii(id, skip, &mut self.decoded)) {
            tokenizer.push_bytes(id, skip, &mut self.pending);
            drain_complete_utf8(&mut self.pending, &mut self.decoded);
        }
    }

    /// Whether the generation has finished.
    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// Why the generation finished, once it has.
    pub fn finish_reason(&self) -> Option<&FinishReason> {
        self.finish.as_ref()
    }

    /// Number of prompt tokens.
    pub fn prompt_tokens(&self) -> usize {
        self.prompt_len
    }

    /// The prompt's token ids.
    pub fn input_ids(&self) -> &[u32] {
        &self.context[..self.prompt_len]
    }

    /// The generated token ids, untrimmed: a final EOS or stop token is included.
    pub fn output_ids(&self) -> &[u32] {
        &self.context[self.prompt_len..]
    }

    /// The prompt and the generated ids after it, as one sequence (what a prefix cache keys).
    pub fn tokens(&self) -> &[u32] {
        &self.context
    }

    /// The text to report now: once finished, the final trimmed text; before that, the prefix that is safe to
    /// stream. Each value extends the one before.
    pub fn text(&self) -> &str {
        match (&self.final_text, &self.loaded) {
            (Some(text), _) => text,
            (None, Some(loaded)) => loaded.detok.text(),
            (None, None) => &self.decoded[..self.stable_len],
        }
    }

    /// Whether the end of the output could be the start of a stop string, so the text holds some of it back:
    /// SGLang then skips a due stream chunk (`check_match_stop_str_prefix`).
    pub fn holds_stop_prefix(&self) -> bool {
        self.final_text.is_none()
            && match &self.loaded {
                Some(loaded) => loaded.holds,
                None => self.stable_len < self.decoded.len(),
            }
    }

    /// The logprob of each output token (empty unless logprobs were requested).
    pub fn output_logprobs(&self) -> &[f32] {
        &self.output_logprobs
    }

    /// The top list of each output position (none unless `top_logprobs_num` > 0).
    pub fn output_top_logprobs(&self) -> &Rows {
        &self.output_top
    }

    /// The logprobs of the requested `token_ids_logprob` at each output position (none if the list is empty).
    pub fn output_token_ids_logprobs(&self) -> &Rows {
        &self.output_ids_lp
    }

    /// Input logprobs for prompt positions `logprob_start..`; the first is always `None`.
    pub fn input_logprobs(&self) -> &[Option<f32>] {
        &self.input_logprobs
    }

    /// The prompt ids the input logprobs are for.
    pub fn input_logprob_ids(&self) -> &[u32] {
        if self.return_logprob {
            &self.context[self.logprob_start..self.prompt_len]
        } else {
            &[]
        }
    }

    /// The top lists of prompt positions `logprob_start + 1..` (the first position has none).
    pub fn input_top_logprobs(&self) -> &Rows {
        &self.input_top
    }

    /// The logprobs of the requested ids at prompt positions `logprob_start + 1..`.
    pub fn input_token_ids_logprobs(&self) -> &Rows {
        &self.input_ids_lp
    }

    /// The sampling masks of the output tokens, and their logprobs mode (`None` unless asked for).
    pub fn sampling_mask(&self) -> Option<(SamplingLogprobsMode, &MaskRows)> {
        self.sampling_mask.map(|mode| (mode, &self.mask_rows))
    }

    /// The kept ids of slime's top-p replay, one row per output token (`None` unless asked for).
    pub fn top_p_token_ids(&self) -> Option<&MaskRows> {
        self.top_p_rows.as_ref()
    }

    /// The routed experts of positions `routes_from..len - 1` of prompt and output, flat (`None` unless asked
    /// for): what `meta_info.routed_experts` encodes once the generation has finished.
    pub fn routed_experts(&self) -> Option<Vec<i32>> {
        self.routes_from.map(|from| {
            let mut out = Vec::new();
            self.model.append_routes(&self.context, from, &mut out);
            out
        })
    }

    /// `routed_experts_start_len` when the routes were asked for (and the server returns them).
    pub fn routes_from(&self) -> Option<usize> {
        self.routes_from
    }

    /// The number of top logprobs per position.
    pub fn top_logprobs_num(&self) -> usize {
        self.top_logprobs_num
    }

    /// The ids whose logprobs are reported at every position.
    pub fn token_ids_logprob(&self) -> &[u32] {
        &self.token_ids_logprob
    }
}

/// Appends the top `n` of `dist` to `out` as a row of `f32` entries, using `scratch` for the `f64` values; no
/// row when `n` is 0.
fn push_top(dist: &Distribution<'_>, n: usize, scratch: &mut Vec<(u32, f64)>, out: &mut Rows) {
    if n == 0 {
        return;
    }
    scratch.clear();
    dist.top(n, scratch);
    push_entries(scratch, out);
}

/// Appends `(id, logprob)` pairs to `out` as one row.
fn push_entries(entries: &[(u32, f64)], out: &mut Rows) {
    out.entries_mut()
        .extend(entries.iter().map(|&(id, lp)| LogprobEntry {
            logprob: lp as f32,
            id,
        }));
    out.end_row();
}

/// Appends the logprobs of `ids` under `dist` to `out` as a row; no row when `ids` is empty.
fn push_token_ids(dist: &Distribution<'_>, ids: &[u32], out: &mut Rows) {
    if ids.is_empty() {
        return;
    }
    for &id in ids {
        out.push(LogprobEntry {
            logprob: dist.logprob(id) as f32,
            id,
        });
    }
    out.end_row();
}

/// Moves the complete UTF-8 prefix of `pending` onto `decoded`, replacing invalid sequences with U+FFFD exactly as
/// `String::from_utf8_lossy` would, and leaves an incomplete trailing character in `pending`.
fn drain_complete_utf8(pending: &mut Vec<u8>, decoded: &mut String) {
    let mut start = 0;
    loop {
        match std::str::from_utf8(&pending[start..]) {
            Ok(s) => {
                decoded.push_str(s);
                pending.clear();
                return;
            }
            Err(e) => {
                let valid = start + e.valid_up_to();
                // The bytes up to `valid` were just checked to be UTF-8.
                decoded.push_str(std::str::from_utf8(&pending[start..valid]).unwrap_or_default());
                match e.error_len() {
                    Some(len) => {
                        decoded.push('\u{FFFD}');
                        start = valid + len;
                    }
                    None => {
                        pending.drain(..valid);
                        return;
                    }
                }
            }
        }
    }
}

/// Runs `item` to the end: what a non-streamed request returns.
pub fn generate(model: Arc<Model>, item: ItemRequest) -> Generation {
    let mut generation = Generation::new(model, item);
    generation.run_to_end();
    generation
}

/// `Req._stop_match_tail_len` of a sample without speculative decoding: the tail of the output its stop
/// strings and `stop_regex` patterns are looked for in is one token longer than the longest stop string's
/// encoding (`normalize` counts its ids) or the longest pattern's match (`get_max_seq_length`, in characters),
/// whichever is longer. `None` where nothing reads it: without stop strings or patterns, and over the toy
/// tokenizer without patterns (its stop strings are looked for in the text itself, `matched_stop_str`), so that
/// no sample encodes its stop strings for nothing.
fn stop_window(tokenizer: &Tokenizer, params: &SamplingParams) -> Option<usize> {
    if params.stop_regex.is_empty() && (params.stop.is_empty() || tokenizer.hf().is_none()) {
        return None;
    }
    let stop = params
        .stop
        .iter()
        .map(|s| tokenizer.encode_plain(s).len() as u64)
        .max()
        .unwrap_or(0);
    let regex = params
        .stop_regex
        .iter()
        .map(StopRegex::max_len)
        .max()
        .unwrap_or(0);
    Some(usize::try_from(stop.max(regex).saturating_add(1)).unwrap_or(usize::MAX))
}
