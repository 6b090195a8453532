//! The toy model's tokenizer (`MODEL.md` section 2): deterministic, reversible, and computed from the token id
//! alone.
//!
//! The vocabulary has three regions:
//!
//! | ids | what |
//! |---|---|
//! | `0..256` | one token per byte, so any text can be encoded |
//! | `256..V-3` | word pieces: an optional leading space and one to three consonant-vowel syllables (`" ka"`, `"rito"`, `" mesuvo"`) |
//! | `V-3`, `V-2`, `V-1` | the special tokens `<\|endoftext\|>`, `<\|im_start\|>`, `<\|im_end\|>` |
//!
//! A word piece is a pure function of its id (a mixed-radix number over 90 syllables), and the reverse map is
//! arithmetic too, so the tokenizer holds no tables and costs nothing to build for any vocabulary size. Encoding is
//! greedy longest match; decoding concatenates bytes, so `decode(encode(text)) == text` for every string.

use std::borrow::Cow;

const CONSONANTS: &[u8; 18] = b"bcdfghjklmnprstvwz";
const VOWELS: &[u8; 5] = b"aeiou";
const SYLLABLES: u32 = 18 * 5;
/// Words of one, two and three syllables: 90, 90^2 and 90^3 of them.
const ONE: u32 = SYLLABLES;
const TWO: u32 = SYLLABLES * SYLLABLES;
const THREE: u32 = SYLLABLES * SYLLABLES * SYLLABLES;
const BYTE_TOKENS: u32 = 256;
const SPECIAL_NAMES: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// The smallest vocabulary the layout supports: the bytes, every one-syllable word with and without a space,
/// and the special tokens, rounded up.
pub const MIN_VOCAB_SIZE: u32 = 1024;
/// The largest vocabulary the layout supports (every word of up to three syllables, twice, plus bytes and specials),
/// rounded down.
pub const MAX_VOCAB_SIZE: u32 = 1_400_000;

/// What one token id stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// A single byte of UTF-8 (possibly part of a multi-byte character).
    Byte(u8),
    /// A word piece: an optional leading space and `syllables.len()` consonant-vowel pairs.
    Word {
        space: bool,
        syllables: u32,
        index: u32,
    },
    /// One of the named special tokens, by position in the toy's list of them (`Toy::special_tokens`).
    Special(usize),
}

/// The deterministic, reversible tokenizer of the toy model.
#[derive(Clone, Debug)]
pub(crate) struct Toy {
    vocab_size: u32,
    eos: [u32; 2],
}

impl Toy {
    /// A tokenizer over `vocab_size` ids. The caller checks the size against [`MIN_VOCAB_SIZE`] and
    /// [`MAX_VOCAB_SIZE`].
    pub(crate) fn new(vocab_size: u32) -> Toy {
        debug_assert!((MIN_VOCAB_SIZE..=MAX_VOCAB_SIZE).contains(&vocab_size));
        let endoftext = vocab_size - 3;
        let im_end = vocab_size - 1;
        Toy {
            vocab_size,
            eos: [im_end, endoftext],
        }
    }

    /// Number of token ids; valid ids are `0..vocab_size`.
    pub(crate) fn vocab_size(&self) -> u32 {
        self.vocab_size
    }

    /// The ids that end generation (unless `ignore_eos`): `<|im_end|>` first, then `<|endoftext|>`.
    pub(crate) fn eos_token_ids(&self) -> &[u32] {
        &self.eos
    }

    /// The id of `<|im_end|>`, the token the model puts explicit weight on to end a turn.
    pub(crate) fn im_end_id(&self) -> u32 {
        self.vocab_size - 1
    }

    /// The special tokens as `(id, text)`, in id order.
    pub(crate) fn special_tokens(&self) -> impl Iterator<Item = (u32, &'static str)> + '_ {
        SPECIAL_NAMES
            .iter()
            .enumerate()
            .map(|(i, name)| (self.special_base() + i as u32, *name))
    }

    /// Whether `id` is one of the special tokens.
    #[inline]
    pub(crate) fn is_special(&self, id: u32) -> bool {
        id >= self.special_base() && id < self.vocab_size
    }

    #[inline]
    fn special_base(&self) -> u32 {
        self.vocab_size - SPECIAL_NAMES.len() as u32
    }

    /// How many word-piece ids there are.
    fn word_count(&self) -> u32 {
        self.special_base() - BYTE_TOKENS
    }

    /// The first word-piece id and how many there are: word pieces are the ids `first..first + count`.
    pub(crate) fn word_range(&self) -> (u32, u32) {
        (BYTE_TOKENS, self.word_count())
    }

    /// What `id` stands for, or `None` when it is outside the vocabulary.
    #[inline]
    pub(crate) fn piece(&self, id: u32) -> Option<Piece> {
        if id < BYTE_TOKENS {
            return Some(Piece::Byte(id as u8));
        }
        if id >= self.vocab_size {
            return None;
        }
        if self.is_special(id) {
            return Some(Piece::Special((id - self.special_base()) as usize));
        }
        let w = id - BYTE_TOKENS;
        let space = w.is_multiple_of(2);
        let u = w / 2;
        let (syllables, index) = if u < ONE {
            (1, u)
        } else if u < ONE + TWO {
            (2, u - ONE)
        } else {
            (3, u - ONE - TWO)
        };
        Some(Piece::Word {
            space,
            syllables,
            index,
        })
    }

    /// Appends the bytes of `id` to `out`. Special tokens are written as their names unless `skip_special_tokens`;
    /// ids outside the vocabulary write nothing.
    pub(crate) fn push_bytes(&self, id: u32, skip_special_tokens: bool, out: &mut Vec<u8>) {
        if let Some(piece) = self.piece(id) {
            out.reserve(MAX_WORD_BYTES);
            spell(piece, skip_special_tokens, |b| out.push(b));
        }
    }

    /// Appends the text of `id` to `out` when it is ASCII on its own (every word piece, special token and ASCII
    /// byte), and returns whether it did; a byte of a multi-byte character returns `false` and writes nothing.
    #[inline]
    pub(crate) fn push_ascii(&self, id: u32, skip_special_tokens: bool, out: &mut String) -> bool {
        match self.piece(id) {
            Some(Piece::Byte(b)) if !b.is_ascii() => false,
            Some(Piece::Word {
                space,
                syllables,
                index,
            }) => {
                // The common case, once per generated token.
                push_word(space, syllables, index, out);
                true
            }
            Some(piece) => {
                out.reserve(MAX_WORD_BYTES);
                // Every byte `spell` emits here is ASCII, so pushing it as a char keeps `out` valid UTF-8
                // without validating it again.
                spell(piece, skip_special_tokens, |b| out.push(char::from(b)));
                true
            }
            None => true,
        }
    }

    /// Decodes `ids` to text, replacing invalid UTF-8 with U+FFFD as Hugging Face tokenizers do.
    pub(crate) fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            self.push_bytes(id, skip_special_tokens, &mut bytes);
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// The text of one token on its own, as SGLang reports it with `return_text_in_logprobs`
    /// (`tokenizer.decode([id])`): special tokens by name, a lone byte that is not a whole character as U+FFFD.
    pub(crate) fn token_text(&self, id: u32) -> Cow<'static, str> {
        match self.piece(id) {
            Some(Piece::Byte(b)) if !b.is_ascii() => Cow::Borrowed("\u{FFFD}"),
            Some(Piece::Special(i)) => Cow::Borrowed(SPECIAL_NAMES[i]),
            Some(piece) => {
                let mut text = String::with_capacity(MAX_WORD_BYTES);
                spell(piece, false, |b| text.push(char::from(b)));
                Cow::Owned(text)
            }
            None => Cow::Borrowed(""),
        }
    }

    /// Encodes `text` by greedy longest match: special token names, then the longest word piece, then single bytes.
    pub(crate) fn encode(&self, text: &str) -> Vec<u32> {
        let bytes = text.as_bytes();
        let mut ids = Vec::with_capacity(bytes.len() / 3 + 1);
        let mut i = 0;
        'outer: while i < bytes.len() {
            if bytes[i] == b'<' {
                for (id, name) in self.special_tokens() {
                    if bytes[i..].starts_with(name.as_bytes()) {
                        ids.push(id);
                        i += name.len();
                        continue 'outer;
                    }
                }
            }
            if let Some((id, len)) = self.longest_word(&bytes[i..]) {
                ids.push(id);
                i += len;
                continue;
            }
            ids.push(u32::from(bytes[i]));
            i += 1;
        }
        ids
    }

    /// The longest word piece at the start of `bytes` that exists in this vocabulary, as `(id, byte length)`.
    fn longest_word(&self, bytes: &[u8]) -> Option<(u32, usize)> {
        let space = bytes.first() == Some(&b' ');
        let start = usize::from(space);
        let mut digits = [0u32; 3];
        let mut n = 0;
        while n < 3 {
            let at = start + 2 * n;
            let (Some(&c), Some(&v)) = (bytes.get(at), bytes.get(at + 1)) else {
                break;
            };
            let (Some(ci), Some(vi)) = (
                CONSONANTS.iter().position(|&x| x == c),
                VOWELS.iter().position(|&x| x == v),
            ) else {
                break;
            };
            digits[n] = ci as u32 * 5 + vi as u32;
            n += 1;
        }
        // Longest first; a long word may lie beyond a small vocabulary, so fall back to shorter ones.
        for syllables in (1..=n).rev() {
            let index = digits[..syllables]
                .iter()
                .rev()
                .fold(0u32, |acc, d| acc * SYLLABLES + d);
            let u = match syllables {
                1 => index,
                2 => ONE + index,
                _ => ONE + TWO + index,
            };
            debug_assert!(u < ONE + TWO + THREE);
            let w = 2 * u + u32::from(!space);
            if w < self.word_count() {
                return Some((BYTE_TOKENS + w, start + 2 * syllables));
            }
        }
        None
    }
}

/// The longest word piece: a space and three syllables.
const MAX_WORD_BYTES: usize = 7;

/// Every syllable's two letters, by digit: letters `2d` and `2d + 1` are `CONSONANTS[d / 5]` and `VOWELS[d % 5]`.
const SYLLABLE_TEXT: &str = "babebibobucacecicocudadedidodufafefifofugagegigogu\
hahehihohujajejijojukakekikokulalelilolumamemimomunanenino\
nupapepipopurarerirorusasesisosutatetitotuvavevivovuwawewiwowuzazezizozu";

/// Appends a word piece's text to `out`, as [`spell`] emits it: two letters of [`SYLLABLE_TEXT`] per syllable,
/// each a slice of known length, so the appends are a few moves rather than a push per character.
#[inline(always)]
fn push_word(space: bool, syllables: u32, index: u32, out: &mut String) {
    out.reserve(MAX_WORD_BYTES);
    if space {
        out.push(' ');
    }
    let mut rest = index;
    for _ in 0..syllables {
        let d = (rest % SYLLABLES) as usize;
        rest /= SYLLABLES;
        out.push_str(SYLLABLE_TEXT.get(2 * d..2 * d + 2).unwrap_or_default());
    }
}

/// Spells a piece byte by byte into `emit`: its byte, its word (syllables least significant first, so the first
/// syllable of a word varies fastest with its id and the words of a small vocabulary do not all start alike), or
/// a special token's name unless skipped. Inlined into each caller, so the callers' pushes run without a copy.
#[inline(always)]
fn spell(piece: Piece, skip_special_tokens: bool, mut emit: impl FnMut(u8)) {
    match piece {
        Piece::Byte(b) => emit(b),
        Piece::Word {
            space,
            syllables,
            index,
        } => {
            if space {
                emit(b' ');
            }
            let mut rest = index;
            for _ in 0..syllables {
                let d = rest % SYLLABLES;
                rest /= SYLLABLES;
                emit(CONSONANTS[(d / 5) as usize]);
                emit(VOWELS[(d % 5) as usize]);
            }
        }
        Piece::Special(_) if skip_special_tokens => {}
        Piece::Special(i) => SPECIAL_NAMES[i].bytes().for_each(emit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok() -> Toy {
        Toy::new(151_936)
    }

    /// The examples of `MODEL.md` section on word pieces, as the document writes them.
    #[test]
    fn model_md_word_piece_examples() {
        let t = Toy::new(151_936);
        for (id, text) in [
            (256, " ba"),
            (257, "ba"),
            (258, " be"),
            (436, " baba"),
            (438, " beba"),
        ] {
            assert_eq!(t.decode(&[id], false), text, "id {id}");
        }
        // The last one-syllable piece (u = 89) and the first three-syllable one (u = 8190).
        assert_eq!(t.decode(&[256 + 2 * 89], false).len(), 3);
        assert_eq!(t.decode(&[256 + 2 * 8190], false), " bababa");
        let specials = t.vocab_size() - 3;
        assert!(!t.is_special(specials - 1) && t.is_special(specials));
        assert!(t.is_special(t.vocab_size() - 1) && !t.is_special(t.vocab_size()));
        // The last word id is a spaced word; the same word without its space would be the next id, which is the
        // first special token, so it must be spelled with shorter pieces.
        let last_word = t.decode(&[specials - 1], false);
        let bare = last_word.strip_prefix(' ').unwrap();
        let ids = t.encode(bare);
        assert!(
            ids.len() > 1 && ids.iter().all(|&id| !t.is_special(id)),
            "{ids:?}"
        );
        assert_eq!(t.decode(&ids, false), bare);
    }

    #[test]
    fn round_trips_arbitrary_text() {
        let t = tok();
        for text in [
            "The capital of France is",
            " kamo rito. Héllo wörld! 日本語 <|im_start|>user\nhi<|im_end|>",
            "",
            "<|im_end",
            "a\u{0}b\u{10FFFF}",
        ] {
            let ids = t.encode(text);
            assert_eq!(t.decode(&ids, false), text, "ids {ids:?}");
            assert!(ids.iter().all(|&id| id < t.vocab_size()));
        }
    }

    #[test]
    fn ascii_fast_path_matches_bytes() {
        // Every id of the largest vocabulary: `push_ascii` spells words through its own table.
        let t = Toy::new(MAX_VOCAB_SIZE);
        for id in 0..t.vocab_size() + 1 {
            for skip in [false, true] {
                let mut bytes = Vec::new();
                t.push_bytes(id, skip, &mut bytes);
                let mut text = String::new();
                if t.push_ascii(id, skip, &mut text) {
                    assert_eq!(text.as_bytes(), bytes, "id {id}");
                } else {
                    assert!(text.is_empty() && !bytes.is_ascii(), "id {id}");
                }
            }
        }
    }

    #[test]
    fn every_word_id_decodes_and_reencodes_to_itself() {
        let t = Toy::new(MIN_VOCAB_SIZE);
        for id in 256..t.vocab_size() - 3 {
            let text = t.token_text(id);
            assert_eq!(t.encode(&text), vec![id], "id {id} text {text:?}");
        }
    }

    #[test]
    fn high_ids_are_words() {
        let t = tok();
        let id = 150_001;
        let text = t.token_text(id);
        assert!(
            text.bytes().all(|b| b == b' ' || b.is_ascii_lowercase()),
            "{text:?}"
        );
        assert_eq!(t.encode(&text), vec![id]);
    }

    #[test]
    fn specials_render_by_name_and_can_be_skipped() {
        let t = tok();
        let im_end = t.im_end_id();
        assert_eq!(t.token_text(im_end), "<|im_end|>");
        assert_eq!(t.eos_token_ids(), &[151_935, 151_933]);
        assert_eq!(t.decode(&[u32::from(b'x'), im_end], true), "x");
        assert_eq!(t.decode(&[u32::from(b'x'), im_end], false), "x<|im_end|>");
    }

    #[test]
    fn lone_non_ascii_bytes_render_as_replacement() {
        let t = tok();
        assert_eq!(t.token_text(0xE2), "\u{FFFD}");
        assert_eq!(t.decode(&[0xE2], false), "\u{FFFD}");
    }
}
