//! Writes the benchmark bodies, or times decoding them best-of-N, for `bench/compare_python.py`.
//!
//! `decode_bodies write DIR` writes `generate_4096_null_text.json` and
//! `generate_4096_with_text.json`; `decode_bodies time DIR [REPS]` prints one JSON line per body
//! and decoder with the best MB/s over REPS timed runs (each run decodes the body enough times to
//! last about 20 ms).

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use rollout_client::synth::{TokenText, decode_via_value, generate_body};
use rollout_client::turn;

const BODIES: [(&str, TokenText); 2] = [
    ("generate_4096_null_text.json", TokenText::Null),
    ("generate_4096_with_text.json", TokenText::Pieces),
];

fn best_mb_per_s(body: &[u8], reps: usize, f: impl Fn(&[u8]) -> usize) -> f64 {
    let t = Instant::now();
    let mut inner = 0;
    while t.elapsed().as_millis() < 20 {
        std::hint::black_box(f(std::hint::black_box(body)));
        inner += 1;
    }
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..inner {
            std::hint::black_box(f(std::hint::black_box(body)));
        }
        best = best.min(t.elapsed().as_secs_f64() / inner as f64);
    }
    body.len() as f64 / best / 1e6
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, dir] if cmd == "write" => {
            std::fs::create_dir_all(dir)?;
            for (name, text) in BODIES {
                let path = Path::new(dir).join(name);
                std::fs::write(&path, generate_body(4096, 42, text))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        [cmd, dir, rest @ ..] if cmd == "time" => {
            let reps: usize = rest.first().map(|r| r.parse()).transpose()?.unwrap_or(15);
            for (name, _) in BODIES {
                let path = Path::new(dir).join(name);
                let body =
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let typed = best_mb_per_s(&body, reps, |b| {
                    let t = turn::parse_single(b, true).expect("valid body");
                    t.output_ids.len() + t.logprobs.map_or(0, |l| l.len())
                });
                let value = best_mb_per_s(&body, reps, |b| {
                    let (ids, lps) = decode_via_value(b).expect("valid body");
                    ids.len() + lps.len()
                });
                println!(
                    "{{\"body\":\"{name}\",\"bytes\":{},\"rust_typed_mb_s\":{typed:.1},\"rust_value_mb_s\":{value:.1}}}",
                    body.len()
                );
            }
        }
        _ => bail!("usage: decode_bodies write DIR | decode_bodies time DIR [REPS]"),
    }
    Ok(())
}
