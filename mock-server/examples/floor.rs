//! The floor under one `/generate` answer, for `bench/loopback.py`: the time to generate the answer without
//! encoding it, and to encode the finished answer, each through the server's own code (`support/answer.rs`),
//! with no HTTP around them.
//!
//! `cargo run --release --example floor -- TOKENS [REPS] [MODEL_PATH]` prints one JSON line: the best time per
//! answer of each half over REPS timed runs (each run repeats it for about 20 ms), and the body's size. With
//! MODEL_PATH the answer is the server's with `--model-path MODEL_PATH` (a toy policy's directory, say).

use std::hint::black_box;
use std::time::{Duration, Instant};

#[path = "support/answer.rs"]
mod answer;

/// The best time per call of `f` over `reps` runs of about 20 ms each.
fn best<T>(reps: u32, mut f: impl FnMut() -> T) -> Duration {
    let started = Instant::now();
    let mut inner = 0u32;
    while started.elapsed() < Duration::from_millis(20) {
        black_box(f());
        inner += 1;
    }
    (0..reps)
        .map(|_| {
            let run = Instant::now();
            for _ in 0..inner {
                black_box(f());
            }
            run.elapsed() / inner
        })
        .min()
        .unwrap_or_default()
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let tokens: u32 = args.next().unwrap_or_else(|| "1024".into()).parse()?;
    let reps: u32 = args.next().unwrap_or_else(|| "10".into()).parse()?;
    let answer = match args.next() {
        None => answer::Answer::new(tokens),
        Some(model_path) => answer::Answer::serving(
            tokens,
            mock_server::ServerConfig {
                model_path,
                ..Default::default()
            },
        ),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let run = answer.generate();
    let bytes = answer.encode(&run).len();
    let generate_us = best(reps, || answer.generate()).as_secs_f64() * 1e6;
    let encode_us = best(reps, || answer.encode(&run)).as_secs_f64() * 1e6;
    println!(
        r#"{{"tokens":{tokens},"generate_us":{generate_us:.3},"encode_us":{encode_us:.3},"bytes":{bytes}}}"#
    );
    Ok(())
}
