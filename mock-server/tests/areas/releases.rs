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
    let summary = report
        .lines()
        .find(|line| line.starts_with("contract: "))
        .unwrap_or_else(|| panic!("no summary in:\n{report}"));
    let numbers: Vec<u64> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    assert!(
        matches!(numbers[..], [bodies, violations, agree] if bodies >= 2000 && violations >= 500 && agree == bodies),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_serves_the_routes_its_http_server_declares() {
    let exclusions = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/route_exclusions.json");
    for version in SglangVersion::ALL {
        let live = Live::start(ServerConfig {
            sglang_version: version,
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
    for version in SglangVersion::ALL {
        let admin = (version != SglangVersion::V0_5_3).then(|| "admin-key".to_owned());
        let live = Live::start(ServerConfig {
            sglang_version: version,
            api_key: Some("user-key".to_owned()),
            admin_api_key: admin.clone(),
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
