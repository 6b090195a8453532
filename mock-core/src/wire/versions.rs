//! `meta_info.weight_versions` (0.5.23): which weight version made which output tokens of an item, from the
//! version changes it lived through (`srt/utils/weight_versions.py`).

/// A weight update while an item was live (`WeightVersionEvent` in `srt/utils/weight_versions.py`, 0.5.23): its
/// first `tokens` output tokens came from the weights `old_version` names, which the server had loaded as its
/// `old_weights`-th weights (the witness's count; an update that keeps the version string changes only this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionEvent {
    pub old_version: std::sync::Arc<str>,
    pub old_weights: u64,
    pub tokens: usize,
}

/// One entry of `meta_info.weight_versions` (0.5.23): output tokens `start..end` came from `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct VersionSpan<'a> {
    pub version: &'a str,
    pub start: usize,
    pub end: usize,
}

/// The `weight_version` an object reports: the version of the last span it reports (a finished item of a
/// release with spans, `add_weight_versions_to_meta_info`), else the version now.
pub fn reported_version<'a>(spans: Option<&[VersionSpan<'a>]>, current: &'a str) -> &'a str {
    spans
        .and_then(<[VersionSpan]>::last)
        .map_or(current, |span| span.version)
}

/// The spans a finished item reports: `compute_weight_version_spans` over its events and the version now,
/// then the spans `add_weight_versions_to_meta_info` keeps (`srt/utils/weight_versions.py`, 0.5.23). Never
/// empty: an item without output has one span `[0, 0)`.
pub fn weight_version_spans<'a>(
    events: &'a [VersionEvent],
    current: &'a str,
    tokens: usize,
) -> Vec<VersionSpan<'a>> {
    let changes = events.iter().map(|e| (&*e.old_version, e.tokens));
    tile(changes, current, tokens)
        .into_iter()
        .map(|(version, start, end)| VersionSpan {
            version,
            start,
            end,
        })
        .collect()
}

/// The runs `(key, start, end)` that tile an item's `tokens` output tokens: each change `(key, end)` says that
/// the tokens before `end` came from `key`, and `current` made the rest; consecutive runs of one key merge, and
/// a change past the output or before the last run's end adds nothing. The rule of
/// `compute_weight_version_spans` and `add_weight_versions_to_meta_info` (0.5.23), whatever a key holds: the
/// wire's spans key by the version, the ledger's by the version and the weights' number.
pub fn tile<K: PartialEq + Copy>(
    changes: impl Iterator<Item = (K, usize)>,
    current: K,
    tokens: usize,
) -> Vec<(K, usize, usize)> {
    let mut spans: Vec<(K, usize, usize)> = Vec::new();
    for (key, end) in changes.chain(std::iter::once((current, tokens))) {
        let end = end.min(tokens);
        match spans.last_mut() {
            Some(last) if end <= last.2 => {}
            Some(last) if last.0 == key => last.2 = end,
            last => {
                let start = last.map_or(0, |l| l.2);
                spans.push((key, start, end));
            }
        }
    }
    spans.retain(|&(_, start, _)| start < tokens || start == 0);
    spans
}
