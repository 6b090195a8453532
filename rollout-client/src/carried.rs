//! The channels a `Sample` carries beside its logprobs, in slime's field names where slime has them, and the
//! rules that keep them aligned with the tokens.
//!
//! - `rollout_routed_experts`: one row per position of `tokens` up to the last generated token, but that token
//!   (slime's `len(tokens) - 1` rows when the response ends with generated tokens). SGLang returns the rows of
//!   the whole sequence (or from `routed_experts_start_len`), so a turn replaces them (or splices at the start)
//!   rather than appending: verl PR #6029 appended and duplicated rows.
//! - `rollout_top_p_token_ids` / `rollout_top_p_token_offsets`: the sampler's support per response token in
//!   slime's CSR form (`offsets.len() == response_length + 1`), empty for environment tokens, and
//!   `rollout_sampling_log_probs`: the sampled token's logprob renormalised over its support (TRL #7269's
//!   behaviour logprob), 0.0 for environment tokens. They come from 0.5.23's sampling mask or from slime's
//!   top-p replay (whose renormalised logprobs are the output logprobs themselves).
//! - `weight_version_spans`: which weight version made which response tokens, in response positions, in order,
//!   each inside a generation turn (AReaL PR #1569 labelled tokens with the version after the round trip).
//!
//! [`Carried::after_turn`] computes the state a turn leads to without changing anything, so a sample that
//! refuses a turn is unchanged.

use serde::{Deserialize, Serialize};

use crate::channels::{Channels, Masks, VersionSpan};
use crate::error::SampleError;
use crate::fields::GeneratedSpan;

/// Routed experts: rows of equal length, one per sequence position from 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Vec<i32>>", into = "Vec<Vec<i32>>")]
pub struct RoutedExperts {
    row_len: usize,
    data: Vec<i32>,
}

impl RoutedExperts {
    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.row_len).unwrap_or(0)
    }

    /// Expert ids per row (`num_layers * moe_router_topk`).
    pub fn row_len(&self) -> usize {
        self.row_len
    }

    /// The rows one after the other.
    pub fn as_flat(&self) -> &[i32] {
        &self.data
    }

    /// Row `i` (the routing of sequence position `i`; empty past the last row).
    pub fn row(&self, i: usize) -> &[i32] {
        self.data
            .get(i * self.row_len..(i + 1) * self.row_len)
            .unwrap_or(&[])
    }

    /// Keeps at most the first `rows` rows.
    pub(crate) fn keep_rows(&mut self, rows: usize) {
        self.data.truncate(rows * self.row_len);
    }
}

impl TryFrom<Vec<Vec<i32>>> for RoutedExperts {
    type Error = String;

    fn try_from(rows: Vec<Vec<i32>>) -> Result<Self, String> {
        let row_len = rows.first().map_or(0, Vec::len);
        if let Some(i) = rows.iter().position(|r| r.len() != row_len) {
            return Err(format!(
                "rollout_routed_experts row {i} has {} ids, row 0 has {row_len}",
                rows[i].len()
            ));
        }
        Ok(RoutedExperts {
            row_len,
            data: rows.into_iter().flatten().collect(),
        })
    }
}

impl From<RoutedExperts> for Vec<Vec<i32>> {
    fn from(r: RoutedExperts) -> Self {
        if r.row_len == 0 {
            return Vec::new();
        }
        r.data.chunks(r.row_len).map(<[i32]>::to_vec).collect()
    }
}

/// Everything a sample carries beside tokens, mask and logprobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Carried {
    pub(crate) routes: Option<RoutedExperts>,
    pub(crate) masks: Option<Masks>,
    pub(crate) version_spans: Vec<VersionSpan>,
}

/// Where a turn lands in its sample.
pub(crate) struct TurnPlace {
    /// Response position of the turn's first token.
    pub(crate) offset: usize,
    /// Its output tokens.
    pub(crate) output_ids: usize,
    /// `tokens.len()` once the turn is appended.
    pub(crate) tokens_after: usize,
    /// Generated tokens before the turn.
    pub(crate) generated_before: usize,
    /// `meta_info.weight_version`, for a turn without spans.
    pub(crate) weight_version: Option<String>,
}

fn misaligned(channel: &'static str, expected: usize, got: usize) -> SampleError {
    SampleError::ChannelMisaligned {
        channel,
        expected,
        got,
    }
}

impl Carried {
    /// The state after a generation turn with `channels` at `place`, or why the turn does not fit.
    pub(crate) fn after_turn(
        self,
        channels: &Channels,
        place: &TurnPlace,
    ) -> Result<Carried, SampleError> {
        let mut next = self;
        let generated = place.output_ids > 0;
        match (&channels.routes, &next.routes) {
            (Some(turn), existing) => {
                let mut data = Vec::new();
                if turn.start > 0 {
                    // Rows before the start are the sample's own, which must be there.
                    let kept = existing.as_ref().map_or(0, RoutedExperts::rows);
                    if kept < turn.start {
                        return Err(misaligned("routed_experts", turn.start, kept));
                    }
                    if let Some(existing) = existing
                        && existing.row_len != turn.row_len
                        && turn.rows() > 0
                    {
                        return Err(misaligned(
                            "routed_experts row length",
                            existing.row_len,
                            turn.row_len,
                        ));
                    }
                    data.extend_from_slice(
                        &existing.as_ref().map_or(&[][..], |e| e.as_flat())
                            [..turn.start * existing.as_ref().map_or(0, |e| e.row_len)],
                    );
                }
                data.extend_from_slice(&turn.data);
                let row_len = if turn.rows() > 0 {
                    turn.row_len
                } else {
                    existing.as_ref().map_or(0, |e| e.row_len)
                };
                let routes = RoutedExperts { row_len, data };
                let want = place.tokens_after.saturating_sub(1);
                if routes.rows() != want {
                    return Err(misaligned("routed_experts", want, routes.rows()));
                }
                next.routes = Some(routes);
            }
            (None, Some(_)) if generated => {
                return Err(SampleError::ChannelMissingInTurn {
                    channel: "routed_experts",
                });
            }
            (None, _) => {}
        }
        match (&channels.masks, &mut next.masks) {
            (Some(turn), masks) => {
                if masks.is_none() {
                    if place.generated_before > 0 {
                        return Err(SampleError::ChannelMissingInTurn {
                            channel: "output_token_sampling_mask",
                        });
                    }
                    // Environment tokens before the first masked turn: empty supports.
                    *masks = Some(Masks {
                        ids: Vec::new(),
                        offsets: vec![0; place.offset + 1],
                        logprobs: vec![0.0; place.offset],
                    });
                }
                if let Some(m) = masks {
                    let base = m.ids.len() as u32;
                    m.ids.extend_from_slice(&turn.ids);
                    m.offsets.extend(turn.offsets[1..].iter().map(|o| base + o));
                    m.logprobs.extend_from_slice(&turn.logprobs);
                }
            }
            (None, Some(_)) if generated => {
                return Err(SampleError::ChannelMissingInTurn {
                    channel: "output_token_sampling_mask",
                });
            }
            (None, _) => {}
        }
        match (&channels.weight_versions, &place.weight_version) {
            (Some(spans), _) => {
                next.version_spans
                    .extend(
                        spans
                            .iter()
                            .filter(|s| s.end > s.start)
                            .map(|s| VersionSpan {
                                version: s.version.clone(),
                                start: place.offset + s.start,
                                end: place.offset + s.end,
                            }),
                    )
            }
            (None, Some(version)) if generated => next.version_spans.push(VersionSpan {
                version: version.clone(),
                start: place.offset,
                end: place.offset + place.output_ids,
            }),
            (None, _) => {}
        }
        Ok(next)
    }
}

/// The channels of a sample, borrowed: what [`CarriedView::check`] holds to the tokens without copying them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CarriedView<'a> {
    pub(crate) routes: Option<&'a RoutedExperts>,
    pub(crate) masks: Option<MasksView<'a>>,
    pub(crate) version_spans: &'a [VersionSpan],
}

/// [`Masks`], borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MasksView<'a> {
    pub(crate) ids: &'a [u32],
    pub(crate) offsets: &'a [u32],
    pub(crate) logprobs: &'a [f32],
}

impl CarriedView<'_> {
    /// An owned copy.
    pub(crate) fn to_carried(self) -> Carried {
        Carried {
            routes: self.routes.cloned(),
            masks: self.masks.map(|m| Masks {
                ids: m.ids.to_vec(),
                offsets: m.offsets.to_vec(),
                logprobs: m.logprobs.to_vec(),
            }),
            version_spans: self.version_spans.to_vec(),
        }
    }

    /// The alignment of every channel with the sample's tokens and generated spans.
    pub(crate) fn check(
        &self,
        prompt_len: usize,
        response: &[u32],
        spans: &[GeneratedSpan],
    ) -> Result<(), SampleError> {
        if let Some(routes) = &self.routes {
            // Every generated token but a final one has a row, and no row lies past the tokens.
            let end = spans.last().map_or(0, GeneratedSpan::end);
            let (least, most) = (prompt_len + end, prompt_len + response.len());
            let covered = routes.rows() + 1;
            if covered < least || covered > most {
                let want = if covered < least { least } else { most };
                return Err(misaligned("routed_experts", want - 1, routes.rows()));
            }
        }
        if let Some(m) = &self.masks {
            let n = response.len();
            if m.offsets.len() != n + 1 || m.logprobs.len() != n {
                return Err(misaligned(
                    "output_token_sampling_mask",
                    n,
                    m.logprobs.len(),
                ));
            }
            if m.offsets[0] != 0
                || m.offsets.windows(2).any(|w| w[0] > w[1])
                || m.offsets[n] as usize != m.ids.len()
            {
                return Err(SampleError::ChannelInvalid {
                    channel: "rollout_top_p_token_offsets",
                    position: None,
                    problem: "offsets must rise from 0 to the number of ids".into(),
                });
            }
            let mut generated = vec![false; n];
            for span in spans {
                generated[span.start..span.end()].fill(true);
            }
            for (i, &g) in generated.iter().enumerate() {
                let support = &m.ids[m.offsets[i] as usize..m.offsets[i + 1] as usize];
                // A generated token has a support; whether it holds the token is the channel's own rule, checked
                // on the response (a sampling mask must hold it, a top-p row may not).
                let fits = if g {
                    !support.is_empty()
                } else {
                    support.is_empty() && m.logprobs[i] == 0.0
                };
                if !fits {
                    return Err(SampleError::ChannelInvalid {
                        channel: "rollout_top_p_token_ids",
                        position: Some(i),
                        problem: if g {
                            format!("the generated token {} has an empty support", response[i])
                        } else {
                            "an environment token has a support".into()
                        },
                    });
                }
            }
        }
        let mut next = 0;
        for span in self.version_spans {
            let inside = spans
                .iter()
                .any(|g| g.start <= span.start && span.end <= g.end());
            if span.start < next || span.end <= span.start || !inside {
                return Err(SampleError::ChannelInvalid {
                    channel: "weight_version_spans",
                    position: Some(span.start),
                    problem: format!(
                        "span {}..{} of {:?} overlaps, is empty or leaves the generated tokens",
                        span.start, span.end, span.version
                    ),
                });
            }
            next = span.end;
        }
        Ok(())
    }
}
