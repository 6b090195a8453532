//! Generation: turns one validated request item into tokens, logprobs, text and a finish reason, step by step.
//!
//! The HTTP layer validates and normalises requests into [`ItemRequest`]s; this module trusts them. Both the server
//! (streamed or not) and the oracle drive a [`Generation`], so what the server sends and what a test expects come
//! from the same code. The rules follow SGLang: finish checks in `Req.check_finished` order, stop-string trimming as
//! `DetokenizerManager.trim_matched_stop` does it, logprobs under `softmax(logits / T)` before top-k / top-p / min-p
//! filtering, and `[None] + raw[:-1]` input logprobs.
//!
//! Penalties (`frequency_penalty`, `presence_penalty`, `repetition_penalty`) and `logit_bias` are validated by the
//! request layer and deliberately not applied: the model's distribution stays a pure function of the context, which
//! is what lets a test recompute every logprob.

use std::sync::Arc;

use crate::model::{Model, Pick, count_since_special, mix, unit};

/// Temperatures below this are greedy, as in SGLang (`top_k = 1`, `temperature = 1`).
pub const GREEDY_TEMPERATURE: f64 = 1e-6;

/// The sampling parameters the engine uses, already validated and with SGLang's defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Most tokens to generate.
    pub max_new_tokens: u32,
    /// EOS and stop tokens are masked until this many tokens exist.
    pub min_new_tokens: u32,
    /// Softmax temperature; below [`GREEDY_TEMPERATURE`] means greedy.
    pub temperature: f64,
    /// Nucleus threshold in `(0, 1]`.
    pub top_p: f64,
    /// Keep only the `k` most probable ids; `None` is the whole vocabulary (SGLang's `-1`).
    pub top_k: Option<u32>,
    /// Keep ids whose probability is at least `min_p` times the largest.
    pub min_p: f64,
    /// Stop strings, checked on the decoded output in list order.
    pub stop: Vec<String>,
    /// Token ids that end generation like EOS does.
    pub stop_token_ids: Vec<u32>,
    /// Disables EOS *and* `stop_token_ids` (stop strings still apply).
    pub ignore_eos: bool,
    /// Leave special tokens out of the output text.
    pub skip_special_tokens: bool,
    /// Keep a matched stop string (or stop token) in the output text.
    pub no_stop_trim: bool,
    /// Seeds the sampler for this request; without it the sampler is seeded from the prompt.
    pub sampling_seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams {
            max_new_tokens: 128,
            min_new_tokens: 0,
            temperature: 1.0,
            top_p: 1.0,
            top_k: None,
            min_p: 0.0,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            skip_special_tokens: true,
            no_stop_trim: false,
            sampling_seed: None,
        }
    }
}

/// One sample to generate: a prompt, its sampling parameters and what to report.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemRequest {
    /// The prompt's token ids (never empty).
    pub input_ids: Vec<u32>,
    /// Validated sampling parameters.
    pub params: SamplingParams,
    /// Report logprobs at all.
    pub return_logprob: bool,
    /// First prompt position covered by the input logprobs; `input_ids.len()` means none.
    pub logprob_start: usize,
    /// How many top logprobs to report per position (0 for none).
    pub top_logprobs_num: usize,
    /// Ids whose logprob to report at every position (empty for none).
    pub token_ids_logprob: Vec<u32>,
    /// Position of this sample in the flattened request (prompt-major), so that the samples of `n > 1` or of a
    /// batch of equal prompts differ while each stays reproducible.
    pub sample_index: u64,
    /// Tokens the generation must produce first, instead of sampling (a scripted answer, usually ending with
    /// `<|im_end|>`). Each still reports its true logprob under the model, and the finish checks apply to it as
    /// to a sampled token; once they are used up, generation samples as usual.
    pub forced_output: Vec<u32>,
}

impl ItemRequest {
    /// A request for `input_ids` with default parameters and no logprobs.
    pub fn new(input_ids: Vec<u32>) -> ItemRequest {
        let logprob_start = input_ids.len();
        ItemRequest {
            input_ids,
            params: SamplingParams::default(),
            return_logprob: false,
            logprob_start,
            top_logprobs_num: 0,
            token_ids_logprob: Vec::new(),
            sample_index: 0,
            forced_output: Vec::new(),
        }
    }
}

/// A token id with its log-probability, as in a top-logprob list. The logprob is `-inf` for an id the
/// distribution masks (SGLang then writes `null`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogprobEntry {
    /// Natural-log probability, rounded to `f32` as SGLang's float32 logprobs are.
    pub logprob: f32,
    /// The token id.
    pub id: u32,
}

/// Why a generation ended, in the shapes of SGLang's `BaseFinishReason.to_json()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_new_tokens` reached: `{"type":"length","length":max_new_tokens}`.
    Length {
        /// The request's `max_new_tokens` (not the count generated).
        length: u32,
    },
    /// EOS or a `stop_token_ids` hit: `{"type":"stop","matched":id}`.
    StopToken {
        /// The id that ended generation.
        matched: u32,
    },
    /// A stop string: `{"type":"stop","matched":"..."}`.
    StopStr {
        /// The stop string that matched.
        matched: String,
    },
    /// Aborted while running: `{"type":"abort","message":...,"status_code":...,"err_type":...}`.
    Abort {
        /// Human-readable reason, `"Aborted"` for user and weight-update aborts.
        message: String,
        /// HTTP status for server-side error aborts, `None` for user aborts.
        status_code: Option<u16>,
        /// Error type for server-side error aborts, `None` for user aborts.
        err_type: Option<String>,
    },
}

/// The state of one sample being generated.
#[derive(Clone, Debug)]
pub struct Generation {
    model: Arc<Model>,
    params: SamplingParams,
    return_logprob: bool,
    top_logprobs_num: usize,
    token_ids_logprob: Vec<u32>,
    /// Temperature used for sampling after the greedy rewrite.
    temperature: f64,
    /// Temperature the reported logprobs are computed under.
    report_temperature: f64,
    top_k: Option<u32>,
    /// Sorted EOS and stop ids: what `min_new_tokens` masks.
    min_tokens_mask: Vec<u32>,
    /// Sorted stop ids that end generation, EOS included; empty with `ignore_eos`.
    stop_ids: Vec<u32>,
    max_stop_len: usize,
    key: u64,
    forced_output: Vec<u32>,

    /// Prompt followed by output.
    context: Vec<u32>,
    prompt_len: usize,
    since_special: usize,

    output_logprobs: Vec<f32>,
    output_top: Vec<LogprobEntry>,
    output_ids_lp: Vec<LogprobEntry>,
    input_logprobs: Vec<Option<f32>>,
    input_top: Vec<LogprobEntry>,
    input_ids_lp: Vec<LogprobEntry>,
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
            forced_output,
        } = item;
        let greedy = params.temperature < GREEDY_TEMPERATURE;
        let temperature = if greedy { 1.0 } else { params.temperature };
        let top_k = if greedy { Some(1) } else { params.top_k };
        let report_temperature = if model.config().return_original_logprob {
            1.0
        } else {
            temperature
        };

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

        let prompt_hash = input_ids
            .iter()
            .fold(0x5052_4F4D_5054u64, |h, &id| mix(h, u64::from(id)));
        let seed_part = params
            .sampling_seed
            .map_or(u64::MAX, |s| mix(0x5345_4544, s));
        let key = mix(
            mix(mix(model.config().seed, prompt_hash), seed_part),
            sample_index,
        );

        let prompt_len = input_ids.len();
        let since_special = count_since_special(model.tokenizer(), &input_ids);
        let max_new_tokens = params.max_new_tokens;
        let mut generation = Generation {
            model,
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
            min_tokens_mask,
            stop_ids,
            max_stop_len,
            key,
            forced_output,
            context: input_ids,
            prompt_len,
            since_special,
            output_logprobs: Vec::new(),
            output_top: Vec::new(),
            output_ids_lp: Vec::new(),
            input_logprobs: Vec::new(),
            input_top: Vec::new(),
            input_ids_lp: Vec::new(),
            logprob_start: logprob_start.min(prompt_len),
            decoded: String::new(),
            pending: Vec::new(),
            stable_len: 0,
            final_text: None,
            finish: None,
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
                .logits(context, count_since_special(tokenizer, context));
            let dist = crate::model::Distribution::new(
                &logits,
                self.model.config().vocab_size,
                self.report_temperature,
                &[],
            );
            self.input_logprobs
                .push(Some(dist.logprob(self.context[p]) as f32));
            push_top(&dist, self.top_logprobs_num, &mut top, &mut self.input_top);
            for &id in &self.token_ids_logprob {
                self.input_ids_lp.push(LogprobEntry {
                    logprob: dist.logprob(id) as f32,
                    id,
                });
            }
        }
    }

    /// Generates one token, unless the generation has finished. Returns whether it has finished.
    pub fn step(&mut self) -> bool {
        if self.finish.is_some() {
            return true;
        }
        let out_len = self.context.len() - self.prompt_len;
        let masked: &[u32] = if out_len < self.params.min_new_tokens as usize {
            &self.min_tokens_mask
        } else {
            &[]
        };
        let logits = self.model.logits(&self.context, self.since_special);
        let vocab = self.model.config().vocab_size;
        let dist = crate::model::Distribution::new(&logits, vocab, self.temperature, masked);
        let pick = match self.forced_output.get(out_len) {
            Some(&forced) => Pick::forced(forced),
            None => {
                let u = unit(mix(self.key, out_len as u64));
                dist.pick(self.top_k, self.params.top_p, self.params.min_p, u)
            }
        };
        let id = pick.id;

        if self.return_logprob {
            // Borrowed, not moved: the distribution is a few hundred bytes and this runs once per token.
            let untempered;
            let report = if self.report_temperature == self.temperature {
                &dist
            } else {
                untempered = crate::model::Distribution::new(
                    &logits,
                    vocab,
                    self.report_temperature,
                    masked,
                );
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
            for &tid in &self.token_ids_logprob {
                self.output_ids_lp.push(LogprobEntry {
                    logprob: report.logprob(tid) as f32,
                    id: tid,
                });
            }
        }

        self.context.push(id);
        if self.model.tokenizer().is_special(id) {
            self.since_special = 0;
        } else {
            self.since_special += 1;
        }
        let before = (self.decoded.len(), self.pending.clone());
        self.push_text(id);
        self.check_finished(id, before);
        self.finish.is_some()
    }

    /// Generates until the generation finishes.
    pub fn run_to_end(&mut self) {
        while !self.step() {}
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
        let tokenizer = self.model.tokenizer();
        // Almost every token is ASCII on its own; only bytes of multi-byte characters need the UTF-8 buffer.
        if !(self.pending.is_empty() && tokenizer.push_ascii(id, skip, &mut self.decoded)) {
            tokenizer.push_bytes(id, skip, &mut self.pending);
            drain_complete_utf8(&mut self.pending, &mut self.decoded);
        }
    }

    /// SGLang's finish checks, in its order: length, then stop tokens (unless `ignore_eos`), then stop strings.
    fn check_finished(&mut self, id: u32, before: (usize, Vec<u8>)) {
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
    fn finish(&mut self, reason: FinishReason, trim_to: Option<(usize, Vec<u8>)>) {
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

    /// The text to report now: once finished, the final trimmed text; before that, the prefix that is safe to
    /// stream. Each value extends the one before.
    pub fn text(&self) -> &str {
        match &self.final_text {
            Some(text) => text,
            None => &self.decoded[..self.stable_len],
        }
    }

    /// Whether the end of the output could be the start of a stop string, so the text holds some of it back:
    /// SGLang then skips a due stream chunk (`check_match_stop_str_prefix`).
    pub fn holds_stop_prefix(&self) -> bool {
        self.final_text.is_none() && self.stable_len < self.decoded.len()
    }

    /// The logprob of each output token (empty unless logprobs were requested).
    pub fn output_logprobs(&self) -> &[f32] {
        &self.output_logprobs
    }

    /// Top logprobs of each output position, `top_logprobs_num` per position, flattened.
    pub fn output_top_logprobs(&self) -> &[LogprobEntry] {
        &self.output_top
    }

    /// Logprobs of the requested `token_ids_logprob` at each output position, flattened.
    pub fn output_token_ids_logprobs(&self) -> &[LogprobEntry] {
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

    /// Top logprobs of prompt positions `logprob_start + 1..`, flattened (the first position has none).
    pub fn input_top_logprobs(&self) -> &[LogprobEntry] {
        &self.input_top
    }

    /// Logprobs of the requested ids at prompt positions `logprob_start + 1..`, flattened.
    pub fn input_token_ids_logprobs(&self) -> &[LogprobEntry] {
        &self.input_ids_lp
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

/// Appends the top `n` of `dist` to `out` as `f32` entries, using `scratch` for the `f64` values.
fn push_top(
    dist: &crate::model::Distribution<'_>,
    n: usize,
    scratch: &mut Vec<(u32, f64)>,
    out: &mut Vec<LogprobEntry>,
) {
    if n == 0 {
        return;
    }
    scratch.clear();
    dist.top(n, scratch);
    out.extend(scratch.iter().map(|&(id, lp)| LogprobEntry {
        logprob: lp as f32,
        id,
    }));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelConfig;

    fn model() -> Arc<Model> {
        Arc::new(Model::new(ModelConfig::default()).unwrap())
    }

    fn item(prompt: &str, edit: impl FnOnce(&mut ItemRequest)) -> ItemRequest {
        let m = model();
        let mut item = ItemRequest::new(m.tokenizer().encode(prompt));
        item.return_logprob = true;
        edit(&mut item);
        item
    }

    #[test]
    fn same_request_same_output_and_logprobs_are_the_models() {
        let m = model();
        let req = item("The capital of France is", |i| i.params.max_new_tokens = 64);
        let a = generate(m.clone(), req.clone());
        let b = generate(m.clone(), req.clone());
        assert_eq!(a.output_ids(), b.output_ids());
        assert_eq!(a.output_logprobs(), b.output_logprobs());
        assert_eq!(a.output_ids().len(), a.output_logprobs().len());
        let mut context = req.input_ids.clone();
        for (&id, &lp) in a.output_ids().iter().zip(a.output_logprobs()) {
            let expected = m.distribution(&context, 1.0, &[]).logprob(id);
            assert_eq!(lp, expected as f32);
            assert!(lp.is_finite() && lp <= 0.0);
            context.push(id);
        }
    }

    #[test]
    fn sample_index_and_sampling_seed_change_the_sample() {
        let m = model();
        let base = item("Hello", |i| i.params.max_new_tokens = 16);
        let out = |edit: &dyn Fn(&mut ItemRequest)| {
            let mut req = base.clone();
            edit(&mut req);
            generate(m.clone(), req).output_ids().to_vec()
        };
        let first = out(&|_| {});
        assert_ne!(first, out(&|r| r.sample_index = 1));
        assert_ne!(first, out(&|r| r.params.sampling_seed = Some(3)));
        assert_eq!(
            out(&|r| r.params.sampling_seed = Some(3)),
            out(&|r| r.params.sampling_seed = Some(3))
        );
    }

    #[test]
    fn length_finish_reports_max_new_tokens() {
        let g = generate(
            model(),
            item("Hi", |i| {
                i.params.max_new_tokens = 5;
                i.params.ignore_eos = true;
            }),
        );
        assert_eq!(g.output_ids().len(), 5);
        assert_eq!(g.finish_reason(), Some(&FinishReason::Length { length: 5 }));
        assert_eq!(g.text(), g.model.tokenizer().decode(g.output_ids(), true));
    }

    #[test]
    fn max_new_tokens_zero_finishes_at_once() {
        let g = Generation::new(
            model(),
            item("Hi there", |i| {
                i.params.max_new_tokens = 0;
                i.logprob_start = 0;
            }),
        );
        assert!(g.is_finished());
        assert!(g.output_ids().is_empty() && g.text().is_empty());
        assert_eq!(g.finish_reason(), Some(&FinishReason::Length { length: 0 }));
        assert_eq!(g.input_logprobs().len(), g.prompt_tokens());
        assert_eq!(g.input_logprobs()[0], None);
        assert!(
            g.input_logprobs()[1..]
                .iter()
                .all(|lp| lp.is_some_and(|v| v <= 0.0))
        );
    }

    #[test]
    fn eos_ends_generation_and_is_kept_in_ids_but_not_text() {
        // Long budgets at temperature 1 end on <|im_end|> well before 2,000 tokens.
        let m = model();
        let g = generate(
            m.clone(),
            item("Tell me", |i| i.params.max_new_tokens = 2000),
        );
        let eos = m.tokenizer().im_end_id();
        assert_eq!(
            g.finish_reason(),
            Some(&FinishReason::StopToken { matched: eos })
        );
        assert_eq!(*g.output_ids().last().unwrap(), eos);
        assert!(!g.text().contains("<|im_end|>"));
        let ids = g.output_ids();
        assert_eq!(g.text(), m.tokenizer().decode(&ids[..ids.len() - 1], true));
    }

    #[test]
    fn min_new_tokens_masks_eos() {
        let m = model();
        let plain = generate(
            m.clone(),
            item("Tell me", |i| i.params.max_new_tokens = 2000),
        );
        let n = plain.output_ids().len() as u32;
        let g = generate(
            m.clone(),
            item("Tell me", |i| {
                i.params.max_new_tokens = 4000;
                i.params.min_new_tokens = n + 50;
            }),
        );
        assert!(g.output_ids().len() as u32 >= n + 50);
        let eos = m.tokenizer().eos_token_ids();
        assert!(
            g.output_ids()[..(n + 49) as usize]
                .iter()
                .all(|id| !eos.contains(id))
        );
    }

    #[test]
    fn stop_strings_trim_before_or_after_the_match() {
        let m = model();
        let free = generate(
            m.clone(),
            item("Once upon", |i| {
                i.params.max_new_tokens = 40;
                i.params.ignore_eos = true;
            }),
        );
        // Pick a stop string from the middle of the free-running text.
        let full = free.text().to_owned();
        let stop = full[10..14].to_owned();
        let at = full.find(&stop).unwrap();
        for no_stop_trim in [false, true] {
            let g = generate(
                m.clone(),
                item("Once upon", |i| {
                    i.params.max_new_tokens = 40;
                    i.params.ignore_eos = true;
                    i.params.stop = vec!["never-there".into(), stop.clone()];
                    i.params.no_stop_trim = no_stop_trim;
                }),
            );
            assert_eq!(
                g.finish_reason(),
                Some(&FinishReason::StopStr {
                    matched: stop.clone()
                })
            );
            let want = if no_stop_trim {
                &full[..at + stop.len()]
            } else {
                &full[..at]
            };
            assert_eq!(g.text(), want);
            // Ids are never trimmed: they run to the token that completed the stop string.
            assert!(free.output_ids().starts_with(g.output_ids()));
        }
    }

    #[test]
    fn stop_token_ids_end_generation_unless_ignore_eos() {
        let m = model();
        let free = generate(
            m.clone(),
            item("Go", |i| {
                i.params.max_new_tokens = 30;
                i.params.ignore_eos = true;
            }),
        );
        let target = free.output_ids()[7];
        let g = generate(
            m.clone(),
            item("Go", |i| {
                i.params.max_new_tokens = 30;
                i.params.stop_token_ids = vec![target];
            }),
        );
        let pos = free
            .output_ids()
            .iter()
            .position(|&id| id == target)
            .unwrap();
        assert_eq!(g.output_ids(), &free.output_ids()[..=pos]);
        assert_eq!(
            g.finish_reason(),
            Some(&FinishReason::StopToken { matched: target })
        );
        assert_eq!(
            g.text(),
            m.tokenizer().decode(&free.output_ids()[..pos], true)
        );
        let ignored = generate(
            m,
            item("Go", |i| {
                i.params.max_new_tokens = 30;
                i.params.stop_token_ids = vec![target];
                i.params.ignore_eos = true;
            }),
        );
        assert_eq!(ignored.output_ids(), free.output_ids());
    }

    #[test]
    fn streamed_text_only_grows_and_ends_at_the_final_text() {
        let m = model();
        let free = generate(
            m.clone(),
            item("Once upon", |i| {
                i.params.max_new_tokens = 60;
                i.params.ignore_eos = true;
            }),
        );
        let stop = free.text()[20..23].to_owned();
        let mut g = Generation::new(
            m,
            item("Once upon", |i| {
                i.params.max_new_tokens = 60;
                i.params.ignore_eos = true;
                i.params.stop = vec![stop.clone()];
            }),
        );
        let mut last = String::new();
        loop {
            let done = g.step();
            assert!(
                g.text().starts_with(&last),
                "{:?} does not extend {last:?}",
                g.text()
            );
            assert!(!g.text().contains(&stop));
            last = g.text().to_owned();
            if done {
                break;
            }
        }
        assert!(matches!(
            g.finish_reason(),
            Some(FinishReason::StopStr { .. })
        ));
    }

    #[test]
    fn greedy_is_the_arg_max_and_reports_temperature_one() {
        let m = model();
        let g = generate(
            m.clone(),
            item("Hi", |i| {
                i.params.max_new_tokens = 10;
                i.params.temperature = 0.0;
                i.top_logprobs_num = 2;
            }),
        );
        let mut context = g.input_ids().to_vec();
        for (k, &id) in g.output_ids().iter().enumerate() {
            let d = m.distribution(&context, 1.0, &[]);
            let mut top = Vec::new();
            d.top(2, &mut top);
            assert_eq!(id, top[0].0);
            assert_eq!(
                g.output_top_logprobs()[2 * k],
                LogprobEntry {
                    logprob: top[0].1 as f32,
                    id
                }
            );
            context.push(id);
        }
    }

    #[test]
    fn logprobs_are_reported_under_the_request_temperature_or_at_one() {
        let item_at = |t: f64| {
            item("Hi", |i| {
                i.params.max_new_tokens = 8;
                i.params.temperature = t;
            })
        };
        let m = model();
        let g = generate(m.clone(), item_at(0.5));
        let d = m.distribution(g.input_ids(), 0.5, &[]);
        assert_eq!(g.output_logprobs()[0], d.logprob(g.output_ids()[0]) as f32);

        let original = Arc::new(
            Model::new(ModelConfig {
                return_original_logprob: true,
                ..ModelConfig::default()
            })
            .unwrap(),
        );
        let o = generate(original.clone(), item_at(0.5));
        assert_eq!(
            o.output_ids(),
            g.output_ids(),
            "the flag changes reporting, not sampling"
        );
        let d1 = original.distribution(o.input_ids(), 1.0, &[]);
        assert_eq!(o.output_logprobs()[0], d1.logprob(o.output_ids()[0]) as f32);
    }

    #[test]
    fn abort_keeps_partial_output() {
        let mut g = Generation::new(model(), item("Hi", |i| i.params.max_new_tokens = 100));
        for _ in 0..3 {
            g.step();
        }
        g.abort("Aborted", None, None);
        assert_eq!(g.output_ids().len(), 3);
        assert_eq!(g.output_logprobs().len(), 3);
        assert!(matches!(
            g.finish_reason(),
            Some(FinishReason::Abort {
                status_code: None,
                ..
            })
        ));
        assert!(g.step(), "an aborted generation stays finished");
        assert_eq!(g.output_ids().len(), 3);
    }

    #[test]
    fn forced_tokens_come_first_with_their_true_logprobs() {
        let m = model();
        let mut forced = m.tokenizer().encode(" Judgment: 2");
        forced.push(m.tokenizer().im_end_id());
        let g = generate(
            m.clone(),
            item("Pick one", |i| {
                i.params.max_new_tokens = 50;
                i.forced_output = forced.clone();
            }),
        );
        assert_eq!(g.output_ids(), &forced[..]);
        assert_eq!(g.text(), " Judgment: 2");
        assert_eq!(
            g.finish_reason(),
            Some(&FinishReason::StopToken {
                matched: m.tokenizer().im_end_id()
            })
        );
        let mut context = g.input_ids().to_vec();
        for (&id, &lp) in forced.iter().zip(g.output_logprobs()) {
            assert_eq!(lp, m.distribution(&context, 1.0, &[]).logprob(id) as f32);
            context.push(id);
        }
        // A budget shorter than the script truncates it like any other answer.
        let short = generate(
            m.clone(),
            item("Pick one", |i| {
                i.params.max_new_tokens = 2;
                i.forced_output = forced.clone();
            }),
        );
        assert_eq!(short.output_ids(), &forced[..2]);
        assert_eq!(
            short.finish_reason(),
            Some(&FinishReason::Length { length: 2 })
        );
    }

    #[test]
    fn stop_strings_are_found_after_multibyte_characters() {
        // Byte tokens: "x", "é" as its two bytes, then "abcd". When "c" is checked, the search window (the
        // last `max_stop_len - 1` bytes before the newest token) would start inside "é".
        let forced: Vec<u32> = "xéabcd".bytes().map(u32::from).collect();
        let g = generate(
            model(),
            item("Go", |i| {
                i.params.max_new_tokens = 20;
                i.params.ignore_eos = true;
                i.params.stop = vec!["abcd".into()];
                i.forced_output = forced.clone();
            }),
        );
        assert_eq!(
            g.finish_reason(),
            Some(&FinishReason::StopStr {
                matched: "abcd".into()
            })
        );
        assert_eq!(g.output_ids(), &forced[..]);
        assert_eq!(g.text(), "xé");
    }

    #[test]
    fn incomplete_utf8_is_held_back_until_complete() {
        let mut decoded = String::new();
        let mut pending = "é".as_bytes()[..1].to_vec();
        drain_complete_utf8(&mut pending, &mut decoded);
        assert_eq!((decoded.as_str(), pending.len()), ("", 1));
        pending.push("é".as_bytes()[1]);
        pending.extend_from_slice(&[0xFF, b'a']);
        drain_complete_utf8(&mut pending, &mut decoded);
        assert_eq!(decoded, "é\u{FFFD}a");
        assert!(pending.is_empty());
    }
}
