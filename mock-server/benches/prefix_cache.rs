//! Criterion benchmarks of the radix prefix cache, as one request uses it: a match when it starts, its prompt
//! inserted after its prefill, its prompt and output inserted when it ends, each hold given back.
//!
//! Groups: `same_prompt_new_output` (a 5-token prompt again and again with 16 new tokens each time, as
//! `bench/loopback.py` sends it and as GRPO samples one prompt many times: every answer a new leaf under one
//! node), `new_prompt` (a new 1,024-token prompt each time, answered with 16 tokens: nothing hits), each in a
//! tree already at its bound of 2^20 tokens, so that every request also evicts.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use mock_server::engine::PrefixCache;

const CAPACITY: usize = 1 << 20;

/// One request's use of the cache: the match, the prefill's insert, the end's insert, the holds given back.
fn serve(cache: &mut PrefixCache, prompt: &[u32], output: &[u32], tokens: &mut Vec<u32>) -> usize {
    let (hit, matched) = cache.match_prefix(prompt, prompt.len() - 1);
    let prefilled = cache.insert(prompt);
    cache.release(matched);
    tokens.clear();
    tokens.extend_from_slice(prompt);
    tokens.extend_from_slice(&output[..output.len() - 1]);
    let ended = cache.insert(tokens);
    cache.release(prefilled);
    cache.release(ended);
    hit
}

/// Token ids that differ from every earlier call's (a counter spread over a 150,000-id vocabulary).
fn fresh(counter: &mut u64, n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| {
            *counter += 1;
            (counter.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as u32 % 150_000
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut tokens = Vec::new();
    let mut counter = 0;

    let prompt = [785, 6722, 315, 9625, 374];
    let mut cache = PrefixCache::new(1, CAPACITY);
    while cache.size() + 32 < CAPACITY {
        let output = fresh(&mut counter, 16);
        serve(&mut cache, &prompt, &output, &mut tokens);
    }
    c.bench_function("prefix_cache/same_prompt_new_output", |b| {
        b.iter(|| {
            let output = fresh(&mut counter, 16);
            black_box(serve(&mut cache, &prompt, &output, &mut tokens))
        });
    });

    let mut cache = PrefixCache::new(1, CAPACITY);
    while cache.size() + 2048 < CAPACITY {
        let prompt = fresh(&mut counter, 1024);
        serve(&mut cache, &prompt, &fresh(&mut counter, 16), &mut tokens);
    }
    c.bench_function("prefix_cache/new_prompt", |b| {
        b.iter(|| {
            let prompt = fresh(&mut counter, 1024);
            let output = fresh(&mut counter, 16);
            black_box(serve(&mut cache, &prompt, &output, &mut tokens))
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
