//! The text of a generation over a loaded tokenizer: SGLang's incremental detokenizer
//! (`DetokenizerManager._decode_batch_token_id_output`, 0.5.23) and its stop-string tail
//! (`Req._check_str_based_finish`, `Req.check_match_stop_str_prefix`), as `MODEL.md` section 13.4 specifies
//! them.
//!
//! A byte-level BPE's text is not a concatenation of per-token strings that can be cut anywhere: a character may
//! span tokens, and decoders such as SentencePiece's change a token's text by what precedes it. SGLang therefore
//! decodes a window of ids that starts a few tokens back (the "surrogate" ids, whose text is subtracted), commits
//! text only when it does not end in U+FFFD, and streams the printable part of uncommitted text. Lengths and
//! slices count code points, as Python's `str` does.

use crate::model::HfVocab;

/// Prompt ids the first window starts with (`INIT_INCREMENTAL_DETOKENIZATION_OFFSET`).
const SURROGATE_IDS: usize = 5;
/// A non-streamed request's output reaches the detokenizer every this many tokens
/// (`SGLANG_FORCE_STREAM_INTERVAL`).
pub(super) const FORCE_STREAM_INTERVAL: usize = 50;

/// SGLang's `DecodeStatus` for one sample, and the text the tokenizer manager has received from it.
#[derive(Clone, Debug)]
pub(super) struct Detokenizer {
    /// The last prompt ids, then every output id.
    ids: Vec<u32>,
    surr: usize,
    read: usize,
    /// Committed text and its length in code points.
    committed: String,
    committed_chars: usize,
    /// Code points already emitted (`sent_offset`).
    sent_chars: usize,
    /// Everything emitted, in order: the sample's text.
    emitted: String,
    skip_special_tokens: bool,
}

impl Detokenizer {
    pub(super) fn new(prompt: &[u32], skip_special_tokens: bool) -> Detokenizer {
        let tail = prompt.len().min(SURROGATE_IDS);
        Detokenizer {
            ids: prompt[prompt.len() - tail..].to_vec(),
            surr: 0,
            read: tail,
            committed: String::new(),
            committed_chars: 0,
            sent_chars: 0,
            emitted: String::new(),
            skip_special_tokens,
        }
    }

    pub(super) fn push(&mut self, id: u32) {
        self.ids.push(id);
    }

    /// The text emitted so far.
    pub(super) fn text(&self) -> &str {
        &self.emitted
    }

    /// `read_text[len(surr_text):]`, with the last id left out of the read window when `trim_last`.
    fn new_text(&self, vocab: &HfVocab, trim_last: bool) -> String {
        let end = if trim_last {
            self.ids.len().saturating_sub(1).max(self.surr)
        } else {
            self.ids.len()
        };
        let skip = self.skip_special_tokens;
        let read = vocab.decode(&self.ids[self.surr..end], skip);
        let surr = vocab.decode(&self.ids[self.surr..self.read], skip);
        chars_from(&read, surr.chars().count()).to_owned()
    }

    /// A call while the sample runs.
    pub(super) fn call(&mut self, vocab: &HfVocab) {
        let new = self.new_text(vocab, false);
        let pending = self.sent_chars - self.committed_chars;
        if !new.is_empty() && !new.ends_with('\u{FFFD}') {
            self.emitted.push_str(chars_from(&new, pending));
            self.committed_chars += new.chars().count();
            self.committed.push_str(&new);
            self.surr = self.read;
            self.read = self.ids.len();
            self.sent_chars = self.committed_chars;
        } else {
            let printable = find_printable_text(&new);
            self.emitted.push_str(chars_from(printable, pending));
            self.sent_chars = self.committed_chars + printable.chars().count();
        }
    }

    /// The call when the sample finishes: everything not yet emitted, without the stop id it finished on
    /// (`trim_stop_id`), cut at the stop string it matched (after it with `no_stop_trim`).
    pub(super) fn finish(
        &mut self,
        vocab: &HfVocab,
        trim_stop_id: bool,
        stop_str: Option<&str>,
        no_stop_trim: bool,
    ) {
        let mut out = std::mem::take(&mut self.committed);
        out.push_str(&self.new_text(vocab, trim_stop_id));
        if let Some(matched) = stop_str
            && let Some(at) = out.find(matched)
        {
            out.truncate(if no_stop_trim { at + matched.len() } else { at });
        }
        self.emitted.push_str(chars_from(&out, self.sent_chars));
        self.sent_chars = self.sent_chars.max(out.chars().count());
    }
}

/// `text[n:]` in code points (empty when `text` is shorter).
fn chars_from(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((at, _)) => &text[at..],
        None => "",
    }
}

/// `sglang.utils.find_printable_text`: the longest prefix of `text` that holds whole words only.
pub(super) fn find_printable_text(text: &str) -> &str {
    if text.ends_with('\n') {
        return text;
    }
    let mut last = text.chars().rev();
    match (last.next(), last.next()) {
        (Some(c), _) if is_cjk(c) => text,
        (Some(c), Some(b)) if is_cjk(b) => &text[..text.len() - c.len_utf8()],
        _ => text.rfind(' ').map_or("", |at| &text[..=at]),
    }
}

/// `sglang.utils._is_chinese_char`: the CJK Unified Ideographs blocks and their compatibility forms.
fn is_cjk(c: char) -> bool {
    matches!(u32::from(c),
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// The tail window of a sample's stop conditions over a loaded tokenizer, in tokens.
#[derive(Clone, Debug)]
pub(super) struct StopTail {
    /// `Req._stop_match_tail_len`: one more than the longest stop string's length in tokens or the longest
    /// `stop_regex` match (`stop_window`).
    window: usize,
}

impl StopTail {
    /// The window of `stop_window`; `None` without stop strings or patterns.
    pub(super) fn new(window: Option<usize>) -> Option<StopTail> {
        Some(StopTail { window: window? })
    }

    /// `Req.tail_str`: the last ids' text with special tokens kept.
    pub(super) fn tail(&self, vocab: &HfVocab, output: &[u32]) -> String {
        let from = output.len().saturating_sub(self.window);
        vocab.decode(&output[from..], false)
    }
}

/// The first non-empty stop string, in order, that occurs in `tail`.
pub(super) fn matched_stop<'s>(stop: &'s [String], tail: &str) -> Option<&'s str> {
    stop.iter()
        .map(String::as_str)
        .find(|s| !s.is_empty() && tail.contains(s))
}

/// `Req.check_match_stop_str_prefix`: whether some non-empty stop string occurs in `tail` or starts with one of
/// its suffixes (compared by code points).
pub(super) fn holds_stop_prefix(stop: &[String], tail: &str) -> bool {
    stop.iter().filter(|s| !s.is_empty()).any(|s| {
        if tail.contains(s.as_str()) {
            return true;
        }
        // Each prefix of the stop string that `tail` ends with, shortest first.
        s.char_indices()
            .map(|(at, c)| &s[..at + c.len_utf8()])
            .any(|prefix| tail.ends_with(prefix))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cases of `find_printable_text` worked by hand from SGLang's code.
    #[test]
    fn printable_text_follows_sglang() {
        assert_eq!(find_printable_text("hello wor"), "hello ");
        assert_eq!(find_printable_text("line\n"), "line\n");
        assert_eq!(find_printable_text("nospace"), "");
        assert_eq!(find_printable_text(""), "");
        assert_eq!(find_printable_text("ab 中文"), "ab 中文");
        assert_eq!(find_printable_text("ab 中x"), "ab 中");
        assert_eq!(find_printable_text("a b\u{FFFD}"), "a ");
        assert_eq!(find_printable_text("中\u{FFFD}"), "中");
    }

    #[test]
    fn slices_count_code_points() {
        assert_eq!(chars_from("héllo", 2), "llo");
        assert_eq!(chars_from("ab", 5), "");
    }

    #[test]
    fn stop_prefixes_are_held_back() {
        let stop = vec!["</answer>".to_owned(), String::new()];
        assert!(holds_stop_prefix(&stop, "x </ans"));
        assert!(holds_stop_prefix(&stop, "x </answer> y"));
        assert!(!holds_stop_prefix(&stop, "x </b"));
        assert_eq!(matched_stop(&stop, "a</answer>"), Some("</answer>"));
        assert_eq!(matched_stop(&stop, "a</answ"), None);
    }
}
