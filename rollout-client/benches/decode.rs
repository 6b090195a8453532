//! Decoding a 4,096-token `/generate` body with logprobs: typed visitor vs `serde_json::Value`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rollout_client::synth::{TokenText, decode_via_value, generate_body};
use rollout_client::{decode, turn};

fn decoding(c: &mut Criterion) {
    for (name, text) in [
        ("null_text", TokenText::Null),
        ("with_text", TokenText::Pieces),
    ] {
        let body = generate_body(4096, 42, text);
        let mut g = c.benchmark_group(format!("decode_4096/{name}"));
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function("typed_validated", |b| {
            b.iter(|| turn::parse_single(black_box(&body), true).expect("valid body"))
        });
        g.bench_function("typed_wire_only", |b| {
            b.iter(|| decode::decode_response(black_box(&body)).expect("valid body"))
        });
        g.bench_function("serde_json_value", |b| {
            b.iter(|| decode_via_value(black_box(&body)).expect("valid body"))
        });
        g.finish();
    }
}

criterion_group!(benches, decoding);
criterion_main!(benches);
