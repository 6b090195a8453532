//! Criterion benchmarks of the mock's model and engine: generated tokens per second, with and without logprobs.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mock_server::engine::{ItemRequest, generate};
use mock_server::model::{Model, ModelConfig, Policy};

const TOKENS: u32 = 1024;

fn item(model: &Model, return_logprob: bool, top_logprobs_num: usize) -> ItemRequest {
    let mut item = ItemRequest::new(model.tokenizer().encode("The capital of France is"));
    item.params.max_new_tokens = TOKENS;
    item.params.ignore_eos = true;
    item.return_logprob = return_logprob;
    item.top_logprobs_num = top_logprobs_num;
    item
}

fn engine(c: &mut Criterion) {
    let model = Arc::new(Model::new(ModelConfig::default()).expect("default config is valid"));
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(u64::from(TOKENS)));
    for (name, logprob, top) in [
        ("tokens", false, 0),
        ("tokens+logprobs", true, 0),
        ("tokens+logprobs+top5", true, 5),
    ] {
        let request = item(&model, logprob, top);
        group.bench_function(name, |b| {
            b.iter(|| {
                let generation = generate(model.clone(), black_box(request.clone()));
                black_box(generation.output_ids().len())
            });
        });
    }
    // The same request under a policy whose every bucket moves every slot (MODEL.md section 14): each step then
    // multiplies the nine weights and sorts them.
    let rows = (0..8u64)
        .map(|b| std::array::from_fn(|s| ((b * 9 + s as u64) % 7) as f32 * 0.6 - 1.5 + 0.01))
        .collect();
    let weighted = Arc::new(
        Model::new(ModelConfig::default())
            .expect("default config is valid")
            .with_policy(Policy::new(rows).expect("finite offsets")),
    );
    let request = item(&weighted, true, 0);
    group.bench_function("tokens+logprobs under a policy", |b| {
        b.iter(|| {
            let generation = generate(weighted.clone(), black_box(request.clone()));
            black_box(generation.output_ids().len())
        });
    });
    group.finish();

    let mut group = c.benchmark_group("tokenizer");
    let text = generate(model.clone(), item(&model, false, 0))
        .text()
        .to_owned();
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_function("encode", |b| {
        b.iter(|| model.tokenizer().encode(black_box(&text)))
    });
    let ids = model.tokenizer().encode(&text);
    group.bench_function("decode", |b| {
        b.iter(|| model.tokenizer().decode(black_box(&ids), true))
    });
    group.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
