//! The ledger: what the server served, item by item, in a bounded store indexed by prompt, and its JSON form
//! (`WITNESS.md` section 2).
//!
//! Every item that ends (finished, aborted, or a stream that stopped before its end) becomes one [`Entry`]: its
//! rid, prompt ids, output ids, the output logprobs as they went out, the weight versions that made its tokens,
//! the routes and sampling supports it carried, and the fault that changed its answer, if one did. The store
//! keeps the newest entries within a byte budget; older ones are evicted first, and the prompts they answered
//! are remembered (within a bound of their own) so that an audit can say an entry it needed is gone.

use std::collections::{HashMap, VecDeque};
use std::sync::RwLock;

use serde::de::{self, Deserializer};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

use crate::model::{MoeShape, append_routes, mix};

/// The seed of the prompt hash that indexes the store; any constant works, this one spells "LEDGER".
const PROMPT_HASH_SEED: u64 = 0x4C45_4447_4552;

/// The hash the store indexes prompts by: a fold of [`mix`] over the ids, so that an audit can extend it one
/// token at a time along a sample ([`PromptHash::push`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PromptHash(u64);

impl PromptHash {
    /// The hash of an empty prompt.
    pub const EMPTY: PromptHash = PromptHash(PROMPT_HASH_SEED);

    /// The hash of `ids`.
    pub fn of(ids: &[u32]) -> PromptHash {
        ids.iter().fold(PromptHash::EMPTY, |h, &id| h.push(id))
    }

    /// The hash of the prompt this one hashes, followed by `id`.
    #[inline]
    pub fn push(self, id: u32) -> PromptHash {
        PromptHash(mix(self.0, u64::from(id)))
    }
}

/// The route an item was served on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Route {
    #[serde(rename = "/generate")]
    Generate,
    #[serde(rename = "/v1/completions")]
    Completions,
    #[serde(rename = "/v1/chat/completions")]
    ChatCompletions,
}

/// The output logprobs of an item as they went out: one per output token unless a fault changed their number,
/// a value where the answer carried a number, and `null` at the positions in `nulls`. The JSON form writes the
/// bare `NaN`, `Infinity` and `-Infinity` a `nan-logprob` fault sends as the strings `"NaN"`, `"Infinity"` and
/// `"-Infinity"` (JSON has no such numbers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SentLogprobs {
    pub values: Vec<f32>,
    /// Positions sent as `null` (sorted); their `values` are NaN.
    pub nulls: Vec<usize>,
}

impl SentLogprobs {
    /// The logprobs of a generation, all sent as numbers.
    pub fn numbers(values: &[f32]) -> SentLogprobs {
        SentLogprobs {
            values: values.to_vec(),
            nulls: Vec::new(),
        }
    }

    /// How many went out.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether none went out.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The value sent at `i`: `Some(number)`, `None` for `null`; past the end, nothing was sent.
    pub fn get(&self, i: usize) -> Option<Option<f32>> {
        let value = *self.values.get(i)?;
        Some((self.nulls.binary_search(&i).is_err()).then_some(value))
    }
}

impl Serialize for SentLogprobs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.values.len()))?;
        for i in 0..self.values.len() {
            match self.get(i).flatten() {
                None => seq.serialize_element(&())?,
                Some(v) if v.is_nan() => seq.serialize_element("NaN")?,
                Some(v) if v == f32::INFINITY => seq.serialize_element("Infinity")?,
                Some(v) if v == f32::NEG_INFINITY => seq.serialize_element("-Infinity")?,
                Some(v) => seq.serialize_element(&v)?,
            }
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for SentLogprobs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SentLogprobs, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum One {
            Number(f32),
            Text(String),
            Null(()),
        }
        let items = Vec::<One>::deserialize(deserializer)?;
        let mut out = SentLogprobs {
            values: Vec::with_capacity(items.len()),
            nulls: Vec::new(),
        };
        for (i, item) in items.into_iter().enumerate() {
            let value = match item {
                One::Number(v) => v,
                One::Null(()) => {
                    out.nulls.push(i);
                    f32::NAN
                }
                One::Text(text) => match text.as_str() {
                    "NaN" => f32::NAN,
                    "Infinity" => f32::INFINITY,
                    "-Infinity" => f32::NEG_INFINITY,
                    other => {
                        return Err(de::Error::custom(format!(
                            "output_logprobs[{i}] is the string {other:?}; a ledger writes only \"NaN\", \
                             \"Infinity\" and \"-Infinity\" as strings"
                        )));
                    }
                },
            };
            out.values.push(value);
        }
        Ok(out)
    }
}

/// How an item ended: `finish_reason.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Finish {
    Stop,
    Length,
    Abort,
}

impl Finish {
    /// The type's name, as `finish_reason.type` writes it.
    pub fn name(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Abort => "abort",
        }
    }
}

/// Output tokens `start..end` of an item came from the weights `version` names, the server's `weights`-th.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub version: String,
    pub start: usize,
    pub end: usize,
    /// Which weights the server had loaded: the weight updates it had applied since start-up, counted from its
    /// `--weight-version` when that is a number, else from 0 (`WITNESS.md` section 3.3). An update that leaves
    /// the version string as it was (AReaL sends none) changes only this.
    #[serde(default)]
    pub weights: u64,
}

/// How a fault changed the routes an answer carried (the toy router's rows otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoutesEdit {
    /// The router's rows.
    #[default]
    None,
    /// The last rows dropped (`routes-short`); [`SentRoutes::rows`] counts the rows sent.
    Short,
    /// The last row sent twice (`routes-extra-row`).
    ExtraRow,
    /// Every expert id XOR 1 (`retract-routes`).
    Retracted,
}

/// The routes an item carried: `rows` rows from position `start_len` of its prompt and output
/// (`routed_experts_start_len`), each the toy router's (`MODEL.md` section 12) unless `edit` says otherwise. The
/// rows are a function of the tokens, so the store keeps this description, not the rows themselves (a row of
/// Qwen3-30B-A3B's shape is 1.5 KB per token); the JSON form writes the rows too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentRoutes {
    pub start_len: usize,
    pub rows: usize,
    #[serde(default)]
    pub edit: RoutesEdit,
}

/// The sampling supports an item carried (`output_token_sampling_mask`): per output token, the ids the sampler
/// could draw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Supports {
    ids: Vec<u32>,
    ends: Vec<usize>,
}

impl Supports {
    /// Appends one output token's support.
    pub fn push(&mut self, ids: &[u32]) {
        self.ids.extend_from_slice(ids);
        self.ends.push(self.ids.len());
    }

    /// Rows: output tokens with a support.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The support of output token `i` (`None` past the last row).
    pub fn row(&self, i: usize) -> Option<&[u32]> {
        let end = *self.ends.get(i)?;
        let start = i.checked_sub(1).map_or(0, |j| self.ends[j]);
        Some(&self.ids[start..end])
    }

    /// Removes `id` from row `i`; whether it was there.
    pub(crate) fn remove(&mut self, i: usize, id: u32) -> bool {
        let Some(row) = self.row(i) else { return false };
        let start = self.ends[i] - row.len();
        let Some(at) = row.iter().position(|&x| x == id) else {
            return false;
        };
        self.ids.remove(start + at);
        for end in &mut self.ends[i..] {
            *end -= 1;
        }
        true
    }

    fn bytes(&self) -> usize {
        4 * self.ids.len() + 8 * self.ends.len()
    }
}

impl Serialize for Supports {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq((0..self.len()).map(|i| self.row(i).unwrap_or(&[])))
    }
}

impl<'de> Deserialize<'de> for Supports {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Supports, D::Error> {
        let rows = Vec::<Vec<u32>>::deserialize(deserializer)?;
        let mut out = Supports::default();
        rows.iter().for_each(|row| out.push(row));
        Ok(out)
    }
}

/// The logprob temperature of an entry read from a dump that does not say it.
fn temperature_one() -> f64 {
    1.0
}

/// One item the server answered (`WITNESS.md` section 2.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The entry's number: 0 for the first item recorded since start-up or the last reset, then 1, 2, ...
    pub seq: u64,
    /// `meta_info.id`: the request's rid, or the item's in a batch or an `n > 1` request.
    pub rid: String,
    pub route: Route,
    pub stream: bool,
    /// The item's position in its request: its place in a batch, or its sample index for `n > 1`.
    pub index: usize,
    /// The sample's draw (MODEL.md section 8.3): how many unseeded samples of the same prompt at the same position
    /// the server ran before it; 0 for a seeded one. With the request's body it recomputes the answer
    /// (`Oracle::expect_drawn`).
    #[serde(default)]
    pub draw: u64,
    /// `stop`, `length` or `abort`; `null` for a stream that ended before its item did (a client that went away,
    /// a stream fault).
    pub finish_reason: Option<Finish>,
    /// The `weight_version` the answer reported.
    pub weight_version: String,
    pub num_retractions: u32,
    /// The prompt the model ran on (after the chat template, for a chat request).
    pub prompt_ids: Vec<u32>,
    pub output_ids: Vec<u32>,
    /// Whether the request asked for logprobs (`return_logprob`).
    pub return_logprob: bool,
    /// The temperature the item's logprobs are at (`MODEL.md` section 8.5's report temperature): the request's
    /// sampling temperature, or 1 for a greedy request or a server with `--return-original-logprob`.
    #[serde(default = "temperature_one")]
    pub logprob_temperature: f64,
    /// The output logprobs as they went out; `None` when none did (not asked for, or removed by a fault).
    pub output_logprobs: Option<SentLogprobs>,
    /// Which weight version made which output tokens: what 0.5.23 reports in `meta_info.weight_versions`, and
    /// what the server knows under releases that do not report it.
    pub weight_versions: Vec<Span>,
    /// The routes the answer carried, if it carried any.
    pub routed_experts: Option<SentRoutes>,
    /// The sampling supports the answer carried, if it carried any.
    pub sampling_supports: Option<Supports>,
    /// The fault that changed this item's answer on its way out, as the catalogue writes it
    /// (`nan-logprob;at=2`).
    pub fault: Option<String>,
}

impl Entry {
    /// The number of tokens the model ran on: prompt and output.
    pub fn seq_len(&self) -> usize {
        self.prompt_ids.len() + self.output_ids.len()
    }

    /// The span of the weights that made output token `i`.
    pub fn span_of(&self, i: usize) -> Option<&Span> {
        self.weight_versions
            .iter()
            .find(|span| (span.start..span.end).contains(&i))
    }

    /// The positions of prompt and output whose routes the answer carried: `start_len` up to the rows sent.
    pub fn routed_positions(&self) -> std::ops::Range<usize> {
        match self.routed_experts {
            Some(routes) => routes.start_len..routes.start_len + routes.rows,
            None => 0..0,
        }
    }

    /// The routes the answer carried, flat (rows of `shape.row_len()` ids), or `None` without routes.
    pub fn routes(&self, router: &Router) -> Option<Vec<i32>> {
        let sent = self.routed_experts?;
        let mut tokens = self.prompt_ids.clone();
        tokens.extend_from_slice(&self.output_ids);
        let mut rows = Vec::new();
        router.append(&tokens, sent.start_len, &mut rows);
        let row_len = router.shape.row_len();
        match sent.edit {
            RoutesEdit::None => {}
            RoutesEdit::Short => rows.truncate(sent.rows * row_len),
            RoutesEdit::ExtraRow => {
                let last = rows.len().saturating_sub(row_len);
                rows.extend_from_within(last..);
            }
            RoutesEdit::Retracted => rows.iter_mut().for_each(|e| *e ^= 1),
        }
        Some(rows)
    }

    /// The memory the entry holds, roughly: what the store's budget counts.
    pub fn bytes(&self) -> usize {
        const FIXED: usize = 256;
        FIXED
            + self.rid.len()
            + 4 * (self.prompt_ids.len() + self.output_ids.len())
            + self
                .output_logprobs
                .as_ref()
                .map_or(0, |l| 4 * l.values.len() + 8 * l.nulls.len())
            + self
                .weight_versions
                .iter()
                .map(|s| 40 + s.version.len())
                .sum::<usize>()
            + self.sampling_supports.as_ref().map_or(0, Supports::bytes)
            + self.fault.as_ref().map_or(0, String::len)
    }
}

/// The toy router an audit recomputes routes with: the server's seed and MoE shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Router {
    pub seed: u64,
    #[serde(with = "moe_shape")]
    pub shape: MoeShape,
}

impl Router {
    /// Appends the rows of positions `start..tokens.len() - 1` of `tokens`.
    pub fn append(&self, tokens: &[u32], start: usize, out: &mut Vec<i32>) {
        append_routes(self.seed, &self.shape, tokens, start, out);
    }

    /// The row of position `p` of `tokens` (`p < tokens.len() - 1`).
    pub fn row(&self, tokens: &[u32], p: usize) -> Vec<i32> {
        let mut out = Vec::with_capacity(self.shape.row_len());
        append_routes(
            self.seed,
            &self.shape,
            &tokens[..(p + 2).min(tokens.len())],
            p,
            &mut out,
        );
        out
    }
}

mod moe_shape {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::model::MoeShape;

    #[derive(Serialize, Deserialize)]
    struct Shape {
        num_hidden_layers: u32,
        num_experts: u32,
        num_experts_per_tok: u32,
    }

    pub(super) fn serialize<S: Serializer>(shape: &MoeShape, s: S) -> Result<S::Ok, S::Error> {
        Shape {
            num_hidden_layers: shape.layers,
            num_experts: shape.experts,
            num_experts_per_tok: shape.experts_per_token,
        }
        .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MoeShape, D::Error> {
        let shape = Shape::deserialize(d)?;
        Ok(MoeShape {
            layers: shape.num_hidden_layers,
            experts: shape.num_experts,
            experts_per_token: shape.num_experts_per_tok,
        })
    }
}

/// Evicted prompts remembered per entry the budget holds, so that the memory of what was evicted stays bounded.
const EVICTED_PROMPTS_PER_ENTRY: usize = 8;
/// At least this many evicted prompts are remembered, however few entries the budget holds.
const MIN_EVICTED_PROMPTS: usize = 4096;

/// The entries of a ledger, indexed by prompt: what an audit reads. A live server's is behind [`Ledger`]; a
/// dumped ledger's is read back with [`Records::from_dump`].
#[derive(Debug)]
pub struct Records {
    entries: VecDeque<Entry>,
    /// The seq of `entries[0]`.
    first_seq: u64,
    next_seq: u64,
    bytes: usize,
    max_bytes: usize,
    /// The seqs of the entries with each prompt, oldest first.
    by_prompt: HashMap<PromptHash, VecDeque<u64>>,
    /// Entries evicted since the last reset.
    evicted: u64,
    /// The prompts of the most recently evicted entries, oldest first, and the same as a set.
    evicted_order: VecDeque<PromptHash>,
    evicted_set: HashMap<PromptHash, usize>,
    router: Router,
}

impl Records {
    /// An empty store of at most `max_bytes` (by [`Entry::bytes`]; the newest entry is always kept).
    pub fn new(max_bytes: usize, router: Router) -> Records {
        Records {
            entries: VecDeque::new(),
            first_seq: 0,
            next_seq: 0,
            bytes: 0,
            max_bytes,
            by_prompt: HashMap::new(),
            evicted: 0,
            evicted_order: VecDeque::new(),
            evicted_set: HashMap::new(),
            router,
        }
    }

    /// Adds `entry` with the next seq, evicting the oldest entries beyond the budget.
    pub fn push(&mut self, mut entry: Entry) {
        entry.seq = self.next_seq;
        self.next_seq += 1;
        if self.entries.is_empty() {
            self.first_seq = entry.seq;
        }
        self.bytes += entry.bytes();
        self.by_prompt
            .entry(PromptHash::of(&entry.prompt_ids))
            .or_default()
            .push_back(entry.seq);
        self.entries.push_back(entry);
        while self.bytes > self.max_bytes && self.entries.len() > 1 {
            self.evict_oldest();
        }
    }

    fn evict_oldest(&mut self) {
        let Some(old) = self.entries.pop_front() else {
            return;
        };
        self.first_seq = old.seq + 1;
        self.bytes -= old.bytes();
        self.evicted += 1;
        let hash = PromptHash::of(&old.prompt_ids);
        // The oldest entry is the oldest of its prompt's too.
        if let Some(seqs) = self.by_prompt.get_mut(&hash) {
            debug_assert_eq!(seqs.front(), Some(&old.seq));
            seqs.pop_front();
            if seqs.is_empty() {
                self.by_prompt.remove(&hash);
            }
        }
        *self.evicted_set.entry(hash).or_default() += 1;
        self.evicted_order.push_back(hash);
        let bound = MIN_EVICTED_PROMPTS.max(EVICTED_PROMPTS_PER_ENTRY * self.entries.len());
        while self.evicted_order.len() > bound {
            if let Some(gone) = self.evicted_order.pop_front()
                && let Some(count) = self.evicted_set.get_mut(&gone)
            {
                *count -= 1;
                if *count == 0 {
                    self.evicted_set.remove(&gone);
                }
            }
        }
    }

    /// Removes every entry and the memory of evictions; seqs start again at 0.
    pub fn clear(&mut self) {
        let (max_bytes, router) = (self.max_bytes, self.router);
        *self = Records::new(max_bytes, router);
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = &Entry> {
        self.entries.iter()
    }

    /// The entry numbered `seq`, if the store still holds it.
    pub fn get(&self, seq: u64) -> Option<&Entry> {
        let i = seq.checked_sub(self.first_seq)?;
        self.entries.get(usize::try_from(i).ok()?)
    }

    /// The entries whose prompt hashes to `hash` (check the prompt itself: a hash can collide).
    pub fn with_prompt_hash(&self, hash: PromptHash) -> impl Iterator<Item = &Entry> {
        self.by_prompt
            .get(&hash)
            .into_iter()
            .flatten()
            .filter_map(|&seq| self.get(seq))
    }

    /// Whether an evicted entry's prompt hashed to `hash`: `Some(true)` when the store remembers one, `Some(false)`
    /// when it remembers every eviction and none did, `None` when it has forgotten some evictions.
    pub fn evicted_prompt(&self, hash: PromptHash) -> Option<bool> {
        if self.evicted_set.contains_key(&hash) {
            Some(true)
        } else if self.evicted_order.len() as u64 == self.evicted {
            Some(false)
        } else {
            None
        }
    }

    /// Entries evicted since the last reset.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// The bytes the entries hold, by [`Entry::bytes`].
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The budget.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The router the routes are recomputed with.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The store as JSON (`WITNESS.md` section 2.2): its bounds and router, then every entry with its routes
    /// written out as the answer carried them (base64 of little-endian int32, as SGLang sends them).
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        #[derive(Serialize)]
        struct Dump<'a> {
            entries: usize,
            evicted: u64,
            bytes: usize,
            max_bytes: usize,
            router: &'a Router,
            items: Items<'a>,
        }
        struct Items<'a>(&'a Records);
        impl Serialize for Items<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.entries.iter().map(|entry| {
                    WithRoutes {
                        entry,
                        routes: entry
                            .routes(&self.0.router)
                            .map(|rows| crate::wire::base64_i32(&rows)),
                    }
                }))
            }
        }
        #[derive(Serialize)]
        struct WithRoutes<'a> {
            #[serde(flatten)]
            entry: &'a Entry,
            #[serde(skip_serializing_if = "Option::is_none")]
            routes: Option<String>,
        }
        serde_json::to_writer(
            out,
            &Dump {
                entries: self.entries.len(),
                evicted: self.evicted,
                bytes: self.bytes,
                max_bytes: self.max_bytes,
                router: &self.router,
                items: Items(self),
            },
        )
    }

    /// A store read back from [`Records::write_json`]'s output (the routes are recomputed from the router, not
    /// read; the seqs are kept).
    pub fn from_dump(json: &[u8]) -> Result<Records, serde_json::Error> {
        #[derive(Deserialize)]
        struct Dump {
            evicted: u64,
            max_bytes: usize,
            router: Router,
            items: Vec<Entry>,
        }
        let dump: Dump = serde_json::from_slice(json)?;
        let mut records = Records::new(usize::MAX, dump.router);
        for entry in dump.items {
            let seq = entry.seq;
            if records.entries.is_empty() {
                records.next_seq = seq;
            }
            if seq != records.next_seq {
                return Err(de::Error::custom(format!(
                    "the ledger's items are numbered {} then {seq}: a dump lists consecutive seqs",
                    records.next_seq.saturating_sub(1)
                )));
            }
            records.push(entry);
        }
        records.max_bytes = dump.max_bytes;
        records.evicted = dump.evicted;
        Ok(records)
    }
}

/// A live server's ledger: its [`Records`] behind a lock. Recording takes the write lock for a push; an audit or
/// a read of the ledger takes the read lock for as long as it reads.
#[derive(Debug)]
pub struct Ledger {
    records: RwLock<Records>,
}

impl Ledger {
    /// An empty ledger of at most `max_bytes`.
    pub fn new(max_bytes: usize, router: Router) -> Ledger {
        Ledger {
            records: RwLock::new(Records::new(max_bytes, router)),
        }
    }

    /// Records one served item.
    pub fn record(&self, entry: Entry) {
        self.write().push(entry);
    }

    /// Forgets everything (`/admin/reset`).
    pub fn clear(&self) {
        self.write().clear();
    }

    /// Reads the records: an audit, a dump.
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, Records> {
        // A panic while the lock was held cannot leave the records half written: every change is one push.
        self.records.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Records> {
        self.records.write().unwrap_or_else(|e| e.into_inner())
    }
}
