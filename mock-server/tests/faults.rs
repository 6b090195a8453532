//! Fault injection: every fault kind's exact bytes or connection behaviour, the header, the schedule through
//! `/admin/faults` (first N, every k-th, seeded rate, endpoint and stream filters) and `/admin/stats`.

use std::io::{Read, Write};

use axum::http::Method;
use mock_server::{FaultConfig, FaultRule, ServerConfig, StreamFilter};
use serde_json::{Value, json};

use crate::common::{
    InProcess, Live, Reply, WAITING_ABORT_META_KEYS, keys, parse_json, read_sse, zero_sent_ts,
};

/// Seeded, so that every request of it is the same sample and a faulted answer can be compared with the clean
/// one (identical unseeded requests draw anew, MODEL.md 8.3).
const PROMPT: &str = r#"{"text":"fault","rid":"f1","sampling_params":{"max_new_tokens":4,"ignore_eos":true,"sampling_seed":7},"return_logprob":true}"#;

fn stream_body() -> String {
    PROMPT.replace("\"return_logprob\"", "\"stream\":true,\"return_logprob\"")
}

async fn with_fault(server: &InProcess, body: &str, fault: &str) -> Reply {
    server
        .request(
            Method::POST,
            "/generate",
            body.to_owned(),
            &[
                ("content-type", "application/json"),
                ("x-mock-fault", fault),
            ],
        )
        .await
}

/// `(fault, status, content type, exact body or None, Retry-After)`.
type StatusCase = (
    &'static str,
    u16,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

#[tokio::test]
async fn status_faults_answer_with_sglangs_body_for_the_status() {
    let server = InProcess::new(ServerConfig::default());
    let cases: &[StatusCase] = &[
        (
            "status;code=400",
            400,
            "application/json",
            Some(r#"{"error":{"message":"Bad request (injected fault)."}}"#),
            None,
        ),
        (
            "status;code=429;retry_after=7",
            429,
            "application/json",
            Some(
                r#"{"object":"error","message":"Too many requests.","type":"429","param":null,"code":429}"#,
            ),
            Some("7"),
        ),
        (
            "status;code=500",
            500,
            "text/plain; charset=utf-8",
            Some("Internal Server Error"),
            None,
        ),
        (
            "status;code=503",
            503,
            "application/json",
            Some(
                r#"{"object":"error","message":"The request queue is full.","type":"503","param":null,"code":503}"#,
            ),
            None,
        ),
        (
            "status;code=502;message=bad gateway",
            502,
            "application/json",
            Some(
                r#"{"object":"error","message":"bad gateway","type":"502","param":null,"code":502}"#,
            ),
            None,
        ),
    ];
    for &(fault, status, content_type, body, retry_after) in cases {
        for request in [PROMPT.to_owned(), stream_body()] {
            let reply = with_fault(&server, &request, fault).await;
            assert_eq!(reply.status, status, "{fault}");
            assert_eq!(reply.content_type(), content_type, "{fault}");
            if let Some(body) = body {
                assert_eq!(reply.text(), body, "{fault}");
            }
            let header = reply
                .headers
                .get("retry-after")
                .and_then(|v| v.to_str().ok());
            assert_eq!(header, retry_after, "{fault}");
        }
    }
}

#[tokio::test]
async fn unknown_kinds_and_bad_parameters_are_a_clear_400() {
    let server = InProcess::new(ServerConfig::default());
    for (fault, needle) in [
        ("explode", "unknown fault kind \\\"explode\\\""),
        ("stall;seconds=1", "takes no parameter \\\"seconds\\\""),
        ("stall;ms=soon", "is not valid"),
        ("status;code=200", "HTTP error status"),
        ("truncate-stream", "only applies to streamed requests"),
    ] {
        let reply = with_fault(&server, PROMPT, fault).await;
        assert_eq!(reply.status, 400, "{fault}: {}", reply.text());
        assert!(reply.text().contains(needle), "{fault}: {}", reply.text());
        assert_eq!(reply.json()["code"], 400);
    }
    // Body faults make no sense on other endpoints: refused, not ignored.
    let reply = server
        .request(
            Method::GET,
            "/model_info",
            axum::body::Body::empty(),
            &[("x-mock-fault", "missing-logprobs")],
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
}

/// The normal body of [`PROMPT`], then what each body fault turns it into.
#[tokio::test]
async fn body_faults_splice_the_normal_bytes() {
    let server = InProcess::new(ServerConfig::default());
    let normal = server.post("/generate", PROMPT).await;
    assert_eq!(normal.status, 200);
    let json = normal.json();
    let ids: Vec<u64> = json["output_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let lps = json["meta_info"]["output_token_logprobs"].clone();
    let first_lp = lps[0][0].as_f64().unwrap();
    // Each case: the fault and a check of the body text it produces.
    type Check = Box<dyn Fn(&str)>;
    let parse = |s: &str| serde_json::from_str::<Value>(s).expect("still JSON");
    let ids_c = ids.clone();
    let cases: Vec<(&str, Check)> = vec![
        (
            "missing-meta-info",
            Box::new(move |s| {
                let v = parse(s);
                assert!(v.get("meta_info").is_none());
                assert_eq!(keys(&parse_json(s.as_bytes())), ["text", "output_ids"]);
            }),
        ),
        (
            "missing-logprobs",
            Box::new(move |s| {
                let v = parse(s);
                assert!(v["meta_info"].get("output_token_logprobs").is_none());
                assert!(v["meta_info"].get("input_token_logprobs").is_some());
            }),
        ),
        (
            "short-logprobs;by=2",
            Box::new(move |s| {
                let v = parse(s);
                assert_eq!(
                    v["meta_info"]["output_token_logprobs"]
                        .as_array()
                        .unwrap()
                        .len(),
                    2
                );
                assert_eq!(v["output_ids"].as_array().unwrap().len(), 4);
            }),
        ),
        (
            "long-logprobs",
            Box::new(move |s| {
                let v = parse(s);
                assert_eq!(
                    v["meta_info"]["output_token_logprobs"]
                        .as_array()
                        .unwrap()
                        .len(),
                    5
                );
            }),
        ),
        (
            "null-logprob;at=2",
            Box::new(move |s| {
                let v = parse(s);
                assert_eq!(v["meta_info"]["output_token_logprobs"][2][0], Value::Null);
                assert_eq!(v["meta_info"]["output_token_logprobs"][2][1], ids_c[2]);
            }),
        ),
        (
            "nan-logprob",
            Box::new(move |s| {
                assert!(s.contains(&format!(
                    r#""output_token_logprobs":[[NaN,{},null]"#,
                    ids[0]
                )));
                assert!(serde_json::from_str::<Value>(s).is_err(), "NaN is not JSON");
            }),
        ),
        (
            "nan-logprob;value=Infinity;at=1",
            Box::new(move |s| assert!(s.contains(",[Infinity,"), "{s}")),
        ),
        (
            "positive-logprob;value=0.25",
            Box::new(move |s| {
                assert_eq!(parse(s)["meta_info"]["output_token_logprobs"][0][0], 0.25);
            }),
        ),
        (
            "wrong-token-id",
            Box::new(move |s| {
                let v = parse(s);
                assert_ne!(
                    v["meta_info"]["output_token_logprobs"][0][1],
                    v["output_ids"][0]
                );
            }),
        ),
        (
            "string-logprob",
            Box::new(move |s| {
                let v = parse(s);
                let lp = v["meta_info"]["output_token_logprobs"][0][0]
                    .as_str()
                    .unwrap();
                assert_eq!(lp.parse::<f64>().unwrap(), first_lp);
            }),
        ),
    ];
    for (fault, check) in cases {
        let reply = with_fault(&server, PROMPT, fault).await;
        assert_eq!(reply.status, 200, "{fault}");
        check(&reply.text());
        // Everything before `meta_info` is untouched.
        let head = normal.text();
        let head = &head[..head.find(",\"meta_info\"").unwrap()];
        assert!(reply.text().starts_with(head), "{fault}");
    }

    let cut = with_fault(&server, PROMPT, "truncated-body;keep=20").await;
    assert_eq!(cut.status, 200);
    assert_eq!(cut.body, normal.body[..20]);
    // By default half of the answer's own body is kept. That body differs from `normal` in its timing fields
    // (`e2e_latency`, `response_sent_to_client_ts`), whose lengths vary between runs, so the comparison stops
    // where they start and the length is held to half within their possible difference.
    let half = with_fault(&server, PROMPT, "truncated-body").await;
    let timing = normal
        .text()
        .find("\"e2e_latency\"")
        .expect("a timing field");
    let same = half.body.len().min(timing);
    assert_eq!(half.body[..same], normal.body[..same]);
    let timing_slack = 48;
    assert!(
        (2 * half.body.len()).abs_diff(normal.body.len()) <= timing_slack,
        "kept {} of a body of about {}",
        half.body.len(),
        normal.body.len()
    );
    assert!(serde_json::from_slice::<Value>(&half.body).is_err());
}

#[tokio::test]
async fn body_faults_apply_to_every_stream_chunk() {
    let server = InProcess::new(ServerConfig::default());
    let reply = with_fault(&server, &stream_body(), "missing-logprobs").await;
    let events = read_sse(&reply.body).expect("framing intact");
    assert_eq!(events.len(), 4);
    for event in events {
        let v: Value = serde_json::from_slice(&event).unwrap();
        assert!(v["meta_info"].get("output_token_logprobs").is_none());
    }
    let nan = with_fault(&server, &stream_body(), "nan-logprob").await;
    assert_eq!(
        String::from_utf8_lossy(&nan.body).matches("[[NaN,").count(),
        4
    );
}

#[tokio::test]
async fn stream_faults_change_the_framing_as_named() {
    // Every run sends the same seeded prompt: without a prefix cache each answers as the first did.
    let server = InProcess::new(ServerConfig {
        disable_radix_cache: true,
        ..ServerConfig::default()
    });
    // Each run stamps its first chunk's `response_sent_to_client_ts`: compared as 0.
    let normal = zero_sent_ts(&server.post("/generate", stream_body()).await.body);
    let normal_events = read_sse(&normal).unwrap();
    assert_eq!(normal_events.len(), 4);
    let frame = |e: &[u8]| {
        let mut v = b"data: ".to_vec();
        v.extend_from_slice(e);
        v.extend_from_slice(b"\n\n");
        v
    };

    let truncated = with_fault(&server, &stream_body(), "truncate-stream;after=2").await;
    assert_eq!(truncated.status, 200);
    assert_eq!(
        zero_sent_ts(&truncated.body),
        [frame(&normal_events[0]), frame(&normal_events[1])].concat(),
        "two chunks, then a clean end without [DONE]"
    );

    let duplicated = with_fault(&server, &stream_body(), "duplicate-chunk;at=1").await;
    let events = read_sse(&duplicated.body).unwrap();
    assert_eq!(events.len(), 5);
    assert_eq!(events[1], events[2]);

    let malformed = with_fault(&server, &stream_body(), "malformed-chunk;at=0").await;
    let malformed = zero_sent_ts(&malformed.body);
    let events = read_sse(&malformed).expect("framing stays intact");
    assert!(serde_json::from_slice::<Value>(&events[0]).is_err());
    assert_eq!(events[1], normal_events[1]);

    let error = with_fault(
        &server,
        &stream_body(),
        "error-event;after=1;message=engine died",
    )
    .await;
    assert_eq!(
        zero_sent_ts(&error.body),
        [
            frame(&normal_events[0]),
            // The default release's `stream_results` frame (0.5.15 and later).
            b"data: {\"error\":{\"message\":\"engine died\",\"type\":\"invalid_request_error\",\"code\":400,\"retryable\":false}}\n\ndata: [DONE]\n\n".to_vec()
        ]
        .concat()
    );
}

#[tokio::test]
async fn abort_shapes_match_sglangs() {
    let server = InProcess::new(ServerConfig::default());
    let body = r#"{"text":"fault","rid":"r1","sampling_params":{"max_new_tokens":8,"ignore_eos":true,"sampling_seed":7},"return_logprob":true}"#;

    let waiting = with_fault(&server, body, "abort-waiting").await;
    assert_eq!(waiting.status, 200);
    let node = parse_json(&waiting.body);
    assert_eq!(keys(&node), ["text", "output_ids", "meta_info"]);
    assert_eq!(keys(&node["meta_info"]), WAITING_ABORT_META_KEYS);
    let v = waiting.json();
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "abort", "message": "Abort in waiting queue"})
    );
    assert_eq!(v["meta_info"]["id"], "r1");

    let running = with_fault(&server, body, "abort-running;after=3").await;
    let v = running.json();
    assert_eq!(v["output_ids"].as_array().unwrap().len(), 3);
    assert_eq!(
        v["meta_info"]["output_token_logprobs"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "abort", "message": "Aborted", "status_code": null, "err_type": null})
    );
    assert!(v["meta_info"]["prompt_tokens"].as_u64().unwrap() > 0);
    // The partial output is the start of the full answer, with the same logprobs.
    let full = server.post("/generate", body).await.json();
    assert_eq!(
        v["output_ids"].as_array().unwrap()[..],
        full["output_ids"].as_array().unwrap()[..3]
    );

    let prefill = with_fault(&server, body, "abort-before-prefill").await;
    assert_eq!(
        prefill.text(),
        r#"{"text":"","meta_info":{"id":"r1","finish_reason":{"type":"abort","message":"Abort before prefill"},"prompt_tokens":0,"completion_tokens":0}}"#
    );

    let streamed = with_fault(
        &server,
        &body.replace("\"rid\"", "\"stream\":true,\"rid\""),
        "abort-running;after=2",
    )
    .await;
    let events = read_sse(&streamed.body).unwrap();
    assert_eq!(events.len(), 3, "two tokens, then the abort chunk");
    let last: Value = serde_json::from_slice(&events[2]).unwrap();
    assert_eq!(last["meta_info"]["finish_reason"]["type"], "abort");
    assert_eq!(last["output_ids"].as_array().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn delay_and_stall_take_their_time_on_the_tokio_clock() {
    let server = InProcess::new(ServerConfig::default());
    let t = tokio::time::Instant::now();
    let reply = with_fault(&server, PROMPT, "delay;ms=1500").await;
    assert_eq!(reply.status, 200);
    assert_eq!(t.elapsed().as_millis(), 1500);

    let t = tokio::time::Instant::now();
    with_fault(&server, PROMPT, "stall;ms=40").await;
    assert_eq!(
        t.elapsed().as_millis(),
        40,
        "non-stream: one stall before the body"
    );

    let t = tokio::time::Instant::now();
    let reply = with_fault(&server, &stream_body(), "stall;ms=40").await;
    assert_eq!(read_sse(&reply.body).unwrap().len(), 4);
    assert_eq!(
        t.elapsed().as_millis(),
        5 * 40,
        "stream: a stall before each of 4 chunks and [DONE]"
    );
}

#[tokio::test]
async fn reset_closes_the_connection_before_any_byte() {
    let live = Live::start(ServerConfig::default()).await;
    let addr = live.addr;
    let outcome = tokio::task::spawn_blocking(move || {
        let mut socket = std::net::TcpStream::connect(addr).unwrap();
        let request = format!(
            "POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-mock-fault: reset\r\n\
             content-length: {}\r\n\r\n{PROMPT}",
            PROMPT.len()
        );
        socket.write_all(request.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let result = socket.read_to_end(&mut buf);
        (result.map_err(|e| e.kind()), buf)
    })
    .await
    .unwrap();
    assert_eq!(outcome.1, b"", "no byte before the reset");
    assert_eq!(outcome.0, Err(std::io::ErrorKind::ConnectionReset));

    // The same for another endpoint, through the scheduled rule.
    let reply = live
        .client
        .get(live.url("/health"))
        .header("x-mock-fault", "reset")
        .send()
        .await;
    assert!(reply.is_err());
}

#[tokio::test]
async fn cut_stream_breaks_the_connection_mid_body_and_hang_never_answers() {
    let live = Live::start(ServerConfig::default()).await;
    let resp = live
        .client
        .post(live.url("/generate"))
        .header("x-mock-fault", "cut-stream;after=2")
        .body(stream_body())
        .send()
        .await
        .expect("headers arrive");
    assert_eq!(resp.status(), 200);
    let (received, failed) = read_until_broken(resp).await;
    assert!(failed, "the body ends with an error, not cleanly");
    assert_eq!(
        String::from_utf8_lossy(&received).matches("data: ").count(),
        2
    );

    // truncated-body on a stream: half of the first event, then a broken connection.
    let resp = live
        .client
        .post(live.url("/generate"))
        .header("x-mock-fault", "truncated-body")
        .body(stream_body())
        .send()
        .await
        .expect("headers arrive");
    let (received, failed) = read_until_broken(resp).await;
    assert!(failed, "the body ends with an error");
    assert!(received.starts_with(b"data: {") && !received.ends_with(b"\n\n"));

    let hung = live
        .client
        .post(live.url("/generate"))
        .header("x-mock-fault", "hang")
        .timeout(std::time::Duration::from_millis(200))
        .body(PROMPT)
        .send()
        .await;
    assert!(hung.is_err_and(|e| e.is_timeout()));
}

#[tokio::test]
async fn a_hung_request_does_not_hold_a_graceful_shutdown() {
    let live = Live::start(ServerConfig::default()).await;
    let request = live
        .client
        .post(live.url("/generate"))
        .header("x-mock-fault", "hang")
        .body(PROMPT)
        .send();
    let hung = tokio::spawn(request);
    // The request is hanging once the server has counted the fault.
    let counted = async {
        loop {
            let stats = live.client.get(live.url("/admin/stats")).send().await;
            let body = stats.expect("stats").bytes().await.expect("stats body");
            let stats: Value = serde_json::from_slice(&body).expect("stats JSON");
            if stats["faults"]["hang"].as_u64() == Some(1) {
                return;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), counted)
        .await
        .expect("the hang fault is injected");
    // The default hang lasts ten minutes; the shutdown must not wait for it.
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(30), live.stop()).await;
    assert!(
        stopped.is_ok(),
        "graceful shutdown waited for the hung request"
    );
    let answer = hung.await.expect("the request task joins");
    assert!(
        answer.is_err(),
        "a hang ends in a reset, never an answer: {answer:?}"
    );
}

async fn post_faults(server: &InProcess, config: &Value) -> Reply {
    server
        .post(
            "/admin/faults",
            serde_json::to_vec(config).expect("serialisable"),
        )
        .await
}

#[tokio::test]
async fn admin_faults_schedules_first_n_and_stats_count_them() {
    let server = InProcess::new(ServerConfig::default());
    let installed = post_faults(
        &server,
        &json!({"rules": [{"fault": "missing-logprobs", "first": 2, "stream": "nonstream"}]}),
    )
    .await;
    assert_eq!(installed.status, 200, "{}", installed.text());
    assert_eq!(server.get("/admin/faults").await.json(), installed.json());
    let mut missing = Vec::new();
    for _ in 0..3 {
        let v = server.post("/generate", PROMPT).await.json();
        missing.push(v["meta_info"].get("output_token_logprobs").is_none());
    }
    // A streamed request is not counted by a nonstream rule.
    server.post("/generate", stream_body()).await;
    assert_eq!(missing, [true, true, false]);
    let stats = server.get("/admin/stats").await.json();
    assert_eq!(stats["requests"]["/generate"], 4);
    assert_eq!(stats["faults"], json!({"missing-logprobs": 2}));
    assert_eq!(stats["faults_total"], 2);

    // An invalid configuration is refused and the old one stays.
    for bad in [
        json!({"rules": [{"fault": "nope"}]}),
        json!({"rules": [{"fault": "stall;ms=1", "rate": 2.0}]}),
        json!({"rules": [{"fault": "stall;ms=1", "every": 0}]}),
        json!({"rules": [{"fault": "missing-logprobs", "endpoint": "/health"}]}),
        json!({"rules": [{"fault": "stall", "colour": "red"}]}),
    ] {
        let reply = post_faults(&server, &bad).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text());
    }
    assert_eq!(server.get("/admin/faults").await.json(), installed.json());
}

#[tokio::test]
async fn every_kth_and_seeded_rates_do_not_depend_on_timing() {
    let config = |seed| ServerConfig {
        faults: FaultConfig {
            seed,
            rules: vec![
                FaultRule {
                    every: Some(3),
                    ..FaultRule::new("status;code=503".parse().unwrap())
                },
                FaultRule {
                    rate: Some(0.5),
                    ..FaultRule::new("status;code=429".parse().unwrap())
                },
            ],
        },
        ..ServerConfig::default()
    };
    let statuses = |server: InProcess| async move {
        let mut out = Vec::new();
        for _ in 0..24 {
            out.push(server.post("/generate", PROMPT).await.status.as_u16());
        }
        out
    };
    let a = statuses(InProcess::new(config(11))).await;
    assert_eq!(a, statuses(InProcess::new(config(11))).await);
    assert_ne!(a, statuses(InProcess::new(config(12))).await);
    for (i, status) in a.iter().enumerate() {
        assert_eq!(*status == 503, (i + 1) % 3 == 0, "request {i}: {a:?}");
    }
    assert!(a.contains(&429) && a.contains(&200), "{a:?}");
}

#[tokio::test]
async fn endpoint_and_stream_filters_pick_the_requests() {
    let server = InProcess::new(ServerConfig {
        faults: FaultConfig {
            seed: 0,
            rules: vec![
                FaultRule {
                    endpoint: Some("/health".to_owned()),
                    ..FaultRule::new("status;code=503".parse().unwrap())
                },
                FaultRule {
                    stream: Some(StreamFilter::Stream),
                    ..FaultRule::new("truncate-stream;after=1".parse().unwrap())
                },
            ],
        },
        ..ServerConfig::default()
    });
    assert_eq!(server.get("/health").await.status, 503);
    assert_eq!(server.get("/health_generate").await.status, 200);
    assert_eq!(server.post("/generate", PROMPT).await.status, 200);
    let streamed = server.post("/generate", stream_body()).await;
    assert!(read_sse(&streamed.body).is_err(), "no [DONE]");
    assert_eq!(
        String::from_utf8_lossy(&streamed.body)
            .matches("data: ")
            .count(),
        1
    );
}

#[test]
fn an_invalid_programmatic_schedule_is_refused_at_start() {
    let config = ServerConfig {
        faults: FaultConfig {
            seed: 0,
            rules: vec![FaultRule {
                every: Some(0),
                ..FaultRule::new("stall;ms=1".parse().unwrap())
            }],
        },
        ..ServerConfig::default()
    };
    let err = mock_server::AppState::new(config).unwrap_err();
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert_eq!(
        source.as_deref(),
        Some("fault rule 0: every must be at least 1")
    );
}

#[tokio::test]
async fn time_windows_bound_a_rule() {
    // Offsets count from when the configuration was installed: the first window is open now, the second
    // opens in an hour.
    for (window, fires) in [((0, 3_600_000), true), ((3_600_000, 3_600_001), false)] {
        let server = InProcess::new(ServerConfig {
            faults: FaultConfig {
                seed: 0,
                rules: vec![FaultRule {
                    window_ms: Some(window),
                    ..FaultRule::new("status;code=503".parse().unwrap())
                }],
            },
            ..ServerConfig::default()
        });
        let status = server.post("/generate", PROMPT).await.status;
        assert_eq!(status == 503, fires, "{window:?}");
    }
}

/// Reads a streamed body to its end: the bytes that arrived, and whether it ended with a transport error
/// (a broken connection) rather than cleanly.
async fn read_until_broken(resp: reqwest::Response) -> (Vec<u8>, bool) {
    use futures_util::StreamExt;

    let mut body = resp.bytes_stream();
    let mut received = Vec::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(bytes) => received.extend_from_slice(&bytes),
            Err(_) => return (received, true),
        }
    }
    (received, false)
}
