//! What section 4.3 of `MODEL.md` assigns to the distribution's slots, for the toy vocabulary or a loaded one:
//! the punctuation characters and the ids each kind of slot draws from.

/// The characters the model proposes as punctuation, one byte each: the toy's byte ids, a loaded tokenizer's
/// encodings of them.
pub(crate) const PUNCTUATION: &[u8] = b".,.,\n!?:;";

/// The ids section 4.3 assigns to slots, for either vocabulary.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slots {
    /// The end-of-turn id, slot 8.
    pub(crate) end_of_turn: u32,
    /// The word slots' ids: `first + index` for the toy, `table[index]` for a loaded vocabulary.
    pub(crate) first_word: u32,
    pub(crate) table: Option<&'static [u32]>,
    /// How many ids the word slots index.
    pub(crate) word_count: u32,
    /// The id of each character of section 4.3's punctuation table.
    pub(crate) punctuation: [u32; PUNCTUATION.len()],
}
