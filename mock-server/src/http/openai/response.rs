//! OpenAI answers from the engine's results, as SGLang's OpenAI layer builds them from its native results
//! (`_build_completion_response`, `_build_chat_response`, `_generate_*_stream` and
//! `to_openai_style_logprobs`): whole bodies, and a per-stream [`ChunkTranslator`] that turns each item's
//! due chunk into OpenAI chunks with logprobs sliced to the delta.
//!
//! What SGLang's layer reads of a native item is an [`ItemView`], built here from the typed
//! [`Generation`] (or from an abort that never ran), never from the native JSON. Logprobs are what Python
//! reads from that JSON: the f32's shortest decimal, parsed as a float. The answers are typed values
//! ([`Answer`], [`Chunk`], [`ErrorEvent`]) that body faults edit field by field (`faults.rs`) and [`json`]
//! writes in SGLang's key order.

use std::collections::{BTreeMap, HashMap};

use super::json::{self, Bare, Json, Null, Omit, object};
use super::request::{Api, OpenAiRequest};
use mock_core::engine::{FinishReason, Generation, LogprobEntry, PlannedItem};
use mock_core::model::Tokenizer;
use mock_core::release::{CacheReport, OpenAiEncoding, SglangVersion};
use mock_core::wire::VersionSpan;

/// How an item ended, as the OpenAI layer reads `meta_info.finish_reason`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Finish {
    /// Still running (`null`).
    Running,
    Length,
    /// A stop token (`matched` is its id) or a stop string (`matched` is the string).
    Stop(Matched),
    /// An abort: with a status (a refusal, an engine error) the stream ends with an error event.
    Abort {
        message: String,
        status: Option<u16>,
    },
}

/// `matched_stop`: the stop token's id or the stop string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Matched {
    Token(u32),
    Text(String),
}

impl Json for Matched {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Matched::Token(id) => id.write(out),
            Matched::Text(text) => text.write(out),
        }
    }
}

impl Finish {
    pub(crate) fn of(reason: Option<&FinishReason>) -> Finish {
        match reason {
            None => Finish::Running,
            Some(FinishReason::Length { .. }) => Finish::Length,
            Some(FinishReason::StopToken { matched }) => Finish::Stop(Matched::Token(*matched)),
            Some(FinishReason::StopStr { matched }) => Finish::Stop(Matched::Text(matched.clone())),
            Some(FinishReason::Abort {
                message,
                status_code,
                ..
            }) => Finish::Abort {
                message: message.clone(),
                status: *status_code,
            },
        }
    }

    /// An abort with `message`; with a status the stream ends with an error event.
    pub(crate) fn abort(message: &str, status: Option<u16>) -> Finish {
        Finish::Abort {
            message: message.to_owned(),
            status,
        }
    }

    /// `finish_reason` of a choice.
    fn kind(&self) -> Option<&'static str> {
        match self {
            Finish::Running => None,
            Finish::Length => Some("length"),
            Finish::Stop(_) => Some("stop"),
            Finish::Abort { .. } => Some("abort"),
        }
    }

    /// `matched_stop` of a choice.
    fn matched(&self) -> Option<&Matched> {
        match self {
            Finish::Stop(matched) => Some(matched),
            Finish::Running | Finish::Length | Finish::Abort { .. } => None,
        }
    }
}

/// A logprob as an OpenAI answer carries it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Logprob {
    /// What Python reads from the native JSON: the f32's shortest decimal, as a float.
    Number(f64),
    /// A non-finite logprob (the native encoder writes `null` there), or a fault's `null`.
    Null,
    /// A fault's bare token: a non-finite literal, or a number as its spec wrote it.
    Bare(Bare),
    /// A fault's logprob as a string of its JSON.
    Text(String),
}

impl Logprob {
    /// A logprob as Python reads it from SGLang's JSON: the f32's shortest decimal as a float; `null` when not
    /// finite.
    fn of(logprob: f32) -> Logprob {
        if !logprob.is_finite() {
            return Logprob::Null;
        }
        let mut buffer = zmij::Buffer::new();
        buffer
            .format_finite(logprob)
            .parse::<f64>()
            .map_or(Logprob::Null, Logprob::Number)
    }

    /// The JSON the logprob is written as.
    pub(crate) fn json_text(&self) -> String {
        String::from_utf8(json::to_vec(self)).unwrap_or_default()
    }
}

impl Json for Logprob {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Logprob::Number(value) => value.write(out),
            Logprob::Null => Null.write(out),
            Logprob::Bare(token) => token.write(out),
            Logprob::Text(text) => text.write(out),
        }
    }
}

/// One `[logprob, id, text]` entry as `(logprob, text)`.
#[derive(Debug, Clone)]
struct Entry {
    logprob: Logprob,
    text: String,
}

/// One position's top entries in the engine's order (most likely first); `None` for a position without
/// data (the first input position).
type TopRow = Option<Vec<Entry>>;

/// The logprob lists of one native item (from some output position on).
#[derive(Debug, Default)]
pub(crate) struct Logprobs {
    output: Vec<Entry>,
    /// Per output position, the top entries; `None` when the request asked for no top logprobs.
    output_top: Option<Vec<TopRow>>,
    input: Vec<Entry>,
    input_top: Option<Vec<TopRow>>,
}

impl Logprobs {
    fn output_len(&self) -> usize {
        self.output.len()
    }
}

/// What SGLang's OpenAI layer reads of one native item.
#[derive(Debug)]
pub(crate) struct ItemView {
    pub(crate) id: String,
    /// The text the item's object carries (cumulative).
    pub(crate) text: String,
    pub(crate) finish: Finish,
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    /// `meta_info.cached_tokens`: the prompt's prefix-cache hit.
    pub(crate) cached_tokens: u64,
    /// `None` for a shape without `weight_version` (0.5.3's abort before prefill).
    pub(crate) weight_version: Option<String>,
    /// `meta_info.weight_versions` of a finished item (0.5.23): the answer's `metadata` repeats it.
    pub(crate) weight_versions: Option<Vec<Span>>,
    /// `meta_info.routed_experts` of a finished item that asked for them on a server that returns them, which
    /// the answer's `sglext` carries (base64 of these ids).
    pub(crate) routed_experts: Option<Vec<i32>>,
    pub(crate) logprobs: Logprobs,
    /// The native item's `meta_info`, written as `/generate` writes it, when a chat request asked for it.
    pub(crate) meta_info: Option<Bare>,
}

/// The text of a token in a logprob entry: the token's text when the request asked for it.
fn token_text(tok: Option<&Tokenizer>, id: u32) -> String {
    tok.map(|t| t.token_text(id).into_owned())
        .unwrap_or_default()
}

/// One position's top entries as the native item lists them, or `None` for a position without entries.
fn top_row(entries: &[LogprobEntry], tok: Option<&Tokenizer>) -> TopRow {
    (!entries.is_empty()).then(|| {
        entries
            .iter()
            .map(|e| Entry {
                logprob: Logprob::of(e.logprob),
                text: token_text(tok, e.id),
            })
            .collect()
    })
}

/// One entry of a top row: a token's text and its logprob.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TopToken {
    pub(crate) token: String,
    pub(crate) logprob: Logprob,
}

/// In a chat token's `top_logprobs`: `{token, bytes, logprob}`, `bytes` its text's UTF-8 bytes.
impl Json for TopToken {
    fn write(&self, out: &mut Vec<u8>) {
        object(
            out,
            &[
                ("token", &self.token),
                ("bytes", &self.token.as_bytes()),
                ("logprob", &self.logprob),
            ],
        );
    }
}

/// A top row as `to_openai_style_logprobs` makes it: a Python dict `{text: logprob}` built in the row's order,
/// so the most likely token comes first and a later equal text replaces the value but keeps the first one's
/// place.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct TopDict(Vec<TopToken>);

/// Rows longer than this find an equal text through a hash map rather than by scanning.
const SCANNED_TOP_ROW: usize = 16;

impl TopDict {
    fn of(entries: &[Entry]) -> TopDict {
        let mut dict: Vec<TopToken> = Vec::with_capacity(entries.len());
        let hashed = entries.len() > SCANNED_TOP_ROW;
        let mut index: HashMap<&str, usize> = HashMap::new();
        for entry in entries {
            let slot = if hashed {
                index.get(entry.text.as_str()).copied()
            } else {
                dict.iter().position(|top| top.token == entry.text)
            };
            match slot {
                Some(at) => dict[at].logprob = entry.logprob.clone(),
                None => {
                    if hashed {
                        index.insert(&entry.text, dict.len());
                    }
                    dict.push(TopToken {
                        token: entry.text.clone(),
                        logprob: entry.logprob.clone(),
                    });
                }
            }
        }
        TopDict(dict)
    }
}

/// In a completion's `top_logprobs`: the dict itself.
impl Json for TopDict {
    fn write(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, top) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            top.token.write(out);
            out.push(b':');
            top.logprob.write(out);
        }
        out.push(b'}');
    }
}

impl ItemView {
    /// The view of a generated item, its output lists from position `from` on.
    pub(crate) fn generated(
        item: &PlannedItem,
        generation: &Generation,
        tok: Option<&Tokenizer>,
        weight_version: &str,
        from: usize,
    ) -> ItemView {
        let logprobs = if item.request.return_logprob {
            let ids = generation.output_ids();
            let lps = generation.output_logprobs();
            let n = lps.len().min(ids.len());
            let from = from.min(n);
            let k = item.top_logprobs_num;
            let in_ids = generation.input_logprob_ids();
            Logprobs {
                output: lps[from..n]
                    .iter()
                    .zip(&ids[from..n])
                    .map(|(&lp, &id)| Entry {
                        logprob: Logprob::of(lp),
                        text: token_text(tok, id),
                    })
                    .collect(),
                output_top: (k > 0).then(|| {
                    generation
                        .output_top_logprobs()
                        .rows_from(from)
                        .map(|position| top_row(position, tok))
                        .collect()
                }),
                input: generation
                    .input_logprobs()
                    .iter()
                    .zip(in_ids)
                    .map(|(lp, &id)| Entry {
                        logprob: lp.map_or(Logprob::Null, Logprob::of),
                        text: token_text(tok, id),
                    })
                    .collect(),
                input_top: (k > 0).then(|| {
                    let rows = generation.input_top_logprobs();
                    (0..in_ids.len())
                        .map(|p| match p {
                            // The first covered position has no data.
                            0 => None,
                            _ => top_row(rows.row(p - 1), tok),
                        })
                        .collect()
                }),
            }
        } else {
            Logprobs::default()
        };
        ItemView {
            id: item.rid.clone(),
            text: generation.text().to_owned(),
            finish: Finish::of(generation.finish_reason()),
            prompt_tokens: generation.prompt_tokens() as u64,
            completion_tokens: generation.output_ids().len() as u64,
            cached_tokens: 0,
            weight_version: Some(weight_version.to_owned()),
            weight_versions: None,
            // Only a finished item's object has them, as on `/generate`.
            routed_experts: generation
                .finish_reason()
                .and_then(|_| generation.routed_experts()),
            logprobs,
            meta_info: None,
        }
    }

    /// The view of an item that never produced output: no text, no tokens, empty logprob lists.
    pub(crate) fn empty(
        item: &PlannedItem,
        finish: Finish,
        prompt_tokens: u64,
        weight_version: Option<&str>,
    ) -> ItemView {
        let empty_top = (item.request.return_logprob && item.top_logprobs_num > 0).then(Vec::new);
        ItemView {
            id: item.rid.clone(),
            text: String::new(),
            finish,
            prompt_tokens,
            completion_tokens: 0,
            cached_tokens: 0,
            weight_version: weight_version.map(str::to_owned),
            weight_versions: None,
            routed_experts: None,
            meta_info: None,
            logprobs: Logprobs {
                output_top: empty_top.clone(),
                input_top: empty_top,
                ..Logprobs::default()
            },
        }
    }
}

/// One entry of `metadata.weight_versions`: output tokens `start..end` came from `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) version: String,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl Span {
    pub(crate) fn of(span: &VersionSpan<'_>) -> Span {
        Span {
            version: span.version.to_owned(),
            start: span.start,
            end: span.end,
        }
    }
}

impl Json for Span {
    fn write(&self, out: &mut Vec<u8>) {
        object(
            out,
            &[
                ("version", &self.version),
                ("start", &self.start),
                ("end", &self.end),
            ],
        );
    }
}

/// What a choice carries besides its logprobs and finish.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Content {
    /// A completion's `text`.
    Text(String),
    /// A chat answer's `message`, and whether its release writes `"tool_calls": null`.
    Message { text: String, null_tool_calls: bool },
    /// A chat chunk's `delta`.
    Delta(Delta),
}

/// A chat stream delta. 0.5.3's pydantic `DeltaMessage` writes every field (`null` when unset); 0.5.15's and
/// 0.5.23's msgspec `StreamDelta` omits unset ones except `reasoning_content`, which it always writes so that
/// the openai SDK's `delta.reasoning_content` exists (`sse_utils.py: StreamDelta`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Delta {
    encoding: OpenAiEncoding,
    role: Option<&'static str>,
    content: Option<String>,
}

impl Json for Delta {
    fn write(&self, out: &mut Vec<u8>) {
        match self.encoding {
            OpenAiEncoding::Pydantic => object(
                out,
                &[
                    ("role", &self.role),
                    ("content", &self.content),
                    ("reasoning_content", &Null),
                    ("tool_calls", &Null),
                ],
            ),
            OpenAiEncoding::Msgspec => {
                let role = self.role.map_or(Omit::Absent, Omit::Present);
                let content = self.content.as_ref().map_or(Omit::Absent, Omit::Present);
                object(
                    out,
                    &[
                        ("reasoning_content", &Null),
                        ("role", &role),
                        ("content", &content),
                    ],
                );
            }
        }
    }
}

/// The `logprobs` of a choice.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ChoiceLogprobs {
    /// `to_openai_style_logprobs`: per token, its text offset (always -1), logprob, text and top dict (`null`
    /// where the native answer has no top entries).
    Completion {
        text_offset: Vec<i32>,
        token_logprobs: Vec<Logprob>,
        tokens: Vec<String>,
        top_logprobs: Vec<Option<TopDict>>,
    },
    /// Chat's `content`: one `{token, bytes, logprob, top_logprobs}` per output token.
    Chat { content: Vec<ChatToken> },
}

impl Json for ChoiceLogprobs {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            ChoiceLogprobs::Completion {
                text_offset,
                token_logprobs,
                tokens,
                top_logprobs,
            } => object(
                out,
                &[
                    ("text_offset", text_offset),
                    ("token_logprobs", token_logprobs),
                    ("tokens", tokens),
                    ("top_logprobs", top_logprobs),
                ],
            ),
            ChoiceLogprobs::Chat { content } => object(out, &[("content", content)]),
        }
    }
}

/// One output token of chat logprobs; `bytes` are its text's UTF-8 bytes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChatToken {
    pub(crate) token: String,
    pub(crate) logprob: Logprob,
    /// Its position's top dict, as a list.
    pub(crate) top_logprobs: Vec<TopToken>,
}

impl Json for ChatToken {
    fn write(&self, out: &mut Vec<u8>) {
        object(
            out,
            &[
                ("token", &self.token),
                ("bytes", &self.token.as_bytes()),
                ("logprob", &self.logprob),
                ("top_logprobs", &self.top_logprobs),
            ],
        );
    }
}

/// One choice of an answer or a chunk: every release writes all five fields.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choice {
    pub(crate) index: usize,
    pub(crate) content: Content,
    pub(crate) logprobs: Option<ChoiceLogprobs>,
    pub(crate) finish: Finish,
    /// A chat answer's `meta_info` when the request set `return_meta_info` (0.5.15 and later): the native
    /// item's `meta_info`, as `/generate` writes it.
    pub(crate) meta_info: Option<Bare>,
}

/// A chat answer's `message`: `ChatMessage`, whose `tool_calls` is `null` or, in later releases, left out when
/// no tool was called.
#[derive(Debug)]
struct Message<'a> {
    content: &'a str,
    null_tool_calls: bool,
}

impl Json for Message<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        let tool_calls = Omit::null_when(self.null_tool_calls);
        object(
            out,
            &[
                ("role", &"assistant"),
                ("content", &self.content),
                ("reasoning_content", &Null),
                ("tool_calls", &tool_calls),
            ],
        );
    }
}

impl Json for Choice {
    fn write(&self, out: &mut Vec<u8>) {
        let message;
        let (key, content): (&str, &dyn Json) = match &self.content {
            Content::Text(text) => ("text", text),
            Content::Message {
                text,
                null_tool_calls,
            } => {
                message = Message {
                    content: text,
                    null_tool_calls: *null_tool_calls,
                };
                ("message", &message)
            }
            Content::Delta(delta) => ("delta", delta),
        };
        object(
            out,
            &[
                ("index", &self.index),
                (key, content),
                ("logprobs", &self.logprobs),
                ("finish_reason", &self.finish.kind()),
                ("matched_stop", &self.finish.matched()),
                (
                    "meta_info",
                    &self.meta_info.as_ref().map_or(Omit::Absent, Omit::Present),
                ),
            ],
        );
    }
}

/// Token counts summed as `UsageProcessor` does: completion tokens of every choice, prompt tokens once per
/// prompt (every `n`-th choice), and with `--enable-cache-report` the prefix-cache hits as the release sums
/// and writes them ([`CacheReport`]), else `prompt_tokens_details` is `null`; the toy model does not reason,
/// so `reasoning_tokens` is 0 and (0.5.23) `completion_tokens_details` `null`, as SGLang sets it only when
/// there are some.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    prompt: u64,
    completion: u64,
    /// The cached tokens summed as the release sums them.
    cached: u64,
    /// `--enable-cache-report` under the release's rule.
    report: Option<CacheReport>,
    /// The release's `UsageInfo` ends with `completion_tokens_details`.
    details: bool,
    /// Written with Pydantic's `exclude_none=True`, as the completions route writes its last stream chunk
    /// (`serving_completions.py`, every release): the `null` details are left out.
    exclude_none: bool,
}

impl Usage {
    fn of(release: SglangVersion, cache_report: bool) -> Usage {
        Usage {
            details: release.usage_completion_tokens_details,
            report: cache_report.then_some(release.cache_report),
            ..Usage::default()
        }
    }

    fn add(&mut self, item: &ItemView, first_of_prompt: bool) {
        let counts = Usage {
            prompt: item.prompt_tokens,
            completion: item.completion_tokens,
            cached: item.cached_tokens,
            ..Usage::default()
        };
        self.add_choice(first_of_prompt, &counts);
    }

    /// A choice's counts (a stream's: its own [`Usage::add`] alone), summed as `UsageProcessor` sums them:
    /// completion tokens of every choice, prompt tokens and (but for 0.5.3's report) cached tokens of the first
    /// choice of each prompt ([`OpenAiRequest::first_of_prompt`]). Without `--enable-cache-report` the cached sum
    /// is never written.
    fn add_choice(&mut self, first_of_prompt: bool, choice: &Usage) {
        self.completion += choice.completion;
        if first_of_prompt {
            self.prompt += choice.prompt;
        }
        if first_of_prompt || self.report == Some(CacheReport::EveryChoice) {
            self.cached += choice.cached;
        }
    }

    /// `prompt_tokens_details`: `{"cached_tokens": N}` when the release writes it, else `null`.
    fn prompt_details(&self) -> Option<CachedDetails> {
        let written = match self.report? {
            CacheReport::EveryChoice | CacheReport::FirstChoiceIfAny => self.cached > 0,
            CacheReport::FirstChoiceAlways => true,
        };
        written.then_some(CachedDetails(self.cached))
    }
}

/// `UsageInfo` of `srt/entrypoints/openai/protocol.py`, its fields in their declared order (what each
/// release's running server writes too).
impl Json for Usage {
    fn write(&self, out: &mut Vec<u8>) {
        let details = Omit::null_when(self.details && !self.exclude_none);
        let prompt_details = match self.prompt_details() {
            Some(cached) => Omit::Present(Some(cached)),
            None if self.exclude_none => Omit::Absent,
            None => Omit::Present(None),
        };
        object(
            out,
            &[
                ("prompt_tokens", &self.prompt),
                ("total_tokens", &(self.prompt + self.completion)),
                ("completion_tokens", &self.completion),
                ("prompt_tokens_details", &prompt_details),
                ("reasoning_tokens", &0u32),
                ("completion_tokens_details", &details),
            ],
        );
    }
}

/// `prompt_tokens_details` with the prefix-cache hits: `{"cached_tokens": N}` in every release (0.5.3's dict;
/// later `PromptTokensDetails`, whose serializer drops its unset multimodal counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CachedDetails(u64);

impl Json for CachedDetails {
    fn write(&self, out: &mut Vec<u8>) {
        object(out, &[("cached_tokens", &self.0)]);
    }
}

/// `build_endpoint_weight_version_metadata` (0.5.23's `srt/utils/weight_versions.py`): the first item's
/// `weight_version`, and its `weight_versions` where it has them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Metadata {
    weight_version: Option<String>,
    pub(crate) weight_versions: Option<Vec<Span>>,
}

impl Json for Metadata {
    fn write(&self, out: &mut Vec<u8>) {
        let spans = self
            .weight_versions
            .as_ref()
            .map_or(Omit::Absent, Omit::Present);
        object(
            out,
            &[
                ("weight_version", &self.weight_version),
                ("weight_versions", &spans),
            ],
        );
    }
}

/// The routed experts an answer carries in `sglext`, written as base64 of their little-endian `int32`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Routes(pub(crate) Vec<i32>);

impl Json for Routes {
    fn write(&self, out: &mut Vec<u8>) {
        object(
            out,
            &[("routed_experts", &mock_core::wire::base64_i32(&self.0))],
        );
    }
}

/// A non-stream answer, or one chunk of a stream: `metadata` only in an answer, `usage` `null` or left out in
/// some chunks, `sglext` only where routes are carried.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    id: Option<String>,
    object: &'static str,
    created: u64,
    model: String,
    pub(crate) choices: Vec<Choice>,
    pub(crate) usage: Omit<Option<Usage>>,
    pub(crate) metadata: Omit<Metadata>,
    pub(crate) sglext: Option<Routes>,
}

impl Json for Answer {
    fn write(&self, out: &mut Vec<u8>) {
        let sglext = self.sglext.as_ref().map_or(Omit::Absent, Omit::Present);
        object(
            out,
            &[
                ("id", &self.id),
                ("object", &self.object),
                ("created", &self.created),
                ("model", &self.model),
                ("choices", &self.choices),
                ("usage", &self.usage),
                ("metadata", &self.metadata),
                ("sglext", &sglext),
            ],
        );
    }
}

impl Answer {
    /// The bytes of the answer.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        json::to_vec(self)
    }
}

/// The OpenAI body of a non-stream answer, from the native items (one per choice, in order).
pub(crate) fn body(req: &OpenAiRequest, items: &[ItemView], created: u64) -> Answer {
    let choices = items
        .iter()
        .enumerate()
        .map(|(idx, item)| {
            let lp = &item.logprobs;
            let (content, logprobs) = match req.api {
                Api::Completions => {
                    let echo = req.echo.as_ref();
                    let prefix = echo
                        .and_then(|e| e.get(idx / req.n()))
                        .map_or("", String::as_str);
                    let logprobs = req.logprobs.map(|_| {
                        let input = echo.map(|_| (&lp.input[..], lp.input_top.as_deref()));
                        completion_logprobs(input, &lp.output, lp.output_top.as_deref())
                    });
                    (Content::Text(format!("{prefix}{}", item.text)), logprobs)
                }
                Api::Chat => {
                    let logprobs = req
                        .logprobs
                        .map(|_| chat_logprobs(&lp.output, lp.output_top.as_deref()));
                    let message = Content::Message {
                        text: item.text.clone(),
                        null_tool_calls: req.sglang_version.chat_message_null_tool_calls,
                    };
                    (message, logprobs)
                }
            };
            Choice {
                index: idx,
                content,
                logprobs,
                finish: item.finish.clone(),
                meta_info: item.meta_info.clone(),
            }
        })
        .collect();
    let first = items.first();
    let mut usage = Usage::of(req.sglang_version, req.cache_report);
    for (idx, item) in items.iter().enumerate() {
        usage.add(item, req.first_of_prompt(idx, false));
    }
    // `process_routed_experts_from_ret(ret[0])`: the first item's routes only, and none when they are empty
    // (`if routed_experts or ...`).
    let sglext = first
        .and_then(|m| m.routed_experts.as_ref())
        .filter(|routes| req.return_routed_experts && !routes.is_empty())
        .map(|routes| Routes(routes.clone()));
    Answer {
        id: first.map(|m| m.id.clone()),
        object: object_name(req.api, false),
        created,
        model: req.model.clone(),
        choices,
        usage: Omit::Present(Some(usage)),
        metadata: Omit::Present(Metadata {
            weight_version: first.and_then(|m| m.weight_version.clone()),
            weight_versions: first.and_then(|m| m.weight_versions.clone()),
        }),
        sglext,
    }
}

fn object_name(api: Api, chunk: bool) -> &'static str {
    match (api, chunk) {
        (Api::Completions, _) => "text_completion",
        (Api::Chat, false) => "chat.completion",
        (Api::Chat, true) => "chat.completion.chunk",
    }
}

/// `to_openai_style_logprobs`: input entries (with echo) then output entries; `text_offset` is always -1.
/// Top lists are listed only where the native answer has them (`logprobs > 0`).
fn completion_logprobs(
    input: Option<(&[Entry], Option<&[TopRow]>)>,
    output: &[Entry],
    output_top: Option<&[TopRow]>,
) -> ChoiceLogprobs {
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut top_logprobs = Vec::new();
    let sources = input
        .into_iter()
        .chain(std::iter::once((output, output_top)));
    for (list, top) in sources {
        for entry in list {
            tokens.push(entry.text.clone());
            token_logprobs.push(entry.logprob.clone());
        }
        top_logprobs.extend(
            top.into_iter()
                .flatten()
                .map(|row| row.as_deref().map(TopDict::of)),
        );
    }
    ChoiceLogprobs::Completion {
        text_offset: vec![-1; tokens.len()],
        token_logprobs,
        tokens,
        top_logprobs,
    }
}

/// Chat logprobs: one `{token, bytes, logprob, top_logprobs}` per output token, each with the top list of its
/// own position read through `to_openai_style_logprobs`' dict, as `_process_logprobs_tokens` does (0.5.3,
/// 0.5.9): most likely first, an equal text once.
fn chat_logprobs(output: &[Entry], output_top: Option<&[TopRow]>) -> ChoiceLogprobs {
    let content = output
        .iter()
        .enumerate()
        .map(|(i, entry)| ChatToken {
            token: entry.text.clone(),
            logprob: entry.logprob.clone(),
            top_logprobs: output_top
                .and_then(|t| t.get(i))
                .and_then(Option::as_deref)
                .map(|row| TopDict::of(row).0)
                .unwrap_or_default(),
        })
        .collect();
    ChoiceLogprobs::Chat { content }
}

/// What a stream has sent so far for one choice.
#[derive(Debug, Default)]
struct ChoiceState {
    /// Bytes of the text already sent.
    text_sent: usize,
    /// Output logprobs already sent.
    logprobs_sent: usize,
    started: bool,
    finish: Option<Finish>,
    usage: Usage,
    /// `routed_experts[index]`: what the choice's latest native chunk carried (its finishing one has them).
    routed_experts: Option<Vec<i32>>,
}

/// Turns the due chunks of one stream's items into OpenAI chunks, keeping per-choice offsets.
#[derive(Debug)]
pub(crate) struct ChunkTranslator {
    req: OpenAiRequest,
    created: u64,
    /// The id of the latest native chunk.
    id: Option<String>,
    choices: BTreeMap<usize, ChoiceState>,
    /// The choices in the order their first chunk came (the order of Python's per-index dicts).
    seen: Vec<usize>,
}

/// What one item's chunk becomes.
#[derive(Debug, PartialEq)]
pub(crate) enum Translated {
    Chunks(Vec<Answer>),
    /// An abort with a status code (a full queue, a refused item): the OpenAI error event ends the stream.
    Error(ErrorEvent),
}

impl ChunkTranslator {
    pub(crate) fn new(req: OpenAiRequest, created: u64) -> ChunkTranslator {
        ChunkTranslator {
            req,
            created,
            id: None,
            choices: BTreeMap::new(),
            seen: Vec::new(),
        }
    }

    /// The request it translates for.
    pub(crate) fn request(&self) -> &OpenAiRequest {
        &self.req
    }

    fn chunk(&self, choices: Vec<Choice>, usage: Omit<Option<Usage>>) -> Answer {
        Answer {
            id: self.id.clone(),
            object: object_name(self.req.api, true),
            created: self.created,
            model: self.req.model.clone(),
            choices,
            usage,
            metadata: Omit::Absent,
            sglext: None,
        }
    }

    /// A chat chunk of one choice. 0.5.3 dumps a pydantic model, so an unset `usage` is `null`; 0.5.15 and
    /// 0.5.23 encode a msgspec struct with `omit_defaults` (`sse_utils.py: StreamChunk`), so it is left out.
    fn chat_chunk(&self, choice: Choice, usage: Option<Usage>) -> Answer {
        let usage = match (self.req.sglang_version.openai_encoding, usage) {
            (OpenAiEncoding::Pydantic, usage) => Omit::Present(usage),
            (OpenAiEncoding::Msgspec, Some(usage)) => Omit::Present(Some(usage)),
            (OpenAiEncoding::Msgspec, None) => Omit::Absent,
        };
        self.chunk(vec![choice], usage)
    }

    fn delta(&self, role: Option<&'static str>, content: Option<String>) -> Content {
        Content::Delta(Delta {
            encoding: self.req.sglang_version.openai_encoding,
            role,
            content,
        })
    }

    /// The output position from which choice `index` has logprobs still to send.
    pub(crate) fn logprobs_sent(&self, index: usize) -> usize {
        self.choices.get(&index).map_or(0, |c| c.logprobs_sent)
    }

    /// The chunks of choice `index`'s native chunk `item`, whose logprob lists start at
    /// [`ChunkTranslator::logprobs_sent`].
    pub(crate) fn event(&mut self, index: usize, item: &ItemView) -> Translated {
        if let Finish::Abort {
            message,
            status: Some(code),
        } = &item.finish
        {
            return Translated::Error(ErrorEvent::abort(message, *code));
        }
        // Each chunk carries the id of the native chunk it comes from, as SGLang writes
        // `content["meta_info"]["id"]`: one id per choice with `n > 1`, and the chunks after the last native chunk
        // (chat's finish chunks, `sglext`, usage) the id of that last one (`serving_chat.py`,
        // `serving_completions.py`, every release).
        self.id = Some(item.id.clone());
        let req = &self.req;
        if !self.choices.contains_key(&index) {
            self.seen.push(index);
        }
        let state = self.choices.entry(index).or_default();
        state.routed_experts = item.routed_experts.clone();
        let mut delta = item
            .text
            .get(state.text_sent..)
            .unwrap_or_default()
            .to_owned();
        state.text_sent = item.text.len();
        let first = !state.started;
        state.started = true;
        state.usage = Usage::of(req.sglang_version, req.cache_report);
        // The choice's own counts, all of them; `finish` picks the prompt's first.
        state.usage.add(item, true);
        let logprobs = req
            .logprobs
            .and_then(|_| stream_logprobs(req, &item.logprobs, state, first));
        if item.finish != Finish::Running {
            state.finish = Some(item.finish.clone());
        }
        let usage = req.continuous_usage.then_some(state.usage);
        let mut chunks = Vec::new();
        match req.api {
            Api::Completions => {
                if first && let Some(echo) = &req.echo {
                    let prefix = echo.get(index / req.n()).map_or("", String::as_str);
                    delta = format!("{prefix}{delta}");
                }
                let choice = Choice {
                    index,
                    content: Content::Text(delta),
                    logprobs,
                    finish: item.finish.clone(),
                    meta_info: None,
                };
                chunks.push(self.chunk(vec![choice], Omit::Present(usage)));
            }
            Api::Chat => {
                if first {
                    let choice = Choice {
                        index,
                        content: self.delta(Some("assistant"), Some(String::new())),
                        logprobs: None,
                        finish: Finish::Running,
                        meta_info: None,
                    };
                    chunks.push(self.chat_chunk(choice, None));
                }
                if !delta.is_empty() || logprobs.is_some() {
                    let choice = Choice {
                        index,
                        content: self.delta(None, Some(delta)),
                        logprobs,
                        finish: Finish::Running,
                        meta_info: None,
                    };
                    chunks.push(self.chat_chunk(choice, usage));
                }
            }
        }
        Translated::Chunks(chunks)
    }

    /// The chunks after the last item's: chat's finish chunks, the `sglext` chunk and the usage chunk.
    pub(crate) fn finish(&mut self) -> Vec<Answer> {
        let mut chunks = Vec::new();
        if self.req.api == Api::Chat {
            for (index, state) in &self.choices {
                if let Some(finish) = &state.finish {
                    let choice = Choice {
                        index: *index,
                        content: self.delta(None, None),
                        logprobs: None,
                        finish: finish.clone(),
                        meta_info: None,
                    };
                    chunks.push(self.chat_chunk(choice, None));
                }
            }
        }
        // `next(v for v in routed_experts.values() if v is not None)`: the first choice to appear that has
        // routes, an empty list included; a pydantic chunk, so `usage` is `null`.
        let routes = self
            .seen
            .iter()
            .find_map(|index| self.choices[index].routed_experts.as_ref());
        if self.req.return_routed_experts
            && let Some(routes) = routes
        {
            let mut chunk = self.chunk(Vec::new(), Omit::Present(None));
            chunk.sglext = Some(Routes(routes.clone()));
            chunks.push(chunk);
        }
        // With `n: 0` the usage is `integer modulo by zero` instead (`OpenAiEvents::end` writes it).
        if self.req.include_usage && self.req.n_given != 0 {
            let mut usage = Usage::of(self.req.sglang_version, self.req.cache_report);
            usage.exclude_none = self.req.api == Api::Completions;
            for (index, state) in &self.choices {
                usage.add_choice(self.req.first_of_prompt(*index, true), &state.usage);
            }
            chunks.push(self.chunk(Vec::new(), Omit::Present(Some(usage))));
        }
        chunks
    }
}

/// The logprobs of one chunk: the output entries new since the last chunk (the view's lists start there),
/// and with echo the prompt's entries on the first chunk. `None` when nothing is new.
fn stream_logprobs(
    req: &OpenAiRequest,
    lp: &Logprobs,
    state: &mut ChoiceState,
    first: bool,
) -> Option<ChoiceLogprobs> {
    let new = lp.output_len();
    state.logprobs_sent += new;
    let echo_input = first && req.echo.is_some();
    if new == 0 && !echo_input {
        return None;
    }
    let output_top = lp
        .output_top
        .as_deref()
        .map(|top| &top[..new.min(top.len())]);
    Some(match req.api {
        Api::Completions => {
            let input = echo_input.then(|| (&lp.input[..], lp.input_top.as_deref()));
            completion_logprobs(input, &lp.output, output_top)
        }
        Api::Chat => chat_logprobs(&lp.output, output_top),
    })
}

/// `create_streaming_error_response`: `{"error": ErrorResponse}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ErrorEvent {
    message: String,
    kind: String,
    code: u16,
}

impl ErrorEvent {
    pub(crate) fn new(message: &str, kind: &str, code: u16) -> ErrorEvent {
        ErrorEvent {
            message: message.to_owned(),
            kind: kind.to_owned(),
            code,
        }
    }

    /// The error event of an abort with a status (a refused item, a full queue, an engine error), as SGLang's
    /// OpenAI layer writes it: the status's Python name as the type.
    pub(crate) fn abort(message: &str, code: u16) -> ErrorEvent {
        ErrorEvent::new(message, &status_name(u64::from(code)), code)
    }

    /// The bytes of the event's JSON.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        json::to_vec(self)
    }
}

impl Json for ErrorEvent {
    fn write(&self, out: &mut Vec<u8>) {
        let error = ErrorResponse(self);
        object(out, &[("error", &error)]);
    }
}

/// `ErrorResponse` of `entrypoints/openai/protocol.py`, field order included.
#[derive(Debug)]
struct ErrorResponse<'a>(&'a ErrorEvent);

impl Json for ErrorResponse<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        object(
            out,
            &[
                ("object", &"error"),
                ("message", &self.0.message),
                ("type", &self.0.kind),
                ("param", &Null),
                ("code", &self.0.code),
            ],
        );
    }
}

/// Python's `HTTPStatus(code).name`, from the status's reason phrase: 503 is `SERVICE_UNAVAILABLE`.
fn status_name(code: u64) -> String {
    let reason = u16::try_from(code)
        .ok()
        .and_then(|c| axum::http::StatusCode::from_u16(c).ok())
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Internal Server Error");
    reason.to_ascii_uppercase().replace([' ', '-'], "_")
}

#[cfg(test)]
mod tests {
    use super::{Entry, Logprob, SCANNED_TOP_ROW, TopDict, status_name};

    /// A top row becomes a Python dict, short rows scanned and long ones hashed alike: first places kept, later
    /// equal texts' values taking over.
    #[test]
    fn top_dicts_keep_first_places_and_last_values() {
        for len in [3, SCANNED_TOP_ROW, SCANNED_TOP_ROW + 1, 40] {
            // Texts repeat every 3 entries; entry i has logprob -i.
            let entries: Vec<Entry> = (0..len)
                .map(|i| Entry {
                    logprob: Logprob::Number(-(i as f64)),
                    text: format!("t{}", i % 3),
                })
                .collect();
            let dict = TopDict::of(&entries);
            let got: Vec<(&str, &Logprob)> = dict
                .0
                .iter()
                .map(|t| (t.token.as_str(), &t.logprob))
                .collect();
            // Python: {"t0": last i with i % 3 == 0, "t1": ..., "t2": ...} in first-seen order.
            let last = |r: usize| Logprob::Number(-(((len - 1 - r) / 3 * 3 + r) as f64));
            let want: Vec<(String, Logprob)> = (0..len.min(3))
                .map(|r| (format!("t{r}"), last(r)))
                .collect();
            let want: Vec<(&str, &Logprob)> = want.iter().map(|(t, l)| (t.as_str(), l)).collect();
            assert_eq!(got, want, "a row of {len}");
        }
    }

    #[test]
    fn status_names_are_pythons() {
        for (code, name) in [
            (400, "BAD_REQUEST"),
            (408, "REQUEST_TIMEOUT"),
            (429, "TOO_MANY_REQUESTS"),
            (500, "INTERNAL_SERVER_ERROR"),
            (503, "SERVICE_UNAVAILABLE"),
            (99, "INTERNAL_SERVER_ERROR"),
        ] {
            assert_eq!(status_name(code), name);
        }
    }
}
