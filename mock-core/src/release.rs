//! The SGLang releases the server answers as, as data: the one owner of every behaviour in which releases differ.
//!
//! Each release is one [`Release`] value, and each later release is built from the one before it with struct
//! update syntax, so its definition shows exactly what changed. A behaviour that is code rather than data is a
//! small enum the value holds ([`LogprobStart`], [`StreamIds`], ...); the code that acts on it matches that
//! enum, never a release number. Nothing outside this module compares releases (a test in
//! `tests/releases.rs` holds that), and the flag's help, its error message, `sglang-mock releases` (which
//! the test script's loops read) and `VERSIONS.md` (one row per field, checked by a test) all come from
//! [`RELEASES`].
//!
//! Adding a release is a new value in [`RELEASES`], built from the newest one, with the fields that differ
//! (`ARCHITECTURE.md`, "Owners and change paths").

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

/// Everything in which the SGLang releases the mock follows differ. Every field is a row of
/// `mock-server/VERSIONS.md`, which names the release's source for it. Paths are relative to the wheel's
/// `sglang/` package: `HS` is `srt/entrypoints/http_server.py`, `TM` `srt/managers/tokenizer_manager.py`,
/// `SCH` `srt/managers/scheduler.py`, `IO` `srt/managers/io_struct.py`, `SP` `srt/sampling/sampling_params.py`.
#[derive(Debug, serde::Serialize)]
pub struct Release {
    /// The release number, as `/server_info` reports it and `--sglang-version` takes it.
    pub number: &'static str,
    /// Other names `--sglang-version` takes for it (the former `--profile` flag's values).
    pub aliases: &'static [&'static str],
    /// When it was published.
    pub published: &'static str,

    // The request: what a body may hold, and how it is checked.
    /// `/generate` bodies pass the JSON contract gate after FastAPI's parse (`HS: generate_request` calls
    /// `api_contract.generate_contract_error`).
    pub json_contract: bool,
    /// What an explicit `null` sampling value becomes (`SP: SamplingParams.__init__` / `__post_init__`).
    pub null_sampling_values: NullSamplingValues,
    /// The wording and bounds of `SamplingParams.verify`'s temperature and repetition-penalty checks.
    pub verify: Verify,
    /// How `sampling_seed` defaults and is checked (`SP: SamplingParams.verify`).
    pub sampling_seed: SeedRule,
    /// `SamplingParams` takes `stop_regex`.
    pub stop_regex: bool,
    /// The order of the scheduler's finish checks after each token (`SB: Req.check_finished` /
    /// `update_finish_state`).
    pub finish_order: FinishOrder,
    /// `SamplingParams.normalize` bounds `stop` and `stop_regex`: at most 32 of each, each pattern at most 256
    /// bytes.
    pub stop_bounds: bool,
    /// `SamplingParams` takes `beam_width` and `watermark`.
    pub beam_width_and_watermark: bool,
    /// `structural_tag` is a grammar constraint beside `json_schema`, `regex` and `ebnf` (`SP: verify`).
    pub structural_tag: bool,
    /// `return_hidden_states` may be `"last"` (`ReturnHiddenStatesMode` in `srt/managers/schedule_batch.py`).
    pub hidden_states_last: bool,
    /// Where `logprob_start_len = -1` starts, and which starts the scheduler refuses (`SCH:
    /// handle_generate_request`).
    pub logprob_start: LogprobStart,
    /// `return_routed_experts`, `routed_experts_start_len` and `--enable-return-routed-experts` exist (`IO`).
    pub routed_experts: bool,
    /// `return_sampling_mask` and `sampling_logprobs_mode` exist (`IO`).
    pub sampling_masks: bool,

    // The control plane.
    /// A request whose rid is live already is refused: `Duplicate request ID detected` (`TM: _init_req_state`).
    pub duplicate_rids_refused: bool,
    /// The tokenizer manager registers a request's rid before the pause gate, so an abort naming a held
    /// request reaches it (`TM: _init_req_state`; before, `TM: _send_one_request` after the gate).
    pub rids_before_pause_gate: bool,
    /// `/pause_generation` reads `{"mode"}` (and an abort-mode pause returns once nothing runs) and
    /// `/continue_generation` reads `{"torch_empty_cache"}`; without it neither reads a body and a pause
    /// always aborts everything at once (`TM: pause_generation`).
    pub pause_modes: bool,

    // The wire: the bytes of an answer.
    /// What a streamed chunk's `output_ids` holds (`TM: _handle_batch_output`).
    pub stream_ids: StreamIds,
    /// `output_ids` are the ids the detokenizer decodes: the prompt's last `min(prompt_tokens, 5)` ids
    /// (`INIT_INCREMENTAL_DETOKENIZATION_OFFSET`) before the output, in a non-stream answer and in a stream's
    /// first chunk (`scheduler_output_processor_mixin.py` sends `decode_ids`; seen on the running release).
    pub decode_window_ids: bool,
    /// What a NaN or infinite logprob does to a non-stream body (`HS: generate_request`,
    /// `srt/utils/json_response.py`).
    pub non_finite_body: NonFiniteBody,
    /// The `meta_info` keys of an item the engine ran, in insertion order (`TM: _handle_batch_output`).
    pub meta_generated: &'static [MetaKey],
    /// The `meta_info` keys of an item aborted in the waiting queue (`TM: _handle_abort_req`).
    pub meta_aborted_waiting: &'static [MetaKey],
    /// What a request aborted in the waiting queue is answered with (`TM: _handle_abort_req`).
    pub waiting_abort: WaitingAbortShape,
    /// A finished object's `weight_version` is its last span's, and `weight_versions` holds the spans
    /// (`srt/utils/weight_versions.py`).
    pub weight_version_spans: bool,
    /// `return_prompt_token_ids` puts the ids the server ran after `meta_info` of every object of the item,
    /// `"prompt_token_ids"`: the tokenized text, or the `input_ids` given (`TM: _handle_batch_output`,
    /// `_handle_abort_req`; a field of `GenerateReqInput` from 0.5.23).
    pub prompt_token_ids: bool,
    /// The error event a stream sends for a `ValueError` (`HS: generate_request.stream_results`).
    pub error_frame: ErrorFrame,

    // The routes.
    /// The route groups served beside those every release has (`HS`).
    pub routes: &'static [RouteGroup],
    /// `/get_weight_version` (and `/weight_version`).
    pub weight_version_route: WeightVersionRoute,
    /// The keys of `/model_info` (`/get_model_info`), in order (`HS: model_info`).
    pub model_info: &'static [ModelInfoKey],
    /// slime publishes patches for it (`docker/patch/v0.5.15.post1/*.patch` in THUDM/slime): `--slime-patches`.
    pub slime_patches: bool,
    /// `GenerateReqInput` as FastAPI validates a `/generate` body against it: every field whose value a JSON body
    /// can fail, in the schema's order, with its type in Pydantic's notation (`request::pydantic`; printed from
    /// the release by `scripts/pydantic_models.py`).
    pub generate_model: &'static [(&'static str, &'static str)],
    /// The endpoints whose validation errors the server writes as FastAPI's, with the frame FastAPI adds: the
    /// path, the handler's name and the line of its first decorator in `srt/entrypoints/http_server.py`
    /// (`scripts/pydantic_models.py`).
    pub validation_endpoints: &'static [(&'static str, &'static str, u32)],
    /// The bodies of the control routes as FastAPI validates them: the route, the model's class and its
    /// fields in order (a required one's type marked `!`), printed by `scripts/pydantic_models.py`.
    pub control_models: &'static [ControlModel],
    /// How a control body's model reports its errors.
    pub control_bodies: ControlBodies,
    /// The JSON decoder FastAPI reads bodies with: a body that is not JSON is refused in its words.
    pub json_decoder: JsonDecoder,
    /// What `SamplingParams.normalize` raises for a stop "string" that is not one, when it encodes it: the
    /// tokenizer's `ValueError` (a 400), or, with the `transformers` the release installs, an uncaught error (a
    /// 500).
    pub non_text_stop: NonTextStop,
    /// The roles of `ChatCompletionMessageGenericParam` (case-insensitive, lowercased; `user` is the other
    /// member's, exactly), its validator's message for any other, and the two members' labels in a union error
    /// (`OP: ChatCompletionMessageParam`).
    pub chat_roles: ChatRoles,
    /// `--admin-api-key` exists, and the key middleware decides by each route's `auth_level`
    /// (`srt/utils/auth.py: decide_request_auth`); without it `--api-key` is checked on every route.
    pub admin_api_key: bool,
    /// The control routes marked `@auth_level(AuthLevel.ADMIN_OPTIONAL)` (`HS`), which take only the admin key
    /// when one is set, in lists a later release extends; the mock's own `/admin/*` are among them whenever the
    /// release has an admin key.
    pub admin_routes: &'static [&'static [&'static str]],
    /// The path prefixes the key middleware lets through without a key.
    pub keyless_prefixes: &'static [&'static str],
    /// How an `Authorization` header's scheme is matched.
    pub bearer: Bearer,

    // The OpenAI routes.
    /// How the OpenAI stream chunks are encoded (`srt/entrypoints/openai/sse_utils.py`, `protocol.py`).
    pub openai_encoding: OpenAiEncoding,
    /// An OpenAI request's `seed` is passed on as `sampling_seed` (`protocol.py: to_sampling_params`).
    pub openai_seed: bool,
    /// Which of a chat request's `max_tokens` and `max_completion_tokens` wins (`serving_chat.py`).
    pub chat_max_tokens: ChatMaxTokens,
    /// A chat request may ask for `return_meta_info`: each choice then carries its item's native `meta_info`
    /// (`protocol.py: ChatCompletionRequest`, `serving_chat.py`).
    pub chat_return_meta_info: bool,
    /// An OpenAI answer's `usage` ends with `completion_tokens_details` (`protocol.py: UsageInfo`).
    pub usage_completion_tokens_details: bool,
    /// A chat answer's `message` writes `"tool_calls": null` when it calls no tool; later releases leave the key
    /// out (`protocol.py: ChatMessage._serialize`).
    pub chat_message_null_tool_calls: bool,
    /// A `/v1/models` card has `parent` (`protocol.py: ModelCard`).
    pub model_card_parent: bool,
    /// What a chat request's `tools` look like when the chat template sees them (`serving_chat.py`,
    /// `PROTO: Tool`, `Function`).
    pub chat_tool_dump: ToolDump,
    /// What `/flush_cache` answers when requests are running or waiting (`HS: flush_cache`).
    pub flush_refused: FlushRefused,
    /// `/tokenize` with `messages` renders with the request's `add_generation_prompt`
    /// (`serving_tokenize.py`); without it, always as for a chat completion.
    pub tokenize_add_generation_prompt: bool,

    // The prefix cache.
    /// What a request leaves in the radix prefix cache, after its prefill and at its end
    /// (`mock-server/conform/cache/`: observed on the running release).
    pub cache_inserts: CacheInserts,
    /// How `--enable-cache-report` sums an OpenAI answer's `usage.prompt_tokens_details`
    /// (`srt/entrypoints/openai/usage_processor.py`).
    pub cache_report: CacheReport,

    // The load reports.
    /// What `/get_load` and `/v1/loads` answer (which of the two the release serves is [`Self::routes`]').
    pub load_report: LoadReport,

    // The scheduler.
    /// What a sample reserves of the KV pool for the tokens it may still make, when it is admitted and while it
    /// runs (`PrefillAdder` in `srt/managers/schedule_policy.py`; `mock-server/conform/sched/`).
    pub reservations: Reservations,
    /// When a running sample's next token takes its KV slot from the pool (`mock-server/conform/sched/`).
    pub decode_slot: DecodeSlot,
}

/// When a decoding sample's next token takes its slot in the KV pool, which decides at which output length a
/// full pool retracts: observed on the running releases (`scripts/sched_probe.py`: eight samples of 20 prompt
/// tokens in a pool of 600 run three at a time and one is retracted at 180 output tokens on 0.5.15 and 0.5.23,
/// at 181 on 0.5.3, the new-token ratio it then sets, `(Σ out + 20 n) / (Σ max_new + 1)`, telling which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecodeSlot {
    /// 0.5.3: the step that computes a token's KV allocates its slot, so a sample holds its prompt and all
    /// but its last output token.
    OnStep,
    /// 0.5.15 and 0.5.23: the slot is allocated a step ahead (the overlap scheduler), so a sample holds its
    /// prompt and every output token.
    Ahead,
}

/// How a release's scheduler reserves KV for the tokens a sample may still make (`PrefillAdder.add_one_req`
/// and `_get_running_request_total_token_offset`, `srt/managers/schedule_policy.py`). A running sample's
/// reservation is its remaining `max_new_tokens` (at most 4,096) scaled by the new-token ratio, unless noted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reservations {
    /// 0.5.3: a sample is admitted when its extend and its whole `max_new_tokens` fit (a retracted sample
    /// counts all of them again).
    WholeMaxNew,
    /// 0.5.15: a sample is admitted when its extend, its remaining new tokens and one page fit.
    RemainingAndPage,
    /// 0.5.23: as 0.5.15, and a running sample with `ignore_eos` reserves all its remaining tokens ("Fixed-length
    /// requests cannot benefit from the early-EOS estimate").
    IgnoreEosWhole,
}

/// The shape of a release's load reports (`/get_load`, `/v1/loads`): read from each release's
/// `srt/entrypoints/v1_loads.py`, `srt/managers/load_snapshot.py` and `http_server.py`'s `get_load`, and
/// checked against the running releases (`mock-server/conform/golden/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadReport {
    /// 0.5.3: `/get_load` asks the scheduler (`Scheduler.get_load`): `[{"rid": null, "dp_rank": null,
    /// "num_reqs", "num_waiting_reqs", "num_tokens"}]`, the tokens being the used ones plus the waiting
    /// requests' prompts. No `/v1/loads`.
    Scheduler,
    /// 0.5.15: `/v1/loads` reads the scheduler's published `LoadSnapshot` (`{"timestamp", "version",
    /// "loads"}`; a load's core keys, then its `memory`, `disaggregation` and `queues` sections), and
    /// `/get_load` is a shim over it that adds `num_pending_tokens` and a `perf_counter` `ts_tic`.
    Snapshot,
    /// 0.5.23: the snapshot adds the accelerator's name and count, a load's own `timestamp`,
    /// `num_active_tokens`, `num_prealloc_ready_tokens`, the prefill totals, `decode_moments` and the
    /// `prealloc_ready` queue. No `/get_load`.
    SnapshotTotals,
}

/// The tokens a request leaves in the radix prefix cache: its prompt after the prefill (a request still
/// decoding is matched by its prompt alone), then its prompt and output at its end, each with or without the
/// last output token, whose KV the last step never computed. A request of no new tokens leaves its whole
/// prompt. Observed on the running releases (`scripts/cache_probe.py`, `mock-server/conform/cache/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CacheInserts {
    /// After the prefill the first output token is inserted with the prompt (0.5.15 keys the token its
    /// prefill sampled, `cache_unfinished_req` over `fill_ids`).
    pub prefill_first_token: bool,
    /// A finished request leaves its last output token too.
    pub finish_last_token: bool,
    /// An aborted request leaves its last output token too.
    pub abort_last_token: bool,
}

/// Which answers `usage.prompt_tokens_details` sums, and when it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheReport {
    /// `{"cached_tokens": N}` only when N > 0, N summed over every choice (0.5.3's `_details_if_cached`).
    EveryChoice,
    /// `{"cached_tokens": N}` only when N > 0, N summed over the first choice of each prompt.
    FirstChoiceIfAny,
    /// `PromptTokensDetails(cached_tokens=N)` always, N summed over the first choice of each prompt.
    FirstChoiceAlways,
}

/// How a chat request's tools reach the chat template: Pydantic's `model_dump` of the request's models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolDump {
    /// Each tool's `function` alone, `{"description", "name", "parameters", "strict": false}`.
    FunctionOnly,
    /// Each tool whole, `{"type", "function": {"description", "name", "parameters", "strict": false},
    /// "defer_loading"}`, unset fields `null` but the function's `defer_loading`, left out when unset.
    WithDefaults,
    /// Each tool whole, its `function`'s keys in the order the client gave them, then the unset ones of
    /// `description`, `name`, `parameters`; `strict` and `defer_loading` only when set.
    ClientOrder,
}

/// The body of `/flush_cache`'s 400 while requests run; the answer has no content type either way
/// (Starlette's `Response` without a media type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushRefused {
    /// The success text, with status 400.
    FlushedText,
    /// `Flush cache failed.` (the scheduler's `FlushCacheReqOutput` carries no message).
    Failed,
}

/// What an explicit `null` sampling value becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NullSamplingValues {
    /// Kept as `None` by a plain `__init__`: a numeric key fails its first comparison (an uncaught
    /// `TypeError`), a flag reads as false.
    Kept,
    /// Replaced by the default in `__post_init__`.
    Default,
}

/// `SamplingParams.verify`'s temperature and repetition-penalty checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verify {
    /// `temperature must be non-negative`; `repetition_penalty must be in [0, 2]`.
    NonNegative,
    /// `temperature must be a non-negative finite number`; `repetition_penalty must be in (0, 2] (1.0 = no
    /// penalty)`.
    Finite,
}

/// How `sampling_seed` defaults and is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedRule {
    /// Default 42; `null` refused (`sampling_seed should not be None`); no range.
    FortyTwo,
    /// Default `None`; no check.
    Unchecked,
    /// Default `None`; an integer outside `i64` refused (`sampling_seed must be in [-2**63, 2**63 - 1]`).
    InI64,
}

/// `logprob_start_len`'s default and the starts the scheduler refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogprobStart {
    /// `-1` is `len(prompt) - 1` (the last prompt token has an input logprob); a start at the prompt's end is
    /// refused.
    LastPromptToken,
    /// `-1` is `len(prompt)` (no input logprobs); only a start past the prompt's end is refused.
    PromptEnd,
}

/// What a streamed chunk's `output_ids` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamIds {
    /// Only the ids new in this chunk.
    Delta,
    /// Every id so far, or only the new ones with `--incremental-streaming-output`.
    Cumulative,
}

/// What a NaN or infinite logprob does to a non-stream body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NonFiniteBody {
    /// Starlette's `allow_nan=False`: the whole answer is a 500.
    ServerError,
    /// orjson writes `null`.
    Null,
}

/// What a request aborted in the waiting queue is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitingAbortShape {
    /// "Abort before prefill": no `output_ids`, no logprob keys.
    BeforePrefill,
    /// "Abort in waiting queue", with [`Release::meta_aborted_waiting`]'s keys.
    WaitingQueue,
}

/// The error event a stream sends for a `ValueError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorFrame {
    /// `{"error":{"message"}}`.
    MessageOnly,
    /// `{"error":{"message","type":"invalid_request_error","code":400,"retryable":false}}`.
    Typed,
}

/// A group of routes some releases serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum RouteGroup {
    /// `GET /` and `HEAD /`, `/tokenize`, `/detokenize` (and their `/v1/` forms), `/server_info`,
    /// `/model_info`, `/v1/loads`, `/update_weights_from_ipc`.
    InfoAndTokenize,
    /// `/get_load`.
    GetLoad,
    /// `/ready`: 200, or 503 while paused.
    Ready,
    /// `/begin_weight_update` and `/end_weight_update`.
    WeightUpdateSession,
}

/// `/get_weight_version` and `/weight_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightVersionRoute {
    /// `/get_weight_version` answers `{"weight_version"}`.
    Served,
    /// Both routes answer a deprecation 404, unless slime's patches serve them.
    Deprecated,
    /// No such routes.
    Absent,
}

/// One key of `/model_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelInfoKey {
    ModelPath,
    ServedModelName,
    TokenizerPath,
    IsGeneration,
    PreferredSamplingParams,
    WeightVersion,
    LoadFormat,
    ReasoningParser,
    ToolCallParser,
    DisaggregationMode,
    HasImageUnderstanding,
    HasAudioUnderstanding,
    ModelType,
    Architectures,
    /// 0.5.23: what the model can serve as an embedding model, and which caches the launch disabled.
    Embedding,
}

/// How the key middleware matches an `Authorization` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bearer {
    /// `f"Bearer {api_key}"` exactly (`srt/utils/common.py: add_api_key_middleware`).
    Exact,
    /// A scheme `bearer` in any case, one space, then the key (`srt/utils/auth.py: _check_bearer_token`).
    AnyCaseScheme,
}

/// How the OpenAI stream chunks are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenAiEncoding {
    /// A pydantic dump: every delta field written (`null` when unset), `"usage": null` on every chunk.
    Pydantic,
    /// msgspec with `omit_defaults`: unset delta fields left out but `reasoning_content`, no `usage` unless
    /// set.
    Msgspec,
}

/// Which of a chat request's two limits wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatMaxTokens {
    /// `max_tokens or max_completion_tokens`.
    MaxTokensFirst,
    /// `max_completion_tokens or max_tokens`.
    MaxCompletionTokensFirst,
}

/// A control route's body model: `(route, class, fields)`, each field `(name, type)` in Pydantic's notation.
pub type ControlModel = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// A chat message's role as the release's message union validates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ChatRoles {
    pub generic: &'static [&'static str],
    /// `_normalize_role`'s `ValueError` for a role that is neither a generic one nor `user`.
    pub error: &'static str,
    /// The union's label of the generic member and of the user member.
    pub labels: (&'static str, &'static str),
}

/// The order in which the scheduler's finish checks run after a token; the first that holds ends the sample. It
/// decides the finish of a token that ends it twice: the last one `max_new_tokens` allows that is also a stop id
/// or completes a stop string, or a stop id whose text completes a stop string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishOrder {
    /// `check_finished` (0.5.3): the length, a stop id, a stop string.
    LengthTokenText,
    /// `update_finish_state` (0.5.15): the length, a stop string or pattern, a stop id.
    LengthTextToken,
    /// `update_finish_state` (0.5.23): a stop string or pattern, a stop id, the length.
    TextTokenLength,
}

/// What encoding a stop "string" that is not one raises (`SamplingParams.normalize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NonTextStop {
    /// An uncaught exception: HTTP 500.
    Uncaught,
    /// The tokenizer's `ValueError`: HTTP 400 with its message.
    ValueError,
}

/// The decoder a release's FastAPI reads a JSON body with (`request::json_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonDecoder {
    /// Starlette's `json.loads`.
    Stdlib,
    /// `ORJSONRequest` (`orjson.loads`).
    Orjson,
}

/// How Pydantic reports a control body's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlBodies {
    /// A Pydantic dataclass: each field's error under `('body', field)`.
    Dataclass,
    /// A msgspec-style struct (`is-instance[Class]` or `function-after[build_struct(), Class]`): an
    /// `is_instance_of` error for the body, then each field's under the second member.
    Struct,
}

/// One key of `meta_info`. The logprob keys are written only when the request asked for logprobs (and the top
/// and token-id lists only when it asked for those).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetaKey {
    Id,
    FinishReason,
    PromptTokens,
    WeightVersion,
    NumRetractions,
    /// `input_token_logprobs` and `output_token_logprobs`.
    TokenLogprobs,
    OutputTokenLogprobsLength,
    /// `input_top_logprobs` and `output_top_logprobs`.
    TopLogprobs,
    /// `input_token_ids_logprobs` and `output_token_ids_logprobs`.
    TokenIdsLogprobs,
    /// `top_p_token_ids` and `top_p_token_offsets`, base64 int32 (slime's `sglang-top_p.patch`, written last by
    /// `add_logprob_to_meta_info`): only on a finished item's object, when it has top-p replay rows.
    TopPTokenIds,
    /// `output_token_sampling_mask`, `output_token_sampling_logprobs` and `output_token_sampling_mask_length`:
    /// only when the request asked for sampling masks.
    SamplingMask,
    ReasoningTokens,
    CompletionTokens,
    CachedTokens,
    /// `routed_experts`: only on a finished item's object, when routes were asked for from a server that
    /// returns them.
    RoutedExperts,
    /// `weight_versions`: only on an item's final object.
    WeightVersions,
    /// `cached_tokens_details`: `null` without a prefix-cache hit, else `{"device", "host"}`
    /// (`get_cached_tokens_details` of the scheduler's output streamer).
    CachedTokensDetails,
    /// `"dp_rank": null`: the rank of the data-parallel controller, which the mock (one scheduler) has none of.
    DpRank,
    /// Only on an item's final object.
    E2eLatency,
    /// Once per item: on its first object.
    ResponseSentToClientTs,
}

use MetaKey::*;
use ModelInfoKey as M;

/// 0.5.3 (October 2025).
pub const V0_5_3: Release = Release {
    number: "0.5.3",
    aliases: &["mid"],
    published: "October 2025",
    json_contract: false,
    null_sampling_values: NullSamplingValues::Kept,
    verify: Verify::NonNegative,
    sampling_seed: SeedRule::FortyTwo,
    stop_regex: false,
    finish_order: FinishOrder::LengthTokenText,
    stop_bounds: false,
    beam_width_and_watermark: false,
    structural_tag: false,
    hidden_states_last: false,
    logprob_start: LogprobStart::LastPromptToken,
    routed_experts: false,
    sampling_masks: false,
    duplicate_rids_refused: false,
    rids_before_pause_gate: false,
    pause_modes: false,
    stream_ids: StreamIds::Delta,
    decode_window_ids: true,
    non_finite_body: NonFiniteBody::ServerError,
    meta_generated: &[
        Id,
        FinishReason,
        PromptTokens,
        WeightVersion,
        TokenLogprobs,
        TopLogprobs,
        TokenIdsLogprobs,
        CompletionTokens,
        CachedTokens,
        E2eLatency,
    ],
    // 0.5.3 answers a waiting-queue abort "Abort before prefill"; the mock keeps this shape for its own
    // refusals (a full queue).
    meta_aborted_waiting: &[
        Id,
        FinishReason,
        WeightVersion,
        E2eLatency,
        TokenLogprobs,
        TopLogprobs,
        TokenIdsLogprobs,
        CompletionTokens,
    ],
    waiting_abort: WaitingAbortShape::BeforePrefill,
    weight_version_spans: false,
    prompt_token_ids: false,
    error_frame: ErrorFrame::MessageOnly,
    routes: &[RouteGroup::GetLoad],
    weight_version_route: WeightVersionRoute::Served,
    model_info: &[
        M::ModelPath,
        M::TokenizerPath,
        M::IsGeneration,
        M::PreferredSamplingParams,
        M::WeightVersion,
    ],
    slime_patches: false,
    generate_model: &[
        ("text", "nullable[union[str,list[str]]]"),
        ("input_ids", "nullable[union[list[list[int]],list[int]]]"),
        (
            "input_embeds",
            "nullable[union[list[list[list[float]]],list[list[float]]]]",
        ),
        (
            "sampling_params",
            "nullable[union[list[dict[any,any]],dict[any,any]]]",
        ),
        ("return_logprob", "nullable[union[list[bool],bool]]"),
        ("logprob_start_len", "nullable[union[list[int],int]]"),
        ("top_logprobs_num", "nullable[union[list[int],int]]"),
        (
            "token_ids_logprob",
            "nullable[union[list[list[int]],list[int]]]",
        ),
        ("return_text_in_logprobs", "bool"),
        ("stream", "bool"),
        ("log_metrics", "bool"),
        ("return_hidden_states", "union[list[bool],bool]"),
        ("modalities", "nullable[list[str]]"),
        (
            "session_params",
            "nullable[union[list[dict[any,any]],dict[any,any]]]",
        ),
        ("lora_path", "nullable[union[list[nullable[str]],str]]"),
        ("lora_id", "nullable[union[list[nullable[str]],str]]"),
        (
            "custom_logit_processor",
            "nullable[union[list[nullable[str]],str]]",
        ),
        ("bootstrap_host", "nullable[union[str,list[str]]]"),
        ("bootstrap_port", "nullable[union[list[nullable[int]],int]]"),
        ("bootstrap_room", "nullable[union[list[int],int]]"),
        ("bootstrap_pair_key", "nullable[union[str,list[str]]]"),
        ("data_parallel_rank", "nullable[int]"),
        ("background", "bool"),
        ("conversation_id", "nullable[str]"),
        ("priority", "nullable[int]"),
        ("extra_key", "nullable[union[str,list[str]]]"),
        ("no_logs", "bool"),
        ("custom_labels", "nullable[dict[str,str]]"),
        ("return_bytes", "bool"),
        ("rid", "nullable[union[str,list[str]]]"),
    ],
    validation_endpoints: &[
        ("/generate", "generate_request", 505),
        ("/update_weights_from_disk", "update_weights_from_disk", 684),
        ("/update_weight_version", "update_weight_version", 823),
        ("/abort_request", "abort_request", 966),
        ("/pause_generation", "pause_generation", 1020),
        ("/v1/completions", "openai_v1_completions", 1043),
        ("/v1/chat/completions", "openai_v1_chat_completions", 1051),
    ],
    control_models: &[
        (
            "/update_weight_version",
            "UpdateWeightVersionReqInput",
            &[
                ("new_version", "!str"),
                ("abort_all_requests", "bool"),
                ("rid", "nullable[union[str,list[str]]]"),
            ],
        ),
        (
            "/update_weights_from_disk",
            "UpdateWeightFromDiskReqInput",
            &[
                ("model_path", "!str"),
                ("load_format", "nullable[str]"),
                ("abort_all_requests", "bool"),
                ("weight_version", "nullable[str]"),
                ("is_async", "bool"),
                ("torch_empty_cache", "bool"),
                ("keep_pause", "bool"),
                ("rid", "nullable[union[str,list[str]]]"),
            ],
        ),
        (
            "/abort_request",
            "AbortReq",
            &[
                ("abort_all", "bool"),
                ("finished_reason", "nullable[dict[str,any]]"),
                ("abort_reason", "nullable[str]"),
                ("rid", "nullable[union[str,list[str]]]"),
            ],
        ),
    ],
    control_bodies: ControlBodies::Dataclass,
    json_decoder: JsonDecoder::Stdlib,
    non_text_stop: NonTextStop::Uncaught,
    chat_roles: ChatRoles {
        generic: &["system", "assistant", "tool", "function"],
        error: "'role' must be one of 'system', 'assistant', 'tool', or 'function' (case-insensitive).",
        labels: (
            "ChatCompletionMessageGenericParam",
            "ChatCompletionMessageUserParam",
        ),
    },
    admin_api_key: false,
    admin_routes: &[],
    keyless_prefixes: &["/health", "/metrics"],
    bearer: Bearer::Exact,
    openai_encoding: OpenAiEncoding::Pydantic,
    openai_seed: false,
    chat_max_tokens: ChatMaxTokens::MaxTokensFirst,
    chat_return_meta_info: false,
    usage_completion_tokens_details: false,
    chat_message_null_tool_calls: true,
    model_card_parent: false,
    chat_tool_dump: ToolDump::FunctionOnly,
    flush_refused: FlushRefused::FlushedText,
    tokenize_add_generation_prompt: false,
    cache_inserts: CacheInserts {
        prefill_first_token: false,
        finish_last_token: false,
        abort_last_token: false,
    },
    cache_report: CacheReport::EveryChoice,
    load_report: LoadReport::Scheduler,
    reservations: Reservations::WholeMaxNew,
    decode_slot: DecodeSlot::OnStep,
};

/// The control routes 0.5.15 marks `ADMIN_OPTIONAL`, and the mock's own `/admin/*`.
const ADMIN_OPTIONAL: &[&str] = &[
    "/abort_request",
    "/pause_generation",
    "/continue_generation",
    "/flush_cache",
    "/update_weights_from_disk",
    "/update_weights_from_tensor",
    "/update_weights_from_distributed",
    "/update_weights_from_ipc",
    "/init_weights_update_group",
    "/destroy_weights_update_group",
    "/update_weight_version",
    "/release_memory_occupation",
    "/resume_memory_occupation",
    "/post_process_weights",
    "/admin/",
];

/// 0.5.15 (July 2026), the base of slime's pinned, patched 0.5.15.post1.
pub const V0_5_15: Release = Release {
    number: "0.5.15",
    aliases: &[],
    published: "July 2026",
    null_sampling_values: NullSamplingValues::Default,
    verify: Verify::Finite,
    sampling_seed: SeedRule::Unchecked,
    stop_regex: true,
    finish_order: FinishOrder::LengthTextToken,
    stop_bounds: false,
    logprob_start: LogprobStart::PromptEnd,
    routed_experts: true,
    duplicate_rids_refused: true,
    rids_before_pause_gate: true,
    pause_modes: true,
    stream_ids: StreamIds::Cumulative,
    decode_window_ids: false,
    non_finite_body: NonFiniteBody::Null,
    meta_generated: &[
        Id,
        FinishReason,
        PromptTokens,
        WeightVersion,
        NumRetractions,
        TokenLogprobs,
        OutputTokenLogprobsLength,
        TopLogprobs,
        TokenIdsLogprobs,
        TopPTokenIds,
        ReasoningTokens,
        CompletionTokens,
        CachedTokens,
        CachedTokensDetails,
        RoutedExperts,
        DpRank,
        E2eLatency,
        ResponseSentToClientTs,
    ],
    // `_handle_abort_req`: the reduced dict, then `add_logprob_to_meta_info`, then `completion_tokens`; the
    // object is the item's first and last, so it carries `response_sent_to_client_ts`.
    meta_aborted_waiting: &[
        Id,
        FinishReason,
        WeightVersion,
        E2eLatency,
        TokenLogprobs,
        OutputTokenLogprobsLength,
        TopLogprobs,
        TokenIdsLogprobs,
        CompletionTokens,
        ResponseSentToClientTs,
    ],
    waiting_abort: WaitingAbortShape::WaitingQueue,
    error_frame: ErrorFrame::Typed,
    routes: &[RouteGroup::InfoAndTokenize, RouteGroup::GetLoad],
    weight_version_route: WeightVersionRoute::Deprecated,
    model_info: &[
        M::ModelPath,
        M::TokenizerPath,
        M::IsGeneration,
        M::PreferredSamplingParams,
        M::WeightVersion,
        M::HasImageUnderstanding,
        M::HasAudioUnderstanding,
        M::ModelType,
        M::Architectures,
    ],
    slime_patches: true,
    generate_model: &[
        ("text", "nullable[union[str,list[str]]]"),
        ("input_ids", "ids"),
        (
            "input_embeds",
            "nullable[union[list[list[list[float]]],list[list[float]]]]",
        ),
        ("mm_hashes", "nullable[union[list[str],list[list[str]]]]"),
        ("use_audio_in_video", "bool"),
        (
            "sampling_params",
            "nullable[union[list[dict[str,any]],dict[str,any]]]",
        ),
        ("return_logprob", "nullable[union[list[bool],bool]]"),
        ("logprob_start_len", "nullable[union[list[int],int]]"),
        ("top_logprobs_num", "nullable[union[list[int],int]]"),
        (
            "token_ids_logprob",
            "nullable[union[list[list[int]],list[int]]]",
        ),
        ("return_text_in_logprobs", "bool"),
        ("stream", "bool"),
        ("log_metrics", "bool"),
        ("return_hidden_states", "union[list[bool],bool]"),
        ("return_routed_experts", "bool"),
        ("routed_experts_start_len", "int"),
        ("return_indexer_topk", "bool"),
        ("modalities", "nullable[list[str]]"),
        ("session_params", "nullable[dict[str,any]]"),
        ("lora_path", "nullable[union[list[nullable[str]],str]]"),
        ("lora_id", "nullable[union[list[nullable[str]],str]]"),
        (
            "custom_logit_processor",
            "nullable[union[list[nullable[str]],str]]",
        ),
        ("bootstrap_host", "nullable[union[list[nullable[str]],str]]"),
        ("bootstrap_port", "nullable[union[list[nullable[int]],int]]"),
        ("bootstrap_room", "nullable[union[list[nullable[int]],int]]"),
        (
            "bootstrap_pair_key",
            "nullable[union[list[nullable[str]],str]]",
        ),
        ("decode_tp_size", "nullable[union[list[nullable[int]],int]]"),
        ("routed_dp_rank", "nullable[int]"),
        ("disagg_prefill_dp_rank", "nullable[int]"),
        ("routing_key", "nullable[str]"),
        ("conversation_id", "nullable[str]"),
        ("background", "bool"),
        ("require_reasoning", "bool"),
        ("priority", "nullable[int]"),
        ("extra_key", "nullable[union[str,list[str]]]"),
        ("no_logs", "bool"),
        ("custom_labels", "nullable[dict[str,str]]"),
        ("return_bytes", "bool"),
        ("return_entropy", "bool"),
        ("return_prompt_token_ids", "bool"),
        ("external_trace_header", "nullable[dict[str,any]]"),
        ("received_time", "nullable[float]"),
        ("need_wait_for_mm_inputs", "nullable[bool]"),
        ("num_items_assigned", "nullable[dict[any,list[int]]]"),
        ("mm_data_mooncake", "nullable[list[any]]"),
        ("encoder_urls", "nullable[list[str]]"),
        ("max_dynamic_patch", "nullable[int]"),
        ("min_dynamic_patch", "nullable[int]"),
        ("image_max_dynamic_patch", "nullable[int]"),
        ("video_max_dynamic_patch", "nullable[int]"),
        ("images_config", "nullable[dict[any,any]]"),
        (
            "multi_item_delimiter_indices",
            "nullable[union[list[list[int]],list[int]]]",
        ),
        ("rid", "nullable[union[str,list[str]]]"),
        ("session_id", "nullable[str]"),
        ("http_worker_ipc", "nullable[str]"),
    ],
    validation_endpoints: &[
        ("/generate", "generate_request", 785),
        (
            "/update_weights_from_disk",
            "update_weights_from_disk",
            1128,
        ),
        ("/update_weight_version", "update_weight_version", 1325),
        ("/abort_request", "abort_request", 1499),
        ("/pause_generation", "pause_generation", 1577),
        ("/continue_generation", "continue_generation", 1590),
        ("/v1/completions", "openai_v1_completions", 1606),
        ("/v1/chat/completions", "openai_v1_chat_completions", 1614),
        ("/v1/loads", "get_loads", 72),
        ("/v1/tokenize", "openai_v1_tokenize", 1648),
        ("/tokenize", "openai_v1_tokenize", 1648),
        ("/v1/detokenize", "openai_v1_detokenize", 1666),
        ("/detokenize", "openai_v1_detokenize", 1666),
    ],
    control_models: &[
        (
            "/update_weight_version",
            "UpdateWeightVersionReqInput",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("new_version", "!str"),
                ("abort_all_requests", "bool"),
            ],
        ),
        (
            "/pause_generation",
            "PauseGenerationReqInput",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("mode", "literal['abort','retract','in_place']"),
            ],
        ),
        (
            "/continue_generation",
            "ContinueGenerationReqInput",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("torch_empty_cache", "bool"),
            ],
        ),
        (
            "/update_weights_from_disk",
            "UpdateWeightFromDiskReqInput",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("model_path", "!str"),
                ("load_format", "nullable[str]"),
                ("abort_all_requests", "bool"),
                ("weight_version", "nullable[str]"),
                ("is_async", "bool"),
                ("torch_empty_cache", "bool"),
                ("keep_pause", "bool"),
                ("recapture_cuda_graph", "bool"),
                ("token_step", "int"),
                ("flush_cache", "bool"),
                ("manifest", "nullable[dict[str,any]]"),
            ],
        ),
        (
            "/abort_request",
            "AbortReq",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("abort_all", "bool"),
                (
                    "finished_reason",
                    "nullable[dict[str,nullable[union[str,int,list[int]]]]]",
                ),
                ("abort_message", "nullable[str]"),
            ],
        ),
    ],
    control_bodies: ControlBodies::Struct,
    json_decoder: JsonDecoder::Stdlib,
    non_text_stop: NonTextStop::ValueError,
    chat_roles: ChatRoles {
        generic: &[
            "system",
            "assistant",
            "tool",
            "function",
            "developer",
            "latest_reminder",
        ],
        error: "'role' must be one of 'system', 'assistant', 'tool', 'function', 'developer', 'latest_reminder' \
                (case-insensitive).",
        labels: (
            "ChatCompletionMessageGenericParam",
            "ChatCompletionMessageUserParam",
        ),
    },
    admin_api_key: true,
    admin_routes: &[ADMIN_OPTIONAL],
    bearer: Bearer::AnyCaseScheme,
    openai_encoding: OpenAiEncoding::Msgspec,
    openai_seed: true,
    chat_max_tokens: ChatMaxTokens::MaxCompletionTokensFirst,
    chat_return_meta_info: true,
    model_card_parent: true,
    chat_tool_dump: ToolDump::WithDefaults,
    flush_refused: FlushRefused::Failed,
    cache_inserts: CacheInserts {
        prefill_first_token: true,
        finish_last_token: true,
        abort_last_token: true,
    },
    cache_report: CacheReport::FirstChoiceIfAny,
    load_report: LoadReport::Snapshot,
    reservations: Reservations::RemainingAndPage,
    decode_slot: DecodeSlot::Ahead,
    ..V0_5_3
};

/// 0.5.23 (October 2026), the newest release.
pub const V0_5_23: Release = Release {
    number: "0.5.23",
    aliases: &["latest"],
    published: "October 2026",
    json_contract: true,
    sampling_seed: SeedRule::InI64,
    beam_width_and_watermark: true,
    finish_order: FinishOrder::TextTokenLength,
    stop_bounds: true,
    structural_tag: true,
    hidden_states_last: true,
    sampling_masks: true,
    meta_generated: &[
        Id,
        FinishReason,
        PromptTokens,
        WeightVersion,
        NumRetractions,
        TokenLogprobs,
        OutputTokenLogprobsLength,
        TopLogprobs,
        TokenIdsLogprobs,
        SamplingMask,
        ReasoningTokens,
        CompletionTokens,
        CachedTokens,
        WeightVersions,
        CachedTokensDetails,
        RoutedExperts,
        DpRank,
        E2eLatency,
        ResponseSentToClientTs,
    ],
    meta_aborted_waiting: &[
        Id,
        FinishReason,
        WeightVersion,
        E2eLatency,
        WeightVersions,
        TokenLogprobs,
        OutputTokenLogprobsLength,
        TopLogprobs,
        TokenIdsLogprobs,
        CompletionTokens,
        ResponseSentToClientTs,
    ],
    weight_version_spans: true,
    prompt_token_ids: true,
    routes: &[
        RouteGroup::InfoAndTokenize,
        RouteGroup::Ready,
        RouteGroup::WeightUpdateSession,
    ],
    weight_version_route: WeightVersionRoute::Absent,
    model_info: &[
        M::ModelPath,
        M::ServedModelName,
        M::TokenizerPath,
        M::IsGeneration,
        M::PreferredSamplingParams,
        M::WeightVersion,
        M::LoadFormat,
        M::ReasoningParser,
        M::ToolCallParser,
        M::DisaggregationMode,
        M::HasImageUnderstanding,
        M::HasAudioUnderstanding,
        M::ModelType,
        M::Architectures,
        M::Embedding,
    ],
    slime_patches: false,
    generate_model: &[
        ("text", "nullable[union[str,list[str]]]"),
        ("input_ids", "ids"),
        (
            "input_embeds",
            "nullable[union[list[list[list[float]]],list[list[float]]]]",
        ),
        ("mm_hashes", "nullable[union[list[str],list[list[str]]]]"),
        (
            "mm_content_hashes",
            "nullable[union[list[nullable[str]],list[list[nullable[str]]]]]",
        ),
        ("use_audio_in_video", "bool"),
        ("video_config", "nullable[dict[str,any]]"),
        (
            "sampling_params",
            "nullable[union[list[dict[str,any]],dict[str,any]]]",
        ),
        ("return_logprob", "nullable[union[list[bool],bool]]"),
        ("logprob_start_len", "nullable[union[list[int],int]]"),
        ("top_logprobs_num", "nullable[union[list[int],int]]"),
        (
            "token_ids_logprob",
            "nullable[union[list[list[int]],list[int]]]",
        ),
        ("return_sampling_mask", "nullable[union[list[bool],bool]]"),
        (
            "sampling_logprobs_mode",
            "nullable[union[list[nullable[literal['selected','support']]],literal['selected','support']]]",
        ),
        ("return_text_in_logprobs", "bool"),
        ("return_flat_raw_top_logprobs", "bool"),
        ("return_flat_raw_output_top_logprobs", "bool"),
        ("return_flat_raw_top_logprobs_b64", "bool"),
        ("stream", "bool"),
        ("log_metrics", "bool"),
        (
            "return_hidden_states",
            "union[list[union[bool,literal['last']]],bool,literal['last']]",
        ),
        ("return_routed_experts", "bool"),
        ("routed_experts_start_len", "int"),
        ("return_indexer_topk", "bool"),
        ("modalities", "nullable[list[str]]"),
        ("session_params", "nullable[dict[str,any]]"),
        ("lora_path", "nullable[union[list[nullable[str]],str]]"),
        ("lora_id", "nullable[union[list[nullable[str]],str]]"),
        (
            "custom_logit_processor",
            "nullable[union[list[nullable[str]],str]]",
        ),
        ("bootstrap_host", "nullable[union[list[nullable[str]],str]]"),
        ("bootstrap_port", "nullable[union[list[nullable[int]],int]]"),
        ("bootstrap_room", "nullable[union[list[nullable[int]],int]]"),
        (
            "bootstrap_pair_key",
            "nullable[union[list[nullable[str]],str]]",
        ),
        ("decode_tp_size", "nullable[union[list[nullable[int]],int]]"),
        ("routed_dp_rank", "nullable[int]"),
        ("data_parallel_rank", "nullable[int]"),
        ("disagg_prefill_dp_rank", "nullable[int]"),
        ("routing_key", "nullable[str]"),
        ("conversation_id", "nullable[str]"),
        ("background", "bool"),
        ("require_reasoning", "bool"),
        ("max_thinking_tokens", "nullable[int]"),
        ("priority", "nullable[int]"),
        ("extra_key", "nullable[union[str,list[str]]]"),
        ("no_logs", "bool"),
        ("custom_labels", "nullable[dict[str,str]]"),
        ("return_bytes", "bool"),
        ("return_entropy", "bool"),
        ("return_prompt_token_ids", "bool"),
        ("external_trace_header", "nullable[dict[str,any]]"),
        ("received_time", "nullable[float]"),
        ("need_wait_for_mm_inputs", "nullable[bool]"),
        ("num_items_assigned", "nullable[dict[any,list[int]]]"),
        ("encoder_urls", "nullable[list[str]]"),
        ("max_dynamic_patch", "nullable[int]"),
        ("min_dynamic_patch", "nullable[int]"),
        ("image_max_dynamic_patch", "nullable[int]"),
        ("video_max_dynamic_patch", "nullable[int]"),
        ("images_config", "nullable[dict[any,any]]"),
        ("mm_processor_kwargs", "nullable[dict[any,any]]"),
        (
            "multi_item_delimiter_indices",
            "nullable[union[list[list[int]],list[int]]]",
        ),
        (
            "token_indices_to_pool",
            "nullable[union[list[list[int]],list[int]]]",
        ),
        ("cache_salt", "nullable[union[str,list[str]]]"),
        ("rid", "nullable[union[str,list[str]]]"),
        ("session_id", "nullable[str]"),
        ("http_worker_ipc", "nullable[str]"),
    ],
    validation_endpoints: &[
        ("/generate", "generate_request", 928),
        (
            "/update_weights_from_disk",
            "update_weights_from_disk",
            1300,
        ),
        ("/update_weight_version", "update_weight_version", 1527),
        ("/abort_request", "abort_request", 1721),
        ("/pause_generation", "pause_generation", 1831),
        ("/continue_generation", "continue_generation", 1844),
        ("/v1/completions", "openai_v1_completions", 1860),
        ("/v1/chat/completions", "openai_v1_chat_completions", 1870),
        ("/v1/loads", "get_loads", 96),
        ("/v1/tokenize", "openai_v1_tokenize", 1906),
        ("/tokenize", "openai_v1_tokenize", 1906),
        ("/v1/detokenize", "openai_v1_detokenize", 1924),
        ("/detokenize", "openai_v1_detokenize", 1924),
    ],
    control_models: &[
        (
            "/update_weight_version",
            "UpdateWeightVersionReqInput",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("new_version", "!str"),
                ("abort_all_requests", "bool"),
            ],
        ),
        (
            "/pause_generation",
            "PauseGenerationReqInput",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("mode", "literal['abort','retract','in_place']"),
            ],
        ),
        (
            "/continue_generation",
            "ContinueGenerationReqInput",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("torch_empty_cache", "bool"),
            ],
        ),
        (
            "/update_weights_from_disk",
            "UpdateWeightFromDiskReqInput",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("model_path", "!str"),
                ("load_format", "nullable[str]"),
                ("abort_all_requests", "bool"),
                ("weight_version", "nullable[str]"),
                ("is_async", "bool"),
                ("torch_empty_cache", "bool"),
                ("keep_pause", "bool"),
                ("recapture_cuda_graph", "bool"),
                ("token_step", "int"),
                ("flush_cache", "bool"),
                ("manifest", "nullable[dict[str,any]]"),
            ],
        ),
        (
            "/abort_request",
            "AbortReq",
            &[
                ("rid", "nullable[str]"),
                ("http_worker_ipc", "nullable[str]"),
                ("abort_all", "bool"),
                (
                    "finished_reason",
                    "nullable[dict[str,nullable[union[str,int,list[int]]]]]",
                ),
                ("abort_message", "nullable[str]"),
                ("weight_versions", "nullable[list[any]]"),
            ],
        ),
    ],
    control_bodies: ControlBodies::Struct,
    json_decoder: JsonDecoder::Orjson,
    non_text_stop: NonTextStop::ValueError,
    chat_roles: ChatRoles {
        generic: &[
            "system",
            "assistant",
            "tool",
            "function",
            "developer",
            "latest_reminder",
            "root",
        ],
        error: "'role' must be one of 'system', 'assistant', 'tool', 'function', 'developer', 'latest_reminder', \
                'root' (case-insensitive).",
        labels: (
            "function-after[validate_thinking_parts_role(), ChatCompletionMessageGenericParam]",
            "function-after[validate_thinking_parts_role(), ChatCompletionMessageUserParam]",
        ),
    },
    admin_routes: &[
        ADMIN_OPTIONAL,
        &["/begin_weight_update", "/end_weight_update"],
    ],
    keyless_prefixes: &["/health", "/metrics", "/ready"],
    tokenize_add_generation_prompt: true,
    cache_inserts: CacheInserts {
        prefill_first_token: false,
        finish_last_token: false,
        abort_last_token: true,
    },
    cache_report: CacheReport::FirstChoiceAlways,
    load_report: LoadReport::SnapshotTotals,
    reservations: Reservations::IgnoreEosWhole,
    usage_completion_tokens_details: true,
    chat_message_null_tool_calls: false,
    chat_tool_dump: ToolDump::ClientOrder,
    ..V0_5_15
};

/// Every release the server can answer as, oldest first; the last is the default.
pub static RELEASES: [Release; 3] = [V0_5_3, V0_5_15, V0_5_23];

impl Release {
    /// Whether it serves the routes of `group`.
    pub fn serves(&self, group: RouteGroup) -> bool {
        self.routes.contains(&group)
    }

    /// Whether `path` is a control route that takes only the admin key when one is set (an entry ending in
    /// `/` covers the paths below it).
    pub fn is_admin_route(&self, path: &str) -> bool {
        self.admin_routes.iter().copied().flatten().any(|route| {
            if route.ends_with('/') {
                path.starts_with(route)
            } else {
                path == *route
            }
        })
    }

    /// Whether the key middleware lets `path` through without a key.
    pub fn is_keyless(&self, path: &str) -> bool {
        self.keyless_prefixes.iter().any(|p| path.starts_with(p))
    }
}

/// The release the server answers as: a handle on one of [`RELEASES`], read through [`Deref`]
/// (`version.json_contract`). Two handles are equal when they name the same release.
#[derive(Clone, Copy)]
pub struct SglangVersion(&'static Release);

impl SglangVersion {
    /// 0.5.3, for tests and examples that name it.
    pub const V0_5_3: SglangVersion = SglangVersion(&RELEASES[0]);
    /// 0.5.15.
    pub const V0_5_15: SglangVersion = SglangVersion(&RELEASES[1]);
    /// 0.5.23.
    pub const V0_5_23: SglangVersion = SglangVersion(&RELEASES[2]);
    /// The newest release, the server's default.
    pub const NEWEST: SglangVersion = SglangVersion(&RELEASES[RELEASES.len() - 1]);

    /// Every release, oldest first.
    pub fn all() -> impl ExactSizeIterator<Item = SglangVersion> + Clone {
        RELEASES.iter().map(SglangVersion)
    }

    /// The release number.
    pub fn as_str(self) -> &'static str {
        self.0.number
    }

    /// The release itself.
    pub fn release(self) -> &'static Release {
        self.0
    }

    /// What the release answers on `/server_info` as `scripts/real_sglang.py start` launches it, in its key order:
    /// every `ServerArgs` field as the launch resolved it, the scheduler's info and `internal_states[]`
    /// (`mock-core/data/info.json`, printed by `scripts/server_info.py` from the running releases). The server
    /// writes its own flags' values over the fields they set.
    pub fn server_info(self) -> &'static serde_json::Map<String, serde_json::Value> {
        self.info()["server_info"]
            .as_object()
            .unwrap_or_else(|| panic!("info.json holds no /server_info of {}", self.as_str()))
    }

    /// The `embedding` object that ends the release's `/model_info` (0.5.23), as the same launch reported it.
    pub fn model_info_embedding(self) -> Option<&'static serde_json::Value> {
        self.info().get("model_info_embedding")
    }

    /// This release's entry of `mock-core/data/info.json`.
    fn info(self) -> &'static serde_json::Value {
        static INFO: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
        let info = INFO.get_or_init(|| {
            serde_json::from_str(include_str!("../data/info.json"))
                .expect("info.json is the script's JSON")
        });
        &info["releases"][self.as_str()]
    }
}

impl Deref for SglangVersion {
    type Target = Release;

    fn deref(&self) -> &Release {
        self.0
    }
}

impl PartialEq for SglangVersion {
    fn eq(&self, other: &Self) -> bool {
        self.0.number == other.0.number
    }
}

impl Eq for SglangVersion {}

impl Default for SglangVersion {
    fn default() -> Self {
        SglangVersion::NEWEST
    }
}

impl fmt::Debug for SglangVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SglangVersion({})", self.0.number)
    }
}

impl fmt::Display for SglangVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.number)
    }
}

/// The releases and their aliases in words: "0.5.3, 0.5.15 or 0.5.23 (or the aliases mid, latest)".
pub fn listed() -> String {
    let numbers: Vec<&str> = RELEASES.iter().map(|r| r.number).collect();
    let (last, rest) = numbers.split_last().expect("at least one release");
    let mut out = if rest.is_empty() {
        (*last).to_owned()
    } else {
        format!("{} or {last}", rest.join(", "))
    };
    let aliases: Vec<String> = RELEASES
        .iter()
        .flat_map(|r| r.aliases.iter().map(move |a| format!("{a} = {}", r.number)))
        .collect();
    if !aliases.is_empty() {
        out.push_str(&format!(" (or the aliases {})", aliases.join(", ")));
    }
    out
}

/// The numbers of the releases for which `has` holds, in words: "0.5.15 and 0.5.23".
pub fn numbers_where(has: fn(&Release) -> bool) -> String {
    let numbers: Vec<&str> = RELEASES
        .iter()
        .filter(|r| has(r))
        .map(|r| r.number)
        .collect();
    match numbers.split_last() {
        None => "none".to_owned(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// The error for a `--sglang-version` value that names no release the server answers as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown SGLang version {0:?}: expected {list}", list = listed())]
pub struct UnknownSglangVersion(pub String);

impl FromStr for SglangVersion {
    type Err = UnknownSglangVersion;

    /// A release number (a leading `v` allowed), or one of its aliases.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        let wanted = wanted.trim_start_matches('v');
        SglangVersion::all()
            .find(|v| v.number == wanted || v.aliases.contains(&wanted))
            .ok_or_else(|| UnknownSglangVersion(s.to_owned()))
    }
}
