//! The per-token channels beside the logprobs, checked like them: routed experts, weight-version spans and
//! sampling masks.
//!
//! Issue #1976 dropped one per-token channel between SGLang and the trainer; the same class now shows up in the
//! channels beside it (miles #861: routes cut shorter than tokens; verl PR #6029: routes duplicated on resume;
//! AReaL PR #1569: tokens labelled with the wrong weight version). A channel the request asked for is decoded
//! and held to the tokens here, before a turn exists, or the response is a [`ResponseError`] naming the
//! channel and the position:
//!
//! - `routed_experts` (0.5.15 and later): base64 of little-endian int32 rows, one per position in
//!   `[routed_experts_start_len, prompt + output - 1)` (`BaseTopkCapturer.get_topk`), each the same length
//!   (`num_hidden_layers * num_experts_per_tok`), every expert id non-negative;
//! - `weight_versions` (0.5.23): spans `{version, start, end}` that tile the output tokens from 0 without a gap
//!   or an overlap, the last one's version `weight_version`;
//! - `output_token_sampling_mask` and `output_token_sampling_logprobs` (0.5.23): one support per output token
//!   that holds the sampled token, with finite renormalised logprobs `<= 0`;
//! - `top_p_token_ids` and `top_p_token_offsets` (slime's patched 0.5.15, asked by
//!   `custom_params.return_top_p_token_ids`): base64 int32 rows in slime's CSR form, offsets from 0 rising to the
//!   number of ids, one row per output token, none empty. The rows need not hold the sampled token: the patch
//!   keeps the nucleus by its own torch test, which can drop a boundary token the sampling kernel kept, and slime's
//!   trainer force-keeps the token instead. The output logprobs are then the renormalised ones.

use base64::Engine;

use crate::error::ResponseError;
pub use crate::wire::VersionSpan;
use crate::wire::{MetaInfo, SamplingLogprobs};

/// What a request asked the server for, beyond tokens: what its response must carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    /// `return_logprob`.
    pub logprobs: bool,
    /// `return_routed_experts`, with its `routed_experts_start_len` and, when the client knows the model, the
    /// length of a row.
    pub routed_experts: Option<RoutesAsked>,
    /// `return_sampling_mask`.
    pub sampling_mask: bool,
    /// `custom_params.return_top_p_token_ids` on a request with logprobs whose sampler filters: slime's top-p
    /// replay rows.
    pub top_p: bool,
}

/// The routes a request asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoutesAsked {
    /// `routed_experts_start_len`: the first position with a row.
    pub start: usize,
    /// `num_hidden_layers * num_experts_per_tok`, when known.
    pub row_len: Option<usize>,
}

impl From<bool> for Asked {
    /// A request that asked for logprobs or not, and nothing else.
    fn from(logprobs: bool) -> Asked {
        Asked {
            logprobs,
            ..Asked::default()
        }
    }
}

/// Decoded `routed_experts`: rows of positions `start..start + rows()`, flat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    /// The first position with a row.
    pub start: usize,
    /// Expert ids per row (`num_hidden_layers * num_experts_per_tok`); 0 when there are no rows.
    pub row_len: usize,
    /// Every row, one after the other.
    pub data: Vec<i32>,
}

impl Routes {
    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.row_len).unwrap_or(0)
    }

    /// Row `i` (empty past the last row).
    pub fn row(&self, i: usize) -> &[i32] {
        self.data
            .get(i * self.row_len..(i + 1) * self.row_len)
            .unwrap_or(&[])
    }
}

/// Decoded sampling masks: one support per output token, in CSR form (slime's `rollout_top_p_token_ids` and
/// `rollout_top_p_token_offsets`), and the sampled token's renormalised logprob.
#[derive(Debug, Clone, PartialEq)]
pub struct Masks {
    /// Every support, one after the other.
    pub ids: Vec<u32>,
    /// `offsets[i]..offsets[i + 1]` is token `i`'s support; `offsets[0] == 0`.
    pub offsets: Vec<u32>,
    /// The sampled token's logprob under the distribution renormalised over its support, one per token.
    pub logprobs: Vec<f32>,
}

impl Masks {
    /// The number of tokens with a mask.
    pub fn len(&self) -> usize {
        self.logprobs.len()
    }

    /// Whether no token has a mask.
    pub fn is_empty(&self) -> bool {
        self.logprobs.is_empty()
    }

    /// Token `i`'s support (empty past the last token).
    pub fn support(&self, i: usize) -> &[u32] {
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&start), Some(&end)) => self.ids.get(start as usize..end as usize).unwrap_or(&[]),
            _ => &[],
        }
    }
}

/// The channels of one response, checked against its tokens.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Channels {
    pub routes: Option<Routes>,
    pub weight_versions: Option<Vec<VersionSpan>>,
    pub masks: Option<Masks>,
}

fn bad(
    channel: &'static str,
    position: Option<usize>,
    problem: impl Into<String>,
) -> ResponseError {
    ResponseError::BadChannel {
        channel,
        position,
        problem: problem.into(),
    }
}

/// Takes the channels out of `meta` and checks them against `output_ids`. A channel that was asked for and is
/// missing is an error unless `ran` is false (an abort before the request ran has no channels).
pub(crate) fn take(
    meta: &mut MetaInfo,
    asked: &Asked,
    output_ids: &[u32],
    logprobs: Option<&[f32]>,
    ran: bool,
) -> Result<Channels, ResponseError> {
    let routes = match (asked.routed_experts, meta.routed_experts.take()) {
        (Some(ask), Some(text)) => Some(routes(&text, ask, meta.prompt_tokens, output_ids.len())?),
        (Some(_), None) if ran => {
            return Err(ResponseError::MissingChannel {
                channel: "routed_experts",
            });
        }
        _ => None,
    };
    let weight_versions = meta
        .weight_versions
        .take()
        .map(|spans| weight_versions(spans, meta.weight_version.as_deref(), output_ids.len()))
        .transpose()?;
    let masks = match (
        asked.sampling_mask,
        meta.output_token_sampling_mask.take(),
        meta.output_token_sampling_logprobs.take(),
    ) {
        (true, Some(mask), Some(logprobs)) => Some(masks(
            mask,
            logprobs,
            meta.output_token_sampling_mask_length,
            output_ids,
        )?),
        (true, None, _) if ran => {
            return Err(ResponseError::MissingChannel {
                channel: "output_token_sampling_mask",
            });
        }
        (true, Some(_), None) => {
            return Err(ResponseError::MissingChannel {
                channel: "output_token_sampling_logprobs",
            });
        }
        _ => None,
    };
    let top_p = match (
        asked.top_p,
        meta.top_p_token_ids.take(),
        meta.top_p_token_offsets.take(),
    ) {
        (true, Some(ids), Some(offsets)) => {
            Some(top_p(&ids, &offsets, output_ids, logprobs.unwrap_or(&[]))?)
        }
        // Rows are written with the finish reason, and only when a token was made.
        (true, None, None) if ran && !output_ids.is_empty() => {
            return Err(ResponseError::MissingChannel {
                channel: "top_p_token_ids",
            });
        }
        (true, Some(_), None) => {
            return Err(ResponseError::MissingChannel {
                channel: "top_p_token_offsets",
            });
        }
        (true, None, Some(_)) => {
            return Err(ResponseError::MissingChannel {
                channel: "top_p_token_ids",
            });
        }
        _ => None,
    };
    let masks = match (masks, top_p) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "top_p_token_ids",
                None,
                "both a sampling mask and top-p rows: a sample carries one support per token",
            ));
        }
        (masks, top_p) => masks.or(top_p),
    };
    Ok(Channels {
        routes,
        weight_versions,
        masks,
    })
}

/// Base64 of little-endian int32 values, or what is wrong with it.
fn base64_i32(channel: &'static str, text: &str) -> Result<Vec<i32>, ResponseError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| bad(channel, None, format!("not base64: {e}")))?;
    if !bytes.len().is_multiple_of(4) {
        return Err(bad(
            channel,
            None,
            format!("{} bytes are not whole int32 values", bytes.len()),
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// slime's top-p replay rows (`_extract_rollout_top_p_token_data`, with its checks and more): offsets from 0,
/// rising, one more than the output tokens and ending at the number of ids; no empty row (the sampler keeps at
/// least its most probable id); no negative id. Each row's logprob is the output token's, renormalised by the
/// server over the row.
fn top_p(
    ids: &str,
    offsets: &str,
    output_ids: &[u32],
    logprobs: &[f32],
) -> Result<Masks, ResponseError> {
    const IDS: &str = "top_p_token_ids";
    const OFFSETS: &str = "top_p_token_offsets";
    let ids = base64_i32(IDS, ids)?;
    let offsets = base64_i32(OFFSETS, offsets)?;
    let n = output_ids.len();
    if offsets.len() != n + 1 {
        return Err(bad(
            OFFSETS,
            Some(offsets.len().saturating_sub(1).min(n)),
            format!(
                "{} offsets for {n} output tokens: a row per token needs {}",
                offsets.len(),
                n + 1
            ),
        ));
    }
    if let Some(&start) = offsets.first().filter(|&&start| start != 0) {
        return Err(bad(
            OFFSETS,
            Some(0),
            format!("the offsets start at {start}, not 0"),
        ));
    }
    if let Some(i) = offsets.windows(2).position(|w| w[1] <= w[0]) {
        return Err(bad(
            OFFSETS,
            Some(i),
            format!(
                "row {i} runs from {} to {}: every row keeps at least one id",
                offsets[i],
                offsets[i + 1]
            ),
        ));
    }
    let end = offsets.last().copied().unwrap_or(0);
    if end as usize != ids.len() {
        return Err(bad(
            OFFSETS,
            None,
            format!("the offsets end at {end}, the ids are {}", ids.len()),
        ));
    }
    if let Some(at) = ids.iter().position(|&id| id < 0) {
        let row = offsets.partition_point(|&o| o as usize <= at) - 1;
        return Err(bad(IDS, Some(row), format!("token id {}", ids[at])));
    }
    if logprobs.len() != n {
        return Err(bad(
            IDS,
            None,
            format!(
                "{n} rows need the output logprobs, and the response has {}",
                logprobs.len()
            ),
        ));
    }
    Ok(Masks {
        ids: ids.into_iter().map(|id| id as u32).collect(),
        offsets: offsets.into_iter().map(|o| o as u32).collect(),
        logprobs: logprobs.to_vec(),
    })
}

/// `routed_experts`: valid base64 of whole int32 values, as many rows as the positions
/// `[start, prompt + output - 1)`, every row the same (expected) length, no negative expert.
fn routes(
    text: &str,
    ask: RoutesAsked,
    prompt_tokens: Option<usize>,
    output_len: usize,
) -> Result<Routes, ResponseError> {
    const CHANNEL: &str = "routed_experts";
    let data = base64_i32(CHANNEL, text)?;
    let prompt = prompt_tokens.ok_or_else(|| {
        bad(
            CHANNEL,
            None,
            "meta_info has no prompt_tokens to count the rows by",
        )
    })?;
    let rows = (prompt + output_len)
        .saturating_sub(1)
        .saturating_sub(ask.start);
    let row_len = match (rows, ask.row_len) {
        (0, _) => 0,
        (rows, expected) => {
            if !data.len().is_multiple_of(rows) || data.is_empty() {
                return Err(bad(
                    CHANNEL,
                    None,
                    format!(
                        "{} values are not {rows} rows (positions {}..{} of {prompt} prompt and {output_len} output tokens)",
                        data.len(),
                        ask.start,
                        prompt + output_len - 1
                    ),
                ));
            }
            let row_len = data.len() / rows;
            if let Some(expected) = expected
                && expected != row_len
            {
                return Err(bad(
                    CHANNEL,
                    None,
                    format!(
                        "{} values in {rows} rows are rows of {row_len}, not of {expected} (layers times experts per token)",
                        data.len()
                    ),
                ));
            }
            row_len
        }
    };
    if rows == 0 && !data.is_empty() {
        return Err(bad(
            CHANNEL,
            None,
            format!("{} values where no position has a row", data.len()),
        ));
    }
    if let Some(at) = data.iter().position(|&e| e < 0) {
        return Err(bad(
            CHANNEL,
            Some(ask.start + at / row_len.max(1)),
            format!("expert id {}", data[at]),
        ));
    }
    Ok(Routes {
        start: ask.start,
        row_len,
        data,
    })
}

/// `weight_versions`: spans that tile `0..output_len` in order, the last one's version the answer's
/// `weight_version`.
fn weight_versions(
    spans: Vec<VersionSpan>,
    weight_version: Option<&str>,
    output_len: usize,
) -> Result<Vec<VersionSpan>, ResponseError> {
    const CHANNEL: &str = "weight_versions";
    let mut next = 0;
    for span in &spans {
        if span.start != next {
            return Err(bad(
                CHANNEL,
                Some(next.min(span.start)),
                format!(
                    "a span starts at {} where {next} was due: a {}",
                    span.start,
                    if span.start > next { "gap" } else { "overlap" }
                ),
            ));
        }
        if span.end < span.start {
            return Err(bad(
                CHANNEL,
                Some(span.start),
                format!("a span ends at {} before its start", span.end),
            ));
        }
        next = span.end;
    }
    let Some(last) = spans.last() else {
        return Err(bad(CHANNEL, None, "no span"));
    };
    if next != output_len {
        return Err(bad(
            CHANNEL,
            Some(next.min(output_len)),
            format!("the spans cover {next} of {output_len} output tokens"),
        ));
    }
    if let Some(version) = weight_version
        && version != last.version
    {
        return Err(bad(
            CHANNEL,
            Some(last.start),
            format!(
                "the last span's version {:?} is not weight_version {version:?}",
                last.version
            ),
        ));
    }
    Ok(spans)
}

/// The sampling masks: a non-empty support per output token holding that token, a finite logprob `<= 0` for
/// it, and the declared length.
fn masks(
    mask: Vec<Vec<u32>>,
    logprobs: SamplingLogprobs,
    declared: Option<usize>,
    output_ids: &[u32],
) -> Result<Masks, ResponseError> {
    const CHANNEL: &str = "output_token_sampling_mask";
    if mask.len() != output_ids.len() {
        return Err(bad(
            CHANNEL,
            Some(mask.len().min(output_ids.len())),
            format!(
                "{} masks for {} output tokens",
                mask.len(),
                output_ids.len()
            ),
        ));
    }
    if let Some(declared) = declared
        && declared != mask.len()
    {
        return Err(bad(
            CHANNEL,
            None,
            format!(
                "output_token_sampling_mask_length is {declared}, the masks are {}",
                mask.len()
            ),
        ));
    }
    let rows = match &logprobs {
        SamplingLogprobs::Selected(values) => values.len(),
        SamplingLogprobs::Support(lists) => lists.len(),
    };
    if rows != mask.len() {
        return Err(bad(
            "output_token_sampling_logprobs",
            Some(rows.min(mask.len())),
            format!("{rows} rows for {} masks", mask.len()),
        ));
    }
    let mut out = Masks {
        ids: Vec::with_capacity(mask.iter().map(Vec::len).sum()),
        offsets: Vec::with_capacity(mask.len() + 1),
        logprobs: Vec::with_capacity(mask.len()),
    };
    out.offsets.push(0);
    for (i, (support, &token)) in mask.iter().zip(output_ids).enumerate() {
        let Some(at) = support.iter().position(|&id| id == token) else {
            return Err(bad(
                CHANNEL,
                Some(i),
                format!(
                    "the support of {} ids lacks the sampled token {token}",
                    support.len()
                ),
            ));
        };
        let logprob = match &logprobs {
            SamplingLogprobs::Selected(values) => values[i],
            SamplingLogprobs::Support(lists) => {
                if lists[i].len() != support.len() {
                    return Err(bad(
                        "output_token_sampling_logprobs",
                        Some(i),
                        format!(
                            "{} logprobs for a support of {}",
                            lists[i].len(),
                            support.len()
                        ),
                    ));
                }
                lists[i][at]
            }
        };
        match logprob {
            Some(lp) if lp.is_finite() && lp <= 0.0 => out.logprobs.push(lp),
            other => {
                return Err(bad(
                    "output_token_sampling_logprobs",
                    Some(i),
                    match other {
                        None => "null".to_owned(),
                        Some(lp) => format!("{lp}"),
                    },
                ));
            }
        }
        out.ids.extend_from_slice(support);
        out.offsets.push(out.ids.len() as u32);
    }
    Ok(out)
}
