//! The server against the independent Python reference (`mock-server/reference/`, written from `MODEL.md`
//! alone): random requests replayed value by value, sampling frequencies by chi-square, and the reference's own
//! known-answer tests of the document's worked example.

use std::path::{Path, PathBuf};

use mock_server::{ServerConfig, SglangVersion};

use crate::common::{Live, path_arg, python};
use crate::qwen_tokenizer::{qwen_tokenizer, qwen_tokenizer_dir};

/// The server seed of the issue that found the vocabulary order broken; its exact contexts are frequency cases.
const SERVER_SEED: u64 = 7;

fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("reference")
}

/// The cross-check under every release, and with deterministic inference: the model is one, and the releases
/// differ in what a request means (0.5.3 reports the last prompt token's logprob by default and streams
/// `output_ids` as deltas; deterministic inference seeds every sample). The sampling frequencies depend on
/// neither, so they are checked once, under the default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_agrees_with_the_python_reference_under_every_release() {
    let runs = SglangVersion::all()
        .map(|version| (version, false))
        .chain([(SglangVersion::default(), true)]);
    for (sglang_version, deterministic) in runs {
        let draws = sglang_version == SglangVersion::default() && !deterministic;
        crosscheck(sglang_version, deterministic, None, draws).await;
    }
}

/// The cross-check under a toy policy's weights (`MODEL.md` section 14), large enough to reorder the candidates of
/// most contexts and to clamp some offsets at both ends: the reference reads the directory with its own
/// safetensors reader, and every logprob, top list, filter, mask, route and draw must follow the weights.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_agrees_with_the_python_reference_under_non_zero_weights() {
    let rows = (0..5u64)
        .map(|b| {
            std::array::from_fn(|s| {
                let h = mock_server::model::mix(0x5EED, b * 16 + s as u64);
                (mock_server::model::unit(h) * 12.0 - 4.0) as f32
            })
        })
        .collect();
    let policy = mock_server::model::Policy::new(rows).expect("finite offsets");
    let dir = std::env::temp_dir().join(format!(
        "sglang-mock-crosscheck-policy-{}",
        std::process::id()
    ));
    mock_server::model::save_dir(&policy, 151_936, &dir).expect("the policy directory");
    for sglang_version in [SglangVersion::default(), SglangVersion::V0_5_3] {
        let draws = sglang_version == SglangVersion::default();
        crosscheck_with(sglang_version, false, None, draws, Some(&dir)).await;
    }
}

/// The cross-check over Qwen's real vocabulary (`MODEL.md` section 13): its ids, special ids and end-of-sequence
/// ids in the slots, its encoding of text prompts and scripted answers, and text made by SGLang's incremental
/// detokenizer, with multi-byte stop strings, stream intervals and prompts that end inside a character. Under
/// the default release with the frequencies, and under 0.5.3, whose streams send `output_ids` as deltas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_agrees_with_the_python_reference_over_qwens_vocabulary() {
    for (sglang_version, draws) in [
        (SglangVersion::default(), true),
        (SglangVersion::V0_5_3, false),
    ] {
        crosscheck(sglang_version, false, Some(qwen_tokenizer_dir()), draws).await;
    }
}

/// Starts a server (seed 7, the cross-check's script, a small router) and runs `crosscheck.py` against it.
async fn crosscheck(
    sglang_version: SglangVersion,
    deterministic: bool,
    tokenizer: Option<&Path>,
    draws: bool,
) {
    crosscheck_with(sglang_version, deterministic, tokenizer, draws, None).await;
}

/// [`crosscheck`], serving the weights of the toy policy directory `model_path` when there is one.
async fn crosscheck_with(
    sglang_version: SglangVersion,
    deterministic: bool,
    tokenizer: Option<&Path>,
    draws: bool,
    model_path: Option<&Path>,
) {
    let script = reference_dir().join("crosscheck_script.json");
    let script = path_arg(&script);
    // The release slime patches serves its top-p replay too (MODEL.md section 7.2).
    let slime_patches = sglang_version.slime_patches;
    let live = Live::start(ServerConfig {
        seed: SERVER_SEED,
        sglang_version,
        enable_deterministic_inference: deterministic,
        enable_return_routed_experts: true,
        num_hidden_layers: 4,
        num_experts: 16,
        num_experts_per_tok: 3,
        scripted: mock_server::ScriptRule::load(&script).expect("the cross-check's script file"),
        tokenizer: tokenizer.map(|_| qwen_tokenizer()),
        slime_patches,
        model_path: model_path.map_or(ServerConfig::default().model_path, |dir| {
            dir.display().to_string()
        }),
        ..ServerConfig::default()
    })
    .await;
    let checker = reference_dir().join("crosscheck.py");
    let mut args = vec![
        path_arg(&checker),
        "--url".into(),
        live.url(""),
        "--server-seed".into(),
        SERVER_SEED.to_string(),
        "--script".into(),
        script,
        "--sglang-version".into(),
        sglang_version.as_str().to_owned(),
        "--enable-return-routed-experts".into(),
        "--moe-shape".into(),
        "4,16,3".into(),
    ];
    if deterministic {
        args.push("--enable-deterministic-inference".into());
    }
    if slime_patches {
        args.push("--slime-patches".into());
    }
    if let Some(dir) = tokenizer {
        args.extend(["--tokenizer".into(), path_arg(dir)]);
    }
    if !draws {
        args.extend(["--draws".into(), "0".into()]);
    }
    if let Some(dir) = model_path {
        args.extend(["--model-path".into(), path_arg(dir)]);
    }
    let output = python(args).await;
    let report = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(
        report.contains("the server agrees with the reference"),
        "under {sglang_version} (deterministic: {deterministic}, tokenizer: {tokenizer:?}, weights: \
         {model_path:?}):\n{report}\n{errors}"
    );
}

#[tokio::test]
async fn the_reference_reproduces_the_worked_example_of_model_md() {
    let output = python(vec![
        "-m".into(),
        "unittest".into(),
        "discover".into(),
        "-s".into(),
        path_arg(&reference_dir()),
        "-p".into(),
        "test_*.py".into(),
    ])
    .await;
    // unittest exits 0 when it finds no test at all (Python 3.11), so require that some ran.
    let summary = String::from_utf8_lossy(&output.stderr);
    let ran = summary.lines().find_map(|line| {
        line.strip_prefix("Ran ")?
            .split(' ')
            .next()?
            .parse::<u32>()
            .ok()
    });
    assert!(
        ran.is_some_and(|n| n > 0),
        "no reference test ran:\n{summary}"
    );
}
