//! An OpenAI `/v1/completions` or `/v1/chat/completions` body turned into the native `/generate` body SGLang
//! builds from it (`_convert_to_internal_request` in `serving_completions.py` and `serving_chat.py`), plus
//! what the answer needs to know about the request (echo, `n`, logprobs, usage options).

use serde_json::{Map, Value, json};

use crate::error::ApiError;
use mock_core::ServerConfig;
use mock_core::model::Tokenizer;
use mock_core::release::SglangVersion;
use mock_core::release::{ChatMaxTokens, ToolDump};
use mock_core::request;
use mock_core::request::{pydantic_bool, pydantic_int};

/// Which OpenAI route a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Completions,
    Chat,
}

impl Api {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Api::Completions => "/v1/completions",
            Api::Chat => "/v1/chat/completions",
        }
    }
}

/// An OpenAI request as the answer needs it, and the native body that runs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpenAiRequest {
    pub api: Api,
    /// Echoed in every answer, as SGLang does (`model=request.model`).
    pub model: String,
    /// `n` as given. The answer's usage sums run Python's `range(0, len(responses), n)` (a whole answer) and
    /// `i % n` (a stream's usage chunk) with it, which an `n` below 1 breaks ([`OpenAiRequest::n_refusal`]).
    pub n_given: i64,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with `usage` and no choices.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`: `usage` on every chunk too.
    pub continuous_usage: bool,
    /// Completions: `Some(k)` when `logprobs` is an integer. Chat: `Some(top_logprobs)` when `logprobs` is
    /// true. `None`: no logprobs in the answer.
    pub logprobs: Option<u32>,
    /// Completions with `echo`: the text put before each prompt's answers, one per prompt.
    pub echo: Option<Vec<String>>,
    /// `return_routed_experts` (0.5.15 and later): the answer's `sglext.routed_experts` carries the first
    /// choice's routes, when the server returns them.
    pub return_routed_experts: bool,
    /// The `/generate` body SGLang builds from the request.
    pub native: Value,
    /// The release answering: chat stream chunks differ.
    pub sglang_version: SglangVersion,
    /// `--enable-cache-report`: `usage.prompt_tokens_details` carries the prefix-cache hits.
    pub cache_report: bool,
    /// A chat request's `return_meta_info` (0.5.15 and later): each choice carries its native `meta_info`.
    pub return_meta_info: bool,
}

/// Sampling fields passed to `sampling_params` under the same name.
const SAME_NAME: &[&str] = &[
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "stop",
    "stop_token_ids",
    "n",
    "no_stop_trim",
    "ignore_eos",
    "skip_special_tokens",
    "logit_bias",
    "regex",
    "ebnf",
];

/// A sampling field as the request model holds it after Pydantic's lax parse, which is what reaches
/// `sampling_params`: a `float` field's bool, integer or numeric string is a float (`"top_p": false` is `0.0`,
/// `"presence_penalty": "1"` is `1.0`), an `int` field's value an int, a `bool` field's a bool. Anything else
/// passes as sent: the model has refused what it refuses before this.
fn as_the_model_holds(key: &str, value: &Value) -> Value {
    let float = || match value {
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    };
    let held = match key {
        "temperature" | "top_p" | "min_p" | "presence_penalty" | "frequency_penalty"
        | "repetition_penalty" => float().filter(|f| f.is_finite()).map(Value::from),
        "top_k" | "n" => pydantic_int(value).map(Value::from),
        "no_stop_trim" | "ignore_eos" | "skip_special_tokens" => {
            pydantic_bool(value).map(Value::from)
        }
        _ => None,
    };
    held.unwrap_or_else(|| value.clone())
}

/// Translate a parsed body. Type errors are Pydantic's 400s; the OpenAI layer's own checks ("Prompt cannot
/// be empty", messages that do not fit the template) are `BadRequestError`s. Sampling values are checked by
/// the native planner, as in SGLang.
pub(crate) fn translate(
    api: Api,
    body: &Value,
    config: &ServerConfig,
    served_model_name: &str,
    tokenizer: &Tokenizer,
) -> Result<OpenAiRequest, ApiError> {
    // The chat model's `mode="before"` validator `set_tool_choice_default` reads `values.get(...)` before
    // Pydantic checks the body's type: a body that is not an object is its uncaught `AttributeError`, in every
    // release.
    if api == Api::Chat && !body.is_object() {
        return Err(ApiError::internal(
            "AttributeError: the chat body has no attribute 'get' (set_tool_choice_default)",
        ));
    }
    let obj = body_object(body)?;
    // FastAPI validates the body against the release's request model before SGLang's code runs: every field's
    // type error, in the model's order, with its input.
    let errors = match api {
        Api::Completions => request::openai_errors(body, config.sglang_version, "completions"),
        // The filled `tool_choice` is seen only in a `missing` error's input (the model does not type it), so the
        // body is copied only when `messages`, the one required field, is missing.
        Api::Chat if !obj.contains_key("messages") => {
            let input = Value::Object(with_tool_choice_default(obj));
            request::openai_errors(&input, config.sglang_version, "chat")
        }
        Api::Chat => request::openai_errors(body, config.sglang_version, "chat"),
    };
    if let Some(errors) = errors {
        return Err(ApiError::Pydantic(errors));
    }
    let model = match present(obj, "model") {
        None => served_model_name.to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(type_error("model", "string_type", "a valid string")),
    };
    let stream = bool_field(obj, "stream")?.unwrap_or(false);
    // No release checks `n`: one below 1 runs as one sample, and what breaks is the answer (`n_refusal`).
    let n_given = int_field(obj, "n")?.unwrap_or(1);
    let (include_usage, continuous_usage) = stream_options(obj, stream)?;
    let mut sampling = Map::new();
    for key in SAME_NAME {
        if let Some(value) = present(obj, key) {
            sampling.insert((*key).to_owned(), as_the_model_holds(key, value));
        }
    }
    // `stop_regex` is a field of the request models from 0.5.15 (`to_sampling_params`); 0.5.3's models ignore it.
    if config.sglang_version.stop_regex
        && let Some(value) = present(obj, "stop_regex")
    {
        sampling.insert("stop_regex".to_owned(), value.clone());
    }
    // `seed: Optional[int]`: passed on as `sampling_seed` where the release does (`openai_seed`), else read and
    // dropped.
    let seed = int_field(obj, "seed")?;
    if config.sglang_version.openai_seed
        && let Some(seed) = seed
    {
        sampling.insert("sampling_seed".to_owned(), Value::from(seed));
    }
    if let Some(min) = present(obj, "min_tokens") {
        sampling.insert("min_new_tokens".to_owned(), min.clone());
    }
    response_format(obj, &mut sampling)?;
    let mut native = Map::new();
    let (logprobs, echo) = match api {
        Api::Completions => completions_prompt(obj, tokenizer, &mut native, &mut sampling)?,
        Api::Chat => chat_prompt(obj, config, tokenizer, &mut native, &mut sampling)?,
    };
    let return_meta_info = match api {
        Api::Completions => false,
        Api::Chat => meta_info_fields(obj, config.sglang_version, stream, &mut native)?,
    };
    native.insert("sampling_params".to_owned(), Value::Object(sampling));
    native.insert("return_logprob".to_owned(), json!(logprobs.is_some()));
    native.insert("top_logprobs_num".to_owned(), json!(logprobs.unwrap_or(0)));
    let logprob_start_len: i64 = if echo.is_some() && logprobs.is_some() {
        0
    } else {
        -1
    };
    native.insert("logprob_start_len".to_owned(), json!(logprob_start_len));
    native.insert("return_text_in_logprobs".to_owned(), json!(true));
    native.insert("stream".to_owned(), json!(stream));
    if let Some(rid) = present(obj, "rid") {
        native.insert("rid".to_owned(), rid.clone());
    }
    // `return_routed_experts: bool = False` and `routed_experts_start_len: int = 0` (0.5.15 and later; 0.5.3's
    // models have neither and ignore them), passed on when routes are asked for (the start means nothing
    // otherwise); the scheduler checks the start.
    let return_routed_experts = match config.sglang_version.routed_experts {
        false => false,
        true => {
            let asked = bool_field(obj, "return_routed_experts")?.unwrap_or(false);
            let start = int_field(obj, "routed_experts_start_len")?.unwrap_or(0);
            if asked {
                native.insert("return_routed_experts".to_owned(), json!(true));
                native.insert("routed_experts_start_len".to_owned(), json!(start));
            }
            asked
        }
    };
    Ok(OpenAiRequest {
        api,
        model,
        n_given,
        stream,
        include_usage,
        continuous_usage,
        logprobs,
        echo,
        return_routed_experts,
        native: Value::Object(native),
        sglang_version: config.sglang_version,
        cache_report: config.enable_cache_report,
        return_meta_info,
    })
}

impl OpenAiRequest {
    /// Samples per prompt: `n`, or 1 for an `n` below 1, which SGLang runs as one sample.
    pub(crate) fn n(&self) -> usize {
        self.n_given.max(1) as usize
    }

    /// What a whole (non-stream) answer of `prompts` prompts fails with for an `n` below 1, as the running 0.5.23
    /// answered: several prompts index past the choices (`list index out of range`, a 500); one prompt with `n:
    /// 0` is `range()`'s `ValueError`, which the handler answers as a `BadRequest` (`serving_base.py`,
    /// `handle_request`); a negative `n` is served, its usage summing no prompt ([`OpenAiRequest::first_of_prompt`]).
    pub(crate) fn n_refusal(&self, prompts: usize) -> Option<ApiError> {
        match self.n_given {
            1.. => None,
            _ if prompts > 1 => Some(ApiError::OpenAi {
                status: 500,
                err_type: "InternalServerError",
                message: "Internal server error: list index out of range".to_owned(),
            }),
            0 => Some(ApiError::OpenAi {
                status: 400,
                err_type: "BadRequest",
                message: "range() arg 3 must not be zero".to_owned(),
            }),
            ..0 => None,
        }
    }

    /// Whether choice `index` counts its prompt's tokens in the usage, as `UsageProcessor` picks them: a whole
    /// answer's every `n`-th choice of `range(0, len(responses), n)` (none for a negative `n`), a stream's those
    /// with `index % n == 0` (Python's modulo: every `|n|`-th for a negative `n`; `n: 0` fails before, with
    /// `integer modulo by zero`).
    pub(crate) fn first_of_prompt(&self, index: usize, stream: bool) -> bool {
        match self.n_given {
            1.. => index.is_multiple_of(self.n()),
            0 => false,
            ..0 if stream => index.is_multiple_of(self.n_given.unsigned_abs() as usize),
            ..0 => false,
        }
    }
}

type PromptParts = (Option<u32>, Option<Vec<String>>);

/// `prompt` (a string, token ids, or a list of either), `max_tokens` (16 by default), `logprobs` and `echo`.
fn completions_prompt(
    obj: &Map<String, Value>,
    tokenizer: &Tokenizer,
    native: &mut Map<String, Value>,
    sampling: &mut Map<String, Value>,
) -> Result<PromptParts, ApiError> {
    let prompt = obj
        .get("prompt")
        .ok_or_else(|| missing_field("prompt", obj))?;
    let max_tokens = int_field(obj, "max_tokens")?;
    // `CompletionRequest.validate_max_tokens_positive`, a field validator: Pydantic's error, before the
    // serving layer reads the prompt.
    if let Some(v) = max_tokens.filter(|&v| v <= 0) {
        let message = "max_tokens must be positive";
        return Err(ApiError::Pydantic(mock_core::ValidationErrors(vec![
            format!(
                "{{'type': 'value_error', 'loc': ('body', 'max_tokens'), 'msg': 'Value error, {message}', 'input': {v}, 'ctx': {{'error': ValueError('{message}')}}}}"
            ),
        ])));
    }
    let prompts = Prompts::parse(prompt)?;
    if prompts.is_empty() {
        return Err(ApiError::openai_bad_request("Prompt cannot be empty"));
    }
    let max_tokens = max_tokens.unwrap_or(16);
    sampling.insert("max_new_tokens".to_owned(), json!(max_tokens));
    // `return_logprob = logprobs is not None`, `top_logprobs_num = logprobs`: no release bounds it, and a
    // negative count lists no alternatives, as 0 does (the running 0.5.23 answers `-1` with `top_logprobs: []`).
    let logprobs = int_field(obj, "logprobs")?.map(|k| k.clamp(0, i64::from(u32::MAX)) as u32);
    let echo = bool_field(obj, "echo")?
        .unwrap_or(false)
        .then(|| prompts.echo_texts(tokenizer));
    match prompts {
        Prompts::Text(text) => native.insert("text".to_owned(), json!(text)),
        Prompts::Texts(texts) => native.insert("text".to_owned(), json!(texts)),
        Prompts::Ids(ids) => native.insert("input_ids".to_owned(), json!(ids)),
        Prompts::IdLists(lists) => native.insert("input_ids".to_owned(), json!(lists)),
    };
    Ok((logprobs, echo))
}

/// The four prompt forms of `CompletionRequest.prompt`.
#[derive(Debug)]
enum Prompts {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

impl Prompts {
    #[expect(
        clippy::wildcard_enum_match_arm,
        reason = "a JSON value's type check: any other JSON type is the refusal"
    )]
    fn parse(prompt: &Value) -> Result<Prompts, ApiError> {
        let wrong = || {
            validation_error(
                "union_type",
                "'prompt'",
                "Input should be a valid string, a list of strings, a list of integers or a list of lists \
                 of integers",
            )
        };
        let ids = |items: &[Value]| -> Option<Vec<u32>> {
            items
                .iter()
                .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect()
        };
        match prompt {
            Value::String(s) => Ok(Prompts::Text(s.clone())),
            Value::Array(items) => match items.first() {
                None => Ok(Prompts::Texts(Vec::new())),
                Some(Value::String(_)) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .map(Prompts::Texts)
                    .ok_or_else(wrong),
                Some(Value::Number(_)) => ids(items).map(Prompts::Ids).ok_or_else(wrong),
                Some(Value::Array(_)) => items
                    .iter()
                    .map(|v| v.as_array().and_then(|a| ids(a)))
                    .collect::<Option<Vec<_>>>()
                    .map(Prompts::IdLists)
                    .ok_or_else(wrong),
                Some(_) => Err(wrong()),
            },
            _ => Err(wrong()),
        }
    }

    /// `_validate_request`: an empty prompt, or a list whose prompts are all empty.
    fn is_empty(&self) -> bool {
        match self {
            Prompts::Text(s) => s.is_empty(),
            Prompts::Texts(v) => v.iter().all(String::is_empty),
            Prompts::Ids(v) => v.is_empty(),
            Prompts::IdLists(v) => v.iter().all(Vec::is_empty),
        }
    }

    /// The echoed text of each prompt: the string itself, or the ids decoded without special tokens.
    fn echo_texts(&self, tokenizer: &Tokenizer) -> Vec<String> {
        match self {
            Prompts::Text(s) => vec![s.clone()],
            Prompts::Texts(v) => v.clone(),
            Prompts::Ids(ids) => vec![tokenizer.decode(ids, true)],
            Prompts::IdLists(lists) => lists
                .iter()
                .map(|ids| tokenizer.decode(ids, true))
                .collect(),
        }
    }
}

/// A chat body as `ChatCompletionRequest`'s fields see it: `set_tool_choice_default`, a validator that runs before
/// them, fills `tool_choice` (`"none"` without tools, else `"auto"`), so the input a `missing` error shows has it.
fn with_tool_choice_default(obj: &Map<String, Value>) -> Map<String, Value> {
    let mut input = obj.clone();
    if input.get("tool_choice").is_none_or(Value::is_null) {
        let choice = if input.get("tools").is_none_or(Value::is_null) {
            "none"
        } else {
            "auto"
        };
        input.insert("tool_choice".to_owned(), Value::from(choice));
    }
    input
}

/// `messages` rendered with the toy model's ChatML template, `max_completion_tokens` (or `max_tokens`),
/// `logprobs` and `top_logprobs`.
fn chat_prompt(
    obj: &Map<String, Value>,
    config: &ServerConfig,
    tokenizer: &Tokenizer,
    native: &mut Map<String, Value>,
    sampling: &mut Map<String, Value>,
) -> Result<PromptParts, ApiError> {
    let messages = obj
        .get("messages")
        .ok_or_else(|| missing_field("messages", &with_tool_choice_default(obj)))?
        .as_array()
        .ok_or_else(|| type_error("messages", "list_type", "a valid list"))?;
    let prompt = render_chat(config.sglang_version, tokenizer, obj, messages, true)?;
    // A loaded model's template writes its own special tokens, so it is encoded without adding any (SGLang's
    // `_render_and_encode_chat_template`); the toy tokenizer adds none, and ChatML runs as a text prompt.
    if tokenizer.hf().is_some() {
        native.insert(
            "input_ids".to_owned(),
            json!(tokenizer.encode_plain(&prompt)),
        );
    } else {
        native.insert("text".to_owned(), json!(prompt));
    }
    let (completion, legacy) = (
        int_field(obj, "max_completion_tokens")?,
        int_field(obj, "max_tokens")?,
    );
    // Python's `a or b`: a 0 gives way to the other.
    let either = |a: Option<i64>, b: Option<i64>| a.filter(|&m| m != 0).or(b);
    let max = either(completion, legacy);
    // `_validate_request` in `serving_chat.py`: a completion longer than the whole context is refused before
    // the prompt is counted (the native check then counts prompt and completion together).
    if let Some(max) = max
        && max > i64::from(config.context_len())
    {
        return Err(ApiError::openai_bad_request(format!(
            "max_completion_tokens is too large: {max}.This model supports at most {} completion tokens.",
            config.context_len()
        )));
    }
    // `to_sampling_params`: `max_completion_tokens or max_tokens` (0.5.3: `max_tokens or
    // max_completion_tokens`, in `serving_chat.py`); neither is `None`, no limit but the context window.
    let max_new_tokens = match config.sglang_version.chat_max_tokens {
        ChatMaxTokens::MaxTokensFirst => either(legacy, completion),
        ChatMaxTokens::MaxCompletionTokensFirst => max,
    };
    sampling.insert("max_new_tokens".to_owned(), json!(max_new_tokens));
    // `return_logprob = logprobs`, `top_logprobs_num = top_logprobs or 0` (`serving_chat.py`, every release):
    // `top_logprobs` without `logprobs` is read and unused, and no release bounds it; a negative count lists no
    // alternatives, as 0 does (checked against the running 0.5.23).
    let logprobs = bool_field(obj, "logprobs")?.unwrap_or(false);
    let top = int_field(obj, "top_logprobs")?.unwrap_or(0);
    let logprobs = logprobs.then(|| top.clamp(0, i64::from(u32::MAX)) as u32);
    Ok((logprobs, None))
}

/// One chat message: a role and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    /// `{"role", "content"}` where content is a string, `null`, or a list of `{"type": "text", "text"}` parts
    /// (joined with spaces, as SGLang flattens parts for string templates).
    pub(crate) fn parse(
        release: SglangVersion,
        i: usize,
        message: &Value,
    ) -> Result<ChatMessage, ApiError> {
        let loc = |field: &str| format!("'messages', {i}, '{field}'");
        let obj = message.as_object().ok_or_else(|| {
            validation_error(
                "model_attributes_type",
                &format!("'messages', {i}"),
                "Input should be a valid dictionary or object to extract fields from",
            )
        })?;
        let roles = release.chat_roles;
        let role = match obj.get("role") {
            Some(Value::String(role)) if roles.generic.contains(&role.to_lowercase().as_str()) => {
                role.to_lowercase()
            }
            Some(Value::String(role)) if role == "user" => role.clone(),
            Some(role) => {
                // Each member of the message union refuses the role: the generic one's validator, the user
                // one's literal.
                let message = if role.is_string() {
                    roles.error
                } else {
                    "'role' must be a string"
                };
                let input = request::py_repr(role);
                let (generic, user) = roles.labels;
                return Err(ApiError::Pydantic(mock_core::ValidationErrors(vec![
                    format!(
                        "{{'type': 'value_error', 'loc': ('body', 'messages', {i}, '{generic}', 'role'), 'msg': {}, 'input': {input}, 'ctx': {{'error': ValueError({})}}}}",
                        request::py_repr(&Value::from(format!("Value error, {message}"))),
                        request::py_repr(&Value::from(message))
                    ),
                    format!(
                        "{{'type': 'literal_error', 'loc': ('body', 'messages', {i}, '{user}', 'role'), 'msg': \"Input should be 'user'\", 'input': {input}, 'ctx': {{'expected': \"'user'\"}}}}"
                    ),
                ])));
            }
            None => return Err(validation_error("missing", &loc("role"), "Field required")),
        };
        let content = match obj.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut texts = Vec::with_capacity(parts.len());
                for part in parts {
                    match (part.get("type").and_then(Value::as_str), part.get("text")) {
                        (Some("text"), Some(Value::String(text))) => texts.push(text.as_str()),
                        (Some(kind), _) if kind != "text" => {
                            return Err(ApiError::openai_bad_request(format!(
                                "The toy model reads text only; message {i} has a {kind:?} part."
                            )));
                        }
                        _ => {
                            return Err(validation_error(
                                "model_type",
                                &loc("content"),
                                "Input should be a valid text content part",
                            ));
                        }
                    }
                }
                texts.join(" ")
            }
            Some(_) => {
                return Err(validation_error(
                    "union_type",
                    &loc("content"),
                    "Input should be a valid string or a list of content parts",
                ));
            }
        };
        Ok(ChatMessage { role, content })
    }
}

/// The toy model's chat template, ChatML: each message as `<|im_start|>{role}\n{content}<|im_end|>\n`, then
/// the generation prompt `<|im_start|>assistant\n`. No default system message is added.
pub(crate) fn render_chatml(messages: &[ChatMessage], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    for message in messages {
        out.push_str("<|im_start|>");
        out.push_str(&message.role);
        out.push('\n');
        out.push_str(&message.content);
        out.push_str("<|im_end|>\n");
    }
    if add_generation_prompt {
        out.push_str("<|im_start|>assistant\n");
    }
    out
}

/// The prompt of a chat request's `messages` (`MODEL.md` sections 8.6 and 13.5): the loaded model's chat
/// template as transformers renders it, with the request's `tools` (unless `tool_choice` is `"none"`) and
/// `chat_template_kwargs`, or the toy's ChatML. The tools are the release's dump of them ([`ToolDump`]). Messages go to the template as SGLang's `_process_messages`
/// hands them over: `null` fields left out, `null` content as `""`, text parts joined, and an assistant's
/// `tool_calls[].function.arguments` given as a JSON string parsed into its object. A template that raises
/// (`raise_exception`) or fails is the request's 400, after one retry with the tools' bare `function` objects
/// (SGLang's fallback for templates that expect them).
pub(crate) fn render_chat(
    release: SglangVersion,
    tokenizer: &Tokenizer,
    obj: &Map<String, Value>,
    messages: &[Value],
    add_generation_prompt: bool,
) -> Result<String, ApiError> {
    let parsed = chat_messages(release, messages)?;
    let Some(template) = tokenizer.chat_template() else {
        return Ok(render_chatml(&parsed, add_generation_prompt));
    };
    let processed = messages
        .iter()
        .zip(parsed)
        .map(|(raw, message)| template_message(raw, message))
        .collect::<Result<Vec<Value>, ApiError>>()?;
    let messages = Value::Array(processed);
    // `tool_choice` "none" leaves the tools out; a named function keeps only that tool (`serving_chat.py`).
    let tools: Option<Vec<Value>> = match (obj.get("tools"), obj.get("tool_choice")) {
        (_, Some(Value::String(choice))) if choice == "none" => None,
        (Some(Value::Array(tools)), Some(Value::Object(choice))) => {
            let name = choice.get("function").and_then(|f| f.get("name"));
            let named: Vec<Value> = tools
                .iter()
                .filter(|t| t.get("function").and_then(|f| f.get("name")) == name)
                .cloned()
                .collect();
            (!named.is_empty()).then_some(named)
        }
        (Some(Value::Array(tools)), _) if !tools.is_empty() => Some(tools.clone()),
        _ => None,
    };
    let tools = tools.map(|tools| {
        tools
            .iter()
            .map(|t| tool_dump(release, t))
            .collect::<Vec<_>>()
    });
    let kwargs = match obj.get("chat_template_kwargs") {
        Some(Value::Object(kwargs)) => kwargs.clone(),
        _ => Map::new(),
    };
    let tools_value = tools.clone().map(Value::Array);
    template
        .render(
            &messages,
            tools_value.as_ref(),
            add_generation_prompt,
            &kwargs,
        )
        .or_else(|first| match &tools {
            Some(tools) => {
                let bare = tools
                    .iter()
                    .map(|t| t.get("function").cloned().unwrap_or_else(|| t.clone()))
                    .collect();
                template.render(
                    &messages,
                    Some(&Value::Array(bare)),
                    add_generation_prompt,
                    &kwargs,
                )
            }
            None => Err(first),
        })
        .map_err(ApiError::openai_bad_request)
}

/// A tool as the release hands it to the chat template ([`ToolDump`]): Pydantic's `model_dump` of its
/// `Tool` (or of its `Function` alone), with the defaults of the fields the client left out.
fn tool_dump(release: SglangVersion, tool: &Value) -> Value {
    const DECLARED: [&str; 5] = [
        "description",
        "name",
        "parameters",
        "strict",
        "defer_loading",
    ];
    let empty = Map::new();
    let given = tool
        .get("function")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let field = |key: &str| given.get(key).cloned().unwrap_or(Value::Null);
    let declared = |keys: &[&str], strict_default: Value| -> Map<String, Value> {
        keys.iter()
            .map(|&key| {
                let value = match (key, given.get(key)) {
                    ("strict", None | Some(Value::Null)) => strict_default.clone(),
                    _ => field(key),
                };
                (key.to_owned(), value)
            })
            .collect()
    };
    let tool_defer = tool.get("defer_loading").cloned().unwrap_or(Value::Null);
    let wrap = |function: Map<String, Value>| {
        let kind = tool
            .get("type")
            .cloned()
            .unwrap_or_else(|| Value::from("function"));
        Value::Object(Map::from_iter([
            ("type".to_owned(), kind),
            ("function".to_owned(), Value::Object(function)),
            ("defer_loading".to_owned(), tool_defer.clone()),
        ]))
    };
    match release.chat_tool_dump {
        ToolDump::FunctionOnly => Value::Object(declared(&DECLARED[..4], Value::Bool(false))),
        ToolDump::WithDefaults => {
            // `Function._serialize` drops an unset `defer_loading` (after `_propagate_defer_loading`).
            let mut data = declared(&DECLARED, Value::Bool(false));
            if data["defer_loading"].is_null() {
                data.insert("defer_loading".into(), tool_defer.clone());
            }
            if data["defer_loading"].is_null() {
                data.remove("defer_loading");
            }
            wrap(data)
        }
        ToolDump::ClientOrder => {
            let mut data = declared(&DECLARED, Value::Null);
            // `Tool._propagate_defer_loading`: the tool's flag reaches a function without one.
            if data["defer_loading"].is_null() {
                data.insert("defer_loading".into(), tool_defer.clone());
            }
            for key in ["defer_loading", "strict"] {
                if data[key].is_null() {
                    data.remove(key);
                }
            }
            let mut ordered: Map<String, Value> = given
                .keys()
                .filter_map(|k| data.get(k).map(|v| (k.clone(), v.clone())))
                .collect();
            for (k, v) in data {
                if !ordered.contains_key(&k) {
                    ordered.insert(k, v);
                }
            }
            wrap(ordered)
        }
    }
}

/// One message as the chat template sees it: its fields without the `null` ones, its `content` as parsed,
/// and an assistant's string tool-call arguments parsed (`normalize_assistant_tool_call_arguments`, strict).
fn template_message(raw: &Value, parsed: ChatMessage) -> Result<Value, ApiError> {
    let mut message: Map<String, Value> = raw
        .as_object()
        .map(|obj| {
            obj.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    // The model's values: the role lowercased by its validator, the content flattened.
    message.insert("role".into(), Value::String(parsed.role));
    message.insert("content".into(), Value::String(parsed.content));
    if message.get("role").and_then(Value::as_str) == Some("assistant")
        && let Some(Value::Array(calls)) = message.get_mut("tool_calls")
    {
        for call in calls {
            let Some(Value::String(arguments)) = call
                .get_mut("function")
                .and_then(|f| f.get_mut("arguments"))
            else {
                continue;
            };
            let parsed: Value = serde_json::from_str(arguments).map_err(|_| {
                ApiError::openai_bad_request(
                    "Assistant tool call function.arguments must be valid JSON.",
                )
            })?;
            if !parsed.is_object() {
                return Err(ApiError::openai_bad_request(
                    "Assistant tool call function.arguments must be a JSON object.",
                ));
            }
            if let Some(function) = call.get_mut("function") {
                function["arguments"] = parsed;
            }
        }
    }
    Ok(Value::Object(message))
}

/// A chat request's `messages`, each parsed, refused when there are none (`_validate_request`).
pub(crate) fn chat_messages(
    release: SglangVersion,
    messages: &[Value],
) -> Result<Vec<ChatMessage>, ApiError> {
    let rendered = messages
        .iter()
        .enumerate()
        .map(|(i, message)| ChatMessage::parse(release, i, message))
        .collect::<Result<Vec<_>, _>>()?;
    if rendered.is_empty() {
        return Err(ApiError::openai_bad_request("Messages cannot be empty."));
    }
    Ok(rendered)
}

/// A chat request's `return_meta_info` (0.5.15 and later: each choice then carries its native `meta_info`,
/// which a stream cannot) and `return_sampling_mask` (0.5.23, which `_validate_request` refuses without
/// `return_meta_info`, and which puts the sampling masks in that `meta_info`).
fn meta_info_fields(
    obj: &Map<String, Value>,
    version: SglangVersion,
    stream: bool,
    native: &mut Map<String, Value>,
) -> Result<bool, ApiError> {
    if !version.chat_return_meta_info {
        return Ok(false);
    }
    let meta_info = bool_field(obj, "return_meta_info")?.unwrap_or(false);
    let sampling_mask =
        version.sampling_masks && bool_field(obj, "return_sampling_mask")?.unwrap_or(false);
    if sampling_mask && !meta_info {
        return Err(ApiError::openai_bad_request(
            "return_sampling_mask requires return_meta_info=true.",
        ));
    }
    // `serving_chat.py: _convert_to_internal_request`.
    if meta_info && stream {
        return Err(ApiError::openai_bad_request(
            "return_meta_info is not supported with streaming. Please set stream=false when using \
             return_meta_info=true.",
        ));
    }
    if sampling_mask {
        native.insert("return_sampling_mask".to_owned(), json!(true));
    }
    Ok(meta_info)
}

/// `response_format` as SGLang's `_build_sampling_params` turns it into a grammar constraint (which the toy
/// model accepts and does not apply, as on `/generate`).
fn response_format(
    obj: &Map<String, Value>,
    sampling: &mut Map<String, Value>,
) -> Result<(), ApiError> {
    let Some(format) = present(obj, "response_format") else {
        return Ok(());
    };
    let (key, value) = match format.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(()),
        Some("json_schema") => match format["json_schema"].get("schema").filter(|s| !s.is_null()) {
            Some(schema) => ("json_schema", schema.to_string()),
            None => {
                return Err(ApiError::openai_bad_request(
                    "schema_ is required for json_schema response format request.",
                ));
            }
        },
        Some("json_object") => ("json_schema", r#"{"type": "object"}"#.to_owned()),
        Some("structural_tag") => ("structural_tag", format.to_string()),
        _ => {
            return Err(validation_error(
                "literal_error",
                "'response_format', 'type'",
                "Input should be 'text', 'json_object', 'json_schema' or 'structural_tag'",
            ));
        }
    };
    sampling.insert(key.to_owned(), json!(value));
    Ok(())
}

/// `stream_options` is only allowed with `stream`; it carries `include_usage` and `continuous_usage_stats`.
fn stream_options(obj: &Map<String, Value>, stream: bool) -> Result<(bool, bool), ApiError> {
    let Some(options) = present(obj, "stream_options") else {
        return Ok((false, false));
    };
    let options = options
        .as_object()
        .ok_or_else(|| type_error("stream_options", "model_type", "a valid dictionary"))?;
    if !stream {
        return Err(ApiError::openai_bad_request(
            "Stream options can only be defined when `stream=True`.",
        ));
    }
    Ok((
        bool_field(options, "include_usage")?.unwrap_or(false),
        bool_field(options, "continuous_usage_stats")?.unwrap_or(false),
    ))
}

/// The body as an object, or Pydantic's error for a body that is not one, with the body as its input.
pub(crate) fn body_object(body: &Value) -> Result<&Map<String, Value>, ApiError> {
    body.as_object().ok_or_else(|| {
        let input = request::py_repr(body);
        ApiError::Pydantic(mock_core::ValidationErrors(vec![format!(
            "{{'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or \
             object to extract fields from', 'input': {input}}}"
        )]))
    })
}

/// A field's value unless absent or `null` (Pydantic's `Optional` with a default).
fn present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// Pydantic's validation error for the field at `loc` ([`request::validation_error`]), as the server answers it.
pub(crate) fn validation_error(kind: &str, loc: &str, msg: &str) -> ApiError {
    request::validation_error(kind, loc, msg).into()
}

/// Pydantic's error for a required field the body lacks: the input is the whole body, as the model saw it.
fn missing_field(field: &str, input: &Map<String, Value>) -> ApiError {
    let input = request::py_repr(&Value::Object(input.clone()));
    ApiError::Pydantic(mock_core::ValidationErrors(vec![format!(
        "{{'type': 'missing', 'loc': ('body', '{field}'), 'msg': 'Field required', 'input': {input}}}"
    )]))
}

pub(crate) fn type_error(field: &str, kind: &str, what: &str) -> ApiError {
    validation_error(
        kind,
        &format!("'{field}'"),
        &format!("Input should be {what}"),
    )
}

/// A field read as `T` by `read`: `None` when absent or `null`, else Pydantic's type error of `kind`.
fn typed_field<T>(
    obj: &Map<String, Value>,
    key: &str,
    read: fn(&Value) -> Option<T>,
    kind: &str,
    what: &str,
) -> Result<Option<T>, ApiError> {
    present(obj, key)
        .map(|v| read(v).ok_or_else(|| type_error(key, kind, what)))
        .transpose()
}

/// An `int` field of the request model, read in Pydantic's lax mode: `"3"` is 3 (every release answers
/// `"max_tokens": "3"` as 3; seen on the running releases).
fn int_field(obj: &Map<String, Value>, key: &str) -> Result<Option<i64>, ApiError> {
    typed_field(obj, key, pydantic_int, "int_type", "a valid integer")
}

/// A `bool` field of the request model, read in Pydantic's lax mode (`1`, `"true"`).
pub(crate) fn bool_field(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    typed_field(obj, key, pydantic_bool, "bool_type", "a valid boolean")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each release's Pydantic models hand the chat template for a tool that gives `name` then
    /// `parameters` (hand-computed from `protocol.py`'s `Tool` and `Function`; the running releases' prompt
    /// token counts agree: `chat/tools` in `mock-server/conform/golden/`).
    #[test]
    fn tools_reach_the_template_as_each_release_dumps_them() {
        let tool = json!({"type": "function", "function": {"parameters": {"type": "object"}, "name": "f"}});
        let dumped = |release: &str| {
            let value = tool_dump(release.parse().unwrap(), &tool);
            (value.to_string(), value)
        };
        assert_eq!(
            dumped("0.5.3").1,
            json!({"description": null, "name": "f", "parameters": {"type": "object"}, "strict": false})
        );
        let (text, _) = dumped("0.5.15");
        assert_eq!(
            text,
            r#"{"type":"function","function":{"description":null,"name":"f","parameters":{"type":"object"},"strict":false},"defer_loading":null}"#
        );
        // 0.5.23 keeps the client's key order, then the unset declared fields; `strict` only when set.
        let (text, _) = dumped("0.5.23");
        assert_eq!(
            text,
            r#"{"type":"function","function":{"parameters":{"type":"object"},"name":"f","description":null},"defer_loading":null}"#
        );
        let flagged = json!({"function": {"name": "f", "strict": true}, "defer_loading": true});
        assert_eq!(
            tool_dump("0.5.23".parse().unwrap(), &flagged).to_string(),
            r#"{"type":"function","function":{"name":"f","strict":true,"description":null,"parameters":null,"defer_loading":true},"defer_loading":true}"#
        );
    }

    /// The name the server serves its model under, which the requests below are answered with.
    const SERVED_MODEL_NAME: &str = "sglang-mock/toy-model";

    fn tokenizer() -> Tokenizer {
        let model = mock_core::model::Model::new(mock_core::model::ModelConfig::default())
            .expect("the default model builds");
        model.tokenizer().clone()
    }

    #[test]
    fn chatml_renders_every_message_then_the_generation_prompt() {
        let messages = [
            ChatMessage {
                role: "system".into(),
                content: "Be brief.".into(),
            },
            ChatMessage {
                role: "user".into(),
                content: "Hi".into(),
            },
        ];
        assert_eq!(
            render_chatml(&messages, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn completions_map_to_sglangs_native_body() {
        let body = json!({"model": "m", "prompt": "Hello", "max_tokens": 5, "logprobs": 2, "echo": true,
                          "seed": 9, "stop": ["\n"], "temperature": 0.5});
        let req = translate(
            Api::Completions,
            &body,
            &ServerConfig::default(),
            SERVED_MODEL_NAME,
            &tokenizer(),
        )
        .unwrap();
        assert_eq!(req.logprobs, Some(2));
        assert_eq!(req.echo, Some(vec!["Hello".to_owned()]));
        assert_eq!(
            req.native,
            json!({"text": "Hello", "return_logprob": true, "top_logprobs_num": 2, "logprob_start_len": 0,
                   "return_text_in_logprobs": true, "stream": false,
                   "sampling_params": {"max_new_tokens": 5, "sampling_seed": 9, "stop": ["\n"],
                                       "temperature": 0.5}})
        );
    }

    #[test]
    fn chat_prefers_max_completion_tokens_and_reads_top_logprobs_only_with_logprobs() {
        let config = ServerConfig::default();
        let body = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                   {"type": "text", "text": "b"}]}],
                          "max_tokens": 3, "max_completion_tokens": 7, "logprobs": true, "top_logprobs": 4});
        let req = translate(Api::Chat, &body, &config, SERVED_MODEL_NAME, &tokenizer()).unwrap();
        assert_eq!(req.native["sampling_params"]["max_new_tokens"], 7);
        assert_eq!(
            req.native["text"],
            "<|im_start|>user\na b<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(req.logprobs, Some(4));
        assert_eq!(req.native["logprob_start_len"], -1);
        // `top_logprobs` without `logprobs` is read and unused (`return_logprob = request.logprobs`).
        let body = json!({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 4});
        let req = translate(Api::Chat, &body, &config, SERVED_MODEL_NAME, &tokenizer()).unwrap();
        assert_eq!(req.logprobs, None);
        assert_eq!(req.native["return_logprob"], false);
    }

    #[test]
    fn empty_and_mistyped_prompts_are_refused() {
        let config = ServerConfig::default();
        for (prompt, kind) in [
            (json!(""), "BadRequestError"),
            (json!(["", ""]), "BadRequestError"),
            (json!([]), "BadRequestError"),
            (json!(3), "Bad Request"),
            (json!([1, "a"]), "Bad Request"),
        ] {
            let body = json!({"prompt": prompt});
            let err = translate(
                Api::Completions,
                &body,
                &config,
                SERVED_MODEL_NAME,
                &tokenizer(),
            )
            .unwrap_err();
            let json: Value = serde_json::from_slice(&err.json_body().unwrap()).unwrap();
            assert_eq!(json["type"], kind, "{prompt}");
            assert_eq!(json["code"], 400);
        }
    }

    #[test]
    fn response_formats_become_grammar_parameters() {
        let config = ServerConfig::default();
        let translate_format = |format: Value| {
            let body = json!({"prompt": "x", "response_format": format});
            translate(
                Api::Completions,
                &body,
                &config,
                SERVED_MODEL_NAME,
                &tokenizer(),
            )
        };
        let req = translate_format(json!({"type": "json_object"})).unwrap();
        assert_eq!(
            req.native["sampling_params"]["json_schema"],
            r#"{"type": "object"}"#
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let req = translate_format(
            json!({"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}),
        )
        .unwrap();
        let sent: Value = serde_json::from_str(
            req.native["sampling_params"]["json_schema"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(sent, schema);
        let tag = json!({"type": "structural_tag", "structures": [], "triggers": []});
        let req = translate_format(tag.clone()).unwrap();
        let sent: Value = serde_json::from_str(
            req.native["sampling_params"]["structural_tag"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(sent, tag);
        let req = translate_format(json!({"type": "text"})).unwrap();
        assert!(req.native["sampling_params"].get("json_schema").is_none());
        let err = translate_format(json!({"type": "json_schema", "json_schema": {"name": "s"}}))
            .unwrap_err();
        assert_eq!(
            err,
            ApiError::openai_bad_request(
                "schema_ is required for json_schema response format request."
            )
        );
        assert_eq!(
            translate_format(json!({"type": "yaml"}))
                .unwrap_err()
                .status(),
            400
        );
    }

    #[test]
    fn out_of_range_counts_and_non_text_parts_are_bad_requests() {
        let config = ServerConfig::default();
        let refused = |api: Api, body: Value, message: &str| {
            let err = translate(api, &body, &config, SERVED_MODEL_NAME, &tokenizer()).unwrap_err();
            assert_eq!(err, ApiError::openai_bad_request(message), "{body}");
        };
        let user = json!([{"role": "user", "content": "x"}]);
        refused(
            Api::Chat,
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            "The toy model reads text only; message 0 has a \"image_url\" part.",
        );
        let ok = |api: Api, body: Value| {
            translate(api, &body, &config, SERVED_MODEL_NAME, &tokenizer()).unwrap()
        };
        assert_eq!(
            ok(
                Api::Completions,
                json!({"prompt": "x", "n": 1, "logprobs": 0})
            )
            .logprobs,
            Some(0)
        );
        // No release bounds the counts; a negative one lists no alternatives (the running 0.5.23 answers
        // `logprobs: -1` and `top_logprobs: -1` with empty top lists, and `top_logprobs: 25` with 25).
        let logprobs = |api: Api, body: Value| ok(api, body).logprobs;
        assert_eq!(
            logprobs(Api::Completions, json!({"prompt": "x", "logprobs": -1})),
            Some(0)
        );
        for (top, listed) in [(20, 20), (25, 25), (-1, 0)] {
            let body = json!({"messages": user, "logprobs": true, "top_logprobs": top});
            assert_eq!(logprobs(Api::Chat, body), Some(listed));
        }
        let part = json!([{"role": "user", "content": [{"type": "text"}]}]);
        let err = translate(
            Api::Chat,
            &json!({"messages": part}),
            &config,
            SERVED_MODEL_NAME,
            &tokenizer(),
        )
        .unwrap_err();
        assert!(matches!(err, ApiError::Pydantic(_)), "{err:?}");
    }

    #[test]
    fn token_id_prompts_echo_their_decoded_text() {
        let tok = tokenizer();
        let ids = tok.encode("Hello world");
        let body = json!({"prompt": ids, "echo": true});
        let req = translate(
            Api::Completions,
            &body,
            &ServerConfig::default(),
            SERVED_MODEL_NAME,
            &tok,
        )
        .unwrap();
        assert_eq!(req.echo, Some(vec!["Hello world".to_owned()]));
        assert_eq!(req.native["input_ids"], json!(ids));
        assert_eq!(req.native["sampling_params"]["max_new_tokens"], 16);
    }
}
