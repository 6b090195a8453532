//! The witness against the client's own samples: random multi-turn rollouts built by `rollout-client` pass the
//! server's audit as the JSON a slime trainer would read (`Sample` serialises in slime's layout), and any single
//! corruption of one channel at one position of one sample is reported at that position, with its kind.

use mock_server::ServerConfig;
use proptest::prelude::*;
use rollout_client::rollout::{self, RolloutConfig};
use rollout_client::{Sample, SamplingParams};
use serde_json::{Value, json};

use crate::common::{Mock, Tool, block_on, runner, runtime, with_channels};

/// A random multi-turn rollout and one corruption of it.
#[derive(Debug, Clone)]
struct Case {
    prompt: Vec<u32>,
    max_new_tokens: u32,
    temperature: f32,
    env_turns: usize,
    env_tokens: Vec<u32>,
    seed: u64,
    routes: bool,
    stream: bool,
    corruption: Corruption,
    /// Where the corruption lands, as a fraction of the positions it may land on.
    at: f64,
}

/// One way a trainer's code breaks one channel at one position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Corruption {
    /// A trained token's logprob becomes `None`.
    NullLogprob,
    /// ... becomes 0.0.
    ZeroLogprob,
    /// ... becomes another value.
    OtherLogprob,
    /// The last logprob is dropped.
    DropLastLogprob,
    /// A generated token is filed as environment output (mask 0).
    UntrainGenerated,
    /// An environment token is trained (mask 1).
    TrainEnvironment,
    /// A trained token's id changes (a retokenization).
    ChangeToken,
    /// A routes row changes.
    ChangeRouteRow,
    /// A trained token is labelled with another weight version.
    Relabel,
}

const CORRUPTIONS: [Corruption; 9] = [
    Corruption::NullLogprob,
    Corruption::ZeroLogprob,
    Corruption::OtherLogprob,
    Corruption::DropLastLogprob,
    Corruption::UntrainGenerated,
    Corruption::TrainEnvironment,
    Corruption::ChangeToken,
    Corruption::ChangeRouteRow,
    Corruption::Relabel,
];

prop_compose! {
    fn case()(
        prompt in prop::collection::vec(256u32..151_000, 1..8),
        max_new_tokens in 1u32..16,
        temperature in prop::sample::select(vec![0.0f32, 0.7, 1.0, 1.5]),
        env_turns in 0usize..4,
        env_tokens in prop::collection::vec(256u32..151_000, 1..4),
        seed in 0u64..1_000_000,
        routes in any::<bool>(),
        stream in any::<bool>(),
        corruption in prop::sample::select(CORRUPTIONS.to_vec()),
        at in 0.0f64..1.0,
    ) -> Case {
        Case { prompt, max_new_tokens, temperature, env_turns, env_tokens, seed, routes, stream, corruption, at }
    }
}

async fn rollout(mock: &Mock, c: &Case) -> Sample {
    let mut s = Sample::new("p", c.prompt.clone());
    s.index = Some(0);
    let config = RolloutConfig {
        sampling_params: SamplingParams {
            max_new_tokens: Some(c.max_new_tokens),
            temperature: Some(c.temperature),
            sampling_seed: Some(c.seed),
            ..SamplingParams::default()
        },
        stream: c.stream,
        return_routed_experts: c.routes,
        ..RolloutConfig::default()
    };
    let mut tool = Tool {
        turns: c.env_turns,
        tokens: c.env_tokens.clone(),
    };
    rollout::multi_turn(&mock.client(), &mut s, &config, &mut tool, c.env_turns + 1)
        .await
        .expect("a valid rollout succeeds");
    s
}

/// The position a corruption lands on among `candidates`, or `None` when there is none.
fn pick(candidates: &[usize], at: f64) -> Option<usize> {
    let i = (at * candidates.len() as f64) as usize;
    candidates
        .get(i.min(candidates.len().saturating_sub(1)))
        .copied()
}

/// Applies `c.corruption` to the sample's JSON; the position it lands on and the kinds that may report it, or
/// `None` when the sample has nothing it could land on (no environment token to train, no routes).
fn corrupt(c: &Case, s: &Value) -> Option<(Value, usize, &'static [&'static str])> {
    let mut out = s.clone();
    let mask: Vec<u64> = serde_json::from_value(s["loss_mask"].clone()).expect("a mask");
    let trained: Vec<usize> = (0..mask.len()).filter(|&i| mask[i] == 1).collect();
    let untrained: Vec<usize> = (0..mask.len()).filter(|&i| mask[i] == 0).collect();
    let prompt_len = s["tokens"].as_array().map_or(0, Vec::len) - mask.len();
    let lp = |out: &mut Value, p: usize, v: Value| out["rollout_log_probs"][p] = v;
    Some(match c.corruption {
        Corruption::NullLogprob => {
            let p = pick(&trained, c.at)?;
            lp(&mut out, p, Value::Null);
            (out, p, &["logprob-none"])
        }
        Corruption::ZeroLogprob => {
            let p = pick(&trained, c.at)?;
            // A logprob of exactly 0.0 is a token of probability 1: nothing to zero.
            if s["rollout_log_probs"][p].as_f64() == Some(0.0) {
                return None;
            }
            lp(&mut out, p, json!(0.0));
            (out, p, &["logprob-zero"])
        }
        Corruption::OtherLogprob => {
            let p = pick(&trained, c.at)?;
            let sent = s["rollout_log_probs"][p].as_f64().expect("a logprob");
            lp(&mut out, p, json!(sent - 1.0));
            (
                out,
                p,
                &[
                    "logprob-differs",
                    "logprob-shifted",
                    "logprob-from-other-request",
                ],
            )
        }
        Corruption::DropLastLogprob => {
            let list = out["rollout_log_probs"].as_array_mut()?;
            list.pop()?;
            (out, mask.len() - 1, &["logprobs-length"])
        }
        Corruption::UntrainGenerated => {
            let p = pick(&trained, c.at)?;
            out["loss_mask"][p] = json!(0);
            (out, p, &["generated-untrained"])
        }
        Corruption::TrainEnvironment => {
            let p = pick(&untrained, c.at)?;
            out["loss_mask"][p] = json!(1);
            (out, p, &["never-generated"])
        }
        Corruption::ChangeToken => {
            let p = pick(&trained, c.at)?;
            let id = out["tokens"][prompt_len + p].as_u64().expect("an id");
            out["tokens"][prompt_len + p] = json!(if id == 0 { 1 } else { id - 1 });
            (out, p, &["never-generated"])
        }
        Corruption::ChangeRouteRow => {
            let rows = out["rollout_routed_experts"].as_array_mut()?;
            // Rows up to the last trained token are the server's; flip one expert id of one of them.
            let last = prompt_len + trained.last()?;
            let candidates: Vec<usize> = (0..rows.len().min(last)).collect();
            let r = pick(&candidates, c.at)?;
            let first = rows[r][0].as_i64().expect("an expert id");
            rows[r][0] = json!(first ^ 1);
            (out, r, &["routes-differ"])
        }
        Corruption::Relabel => {
            let p = pick(&trained, c.at)?;
            // Per-token spans, one of them relabelled.
            let spans: Vec<Value> = s["weight_version_spans"]
                .as_array()?
                .iter()
                .flat_map(|span| {
                    let (start, end) = (span["start"].as_u64()?, span["end"].as_u64()?);
                    Some((start..end).map(move |i| (i, span["version"].clone())))
                })
                .flatten()
                .map(|(i, version)| {
                    let version = if i as usize == p {
                        json!("stale")
                    } else {
                        version
                    };
                    json!({"version": version, "start": i, "end": i + 1})
                })
                .collect();
            out["weight_version_spans"] = Value::Array(spans);
            (out, p, &["version-mismatch"])
        }
    })
}

#[test]
fn the_clients_samples_pass_the_audit_and_any_single_corruption_is_reported_where_it_is() {
    let rt = runtime();
    let mock = Mock::start(
        &rt,
        ServerConfig {
            ledger: true,
            ..with_channels()
        },
    );
    let corrupted = std::cell::Cell::new(0);
    runner(48)
        .run(&case(), |c| {
            let sample = block_on(&rt, rollout(&mock, &c));
            let json = serde_json::to_value(&sample).expect("a sample serialises");
            let report = mock.audit(std::slice::from_ref(&json));
            prop_assert!(report.ok, "a faithful sample:\n{}", report.text());
            prop_assert_eq!(report.trained_tokens, sample.generated_tokens());
            let Some((bad, p, kinds)) = corrupt(&c, &json) else {
                return Ok(());
            };
            corrupted.set(corrupted.get() + 1);
            let report = mock.audit(&[bad]);
            let at = report
                .problems
                .iter()
                .find(|problem| problem.start <= p && p < problem.end.max(problem.start + 1));
            prop_assert!(
                at.is_some_and(|problem| kinds.contains(&problem.kind.name())),
                "{:?} at {p}: expected one of {kinds:?} there, got:\n{}",
                c.corruption,
                report.text()
            );
            if c.corruption == Corruption::ChangeToken {
                prop_assert_eq!(at.map(|problem| problem.start), Some(p));
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let corrupted = corrupted.get();
    assert!(
        corrupted > 24,
        "only {corrupted} cases had a corruption to make"
    );
}
