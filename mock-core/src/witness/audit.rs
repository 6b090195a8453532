//! The audit: each sample's response explained as segments the server generated, and every way the #1976 bug
//! class shows up reported at its positions (`WITNESS.md` sections 3.2 and 4).
//!
//! A response is walked from its first token. At each position the context is the sample's prompt plus the
//! response before it; the ledger entries whose prompt is exactly that context are the candidates, and the one
//! whose output agrees with the response for longest explains those tokens (a segment). Trained tokens that no
//! entry explains were never generated in that context; generated tokens with loss mask 0 are filed as
//! environment output. Within segments, the sample's logprobs, weight versions and routes are compared with
//! what the server sent.

use std::collections::HashMap;
use std::fmt::{self, Write as _};

use serde::Serialize;

use super::ledger::{Entry, Finish, PromptHash, Records, Span};
use super::samples::{AuditOptions, AuditSample, VersionLabel};
use crate::model::{Model, Policy};

macro_rules! problem_kinds {
    ($($variant:ident => $name:literal $doc:literal,)*) => {
        /// Every way a sample can disagree with what the server served (`WITNESS.md` section 4).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ProblemKind { $(#[doc = $doc] $variant,)* }

        impl ProblemKind {
            /// Every kind, in the order reports list them.
            pub const ALL: &'static [ProblemKind] = &[$(ProblemKind::$variant,)*];

            /// The kind's name in reports.
            pub fn name(self) -> &'static str {
                match self { $(ProblemKind::$variant => $name,)* }
            }

            /// One line saying what the kind means.
            pub fn description(self) -> &'static str {
                match self { $(ProblemKind::$variant => $doc,)* }
            }
        }
    };
}

problem_kinds! {
    LogprobsMissing => "logprobs-missing"
        "The sample has no rollout logprobs (`None` or no key) but trains on tokens: slime #1976 itself.",
    LogprobsLength => "logprobs-length" "The sample has fewer or more logprobs than tokens.",
    MaskLength => "mask-length" "The loss mask has fewer or more entries than tokens.",
    LogprobNone => "logprob-none" "A trained token's logprob is `None` (`null`).",
    LogprobNotFinite => "logprob-not-finite" "A trained token's logprob is NaN or infinite.",
    LogprobPositive => "logprob-positive" "A trained token's logprob is above 0: a probability above 1.",
    LogprobZero => "logprob-zero"
        "A trained token's logprob is 0.0 where the server sent another value: a placeholder or a zero fill.",
    LogprobShifted => "logprob-shifted"
        "A trained token holds the logprob the server sent for another position of the same sample.",
    LogprobFromOtherRequest => "logprob-from-other-request"
        "A trained token holds a logprob the server sent in the answer to another request (or another sample).",
    LogprobStale => "logprob-stale"
        "A trained token holds the model's logprob under weights older than those that generated it: a stale worker.",
    LogprobDiffers => "logprob-differs" "A trained token's logprob differs from the one the server sent.",
    LogprobsNotRequested => "logprobs-not-requested"
        "Trained tokens come from a request that did not ask for logprobs, so their logprobs cannot be the server's.",
    GeneratedUntrained => "generated-untrained"
        "Tokens the server generated carry loss mask 0: filed as environment output, they are dropped from training.",
    NeverGenerated => "never-generated"
        "Trained tokens the server never generated in that context (retokenized, appended or edited by the client).",
    Evicted => "evicted"
        "The ledger entry that would explain trained tokens was evicted; raise the ledger's bound.",
    FaultedAnswer => "faulted-answer"
        "The sample kept tokens from an answer a scheduled fault corrupted, which a rollout must refuse.",
    RoutesMissing => "routes-missing" "The server sent routed experts for the sample's tokens; the sample has none.",
    RoutesRowCount => "routes-row-count"
        "The routed experts have more rows than forward positions, or too few to cover the trained tokens.",
    RoutesDiffer => "routes-differ" "Routed-expert rows differ from the ones the server computed for those positions.",
    VersionsLength => "versions-length" "The per-token weight versions have fewer or more entries than tokens.",
    VersionMismatch => "version-mismatch"
        "Tokens are labelled with a weight version other than the one that generated them.",
    NothingAudited => "nothing-audited"
        "The audit compared nothing: no samples, or samples that train on no token (an empty dump, an all-zero mask).",
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for ProblemKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One way a sample disagrees with what the server served, at a range of its per-token positions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    /// The sample's position in the audit's input; `None` for a problem of the whole batch.
    pub sample: Option<usize>,
    /// The sample's id (its `id` or `index`, else its position).
    pub sample_id: Option<String>,
    /// How the report names the sample: its id, and its position when another sample of the batch has the same
    /// id (`0 (samples[2])`: slime's multi-agent samples all carry index 0); `the batch` for the whole batch.
    pub sample_label: String,
    pub kind: ProblemKind,
    /// The field, in the sample's own layout (`rollout_log_probs`, `loss_mask`, ...).
    pub channel: String,
    /// The positions `start..end` of the sample's per-token arrays (response positions; sequence positions
    /// for routed-expert rows).
    pub start: usize,
    pub end: usize,
    /// The request whose answer the positions come from, when one does.
    pub rid: Option<String>,
    /// What the server sent or what was due, at the first position.
    pub expected: Option<String>,
    /// What the sample holds there.
    pub found: Option<String>,
    /// The problem in words, with what to do about it.
    pub message: String,
}

/// What an audit found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    pub ok: bool,
    pub samples: usize,
    /// Samples with at least one problem.
    pub samples_with_problems: usize,
    /// Response tokens across the samples, and those with loss mask 1.
    pub tokens: usize,
    pub trained_tokens: usize,
    /// Trained tokens whose logprob was compared with the one the server sent.
    pub checked_logprobs: usize,
    /// Trained tokens whose weight-version label was compared with the weights that made them, and the fields
    /// the labels came from (none when the samples carry no version labels: then no version was checked).
    pub checked_versions: usize,
    pub version_fields: Vec<String>,
    /// Distinct ledger entries the samples' segments came from.
    pub matched_items: usize,
    pub problems: Vec<Problem>,
}

impl Report {
    /// The report as text: one line of totals, then each problem's message under its sample.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "audit {}: {} sample{}, {} with problems ({} problem{}); {} trained tokens, {} logprobs compared \
             with {} served item{}",
            if self.ok { "passed" } else { "FAILED" },
            self.samples,
            plural(self.samples),
            self.samples_with_problems,
            self.problems.len(),
            plural(self.problems.len()),
            self.trained_tokens,
            self.checked_logprobs,
            self.matched_items,
            plural(self.matched_items),
        );
        let _ = if self.version_fields.is_empty() {
            writeln!(
                out,
                "weight versions not checked: the samples carry no version labels (slime's weight_versions, \
                 AReaL's output_versions or versions, a sample's weight_version_spans)"
            )
        } else {
            writeln!(
                out,
                "weight versions: {} of trained tokens compared ({})",
                count_of(self.checked_versions, "label"),
                self.version_fields.join(", ")
            )
        };
        for problem in &self.problems {
            let _ = match problem.sample {
                Some(_) => writeln!(
                    out,
                    "- sample {} [{}] {}[{}:{}]: {}",
                    problem.sample_label,
                    problem.kind,
                    problem.channel,
                    problem.start,
                    problem.end,
                    problem.message
                ),
                None => writeln!(
                    out,
                    "- {} [{}]: {}",
                    problem.sample_label, problem.kind, problem.message
                ),
            };
        }
        out
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// "1 token", "3 tokens".
fn count_of(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", plural(n))
}

/// "1 trained token", "3 trained tokens".
fn trained_tokens(n: usize) -> String {
    format!("{n} trained token{}", plural(n))
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Response tokens `start..end` were generated by the entry numbered `seq`, as its output tokens
/// `0..end - start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    start: usize,
    end: usize,
    seq: u64,
}

/// Trained tokens `start..end` that no entry explains, and what the walk knew at `start`.
#[derive(Debug, Clone)]
struct Unexplained {
    start: usize,
    end: usize,
    why: Why,
}

#[derive(Debug, Clone)]
enum Why {
    /// The entry the previous segment came from generated `generated` at this position.
    Diverged { seq: u64, generated: u32 },
    /// The previous segment's entry ended here; `next` is an entry whose prompt is this context (a request that
    /// continued from there) that agrees with none of the tokens after it.
    AfterEnd { seq: u64, next: Option<u64> },
    /// An entry with this context generated `generated` first (`None`: it generated nothing, aborted first).
    OtherFirst { seq: u64, generated: Option<u32> },
    /// No entry has this context, and one that had it was evicted (`Some(true)`), or none was (`Some(false)`),
    /// or the ledger has forgotten some evictions (`None`).
    Unserved { evicted: Option<bool> },
}

/// How one sample's response splits into what the server generated and what it did not.
#[derive(Debug, Default)]
struct Walk {
    /// The prompt and the response, one after the other.
    full: Vec<u32>,
    segments: Vec<Segment>,
    unexplained: Vec<Unexplained>,
}

fn walk(records: &Records, sample: &AuditSample) -> Walk {
    let p0 = sample.prompt.len();
    let mut full = Vec::with_capacity(p0 + sample.response.len());
    full.extend_from_slice(&sample.prompt);
    full.extend_from_slice(&sample.response);
    let n = sample.response.len();
    let mut out = Walk::default();
    let mut hash = PromptHash::of(&sample.prompt);
    let mut open: Option<Unexplained> = None;
    // What the last segment's entry knew about the position after it.
    let mut after_segment: Option<Why> = None;
    let mut i = 0;
    while i < n {
        let best = best_entry(
            records,
            hash,
            &full[..p0 + i],
            &sample.response[i..],
            sample,
            i,
        );
        if let Some((entry, lcp)) = best.filter(|&(_, lcp)| lcp > 0) {
            if let Some(mut range) = open.take() {
                range.end = i;
                out.unexplained.push(range);
            }
            out.segments.push(Segment {
                start: i,
                end: i + lcp,
                seq: entry.seq,
            });
            after_segment = Some(match entry.output_ids.get(lcp) {
                Some(&generated) => Why::Diverged {
                    seq: entry.seq,
                    generated,
                },
                None => Why::AfterEnd {
                    seq: entry.seq,
                    next: None,
                },
            });
            for &id in &sample.response[i..i + lcp] {
                hash = hash.push(id);
            }
            i += lcp;
            continue;
        }
        if sample.trained(i) {
            if open.is_none() {
                let why = match after_segment.take() {
                    // A request continued from where the answer ended, but not with the sample's tokens.
                    Some(Why::AfterEnd { seq, .. }) => Why::AfterEnd {
                        seq,
                        next: best.map(|(entry, _)| entry.seq),
                    },
                    Some(why) => why,
                    None => match best {
                        Some((entry, _)) => Why::OtherFirst {
                            seq: entry.seq,
                            generated: entry.output_ids.first().copied(),
                        },
                        None => Why::Unserved {
                            evicted: records.evicted_prompt(hash),
                        },
                    },
                };
                // Its end is set where the range closes.
                open = Some(Unexplained {
                    start: i,
                    end: i,
                    why,
                });
            }
        } else {
            after_segment = None;
            if let Some(mut range) = open.take() {
                range.end = i;
                out.unexplained.push(range);
            }
        }
        hash = hash.push(sample.response[i]);
        i += 1;
    }
    if let Some(mut range) = open.take() {
        range.end = n;
        out.unexplained.push(range);
    }
    out.full = full;
    out
}

/// The entry whose prompt is `context` and whose output agrees longest with `rest`, with that length. Ties (the
/// model is deterministic, so a request sent twice is answered twice alike) go to the entry that agrees with
/// more of the sample's logprobs over those tokens, then to one no fault changed, then to the newest.
fn best_entry<'r>(
    records: &'r Records,
    hash: PromptHash,
    context: &[u32],
    rest: &[u32],
    sample: &AuditSample,
    i: usize,
) -> Option<(&'r Entry, usize)> {
    let lps = sample.logprobs.as_deref().unwrap_or_default();
    let mut best: Option<(&Entry, (usize, usize, bool))> = None;
    for entry in records.with_prompt_hash(hash) {
        if entry.prompt_ids != context {
            continue;
        }
        let lcp = entry
            .output_ids
            .iter()
            .zip(rest)
            .take_while(|(a, b)| a == b)
            .count();
        let agreeing = entry.output_logprobs.as_ref().map_or(0, |sent| {
            (0..lcp)
                .filter(
                    |&q| matches!((sent.get(q), lps.get(i + q)), (Some(Some(a)), Some(&Some(b))) if a == b),
                )
                .count()
        });
        let rank = (lcp, agreeing, entry.fault.is_none());
        // Later entries win ties: the newest of equals.
        if best.is_none_or(|(_, best_rank)| rank >= best_rank) {
            best = Some((entry, rank));
        }
    }
    best.map(|(entry, (lcp, _, _))| (entry, lcp))
}

/// The lengths of the prefixes of `sent` that `values` holds one after another from its start, while it does,
/// each at least as long as the one before (as the chunks of a cumulative stream are), when there are at least
/// two: what a client keeps that appends every chunk of a stream in which each chunk carries everything so far.
fn cumulative<T: PartialEq>(values: &[T], sent: &[T]) -> Option<Vec<usize>> {
    let mut chunks: Vec<usize> = Vec::new();
    let mut j = 0;
    for v in values {
        if j < sent.len() && *v == sent[j] {
            j += 1;
        } else if j > 0 && *v == sent[0] && chunks.last().is_none_or(|&last| j >= last) {
            chunks.push(j);
            j = 1;
        } else {
            break;
        }
    }
    if j > 0 && chunks.last().is_none_or(|&last| j >= last) {
        chunks.push(j);
    }
    (chunks.len() >= 2).then_some(chunks)
}

/// "1, 2 and 3"; a long list keeps its first three and its last two.
fn listed(values: &[usize]) -> String {
    let shown: Vec<String> = if values.len() > 6 {
        let mut v: Vec<String> = values[..3].iter().map(ToString::to_string).collect();
        v.push("...".to_owned());
        v.extend(values[values.len() - 2..].iter().map(ToString::to_string));
        v
    } else {
        values.iter().map(ToString::to_string).collect()
    };
    match shown.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// What the server sent at a response position that a segment covers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sent {
    /// The number sent, or `None` for a `null`.
    Value(Option<f32>),
    /// The answer carried no logprob there (fewer than its tokens, or none at all).
    Nothing,
}

fn show(v: Option<f32>) -> String {
    match v {
        None => "None".to_owned(),
        Some(x) if x.is_nan() => "nan".to_owned(),
        Some(x) => format!("{x}"),
    }
}

/// The class of a trained token's wrong logprob; consecutive positions of one class form one problem.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wrong {
    None,
    NotFinite,
    Positive,
    Zero,
    /// The value sent, rounded in one of these ways.
    Rounded(Roundings),
    /// The model's logprob of the token at temperature 1, where the request sampled at another.
    AtTemperatureOne,
    /// The model's logprob of the token under the server's `weights`-th weights, older than those that generated it.
    Stale {
        weights: u64,
    },
    Shifted(isize),
    FromOther {
        seq: u64,
        at: usize,
    },
    /// A value where the answer carried none.
    Unsent,
    Differs,
}

impl Wrong {
    /// Whether a run of positions wrong like `self` goes on with a position wrong like `next`: the same class,
    /// for values from another answer the same answer, for rounded values a rounding that gives both.
    fn continues_with(&self, next: &Wrong) -> bool {
        match (self, next) {
            (Wrong::FromOther { seq: a, .. }, Wrong::FromOther { seq: b, .. }) => a == b,
            (Wrong::Rounded(a), Wrong::Rounded(b)) => a.and(*b).is_some(),
            (a, b) => a == b,
        }
    }

    /// The class of a run that went on with `next` ([`Wrong::continues_with`]).
    fn then(self, next: Wrong) -> Wrong {
        match (self, next) {
            (Wrong::Rounded(a), Wrong::Rounded(b)) => a.and(b).map_or(self, Wrong::Rounded),
            _ => self,
        }
    }
}

/// Ways a client rounds a logprob, as a set: bfloat16, float16, and a number of decimals from 1 to 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Roundings(u8);

impl Roundings {
    const BFLOAT16: u8 = 1;
    const FLOAT16: u8 = 1 << 1;
    /// Bit `DECIMALS_SHIFT + d - 1` is rounding to `d` decimals.
    const DECIMALS_SHIFT: u32 = 2;
    const MAX_DECIMALS: u32 = 6;

    /// The roundings of `sent` that give `got`, if any does.
    fn of(sent: f32, got: f32) -> Option<Roundings> {
        let mut bits = 0;
        if bfloat16(sent) == got {
            bits |= Self::BFLOAT16;
        }
        if float16(sent) == got {
            bits |= Self::FLOAT16;
        }
        // As the client read it: the shortest decimal that reads back as the f32 sent.
        let read: f64 = format!("{sent}").parse().unwrap_or(f64::from(sent));
        for d in 1..=Self::MAX_DECIMALS {
            let rounded: f64 = format!("{read:.*}", d as usize).parse().unwrap_or(f64::NAN);
            if rounded as f32 == got {
                bits |= 1 << (Self::DECIMALS_SHIFT + d - 1);
            }
        }
        (bits != 0).then_some(Roundings(bits))
    }

    fn and(self, other: Roundings) -> Option<Roundings> {
        let bits = self.0 & other.0;
        (bits != 0).then_some(Roundings(bits))
    }

    /// The coarsest rounding to decimals in the set.
    fn decimals(self) -> Option<u32> {
        (1..=Self::MAX_DECIMALS).find(|d| self.0 & (1 << (Self::DECIMALS_SHIFT + d - 1)) != 0)
    }

    /// "as bfloat16 rounds it", "as rounding to 3 decimals does", or both.
    fn how(self) -> String {
        let mut ways = Vec::new();
        if self.0 & Self::BFLOAT16 != 0 {
            ways.push("bfloat16".to_owned());
        }
        if self.0 & Self::FLOAT16 != 0 {
            ways.push("float16".to_owned());
        }
        let floats = !ways.is_empty();
        match (floats, self.decimals()) {
            (true, None) => format!("as {} rounds it", ways.join(" or ")),
            (true, Some(d)) => format!(
                "as {} rounds it (or rounding to {d} decimals)",
                ways.join(" or ")
            ),
            (false, Some(d)) => format!("as rounding to {d} decimals does"),
            (false, None) => unreachable!("a set of roundings is never empty"),
        }
    }

    /// What the values are, for a run of several: "the value sent in bfloat16".
    fn what(self) -> String {
        if self.0 & Self::BFLOAT16 != 0 {
            "the value sent in bfloat16".to_owned()
        } else if self.0 & Self::FLOAT16 != 0 {
            "the value sent in float16".to_owned()
        } else {
            let d = self.decimals().unwrap_or(Self::MAX_DECIMALS);
            format!("the value sent rounded to {d} decimals")
        }
    }

    /// Whether the values are a float type's (not decimals).
    fn is_float(self) -> bool {
        self.0 & (Self::BFLOAT16 | Self::FLOAT16) != 0
    }
}

/// `x` rounded to bfloat16 (to nearest, ties to even, as torch converts), back as an `f32`.
fn bfloat16(x: f32) -> f32 {
    let bits = x.to_bits();
    let lsb = (bits >> 16) & 1;
    f32::from_bits(bits.wrapping_add(0x7FFF + lsb) & 0xFFFF_0000)
}

/// `x` rounded to IEEE half precision (to nearest, ties to even), back as an `f32`; finite logprobs only.
fn float16(x: f32) -> f32 {
    // Below 2^-14 half precision is subnormal, its step 2^-24.
    if x.abs() < 2f32.powi(-14) {
        let step = 2f64.powi(-24);
        return ((f64::from(x) / step).round_ties_even() * step) as f32;
    }
    if x.abs() >= 65520.0 {
        return f32::INFINITY.copysign(x);
    }
    let bits = x.to_bits();
    let lsb = (bits >> 13) & 1;
    f32::from_bits(bits.wrapping_add(0xFFF + lsb) & !0x1FFF)
}

/// A distance between two values, with three significant digits: `8.75`, `0.00877`, `7.7e-4` below 0.001.
fn distance(a: f32, b: f32) -> String {
    let d = (f64::from(a) - f64::from(b)).abs();
    if d == 0.0 {
        "0".to_owned()
    } else if d < 1e-3 {
        format!("{d:.1e}")
    } else {
        let digits = (2 - d.log10().floor() as i32).max(0) as usize;
        format!("{d:.digits$}")
    }
}

/// The values the server sent to any item, for `logprob-from-other-request`: built when first needed.
struct ValueIndex<'r> {
    records: &'r Records,
    map: Option<HashMap<u32, (u64, usize)>>,
}

impl ValueIndex<'_> {
    fn find(&mut self, value: f32, not: u64) -> Option<(u64, usize)> {
        let records = self.records;
        let map = self.map.get_or_insert_with(|| {
            let mut map = HashMap::new();
            for entry in records.entries() {
                if let Some(lps) = &entry.output_logprobs {
                    for (i, v) in lps.values.iter().enumerate() {
                        map.entry(v.to_bits()).or_insert((entry.seq, i));
                    }
                }
            }
            map
        });
        map.get(&value.to_bits())
            .copied()
            .filter(|&(seq, _)| seq != not)
    }
}

/// Audits `samples` against `records` (`WITNESS.md` section 3). `model` is the model the server ran, when the
/// audit has it (the live server's, not a saved ledger's): with it, a logprob recomputed at temperature 1 for a
/// request that sampled at another is recognised as such, and so is one computed under weights older than those
/// that generated the token (the model keeps the policies it served).
pub fn audit(
    records: &Records,
    samples: &[AuditSample],
    options: &AuditOptions,
    model: Option<&Model>,
) -> Report {
    let walks: Vec<Walk> = samples.iter().map(|s| walk(records, s)).collect();
    // Which sample each entry's tokens went to, to tell another sample's logprobs from another request's.
    let mut owner: HashMap<u64, usize> = HashMap::new();
    for (k, walk) in walks.iter().enumerate() {
        for segment in &walk.segments {
            owner.entry(segment.seq).or_insert(k);
        }
    }
    let labels = labels(samples);
    let mut report = Report {
        samples: samples.len(),
        matched_items: owner.len(),
        ..Report::default()
    };
    let mut values = ValueIndex { records, map: None };
    for (k, (sample, walk)) in samples.iter().zip(&walks).enumerate() {
        let mut check = Check {
            records,
            model,
            rescored: HashMap::new(),
            stale: HashMap::new(),
            sample,
            k,
            labels: &labels,
            walk,
            options,
            owner: &owner,
            problems: Vec::new(),
            checked: 0,
            checked_versions: 0,
            version_fields: Vec::new(),
        };
        check.run(&mut values);
        report.tokens += sample.response.len();
        report.trained_tokens += sample.loss_mask.iter().filter(|&&m| m == 1).count();
        report.checked_logprobs += check.checked;
        report.checked_versions += check.checked_versions;
        for field in check.version_fields {
            if !report.version_fields.iter().any(|f| f == field) {
                report.version_fields.push(field.to_owned());
            }
        }
        if !check.problems.is_empty() {
            report.samples_with_problems += 1;
        }
        report.problems.extend(check.problems);
    }
    if let Some(message) = nothing_audited(&report) {
        report.problems.push(Problem {
            sample: None,
            sample_id: None,
            sample_label: "the batch".to_owned(),
            kind: ProblemKind::NothingAudited,
            channel: String::new(),
            start: 0,
            end: 0,
            rid: None,
            expected: None,
            found: None,
            message,
        });
    }
    report.ok = report.problems.is_empty();
    report
}

/// `nothing-audited`: why a batch gave the audit nothing to compare, if it did not. A report that passes must
/// have checked something, so that a wrong dump path or a mask of zeros does not read as a faithful rollout.
fn nothing_audited(report: &Report) -> Option<String> {
    let n = report.samples;
    let the_samples = if n == 1 {
        "the 1 sample".to_owned()
    } else {
        format!("the {n} samples")
    };
    if n == 0 {
        Some(
            "the audit read no samples, so it compared nothing with what the server sent: an empty body or file \
             (a wrong dump path, a rollout that produced nothing, a filter that dropped every sample) is not a \
             faithful rollout. Audit the samples the trainer trains on"
                .to_owned(),
        )
    } else if report.tokens == 0 {
        Some(format!(
            "{the_samples} {} no response token, so the audit compared nothing with what the server sent: \
             responses cut to nothing, or the prompt and the response split in the wrong place (slime's \
             response_length 0)",
            if n == 1 { "has" } else { "have" }
        ))
    } else if report.trained_tokens == 0 {
        Some(format!(
            "none of the {} tokens of {the_samples} is trained (every loss mask entry is 0), so the audit \
             compared nothing with what the server sent: a mask of zeros trains on nothing (generated tokens \
             filed as environment output, or a mask built for other tokens)",
            report.tokens
        ))
    } else {
        None
    }
}

/// How reports name each sample: its id, with its position when another sample has the same id.
fn labels(samples: &[AuditSample]) -> Vec<String> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for s in samples {
        *count.entry(s.id.as_str()).or_default() += 1;
    }
    samples
        .iter()
        .enumerate()
        .map(|(k, s)| {
            if count[s.id.as_str()] > 1 {
                format!("{} (samples[{k}])", s.id)
            } else {
                s.id.clone()
            }
        })
        .collect()
}

/// The checks of one sample.
struct Check<'a> {
    records: &'a Records,
    model: Option<&'a Model>,
    /// Per entry sampled at a temperature other than 1: whether the first of its wrong values that was
    /// compared with the model's logprob at temperature 1 was that logprob. Once one was not, the entry's other
    /// values are not compared, so that a sample whose values are wrong in another way costs one comparison.
    rescored: HashMap<u64, bool>,
    /// Per entry: the older weights its first value compared under them was the model's logprob under, or
    /// `None` when it was under none ([`Check::under_older_weights`]).
    stale: HashMap<u64, Option<u64>>,
    sample: &'a AuditSample,
    k: usize,
    /// Every sample's label in reports.
    labels: &'a [String],
    walk: &'a Walk,
    options: &'a AuditOptions,
    owner: &'a HashMap<u64, usize>,
    problems: Vec<Problem>,
    checked: usize,
    /// Trained tokens whose weight version was compared, and the fields the labels came from.
    checked_versions: usize,
    version_fields: Vec<&'static str>,
}

impl<'a> Check<'a> {
    fn entry(&self, seq: u64) -> &'a Entry {
        // Segments name entries the walk found in these records.
        self.records
            .get(seq)
            .unwrap_or_else(|| unreachable!("segment of entry {seq} outside the records"))
    }

    fn push(
        &mut self,
        kind: ProblemKind,
        channel: &str,
        range: (usize, usize),
        rid: Option<&str>,
        values: (Option<String>, Option<String>),
        message: String,
    ) {
        self.problems.push(Problem {
            sample: Some(self.k),
            sample_id: Some(self.sample.id.clone()),
            sample_label: self.labels[self.k].clone(),
            kind,
            channel: channel.to_owned(),
            start: range.0,
            end: range.1,
            rid: rid.map(str::to_owned),
            expected: values.0,
            found: values.1,
            message,
        });
    }

    /// A per-token array of `len` entries for the response's tokens: the positions where one of the two runs
    /// past the other.
    fn length(&mut self, kind: ProblemKind, channel: &str, len: usize, message: String) {
        let n = self.sample.response.len();
        self.push(
            kind,
            channel,
            (len.min(n), len.max(n)),
            None,
            (Some(n.to_string()), Some(len.to_string())),
            message,
        );
    }

    fn run(&mut self, values: &mut ValueIndex<'_>) {
        let sample = self.sample;
        let fields = sample.fields();
        let n = sample.response.len();
        let trained: Vec<usize> = (0..n).filter(|&i| sample.trained(i)).collect();
        if let Some(mask_field) = fields.loss_mask
            && sample.loss_mask.len() != n
        {
            let len = sample.loss_mask.len();
            self.length(
                ProblemKind::MaskLength,
                mask_field,
                len,
                format!(
                    "{len} mask entries for {n} tokens: {}; one entry per token, 1 for what the model generated \
                     and is trained on, 0 for environment output",
                    if len < n {
                        format!("the last {} tokens have none", n - len)
                    } else {
                        format!("{} entries too many", len - n)
                    }
                ),
            );
        }
        self.logprobs(&trained, values);
        self.unexplained();
        self.masked_generated();
        self.faults();
        self.versions();
        self.routes();
    }

    /// `logprobs-missing`, `logprobs-length`, `logprobs-not-requested` and each wrong value.
    fn logprobs(&mut self, trained: &[usize], values: &mut ValueIndex<'_>) {
        let sample = self.sample;
        let field = sample.fields().logprobs;
        let n = sample.response.len();
        let segments = &self.walk.segments;
        let Some(lps) = &sample.logprobs else {
            if let (Some(&first), Some(&last)) = (trained.first(), trained.last()) {
                let sent = segments
                    .iter()
                    .map(|s| self.entry(s.seq))
                    .find(|e| e.output_logprobs.is_some());
                let message = match sent {
                    Some(entry) => format!(
                        "{field} is None, yet the sample trains on {}; the server sent a logprob for every \
                         token it generated (rid {}, ...). Keep item[0] of each meta_info.output_token_logprobs \
                         entry beside the token id item[1] (slime #1976, training-gym PR #75)",
                        count_of(trained.len(), "token"),
                        entry.rid
                    ),
                    None => format!(
                        "{field} is None, yet the sample trains on {}; the requests that generated them did \
                         not ask for logprobs either: send \"return_logprob\": true and keep item[0] of each \
                         meta_info.output_token_logprobs entry (slime #1976, training-gym PR #75)",
                        count_of(trained.len(), "token")
                    ),
                };
                let rid = sent.map(|e| e.rid.clone());
                self.push(
                    ProblemKind::LogprobsMissing,
                    field,
                    (first, last + 1),
                    rid.as_deref(),
                    (None, Some("None".to_owned())),
                    message,
                );
            }
            return;
        };
        if lps.len() != n {
            let m = lps.len();
            let message = if m < n {
                self.too_few_logprobs(m)
            } else {
                self.too_many_logprobs(lps)
            };
            self.length(ProblemKind::LogprobsLength, field, m, message);
        }
        // What the server sent at each response position a segment covers.
        let mut sent = vec![None::<(Sent, u64, usize)>; n];
        for segment in segments {
            let entry = self.entry(segment.seq);
            for (q, slot) in sent[segment.start..segment.end].iter_mut().enumerate() {
                let value = match &entry.output_logprobs {
                    Some(l) => l.get(q).map_or(Sent::Nothing, Sent::Value),
                    None => Sent::Nothing,
                };
                *slot = Some((value, segment.seq, q));
            }
            if !entry.return_logprob {
                let positions: Vec<usize> = (segment.start..segment.end)
                    .filter(|&p| sample.trained(p))
                    .collect();
                if let (Some(&a), Some(&b)) = (positions.first(), positions.last()) {
                    self.push(
                        ProblemKind::LogprobsNotRequested,
                        field,
                        (a, b + 1),
                        Some(&entry.rid),
                        (None, lps.get(a).map(|v| show(*v))),
                        format!(
                            "{} from rid {}, whose request did not ask for logprobs (\"return_logprob\": \
                             true): their values in {field} were made up on the client. Ask for logprobs and \
                             keep them",
                            trained_tokens(positions.len()),
                            entry.rid
                        ),
                    );
                }
            }
        }
        // Where each sent value stands in this sample, to recognise a shift.
        let mut here: Option<HashMap<u32, Vec<usize>>> = None;
        let mut run: Option<(Wrong, usize, usize, u64, usize)> = None;
        let flush = |check: &mut Self, run: &mut Option<(Wrong, usize, usize, u64, usize)>| {
            if let Some((wrong, start, end, seq, q)) = run.take() {
                check.wrong_logprobs(wrong, start, end, seq, q, &sent);
            }
        };
        for &p in trained {
            let Some((sent_here, seq, q)) = sent[p] else {
                continue;
            };
            // A request that did not ask for logprobs is reported once, above.
            if !self.entry(seq).return_logprob {
                continue;
            }
            let Some(&got) = lps.get(p) else { continue };
            self.checked += 1;
            let expected = match sent_here {
                Sent::Value(v) => Some(v),
                // The answer carried no logprob for this token (a fault removed it): whatever the sample
                // holds there did not come from the server.
                Sent::Nothing => None,
            };
            // `None`, NaN, an infinity or a positive value is never trainable, even where a fault sent it.
            let wrong = match got {
                None => Wrong::None,
                Some(g) if !g.is_finite() => Wrong::NotFinite,
                Some(g) if g > 0.0 => Wrong::Positive,
                Some(g) if expected == Some(Some(g)) => {
                    flush(self, &mut run);
                    continue;
                }
                Some(0.0) => Wrong::Zero,
                Some(g) => match expected.flatten().and_then(|e| Roundings::of(e, g)) {
                    // The value sent, rounded: the closest evidence there is, before any other value.
                    Some(r) => Wrong::Rounded(r),
                    None if self.at_temperature_one(seq, p, q, g) => Wrong::AtTemperatureOne,
                    None => {
                        let positions = here.get_or_insert_with(|| {
                            let mut map: HashMap<u32, Vec<usize>> = HashMap::new();
                            for (r, slot) in sent.iter().enumerate() {
                                if let Some((Sent::Value(Some(v)), _, _)) = slot {
                                    map.entry(v.to_bits()).or_default().push(r);
                                }
                            }
                            map
                        });
                        let nearest = positions.get(&g.to_bits()).and_then(|rs| {
                            rs.iter()
                                .filter(|&&r| r != p)
                                .min_by_key(|&&r| r.abs_diff(p))
                        });
                        match nearest {
                            Some(&r) => Wrong::Shifted(r as isize - p as isize),
                            None => match values.find(g, seq) {
                                Some((other, at)) => Wrong::FromOther { seq: other, at },
                                None => match self.under_older_weights(seq, p, q, g) {
                                    Some(weights) => Wrong::Stale { weights },
                                    None if expected.is_none() => Wrong::Unsent,
                                    None => Wrong::Differs,
                                },
                            },
                        }
                    }
                },
            };
            let continues = match &mut run {
                Some((w, _, end, s, _)) if w.continues_with(&wrong) && *s == seq => {
                    // A run goes on across untrained tokens, not across other wrong classes.
                    *w = w.then(wrong);
                    *end = p + 1;
                    true
                }
                _ => false,
            };
            if !continues {
                flush(self, &mut run);
                run = Some((wrong, p, p + 1, seq, q));
            }
        }
        flush(self, &mut run);
    }

    /// `logprobs-length` with `m` logprobs for more tokens: whole answers that carried none, when the evidence
    /// says so.
    fn too_few_logprobs(&self, m: usize) -> String {
        let n = self.sample.response.len();
        let missing = n - m;
        // The segments whose answers carried no logprobs: a turn whose logprobs were skipped.
        let bare: Vec<&Segment> = self
            .walk
            .segments
            .iter()
            .filter(|s| self.entry(s.seq).output_logprobs.is_none())
            .collect();
        let bare_len: usize = bare.iter().map(|s| s.end - s.start).sum();
        match bare.first() {
            Some(first) if bare_len == missing => {
                let entry = self.entry(first.seq);
                let why = if entry.return_logprob {
                    "its answer carried none"
                } else {
                    "its request did not ask for them"
                };
                format!(
                    "{m} logprobs for {n} tokens: the {missing} missing are as many as the tokens the server \
                     generated without logprobs (rid {} at response[{}:{}]: {why}), so that turn's logprobs were \
                     skipped and every later logprob stands {missing} position{} early (verl PR #6299). Ask \
                     every turn for logprobs and append them with its tokens, or refuse the turn",
                    entry.rid,
                    first.start,
                    first.end,
                    plural(missing)
                )
            }
            _ => format!(
                "{m} logprobs for {n} tokens: the last {missing} tokens have none, and every logprob after the \
                 first one lost stands beside the wrong token (a turn whose logprobs were skipped: verl PR \
                 #6299). Append each turn's logprobs with its tokens, or refuse it"
            ),
        }
    }

    /// `logprobs-length` with more logprobs than tokens: what the extra ones are, when the evidence says.
    fn too_many_logprobs(&self, lps: &[Option<f32>]) -> String {
        let field = self.sample.fields().logprobs;
        let (m, n) = (lps.len(), self.sample.response.len());
        let head = format!("{m} logprobs for {n} tokens: {} too many", m - n);
        let sent_of = |entry: &Entry| -> Option<Vec<Option<f32>>> {
            let sent = entry.output_logprobs.as_ref()?;
            Some((0..sent.len()).map(|q| sent.get(q).flatten()).collect())
        };
        // An answer's logprobs again and again from its first: a cumulative stream's chunks appended.
        for segment in &self.walk.segments {
            let entry = self.entry(segment.seq);
            let Some(sent) = sent_of(entry) else { continue };
            if let Some(chunks) = cumulative(&lps[segment.start..], &sent)
                && chunks.iter().sum::<usize>() > segment.end - segment.start
            {
                return format!(
                    "{head}. From {field}[{}] they are rid {}'s logprobs {} times over, each time from its first \
                     ({} of them): the chunks of a cumulative stream appended, as each chunk of SGLang's stream \
                     carries every logprob so far, also where its ids come as deltas (0.5.3, and \
                     --incremental-streaming-output before sglang PR #21583). Keep the last chunk's lists, or \
                     append only the entries past those already kept",
                    segment.start,
                    entry.rid,
                    chunks.len(),
                    listed(&chunks)
                );
            }
        }
        // The logprob of a token the answer generated where the sample's ids stop following it: the id dropped,
        // its logprob kept.
        for segment in &self.walk.segments {
            let entry = self.entry(segment.seq);
            let q = segment.end - segment.start;
            let (Some(&id), Some(sent)) = (entry.output_ids.get(q), sent_of(entry)) else {
                continue;
            };
            let (Some(&Some(kept)), Some(&Some(value))) = (lps.get(segment.end), sent.get(q))
            else {
                continue;
            };
            if kept != value {
                continue;
            }
            let stop =
                if q + 1 == entry.output_ids.len() && entry.finish_reason == Some(Finish::Stop) {
                    ": the answer's stop token (finish_reason stop)"
                } else {
                    ""
                };
            let late = if segment.end < n {
                "; every logprob after it stands a position late"
            } else {
                ""
            };
            return format!(
                "{head}. {field}[{}], {}, is the logprob the server sent for token {id} (rid {}, output position \
                 {q}), which the sample's ids leave out{stop}{late}. A token dropped from the ids (an EOS or stop \
                 token stripped from output_ids) whose logprob was kept leaves the lists unpaired \
                 (eval-protocol PR #457 had one logprob more than ids on every row): drop the logprob with its \
                 token, or keep the token with loss mask 0",
                segment.end,
                show(Some(kept)),
                entry.rid
            );
        }
        format!(
            "{head} (a phantom entry for an empty answer, verl; more logprobs than ids under speculative decoding, \
             sglang PR #22639)"
        )
    }

    /// Whether `got`, the logprob at response position `p` of a segment of entry `seq`, is the model's logprob of
    /// that token at temperature 1 while the entry sampled (and sent its logprobs) at another temperature: a
    /// re-score that left the rollout's temperature out. Needs the model the server ran.
    fn at_temperature_one(&mut self, seq: u64, p: usize, q: usize, got: f32) -> bool {
        let Some(model) = self.model else {
            return false;
        };
        if self.entry(seq).logprob_temperature == 1.0 || self.rescored.get(&seq) == Some(&false) {
            return false;
        }
        let Some(policy) = model.policy_at(self.weights_of(seq, q)) else {
            return false;
        };
        let is = self.model_logprob(model, &policy, p, 1.0) == got;
        self.rescored.entry(seq).or_insert(is);
        is
    }

    /// The server's weights count for output token `q` of entry `seq`: its span's (the last span's when the
    /// spans end before it, as a fault can make them).
    fn weights_of(&self, seq: u64, q: usize) -> u64 {
        let entry = self.entry(seq);
        entry
            .span_of(q)
            .or(entry.weight_versions.last())
            .map_or(0, |span| span.weights)
    }

    /// The model's logprob of the sample's response token `p` in its context, under `policy` at `temperature`.
    fn model_logprob(&self, model: &Model, policy: &Policy, p: usize, temperature: f64) -> f32 {
        let context = &self.walk.full[..self.sample.prompt.len() + p];
        let id = self.sample.response[p];
        model
            .distribution_under(policy, context, temperature, &[])
            .logprob(id) as f32
    }

    /// The weights count of older weights under which `got`, the sample's logprob at response position `p`
    /// (output token `q` of entry `seq`), is the model's logprob of the token, at the temperature the entry's
    /// logprobs are at; `None` when there are none (or the audit has no model). Like the re-score at temperature
    /// 1, an entry whose first compared value is not stale has its others left alone, and one whose first is
    /// has its others compared with those weights only.
    fn under_older_weights(&mut self, seq: u64, p: usize, q: usize, got: f32) -> Option<u64> {
        let model = self.model?;
        let older = match self.stale.get(&seq) {
            Some(None) => return None,
            Some(Some(weights)) => model
                .policy_at(*weights)
                .map(|policy| vec![(*weights, policy)])
                .unwrap_or_default(),
            None => model.policies_before(self.weights_of(seq, q)),
        };
        let temperature = self.entry(seq).logprob_temperature;
        let found = older
            .iter()
            .find(|(_, policy)| self.model_logprob(model, policy, p, temperature) == got)
            .map(|(weights, _)| *weights);
        self.stale.entry(seq).or_insert(found);
        found
    }

    /// The version string the ledger reported for the server's `weights`-th weights, if a span of it names them.
    fn version_of_weights(&self, weights: u64) -> Option<&'a str> {
        self.records
            .entries()
            .flat_map(|entry| &entry.weight_versions)
            .find(|span| span.weights == weights)
            .map(|span| span.version.as_str())
    }

    /// One problem for response positions `start..end` whose logprobs are wrong in the same way; `seq` and
    /// `q` are the entry and output position of `start`.
    fn wrong_logprobs(
        &mut self,
        wrong: Wrong,
        start: usize,
        end: usize,
        seq: u64,
        q: usize,
        sent: &[Option<(Sent, u64, usize)>],
    ) {
        let sample = self.sample;
        let field = sample.fields().logprobs;
        let entry = self.entry(seq);
        let rid = entry.rid.clone();
        let expected = match sent[start] {
            Some((Sent::Value(v), _, _)) => Some(v),
            _ => None,
        };
        let show_expected = expected.map_or_else(|| "nothing".to_owned(), show);
        let got = sample
            .logprobs
            .as_ref()
            .and_then(|l| l.get(start).copied())
            .flatten();
        let count = (start..end).filter(|&p| sample.trained(p)).count();
        let (tokens, have, hold) = if count == 1 {
            ("1 trained token".to_owned(), "has", "holds")
        } else {
            (format!("{count} trained tokens"), "have", "hold")
        };
        let at = format!(
            "the server sent {show_expected} for response[{start}] (rid {rid}, output position {q})"
        );
        let (kind, message) = match wrong {
            Wrong::None => (
                ProblemKind::LogprobNone,
                format!(
                    "{tokens} {have} logprob None; {at}. A None reaches GRPO as a crash far from its cause (slime \
                     #1976) or as NaN: keep item[0] of every output_token_logprobs entry"
                ),
            ),
            Wrong::NotFinite => (
                ProblemKind::LogprobNotFinite,
                format!(
                    "{tokens} {have} logprob {}; {at}. A non-finite logprob poisons the loss (TRL #6166, \
                     OpenRLHF #1165): refuse such a response instead of keeping it",
                    show(got)
                ),
            ),
            Wrong::Positive => (
                ProblemKind::LogprobPositive,
                format!(
                    "{tokens} {have} logprob {}, a probability above 1; {at}. No sampled token has a positive \
                     logprob: refuse such a response instead of keeping it",
                    show(got)
                ),
            ),
            Wrong::Zero => (
                ProblemKind::LogprobZero,
                format!(
                    "{tokens} {have} logprob 0.0 (probability 1); {at}. A zero fill or a placeholder (vime PR \
                     #70 pads missing logprobs with 0.0; SkyRL PR #758 gives a synthetic token 0.0) makes \
                     every importance ratio at these tokens wrong: keep the server's values, and train only \
                     on tokens the server generated"
                ),
            ),
            Wrong::Shifted(by) => (
                ProblemKind::LogprobShifted,
                format!(
                    "{tokens} {hold} the logprob the server sent for the token {} position{} {} (response[{}]); \
                     {at}. The logprobs are shifted against the tokens (prime-rl PR #1525's off-by-one, or a \
                     turn whose logprobs were dropped: verl PR #6299): logprob i belongs to token i",
                    by.unsigned_abs(),
                    plural(by.unsigned_abs()),
                    if by > 0 { "later" } else { "earlier" },
                    start as isize + by,
                ),
            ),
            Wrong::FromOther {
                seq: other,
                at: pos,
            } => {
                let other_entry = self.records.get(other);
                let other_rid = other_entry.map_or("?", |e| e.rid.as_str());
                let whose = match self.owner.get(&other) {
                    Some(&s) if s != self.k => {
                        format!(" (the answer of sample {})", self.labels[s])
                    }
                    _ => String::new(),
                };
                (
                    ProblemKind::LogprobFromOtherRequest,
                    format!(
                        "{tokens} {hold} a logprob the server sent to another request: rid {other_rid}{whose}, \
                         output position {pos}; {at}. The logprob list was taken from another answer or \
                         another sample: build each sample's logprobs from its own responses"
                    ),
                )
            }
            Wrong::Stale { weights } => {
                let now = self.weights_of(seq, q);
                let named = |w: u64| match self.version_of_weights(w) {
                    Some(version) => format!("weights {w} (version {version:?})"),
                    None => format!("weights {w}"),
                };
                (
                    ProblemKind::LogprobStale,
                    format!(
                        "{tokens} {have} logprob {} where {at}: {} is the model's logprob of this token under the \
                         server's {}, while rid {rid} generated it under {}. These logprobs come from older \
                         weights than the tokens: a worker that missed the weight update (a stale engine behind \
                         the router, a refit that skipped it) or a recompute with the weights before the sync, so \
                         every importance ratio here measures the update, not the rollout (NeMo labs-molt #124). \
                         Take each token's logprob from the answer that generated it, and check that every worker \
                         reports the new weights before rolling out",
                        show(got),
                        show(got),
                        named(weights),
                        named(now),
                    ),
                )
            }
            Wrong::Unsent => (
                ProblemKind::LogprobDiffers,
                format!(
                    "{tokens} {have} logprob {} where {at}: the answer carried fewer logprobs than tokens (or \
                     none), so this value was made up on the client. Refuse an answer whose logprobs do not \
                     cover its tokens",
                    show(got)
                ),
            ),
            Wrong::Rounded(roundings) => {
                let sent_value = expected.flatten().unwrap_or(f32::NAN);
                let got_value = got.unwrap_or(f32::NAN);
                // The largest difference over the run's trained positions, each the value sent there, rounded.
                let widest = (start..end)
                    .filter(|&p| sample.trained(p))
                    .filter_map(|p| {
                        let sent_p = match sent[p] {
                            Some((Sent::Value(Some(v)), _, _)) => v,
                            _ => return None,
                        };
                        let got_p = sample.logprobs.as_ref()?.get(p).copied().flatten()?;
                        Some((f64::from(sent_p) - f64::from(got_p)).abs())
                    })
                    .fold(0.0f64, f64::max);
                let each = if count > 1 {
                    format!(
                        " (each of the {count} values is {}, at most {} from it)",
                        roundings.what(),
                        distance(0.0, widest as f32)
                    )
                } else {
                    String::new()
                };
                let remedy = if roundings.is_float() {
                    "A logprob kept in a 16-bit float loses the precision an importance ratio needs (slime PR \
                     #245 moved rollout_log_probs to float32 for it): keep the server's values in float32 or \
                     float64 up to the loss"
                } else {
                    "A logprob written with a few decimals (round(x, 3), a format like %.3f, a log or CSV read \
                     back) is no longer the value the rollout sampled with: keep the values SGLang sent \
                     (item[0]) as they are"
                };
                (
                    ProblemKind::LogprobDiffers,
                    format!(
                        "{tokens} {have} logprob {} where {at}: rounded: {} from the value sent, {}{each}. \
                         {remedy}",
                        show(got),
                        distance(got_value, sent_value),
                        roundings.how(),
                    ),
                )
            }
            Wrong::AtTemperatureOne => (
                ProblemKind::LogprobDiffers,
                format!(
                    "{tokens} {have} logprob {} where {at}: {} is the model's logprob of this token at \
                     temperature 1, while rid {rid} sampled at temperature {} and sent its logprobs at that \
                     temperature. The values were recomputed without the rollout's temperature (a scoring \
                     prefill at its default temperature, as miles PR #1345 found in \
                     --recompute-logprobs-via-prefill, or a forward that does not divide the logits by it, \
                     OpenRLHF PR #853): score at the sampling temperature, or keep the server's values",
                    show(got),
                    show(got),
                    entry.logprob_temperature,
                ),
            ),
            Wrong::Differs => {
                let by = match (got, expected.flatten()) {
                    (Some(g), Some(e)) => format!(": {} from the value sent", distance(g, e)),
                    _ => String::new(),
                };
                // Without the model (a saved ledger) the temperature is all the evidence there is of a re-score.
                let hot = if entry.logprob_temperature != 1.0 && self.model.is_none() {
                    format!(
                        "; rid {rid} sampled at temperature {t} and its logprobs are at that temperature, so a \
                         value recomputed at temperature 1 differs so (score at temperature {t}, miles PR #1345)",
                        t = entry.logprob_temperature
                    )
                } else {
                    String::new()
                };
                (
                    ProblemKind::LogprobDiffers,
                    format!(
                        "{tokens} {have} logprob {} where {at}{by}{hot}. The value did not come from this answer: \
                         keep the logprob SGLang sent (item[0]) rather than one computed or converted later",
                        show(got)
                    ),
                )
            }
        };
        self.push(
            kind,
            field,
            (start, end),
            Some(&rid),
            (Some(show_expected), Some(show(got))),
            message,
        );
    }

    /// `never-generated` and `evicted`.
    fn unexplained(&mut self) {
        let sample = self.sample;
        let field = sample.fields().tokens;
        let unexplained = self.walk.unexplained.clone();
        for range in unexplained {
            let count = (range.start..range.end)
                .filter(|&p| sample.trained(p))
                .count();
            let found = sample.response[range.start];
            let what = format!(
                "response[{}:{}] ({})",
                range.start,
                range.end,
                trained_tokens(count)
            );
            let (kind, rid, expected, message) = match range.why {
                Why::Diverged { seq, generated } => {
                    let entry = self.entry(seq);
                    (
                        ProblemKind::NeverGenerated,
                        Some(entry.rid.clone()),
                        Some(generated.to_string()),
                        format!(
                            "{what} was never generated in this context: {}",
                            self.diverged(entry, range.start, generated)
                        ),
                    )
                }
                Why::AfterEnd { seq, next } => {
                    let entry = self.entry(seq);
                    let next = next.map(|n| self.entry(n));
                    (
                        ProblemKind::NeverGenerated,
                        Some(next.unwrap_or(entry).rid.clone()),
                        next.and_then(|n| n.output_ids.first()).map(u32::to_string),
                        format!(
                            "{what} was never generated in this context: {}",
                            self.after_end(entry, next, range.start)
                        ),
                    )
                }
                Why::OtherFirst { seq, generated } => {
                    let entry = self.entry(seq);
                    let answered = match generated {
                        Some(id) => format!("with token {id} first, where the sample has {found}"),
                        None => "without a token (it ended before generating one)".to_owned(),
                    };
                    (
                        ProblemKind::NeverGenerated,
                        Some(entry.rid.clone()),
                        generated.map(|id| id.to_string()),
                        format!(
                            "{what} was never generated in this context: the server answered this context (rid \
                             {}) {answered}. Train only on the ids the server returned",
                            entry.rid
                        ),
                    )
                }
                Why::Unserved {
                    evicted: Some(true),
                } => (
                    ProblemKind::Evicted,
                    None,
                    None,
                    format!(
                        "{what} cannot be checked: the ledger entry for this context was evicted (it keeps the \
                         newest {} MiB of entries); start the server with a larger --ledger-max-mib or audit \
                         sooner",
                        self.records.max_bytes() >> 20
                    ),
                ),
                Why::Unserved { evicted } => {
                    let maybe = if evicted.is_none() {
                        format!(
                            " ({} entries were evicted, so it may have been one of them)",
                            self.records.evicted()
                        )
                    } else {
                        String::new()
                    };
                    (
                        ProblemKind::NeverGenerated,
                        None,
                        None,
                        format!(
                            "{what} was never generated by this server: no request it answered had the sample's \
                             prompt plus response[:{}] as its prompt{maybe}. Only tokens the server generated, \
                             after exactly the context they were generated in (chat template included), may be \
                             trained",
                            range.start
                        ),
                    )
                }
            };
            self.push(
                kind,
                field,
                (range.start, range.end),
                rid.as_deref(),
                (expected, Some(found.to_string())),
                message,
            );
        }
    }

    /// How many tokens, 1 to 5, the sample holds at response position `i` before the output of `entry` from its
    /// output position `q` goes on: tokens inserted into what the server generated.
    fn inserted(&self, entry: &Entry, q: usize, i: usize) -> Option<usize> {
        let next = *entry.output_ids.get(q)?;
        (1..=5).find(|&j| self.sample.response.get(i + j) == Some(&next))
    }

    /// What the sample holds at response positions `i..i + j`, and whether those ids repeat the `j` before them.
    fn insertion(&self, i: usize, j: usize) -> (String, bool) {
        let at = self.sample.prompt.len() + i;
        let ids = &self.walk.full[at..at + j];
        let shown = match ids {
            [one] => one.to_string(),
            _ => format!("{ids:?}"),
        };
        (shown, at >= j && self.walk.full[at - j..at] == *ids)
    }

    /// Why the tokens from response position `i` were never generated, where the answer of `entry` went on with
    /// `generated`: its output appended again and again (a cumulative stream's chunks), tokens inserted into it,
    /// or ids changed after generation.
    fn diverged(&self, entry: &Entry, i: usize, generated: u32) -> String {
        let response = &self.sample.response;
        let found = response[i];
        let start = self
            .walk
            .segments
            .iter()
            .rev()
            .find(|s| s.end == i && s.seq == entry.seq)
            .map_or(i, |s| s.start);
        if let Some(chunks) = cumulative(&response[start..], &entry.output_ids)
            && chunks.iter().sum::<usize>() > i - start
        {
            return format!(
                "response[{start}:{}] is rid {}'s output ids {} times over, each time from its first ({} of \
                 them): the chunks of a cumulative stream appended, as each chunk of SGLang's stream carries \
                 every id so far (only 0.5.3 streams ids as deltas). Keep the last chunk's output_ids, or append \
                 only the ids past those already kept",
                start + chunks.iter().sum::<usize>(),
                entry.rid,
                chunks.len(),
                listed(&chunks)
            );
        }
        if let Some(j) = self.inserted(entry, i - start, i) {
            let (ids, repeats) = self.insertion(i, j);
            let which = match (repeats, j) {
                (true, 1) => ", which repeats the token before it,".to_owned(),
                (true, _) => format!(", which repeat the {j} tokens before them,"),
                (false, _) => String::new(),
            };
            return format!(
                "the server's answer rid {} went on with token {generated}; the sample holds {ids} there{which} \
                 then rid {}'s tokens from response[{}]: {} inserted into the answer (a chunk appended twice, a \
                 join that overlapped). Keep the ids exactly as the answer sent them",
                entry.rid,
                entry.rid,
                i + j,
                count_of(j, "token")
            );
        }
        format!(
            "the server's answer rid {} went on with token {generated} where the sample has {found}. The ids \
             were changed after generation, most often by decoding the text and tokenizing it again \
             (retokenization drift): keep the output ids the server sent",
            entry.rid
        )
    }

    /// Why the tokens from response position `i` were never generated, where the answer of `entry` ended: the
    /// request that continued from there (`next`) generated others, or none did.
    fn after_end(&self, entry: &Entry, next: Option<&Entry>, i: usize) -> String {
        let found = self.sample.response[i];
        let finish = entry
            .finish_reason
            .map_or("none: its stream ended first", Finish::name);
        let ended = format!(
            "it follows the end of the server's answer rid {} (finish_reason {finish})",
            entry.rid
        );
        let Some(next) = next else {
            let why = match entry.finish_reason {
                Some(Finish::Stop) => format!(
                    "a token the client appended after the answer's stop (a synthetic EOS, SkyRL PR #758), first \
                     {found}, must have loss mask 0"
                ),
                Some(Finish::Length) => format!(
                    "the answer reached its max_new_tokens there, and a token the client appended, first {found}, \
                     must have loss mask 0; to train on a longer answer, continue it with a request whose prompt \
                     is the context so far"
                ),
                Some(Finish::Abort) | None => format!(
                    "the answer was cut there, and the partial output was not resumed from it (a resume must send \
                     the prompt plus exactly the partial output as its prompt), so {found} and what follows came \
                     from elsewhere"
                ),
            };
            return format!("{ended}, and no request continued from there: {why}");
        };
        let whose = format!("whose prompt is the sample's prompt plus response[:{i}]");
        let Some(&first) = next.output_ids.first() else {
            return format!(
                "{ended}; rid {} continued from there ({whose}) but generated nothing (it ended before its first \
                 token), so {found} is no token the server generated there",
                next.rid
            );
        };
        match self.inserted(next, 0, i) {
            Some(j) => {
                let (ids, repeats) = self.insertion(i, j);
                let which = match (repeats, j) {
                    (true, 1) => format!(
                        "which repeats the token before it (the last of rid {}'s output)",
                        entry.rid
                    ),
                    (true, _) => format!("which repeat the {j} tokens before them"),
                    (false, _) => format!("which rid {}'s output does not begin with", next.rid),
                };
                let what = if repeats {
                    format!(
                        "repeated {}",
                        if j == 1 {
                            "a token".to_owned()
                        } else {
                            count_of(j, "token")
                        }
                    )
                } else {
                    format!("added {}", count_of(j, "token"))
                };
                // 0.5.3's output_ids begin with the detokenizer's window of the prompt's last ids.
                let window = if repeats && j > 1 && j == (self.sample.prompt.len() + i).min(5) {
                    " (0.5.3's output_ids begin with the prompt's last min(prompt_tokens, 5) ids: strip them)"
                } else {
                    ""
                };
                format!(
                    "{ended}, and the request that continued from there is in the ledger: rid {}, {whose}, \
                     generated token {first} first. The sample holds {ids} there, {which}, then rid {}'s tokens \
                     from response[{}]: the join of the partial output and its continuation {what}{window}, so \
                     every token after it has a context no request had. Join the partial output and the \
                     continuation's output_ids without overlap",
                    next.rid,
                    next.rid,
                    i + j
                )
            }
            None => format!(
                "{ended}; rid {} continued from there (its prompt is the sample's prompt plus response[:{i}]) \
                 with token {first} first, where the sample has \
                 {found}: the ids after the join are not the continuation's. Keep the continuation's output_ids \
                 as they came",
                next.rid
            ),
        }
    }

    /// `generated-untrained`: generated tokens with loss mask 0.
    fn masked_generated(&mut self) {
        if self.options.allow_masked_generated {
            return;
        }
        let sample = self.sample;
        let Some(field) = sample.fields().loss_mask else {
            return;
        };
        let segments = self.walk.segments.clone();
        for segment in segments {
            let rid = self.entry(segment.seq).rid.clone();
            let mut p = segment.start;
            while p < segment.end {
                if sample.trained(p) {
                    p += 1;
                    continue;
                }
                let start = p;
                while p < segment.end && !sample.trained(p) {
                    p += 1;
                }
                self.push(
                    ProblemKind::GeneratedUntrained,
                    field,
                    (start, p),
                    Some(&rid),
                    (Some("1".to_owned()), Some("0".to_owned())),
                    format!(
                        "{} the server generated (rid {rid}) {} loss mask 0, so training skips {}: \
                         generated tokens filed as environment output (the #1976 variant that drops them). \
                         If the mask is deliberate (off-policy masking, an overlong filter), audit with \
                         allow_masked_generated",
                        count_of(p - start, "token"),
                        if p - start == 1 { "has" } else { "have" },
                        if p - start == 1 { "it" } else { "them" },
                    ),
                );
            }
        }
    }

    /// `faulted-answer`: segments from answers a fault corrupted.
    fn faults(&mut self) {
        let segments = self.walk.segments.clone();
        let field = self.sample.fields().tokens;
        for segment in segments {
            let entry = self.entry(segment.seq);
            let Some(fault) = entry.fault.clone() else {
                continue;
            };
            let rid = entry.rid.clone();
            self.push(
                ProblemKind::FaultedAnswer,
                field,
                (segment.start, segment.end),
                Some(&rid),
                (None, Some(fault.clone())),
                format!(
                    "response[{}:{}] ({}) is from rid {rid}, whose answer the server corrupted on purpose \
                     (fault `{fault}`): a rollout must refuse or retry such an answer, not train on it",
                    segment.start,
                    segment.end,
                    count_of(segment.end - segment.start, "token")
                ),
            );
        }
    }

    /// `versions-length` and `version-mismatch`: each token's label against the weights that made it, and
    /// slime's per-request `weight_versions` against the version each answer reported.
    fn versions(&mut self) {
        self.token_versions();
        self.turn_versions();
    }

    fn token_versions(&mut self) {
        let sample = self.sample;
        let Some(versions) = &sample.versions else {
            return;
        };
        let field = sample.fields().versions;
        let n = sample.response.len();
        if versions.len() != n {
            let m = versions.len();
            self.length(
                ProblemKind::VersionsLength,
                field,
                m,
                format!("{m} weight versions for {n} tokens: one per token was expected"),
            );
        }
        self.version_fields.push(field);
        let segments = self.walk.segments.clone();
        for segment in segments {
            let entry = self.entry(segment.seq);
            // Runs of trained positions with one wrong label over one span of weights.
            let mut run: Option<(usize, usize, &Option<VersionLabel>, &Span)> = None;
            let mut ranges = Vec::new();
            let labels = versions.iter().enumerate();
            for (p, label) in labels.take(segment.end).skip(segment.start) {
                let Some(span) = entry.span_of(p - segment.start) else {
                    continue;
                };
                if !sample.trained(p) {
                    continue;
                }
                self.checked_versions += 1;
                if label.as_ref().is_some_and(|l| l.names(span)) {
                    ranges.extend(run.take());
                    continue;
                }
                match &mut run {
                    Some((_, end, l, s)) if *l == label && *s == span => *end = p + 1,
                    _ => {
                        ranges.extend(run.take());
                        run = Some((p, p + 1, label, span));
                    }
                }
            }
            ranges.extend(run.take());
            let rid = entry.rid.clone();
            for (start, end, label, span) in ranges {
                let shown = label
                    .as_ref()
                    .map_or_else(|| "none (not generated)".to_owned(), ToString::to_string);
                let found = label
                    .as_ref()
                    .map_or_else(|| "none (not generated)".to_owned(), VersionLabel::text);
                let cause = label_cause(label.as_ref(), span);
                self.push(
                    ProblemKind::VersionMismatch,
                    field,
                    (start, end),
                    Some(&rid),
                    (Some(span.version.clone()), Some(found)),
                    format!(
                        "response[{start}:{end}] is labelled weight version {shown}, but {} generated it (rid \
                         {rid}). {cause}",
                        made_by(span)
                    ),
                );
            }
        }
    }

    /// slime's `weight_versions`: one label per request that answered the sample, in order, each the
    /// `weight_version` its answer reported (`Sample.update_from_meta_info`). A request that answered no token
    /// of the sample (an abort before the first token) may have a label of its own, so the answers are looked
    /// for in order among the labels, not at fixed places.
    fn turn_versions(&mut self) {
        let sample = self.sample;
        let Some(turns) = &sample.turn_versions else {
            return;
        };
        const FIELD: &str = "weight_versions";
        self.version_fields.push(FIELD);
        // Each answering entry once, in the order its tokens stand in the sample, with its first range.
        let mut answers: Vec<(u64, usize, usize)> = Vec::new();
        for segment in &self.walk.segments {
            match answers.iter_mut().find(|(seq, _, _)| *seq == segment.seq) {
                Some(answer) => answer.2 = segment.end,
                None => answers.push((segment.seq, segment.start, segment.end)),
            }
        }
        let mut next = 0;
        for (k, &(seq, start, end)) in answers.iter().enumerate() {
            let entry = self.entry(seq);
            let reported = entry.weight_version.as_str();
            let trained = (start..end).filter(|&p| sample.trained(p)).count();
            if let Some(j) = turns[next.min(turns.len())..]
                .iter()
                .position(|t| t == reported)
            {
                next += j + 1;
                self.checked_versions += trained;
                continue;
            }
            let rid = entry.rid.clone();
            let found = turns.get(next).cloned();
            let why = match &found {
                None => format!(
                    "weight_versions has {} for the {} requests that answered the sample: the answer's \
                     meta_info.weight_version was not appended for this turn (a custom generate that builds the \
                     sample without update_from_meta_info, or a turn appended after the labels were copied)",
                    count_of(turns.len(), "label"),
                    answers.len()
                ),
                Some(label) => format!(
                    "weight_versions holds {label:?} there (labels {:?} for the sample's {} answers, in order): \
                     a label from another request, or the trainer's own version instead of the one the answer \
                     reported",
                    turns,
                    answers.len()
                ),
            };
            self.push(
                ProblemKind::VersionMismatch,
                FIELD,
                (start, end),
                Some(&rid),
                (Some(reported.to_owned()), found),
                format!(
                    "response[{start}:{end}], the sample's answer {} (rid {rid}), reported weight_version \
                     {reported:?}, but {why}. Append each answer's meta_info.weight_version as it returns",
                    k + 1
                ),
            );
            // The label found there may be a later answer's: it stays for them.
        }
    }

    /// `routes-missing`, `routes-row-count` and `routes-differ`.
    fn routes(&mut self) {
        let sample = self.sample;
        let field = sample.fields().routed_experts;
        let p0 = sample.prompt.len();
        let full = &self.walk.full;
        // The sequence positions whose routes some answer sent and whose context the sample shares.
        let mut covered: Vec<(usize, usize, u64)> = Vec::new();
        for segment in &self.walk.segments {
            let entry = self.entry(segment.seq);
            let routed = entry.routed_positions();
            // Row `r` depends on tokens `..=r`, which the sample shares through the segment's end; the last
            // token of the sample has no row.
            let end = routed
                .end
                .min(p0 + segment.end)
                .min(full.len().saturating_sub(1));
            if routed.start < end {
                covered.push((routed.start, end, entry.seq));
            }
        }
        let Some(rows) = &sample.routed_experts else {
            if let Some(&(_, _, seq)) = covered.first() {
                let rid = self.entry(seq).rid.clone();
                self.push(
                    ProblemKind::RoutesMissing,
                    field,
                    (0, 0),
                    Some(&rid),
                    (None, Some("None".to_owned())),
                    format!(
                        "the server sent routed experts for this sample's tokens (rid {rid}), the sample has \
                         none: carry meta_info.routed_experts into the sample, or routing replay trains \
                         with other experts than the rollout used (miles #407)"
                    ),
                );
            }
            return;
        };
        let router = self.records.router();
        let row_len = router.shape.row_len();
        let r_count = rows.len();
        let positions = full.len().saturating_sub(1);
        let last_trained = (0..sample.response.len())
            .rev()
            .find(|&p| sample.trained(p))
            .map(|p| p0 + p);
        if rows.row_len != row_len && r_count > 0 {
            self.push(
                ProblemKind::RoutesDiffer,
                field,
                (0, r_count),
                None,
                (Some(row_len.to_string()), Some(rows.row_len.to_string())),
                format!(
                    "rows of {} expert ids where the server's model has {} (num_hidden_layers * \
                     num_experts_per_tok): reshape the base64 int32 data to [positions, layers, topk]",
                    rows.row_len, row_len
                ),
            );
            return;
        }
        // Rows past the last forward position may only be zero padding (verl pads to the sequence's length).
        let padding = (positions..r_count).all(|r| rows.row(r).iter().all(|&e| e == 0));
        if !padding {
            self.push(
                ProblemKind::RoutesRowCount,
                field,
                (positions, r_count),
                None,
                (Some(positions.to_string()), Some(r_count.to_string())),
                format!(
                    "{r_count} rows for {} tokens: at most {positions}, one per token that was a forward input \
                     (the last never is). Rows left when tokens were cut (miles #861) or rows repeated across \
                     a resume (verl PR #6029)",
                    full.len()
                ),
            );
        }
        if let Some(t) = last_trained
            && r_count < t
            && !covered.is_empty()
        {
            self.push(
                ProblemKind::RoutesRowCount,
                field,
                (r_count, t),
                None,
                (Some(t.to_string()), Some(r_count.to_string())),
                format!(
                    "{r_count} rows, but the trained token at sequence position {t} needs the rows of \
                     positions 0..{t}: routes cut shorter than the tokens they replay"
                ),
            );
        }
        for (start, end, seq) in covered {
            let rid = self.entry(seq).rid.clone();
            let mut r = start;
            while r < end.min(r_count) {
                if rows.row(r) == router.row(full, r).as_slice() {
                    r += 1;
                    continue;
                }
                let first = r;
                while r < end.min(r_count) && rows.row(r) != router.row(full, r).as_slice() {
                    r += 1;
                }
                let hint = self.routes_hint(rows.row(first), first, full);
                self.push(
                    ProblemKind::RoutesDiffer,
                    field,
                    (first, r),
                    Some(&rid),
                    (
                        Some(format!("{:?}", router.row(full, first))),
                        Some(format!("{:?}", rows.row(first))),
                    ),
                    format!(
                        "rows {first}..{r} differ from the routes the server sent for these positions (rid \
                         {rid}){hint}. Replaying other experts than the rollout used makes the trainer's \
                         logprobs disagree with the rollout's (miles #3277 re-captured routes on retract)"
                    ),
                );
            }
        }
    }

    /// Where a wrong row came from: a neighbouring position's row of this sample, or another answer's.
    fn routes_hint(&self, row: &[i32], r: usize, full: &[u32]) -> String {
        let router = self.records.router();
        for by in [-2isize, -1, 1, 2] {
            // A position with a row: not past the sequence's last forward position.
            let Some(other) = r.checked_add_signed(by).filter(|&o| o + 1 < full.len()) else {
                continue;
            };
            if router.row(full, other) == row {
                return format!(
                    "; row {r} is the row of position {other}: rows shifted by {} (duplicated or dropped rows)",
                    -by
                );
            }
        }
        for entry in self.records.entries() {
            if entry.routed_experts.is_some() && r + 1 < entry.seq_len() {
                let mut tokens = entry.prompt_ids.clone();
                tokens.extend_from_slice(&entry.output_ids);
                if router.row(&tokens, r) == row {
                    return format!(
                        "; row {r} is the row rid {} was sent for its position {r}: routes taken from another \
                         request",
                        entry.rid
                    );
                }
            }
        }
        String::new()
    }
}

/// The weights of `span` in words: `version "default" (weights 0)`.
fn made_by(span: &Span) -> String {
    if span.version == span.weights.to_string() {
        format!("version {}", span.version)
    } else {
        format!(
            "version {:?}, the server's weights {} (counted in weight updates)",
            span.version, span.weights
        )
    }
}

/// What a wrong version label says of the code that wrote it.
fn label_cause(label: Option<&VersionLabel>, span: &Span) -> String {
    let update = "Read each token's version when it is generated (0.5.23's meta_info.weight_versions spans, or the \
                  version of the request that generated it), not the trainer's version after the request returns \
                  (AReaL PR #1569)";
    match label {
        None => "A token the model generated and the sample trains on is labelled as not generated (AReaL's -1 \
                 belongs to prompt and environment tokens only)"
            .to_owned(),
        Some(VersionLabel::Number(n)) if *n > span.weights => format!(
            "The label is {} ahead of the weights that made the tokens: the version after a later weight update \
             was given to tokens the weights before it made. {update}",
            count_of((*n - span.weights) as usize, "update")
        ),
        Some(VersionLabel::Number(n)) => format!(
            "The label is {} behind the weights that made the tokens: a version read before a weight update and \
             kept for tokens generated after it (a resumed request labelled with its first attempt's version). A \
             whole-number label counts the server's weight updates: 0 for the weights it started with (its \
             --weight-version when that is a number), one more for each update",
            count_of((span.weights - *n) as usize, "update"),
        ),
        Some(VersionLabel::Name(name)) if name.parse::<u64>().is_ok() => format!(
            "The label is the string {name:?}, which names a version string, and the server reported {:?}: a \
             whole number (not a string) counts weight updates, 0 for the weights the server started with",
            span.version
        ),
        Some(VersionLabel::Name(_)) => format!(
            "The server reported weight_version {:?} for these tokens. {update}",
            span.version
        ),
    }
}
