//! `Client` against the scripted server: retries, Retry-After, timeouts, cut streams, error bodies.

use std::time::Duration;

use rollout_client::{
    Client, ClientError, GenerateRequest, ResponseError, RetryPolicy, SamplingParams,
};
use tokio::time::Instant;

use crate::common::data;
use crate::common::server::{Reply, Server};

fn policy(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        seed: Some(7),
        ..RetryPolicy::default()
    }
}

fn client(server: &Server, max_retries: u32) -> Client {
    Client::builder(&server.url)
        .retry(policy(max_retries))
        .build()
        .unwrap()
}

fn req(stream: bool) -> GenerateRequest {
    let mut r = GenerateRequest::from_ids(
        vec![151644, 872, 198, 3838, 374],
        SamplingParams {
            max_new_tokens: Some(3),
            ..SamplingParams::default()
        },
    );
    r.stream = stream;
    r
}

fn ok_body() -> Vec<u8> {
    data("7_3_nonstream.json")
}

#[tokio::test]
async fn sends_json_with_bearer_key_and_decodes() {
    let server = Server::start(|_, _| Reply::json(200, ok_body())).await;
    let c = Client::builder(format!("{}/", server.url))
        .api_key("sk-test")
        .build()
        .unwrap();
    let t = c.generate(&req(false)).await.unwrap();
    assert_eq!(t.output_ids, [12095, 13, 1084]);
    assert_eq!(t.logprobs.as_deref(), Some(&[-0.2031, -0.5522, -1.311][..]));
    let r = server.request(0);
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/generate"));
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body = r.json();
    assert_eq!(
        body["input_ids"],
        serde_json::json!([151644, 872, 198, 3838, 374])
    );
    assert_eq!(body["return_logprob"], true);
    assert_eq!(
        body["sampling_params"],
        serde_json::json!({"max_new_tokens": 3})
    );
    assert!(body.get("stream").is_none());
    // The key never shows up in Debug output.
    assert!(!format!("{c:?}").contains("sk-test"));
}

#[tokio::test(start_paused = true)]
async fn retries_5xx_408_429_and_honours_retry_after() {
    let server = Server::start(|n, _| match n {
        0 => Reply::json(503, data("error_object.json")).with_header("retry-after", "7"),
        1 => {
            Reply::json(429, r#"{"error":{"message":"slow down"}}"#).with_header("Retry-After", "3")
        }
        2 => Reply::json(408, "{}"),
        3 => Reply::Full {
            status: 500,
            headers: vec![],
            body: b"Internal Server Error".to_vec(),
        },
        _ => Reply::json(200, ok_body()),
    })
    .await;
    let start = Instant::now();
    let t = client(&server, 5).generate(&req(false)).await.unwrap();
    assert_eq!(t.output_ids.len(), 3);
    assert_eq!(server.count(), 5);
    // 7 s + 3 s from Retry-After, then two jittered backoffs of at least 0.1 s and 0.2 s * 0.5.
    assert!(
        start.elapsed() >= Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_retries_with_the_last_error() {
    let server = Server::start(|_, _| Reply::Full {
        status: 500,
        headers: vec![],
        body: b"Internal Server Error".to_vec(),
    })
    .await;
    let e = client(&server, 3).generate(&req(false)).await.unwrap_err();
    assert_eq!(server.count(), 4);
    match &e {
        ClientError::GaveUp { attempts: 4, last } => match last.as_ref() {
            ClientError::Status {
                status: 500,
                message,
                ..
            } => assert_eq!(message, "Internal Server Error"),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    assert_eq!(e.status(), Some(500));
}

#[tokio::test(start_paused = true)]
async fn other_4xx_are_never_retried_and_carry_the_message() {
    for (status, body, message) in [
        (400, data("error_value_error.json"), "Either text, input_ids or input_embeds should be provided."),
        (404, br#"{"object":"error","message":"Endpoint is deprecated.","type":"404","param":null,"code":404}"#.to_vec(), "Endpoint is deprecated."),
        (401, br#"{"error":{"message":"Unauthorized"}}"#.to_vec(), "Unauthorized"),
        (422, data("error_422_old.json"), "[{\"loc\":[\"body\",\"input_ids\"]"),
    ] {
        let b = body.clone();
        let server = Server::start(move |_, _| Reply::json(status, b.clone())).await;
        let e = client(&server, 5).generate(&req(false)).await.unwrap_err();
        assert_eq!(server.count(), 1, "{status} must not be retried");
        match e {
            ClientError::Status { status: s, message: m, .. } => {
                assert_eq!(s, status);
                assert!(m.starts_with(message), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn dropped_connections_are_retried() {
    let server = Server::start(|n, _| {
        if n < 2 {
            Reply::Drop
        } else {
            Reply::json(200, ok_body())
        }
    })
    .await;
    let t = client(&server, 3).generate(&req(false)).await.unwrap();
    assert_eq!(t.output_ids.len(), 3);
    assert_eq!(server.count(), 3);
}

#[tokio::test]
async fn connection_refused_is_a_connect_error() {
    // A port nobody listens on: bind, read the port, close.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut p = policy(1);
    p.initial_backoff = Duration::from_millis(1);
    let c = Client::builder(format!("http://127.0.0.1:{port}"))
        .retry(p)
        .build()
        .unwrap();
    let e = c.generate(&req(false)).await.unwrap_err();
    match e {
        ClientError::GaveUp { attempts: 2, last } => {
            assert!(matches!(*last, ClientError::Connect { .. }), "{last:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn request_timeout() {
    let server = Server::start(|_, _| Reply::Hang).await;
    let c = Client::builder(&server.url)
        .request_timeout(Duration::from_secs(5))
        .retry(policy(0))
        .build()
        .unwrap();
    let start = Instant::now();
    let e = c.generate(&req(false)).await.unwrap_err();
    assert!(matches!(e, ClientError::Timeout { .. }), "{e:?}");
    assert!(start.elapsed() >= Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn slow_server_within_timeout_is_fine() {
    let server = Server::start(|_, _| {
        Reply::After(
            Duration::from_secs(2),
            Box::new(Reply::json(200, ok_body())),
        )
    })
    .await;
    let c = Client::builder(&server.url)
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert!(c.generate(&req(false)).await.is_ok());
}

#[tokio::test]
async fn stream_equals_non_stream_whatever_the_chunking() {
    let body = data("7_3_stream_cumulative.sse");
    let nonstream = {
        let server = Server::start(|_, _| Reply::json(200, ok_body())).await;
        client(&server, 0).generate(&req(false)).await.unwrap()
    };
    for size in [1, 7, 64, body.len()] {
        let b = body.clone();
        let server = Server::start(move |_, _| Reply::sse(&b, size, true)).await;
        let t = client(&server, 0).generate(&req(true)).await.unwrap();
        assert_eq!(
            (&t.output_ids, &t.logprobs, &t.text),
            (&nonstream.output_ids, &nonstream.logprobs, &nonstream.text)
        );
        assert_eq!(server.request(0).json()["stream"], true);
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_data_is_not_retried() {
    let body = data("7_3_stream_cumulative.sse");
    let two_frames = body
        .split(|&b| b == b'\n')
        .take(5)
        .collect::<Vec<_>>()
        .join(&b'\n');
    let server = Server::start(move |_, _| Reply::sse(&two_frames, 50, false)).await;
    let e = client(&server, 5).generate(&req(true)).await.unwrap_err();
    assert_eq!(server.count(), 1, "a broken stream must not be re-sent");
    match e {
        ClientError::StreamInterrupted { chunks: 2, .. } => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_closed_without_done_is_a_typed_error() {
    let body = data("stream_no_done.sse");
    let server = Server::start(move |_, _| Reply::sse(&body, 100, true)).await;
    let e = client(&server, 5).generate(&req(true)).await.unwrap_err();
    assert_eq!(server.count(), 1);
    assert!(
        matches!(
            e.response_error(),
            Some(ResponseError::StreamEndedWithoutDone { chunks: 3 })
        ),
        "{e:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_empty_stream_is_retried() {
    let body = data("7_3_stream_cumulative.sse");
    let server = Server::start(move |n, _| {
        if n == 0 {
            Reply::sse(b"", 1, false)
        } else {
            Reply::sse(&body, 1000, true)
        }
    })
    .await;
    let t = client(&server, 2).generate(&req(true)).await.unwrap();
    assert_eq!(t.output_ids.len(), 3);
    assert_eq!(server.count(), 2);
}

#[tokio::test]
async fn stream_error_event_with_200() {
    let body = data("stream_error_event.sse");
    let server = Server::start(move |_, _| Reply::sse(&body, 13, true)).await;
    let e = client(&server, 5).generate(&req(true)).await.unwrap_err();
    assert_eq!(server.count(), 1);
    match e.response_error() {
        Some(ResponseError::ServerError { message }) => {
            assert_eq!(
                message,
                "Either text, input_ids or input_embeds should be provided."
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn invalid_bodies_are_not_retried() {
    let server = Server::start(|_, _| Reply::json(200, data("bad_token_id_mismatch.json"))).await;
    let e = client(&server, 5).generate(&req(false)).await.unwrap_err();
    assert_eq!(server.count(), 1);
    assert!(matches!(
        e.response_error(),
        Some(ResponseError::TokenIdMismatch {
            index: 1,
            expected: 13,
            got: 14
        })
    ));
}

#[tokio::test]
async fn batches_and_n() {
    let server = Server::start(|_, _| Reply::json(200, data("n2_logprobs.json"))).await;
    let c = client(&server, 0);
    let mut r = req(false);
    r.sampling_params.n = Some(2);
    let turns = c.generate_many(&r).await.unwrap();
    assert_eq!(turns.len(), 2);
    // One turn was asked for but the server sent two.
    let e = c.generate(&r).await.unwrap_err();
    assert!(
        matches!(
            e.response_error(),
            Some(ResponseError::ExpectedObject { len: 2 })
        ),
        "{e:?}"
    );
    r.sampling_params.n = Some(3);
    let e = c.generate_many(&r).await.unwrap_err();
    assert!(
        matches!(
            e.response_error(),
            Some(ResponseError::ItemCount {
                expected: 3,
                got: 2
            })
        ),
        "{e:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn concurrency_is_limited() {
    let server = Server::start(|_, _| {
        Reply::After(
            Duration::from_millis(100),
            Box::new(Reply::json(200, ok_body())),
        )
    })
    .await;
    let c = Client::builder(&server.url)
        .max_concurrency(2)
        .build()
        .unwrap();
    let r = req(false);
    let results = futures_util::future::join_all((0..6).map(|_| c.generate(&r))).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(server.count(), 6);
    assert_eq!(
        server
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        2
    );
}

#[tokio::test]
async fn a_rid_prefix_names_each_single_request_and_leaves_own_rids_and_batches_alone() {
    let server = Server::start(|_, _| Reply::json(200, ok_body())).await;
    let c = Client::builder(&server.url)
        .rid_prefix("run-7-")
        .build()
        .unwrap();
    assert_eq!(c.rid_prefix(), Some("run-7-"));
    c.generate(&req(false)).await.unwrap();
    c.generate(&req(false)).await.unwrap();
    let mut own = req(false);
    own.rid = Some("mine".to_owned());
    c.generate(&own).await.unwrap();
    let mut batch = req(false);
    batch.sampling_params.n = Some(2);
    // The answer is one object where two items are due: only the request body matters here.
    c.generate_many(&batch).await.unwrap_err();
    assert!(
        c.in_flight_rids().is_empty(),
        "ended requests are not in flight"
    );
    let rids: Vec<_> = (0..4)
        .map(|i| server.request(i).json()["rid"].clone())
        .collect();
    assert_eq!(
        rids,
        [
            serde_json::json!("run-7-000000000000"),
            serde_json::json!("run-7-000000000001"),
            serde_json::json!("mine"),
            serde_json::Value::Null,
        ]
    );
}

#[tokio::test]
async fn control_requests_reach_the_server_while_the_concurrency_limit_is_full() {
    let server = Server::start(|_, r| match r.path.as_str() {
        "/generate" => Reply::After(
            Duration::from_secs(60),
            Box::new(Reply::json(200, ok_body())),
        ),
        _ => Reply::json(200, b"{}".to_vec()),
    })
    .await;
    let c = Client::builder(&server.url)
        .max_concurrency(1)
        .rid_prefix("run-")
        .build()
        .unwrap();
    let generating = tokio::spawn({
        let c = c.clone();
        async move { c.generate(&req(false)).await }
    });
    while server.count() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(c.in_flight_rids(), ["run-000000000000"]);
    let abort = rollout_client::AbortRequest {
        rid: "run-000000000000".to_owned(),
        abort_all: false,
    };
    let answered = tokio::time::timeout(Duration::from_secs(10), c.abort(&abort)).await;
    assert!(
        matches!(answered, Ok(Ok(()))),
        "the abort did not wait for the generation's permit: {answered:?}"
    );
    assert_eq!(server.request(1).path, "/abort_request");
    generating.abort();
    assert!(generating.await.unwrap_err().is_cancelled());
    assert!(
        c.in_flight_rids().is_empty(),
        "a dropped request is not in flight"
    );
}

#[test]
fn backoff_schedule_and_jitter() {
    let p = RetryPolicy {
        jitter: 0.5,
        ..RetryPolicy::default()
    };
    assert_eq!(p.backoff(0, 0.0), Duration::from_millis(100));
    assert_eq!(p.backoff(3, 0.0), Duration::from_millis(800));
    assert_eq!(p.backoff(3, 1.0), Duration::from_millis(400));
    assert_eq!(
        p.backoff(30, 0.0),
        Duration::from_secs(10),
        "capped at max_backoff"
    );
    assert_eq!(
        p.delay(0, Some(Duration::from_secs(3)), 0.9),
        Duration::from_secs(3)
    );
    assert_eq!(
        p.delay(0, Some(Duration::from_secs(3600)), 0.0),
        Duration::from_secs(60)
    );
    let exact = RetryPolicy {
        jitter: 0.0,
        ..RetryPolicy::default()
    };
    assert_eq!(exact.backoff(2, 0.99), Duration::from_millis(400));
}

#[test]
fn only_http_urls() {
    for bad in ["https://example.com", "localhost:30000", "http://"] {
        assert!(
            matches!(
                Client::builder(bad).build(),
                Err(ClientError::InvalidBaseUrl { .. })
            ),
            "{bad}"
        );
    }
}

/// Futures must be `Send` so callers can `tokio::spawn` rollouts; a compile-time check.
#[allow(dead_code)]
fn futures_are_send(c: &Client, r: &GenerateRequest, s: &mut rollout_client::Sample) {
    fn send<T: Send>(_: T) {}
    send(c.generate(r));
    send(c.generate_many(r));
    let cfg = rollout_client::rollout::RolloutConfig::default();
    send(rollout_client::rollout::generate(c, s, &cfg));
    send(rollout_client::rollout::generate_group(
        c, s, 0, 2, &cfg, None,
    ));
    send(c.clone());
}

#[test]
fn retry_after_values() {
    use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
    use rollout_client::client::parse_retry_after;
    let parse = |v: &str| {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        parse_retry_after(&h)
    };
    assert_eq!(parse("7"), Some(Duration::from_secs(7)));
    assert_eq!(parse(" 1.5 "), Some(Duration::from_millis(1500)));
    assert_eq!(parse("-1"), None);
    assert_eq!(parse("1e300"), None);
    assert_eq!(parse("NaN"), None);
    assert_eq!(
        parse("Wed, 21 Oct 2015 07:28:00 GMT"),
        None,
        "HTTP-dates fall back to backoff"
    );
    assert_eq!(parse_retry_after(&HeaderMap::new()), None);
}
