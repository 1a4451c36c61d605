//! Fuzzing the agent's HTTP endpoints (`http::router`) with arbitrary methods, paths, query
//! strings, headers and bodies, on a member that leads or not, is healthy or not, with a backup
//! loop that answers, fails or goes away. Every request is answered promptly (no panic, no
//! hang), with a status the endpoint documents, and every error this code writes says what is
//! wrong. File coordination on an empty temp dir: no leader is known and backups are off.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, Uri};
use proptest::prelude::*;
use quorate_agent::SharedState;
use quorate_agent::backup::{BackupError, BackupRequest};
use quorate_agent::http::{Http, router};
use quorate_coord::file::FileCoordination;
use tokio::sync::mpsc;
use tower::ServiceExt;

#[derive(Clone, Copy, Debug)]
enum Loop {
    /// Refuses every request (as a member that does not lead).
    Refuses,
    /// Drops the reply without answering.
    Drops,
    /// Is not running (the channel is closed).
    Gone,
}

#[derive(Clone, Debug)]
struct Case {
    method: Method,
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    leader: bool,
    healthy: bool,
    backups: Loop,
}

async fn answer(case: &Case) -> Option<(StatusCode, Option<String>, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel::<BackupRequest>(4);
    let mode = case.backups;
    match mode {
        Loop::Gone => drop(rx),
        _ => {
            tokio::spawn(async move {
                while let Some(request) = rx.recv().await {
                    if matches!(mode, Loop::Drops) {
                        continue;
                    }
                    match request {
                        BackupRequest::Full { reply, .. } => {
                            let _ = reply.send(Err(BackupError::NotLeader));
                        }
                        BackupRequest::Delta { reply } => {
                            let _ = reply.send(Err(BackupError::NotLeader));
                        }
                    }
                }
            });
        }
    }
    let state = SharedState::default();
    state.update(|s| {
        s.is_leader = case.leader;
        s.healthy = case.healthy;
        s.etcd_args = vec!["--name".into(), "member-\u{1F600}".into()];
    });
    let http = Http {
        state,
        backups: tx,
        coord: FileCoordination::new(dir.path()),
        guard: Default::default(),
    };
    let uri: Uri = case.path.parse().ok()?;
    let mut request = Request::builder().method(case.method.clone()).uri(uri);
    for (name, value) in &case.headers {
        request = request.header(name.as_str(), value.as_slice());
    }
    let request = request.body(Body::from(case.body.clone())).ok()?;
    let response = tokio::time::timeout(Duration::from_secs(10), router(http).oneshot(request))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    Some((status, content_type, body.to_vec()))
}

fn check(case: &Case) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some((status, content_type, body)) = runtime.block_on(answer(case)) else {
        return; // not a request axum could be handed
    };
    let path = case.path.split('?').next().unwrap_or_default();
    let known = [
        "/healthz",
        "/metrics",
        "/initialization/status",
        "/config",
        "/member",
        "/snapshot/full",
        "/snapshot/delta",
        "/snapshot/latest",
    ];
    if !known.contains(&path) {
        assert_eq!(status, StatusCode::NOT_FOUND, "{case:?}");
        return;
    }
    if case.method != Method::GET && case.method != Method::HEAD {
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{case:?}");
        return;
    }
    assert!(
        !status.is_server_error()
            || status != StatusCode::INTERNAL_SERVER_ERROR
            || path.starts_with("/snapshot/"),
        "{case:?}: {status}"
    );
    if content_type.as_deref() == Some("application/json") && case.method == Method::GET {
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!("{case:?}: {status} with a body that is not JSON ({e}): {body:?}")
        });
        if (status.is_client_error() || status.is_server_error()) && path != "/healthz" {
            let message = value["error"].as_str().unwrap_or_default();
            assert!(message.len() > 5, "{case:?}: {status} {value}");
        }
    } else if (status.is_client_error() || status.is_server_error()) && case.method == Method::GET {
        assert!(!body.is_empty(), "{case:?}: {status} without a word");
    }
    match path {
        "/snapshot/latest" => assert_eq!(status, StatusCode::NOT_FOUND, "{case:?}"),
        "/snapshot/full" | "/snapshot/delta" => assert!(
            status.is_client_error() || status.is_server_error(),
            "{case:?}: {status}"
        ),
        _ => {}
    }
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        4 => Just(Method::GET),
        1 => proptest::sample::select(vec![
            Method::POST, Method::PUT, Method::DELETE, Method::HEAD, Method::OPTIONS,
            Method::PATCH, Method::TRACE, Method::CONNECT,
        ]),
        1 => "[A-Z]{1,10}".prop_map(|m| Method::from_bytes(m.as_bytes()).unwrap()),
    ]
}

fn path() -> impl Strategy<Value = String> {
    let base = prop_oneof![
        4 => proptest::sample::select(vec![
            "/healthz", "/initialization/status", "/config", "/member", "/snapshot/full",
            "/snapshot/delta", "/snapshot/latest",
        ])
        .prop_map(str::to_string),
        1 => proptest::sample::select(vec![
            "/", "//healthz", "/healthz/", "/snapshot", "/snapshot/full/x", "/%2e%2e/config",
            "/snapshot/%66ull", "/SNAPSHOT/FULL",
        ])
        .prop_map(str::to_string),
        1 => "/[a-zA-Z0-9/%._~-]{0,30}",
    ];
    let query = prop_oneof![
        3 => Just(String::new()),
        1 => proptest::sample::select(vec![
            "?final=true", "?final=false", "?final=1", "?final=", "?final", "?final=maybe",
            "?final=true&final=false", "?final=%74rue", "?x=%ZZ", "?&&==", "?final=\u{1F600}",
        ])
        .prop_map(str::to_string),
        1 => "\\?[a-z=&%0-9]{0,20}",
    ];
    (base, query).prop_map(|(b, q)| format!("{b}{q}"))
}

fn headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    let name = prop_oneof![
        Just("x-quorate-forwarded".to_string()),
        Just("content-type".to_string()),
        Just("content-length".to_string()),
        Just("accept".to_string()),
        Just("transfer-encoding".to_string()),
        "[a-z][a-z0-9-]{0,15}",
    ];
    let value = prop_oneof![
        Just(b"1".to_vec()),
        Just(b"application/json".to_vec()),
        Just(b"999999999999".to_vec()),
        Just(b"chunked".to_vec()),
        proptest::collection::vec(32u8..127, 0..30),
        proptest::collection::vec(128u8..=255, 0..10),
    ];
    proptest::collection::vec((name, value), 0..4)
}

fn case() -> impl Strategy<Value = Case> {
    (
        method(),
        path(),
        headers(),
        proptest::collection::vec(any::<u8>(), 0..200),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(Loop::Refuses), Just(Loop::Drops), Just(Loop::Gone)],
    )
        .prop_map(
            |(method, path, headers, body, leader, healthy, backups)| Case {
                method,
                path,
                headers,
                body,
                leader,
                healthy,
                backups,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_request_is_answered_clearly(case in case()) {
        check(&case);
    }

    #[test]
    fn arbitrary_paths_are_answered(path in any::<String>(), leader in any::<bool>()) {
        check(&Case {
            method: Method::GET,
            path,
            headers: Vec::new(),
            body: Vec::new(),
            leader,
            healthy: true,
            backups: Loop::Refuses,
        });
    }
}
