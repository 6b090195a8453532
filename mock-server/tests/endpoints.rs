//! The worker endpoints routers and RL frameworks call, the API-key middleware, SGLang's 404/405 bodies,
//! 0.5.3's endpoint differences, and start-up and graceful shutdown of a live server.

use axum::body::Body;
use axum::http::Method;
use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{InProcess, Live, keys, parse_json};

#[tokio::test]
async fn health_endpoints_answer_200_with_an_empty_body() {
    for version in [SglangVersion::V0_5_23, SglangVersion::V0_5_3] {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        for path in ["/health", "/health_generate", "/ping"] {
            let reply = server.get(path).await;
            assert_eq!(reply.status, 200, "{path}");
            assert!(reply.body.is_empty(), "{path}: {:?}", reply.text());
        }
    }
}

#[tokio::test]
async fn server_info_has_what_routers_read_under_both_paths() {
    let server = InProcess::new(ServerConfig {
        model_path: "org/model".to_owned(),
        served_model_name: Some("served".to_owned()),
        context_length: Some(4096),
        ..ServerConfig::default()
    });
    let new = server.get("/server_info").await;
    let old = server.get("/get_server_info").await;
    assert_eq!(new.status, 200);
    assert_eq!(new.content_type(), "application/json");
    assert_eq!(new.json(), old.json());
    let info = new.json();
    for key in [
        "model_path",
        "tokenizer_path",
        "served_model_name",
        "tp_size",
        "dp_size",
        "pp_size",
        "version",
        "max_total_num_tokens",
        "max_running_requests",
        "disaggregation_mode",
        "context_length",
        "internal_states",
        "weight_version",
        "stream_interval",
    ] {
        assert!(info.get(key).is_some(), "server_info lacks {key}");
    }
    assert_eq!(info["model_path"], "org/model");
    assert_eq!(info["served_model_name"], "served");
    assert_eq!(info["tp_size"], 1);
    assert_eq!(info["dp_size"], 1);
    assert!(info["internal_states"].is_array());
    assert!(info["version"].is_string());
    // The release reports `api_key: null` without a key; the mock never echoes one.
    assert_eq!(info["api_key"], Value::Null);
}

/// What the model directory and the flags say reaches `/model_info` and `/server_info`: a Qwen3 directory loaded
/// with `--load-format dummy` is reported as the running release reports it (`model_type` and `architectures`
/// from its `config.json`, `load_format` the flag), as the CPU set-up of `scripts/real_sglang.py` showed; a path
/// without a `config.json` is the toy model's own Qwen2.
#[tokio::test]
async fn model_info_reports_the_model_directory_and_the_load_format() {
    let dir = std::env::temp_dir().join(format!("sglang-mock-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64}"#,
    )
    .unwrap();
    let server = InProcess::new(ServerConfig {
        model_path: dir.to_string_lossy().into_owned(),
        load_format: "dummy".to_owned(),
        ..ServerConfig::default()
    });
    let info = server.get("/model_info").await.json();
    assert_eq!(
        (
            &info["model_type"],
            &info["architectures"],
            &info["load_format"]
        ),
        (
            &json!("qwen3"),
            &json!(["Qwen3ForCausalLM"]),
            &json!("dummy")
        )
    );
    assert_eq!(
        server.get("/server_info").await.json()["load_format"],
        "dummy"
    );
    std::fs::remove_dir_all(&dir).ok();
    let toy = InProcess::new(ServerConfig::default())
        .get("/model_info")
        .await
        .json();
    assert_eq!(
        (
            &toy["model_type"],
            &toy["architectures"],
            &toy["load_format"]
        ),
        (
            &json!("qwen2"),
            &json!(["Qwen2ForCausalLM"]),
            &json!("auto")
        )
    );
}

#[tokio::test]
async fn model_info_differs_by_release_and_is_served_under_both_paths() {
    // The keys of `model_info` in each release's `srt/entrypoints/http_server.py`.
    let newest = InProcess::new(ServerConfig::default());
    let reply = newest.get("/model_info").await;
    assert_eq!(reply.json(), newest.get("/get_model_info").await.json());
    let node = parse_json(&reply.body);
    assert_eq!(
        keys(&node),
        [
            "model_path",
            "served_model_name",
            "tokenizer_path",
            "is_generation",
            "preferred_sampling_params",
            "weight_version",
            "load_format",
            "reasoning_parser",
            "tool_call_parser",
            "disaggregation_mode",
            "has_image_understanding",
            "has_audio_understanding",
            "model_type",
            "architectures",
            "embedding"
        ]
    );
    let v0_5_15 = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_15,
        ..ServerConfig::default()
    });
    let node = parse_json(&v0_5_15.get("/model_info").await.body);
    assert_eq!(
        keys(&node),
        [
            "model_path",
            "tokenizer_path",
            "is_generation",
            "preferred_sampling_params",
            "weight_version",
            "has_image_understanding",
            "has_audio_understanding",
            "model_type",
            "architectures"
        ]
    );
    let mid = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_3,
        ..ServerConfig::default()
    });
    assert_eq!(
        mid.get("/model_info").await.status,
        404,
        "0.5.3 has only /get_model_info"
    );
    let node = parse_json(&mid.get("/get_model_info").await.body);
    assert_eq!(
        keys(&node),
        [
            "model_path",
            "tokenizer_path",
            "is_generation",
            "preferred_sampling_params",
            "weight_version"
        ]
    );
}

#[tokio::test]
async fn weight_version_is_served_by_0_5_3_and_slime_deprecated_in_0_5_15_and_gone_in_0_5_23() {
    let mid = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_3,
        ..ServerConfig::default()
    });
    assert_eq!(
        mid.get("/get_weight_version").await.json(),
        json!({"weight_version": "default"})
    );
    let v0_5_15 = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_15,
        ..ServerConfig::default()
    });
    for path in ["/get_weight_version", "/weight_version"] {
        let reply = v0_5_15.get(path).await;
        assert_eq!(reply.status, 404);
        assert_eq!(
            reply.json(),
            json!({"object": "error", "message": "Endpoint '/get_weight_version' or '/weight_version' is deprecated. Please use '/model_info' instead.", "type": "404", "param": null, "code": 404})
        );
    }
    // slime's `docker/patch/v0.5.15.post1/sglang.patch` serves both paths again.
    let slime = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_15,
        slime_patches: true,
        ..ServerConfig::default()
    });
    for path in ["/get_weight_version", "/weight_version"] {
        assert_eq!(
            slime.get(path).await.json(),
            json!({"weight_version": "default"})
        );
    }
    let newest = InProcess::new(ServerConfig::default());
    let reply = newest.get("/get_weight_version").await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json(), json!({"detail": "Not Found"}));
}

#[tokio::test]
async fn ready_is_503_while_paused_and_a_weight_update_session_opens_once() {
    // `ready` and `begin_weight_update`/`end_weight_update` of 0.5.23's `http_server.py`.
    let server = InProcess::new(ServerConfig::default());
    assert_eq!(server.get("/ready").await.status, 200);
    server
        .post("/pause_generation", br#"{"mode":"in_place"}"#.to_vec())
        .await;
    assert_eq!(server.get("/ready").await.status, 503);
    server.post("/continue_generation", b"{}".to_vec()).await;
    assert_eq!(server.get("/ready").await.status, 200);
    let begin = server.post("/begin_weight_update", b"{}".to_vec()).await;
    assert_eq!(
        (begin.status.as_u16(), begin.json()),
        (200, json!({"success": true, "message": "Success"}))
    );
    let again = server.post("/begin_weight_update", b"{}".to_vec()).await;
    assert_eq!(
        (again.status.as_u16(), again.json()),
        (
            400,
            json!({"success": false, "message": "a weight-update session is already open; call end_weight_update() first"})
        )
    );
    let end = server.post("/end_weight_update", b"{}".to_vec()).await;
    assert_eq!(
        (end.status.as_u16(), end.json()),
        (200, json!({"success": true, "message": "Success"}))
    );
    let none = server.post("/end_weight_update", b"{}".to_vec()).await;
    assert_eq!(
        (none.status.as_u16(), none.json()),
        (
            400,
            json!({"success": false, "message": "no weight-update session is open; call begin_weight_update() first"})
        )
    );
    assert_eq!(
        InProcess::new(ServerConfig {
            sglang_version: SglangVersion::V0_5_15,
            ..ServerConfig::default()
        })
        .get("/ready")
        .await
        .status,
        404,
        "0.5.15 has no /ready"
    );
}

#[tokio::test]
async fn v1_models_lists_the_served_model() {
    let server = InProcess::new(ServerConfig {
        served_model_name: Some("m".to_owned()),
        context_length: Some(2048),
        ..ServerConfig::default()
    });
    let list = server.get("/v1/models").await.json();
    assert_eq!(list["object"], "list");
    let card = &list["data"][0];
    assert_eq!(card["id"], "m");
    assert_eq!(card["object"], "model");
    assert_eq!(card["owned_by"], "sglang");
    assert_eq!(card["root"], "m");
    assert_eq!(card["max_model_len"], 2048);
    assert!(card["created"].is_u64());
    assert_eq!(server.get("/v1/models/m").await.json()["id"], "m");
    assert_eq!(server.get("/v1/models/%FF%FE").await.status, 404);
    let missing = server.get("/v1/models/other").await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json(),
        json!({"error": {"message": "The model 'other' does not exist", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}})
    );
}

#[tokio::test]
async fn get_load_reports_one_rank() {
    // `/get_load` is 0.5.3's and 0.5.15's (0.5.23 removed it for `/v1/loads`).
    let server = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_15,
        ..ServerConfig::default()
    });
    let load = server.get("/get_load").await.json();
    let ranks = load.as_array().expect("a list of ranks");
    assert_eq!(ranks.len(), 1);
    for key in [
        "dp_rank",
        "num_reqs",
        "num_waiting_reqs",
        "num_tokens",
        "num_pending_tokens",
        "ts_tic",
    ] {
        assert!(ranks[0].get(key).is_some(), "{key}");
    }
    assert_eq!(ranks[0]["num_reqs"], 0);
}

/// `/flush_cache` answers its text without a content type (a Starlette `Response` without a media type), to
/// `GET` and `POST`.
#[tokio::test]
async fn flush_cache_answers_text_without_a_content_type_to_get_and_post() {
    let server = InProcess::new(ServerConfig::default());
    for method in [Method::GET, Method::POST] {
        let reply = server
            .request(method, "/flush_cache", Body::empty(), &[])
            .await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.headers.get("content-type"), None);
        assert!(
            reply.text().starts_with("Cache flushed.\n"),
            "{}",
            reply.text()
        );
    }
}

#[tokio::test]
async fn generate_accepts_put_and_refuses_get() {
    let server = InProcess::new(ServerConfig::default());
    let body = serde_json::to_vec(&json!({"text": "hi", "sampling_params": {"max_new_tokens": 1}}))
        .unwrap_or_default();
    let put = server.request(Method::PUT, "/generate", body, &[]).await;
    assert_eq!(put.status, 200, "{}", put.text());
    let get = server.get("/generate").await;
    assert_eq!(get.status, 405);
    assert_eq!(get.json(), json!({"detail": "Method Not Allowed"}));
    let missing = server.get("/no/such/route").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json(), json!({"detail": "Not Found"}));
}

#[tokio::test]
async fn api_key_guards_everything_but_health() {
    let server = InProcess::new(ServerConfig {
        api_key: Some("sekret".to_owned()),
        ..ServerConfig::default()
    });
    let body = || {
        serde_json::to_vec(&json!({"text": "hi", "sampling_params": {"max_new_tokens": 1}}))
            .unwrap_or_default()
    };
    let cases: [(&[(&str, &str)], u16); 4] = [
        (&[], 401),
        (&[("authorization", "Bearer wrong")], 401),
        (&[("authorization", "sekret")], 401),
        (&[("authorization", "Bearer sekret")], 200),
    ];
    for (headers, status) in cases {
        let reply = server
            .request(Method::POST, "/generate", body(), headers)
            .await;
        assert_eq!(reply.status.as_u16(), status, "{headers:?}");
        if status == 401 {
            assert_eq!(reply.json(), json!({"error": "Unauthorized"}));
        }
    }
    for path in ["/health", "/health_generate"] {
        assert_eq!(server.get(path).await.status, 200, "{path} needs no key");
    }
    assert_eq!(server.get("/server_info").await.status, 401);
    let preflight = server
        .request(Method::OPTIONS, "/generate", Body::empty(), &[])
        .await;
    assert_ne!(preflight.status, 401, "OPTIONS passes the key check");
}

/// The status lines of two requests on one keep-alive connection: `POST first` with a body sent after its
/// head (so the server answers before the body is in its buffer), then `GET /health`.
fn two_requests(addr: std::net::SocketAddr, first: &'static str) -> Vec<String> {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(addr).expect("connects");
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("a timeout");
    let body = r#"{"text": "hi", "sampling_params": {"max_new_tokens": 1}}"#;
    let mut answers = Vec::new();
    for request in [
        format!(
            "POST {first} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        ),
        "GET /health HTTP/1.1\r\nhost: x\r\n\r\n".to_owned(),
    ] {
        if socket.write_all(request.as_bytes()).is_err() {
            break;
        }
        if request.starts_with("POST") {
            std::thread::sleep(std::time::Duration::from_millis(50));
            if socket.write_all(body.as_bytes()).is_err() {
                break;
            }
        }
        // One answer: its head, then `content-length` bytes.
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            match socket.read(&mut byte) {
                Ok(1) => got.push(byte[0]),
                _ => break,
            }
        }
        let head = String::from_utf8_lossy(&got).to_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let mut content = vec![0u8; length];
        if socket.read_exact(&mut content).is_err() {
            break;
        }
        answers.push(head.lines().next().unwrap_or_default().to_owned());
    }
    answers
}

/// An answer given without reading the request body leaves the connection usable, as uvicorn does: a 401, a
/// 404 and a handler that takes no body all read it first, so the next request on the same keep-alive
/// connection is answered. (hyper closes a connection whose request body was left unread; a client reusing
/// it got a reset, which made the route check's key probes fail now and then.)
#[tokio::test]
async fn an_answer_that_ignores_the_body_keeps_the_connection_alive() {
    let keyed = Live::start(ServerConfig {
        api_key: Some("sekret".to_owned()),
        ..ServerConfig::default()
    })
    .await;
    let open = Live::start(ServerConfig::default()).await;
    for (addr, first, status) in [
        (keyed.addr, "/generate", "http/1.1 401 unauthorized"),
        (open.addr, "/no/such/route", "http/1.1 404 not found"),
        (open.addr, "/flush_cache", "http/1.1 200 ok"),
    ] {
        let answers = tokio::task::spawn_blocking(move || two_requests(addr, first))
            .await
            .expect("the client thread");
        assert_eq!(answers, [status, "http/1.1 200 ok"], "{first}");
    }
}

#[tokio::test]
async fn a_live_server_answers_and_shuts_down_gracefully() {
    let live = Live::start(ServerConfig::default()).await;
    let reply = live
        .post_json(
            "/generate",
            &json!({"text": "live", "sampling_params": {"max_new_tokens": 4}, "rid": "r1"}),
        )
        .await;
    assert_eq!(reply.status, 200);
    let body: Value = reply.json();
    assert_eq!(body["meta_info"]["id"], "r1");
    let health = live
        .client
        .get(live.url("/health"))
        .send()
        .await
        .expect("health answers");
    assert_eq!(health.status().as_u16(), 200);
    live.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_bad_model_config_is_an_error_not_a_panic() {
    let err = mock_server::AppState::new(ServerConfig {
        vocab_size: Some(10),
        ..ServerConfig::default()
    })
    .expect_err("vocab too small");
    assert!(err.to_string().contains("vocab_size 10"), "{err}");
    let result = mock_server::Server::start(ServerConfig {
        vocab_size: Some(10),
        port: 0,
        ..ServerConfig::default()
    })
    .await;
    assert!(
        matches!(result, Err(mock_server::StartError::Config(_))),
        "{result:?}"
    );
}

/// Start the real binary with flags from the environment, read the address from its ready line, and stop it
/// with SIGTERM: it must exit cleanly.
#[cfg(unix)]
#[tokio::test]
async fn the_binary_reads_env_flags_and_stops_on_sigterm() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    /// Kills the server if the test fails before it is stopped.
    struct Reap(Option<std::process::Child>);
    impl Drop for Reap {
        fn drop(&mut self) {
            if let Some(child) = self.0.as_mut() {
                let _ = child.wait();
            }
        }
    }

    let mut child = Command::new(env!("CARGO_BIN_EXE_sglang-mock"))
        .env("SGLANG_MOCK_PORT", "0")
        .env("SGLANG_MOCK_SGLANG_VERSION", "0.5.3")
        .env("SGLANG_MOCK_SERVED_MODEL_NAME", "from-env")
        .env(
            "SGLANG_MOCK_SCRIPT",
            crate::common::data_path("script.json"),
        )
        .env("SGLANG_MOCK_FAULT", "missing-logprobs")
        .env("SGLANG_MOCK_FAULT_FIRST", "1")
        .env("SGLANG_MOCK_WEIGHT_VERSION", "v7")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts");
    // Once it listens, the binary prints one JSON ready line on stdout with the URL it bound.
    let out = child.stdout.take().expect("stdout piped");
    let pid = child.id();
    let mut reap = Reap(Some(child));
    let (ready, reader) = tokio::task::spawn_blocking(move || {
        let mut reader = BufReader::new(out);
        let mut line = String::new();
        reader.read_line(&mut line).expect("stdout readable");
        (line, reader)
    })
    .await
    .expect("reader joins");
    let ready: Value = serde_json::from_str(&ready)
        .unwrap_or_else(|err| panic!("the ready line {ready:?} is not JSON: {err}"));
    assert_eq!(ready["event"], "ready", "{ready}");
    assert_eq!(ready["pid"], pid, "{ready}");
    let port = ready["port"].as_u64().expect("a port");
    assert_ne!(port, 0, "the ready line names the bound port, not 0");
    let addr = format!("127.0.0.1:{port}");
    assert_eq!(ready["url"], format!("http://{addr}"), "{ready}");
    let client = reqwest::Client::new();
    let models = client
        .get(format!("http://{addr}/v1/models"))
        .send()
        .await
        .expect("answers");
    let models: Value = serde_json::from_slice(&models.bytes().await.expect("body")).expect("JSON");
    assert_eq!(models["data"][0]["id"], "from-env");
    let weight = client
        .get(format!("http://{addr}/get_weight_version"))
        .send()
        .await
        .expect("answers");
    assert_eq!(
        weight.status().as_u16(),
        200,
        "0.5.3 (which serves /get_weight_version) came from the environment"
    );
    // The script, the fault rule and the weight version came from the environment too.
    let mut answers = Vec::new();
    for _ in 0..2 {
        let reply = client
            .post(format!("http://{addr}/generate"))
            .body(r#"{"text":"Judgment?","return_logprob":true}"#)
            .send()
            .await
            .expect("answers");
        let v: Value = serde_json::from_slice(&reply.bytes().await.expect("body")).expect("JSON");
        answers.push(v);
    }
    assert_eq!(answers[0]["text"], "Judgment: 2");
    assert_eq!(answers[0]["meta_info"]["weight_version"], "v7");
    assert!(
        answers[0]["meta_info"]
            .get("output_token_logprobs")
            .is_none()
    );
    assert!(
        answers[1]["meta_info"]
            .get("output_token_logprobs")
            .is_some()
    );
    // The shell's builtin `kill` needs no procps in the CI image.
    let status = Command::new("sh")
        .args(["-c", &format!("kill -TERM {pid}")])
        .status()
        .expect("sh runs");
    assert!(status.success());
    let mut child = reap.0.take().expect("child still owned");
    let exit = tokio::task::spawn_blocking(move || {
        drop(reader);
        child.wait()
    })
    .await
    .expect("waiter joins")
    .expect("child exits");
    assert!(exit.success(), "exit status {exit:?}");
}

/// Bad fault flags and script files stop the binary at start-up with a message naming the problem.
#[test]
fn the_binary_refuses_bad_fault_flags_and_scripts() {
    use std::process::Command;
    let cases: [(&[&str], &str); 3] = [
        (&["--fault", "explode"], "unknown fault kind"),
        (
            &["--fault", "stall;ms=1", "--fault-rate", "1.5"],
            "rate 1.5 is not within [0, 1]",
        ),
        (
            &["--script", "/nonexistent/rules.json"],
            "/nonexistent/rules.json",
        ),
    ];
    for (args, needle) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_sglang-mock"))
            .args(["--port", "0"])
            .args(args)
            .output()
            .expect("binary runs");
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn v1_loads_reports_idle_ranks() {
    let server = InProcess::new(ServerConfig::default());
    let reply = server.get("/v1/loads").await;
    assert_eq!(reply.status, 200);
    let node = parse_json(&reply.body);
    let keys = keys(&node);
    assert_eq!(
        keys,
        [
            "timestamp",
            "version",
            "accelerator",
            "num_accelerators",
            "loads"
        ]
    );
    let body = reply.json();
    assert_eq!(body["loads"][0]["num_running_reqs"], 0);
    assert_eq!(body["loads"][0]["num_waiting_reqs"], 0);
    assert!(
        body["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with("+00:00"))
    );
}

/// Every route that reads a body reads it through the same extractors: over `--max-body-bytes` it is SGLang's
/// 413 `HTTPException`, and a JSON body of the wrong shape is FastAPI's 400, never axum's plain-text rejection.
#[tokio::test]
async fn every_route_with_a_body_refuses_it_in_sglangs_shapes() {
    let server = InProcess::new(ServerConfig {
        max_body_bytes: 64,
        ..ServerConfig::default()
    });
    let big = format!(r#"{{"text": "{}"}}"#, "x".repeat(100));
    let too_large = json!({"object": "error", "message": "Request body is larger than the limit of 64 bytes.",
                           "type": "413", "param": null, "code": 413});
    for path in [
        "/generate",
        "/v1/completions",
        "/v1/chat/completions",
        "/tokenize",
        "/detokenize",
        "/abort_request",
        "/pause_generation",
        "/update_weights_from_disk",
        "/update_weight_version",
        "/admin/faults",
    ] {
        let reply = server.post(path, big.clone()).await;
        assert_eq!(reply.status, 413, "{path}: {}", reply.text());
        assert_eq!(reply.json(), too_large, "{path}");
    }
    for path in [
        "/abort_request",
        "/pause_generation",
        "/update_weight_version",
    ] {
        let reply = server.post(path, "[1, 2]").await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        let body = reply.json();
        assert_eq!(
            (body["object"].as_str(), body["code"].as_u64()),
            (Some("error"), Some(400)),
            "{path}: {body}"
        );
    }
}

/// slime's patched 0.5.15.post1 (`docker/patch/v0.5.15.post1/sglang.patch`) adds `POST /post_process_weights`:
/// `PostProcessWeightsReqInput`'s two booleans, run under the model-update writer lock (so it waits for the
/// running request), answered `{"success": true, "message": "Success"}`. Unpatched releases have no such route.
#[tokio::test(start_paused = true)]
async fn slimes_post_process_weights_waits_for_running_requests() {
    let patched = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_15,
        slime_patches: true,
        ..crate::common::slow()
    });
    let running = crate::common::spawn_generate(
        &patched,
        json!({"text": "a", "sampling_params": {"max_new_tokens": 3, "ignore_eos": true}}),
    );
    crate::common::advance_ms(10).await;
    let call = {
        let patched = patched.clone();
        tokio::spawn(async move {
            patched
                .post(
                    "/post_process_weights",
                    r#"{"restore_weights_before_load": true, "post_process_quantization": false}"#,
                )
                .await
        })
    };
    crate::common::advance_ms(1500).await;
    assert!(!call.is_finished(), "it waits for the running request");
    crate::common::advance_ms(5000).await;
    assert_eq!(running.await.unwrap().status, 200);
    let reply = call.await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), r#"{"success":true,"message":"Success"}"#);
    let typed = patched
        .post(
            "/post_process_weights",
            r#"{"post_process_quantization": "yes"}"#,
        )
        .await;
    assert_eq!(typed.status, 400);
    for version in SglangVersion::all() {
        let plain = InProcess::new(ServerConfig {
            sglang_version: version,
            ..ServerConfig::default()
        });
        assert_eq!(
            plain.post("/post_process_weights", "{}").await.status,
            404,
            "{version}"
        );
    }
}

/// With a model directory, the context is the one its `config.json` gives (SGLang's `ModelConfig`): the info
/// routes report it, `/server_info` reports the unset flag as `null`, and a request past it is refused.
#[tokio::test]
async fn the_model_directory_decides_the_context_length() {
    let dir = std::env::temp_dir().join(format!("sglang-mock-context-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["Qwen2ForCausalLM"], "max_position_embeddings": 4096}"#,
    )
    .expect("config.json");
    let server = InProcess::new(ServerConfig {
        model_path: dir.display().to_string(),
        ..ServerConfig::default()
    });
    let info = server.get("/server_info").await.json();
    assert_eq!(info["context_length"], Value::Null, "the flag is unset");
    assert_eq!(info["max_req_input_len"], 4096 - 6);
    assert_eq!(
        server.get("/v1/models").await.json()["data"][0]["max_model_len"],
        4096
    );
    let reply = server
        .generate(&json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5000}}))
        .await;
    assert_eq!(
        reply.status,
        400,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert!(
        String::from_utf8_lossy(&reply.body).contains(
            "maximum context length of 4096 tokens. You requested a total of 5003 tokens"
        ),
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    // The flag overrides the directory downwards, and `/server_info` reports it.
    let server = InProcess::new(ServerConfig {
        model_path: dir.display().to_string(),
        context_length: Some(1024),
        ..ServerConfig::default()
    });
    assert_eq!(
        server.get("/server_info").await.json()["context_length"],
        1024
    );
    assert_eq!(
        server.get("/v1/models").await.json()["data"][0]["max_model_len"],
        1024
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Starlette's `redirect_slashes`: a route's path with a trailing slash answers 307 to the path without it, for
/// any method, keeping the query; a path that is no route with or without the slash stays a 404.
#[tokio::test]
async fn a_trailing_slash_redirects_as_starlette_does() {
    let server = InProcess::new(ServerConfig::default());
    for (method, path, location) in [
        (Method::GET, "/generate/", "http://127.0.0.1:30000/generate"),
        (
            Method::POST,
            "/generate/?stream=1",
            "http://127.0.0.1:30000/generate?stream=1",
        ),
        (Method::GET, "/health/", "http://127.0.0.1:30000/health"),
        // Starlette strips every trailing slash.
        (
            Method::GET,
            "/generate//",
            "http://127.0.0.1:30000/generate",
        ),
        (
            Method::GET,
            "/model_info///",
            "http://127.0.0.1:30000/model_info",
        ),
        (
            Method::POST,
            "/v1/chat/completions/",
            "http://127.0.0.1:30000/v1/chat/completions",
        ),
    ] {
        let reply = server
            .request(
                method.clone(),
                path,
                r#"{"text": "x"}"#,
                &[("host", "127.0.0.1:30000")],
            )
            .await;
        assert_eq!(reply.status, 307, "{method} {path}");
        assert_eq!(reply.headers["location"], location, "{method} {path}");
        assert!(reply.body.is_empty(), "{method} {path}");
    }
    for path in ["/no_such_route/", "/generate/x", "/generate//x/"] {
        let reply = server
            .request(Method::GET, path, "", &[("host", "127.0.0.1:30000")])
            .await;
        assert_eq!(
            (reply.status.as_u16(), reply.json()),
            (404, json!({"detail": "Not Found"})),
            "{path}"
        );
    }
    // `/v1/models/` is `/v1/models/{model}` with an empty name, which no model has (the running 0.5.23).
    let reply = server.request(Method::GET, "/v1/models/", "", &[]).await;
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.json()["error"]["message"],
        "The model '' does not exist"
    );
}

/// What a release answered when its golden recording started (`mock-server/conform/golden/<release>.jsonl`, made
/// by `scripts/real_sglang.py golden` from the running release): its `/server_info` and its `/get_model_info`.
fn recorded_info(version: SglangVersion) -> (Value, Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("conform/golden/{}.jsonl", version.as_str()));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines().map(|line| parse_json(line.as_bytes()));
    let server_info = lines.next().unwrap()["server_info"].clone();
    let model_info = lines
        .find(|exchange| exchange["request"]["path"] == "/get_model_info")
        .map(|exchange| {
            let chunks = exchange["response"]["chunks"].as_array().unwrap().iter();
            let body: String = chunks.map(|c| c["body"].as_str().unwrap()).collect();
            parse_json(body.as_bytes())
        })
        .unwrap_or(Value::Null);
    (server_info, model_info)
}

/// `/server_info` is each release's own answer: every field the running release reported, in its order, at the
/// top and in `internal_states[]`, with the mock's flags in the fields they set and the release's values in the
/// rest; 0.5.23's `/model_info` ends with its `embedding` object, whose caches follow the flags.
#[tokio::test]
async fn server_info_is_the_releases_answer_with_the_mocks_flags() {
    for version in SglangVersion::all() {
        let (recorded, recorded_model_info) = recorded_info(version);
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            seed: 11,
            served_model_name: Some("served".to_owned()),
            max_running_requests: Some(7),
            max_total_tokens: Some(5000),
            page_size: 4,
            disable_radix_cache: true,
            chunked_prefill_size: -1,
            api_key: Some("secret".to_owned()),
            ..ServerConfig::default()
        });
        let auth = [("authorization", "Bearer secret")];
        // 0.5.3 serves only the older path; every release serves it.
        let info = server
            .request(Method::GET, "/get_server_info", Body::empty(), &auth)
            .await
            .json();
        let release = version.as_str();
        assert_eq!(keys(&info), keys(&recorded), "{release}: the top's keys");
        let (state, recorded_state) =
            (&info["internal_states"][0], &recorded["internal_states"][0]);
        assert_eq!(
            keys(state),
            keys(recorded_state),
            "{release}: a scheduler's keys"
        );
        // The flags, where the release reports them.
        for (key, want) in [
            ("random_seed", json!(11)),
            ("served_model_name", json!("served")),
            ("max_running_requests", json!(7)),
            ("max_total_tokens", json!(5000)),
            ("max_total_num_tokens", json!(5000)),
            ("page_size", json!(4)),
            ("disable_radix_cache", json!(true)),
            ("chunked_prefill_size", json!(-1)),
            // Unset, as the release reports an unset flag.
            ("context_length", Value::Null),
            ("max_queued_requests", Value::Null),
            // Never echoed.
            ("api_key", Value::Null),
            ("version", json!(release)),
        ] {
            assert_eq!(info[key], want, "{release}: {key}");
        }
        assert_eq!(state["memory_usage"]["token_capacity"], 5000, "{release}");
        assert_eq!(state["disable_radix_cache"], true, "{release}");
        // A field no flag of the mock sets keeps the release's value.
        for key in [
            "tp_size",
            "dp_size",
            "device",
            "disaggregation_mode",
            "attention_backend",
        ] {
            assert_eq!(info[key], recorded[key], "{release}: {key}");
        }
        let model_info = server
            .request(Method::GET, "/get_model_info", Body::empty(), &auth)
            .await
            .json();
        match recorded_model_info.get("embedding") {
            Some(recorded) => {
                let mut want = recorded.clone();
                want["cache"]["radix_cache_disabled"] = json!(true);
                want["cache"]["chunked_prefill_disabled"] = json!(true);
                assert_eq!(model_info["embedding"], want, "{release}");
            }
            None => assert!(model_info.get("embedding").is_none(), "{release}"),
        }
    }
}
