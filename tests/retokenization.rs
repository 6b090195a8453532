//! Token in, token out over a real vocabulary. A byte-level BPE such as Qwen's does not give back the ids a
//! model generated when their text is encoded again: the model may pick any token, the encoder picks the
//! merges of its ranks (miles #1319, NeMo-Gym #1787, slime #2263, TRL #5144). A trainer that re-tokenizes the
//! conversation therefore trains on ids the policy never produced, with logprobs of other tokens. These tests
//! show that drift on the mock with Qwen's tokenizer, and that a multi-turn rollout keeps the server's ids.

use clap::Parser;
use mock_server::ServerConfig;
use rollout_cli::command::{self, RolloutArgs};
use rollout_client::Sample;
use rollout_client::request::SamplingParams;
use rollout_client::rollout::{self, EnvTurn, Environment, RolloutConfig};

use crate::common::{Mock, Provenance, assert_aligned, assert_oracle_replay, runtime};
use crate::qwen_tokenizer::{qwen_tokenizer, qwen_tokenizer_dir};

const PROMPT: &str = "<|im_start|>user\nWhat is 12 × 7? Check it with the calculator.<|im_end|>\n\
                      <|im_start|>assistant\n";
/// A tool result as Qwen's template renders it after an assistant turn that ended on `<|im_end|>`, and the
/// next assistant turn's start.
const TOOL_TURN: &str = "\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n\
                         <|im_start|>assistant\n";
const TURNS: usize = 3;
/// Room for three turns, each of which ends on `<|im_end|>` (the model's end-of-turn weight rises with the
/// turn's length).
const BUDGET: u32 = 2048;

/// Answers each generated turn with the tool result, encoded by the tokenizer as a trainer's environment does.
struct Calculator {
    left: usize,
    tokens: Vec<u32>,
}

impl Environment for Calculator {
    async fn step(&mut self, _sample: &Sample) -> Option<EnvTurn> {
        (self.left > 0).then(|| {
            self.left -= 1;
            EnvTurn {
                tokens: self.tokens.clone(),
                text: TOOL_TURN.into(),
            }
        })
    }
}

#[test]
fn generated_ids_drift_through_text_and_the_multi_turn_sample_keeps_the_servers() {
    let tokenizer = qwen_tokenizer();
    let rt = runtime();
    let mock = Mock::start(
        &rt,
        ServerConfig {
            tokenizer: Some(tokenizer.clone()),
            ..ServerConfig::default()
        },
    );
    let tool = tokenizer.encode(TOOL_TURN);
    for stream in [false, true] {
        let params = SamplingParams {
            max_new_tokens: Some(BUDGET),
            ..SamplingParams::default()
        };
        let config = RolloutConfig {
            sampling_params: params.clone(),
            stream,
            ..RolloutConfig::default()
        };
        let mut sample = Sample::new(PROMPT, tokenizer.encode(PROMPT));
        let mut env = Calculator {
            left: TURNS - 1,
            tokens: tool.clone(),
        };
        let client = mock.client();
        rt.block_on(rollout::multi_turn(
            &client,
            &mut sample,
            &config,
            &mut env,
            TURNS,
        ))
        .expect("the rollout succeeds");
        assert_aligned(&sample);
        let spans = sample.generated_spans();
        assert_eq!(spans.len(), TURNS, "stream {stream}: generated turns");
        // Token out: every span is the server's answer to the ids before it, id for id and logprob for logprob.
        assert_oracle_replay(
            &mock.oracle,
            &sample,
            &params,
            Provenance {
                environment_tokens: (spans.len() - 1) * tool.len(),
                ..Provenance::default()
            },
            |offset| BUDGET - offset as u32,
        );

        // The drift a text round trip makes: the generated ids, decoded and encoded again, are other ids.
        let response = sample.response_tokens();
        let drifted = spans
            .iter()
            .filter(|span| {
                let ids = &response[span.start..span.end()];
                tokenizer.encode(&tokenizer.decode(ids, false)) != ids
            })
            .count();
        assert!(drifted > 0, "stream {stream}: no generated turn drifts");
        // And the whole conversation re-tokenized from its text is not the sequence the logprobs belong to,
        // while the sample's text is each turn's decode (special tokens skipped, as the server's `text`)
        // between the tool results.
        let text = tokenizer.decode(sample.tokens(), false);
        assert_ne!(tokenizer.encode(&text), sample.tokens(), "stream {stream}");
        let turns: Vec<String> = spans
            .iter()
            .map(|span| tokenizer.decode(&response[span.start..span.end()], true))
            .collect();
        assert_eq!(sample.response, turns.join(TOOL_TURN), "stream {stream}");
    }
}

/// `rollout --tokenizer`: the prompts are the model's chat template around each question, tokenized with the
/// model's tokenizer (as slime sends `input_ids`), and the embedded mock answers in the same vocabulary, so every
/// sample's ids decode to its text.
#[test]
fn the_rollout_command_renders_and_tokenizes_prompts_with_the_models_tokenizer() {
    let tokenizer = qwen_tokenizer();
    let output = std::env::temp_dir().join(format!("retokenization-{}.jsonl", std::process::id()));
    let args = RolloutArgs::parse_from([
        "rollout",
        "--no-progress",
        "-n",
        "2",
        "--tokenizer",
        qwen_tokenizer_dir().to_str().expect("a UTF-8 path"),
        "--output",
        output.to_str().expect("a UTF-8 path"),
    ]);
    let report = runtime()
        .block_on(command::run_command(args))
        .expect("the run works");
    assert_eq!(report.summary.failed_groups, 0);
    let file = std::fs::File::open(&output).expect("the output exists");
    let samples =
        rollout_client::sample::read_jsonl(std::io::BufReader::new(file)).expect("valid samples");
    std::fs::remove_file(&output).ok();
    let questions = rollout_cli::prompts::builtin();
    assert_eq!(samples.len(), 2 * questions.len());
    for s in &samples {
        let question = &questions[s.group_index.expect("a group")].prompt;
        // The test template's user turn, written out by hand.
        let prompt = format!("<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n");
        assert_eq!(s.prompt, rollout_client::Prompt::Text(prompt.clone()));
        assert_eq!(
            &s.tokens()[..s.prompt_len()],
            tokenizer.encode(&prompt).as_slice()
        );
        assert_eq!(s.response, tokenizer.decode(s.response_tokens(), true));
        assert_aligned(s);
    }
}
