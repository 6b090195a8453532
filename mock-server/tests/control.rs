//! The RL control plane with real concurrent requests: `/abort_request` by rid prefix and `abort_all` on
//! running, streamed and queued requests, pause and continue in every mode, weight-version changes, weight
//! updates that wait for or abort running requests, `/flush_cache` refusing while busy, the running limit and
//! the full-queue 503. Time is tokio's paused clock, so "running" means "between two simulated tokens".

use std::time::Duration;

use mock_server::ServerConfig;
use serde_json::{Value, json};

use crate::common::{
    InProcess, Reply, WAITING_ABORT_META_KEYS, advance_ms, keys, parse_json, slow, spawn_generate,
    sse_json,
};

/// A directory that exists wherever the tests run: a checkpoint the loader can find.
const CHECKPOINT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn request(rid: &str, tokens: u32, stream: bool) -> Value {
    json!({
        "text": "control plane",
        "rid": rid,
        "stream": stream,
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": true},
        "return_logprob": true,
    })
}

async fn post(server: &InProcess, path: &str, body: Value) -> Reply {
    server
        .post(path, serde_json::to_vec(&body).expect("serialisable"))
        .await
}

async fn stats(server: &InProcess) -> Value {
    server.get("/admin/stats").await.json()
}

fn ids(v: &Value) -> Vec<Value> {
    v["output_ids"].as_array().cloned().unwrap_or_default()
}

/// `/abort_request` in SGLang's two stages: the tokenizer manager passes on only a rid it knows exactly
/// (`TM: abort_request`), so the prefix `job`, which no request has, stops nothing; the scheduler then stops
/// every request whose rid starts with the known one (`SCH: abort_request`), so `job-a` also stops `job-a-2`.
#[tokio::test(start_paused = true)]
async fn abort_request_needs_a_live_rid_then_stops_every_request_it_prefixes() {
    let server = InProcess::new(slow());
    let a = spawn_generate(&server, request("job-a", 50, false));
    let b = spawn_generate(&server, request("job-a-2", 50, false));
    let other = spawn_generate(&server, request("other", 5, false));
    advance_ms(1500).await;
    let reply = post(&server, "/abort_request", json!({"rid": "job"})).await;
    assert_eq!(reply.status, 200);
    advance_ms(2000).await;
    assert_eq!(
        stats(&server).await["running"],
        3,
        "no request's rid is `job`"
    );
    let reply = post(&server, "/abort_request", json!({"rid": "job-a"})).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.body.is_empty(),
        "an empty body, as SGLang's Response(200)"
    );
    for handle in [a, b] {
        let reply = handle.await.unwrap();
        assert_eq!(reply.status, 200);
        let v = reply.json();
        assert_eq!(
            v["meta_info"]["finish_reason"],
            json!({"type": "abort", "message": "Aborted", "status_code": null, "err_type": null})
        );
        let n = ids(&v).len();
        assert_eq!(
            n, 5,
            "one token at once, one per simulated second for 3.5 s, then the step SGLang runs after an abort"
        );
        assert_eq!(v["meta_info"]["completion_tokens"], n);
        assert_eq!(
            v["meta_info"]["output_token_logprobs"]
                .as_array()
                .unwrap()
                .len(),
            n
        );
        // The partial answer is the start of the full one, logprobs included.
        let rid = v["meta_info"]["id"].as_str().unwrap().to_owned();
        let full = server
            .oracle
            .expect(&serde_json::to_vec(&request(&rid, 50, false)).unwrap())
            .unwrap();
        assert_eq!(
            v["meta_info"]["output_token_logprobs"].as_array().unwrap()[..],
            full.body["meta_info"]["output_token_logprobs"]
                .as_array()
                .unwrap()[..n]
        );
    }
    let other = other.await.unwrap().json();
    assert_eq!(other["meta_info"]["finish_reason"]["type"], "length");
    // Unknown rids and an empty rid are no-ops with 200.
    assert_eq!(
        post(&server, "/abort_request", json!({"rid": "nobody"}))
            .await
            .status,
        200
    );
    assert_eq!(post(&server, "/abort_request", json!({})).await.status, 200);
    let bad = server.post("/abort_request", "{not json").await;
    assert_eq!(bad.status, 400);
}

#[tokio::test(start_paused = true)]
async fn abort_all_ends_streams_with_an_abort_chunk_then_done() {
    let server = InProcess::new(slow());
    let streamed = spawn_generate(&server, request("s1", 50, true));
    advance_ms(2500).await;
    post(&server, "/abort_request", json!({"abort_all": true})).await;
    let reply = streamed.await.unwrap();
    let chunks = sse_json(&reply.body);
    let last = chunks.last().unwrap();
    assert_eq!(last["meta_info"]["finish_reason"]["type"], "abort");
    assert_eq!(last["meta_info"]["finish_reason"]["message"], "Aborted");
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c["meta_info"]["finish_reason"].is_null())
    );
    // Three tokens in 2.5 s, then the abort chunk with the token of the step the abort let run.
    assert_eq!(ids(last).len(), chunks.len());
    assert_eq!(chunks.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn queued_requests_abort_with_the_waiting_queue_shape_and_a_full_queue_is_503() {
    let server = InProcess::new(ServerConfig {
        max_running_requests: Some(1),
        max_queued_requests: Some(1),
        ..slow()
    });
    let running = spawn_generate(&server, request("run", 5, false));
    advance_ms(10).await;
    let queued = spawn_generate(&server, request("queued", 5, false));
    let queued_stream = {
        // The queue holds one: a second waiting request is refused.
        advance_ms(10).await;
        let full = server.generate(&request("third", 5, false)).await;
        assert_eq!(full.status, 503);
        assert_eq!(
            full.text(),
            r#"{"object":"error","message":"The request queue is full.","type":"503","param":null,"code":503}"#
        );
        let full_stream = server.generate(&request("fourth", 5, true)).await;
        assert_eq!(full_stream.status, 200);
        sse_json(&full_stream.body)
    };
    assert_eq!(
        queued_stream[0]["meta_info"]["finish_reason"],
        json!({"type": "abort", "status_code": 503, "message": "The request queue is full."})
    );
    let s = stats(&server).await;
    assert_eq!(
        (s["running"].clone(), s["waiting"].clone()),
        (json!(1), json!(1))
    );
    let load = server.get("/v1/loads").await.json();
    assert_eq!(load["loads"][0]["num_waiting_reqs"], 1);

    post(&server, "/abort_request", json!({"rid": "queued"})).await;
    let reply = queued.await.unwrap();
    assert_eq!(reply.status, 200);
    let node = parse_json(&reply.body);
    assert_eq!(
        keys(&node["meta_info"]),
        WAITING_ABORT_META_KEYS,
        "no prompt_tokens, no cached_tokens"
    );
    assert_eq!(
        reply.json()["meta_info"]["finish_reason"],
        json!({"type": "abort", "message": "Abort in waiting queue"})
    );
    let done = running.await.unwrap().json();
    assert_eq!(done["meta_info"]["finish_reason"]["type"], "length");
}

#[tokio::test(start_paused = true)]
async fn the_running_limit_serialises_requests() {
    let server = InProcess::new(ServerConfig {
        max_running_requests: Some(1),
        ..slow()
    });
    let started = tokio::time::Instant::now();
    let a = spawn_generate(&server, request("a", 3, false));
    let b = spawn_generate(&server, request("b", 3, false));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 200));
    // Each takes 2 simulated seconds (3 tokens, 2 gaps); one at a time makes 4.
    assert_eq!(started.elapsed(), Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn pause_in_place_freezes_running_and_holds_new_requests_until_continue() {
    for mode in ["in_place", "retract"] {
        let server = InProcess::new(slow());
        let running = spawn_generate(&server, request("r", 6, false));
        advance_ms(1500).await;
        let reply = post(&server, "/pause_generation", json!({"mode": mode})).await;
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.text(),
            r#"{"message":"Generation paused successfully.","status":"ok"}"#
        );
        let held = spawn_generate(&server, request("new", 2, false));
        advance_ms(60_000).await;
        assert!(!running.is_finished() && !held.is_finished(), "{mode}");
        let s = stats(&server).await;
        assert_eq!(s["paused"], true);
        // A retracted request goes back to the scheduler's queue; the new one is held before the scheduler
        // (`TM: generate_request`), so it counts in no queue.
        let waiting = if mode == "retract" { 1 } else { 0 };
        assert_eq!(s["waiting"], waiting, "{mode}");
        let reply = post(&server, "/continue_generation", json!({})).await;
        assert_eq!(
            reply.text(),
            r#"{"message":"Generation continued successfully.","status":"ok"}"#
        );
        for (handle, rid, n) in [(running, "r", 6), (held, "new", 2)] {
            let v = handle.await.unwrap().json();
            let expected = server
                .oracle
                .expect(&serde_json::to_vec(&request(rid, n, false)).unwrap())
                .unwrap();
            assert_eq!(
                ids(&v),
                ids(&expected.body),
                "{mode}: resumed output is unchanged"
            );
            let retracted = u64::from(mode == "retract" && rid == "r");
            assert_eq!(v["meta_info"]["num_retractions"], retracted, "{mode} {rid}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn pause_in_abort_mode_aborts_in_flight_requests() {
    let server = InProcess::new(slow());
    let running = spawn_generate(&server, request("r", 50, false));
    advance_ms(2500).await;
    post(&server, "/pause_generation", json!({})).await;
    let v = running.await.unwrap().json();
    assert_eq!(v["meta_info"]["finish_reason"]["message"], "Aborted");
    assert!(!ids(&v).is_empty());
    let bad = post(&server, "/pause_generation", json!({"mode": "sideways"})).await;
    assert_eq!(bad.status, 400);
    post(&server, "/continue_generation", json!({})).await;
    let after = server.generate(&request("after", 2, false)).await.json();
    assert_eq!(after["meta_info"]["finish_reason"]["type"], "length");
}

#[tokio::test]
async fn weight_versions_change_what_responses_report() {
    let server = InProcess::new(ServerConfig {
        weight_version: "v0".to_owned(),
        ..ServerConfig::default()
    });
    let version = |v: &Value| v["meta_info"]["weight_version"].clone();
    assert_eq!(
        version(&server.generate(&request("a", 2, false)).await.json()),
        "v0"
    );

    let reply = post(
        &server,
        "/update_weight_version",
        json!({"new_version": "v1"}),
    )
    .await;
    assert_eq!(
        reply.json(),
        json!({"success": true, "message": "Weight version updated to v1", "new_version": "v1"})
    );
    assert_eq!(
        version(&server.generate(&request("b", 2, false)).await.json()),
        "v1"
    );
    let chunks = sse_json(&server.generate(&request("c", 2, true)).await.body);
    assert!(chunks.iter().all(|c| version(c) == "v1"));
    assert_eq!(
        server.get("/model_info").await.json()["weight_version"],
        "v1"
    );
    assert_eq!(
        server.get("/server_info").await.json()["weight_version"],
        "v1"
    );

    let reply = post(
        &server,
        "/update_weights_from_disk",
        json!({"model_path": CHECKPOINT_DIR, "weight_version": "v2"}),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({
            "success": true,
            "message": "Succeeded to update model weights. Weight version updated to v2.",
            "num_paused_requests": 0
        })
    );
    assert_eq!(
        version(&server.generate(&request("d", 2, false)).await.json()),
        "v2"
    );
    let missing = post(&server, "/update_weights_from_disk", json!({})).await;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.json()["object"], "error");

    for (path, body) in [
        (
            "/update_weights_from_tensor",
            json!({"serialized_named_tensors": [], "weight_version": "v3"}),
        ),
        (
            "/update_weights_from_distributed",
            json!({"names": [], "dtypes": [], "shapes": [], "weight_version": "v4"}),
        ),
        ("/init_weights_update_group", json!({"master_address": "x"})),
        ("/destroy_weights_update_group", json!({"group_name": "g"})),
    ] {
        let reply = post(&server, path, body).await;
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(
            keys(&parse_json(&reply.body)),
            ["success", "message"],
            "{path}"
        );
    }
    assert_eq!(
        version(&server.generate(&request("e", 2, false)).await.json()),
        "v4"
    );
    for path in ["/release_memory_occupation", "/resume_memory_occupation"] {
        assert_eq!(post(&server, path, json!({})).await.text(), "null");
    }
}

#[tokio::test(start_paused = true)]
async fn weight_updates_wait_for_running_requests_or_abort_them() {
    let server = InProcess::new(ServerConfig {
        weight_update_ms: 500,
        ..slow()
    });
    let running = spawn_generate(&server, request("r", 4, false));
    advance_ms(10).await;
    let update = {
        let server = server.clone();
        tokio::spawn(async move {
            post(
                &server,
                "/update_weights_from_disk",
                json!({"model_path": CHECKPOINT_DIR, "weight_version": "w1"}),
            )
            .await
        })
    };
    advance_ms(1000).await;
    assert!(
        !update.is_finished(),
        "the update waits for the running request"
    );
    // A request arriving during the update waits for it, then reports the new version.
    let during = spawn_generate(&server, request("during", 2, false));
    let v = running.await.unwrap().json();
    assert_eq!(v["meta_info"]["weight_version"], "default");
    assert_eq!(update.await.unwrap().status, 200);
    assert_eq!(
        during.await.unwrap().json()["meta_info"]["weight_version"],
        "w1"
    );

    let running = spawn_generate(&server, request("r2", 50, false));
    advance_ms(2500).await;
    let reply = post(
        &server,
        "/update_weight_version",
        json!({"new_version": "w2", "abort_all_requests": true}),
    )
    .await;
    assert_eq!(reply.status, 200);
    let v = running.await.unwrap().json();
    assert_eq!(v["meta_info"]["finish_reason"]["type"], "abort");
}

/// `/flush_cache` refuses while a request runs, with each release's text and no content type (Starlette's
/// `Response` without a media type), as the running releases answered (`mock-server/conform/golden/`).
#[tokio::test(start_paused = true)]
async fn flush_cache_refuses_while_requests_run() {
    const FLUSHED: &str = "Cache flushed.\nPlease check backend logs for more details. (When there are running or \
                           waiting requests, the operation will not be performed.)\n";
    for (release, refusal) in [
        ("0.5.3", FLUSHED),
        ("0.5.15", "Flush cache failed.\n"),
        ("0.5.23", "Flush cache failed.\n"),
    ] {
        let server = InProcess::new(ServerConfig {
            sglang_version: release.parse().unwrap(),
            ..slow()
        });
        let running = spawn_generate(&server, request("r", 3, false));
        advance_ms(10).await;
        let refused = server.post("/flush_cache", "").await;
        assert_eq!(refused.status, 400, "{release}");
        assert_eq!(refused.headers.get("content-type"), None, "{release}");
        assert_eq!(refused.text(), refusal, "{release}");
        running.await.unwrap();
        let flushed = server.post("/flush_cache", "").await;
        assert_eq!(flushed.status, 200);
        assert_eq!(flushed.headers.get("content-type"), None, "{release}");
        assert_eq!(flushed.text(), FLUSHED);
    }
}

#[tokio::test]
async fn control_and_admin_endpoints_need_the_api_key() {
    let server = InProcess::new(ServerConfig {
        api_key: Some("k".to_owned()),
        enable_metrics: true,
        ..ServerConfig::default()
    });
    for path in [
        "/abort_request",
        "/pause_generation",
        "/continue_generation",
        "/update_weight_version",
        "/admin/faults",
    ] {
        assert_eq!(server.post(path, "{}").await.status, 401, "{path}");
    }
    assert_eq!(server.get("/admin/stats").await.status, 401);
    let authorized = server
        .request(
            axum::http::Method::GET,
            "/admin/stats",
            axum::body::Body::empty(),
            &[("authorization", "Bearer k")],
        )
        .await;
    assert_eq!(authorized.status, 200);
    // SGLang's middleware lets /metrics through, as it does /health.
    assert_eq!(server.get("/metrics").await.status, 200);
    // Without `--enable-metrics` SGLang mounts no /metrics: a 404, as the running releases answer.
    let bare = InProcess::new(ServerConfig::default());
    let reply = bare.get("/metrics").await;
    assert_eq!(
        (reply.status.as_u16(), reply.text()),
        (404, r#"{"detail":"Not Found"}"#.to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_gives_up_while_queued_leaves_the_queue() {
    let server = InProcess::new(ServerConfig {
        max_running_requests: Some(1),
        ..slow()
    });
    let running = spawn_generate(&server, request("run", 3, false));
    let queued = spawn_generate(&server, request("queued", 3, false));
    advance_ms(10).await;
    assert_eq!(stats(&server).await["waiting"], 1);
    queued.abort();
    advance_ms(10).await;
    assert_eq!(stats(&server).await["waiting"], 0);
    running.await.unwrap();
    let s = stats(&server).await;
    assert_eq!(
        (s["running"].clone(), s["waiting"].clone()),
        (json!(0), json!(0))
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_abort_keeps_every_requested_logprob_key_empty() {
    let server = InProcess::new(ServerConfig {
        max_running_requests: Some(1),
        ..slow()
    });
    let running = spawn_generate(&server, request("run", 5, false));
    advance_ms(10).await;
    let mut body = request("queued", 5, false);
    body["top_logprobs_num"] = json!(2);
    body["token_ids_logprob"] = json!([5]);
    let queued = spawn_generate(&server, body);
    advance_ms(10).await;
    post(&server, "/abort_request", json!({"rid": "queued"})).await;
    let reply = queued.await.unwrap();
    assert_eq!(reply.status, 200);
    let mut want = WAITING_ABORT_META_KEYS.to_vec();
    let tail = want.split_off(want.len() - 2);
    want.extend([
        "input_top_logprobs",
        "output_top_logprobs",
        "input_token_ids_logprobs",
        "output_token_ids_logprobs",
    ]);
    want.extend(tail);
    let node = parse_json(&reply.body);
    assert_eq!(keys(&node["meta_info"]), want);
    let meta = &reply.json()["meta_info"];
    for key in want.iter().filter(|k| k.ends_with("_logprobs")) {
        assert_eq!(meta[key], json!([]), "{key}");
    }
    assert_eq!(meta["output_token_logprobs_length"], 0);
    assert_eq!(running.await.unwrap().status, 200);
}

/// `/admin/reset` undoes what a test did to a shared server: a replaced fault schedule, the counters, a pause
/// and a weight version; the start-up schedule fires again from its first request.
#[tokio::test]
async fn admin_reset_restores_the_server_as_it_started() {
    let server = InProcess::new(ServerConfig {
        weight_version: "v0".to_owned(),
        faults: mock_server::FaultConfig {
            seed: 0,
            rules: vec![mock_server::FaultRule {
                first: Some(1),
                ..mock_server::FaultRule::new("missing-logprobs".parse().expect("a fault"))
            }],
        },
        ..ServerConfig::default()
    });
    let startup_schedule = server.get("/admin/faults").await.json();
    let body =
        json!({"text": "reset", "sampling_params": {"max_new_tokens": 3}, "return_logprob": true});
    let has_logprobs = |v: &Value| v["meta_info"].get("output_token_logprobs").is_some();
    // The start-up rule takes the first request only.
    assert!(!has_logprobs(
        &post(&server, "/generate", body.clone()).await.json()
    ));
    assert!(has_logprobs(
        &post(&server, "/generate", body.clone()).await.json()
    ));
    post(
        &server,
        "/admin/faults",
        json!({"rules": [{"fault": "status;code=503"}]}),
    )
    .await;
    post(
        &server,
        "/update_weight_version",
        json!({"new_version": "v9"}),
    )
    .await;
    post(&server, "/pause_generation", json!({"mode": "in_place"})).await;
    let before = stats(&server).await;
    assert_eq!(
        (before["paused"].clone(), before["weight_version"].clone()),
        (json!(true), json!("v9"))
    );
    assert_eq!(before["requests"]["/generate"], 2);

    let reply = post(&server, "/admin/reset", json!({})).await;
    assert_eq!(reply.status, 200);
    let after = reply.json();
    assert_eq!(
        after,
        json!({
            "requests_total": 0, "requests": {}, "faults_total": 0, "faults": {},
            "running": 0, "waiting": 0, "paused": false, "weight_version": "v0",
        })
    );
    assert_eq!(server.get("/admin/faults").await.json(), startup_schedule);
    // Not paused (the request would wait forever) and the start-up rule counts from zero again.
    let first = post(&server, "/generate", body.clone()).await.json();
    assert!(!has_logprobs(&first), "{first}");
    assert_eq!(first["meta_info"]["weight_version"], "v0");
    assert!(has_logprobs(&post(&server, "/generate", body).await.json()));
}

/// SGLang's own `test_update_weights_from_disk.py`, as the SGLang-versions issue ran it against the mock: a
/// successful update changes the `model_path` (and `served_model_name`) that `/model_info` reports, and a path the
/// loader cannot find answers `success: false` with the loader's message (`weight_updater.py:
/// update_weights_from_disk`, `huggingface_hub`'s repo-id validation or its offline cache miss), keeping the
/// weights, their version and the model path. The mock answered `success: true` and kept the old path.
#[tokio::test]
async fn a_weight_update_from_disk_changes_the_model_path_or_fails_as_the_loader_does() {
    let server = InProcess::new(ServerConfig::default());
    let info = |server: &InProcess| {
        let server = server.clone();
        async move { server.get("/model_info").await.json() }
    };
    let before = info(&server).await;
    let cases = [
        (
            "/no/such/checkpoint",
            "Failed to get weights iterator: Repo id must be in the form 'repo_name' or \
             'namespace/repo_name': '/no/such/checkpoint'. Use `repo_type` argument if needed..",
        ),
        (
            "org/not-cached",
            "Failed to get weights iterator: Cannot find an appropriate cached snapshot folder for the specified \
             revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and \
             downloads online, pass 'local_files_only=False' as input..",
        ),
        (
            "-bad-name",
            "Failed to get weights iterator: Repo id must use alphanumeric chars, '-', '_' or '.'. The name cannot \
             start or end with '-' or '.' and the maximum length is 96: '-bad-name'..",
        ),
    ];
    for (path, message) in cases {
        let reply = post(
            &server,
            "/update_weights_from_disk",
            json!({"model_path": path, "weight_version": "never"}),
        )
        .await;
        assert_eq!(reply.status, 400, "{path}");
        assert_eq!(
            reply.json(),
            json!({"success": false, "message": message, "num_paused_requests": 0}),
            "{path}"
        );
        assert_eq!(
            info(&server).await,
            before,
            "{path}: a failed update changes nothing"
        );
    }

    let reply = post(
        &server,
        "/update_weights_from_disk",
        json!({"model_path": CHECKPOINT_DIR}),
    )
    .await;
    assert_eq!(reply.json()["success"], true, "{}", reply.text());
    let after = info(&server).await;
    assert_eq!(after["model_path"], CHECKPOINT_DIR);
    assert_eq!(after["served_model_name"], CHECKPOINT_DIR);
    assert_eq!(after["tokenizer_path"], before["tokenizer_path"]);
    assert_eq!(
        server.get("/v1/models").await.json()["data"][0]["id"],
        CHECKPOINT_DIR
    );
    // The model the server started with is in the loader's cache: going back succeeds.
    let original = before["model_path"]
        .as_str()
        .expect("a model path")
        .to_owned();
    let reply = post(
        &server,
        "/update_weights_from_disk",
        json!({"model_path": original}),
    )
    .await;
    assert_eq!(reply.json()["success"], true, "{}", reply.text());
    assert_eq!(info(&server).await["model_path"], before["model_path"]);
}

/// SGLang's `test_srt_endpoint.py`, as the SGLang-versions issue ran it: a second `/generate` with the `rid` of a
/// request still running is refused in 0.5.15 and 0.5.23 (`TM: _init_req_state`, before the pause gate): a
/// non-stream 400 `{"error": {"message": "Duplicate request ID detected: <rid>"}}`, and for a stream the error
/// frame and `[DONE]`. Once the first has finished the rid is free again; 0.5.3 has no check. The mock served
/// the second request.
#[tokio::test(start_paused = true)]
async fn a_second_request_with_a_live_rid_is_refused_where_the_release_refuses_it() {
    let message = json!({"error": {"message": "Duplicate request ID detected: dup"}});
    for version in mock_server::SglangVersion::all() {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..slow()
        });
        let first = spawn_generate(&server, request("dup", 3, false));
        advance_ms(10).await;
        let second = spawn_generate(&server, request("dup", 1, false));
        let streamed = spawn_generate(&server, request("dup", 1, true));
        advance_ms(5000).await;
        let (second, streamed) = (second.await.unwrap(), streamed.await.unwrap());
        assert_eq!(first.await.unwrap().status, 200, "{version}");
        if version.as_str() == "0.5.3" {
            assert_eq!(second.status, 200, "{version}: {}", second.text());
            assert_eq!(second.json()["meta_info"]["id"], "dup");
        } else {
            assert_eq!(second.status, 400, "{version}");
            assert_eq!(second.json(), message, "{version}");
            assert_eq!(streamed.status, 200, "{version}");
            let frame = json!({"error": {"message": "Duplicate request ID detected: dup",
                "type": "invalid_request_error", "code": 400, "retryable": false}});
            assert_eq!(
                streamed.text(),
                format!("data: {frame}\n\ndata: [DONE]\n\n"),
                "{version}"
            );
        }
        // The rid is free once its request has finished.
        let again = spawn_generate(&server, request("dup", 1, false));
        advance_ms(2000).await;
        assert_eq!(again.await.unwrap().status, 200, "{version}");
    }
}

/// The duplicate check comes before the pause gate, so a rid held at the gate is live too.
#[tokio::test(start_paused = true)]
async fn a_rid_held_at_the_pause_gate_is_live() {
    let server = InProcess::new(ServerConfig::default());
    assert_eq!(
        post(&server, "/pause_generation", json!({})).await.status,
        200
    );
    let held = spawn_generate(&server, request("held", 2, false));
    advance_ms(100).await;
    let second = post(&server, "/generate", request("held", 2, false)).await;
    assert_eq!(second.status, 400);
    assert_eq!(
        second.json()["error"]["message"],
        "Duplicate request ID detected: held"
    );
    assert_eq!(
        post(&server, "/continue_generation", json!({}))
            .await
            .status,
        200
    );
    advance_ms(100).await;
    assert_eq!(held.await.unwrap().status, 200);
}

/// AReaL's and verl's client code against the mock, as the SGLang-versions issue ran it: a `/generate` that
/// arrives while generation is paused waits in the tokenizer manager before it reaches the scheduler
/// (`TM: generate_request`), and abort-all only clears the scheduler's queues, so the request survives an
/// `/abort_request` with `abort_all`, a weight update with `abort_all_requests`, and a pause in abort mode (by
/// rid too), then runs normally after `/continue_generation`. The mock aborted it with "Abort in waiting queue"
/// and no tokens.
#[tokio::test(start_paused = true)]
async fn a_request_held_at_the_pause_gate_survives_every_abort_all_and_runs_after_continue() {
    let aborts: [(&str, Value); 4] = [
        ("/abort_request", json!({"abort_all": true})),
        ("/abort_request", json!({"rid": "held"})),
        (
            "/update_weights_from_disk",
            json!({"model_path": CHECKPOINT_DIR, "abort_all_requests": true}),
        ),
        ("/pause_generation", json!({"mode": "abort"})),
    ];
    for (path, body) in aborts {
        let server = InProcess::new(slow());
        assert_eq!(
            post(&server, "/pause_generation", json!({})).await.status,
            200
        );
        let held = spawn_generate(&server, request("held", 2, false));
        advance_ms(100).await;
        let reply = post(&server, path, body.clone()).await;
        assert_eq!(reply.status, 200, "{path} {body}: {}", reply.text());
        advance_ms(5000).await;
        assert!(
            !held.is_finished(),
            "{path} {body}: the held request still waits"
        );
        assert_eq!(
            post(&server, "/continue_generation", json!({}))
                .await
                .status,
            200
        );
        advance_ms(5000).await;
        let answer = held.await.unwrap().json();
        let expected = server
            .oracle
            .expect(&serde_json::to_vec(&request("held", 2, false)).unwrap())
            .unwrap();
        assert_eq!(ids(&answer), ids(&expected.body), "{path} {body}");
        assert_eq!(
            answer["meta_info"]["finish_reason"]["type"], "length",
            "{path} {body}"
        );
    }
}

/// 0.5.23's `weight_versions` (`srt/utils/weight_versions.py`): when the weight version changes while a
/// request is live, the finished object's spans split its output tokens at the change, the spans cover the
/// output exactly, and `weight_version` is the last span's. Each stream chunk reports the version current when
/// it was sent, so the chunks up to the boundary say the old one. 0.5.15 has no spans and reports the version
/// now.
#[tokio::test(start_paused = true)]
async fn a_version_change_while_a_request_runs_splits_its_weight_version_spans() {
    for version in [
        mock_server::SglangVersion::V0_5_23,
        mock_server::SglangVersion::V0_5_15,
    ] {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..slow()
        });
        let streamed = spawn_generate(&server, request("s", 6, true));
        let whole = spawn_generate(&server, request("w", 6, false));
        advance_ms(2500).await;
        let reply = post(
            &server,
            "/update_weight_version",
            json!({"new_version": "v2", "abort_all_requests": false}),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        advance_ms(10_000).await;
        let chunks = sse_json(&streamed.await.unwrap().body);
        let whole = whole.await.unwrap().json();
        let last = &chunks.last().expect("chunks")["meta_info"];
        for meta in [last, &whole["meta_info"]] {
            assert_eq!(meta["weight_version"], "v2", "{version}: {meta}");
            if version.as_str() == "0.5.15" {
                assert!(meta.get("weight_versions").is_none(), "{version}");
                continue;
            }
            let spans = meta["weight_versions"].as_array().expect("spans");
            assert_eq!(spans.len(), 2, "{meta}");
            let boundary = spans[0]["end"].as_u64().unwrap();
            assert!((1..6).contains(&boundary), "{meta}");
            assert_eq!(
                meta["weight_versions"],
                json!([{"version": "default", "start": 0, "end": boundary},
                       {"version": "v2", "start": boundary, "end": 6}])
            );
        }
        if version.as_str() == "0.5.23" {
            let boundary = last["weight_versions"][0]["end"].as_u64().unwrap();
            for chunk in &chunks {
                let meta = &chunk["meta_info"];
                let want = if meta["completion_tokens"].as_u64().unwrap() <= boundary {
                    "default"
                } else {
                    "v2"
                };
                assert_eq!(meta["weight_version"], want, "{meta}");
            }
        }
    }
}

/// 0.5.3's tokenizer manager reports a request the scheduler aborted in its waiting queue as "Abort before
/// prefill", with no `output_ids` and no logprob keys (its `_handle_abort_req`); 0.5.15 introduced the waiting
/// shape the other releases send.
#[tokio::test(start_paused = true)]
async fn a_0_5_3_waiting_abort_is_the_abort_before_prefill_object() {
    let server = InProcess::new(ServerConfig {
        sglang_version: mock_server::SglangVersion::V0_5_3,
        max_running_requests: Some(1),
        ..slow()
    });
    let running = spawn_generate(&server, request("run", 3, false));
    advance_ms(10).await;
    let queued = spawn_generate(&server, request("queued", 3, false));
    advance_ms(10).await;
    post(&server, "/abort_request", json!({"rid": "queued"})).await;
    let reply = queued.await.unwrap();
    assert_eq!(
        reply.text(),
        r#"{"text":"","meta_info":{"id":"queued","finish_reason":{"type":"abort","message":"Abort before prefill"},"prompt_tokens":0,"completion_tokens":0}}"#
    );
    advance_ms(5000).await;
    assert_eq!(running.await.unwrap().status, 200);
}

/// The pause semantics of each release. 0.5.15 and later read `PauseGenerationReqInput`, and in abort mode
/// return only once no request runs (`TM: pause_generation` loops its abort-all until the model-update lock is
/// free); 0.5.3 reads no body at all and always aborts (it returns at once, which a test cannot tell apart
/// from an abort that happens to land first). `/continue_generation` reads
/// `ContinueGenerationReqInput` from 0.5.15 on, and no body in 0.5.3.
#[tokio::test(start_paused = true)]
async fn each_release_pauses_as_its_tokenizer_manager_does() {
    for version in mock_server::SglangVersion::all() {
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            ..slow()
        });
        let running = spawn_generate(&server, request("r", 50, false));
        advance_ms(2500).await;
        // 0.5.3 ignores the mode: this is an abort-mode pause there.
        let body = if version.as_str() == "0.5.3" {
            json!({"mode": "in_place"})
        } else {
            json!({})
        };
        assert_eq!(post(&server, "/pause_generation", body).await.status, 200);
        if version.as_str() != "0.5.3" {
            let still_running = stats(&server).await["running"].as_u64().unwrap();
            assert_eq!(
                still_running, 0,
                "{version}: the pause returns once nothing runs"
            );
        }
        let v = running.await.unwrap().json();
        assert_eq!(
            v["meta_info"]["finish_reason"]["message"], "Aborted",
            "{version}"
        );

        let garbage = server.post("/pause_generation", "not json").await;
        // Pydantic's lax `bool` reads "yes" (the running 0.5.23 continues), not "nah".
        let typed = post(
            &server,
            "/continue_generation",
            json!({"torch_empty_cache": "nah"}),
        )
        .await;
        let lax = post(
            &server,
            "/continue_generation",
            json!({"torch_empty_cache": "yes"}),
        )
        .await;
        assert_eq!(lax.status, 200, "{version}: {}", lax.text());
        if version.as_str() == "0.5.3" {
            assert_eq!(garbage.status, 200, "0.5.3 reads no body");
            assert_eq!(typed.status, 200, "0.5.3 reads no body");
        } else {
            assert_eq!(garbage.status, 400, "{version}");
            assert_eq!(typed.status, 400, "{version}");
            assert_eq!(
                post(&server, "/continue_generation", json!({}))
                    .await
                    .status,
                200
            );
        }
        let after = server.generate(&request("after", 2, false)).await.json();
        assert_eq!(
            after["meta_info"]["finish_reason"]["type"], "length",
            "{version}"
        );
    }
}

/// A batch under one rid is the requests `rid_0`, `rid_1`, ... (`GenerateReqInput._normalize_rid`): its parent
/// rid is no request's, so aborting it does nothing, and `rid_0` stops only the first (with any rid it
/// prefixes, such as `rid_0...`). `n > 1` samples get fresh ids, so only an abort-all stops them.
#[tokio::test(start_paused = true)]
async fn a_batchs_parent_rid_aborts_nothing_and_an_items_rid_aborts_that_item() {
    let server = InProcess::new(slow());
    let mut batch = request("batch", 4, false);
    batch["text"] = json!(["first prompt", "second prompt"]);
    let batch = spawn_generate(&server, batch);
    let mut parallel = request("samples", 4, false);
    parallel["sampling_params"]["n"] = json!(2);
    let parallel = spawn_generate(&server, parallel);
    advance_ms(1500).await;
    for rid in ["batch", "samples"] {
        assert_eq!(
            post(&server, "/abort_request", json!({"rid": rid}))
                .await
                .status,
            200
        );
    }
    post(&server, "/abort_request", json!({"rid": "batch_0"})).await;
    advance_ms(10_000).await;
    let kinds = |reply: Reply| -> Vec<Value> {
        reply
            .json()
            .as_array()
            .expect("a list")
            .iter()
            .map(|item| item["meta_info"]["finish_reason"]["type"].clone())
            .collect()
    };
    assert_eq!(
        kinds(batch.await.unwrap()),
        [json!("abort"), json!("length")]
    );
    assert_eq!(
        kinds(parallel.await.unwrap()),
        [json!("length"), json!("length")]
    );
}

/// Control bodies are read as the release's model reads them, in Pydantic's lax mode: `"abort_all": "yes"`, `1`
/// or `"true"` is an abort of everything and `"abort_all_requests": "no"` keeps the requests running (the running
/// 0.5.23 answered each with 200), while a value the model refuses, and a `/continue_generation` body that is
/// not an object, get the model's errors (the lines are the running 0.5.23's for the same bodies).
#[tokio::test]
async fn control_bodies_are_read_in_pydantics_lax_mode() {
    let server = InProcess::new(ServerConfig {
        enable_metrics: true,
        ..ServerConfig::default()
    });
    // `sglang:num_aborted_requests_total` counts each abort of everything the server dispatches.
    let aborts = || async {
        let text = server.get("/metrics").await.text();
        text.lines()
            .find(|line| line.starts_with("sglang:num_aborted_requests_total"))
            .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no abort counter in:\n{text}"))
    };
    let before = aborts().await;
    for flag in [json!("yes"), json!(1), json!("true")] {
        let reply = post(&server, "/abort_request", json!({"abort_all": flag})).await;
        assert_eq!(reply.status, 200, "{flag}: {}", reply.text());
    }
    assert_eq!(
        aborts().await - before,
        3.0,
        "each lax `true` aborts everything"
    );
    let reply = post(
        &server,
        "/update_weight_version",
        json!({"new_version": "v", "abort_all_requests": "no"}),
    )
    .await;
    assert_eq!(reply.json()["success"], true, "{}", reply.text());
    let message = |reply: &Reply| reply.json()["message"].as_str().unwrap_or("").to_owned();
    let reply = post(&server, "/abort_request", json!({"abort_all": "maybe"})).await;
    assert_eq!(reply.status, 400);
    assert!(message(&reply).starts_with(concat!(
        "2 validation errors:\n",
        "  {'type': 'is_instance_of', 'loc': ('body', 'is-instance[AbortReq]'), 'msg': 'Input should be an instance of AbortReq', 'input': {'abort_all': 'maybe'}, 'ctx': {'class': 'AbortReq'}}\n",
        "  {'type': 'bool_parsing', 'loc': ('body', 'function-after[build_struct(), AbortReq]', 'abort_all'), 'msg': 'Input should be a valid boolean, unable to interpret input', 'input': 'maybe'}\n",
    )), "{}", message(&reply));
    let reply = post(&server, "/continue_generation", json!([1])).await;
    assert_eq!(reply.status, 400);
    assert!(message(&reply).starts_with(concat!(
        "2 validation errors:\n",
        "  {'type': 'is_instance_of', 'loc': ('body', 'is-instance[ContinueGenerationReqInput]'), 'msg': 'Input should be an instance of ContinueGenerationReqInput', 'input': [1], 'ctx': {'class': 'ContinueGenerationReqInput'}}\n",
        "  {'type': 'dict_type', 'loc': ('body', 'function-after[build_struct(), ContinueGenerationReqInput]'), 'msg': 'Input should be a valid dictionary', 'input': [1]}\n",
    )), "{}", message(&reply));
    assert_eq!(
        post(
            &server,
            "/continue_generation",
            json!({"torch_empty_cache": "off"})
        )
        .await
        .status,
        200
    );
}
