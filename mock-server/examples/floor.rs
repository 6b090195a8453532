//! The floor under one `/generate` answer, for `bench/loopback.py`: the time to generate the answer without
//! encoding it, and to encode the finished answer, each through the server's own code (the plan's step core
//! run to its end as the non-stream driver runs it, then `wire::encode_body`), with no HTTP around them.
//!
//! `cargo run --release --example floor -- TOKENS [REPS]` prints one JSON line: the best time per answer of
//! each half over REPS timed runs (each run repeats it for about 20 ms).

use std::hint::black_box;
use std::time::{Duration, Instant};

use mock_server::ServerConfig;
use mock_server::engine::{Interventions, Run};
use mock_server::oracle::Oracle;
use mock_server::wire::{EncodeCtx, encode_body};

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
    // The loopback benchmark's request.
    let body = format!(
        r#"{{"input_ids":[785,6722,315,9625,374],"sampling_params":{{"max_new_tokens":{tokens},"ignore_eos":true,"temperature":1.0}},"return_logprob":true}}"#
    );
    let oracle = Oracle::new(ServerConfig::default())?;
    let plan = oracle
        .plan(body.as_bytes())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let config = oracle.config();
    let generate = || {
        let mut run = Run::new(oracle.model(), &plan, config.profile, None);
        while !run.is_done() {
            run.tick_many(&Interventions::default(), usize::MAX);
        }
        run
    };
    let run = generate();
    let ctx = EncodeCtx::new(
        config.profile,
        oracle.model(),
        &plan,
        &config.weight_version,
    );
    let encode = || encode_body(&ctx, &plan, &run, &[0.25], 1.7e9);
    let generate_us = best(reps, generate).as_secs_f64() * 1e6;
    let encode_us = best(reps, encode).as_secs_f64() * 1e6;
    println!(r#"{{"tokens":{tokens},"generate_us":{generate_us:.3},"encode_us":{encode_us:.3}}}"#);
    Ok(())
}
