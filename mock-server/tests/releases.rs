//! The server against the SGLang releases it answers as, read from their own wheels: 0.5.23's generated
//! contract decoder judges generated `/generate` bodies, and each release's route decorators are the route
//! table the server must serve (`tests/python/contract_check.py`, `tests/python/route_check.py`).
//!
//! The wheels are downloaded once (`pip download --no-deps`) into `target/py/sglang-wheels/`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mock_server::{ServerConfig, SglangVersion};

use crate::common::{Live, path_arg, python};

/// One download at a time: the tests that share a wheel must not race to write it.
static DOWNLOADS: Mutex<()> = Mutex::new(());

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python")
}

/// The release's wheel, downloaded from PyPI the first time.
fn wheel(version: SglangVersion) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/py/sglang-wheels");
    let prefix = format!("sglang-{version}-");
    let find = || {
        std::fs::read_dir(&dir).ok()?.find_map(|entry| {
            let path = entry.ok()?.path();
            let name = path.file_name()?.to_str()?;
            (name.starts_with(&prefix) && name.ends_with(".whl")).then_some(path)
        })
    };
    let _one_at_a_time = DOWNLOADS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(found) = find() {
        return found;
    }
    let status = std::process::Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-deps", &format!("sglang=={version}"), "-d"])
        .arg(&dir)
        .status()
        .expect("pip runs");
    assert!(status.success(), "pip download sglang=={version} failed");
    find().unwrap_or_else(|| panic!("pip downloaded no sglang-{version} wheel into {dir:?}"))
}

/// A check script's summary line (the one starting with `prefix`) and the numbers in it, in order.
fn summary<'r>(report: &'r str, prefix: &str) -> (&'r str, Vec<u64>) {
    let line = report
        .lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} summary in:\n{report}"));
    let numbers = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    (line, numbers)
}

/// Runs a check script off the async runtime (the download blocks) and returns its output.
async fn check(script: &str, version: SglangVersion, args: Vec<String>) -> String {
    let wheel = tokio::task::spawn_blocking(move || wheel(version))
        .await
        .expect("the download joins");
    let mut all = vec![
        path_arg(&python_dir().join(script)),
        "--wheel".into(),
        path_arg(&wheel),
    ];
    all.extend(args);
    let output = python(all).await;
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_gate_judges_every_body_as_the_0_5_23_decoder_does() {
    let live = Live::start(ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        ..ServerConfig::default()
    })
    .await;
    let report = check(
        "contract_check.py",
        SglangVersion::V0_5_23,
        vec!["--url".into(), live.url("")],
    )
    .await;
    // The script exits non-zero on any disagreement; the summary says how many bodies it judged.
    let (summary, numbers) = summary(&report, "contract: ");
    assert!(
        matches!(numbers[..], [bodies, violations, agree] if bodies >= 2000 && violations >= 500 && agree == bodies),
        "{summary}"
    );
}

/// The OpenAI request models the server validates bodies against (`mock-core/data/openai_models.json`) are the
/// ones `scripts/openai_models.py` prints from the releases' wheels today: a release re-read, or the file edited
/// by hand, fails here until they agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_request_models_are_the_wheels() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut args = vec![path_arg(&root.join("scripts/openai_models.py"))];
    for version in SglangVersion::all() {
        let wheel = tokio::task::spawn_blocking(move || wheel(version))
            .await
            .expect("the download joins");
        args.push(path_arg(&wheel));
    }
    assert_prints(args, &root, "mock-core/data/openai_models.json").await;
}

/// `python3 args...` prints the file at `held` (relative to `root`), as a data file's freshness test asks.
async fn assert_prints(args: Vec<String>, root: &Path, held: &str) {
    let printed = python(args).await;
    let text = std::fs::read_to_string(root.join(held)).unwrap_or_else(|e| panic!("{held}: {e}"));
    assert_eq!(
        String::from_utf8_lossy(&printed.stdout).trim_end(),
        text.trim_end(),
        "{held} is not what its script prints"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_serves_the_routes_its_http_server_declares() {
    let exclusions = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/route_exclusions.json");
    for version in SglangVersion::all() {
        let live = Live::start(ServerConfig {
            sglang_version: version,
            // SGLang mounts /metrics with `--enable-metrics`; the route table lists it.
            enable_metrics: true,
            ..ServerConfig::default()
        })
        .await;
        let report = check(
            "route_check.py",
            version,
            vec![
                "--url".into(),
                live.url(""),
                "--exclusions".into(),
                path_arg(&exclusions),
            ],
        )
        .await;
        assert!(
            report.contains(&format!("routes ({version}): ")),
            "{version}: {report}"
        );
    }
}

/// The API-key middleware of each release, route by route: with `--api-key` (and, from 0.5.15,
/// `--admin-api-key`), every route the release serves must be refused or let through, without a key, with the
/// API key and with the admin key, exactly as the wheel's own `decide_request_auth` decides from the route's
/// `@auth_level` (0.5.3: `add_api_key_middleware`'s one-key rule).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_guards_its_routes_with_its_api_key_rules() {
    let exclusions = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/route_exclusions.json");
    for version in SglangVersion::all() {
        let admin = (version != SglangVersion::V0_5_3).then(|| "admin-key".to_owned());
        let live = Live::start(ServerConfig {
            sglang_version: version,
            api_key: Some("user-key".to_owned()),
            admin_api_key: admin.clone(),
            enable_metrics: true,
            ..ServerConfig::default()
        })
        .await;
        let mut args = vec![
            "--url".into(),
            live.url(""),
            "--exclusions".into(),
            path_arg(&exclusions),
            "--api-key".into(),
            "user-key".into(),
        ];
        if let Some(admin) = admin {
            args.extend(["--admin-api-key".into(), admin]);
        }
        let report = check("route_check.py", version, args).await;
        assert!(
            report.contains(&format!("auth ({version}): ")) && report.contains(" 0 disagree"),
            "{version}: {report}"
        );
    }
}

/// The Rust files below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Nothing but `mock-core/src/release.rs` names a release: every behaviour in which releases differ reads a
/// field of the release value, so a new release is one value and the fields in which it differs. A line of
/// code (not a comment, not a test) of either crate that names a release constant or a release number is
/// refused.
#[test]
fn no_code_outside_the_release_module_names_a_release() {
    let server = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&server.join("src"), &mut files);
    rust_files(&server.join("../mock-core/src"), &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("release.rs")),
        "the scan reaches the release module"
    );
    let mut offenders = Vec::new();
    for file in files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "release.rs" || name == "tests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        // A file's unit tests come last, after `#[cfg(test)]`.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            let code = line.split(" //").next().unwrap_or(line);
            let names_release = [
                "SglangVersion::V0_",
                "SglangVersion::NEWEST",
                "\"0.5.",
                "\"latest\"",
                "\"mid\"",
            ]
            .iter()
            .any(|needle| code.contains(needle));
            if names_release {
                offenders.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "release comparisons outside mock-core/src/release.rs (give the release a field instead):\n{}",
        offenders.join("\n")
    );
}

/// The one list reaches the command line: `sglang-mock releases` prints it, the flag's help and its error
/// name every release, and `--json` carries every field `VERSIONS.md` documents.
#[test]
fn the_release_list_is_one_list_everywhere() {
    let numbers: Vec<&str> = SglangVersion::all().map(|v| v.as_str()).collect();
    assert_eq!(numbers, ["0.5.3", "0.5.15", "0.5.23"]);
    assert_eq!(SglangVersion::default(), SglangVersion::V0_5_23);
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sglang-mock"))
            .args(args)
            .output()
            .expect("sglang-mock runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, listed, _) = run(&["releases"]);
    assert_eq!(status, Some(0));
    assert_eq!(listed.lines().collect::<Vec<_>>(), numbers);
    let (_, tokenize, _) = run(&["releases", "--serving", "info-and-tokenize"]);
    assert_eq!(tokenize.lines().collect::<Vec<_>>(), ["0.5.15", "0.5.23"]);
    let (_, ready, _) = run(&["releases", "--serving", "ready"]);
    assert_eq!(ready.lines().collect::<Vec<_>>(), ["0.5.23"]);
    let (_, help, _) = run(&["--help"]);
    assert!(
        help.contains("0.5.3, 0.5.15 or 0.5.23 (or the aliases mid = 0.5.3, latest = 0.5.23)"),
        "{help}"
    );
    let (status, _, error) = run(&["--sglang-version", "0.5.99"]);
    assert_eq!(status, Some(2));
    assert!(
        error.contains(
            "expected 0.5.3, 0.5.15 or 0.5.23 (or the aliases mid = 0.5.3, latest = 0.5.23)"
        ),
        "{error}"
    );
    for alias in ["latest", "V0.5.23", " 0.5.23 "] {
        assert_eq!(
            alias.parse::<SglangVersion>(),
            Ok(SglangVersion::V0_5_23),
            "{alias}"
        );
    }
    assert_eq!("mid".parse::<SglangVersion>(), Ok(SglangVersion::V0_5_3));
}

/// `VERSIONS.md`'s table of fields has one row per field of a release, named in its first column, and no row
/// for a field the release does not have.
#[test]
fn versions_md_has_one_row_per_field() {
    let json = serde_json::to_value(SglangVersion::NEWEST.release()).expect("a release serialises");
    let mut fields: Vec<String> = json
        .as_object()
        .expect("an object")
        .keys()
        .cloned()
        .collect();
    fields.sort();
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("VERSIONS.md"))
        .expect("VERSIONS.md");
    let table = doc
        .split("\n## The fields\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("VERSIONS.md has a section `## The fields`");
    let rows: Vec<String> = table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(field, _)| field.to_owned())
        .collect();
    let mut documented = rows.clone();
    documented.sort();
    documented.dedup();
    assert_eq!(
        documented.len(),
        rows.len(),
        "a field has two rows: {rows:?}"
    );
    assert_eq!(
        documented, fields,
        "VERSIONS.md's rows against the fields of `Release`"
    );
}

/// What `/server_info` and `/model_info` carry of each release (`mock-core/data/info.json`) is what
/// `scripts/server_info.py` prints from the releases' golden recordings: a recording made again, or the file
/// edited by hand, fails here until they agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_info_of_each_release_is_its_recording() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let args = vec![path_arg(&root.join("scripts/server_info.py"))];
    assert_prints(args, &root, "mock-core/data/info.json").await;
}

/// `stop_regex` stops where SGLang's own rules, run with Python's `re`, stop: the tail window from the wheel's
/// `get_max_seq_length`, the search after every token in the release's finish order, the text cut at the
/// pattern's first occurrence as a string, a pattern `re` refuses answered with its `re.error`, and 0.5.23's
/// 256-byte bound (`tests/python/stop_regex_check.py`). The script's expectations agree with the running 0.5.23
/// on all 212 of its patterns (`scripts/real_sglang.py start 0.5.23`, the tiny Qwen3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_regex_stops_where_sglang_s_rules_run_with_python_re_stop() {
    for version in [SglangVersion::V0_5_15, SglangVersion::V0_5_23] {
        let live = Live::start(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        })
        .await;
        let report = check(
            "stop_regex_check.py",
            version,
            vec!["--url".into(), live.url("")],
        )
        .await;
        let (summary, numbers) = summary(&report, "stop_regex: ");
        assert!(
            matches!(numbers[..], [total, matched, 12, agree]
                if total >= 200 && matched >= 100 && agree == total),
            "under {version}: {summary}\n{report}"
        );
    }
}
