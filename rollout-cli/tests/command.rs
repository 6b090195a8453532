//! The `rollout` command and its library path end to end on the embedded mock: tokenization, groups, rewards,
//! GRPO advantages, the JSONL file, and streamed runs equal to non-streamed ones.

use clap::Parser;
use mock_server::{Server, ServerConfig};
use rollout_cli::command::{self, RolloutArgs};
use rollout_cli::prompts::{self, LabeledPrompt};
use rollout_cli::run::{self, RunConfig};
use rollout_client::rollout::RolloutConfig;
use rollout_client::sample::read_jsonl;
use rollout_client::tokenize::PromptTokenizer;
use rollout_client::{Client, GenerateRequest, Sample, SamplingParams};

async fn start(config: ServerConfig) -> Server {
    Server::start(ServerConfig { port: 0, ..config })
        .await
        .expect("mock starts")
}

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rollout-cli-test-{}-{name}", std::process::id()))
}

#[tokio::test]
async fn server_tokenization_equals_the_mock_tokenizer() {
    let config = ServerConfig::default();
    let oracle = mock_server::oracle::Oracle::new(config.clone()).unwrap();
    let server = start(config).await;
    let client = Client::builder(server.url()).build().unwrap();
    for text in [
        "What is 17 + 25?",
        "<|im_start|>user\nka rito<|im_end|>\n",
        "ü 1",
    ] {
        let ids = PromptTokenizer::Server.encode(&client, text).await.unwrap();
        assert_eq!(ids, oracle.model().tokenizer().encode(text), "{text:?}");
    }
}

#[tokio::test]
async fn the_default_command_writes_rewarded_samples_with_advantages() {
    let output = temp_path("default.jsonl");
    let args = RolloutArgs::parse_from([
        "rollout",
        "--no-progress",
        "--output",
        output.to_str().unwrap(),
    ]);
    let report = command::run_command(args)
        .await
        .expect("the default run works");
    let s = &report.summary;
    assert_eq!((s.prompts, s.samples), (16, 128));
    assert_eq!(report.scripted_prompts, 12);
    // Prompts 0, 1, 4, 5, 8, 9, 12, 13 are scripted to answer correctly: 8 groups of 8.
    assert_eq!(s.correct, 64);
    // The DAPO overlong penalty separates long from short pseudo-word answers inside the
    // unscripted groups, so some advantages are not 0.
    assert!(s.nonzero_advantages > 0);
    assert!(s.rewards.min < 0.0);
    assert!(s.logprobs.max <= 0.0 && s.logprobs.min.is_finite());
    let text = report.to_string();
    assert!(text.contains("reward") && text.contains("advantage") && text.contains("logprob"));

    let samples = read_jsonl(std::io::BufReader::new(
        std::fs::File::open(&output).unwrap(),
    ))
    .expect("the file reads back as valid samples");
    std::fs::remove_file(&output).ok();
    assert_eq!(samples.len(), 128);
    for smp in &samples {
        assert!(smp.reward.is_some());
        assert!(smp.extra["advantage"].is_f64());
        assert_eq!(smp.rollout_log_probs().len(), smp.response_length());
    }
}

#[tokio::test]
async fn multi_agent_command_shapes_rewards() {
    let output = temp_path("ma.jsonl");
    let args = RolloutArgs::parse_from([
        "rollout",
        "--no-progress",
        "--multi-agent",
        "-n",
        "2",
        "--output",
        output.to_str().unwrap(),
    ]);
    let report = command::run_command(args).await.expect("multi-agent run");
    std::fs::remove_file(&output).ok();
    let s = &report.summary;
    assert_eq!(s.rollouts, 32, "16 prompts x 2 agent runs");
    // The shaped values of a 0/1 reward model: 0, 0.8 and 1.2.
    assert!((s.rewards.max - 1.2).abs() < 1e-12, "{:?}", s.rewards);
    assert!(s.nonzero_advantages > 0);
    // Every token an agent generated is trained on (issue #1976 filed them untrained or dropped them): the run
    // itself holds each group's samples against the tokens the server generated for it.
    assert!(s.generated_tokens > 0);
    assert_eq!(s.trained_tokens, s.generated_tokens);
    assert_eq!(
        s.response_tokens, s.generated_tokens,
        "agents have no environment turns"
    );
    assert_eq!((s.policy_masked_tokens, s.left_out_tokens), (0, 0));
    let text = report.to_string();
    let line = format!(
        "generated    {} = {} trained (loss mask 1) + 0 masked",
        s.generated_tokens, s.trained_tokens
    );
    assert!(text.contains(&line), "{text}");
}

/// Samples that do not hold every token the server generated for their group are refused with the counts:
/// here the model's answer filed as environment output, the quiet form of #1976.
#[tokio::test]
async fn generated_tokens_filed_as_environment_fail_the_group() {
    let server = start(ServerConfig::default()).await;
    let client = Client::builder(server.url()).build().unwrap().scoped();
    let turn = client
        .generate(&GenerateRequest::from_ids(
            vec![300, 301, 302],
            SamplingParams {
                max_new_tokens: Some(6),
                ..SamplingParams::default()
            },
        ))
        .await
        .unwrap();
    let generated = client.generated_tokens();
    assert_eq!(generated, turn.output_ids.len() as u64);
    let mut filed = Sample::new("p", vec![300, 301, 302]);
    filed
        .append_environment(&turn.output_ids, &turn.text)
        .unwrap();
    let err = run::account_group(3, generated, &[filed]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "group 3: the server generated {generated} tokens for it, but its samples hold 0 as generated \
             (trained, or masked by a named policy); a generated token was dropped, duplicated or filed as an \
             environment token"
        )
    );
    let mut trained = Sample::new("p", vec![300, 301, 302]);
    trained.apply_turn(&turn).unwrap();
    assert_eq!(
        run::account_group(3, generated, &[trained]).unwrap(),
        generated
    );
}

#[tokio::test]
async fn streamed_and_plain_runs_give_identical_samples() {
    let prompts: Vec<LabeledPrompt> = prompts::builtin().into_iter().take(4).collect();
    let server = start(rollout_cli::scripted::mock_config(&prompts)).await;
    let url = server.url();
    let client = Client::builder(&url).build().unwrap();
    let mut config = RunConfig {
        n_samples_per_prompt: 3,
        rollout: RolloutConfig {
            sampling_params: SamplingParams {
                max_new_tokens: Some(48),
                ..SamplingParams::default()
            },
            ..RolloutConfig::default()
        },
        seed: Some(5),
        ..RunConfig::default()
    };
    let plain = run::rollout(&client, &prompts, &config, None)
        .await
        .unwrap();
    config.rollout.stream = true;
    let streamed = run::rollout(&client, &prompts, &config, None)
        .await
        .unwrap();
    assert_eq!(plain.samples, streamed.samples);
    assert!(plain.failed.is_empty());
}

#[test]
fn help_names_every_flag_with_its_environment_variable() {
    use clap::CommandFactory;
    let help = RolloutArgs::command().render_long_help().to_string();
    for flag in [
        "--url",
        "--prompts",
        "--n-samples-per-prompt",
        "--max-new-tokens",
        "--temperature",
        "--top-p",
        "--top-k",
        "--concurrency",
        "--stream",
        "--multi-agent",
        "--output",
        "ROLLOUT_URL",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[test]
fn a_bad_prompts_file_is_a_typed_error_with_the_line() {
    let err =
        prompts::read_jsonl("{\"prompt\":\"a\",\"label\":\"1\"}\n{\"prompt\":3}\n".as_bytes())
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2 of the prompts file is not {\"prompt\": string, \"label\": string}"
    );
    let ok = prompts::read_jsonl("{\"prompt\":\"a\",\"label\":7}\n\n".as_bytes()).unwrap();
    assert_eq!(ok[0].label, "7");
}

/// Aborted samples are resumed as a partial rollout: the first 8 streamed generations are aborted
/// after 2 tokens, and every sample still ends completed or truncated, the resumed ones having
/// run under two engine calls. No weight update came between abort and resume, so with
/// `--mask-offpolicy-in-partial-rollout` their first tokens are on-policy and stay trained.
#[tokio::test]
async fn aborted_samples_are_resumed_by_the_run() {
    use mock_server::{Fault, FaultConfig, FaultRule, StreamFilter};
    let prompts: Vec<LabeledPrompt> = prompts::builtin().into_iter().take(4).collect();
    let mut rule = FaultRule::new("abort-running;after=2".parse::<Fault>().unwrap());
    rule.first = Some(8);
    rule.stream = Some(StreamFilter::Stream);
    let server = ServerConfig {
        faults: FaultConfig {
            seed: 0,
            rules: vec![rule],
        },
        ..ServerConfig::default()
    };
    let server = start(server).await;
    let client = Client::builder(server.url()).build().unwrap();
    let config = RunConfig {
        n_samples_per_prompt: 4,
        rollout: RolloutConfig {
            sampling_params: SamplingParams {
                max_new_tokens: Some(24),
                ..SamplingParams::default()
            },
            stream: true,
            mask_offpolicy_in_partial_rollout: true,
            ..RolloutConfig::default()
        },
        seed: Some(1),
        ..RunConfig::default()
    };
    let out = run::rollout(&client, &prompts, &config, None)
        .await
        .unwrap();
    assert!(out.failed.is_empty(), "{:?}", out.failed);
    let resumed: Vec<_> = out
        .samples
        .iter()
        .filter(|s| s.weight_versions.len() == 2)
        .collect();
    assert_eq!(resumed.len(), 8);
    for s in &out.samples {
        assert!(matches!(
            s.status,
            rollout_client::SampleStatus::Completed | rollout_client::SampleStatus::Truncated
        ));
    }
    for s in resumed {
        let versions: Vec<&str> = s
            .weight_version_spans()
            .iter()
            .map(|span| span.version.as_str())
            .collect();
        assert_eq!(versions, ["default", "default"]);
        assert_eq!(&s.loss_mask()[..2], [1, 1], "one version: on-policy");
        assert_eq!(s.policy_masked_tokens(), 0);
    }
    let summary = &out.summary;
    assert_eq!(summary.policy_masked_tokens, 0);
    assert_eq!(summary.trained_tokens, summary.generated_tokens);
}

#[tokio::test]
async fn url_mode_talks_to_any_server_without_scripts_or_seeds() {
    let server = start(ServerConfig::default()).await;
    let url = server.url();
    let output = temp_path("url.jsonl");
    let args = RolloutArgs::parse_from([
        "rollout",
        "--no-progress",
        "--url",
        &url,
        "-n",
        "2",
        "--max-new-tokens",
        "8",
        "--output",
        output.to_str().unwrap(),
    ]);
    let report = command::run_command(args).await.expect("url run");
    std::fs::remove_file(&output).ok();
    assert_eq!(report.server, url);
    assert_eq!(report.scripted_prompts, 0);
    assert_eq!(report.summary.samples, 32);
    assert_eq!(
        report.summary.correct, 0,
        "the toy model never writes the number"
    );
}

/// `--routed-experts` and `--sampling-mask` on the embedded mock, for groups and for the multi-agent system:
/// every sample in the JSONL carries routes with a row per token up to its last generated one (rows of the mock's
/// 48 layers times 8 experts) and a support per response token holding that token, the summary counts them, and
/// the samples read back with the channels. Without a bounded `--top-k` the mask request is refused before
/// anything runs, as SGLang's scheduler would refuse every request.
#[tokio::test]
async fn the_command_writes_routes_and_sampling_masks_checked() {
    for mode in [&[][..], &["--multi-agent"][..]] {
        let output = temp_path(&format!("channels{}.jsonl", mode.len()));
        let mut argv = vec![
            "rollout",
            "--no-progress",
            "--routed-experts",
            "--sampling-mask",
            "--top-k",
            "20",
            "-n",
            "2",
            "--max-new-tokens",
            "24",
            "--output",
            output.to_str().unwrap(),
        ];
        argv.extend(mode);
        let report = command::run_command(RolloutArgs::parse_from(argv))
            .await
            .expect("a run with channels");
        let s = &report.summary;
        assert!(s.samples > 0, "{mode:?}");
        assert_eq!(
            (s.routed_samples, s.masked_samples),
            (s.samples, s.samples),
            "{mode:?}"
        );
        let samples = read_jsonl(std::io::BufReader::new(
            std::fs::File::open(&output).unwrap(),
        ))
        .expect("the samples read back");
        assert_eq!(samples.len(), s.samples);
        let rows: usize = samples
            .iter()
            .map(|sample| {
                let routes = sample.rollout_routed_experts().expect("routes");
                assert_eq!(routes.row_len(), 48 * 8);
                assert_eq!(routes.rows(), sample.tokens().len() - 1);
                let (ids, offsets) = sample.rollout_top_p_tokens().expect("masks");
                for (i, token) in sample.response_tokens().iter().enumerate() {
                    let support = &ids[offsets[i] as usize..offsets[i + 1] as usize];
                    assert!(support.contains(token) && support.len() <= 20);
                }
                routes.rows()
            })
            .sum();
        assert_eq!(rows, s.route_rows);
        assert!(report.to_string().contains("checked"));
        let _ = std::fs::remove_file(&output);
    }

    // slime's top-p replay, from the embedded mock answering as slime's patched 0.5.15: every generated token
    // has a row, in the nucleus of top-p 0.9; the renormalised logprobs are the rollout's own.
    let output = temp_path("top_p.jsonl");
    let argv = [
        "rollout",
        "--no-progress",
        "--top-p-token-ids",
        "--top-p",
        "0.9",
        "--max-new-tokens",
        "24",
        "--output",
        output.to_str().unwrap(),
    ];
    let report = command::run_command(RolloutArgs::parse_from(argv))
        .await
        .expect("a run with top-p rows");
    assert_eq!(report.summary.masked_samples, report.summary.samples);
    let samples = read_jsonl(std::io::BufReader::new(
        std::fs::File::open(&output).unwrap(),
    ))
    .expect("the samples read back");
    for sample in &samples {
        let (ids, offsets) = sample.rollout_top_p_tokens().expect("rows");
        assert_eq!(offsets.len(), sample.response_length() + 1);
        for (i, token) in sample.response_tokens().iter().enumerate() {
            let row = &ids[offsets[i] as usize..offsets[i + 1] as usize];
            assert!(row.contains(token), "position {i}");
        }
        assert_eq!(
            sample.rollout_sampling_log_probs(),
            Some(sample.rollout_log_probs())
        );
    }
    let _ = std::fs::remove_file(&output);
    let both = RolloutArgs::try_parse_from(["rollout", "--sampling-mask", "--top-p-token-ids"]);
    assert!(
        both.is_err(),
        "one support per token: the flags exclude each other"
    );

    let unbounded = RolloutArgs::parse_from(["rollout", "--no-progress", "--sampling-mask"]);
    let err = command::run_command(unbounded).await.unwrap_err();
    assert!(
        matches!(err, command::CommandError::SamplingMaskTopK { top_k: -1 }),
        "{err}"
    );
}
