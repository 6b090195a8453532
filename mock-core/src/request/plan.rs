//! `GenerateReqInput.normalize_batch_and_arguments` and the tokenizer manager's checks: a parsed body becomes
//! a [`GeneratePlan`] of one engine request per flattened sample.

use serde_json::Value;

use super::body::{CustomLogitProcessor, GenerateReqInput};
use super::lax::{Ids, OneOrMany, RawSamplingParams, SamplingInput, SamplingKey};
use super::sampling::{GRAMMAR_BACKEND_NONE, int_value, resolve_sampling_params};
use crate::config::{ServerConfig, SglangVersion};
use crate::engine::{
    GeneratePlan, ItemRequest, PlannedItem, Refusal, RidSource, SamplingLogprobsMode,
};
use crate::error::RequestError;
use crate::model::Tokenizer;
use crate::pyfmt::{int_list_repr, str_list_repr};
use crate::release::LogprobStart;

/// The most samples (prompts times `n`) one request may expand to (a mock-only limit).
pub const MAX_SAMPLES: usize = 1 << 16;
/// The most top-logprob and token-id-logprob entries one item may ask for (a mock-only limit).
pub const MAX_LOGPROB_ENTRIES: u64 = 20_000_000;

/// Turn a parsed body into engine requests, applying SGLang's normalisation and every validation rule.
pub fn plan_generate(
    req: &GenerateReqInput,
    config: &ServerConfig,
    tokenizer: &Tokenizer,
    rids: &mut dyn RidSource,
) -> Result<GeneratePlan, RequestError> {
    let modes = sampling_logprobs_modes(req, config.sglang_version)?;
    let shape = Shape::of(req)?;
    let expanded = Expanded::of(req, modes.as_ref(), &shape, config.sglang_version)?;
    check_rid_uniqueness(req, shape.is_single)?;
    let dp_rank = req.routed_dp_rank.or(req.data_parallel_rank);

    // Tokenizer-manager and sampling-parameter checks, item by item; prompts are tokenized once per prompt.
    let mut items = Vec::with_capacity(shape.num);
    let mut prompt_cache: Vec<Option<Vec<u32>>> = vec![None; shape.batch_size.max(1)];
    for i in 0..shape.num {
        let prompt_index = if shape.is_single { 0 } else { i / shape.n };
        let input_ids = match &prompt_cache[prompt_index] {
            Some(ids) => ids.clone(),
            None => {
                let ids = prompt_ids(req, shape.single_prompt, prompt_index, config, tokenizer)?;
                prompt_cache[prompt_index] = Some(ids.clone());
                ids
            }
        };
        validate_one_request(req, expanded.sampling[i], &input_ids, config, dp_rank)?;
        // The last check of `_validate_one_request` (0.5.23).
        if expanded.sampling_logprobs_mode[i].is_some() && !expanded.return_sampling_mask[i] {
            return Err(RequestError::value(
                "sampling_logprobs_mode can only be set when return_sampling_mask=true.",
            ));
        }
        let rid = match &expanded.rids[i] {
            Some(rid) => (rid.clone(), false),
            None => (rids.fresh_rid(), true),
        };
        items.push(plan_item(req, &expanded, i, input_ids, rid, config)?);
    }

    // Scripted answers replace sampling with the rule's tokens (forced decoding keeps the true logprobs).
    super::script::apply(&config.scripted, tokenizer, &mut items);

    Ok(GeneratePlan {
        is_batch: !shape.is_single,
        stream: req.stream,
        return_text_in_logprobs: req.return_text_in_logprobs,
        // A release without the field reads the body without it.
        return_prompt_token_ids: req.return_prompt_token_ids
            && config.sglang_version.prompt_token_ids,
        items,
        parallel_sample_num: shape.n,
    })
}

/// How many prompts and samples a request has (`_validate_inputs`, `_determine_batch_size`,
/// `_handle_parallel_sampling`).
struct Shape {
    single_prompt: bool,
    batch_size: usize,
    n: usize,
    /// One prompt and `n == 1`: the answer is an object, not a list.
    is_single: bool,
    /// The number of flattened samples.
    num: usize,
}

impl Shape {
    fn of(req: &GenerateReqInput) -> Result<Shape, RequestError> {
        // `_validate_inputs`.
        let given = [
            req.text.is_some(),
            req.input_ids.is_some(),
            req.has_input_embeds,
        ];
        if given.iter().all(|g| !g) || given.iter().all(|g| *g) {
            return Err(RequestError::value(
                "Either text, input_ids or input_embeds should be provided.",
            ));
        }
        // `_determine_batch_size`: `text` decides when given, then `input_ids`.
        let (single_prompt, batch_size) = match (&req.text, &req.input_ids) {
            (Some(OneOrMany::One(_)), _) => (true, 1),
            (Some(OneOrMany::Many(texts)), _) => (false, texts.len()),
            (None, Some(Ids::Flat(ids))) if ids.is_empty() => {
                return Err(RequestError::value("input_ids cannot be empty."));
            }
            (None, Some(Ids::Flat(_))) => (true, 1),
            (None, Some(Ids::Nested(lists))) => (false, lists.len()),
            (None, None) => (true, 1),
        };
        // `_handle_parallel_sampling`. A single prompt with `n > 1` becomes a batch of one prompt.
        let n = parallel_sample_num(req.sampling_params.as_ref())?;
        let is_single = single_prompt && n == 1;
        let num = if is_single {
            1
        } else {
            batch_size.saturating_mul(n)
        };
        // SGLang has no such limit; the mock refuses requests that would exhaust its memory before they start.
        if num > MAX_SAMPLES {
            return Err(RequestError::value(format!(
                "The request expands to {num} samples ({batch_size} prompts x n={n}); the mock accepts at most \
                 {MAX_SAMPLES}."
            )));
        }
        Ok(Shape {
            single_prompt,
            batch_size,
            n,
            is_single,
            num,
        })
    }
}

/// Per-item sampling dicts, rids and logprob settings, expanded to one entry per flattened sample.
struct Expanded<'a> {
    sampling: Vec<&'a RawSamplingParams>,
    rids: Vec<Option<String>>,
    return_logprob: Vec<bool>,
    logprob_start_len: Vec<i64>,
    top_logprobs_num: Vec<i64>,
    token_ids_logprob: Vec<Option<Vec<i64>>>,
    /// `return_sampling_mask` per sample (always false before 0.5.23, which has no such field).
    return_sampling_mask: Vec<bool>,
    sampling_logprobs_mode: Vec<Option<SamplingLogprobsMode>>,
}

impl<'a> Expanded<'a> {
    fn of(
        req: &'a GenerateReqInput,
        modes: Option<&OneOrMany<Option<SamplingLogprobsMode>>>,
        shape: &Shape,
        version: SglangVersion,
    ) -> Result<Expanded<'a>, RequestError> {
        let Shape {
            is_single,
            batch_size,
            n,
            num,
            ..
        } = *shape;
        let return_logprob = expand_param(
            req.return_logprob.as_ref(),
            false,
            "return_logprob",
            is_single,
            n,
            num,
        )?;
        // A single request keeps a list `logprob_start_len` or `top_logprobs_num` as given (only a batch's are
        // indexed). Without `return_logprob` nothing reads it and the release serves the request; with it the
        // scheduler reads it (a list `logprob_start_len` kills 0.5.23's: `'>' not supported between instances of
        // 'list' and 'int'`), which the mock answers with a 500.
        let read = !is_single || return_logprob.iter().any(|&r| r);
        let expanded = Expanded {
            sampling: expand_sampling(req.sampling_params.as_ref(), is_single, batch_size, num)?,
            rids: expand_rids(req.rid.as_ref(), is_single, batch_size, n, num)?,
            return_logprob,
            logprob_start_len: expand_param(
                read_list(req.logprob_start_len.as_ref(), read),
                -1,
                "logprob_start_len",
                is_single,
                n,
                num,
            )?,
            top_logprobs_num: expand_param(
                read_list(req.top_logprobs_num.as_ref(), read),
                0,
                "top_logprobs_num",
                is_single,
                n,
                num,
            )?,
            token_ids_logprob: expand_token_ids(req.token_ids_logprob.as_ref(), is_single, n, num)?,
            return_sampling_mask: match version.sampling_masks {
                true => expand_param(
                    req.return_sampling_mask.as_ref(),
                    false,
                    "return_sampling_mask",
                    is_single,
                    n,
                    num,
                )?,
                false => vec![false; num],
            },
            sampling_logprobs_mode: expand_param(
                modes,
                None,
                "sampling_logprobs_mode",
                is_single,
                n,
                num,
            )?,
        };
        if !is_single && n > 1 && req.custom_logit_processor == Some(CustomLogitProcessor::Many) {
            return Err(RequestError::value(
                "Cannot use list custom_logit_processor with parallel_sample_num > 1",
            ));
        }
        Ok(expanded)
    }
}

/// `_validate_rid_uniqueness`: a batch's rids must differ, named in first-occurrence order
/// (`[rid for rid, count in Counter(rids).items() if count > 1]`).
fn check_rid_uniqueness(req: &GenerateReqInput, is_single: bool) -> Result<(), RequestError> {
    let Some(OneOrMany::Many(list)) = &req.rid else {
        return Ok(());
    };
    if is_single {
        return Ok(());
    }
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for rid in list {
        *counts.entry(rid.as_str()).or_default() += 1;
    }
    let mut dups: Vec<&str> = Vec::new();
    for rid in list {
        if counts.get(rid.as_str()).is_some_and(|&c| c > 1) && !dups.contains(&rid.as_str()) {
            dups.push(rid);
        }
    }
    if dups.is_empty() {
        return Ok(());
    }
    Err(RequestError::value(format!(
        "Duplicate request IDs detected within the request: {}",
        str_list_repr(dups)
    )))
}

/// The seed of a sample without `sampling_seed` under deterministic inference: `SamplingParams`' default in
/// 0.5.3, the value `SamplingBatchInfo.from_schedule_batch` puts in from 0.5.15.
const DETERMINISTIC_SEED: u64 = 42;

/// Item `i` of the plan: its sampling parameters, logprob settings and limits checked.
fn plan_item(
    req: &GenerateReqInput,
    expanded: &Expanded<'_>,
    i: usize,
    input_ids: Vec<u32>,
    (rid, rid_is_fresh): (String, bool),
    config: &ServerConfig,
) -> Result<PlannedItem, RequestError> {
    let token_ids = &expanded.token_ids_logprob[i];
    validate_token_ids_logprob(token_ids.as_ref(), config.vocab_size())?;
    let resolved = resolve_sampling_params(
        expanded.sampling[i],
        config.vocab_size(),
        input_ids.len(),
        config,
    )?;
    let want_logprob = expanded.return_logprob[i];
    let prompt_len = input_ids.len();
    let sampling_mask = expanded.return_sampling_mask[i]
        .then(|| expanded.sampling_logprobs_mode[i].unwrap_or(SamplingLogprobsMode::Selected));
    // `Scheduler.handle_generate_request`'s checks, in its order: the first refusal aborts the item.
    let mask_refusal = sampling_mask.and_then(|_| {
        sampling_mask_refusal(resolved.normalized_top_k, config.sampling_mask_max_tokens)
    });
    let (logprob_start, logprob_refusal) = match want_logprob {
        true => logprob_start(
            expanded.logprob_start_len[i],
            prompt_len,
            config.sglang_version,
        ),
        false => (prompt_len, None),
    };
    let asks_routes = req.return_routed_experts && config.sglang_version.routed_experts;
    let routes_refusal = asks_routes
        .then(|| routes_start_refusal(req.routed_experts_start_len, prompt_len))
        .flatten();
    // Last: the running 0.5.23 reports a start past the prompt before a grammar it cannot compile.
    let grammar_refusal = resolved.constrained.then(|| Refusal {
        message: GRAMMAR_BACKEND_NONE.to_owned(),
        err_type: Some("BadRequestError"),
    });
    let abort = input_length_refusal(prompt_len, config)
        .or(mask_refusal)
        .or(logprob_refusal)
        .or(routes_refusal)
        .or(grammar_refusal);
    // The routes come only from a server started with `--enable-return-routed-experts`.
    let routes_from = (asks_routes && config.enable_return_routed_experts)
        .then(|| req.routed_experts_start_len.max(0) as usize);
    let k = if want_logprob {
        expanded.top_logprobs_num[i].clamp(0, i64::from(config.vocab_size())) as usize
    } else {
        0
    };
    let ids: Vec<u32> = match (token_ids, want_logprob) {
        (Some(ids), true) => ids.iter().map(|&id| id as u32).collect(),
        _ => Vec::new(),
    };
    // SGLang has no such limit, but a body of billions of triples would exhaust the mock's memory.
    let positions = (prompt_len - logprob_start.min(prompt_len)) as u64
        + u64::from(resolved.params.max_new_tokens);
    let entries = positions.saturating_mul((k + ids.len()) as u64);
    if entries > MAX_LOGPROB_ENTRIES {
        return Err(RequestError::value(format!(
            "top_logprobs_num={k} and {} token_ids_logprob over {positions} positions would return \
             {entries} logprob entries; the mock refuses more than {MAX_LOGPROB_ENTRIES}.",
            ids.len()
        )));
    }
    let stream_interval = match resolved.stream_interval {
        Some(si) if si > 0 => si,
        _ => config.stream_interval.max(1),
    };
    // slime's top-p replay: rows for a request with logprobs whose sampler filters (`_top_p_filter_rows`; greedy is
    // `top_k` 1).
    let top_p_token_ids = config.slime_patches
        && want_logprob
        && resolved.return_top_p_token_ids
        && (resolved.normalized_top_k != 1 << 30
            || resolved.params.top_p != 1.0
            || resolved.params.min_p > 0.0);
    let mut params = resolved.params;
    // Deterministic inference seeds every sample (`SamplingBatchInfo.from_schedule_batch`: 42 when none is
    // given) and hashes the seed with token positions only, so equal requests draw equal samples.
    let sample_index = if config.enable_deterministic_inference {
        params.sampling_seed = params.sampling_seed.or(Some(DETERMINISTIC_SEED));
        0
    } else {
        i as u64
    };
    Ok(PlannedItem {
        rid,
        rid_is_fresh,
        top_logprobs_num: k,
        token_ids_logprob_requested: want_logprob && token_ids.is_some(),
        stream_interval,
        abort,
        length_as_float: resolved.length_as_float,
        request: ItemRequest {
            input_ids,
            params,
            return_logprob: want_logprob,
            logprob_start,
            top_logprobs_num: k,
            token_ids_logprob: ids,
            sample_index,
            draw: 0,
            forced_output: Vec::new(),
            sampling_mask,
            top_p_token_ids,
            routes_from,
            stream_interval: req.stream.then_some(stream_interval),
        },
    })
}

/// `sampling_logprobs_mode` read as FastAPI's Pydantic model types it, `Literal["selected", "support"]` or a
/// list of them (0.5.23; earlier releases have no such field and ignore the key).
fn sampling_logprobs_modes(
    req: &GenerateReqInput,
    version: SglangVersion,
) -> Result<Option<OneOrMany<Option<SamplingLogprobsMode>>>, RequestError> {
    if !version.sampling_masks {
        return Ok(None);
    }
    let mode = |value: &Option<String>| match value.as_deref() {
        None => Ok(None),
        Some("selected") => Ok(Some(SamplingLogprobsMode::Selected)),
        Some("support") => Ok(Some(SamplingLogprobsMode::Support)),
        Some(_) => Err(super::validation_error(
            "literal_error",
            "'sampling_logprobs_mode'",
            "Input should be 'selected' or 'support'",
        )),
    };
    req.sampling_logprobs_mode
        .as_ref()
        .map(|modes| match modes {
            OneOrMany::One(value) => mode(value).map(OneOrMany::One),
            OneOrMany::Many(values) => values
                .iter()
                .map(mode)
                .collect::<Result<_, _>>()
                .map(OneOrMany::Many),
        })
        .transpose()
}

/// The scheduler's top-k gate for a sampling mask (`Scheduler.handle_generate_request`, 0.5.23): greedy, or a
/// finite `top_k` in `2..=--sampling-mask-max-tokens`. `top_k` is `SamplingParams`' own: 1 when greedy,
/// `1 << 30` for `-1`.
fn sampling_mask_refusal(top_k: i64, cap: u32) -> Option<Refusal> {
    (top_k != 1 && !(1 < top_k && top_k <= i64::from(cap))).then(|| Refusal {
        message: format!(
            "return_sampling_mask requires top_k=1 for greedy sampling or finite 1 < top_k <= {cap}; \
             got top_k={top_k}. Lower top_k or increase --sampling-mask-max-tokens."
        ),
        // `prepare_abort` sets no error type.
        err_type: None,
    })
}

/// `routed_experts_start_len` outside `0..=len(prompt)` (`Scheduler.handle_generate_request`, 0.5.15 and later;
/// checked whenever routes are asked for, whether or not the server returns them). The f-strings are
/// self-documenting, so the messages name the expressions.
fn routes_start_refusal(start: i64, prompt_len: usize) -> Option<Refusal> {
    let message = if start < 0 {
        format!(
            "recv_req.routed_experts_start_len={start} is lower than 0. Please use a non-negative \
             routed_experts_start_len."
        )
    } else if start as u64 > prompt_len as u64 {
        format!(
            "recv_req.routed_experts_start_len={start} is higher than the number of input tokens \
             len(req.origin_input_ids)={prompt_len}. Please use a smaller routed_experts_start_len."
        )
    } else {
        return None;
    };
    Some(Refusal {
        message,
        err_type: Some("BadRequestError"),
    })
}

/// A prompt the scheduler cannot hold: as long as `max_req_input_len = max_req_len - 5` or longer, whether the
/// context or the KV pool (`--max-total-tokens`) bounds it (`validate_input_length`, `srt/managers/utils.py`;
/// the same text in every release).
fn input_length_refusal(prompt_len: usize, config: &ServerConfig) -> Option<Refusal> {
    let max_input = super::sampling::max_req_len(config).saturating_sub(5);
    (prompt_len as u64 >= max_input).then(|| Refusal {
        message: format!(
            "Input length ({prompt_len} tokens) exceeds the maximum allowed length ({max_input} tokens). \
             Use a shorter input or enable --allow-auto-truncate."
        ),
        err_type: Some("BadRequestError"),
    })
}

/// The first prompt position with a logprob, and the scheduler's abort for a start past the prompt.
fn logprob_start(
    start: i64,
    prompt_len: usize,
    version: SglangVersion,
) -> (usize, Option<Refusal>) {
    if start < 0 {
        return (default_logprob_start(version, prompt_len), None);
    }
    let start = start as u64;
    // `Scheduler.handle_generate_request`: 0.5.3 refuses a start at the prompt's end, 0.5.15 and later only one
    // past it (a start at the end reports no input logprobs).
    let refused = match version.logprob_start {
        LogprobStart::LastPromptToken => start >= prompt_len as u64,
        LogprobStart::PromptEnd => start > prompt_len as u64,
    };
    if !refused {
        return (start as usize, None);
    }
    let message = format!(
        "req.logprob_start_len={start} is higher than the number of input tokens \
         len(req.origin_input_ids)={prompt_len}. Please use a smaller logprob_start_len."
    );
    (
        prompt_len.saturating_sub(1),
        Some(Refusal {
            message,
            err_type: Some("BadRequestError"),
        }),
    )
}

/// The first covered prompt position for `logprob_start_len = -1`.
pub fn default_logprob_start(version: SglangVersion, prompt_len: usize) -> usize {
    match version.logprob_start {
        LogprobStart::PromptEnd => prompt_len,
        LogprobStart::LastPromptToken => prompt_len.saturating_sub(1),
    }
}

fn parallel_sample_num(sampling: Option<&SamplingInput>) -> Result<usize, RequestError> {
    // `sampling_params.get("n", 1)`: an explicit `null` is Python's `None`.
    let n_of = |raw: &RawSamplingParams| -> Result<Option<i64>, RequestError> {
        match raw.get(SamplingKey::N) {
            None => Ok(Some(1)),
            Some(Value::Null) => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or_else(|| {
                RequestError::internal(format!(
                    "TypeError: sampling_params.n must be an int, got {v}"
                ))
            }),
        }
    };
    let n = match sampling {
        None | Some(SamplingInput::Other) => Some(1),
        Some(SamplingInput::One(raw)) => n_of(raw)?,
        Some(SamplingInput::Many(list)) => {
            let Some(first) = list.first() else {
                return Err(RequestError::internal(
                    "IndexError: sampling_params is an empty list",
                ));
            };
            let n = n_of(first)?;
            for raw in list {
                if n_of(raw)? != n {
                    return Err(RequestError::value(
                        "The parallel_sample_num should be the same for all samples in sample params.",
                    ));
                }
            }
            n
        }
    };
    // `if self.parallel_sample_num > 1`: a `None` fails the comparison.
    let n = n.ok_or_else(|| {
        RequestError::internal(
            "TypeError: '>' not supported between instances of 'NoneType' and 'int'",
        )
    })?;
    Ok(n.max(1) as usize)
}

static EMPTY_SAMPLING: RawSamplingParams = RawSamplingParams {
    entries: Vec::new(),
    unknown_key: None,
    big_seed: None,
};

fn expand_sampling(
    sampling: Option<&SamplingInput>,
    is_single: bool,
    batch_size: usize,
    num: usize,
) -> Result<Vec<&RawSamplingParams>, RequestError> {
    match sampling {
        None => Ok(vec![&EMPTY_SAMPLING; num]),
        Some(SamplingInput::One(raw)) => Ok(vec![raw; num]),
        Some(SamplingInput::Many(_)) if is_single => Err(RequestError::internal(
            "TypeError: SamplingParams() argument after ** must be a mapping, not list",
        )),
        Some(SamplingInput::Many(list)) => {
            // `self.sampling_params * parallel_sample_num`, then `obj[i]` for i < batch_size per prompt.
            if list.len() < batch_size {
                return Err(RequestError::internal(format!(
                    "IndexError: {} sampling_params for a batch of {batch_size}",
                    list.len()
                )));
            }
            let n = num / batch_size.max(1);
            Ok((0..num).map(|i| &list[i / n]).collect())
        }
        Some(SamplingInput::Other) => Err(RequestError::internal(
            "TypeError: sampling_params must be a dict or a list of dicts",
        )),
    }
}

fn expand_rids(
    rid: Option<&OneOrMany<String>>,
    is_single: bool,
    batch_size: usize,
    n: usize,
    num: usize,
) -> Result<Vec<Option<String>>, RequestError> {
    if is_single {
        return match rid {
            None => Ok(vec![None]),
            Some(OneOrMany::One(r)) => Ok(vec![Some(r.clone())]),
            // A list rid for a single request: the tokenizer manager hashes it.
            Some(OneOrMany::Many(_)) => {
                Err(RequestError::internal("TypeError: unhashable type: 'list'"))
            }
        };
    }
    match rid {
        Some(OneOrMany::Many(list)) if list.len() != batch_size => Err(RequestError::value(
            "The specified rids length mismatch with the batch_size for batch processing.",
        )),
        // Parallel samples always get fresh ids (`regenerate_rid`), whatever the caller sent.
        _ if n > 1 => Ok(vec![None; num]),
        None => Ok(vec![None; num]),
        Some(OneOrMany::One(r)) => Ok((0..num).map(|i| Some(format!("{r}_{i}"))).collect()),
        Some(OneOrMany::Many(list)) => Ok(list.iter().cloned().map(Some).collect()),
    }
}

/// `value`, or nothing where it is a list nobody reads.
fn read_list<T>(value: Option<&OneOrMany<T>>, read: bool) -> Option<&OneOrMany<T>> {
    value.filter(|v| read || !matches!(v, OneOrMany::Many(_)))
}

fn expand_param<T: Copy>(
    value: Option<&OneOrMany<T>>,
    default: T,
    name: &str,
    is_single: bool,
    n: usize,
    num: usize,
) -> Result<Vec<T>, RequestError> {
    match value {
        None => Ok(vec![default; num]),
        Some(OneOrMany::One(v)) => Ok(vec![*v; num]),
        Some(OneOrMany::Many(_)) if is_single => Err(RequestError::internal(format!(
            "TypeError: a list {name} for a single request"
        ))),
        Some(OneOrMany::Many(_)) if n > 1 => Err(RequestError::value(format!(
            "Cannot use list {name} with parallel_sample_num > 1"
        ))),
        Some(OneOrMany::Many(list)) if list.len() < num => Err(RequestError::internal(format!(
            "IndexError: {} values of {name} for a batch of {num}",
            list.len()
        ))),
        Some(OneOrMany::Many(list)) => Ok(list[..num].to_vec()),
    }
}

fn expand_token_ids(
    value: Option<&Ids>,
    is_single: bool,
    n: usize,
    num: usize,
) -> Result<Vec<Option<Vec<i64>>>, RequestError> {
    match value {
        // `[]` is treated as None.
        None => Ok(vec![None; num]),
        Some(Ids::Flat(ids)) if ids.is_empty() => Ok(vec![None; num]),
        Some(Ids::Flat(ids)) => Ok(vec![Some(ids.clone()); num]),
        Some(Ids::Nested(_)) if is_single => Err(RequestError::value(
            "token_ids_logprob must be a flat list of integers.",
        )),
        Some(Ids::Nested(_)) if n > 1 => Err(RequestError::value(
            "Cannot use list token_ids_logprob with parallel_sample_num > 1",
        )),
        Some(Ids::Nested(lists)) if lists.len() < num => Err(RequestError::internal(format!(
            "IndexError: {} token_ids_logprob lists for a batch of {num}",
            lists.len()
        ))),
        Some(Ids::Nested(lists)) => Ok(lists[..num]
            .iter()
            .map(|l| if l.is_empty() { None } else { Some(l.clone()) })
            .collect()),
    }
}

/// The prompt of one batch position: `input_ids` win over `text`.
fn prompt_ids(
    req: &GenerateReqInput,
    single_prompt: bool,
    index: usize,
    config: &ServerConfig,
    tokenizer: &Tokenizer,
) -> Result<Vec<u32>, RequestError> {
    if req.has_input_embeds && req.text.is_none() && req.input_ids.is_none() {
        return Err(RequestError::value(
            "input_embeds is provided while disable_radix_cache is False. Please add \
             `--disable-radix-cache` when you launch the server if you want to use input_embeds as inputs.",
        ));
    }
    let ids: Option<&[i64]> = match (&req.input_ids, single_prompt) {
        (Some(Ids::Flat(ids)), true) => Some(ids),
        (Some(Ids::Nested(lists)), false) => match lists.get(index) {
            Some(ids) => Some(ids),
            None => {
                return Err(RequestError::internal(format!(
                    "IndexError: no input_ids for batch position {index}"
                )));
            }
        },
        (Some(_), _) => {
            return Err(RequestError::internal(
                "TypeError: the shape of input_ids does not match the batch shape of text",
            ));
        }
        (None, _) => None,
    };
    if let Some(ids) = ids {
        if ids.is_empty() {
            return Err(RequestError::value("input_ids cannot be empty."));
        }
        let vocab = i64::from(config.vocab_size());
        if ids.iter().any(|&id| id < 0 || id >= vocab) {
            return Err(RequestError::value(format!(
                "The input_ids {} contains values greater than the vocab size ({vocab}).",
                int_list_repr(ids)
            )));
        }
        return Ok(ids.iter().map(|&id| id as u32).collect());
    }
    let text: &str = match (&req.text, single_prompt) {
        (Some(OneOrMany::One(t)), _) => t,
        (Some(OneOrMany::Many(texts)), false) => &texts[index],
        (Some(OneOrMany::Many(_)), true) => {
            return Err(RequestError::value(
                "Text should be a list for batch processing.",
            ));
        }
        (None, _) => {
            return Err(RequestError::value(
                "Either text, input_ids or input_embeds should be provided.",
            ));
        }
    };
    if text.is_empty() {
        return Err(RequestError::value(
            "texts cannot be empty and tokenizer must be initialized",
        ));
    }
    let ids = tokenizer.encode(text);
    if ids.is_empty() {
        return Err(RequestError::value(
            "texts cannot be empty and tokenizer must be initialized",
        ));
    }
    Ok(ids)
}

/// `TokenizerManager._validate_one_request` and the feature gates the mock's server flags leave closed.
fn validate_one_request(
    req: &GenerateReqInput,
    raw: &RawSamplingParams,
    input_ids: &[u32],
    config: &ServerConfig,
    dp_rank: Option<i64>,
) -> Result<(), RequestError> {
    let context = u64::from(config.context_len());
    let input_len = input_ids.len() as u64;
    if input_len >= context {
        return Err(RequestError::value(format!(
            "The input ({input_len} tokens) is longer than the model's context length ({context} tokens)."
        )));
    }
    if let Some(v) = raw.non_null(SamplingKey::MaxNewTokens) {
        let max_new = int_value(SamplingKey::MaxNewTokens, v)?;
        let total = i128::from(max_new) + i128::from(input_len);
        if total > i128::from(context) {
            return Err(RequestError::value(format!(
                "Requested token count exceeds the model's maximum context length of {context} tokens. \
                 You requested a total of {total} tokens: {input_len} tokens from the input messages and \
                 {max_new} tokens for the completion. Please reduce the number of tokens in the input \
                 messages or the completion to fit within the limit."
            )));
        }
    }
    if req.return_hidden_states {
        return Err(RequestError::value(
            "The server is not configured to return the hidden states. Please set \
             `--enable-return-hidden-states` to enable this feature.",
        ));
    }
    if req.has_lora_path {
        return Err(RequestError::value(
            "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.",
        ));
    }
    if req.custom_logit_processor.is_some() {
        return Err(RequestError::value(
            "The server is not configured to enable custom logit processor. Please set \
             `--enable-custom-logit-processor` to enable this feature.",
        ));
    }
    if let Some(rank) = dp_rank
        && rank != 0
    {
        return Err(RequestError::value(format!(
            "routed_dp_rank={rank} is out of range [0, 1)."
        )));
    }
    Ok(())
}

fn validate_token_ids_logprob(ids: Option<&Vec<i64>>, vocab_size: u32) -> Result<(), RequestError> {
    let vocab = i64::from(vocab_size);
    if let Some(ids) = ids
        && let Some(bad) = ids.iter().find(|&&id| id < 0 || id >= vocab)
    {
        return Err(RequestError::value(format!(
            "token_ids_logprob contains out-of-vocabulary token id {bad}; valid range is [0, {vocab})."
        )));
    }
    Ok(())
}
