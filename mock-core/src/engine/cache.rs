//! The radix prefix cache: the token sequences whose KV SGLang keeps after a request, and how much of a new
//! prompt they cover (`meta_info.cached_tokens`). A port of the rules of SGLang's `RadixCache`
//! (`srt/mem_cache/radix_cache.py`), checked against the running releases (`mock-server/conform/cache/`):
//!
//! - keys are token ids cut to whole pages (`--page-size`), matched and inserted page by page;
//! - a match may cover at most `limit` tokens (the scheduler's `_compute_max_prefix_len`: all but the prompt's
//!   last token, and no further than `logprob_start_len` when logprobs are asked for), and splits the node
//!   it ends inside, as SGLang's `_split_node` does;
//! - the tree holds at most `capacity` tokens; an insert past it evicts the least recently used leaves that no
//!   running request holds, whole, as `evict` does (a match or an insert stamps every node it walks);
//! - `flush` empties it.
//!
//! Time is a counter, not a clock: two runs of the same requests evict the same leaves. What a request inserts
//! and when (after its prefill, at its end) is the step core's, by release; this module is the tree alone.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::item::ItemRequest;
use super::plan::GeneratePlan;
use crate::config::ServerConfig;
use crate::release::CacheInserts;

/// Where a node sits in the arena; the root is [`ROOT`].
type NodeId = usize;

const ROOT: NodeId = 0;

#[derive(Debug, Clone)]
struct Node {
    /// The tokens from the parent to this node, a whole number of pages (empty for the root).
    key: Vec<u32>,
    parent: NodeId,
    /// By the first page of the child's key.
    children: Children,
    /// The stamp of the last match or insert that walked this node.
    last_access: u64,
    /// Running requests whose prefix runs through this node; a held node is not evicted.
    holds: u32,
    /// Whether the node is in the eviction order (an unheld leaf): of its entries in the heap, the one with its
    /// `last_access` is its place; any other is stale. An entry of an evicted node whose slot was given to a
    /// new node is stale too: the new node was made by a later walk, whose stamp is newer than every entry the
    /// old one left.
    listed: bool,
}

impl Node {
    fn new(key: Vec<u32>, parent: NodeId, stamp: u64) -> Node {
        Node {
            key,
            parent,
            children: Children::default(),
            last_access: stamp,
            holds: 0,
            listed: false,
        }
    }
}

/// What a running request holds in the tree: the node its match or insert ended at. Give it back with
/// [`PrefixCache::release`]; a flush makes every hold void.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    node: NodeId,
    /// The tokens from the root to `node`.
    len: usize,
    /// The flush generation the hold was taken in.
    epoch: u64,
}

/// The tree's part in the KV pool's use (SGLang's `protected_size` against what requests hold): see
/// [`PrefixCache::in_use`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InUse {
    /// Tokens in nodes some running request holds: not evictable, so counted as used.
    pub protected: usize,
    /// The sum over live holds of the tokens each covers: the part of running requests' own tokens that the
    /// tree already counts in `protected`.
    pub held: usize,
}

/// SGLang's radix prefix cache over token ids. See the module documentation for its rules.
#[derive(Debug, Clone)]
pub struct PrefixCache {
    page: usize,
    capacity: usize,
    /// The arena; freed slots are reused from `free`.
    nodes: Vec<Node>,
    free: Vec<NodeId>,
    /// Tokens held by the tree.
    size: usize,
    stamp: u64,
    epoch: u64,
    /// The leaves no request holds, by last access: the eviction order, a min-heap whose stale entries
    /// (a node since held, stamped again or evicted) are skipped when they come up, and dropped by a rebuild
    /// when they outnumber the listed nodes.
    evictable: BinaryHeap<Reverse<(u64, NodeId)>>,
    /// The listed nodes.
    listed: usize,
    in_use: InUse,
}

impl PrefixCache {
    /// An empty tree of pages of `page` tokens (at least 1) holding at most `capacity` tokens.
    pub fn new(page: usize, capacity: usize) -> PrefixCache {
        PrefixCache {
            page: page.max(1),
            capacity,
            nodes: vec![Node::new(Vec::new(), ROOT, 0)],
            free: Vec::new(),
            size: 0,
            stamp: 0,
            epoch: 0,
            evictable: BinaryHeap::new(),
            listed: 0,
            in_use: InUse::default(),
        }
    }

    /// Tokens the tree holds now.
    pub fn size(&self) -> usize {
        self.size
    }

    /// What of the tree running requests hold. The KV pool's used tokens are `protected` plus the running
    /// requests' tokens less `held` (each request's tokens that are its held prefix): a prefix that several
    /// requests share counts once, and a flush, which voids every hold, leaves each request owning all of its
    /// tokens.
    pub fn in_use(&self) -> InUse {
        self.in_use
    }

    /// Empties the tree (`/flush_cache`); holds taken before it are void.
    pub fn flush(&mut self) {
        *self = PrefixCache {
            epoch: self.epoch + 1,
            ..PrefixCache::new(self.page, self.capacity)
        };
    }

    /// How many leading tokens of `tokens[..limit]` the tree holds, in whole pages, and a hold on them that
    /// keeps them from eviction until [`PrefixCache::release`].
    pub fn match_prefix(&mut self, tokens: &[u32], limit: usize) -> (usize, Hold) {
        let stamp = self.tick();
        let key = self.aligned(&tokens[..limit.min(tokens.len())]);
        let (matched, node) = self.walk(key, stamp, false);
        (matched, self.hold(node, matched))
    }

    /// Inserts `tokens` (cut to whole pages), evicting what the capacity asks for, and returns a hold on
    /// them. The new tokens are held while the hold lasts, so an insert never evicts itself.
    pub fn insert(&mut self, tokens: &[u32]) -> Hold {
        let stamp = self.tick();
        let key = self.aligned(tokens);
        let (len, node) = self.walk(key, stamp, true);
        let hold = self.hold(node, len);
        self.evict(self.size.saturating_sub(self.capacity));
        hold
    }

    /// Gives back a hold from [`PrefixCache::match_prefix`] or [`PrefixCache::insert`]: its nodes can be
    /// evicted again. A hold from before a flush is void and ignored.
    pub fn release(&mut self, hold: Hold) {
        if hold.epoch != self.epoch {
            return;
        }
        self.in_use.held -= hold.len;
        let mut node = hold.node;
        while node != ROOT {
            let n = &mut self.nodes[node];
            n.holds -= 1;
            if n.holds == 0 {
                self.in_use.protected -= n.key.len();
            }
            self.relist(node);
            node = self.nodes[node].parent;
        }
        self.compact();
    }

    /// Puts `node` in the eviction order or takes it out, as it is now an unheld leaf or not.
    fn relist(&mut self, node: NodeId) {
        let n = &mut self.nodes[node];
        let evictable = node != ROOT && n.holds == 0 && n.children.is_empty();
        if evictable != n.listed {
            n.listed = evictable;
            if evictable {
                self.listed += 1;
                self.evictable.push(Reverse((n.last_access, node)));
            } else {
                self.listed -= 1;
            }
        }
    }

    /// The least recently used listed node, taken out of the order; stale entries on the way are dropped.
    fn pop_evictable(&mut self) -> Option<NodeId> {
        while let Some(Reverse((stamp, node))) = self.evictable.pop() {
            let n = &mut self.nodes[node];
            if n.listed && n.last_access == stamp {
                n.listed = false;
                self.listed -= 1;
                return Some(node);
            }
        }
        None
    }

    /// Rebuilds the heap from the listed nodes once stale entries outnumber them, so that it stays within
    /// twice the leaves.
    fn compact(&mut self) {
        if self.evictable.len() <= 2 * self.listed + 1024 {
            return;
        }
        let live = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.listed)
            .map(|(id, n)| Reverse((n.last_access, id)));
        self.evictable = live.collect();
    }

    fn tick(&mut self) -> u64 {
        self.stamp += 1;
        self.stamp
    }

    fn aligned<'t>(&self, tokens: &'t [u32]) -> &'t [u32] {
        &tokens[..tokens.len() / self.page * self.page]
    }

    /// A hold on `node`, `len` tokens from the root.
    fn hold(&mut self, node: NodeId, len: usize) -> Hold {
        self.in_use.held += len;
        let mut at = node;
        while at != ROOT {
            let n = &mut self.nodes[at];
            n.holds += 1;
            if n.holds == 1 {
                self.in_use.protected += n.key.len();
            }
            self.relist(at);
            at = self.nodes[at].parent;
        }
        Hold {
            node,
            len,
            epoch: self.epoch,
        }
    }

    /// Walks `key` (whole pages) from the root, stamping every node on the way and splitting the one the
    /// key leaves inside; with `insert`, the rest of the key becomes a new leaf. Returns the tokens walked
    /// and the last node.
    fn walk(&mut self, key: &[u32], stamp: u64, insert: bool) -> (usize, NodeId) {
        let page = self.page;
        let mut node = ROOT;
        let mut pos = 0;
        while pos < key.len() {
            let Some(child) = self.nodes[node].children.get(&key[pos..pos + page]) else {
                break;
            };
            self.stamp_node(child, stamp);
            let shared = common_pages(&self.nodes[child].key, &key[pos..], page);
            if shared < self.nodes[child].key.len() {
                node = self.split(child, shared);
                pos += shared;
                break;
            }
            node = child;
            pos += shared;
        }
        if insert && pos < key.len() {
            node = self.add_leaf(node, key[pos..].to_vec(), stamp);
            pos = key.len();
        }
        (pos, node)
    }

    fn stamp_node(&mut self, node: NodeId, stamp: u64) {
        let n = &mut self.nodes[node];
        n.last_access = stamp;
        if n.listed {
            self.evictable.push(Reverse((stamp, node)));
        }
    }

    /// Splits `child` after its first `at` tokens (a whole number of pages, less than its key): a new node
    /// takes those tokens and `child` hangs under it with the rest. Returns the new node.
    fn split(&mut self, child: NodeId, at: usize) -> NodeId {
        let page = self.page;
        let (parent, last_access, holds) = {
            let c = &self.nodes[child];
            (c.parent, c.last_access, c.holds)
        };
        let rest = self.nodes[child].key.split_off(at);
        let head = std::mem::replace(&mut self.nodes[child].key, rest);
        let mut upper = Node::new(Vec::new(), parent, last_access);
        upper.holds = holds;
        let upper_id = self.alloc(upper);
        let child_first = self.nodes[child].key[..page].to_vec();
        self.nodes[upper_id].children.insert(&child_first, child);
        self.nodes[child].parent = upper_id;
        self.nodes[parent].children.insert(&head[..page], upper_id);
        self.nodes[upper_id].key = head;
        upper_id
    }

    /// A new leaf under `parent`, not yet in the eviction order: [`PrefixCache::insert`] holds it at once, and
    /// its release lists it.
    fn add_leaf(&mut self, parent: NodeId, key: Vec<u32>, stamp: u64) -> NodeId {
        self.size += key.len();
        let leaf = self.alloc(Node::new(Vec::new(), parent, stamp));
        self.nodes[parent].children.insert(&key[..self.page], leaf);
        self.nodes[leaf].key = key;
        self.relist(parent);
        leaf
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        match self.free.pop() {
            Some(id) => {
                self.nodes[id] = node;
                id
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    /// Evicts whole leaves, least recently used first, until `tokens` tokens are gone or nothing is
    /// evictable (SGLang's `evict`): a parent left without children joins the candidates.
    fn evict(&mut self, tokens: usize) {
        let mut evicted = 0;
        while evicted < tokens {
            let Some(leaf) = self.pop_evictable() else {
                break;
            };
            let parent = self.nodes[leaf].parent;
            let key = std::mem::take(&mut self.nodes[leaf].key);
            evicted += key.len();
            self.size -= key.len();
            self.nodes[parent].children.remove(&key[..self.page]);
            self.free.push(leaf);
            self.relist(parent);
        }
    }
}

/// A server's prefix cache, shared by every request it runs (and by an oracle's history).
pub type SharedCache = Arc<Mutex<PrefixCache>>;

/// A server's prefix cache as its configuration asks (`--page-size`, bounded by `--max-total-tokens`), empty;
/// none with `--disable-radix-cache`.
pub fn server_cache(config: &ServerConfig) -> Option<SharedCache> {
    (!config.disable_radix_cache).then(|| {
        let capacity = usize::try_from(config.kv_pool_tokens()).unwrap_or(usize::MAX);
        Arc::new(Mutex::new(PrefixCache::new(
            config.page_size as usize,
            capacity,
        )))
    })
}

/// Empties a shared cache, as `/flush_cache` does.
pub fn flush_shared(cache: &SharedCache) {
    lock(cache).flush();
}

/// Locks a shared cache; a request whose engine code panicked while holding it leaves a tree that is still
/// whole (no method of [`PrefixCache`] panics half-way), so the lock is taken back.
pub(crate) fn lock(cache: &SharedCache) -> MutexGuard<'_, PrefixCache> {
    cache.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One request's use of the cache, by its release's rules ([`CacheInserts`]): the matches of its items
/// when it starts, each item's prompt after its prefill, its prompt and output when it ends, and the holds
/// that keep a running item's prefix from eviction.
#[derive(Debug)]
pub(crate) struct CacheLink {
    cache: SharedCache,
    rules: CacheInserts,
    /// Each item's hold, while it runs, and its `cached_tokens`.
    items: Vec<(Option<Hold>, usize)>,
}

/// The longest hit an item may have (the scheduler's `_compute_max_prefix_len`): all but its prompt's last
/// token, so that one is computed and gives the first output's logits, and no further than the first
/// position whose input logprob it asked for.
pub fn match_limit(request: &ItemRequest) -> usize {
    let all_but_last = request.input_ids.len().saturating_sub(1);
    match request.return_logprob {
        true => all_but_last.min(request.logprob_start),
        false => all_but_last,
    }
}

impl CacheLink {
    /// Matches the items of `plan` that will run (`running[i]`) against the cache, in item order, as they
    /// enter one prefill batch: none sees another's prompt. With `n > 1` SGLang's tokenizer manager first
    /// sends each prompt alone with no new tokens (`_handle_parallel_sampling`), which leaves it whole in the
    /// cache, so every sample then hits all but its last token.
    pub(crate) fn start(
        cache: &SharedCache,
        rules: CacheInserts,
        plan: &GeneratePlan,
        running: impl Fn(usize) -> bool,
    ) -> CacheLink {
        let n = plan.items.len();
        let mut tree = lock(cache);
        if plan.parallel_sample_num > 1 {
            for group in plan.items.chunks(plan.parallel_sample_num) {
                let request = &group[0].request;
                let (_, hold) = tree.match_prefix(&request.input_ids, match_limit(request));
                let whole = tree.insert(&request.input_ids);
                tree.release(hold);
                tree.release(whole);
            }
        }
        let mut items = Vec::with_capacity(n);
        for (i, item) in plan.items.iter().enumerate() {
            if !running(i) {
                items.push((None, 0));
                continue;
            }
            let (hit, hold) =
                tree.match_prefix(&item.request.input_ids, match_limit(&item.request));
            items.push((Some(hold), hit));
        }
        drop(tree);
        CacheLink {
            cache: Arc::clone(cache),
            rules,
            items,
        }
    }

    /// Item `i`'s `cached_tokens`.
    pub(crate) fn cached(&self, i: usize) -> usize {
        self.items[i].1
    }

    /// Item `i` has made its first token: its prefill is done and the cache keys its prompt (and, where
    /// the release says so, that token). `tokens` is its prompt and output so far.
    pub(crate) fn prefilled(&mut self, i: usize, tokens: &[u32], prompt_len: usize) {
        let keep = prompt_len + usize::from(self.rules.prefill_first_token);
        self.replace_hold(i, &tokens[..keep.min(tokens.len())]);
    }

    /// Item `i` has ended: the cache keeps its prompt and output, without the last output token unless the
    /// release keeps it; an item aborted before its first token was never prefilled and leaves nothing.
    pub(crate) fn ended(&mut self, i: usize, tokens: &[u32], prompt_len: usize, aborted: bool) {
        let outputs = tokens.len() - prompt_len;
        let keeps_last = match aborted {
            true => self.rules.abort_last_token,
            false => self.rules.finish_last_token,
        };
        if aborted && outputs == 0 {
            self.release(i);
            return;
        }
        let drop_last = usize::from(outputs > 0 && !keeps_last);
        let mut tree = lock(&self.cache);
        let hold = tree.insert(&tokens[..tokens.len() - drop_last]);
        tree.release(hold);
        if let Some(old) = self.items[i].0.take() {
            tree.release(old);
        }
    }

    fn replace_hold(&mut self, i: usize, tokens: &[u32]) {
        let mut tree = lock(&self.cache);
        let hold = tree.insert(tokens);
        if let Some(old) = self.items[i].0.replace(hold) {
            tree.release(old);
        }
    }

    pub(crate) fn release(&mut self, i: usize) {
        if let Some(hold) = self.items[i].0.take() {
            lock(&self.cache).release(hold);
        }
    }
}

impl Drop for CacheLink {
    /// A request dropped before its items ended (its client went away) gives back what they held.
    fn drop(&mut self) {
        if self.items.iter().all(|(hold, _)| hold.is_none()) {
            return;
        }
        let mut tree = lock(&self.cache);
        for hold in self.items.iter_mut().filter_map(|(hold, _)| hold.take()) {
            tree.release(hold);
        }
    }
}

/// A node's children by the first page of their keys: by the token itself when pages are one token (no key
/// to allocate), else by the page's tokens.
#[derive(Debug, Clone)]
enum Children {
    Token(HashMap<u32, NodeId, BuildHasherDefault<FxHasher>>),
    Page(HashMap<Vec<u32>, NodeId, BuildHasherDefault<FxHasher>>),
}

impl Default for Children {
    fn default() -> Self {
        Children::Token(HashMap::default())
    }
}

impl Children {
    fn get(&self, page: &[u32]) -> Option<NodeId> {
        match self {
            Children::Token(map) => map.get(&page[0]).copied(),
            Children::Page(map) => map.get(page).copied(),
        }
    }

    /// Adds a child; the first child of a tree of pages longer than a token turns the map into pages.
    fn insert(&mut self, page: &[u32], child: NodeId) {
        if let (Children::Token(map), true) = (&*self, page.len() > 1) {
            debug_assert!(map.is_empty(), "one tree has one page size");
            *self = Children::Page(HashMap::default());
        }
        match self {
            Children::Token(map) => map.insert(page[0], child),
            Children::Page(map) => map.insert(page.to_vec(), child),
        };
    }

    fn remove(&mut self, page: &[u32]) {
        match self {
            Children::Token(map) => map.remove(&page[0]),
            Children::Page(map) => map.remove(page),
        };
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match self {
            Children::Token(map) => map.len(),
            Children::Page(map) => map.len(),
        }
    }

    #[cfg(test)]
    fn values(&self) -> Vec<NodeId> {
        match self {
            Children::Token(map) => map.values().copied().collect(),
            Children::Page(map) => map.values().copied().collect(),
        }
    }
}

/// Hashes a child's first page: token ids need no protection from chosen collisions (a client can only slow
/// its own server), so the multiply-rotate hash of rustc's `FxHasher` replaces SipHash on the hot path.
#[derive(Debug, Default, Clone, Copy)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// How many leading tokens `a` and `b` share, in whole pages.
fn common_pages(a: &[u32], b: &[u32], page: usize) -> usize {
    let same = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    same / page * page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(start: u32, n: u32) -> Vec<u32> {
        (start..start + n).collect()
    }

    /// The tokens the tree holds, as the set of root-to-leaf sequences (a second reading of the tree).
    fn sequences(cache: &PrefixCache) -> Vec<Vec<u32>> {
        fn visit(
            cache: &PrefixCache,
            node: NodeId,
            prefix: &mut Vec<u32>,
            out: &mut Vec<Vec<u32>>,
        ) {
            let n = &cache.nodes[node];
            let len = prefix.len();
            prefix.extend_from_slice(&n.key);
            if n.children.is_empty() && node != ROOT {
                out.push(prefix.clone());
            }
            for child in n.children.values() {
                visit(cache, child, prefix, out);
            }
            prefix.truncate(len);
        }
        let mut out = Vec::new();
        visit(cache, ROOT, &mut Vec::new(), &mut out);
        out.sort();
        out
    }

    /// A match that gives its hold straight back, as a request that finished at once would.
    fn hit(cache: &mut PrefixCache, tokens: &[u32], limit: usize) -> usize {
        let (n, hold) = cache.match_prefix(tokens, limit);
        cache.release(hold);
        n
    }

    fn put(cache: &mut PrefixCache, tokens: &[u32]) {
        let hold = cache.insert(tokens);
        cache.release(hold);
    }

    #[test]
    fn a_repeated_prompt_hits_up_to_its_limit() {
        let mut cache = PrefixCache::new(1, 1 << 20);
        let p = ids(1000, 64);
        assert_eq!(hit(&mut cache, &p, 63), 0);
        put(&mut cache, &p);
        assert_eq!(hit(&mut cache, &p, 63), 63);
        assert_eq!(hit(&mut cache, &p, 10), 10);
        let mut shared = p[..40].to_vec();
        shared.extend(ids(2000, 24));
        assert_eq!(hit(&mut cache, &shared, 63), 40);
        assert_eq!(cache.size(), 64);
    }

    #[test]
    fn a_match_that_ends_inside_a_node_splits_it_and_keeps_every_token() {
        let mut cache = PrefixCache::new(1, 1 << 20);
        put(&mut cache, &ids(0, 10));
        assert_eq!(hit(&mut cache, &ids(0, 10), 4), 4);
        assert_eq!(cache.nodes[ROOT].children.len(), 1);
        assert_eq!(sequences(&cache), vec![ids(0, 10)]);
        let mut branch = ids(0, 4);
        branch.extend([77, 78]);
        put(&mut cache, &branch);
        assert_eq!(sequences(&cache), vec![ids(0, 10), branch.clone()]);
        assert_eq!(cache.size(), 12);
        assert_eq!(hit(&mut cache, &branch, 6), 6);
    }

    #[test]
    fn pages_cut_keys_and_matches_to_whole_pages() {
        let mut cache = PrefixCache::new(16, 1 << 20);
        let p = ids(0, 64);
        put(&mut cache, &p[..60]);
        assert_eq!(cache.size(), 48);
        assert_eq!(hit(&mut cache, &p, 63), 48);
        // Differing inside the second page: only the first page is shared.
        let mut q = p.clone();
        q[20] = 9999;
        assert_eq!(hit(&mut cache, &q, 63), 16);
        put(&mut cache, &q);
        assert_eq!(cache.size(), 48 + 48);
        assert_eq!(hit(&mut cache, &q, 63), 48);
    }

    #[test]
    fn eviction_takes_the_least_recently_used_leaves_first() {
        let mut cache = PrefixCache::new(1, 30);
        let (a, b, c) = (ids(0, 10), ids(100, 10), ids(200, 10));
        put(&mut cache, &a);
        put(&mut cache, &b);
        put(&mut cache, &c);
        // Touch a, so that b is now the least recently used.
        assert_eq!(hit(&mut cache, &a, 9), 9);
        put(&mut cache, &ids(300, 5));
        assert_eq!(cache.size(), 25);
        assert_eq!(hit(&mut cache, &b, 9), 0);
        assert_eq!(hit(&mut cache, &a, 9), 9);
        assert_eq!(hit(&mut cache, &c, 9), 9);
    }

    #[test]
    fn an_insert_past_the_bound_evicts_as_many_leaves_as_it_must() {
        let mut cache = PrefixCache::new(1, 30);
        for start in [0, 100, 200] {
            put(&mut cache, &ids(start, 10));
        }
        put(&mut cache, &ids(300, 25));
        // 55 tokens for 30: the three older leaves go, oldest first, until 25 remain.
        assert_eq!(cache.size(), 25);
        assert_eq!(sequences(&cache), vec![ids(300, 25)]);
    }

    /// Every node is listed exactly when it is an unheld leaf, and the count of listed nodes says so.
    fn check_listing(cache: &PrefixCache) {
        let mut listed = 0;
        for (id, node) in cache.nodes.iter().enumerate() {
            let alive = id == ROOT || !node.key.is_empty();
            let leaf = id != ROOT && node.children.is_empty();
            assert_eq!(node.listed, alive && leaf && node.holds == 0, "node {id}");
            listed += usize::from(node.listed);
        }
        assert_eq!(cache.listed, listed);
    }

    #[test]
    fn the_eviction_order_is_rebuilt_once_stale_entries_outnumber_the_leaves() {
        let mut cache = PrefixCache::new(1, 1 << 20);
        let leaves: Vec<Vec<u32>> = (0..100).map(|i| ids(1000 * i, 5)).collect();
        for leaf in &leaves {
            put(&mut cache, leaf);
        }
        check_listing(&cache);
        assert_eq!(cache.listed, 100);
        // Each match of a listed leaf stamps it again (a new entry) and holds it; its release lists it anew
        // (another): the heap grows by two a match, and is rebuilt to its 100 live entries just past 2 * 100 +
        // 1,024.
        let mut lengths = Vec::new();
        for round in 0..12 {
            for leaf in &leaves {
                hit(&mut cache, leaf, 5);
            }
            check_listing(&cache);
            lengths.push(cache.evictable.len());
            assert!(cache.evictable.len() <= 2 * 100 + 1024, "round {round}");
        }
        // 100 entries, then 200 more per round until the release of the 63rd leaf of round 6 finds 1,226 and
        // rebuilds to 100; the other 37 leaves add 74.
        assert_eq!(lengths[..6], [300, 500, 700, 900, 1100, 174]);
        // Eviction still takes the least recently used first: the leaf matched last stays.
        cache.evict(cache.size - 5);
        assert_eq!(sequences(&cache), vec![leaves[99].clone()]);
        check_listing(&cache);
    }

    #[test]
    fn the_child_hash_tells_tokens_and_pages_apart() {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let hasher = BuildHasherDefault::<FxHasher>::default();
        let tokens: std::collections::HashSet<u64> =
            (0..10_000u32).map(|t| hasher.hash_one(t)).collect();
        assert_eq!(tokens.len(), 10_000);
        let pages: std::collections::HashSet<u64> = (0..10_000u32)
            .map(|t| hasher.hash_one(vec![t / 100, t % 100, 7, 7]))
            .collect();
        assert_eq!(pages.len(), 10_000);
    }

    #[test]
    fn a_parent_left_without_children_becomes_evictable() {
        let mut cache = PrefixCache::new(1, 1 << 20);
        let mut x = ids(0, 5);
        x.extend(ids(50, 5));
        let mut y = ids(0, 5);
        y.extend(ids(60, 5));
        put(&mut cache, &x);
        put(&mut cache, &y);
        assert_eq!(cache.size(), 15);
        cache.capacity = 0;
        cache.evict(15);
        assert_eq!(cache.size(), 0);
        assert_eq!(sequences(&cache), Vec::<Vec<u32>>::new());
    }

    #[test]
    fn held_nodes_are_not_evicted_until_released() {
        let mut cache = PrefixCache::new(1, 20);
        let a = ids(0, 10);
        let held = cache.insert(&a);
        let _other = cache.insert(&ids(100, 15));
        // Over capacity, but both are held.
        assert_eq!(cache.size(), 25);
        cache.release(held);
        put(&mut cache, &ids(200, 1));
        assert_eq!(hit(&mut cache, &a, 9), 0);
        assert_eq!(cache.size(), 16);
    }

    #[test]
    fn flush_empties_the_tree_and_voids_old_holds() {
        let mut cache = PrefixCache::new(1, 1 << 20);
        let held = cache.insert(&ids(0, 8));
        cache.flush();
        assert_eq!(cache.size(), 0);
        assert_eq!(hit(&mut cache, &ids(0, 8), 7), 0);
        put(&mut cache, &ids(0, 8));
        cache.release(held);
        assert_eq!(hit(&mut cache, &ids(0, 8), 7), 7);
    }

    #[test]
    fn the_tree_counts_held_tokens_once_and_each_hold_s_length() {
        let mut cache = PrefixCache::new(1, 1 << 20);
        let a = cache.insert(&ids(0, 10));
        assert_eq!(
            cache.in_use(),
            InUse {
                protected: 10,
                held: 10
            }
        );
        // A second request holding 6 of them: still 10 protected; 16 held between the two.
        let (hit, b) = cache.match_prefix(&ids(0, 10), 6);
        assert_eq!(hit, 6);
        assert_eq!(
            cache.in_use(),
            InUse {
                protected: 10,
                held: 16
            }
        );
        // A branch after the first 6 tokens, held by a third: 4 more protected.
        let mut branch = ids(0, 6);
        branch.extend(ids(50, 4));
        let c = cache.insert(&branch);
        assert_eq!(
            cache.in_use(),
            InUse {
                protected: 14,
                held: 26
            }
        );
        cache.release(a);
        assert_eq!(
            cache.in_use(),
            InUse {
                protected: 10,
                held: 16
            },
            "the first's tail is evictable"
        );
        cache.release(b);
        cache.release(c);
        assert_eq!(cache.in_use(), InUse::default());
        assert_eq!(cache.size(), 14, "released, not evicted");
    }

    #[test]
    fn a_flush_voids_what_holds_counted() {
        let mut cache = PrefixCache::new(4, 1 << 20);
        let hold = cache.insert(&ids(0, 10));
        assert_eq!(
            cache.in_use(),
            InUse {
                protected: 8,
                held: 8
            },
            "whole pages"
        );
        cache.flush();
        assert_eq!(cache.in_use(), InUse::default());
        cache.release(hold);
        assert_eq!(
            cache.in_use(),
            InUse::default(),
            "a void hold gives nothing back"
        );
    }
}
