//! The agent's HTTP endpoints, as etcd-backup-restore serves them: `/healthz` (200 only while
//! etcd serves with a leader), `/metrics` ([`crate::metrics`]), `/initialization/status`, `/config`, `/member`, and the
//! on-demand snapshots `/snapshot/full[?final=true]`, `/snapshot/delta`, `/snapshot/latest`,
//! which any member answers (a member that is not the backup leader forwards to the one that
//! is). The two that take snapshots need a credential: with `spec.backup.tls` and a client
//! certificate configured, a client certificate the CA verified (see `listener.rs`); otherwise
//! the cluster's bearer token (its Secret is named by the configuration, `agentTokenSecret`).

use crate::backup::BackupRequest;
use crate::state::{Phase, SharedState};
use axum::extract::{Query, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use quorate_api::names::AGENT_TOKEN_KEY;
use quorate_backup::layout::SnapshotKind;
use quorate_backup::store::StoredSnapshot;
use quorate_coord::Coordination;
use quorate_coord::agent_tls::{self, VerifiedClient};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Header marking a request another agent forwarded, so it is never forwarded twice.
const FORWARDED: &str = "x-quorate-forwarded";

/// What the handlers share.
#[derive(Clone)]
pub struct Http<C> {
    /// The member's state.
    pub state: SharedState,
    /// Where on-demand snapshots are asked for.
    pub backups: mpsc::Sender<BackupRequest>,
    /// Coordination (configuration, leases) for finding the leader and the store.
    pub coord: C,
}

/// The router serving the agent's endpoints.
pub fn router<C: Coordination + Clone>(http: Http<C>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/initialization/status", get(initialization_status))
        .route("/config", get(config))
        .route("/member", get(member))
        .route("/snapshot/full", get(snapshot_full::<C>))
        .route("/snapshot/delta", get(snapshot_delta::<C>))
        .route("/snapshot/latest", get(snapshot_latest::<C>))
        .with_state(http)
}

async fn healthz<C>(State(http): State<Http<C>>) -> impl IntoResponse {
    let healthy = http.state.get().healthy;
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(json!({ "health": healthy })))
}

async fn metrics<C>(State(http): State<Http<C>>) -> impl IntoResponse {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        {
            let metrics = http.state.metrics();
            metrics.member().observe(&http.state.get());
            metrics.encode()
        },
    )
}

async fn initialization_status<C>(State(http): State<Http<C>>) -> &'static str {
    match http.state.get().phase {
        Phase::Running => "Successful",
        Phase::Removed => "Failed",
        Phase::Initializing | Phase::Waiting => "Progress",
    }
}

async fn config<C>(State(http): State<Http<C>>) -> impl IntoResponse {
    axum::Json(json!({ "etcdArgs": http.state.get().etcd_args }))
}

async fn member<C>(State(http): State<Http<C>>) -> impl IntoResponse {
    axum::Json(http.state.get())
}

#[derive(Deserialize)]
struct FullQuery {
    #[serde(default)]
    r#final: bool,
}

fn snapshot_json(s: &StoredSnapshot) -> serde_json::Value {
    json!({
        "kind": s.name.kind.as_str(),
        "startRevision": s.name.start_revision,
        "lastRevision": s.name.last_revision,
        "createdOn": s.name.created_unix,
        "isFinal": s.name.is_final,
        "path": s.path,
        "size": s.size,
    })
}

fn failure(code: StatusCode, message: impl Into<String>) -> Response {
    (code, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// `None` when the request may go on. With `spec.backup.tls` and a client certificate
/// configured: its connection presented a client certificate the CA verified. Otherwise: the
/// configuration names no token Secret (written before tokens), or the request carries the
/// token as `Authorization: Bearer <token>`. Else the refusal: 401 (counted in
/// `quorate_agent_requests_refused_total`), or 503 while the token cannot be read (fail closed).
async fn refuse_unauthorized<C: Coordination>(
    http: &Http<C>,
    verified: Option<Extension<VerifiedClient>>,
    headers: &HeaderMap,
    path: &str,
) -> Option<Response> {
    let config = match http.coord.cluster_config().await {
        Ok(config) => config,
        Err(e) => {
            return Some(failure(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("reading the cluster configuration: {e}"),
            ));
        }
    };
    if config
        .agent_tls
        .as_ref()
        .is_some_and(|t| t.client_cert_file.is_some())
    {
        if verified.is_some_and(|Extension(v)| v.0) {
            return None;
        }
        http.state.metrics().refused(path);
        return Some(failure(
            StatusCode::UNAUTHORIZED,
            "this endpoint needs a client certificate signed by the CA of spec.backup.tls \
             (tlsCASecretRef), over HTTPS",
        ));
    }
    let secret = config.agent_token_secret?;
    let token = match http.coord.secret_data(&secret).await {
        Ok(data) => data.and_then(|d| d.get(AGENT_TOKEN_KEY).cloned()),
        Err(e) => {
            return Some(failure(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("reading the agent token Secret {secret}: {e}"),
            ));
        }
    };
    let token = token.map(|t| String::from_utf8_lossy(&t).trim().to_string());
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Some(failure(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the agent token Secret {secret} has no {AGENT_TOKEN_KEY:?} yet"),
        ));
    };
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if given.is_some_and(|g| same(g.as_bytes(), token.as_bytes())) {
        return None;
    }
    http.state.metrics().refused(path);
    let why = if given.is_some() {
        "the bearer token is not this cluster's"
    } else {
        "this endpoint needs `Authorization: Bearer <token>`"
    };
    let mut response = failure(
        StatusCode::UNAUTHORIZED,
        format!("{why}; the token is the key {AGENT_TOKEN_KEY:?} of the Secret {secret}"),
    );
    response.headers_mut().insert(
        "www-authenticate",
        axum::http::HeaderValue::from_static("Bearer"),
    );
    Some(response)
}

/// Compares without stopping at the first difference, so the time says nothing about the token.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn snapshot_full<C: Coordination + Clone>(
    State(http): State<Http<C>>,
    Query(query): Query<FullQuery>,
    verified: Option<Extension<VerifiedClient>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(refusal) = refuse_unauthorized(&http, verified, &headers, uri.path()).await {
        return refusal;
    }
    if let Some(response) = forward_unless_leader(&http, &headers, &uri).await {
        return response;
    }
    let (reply, answer) = oneshot::channel();
    let asked = BackupRequest::Full {
        is_final: query.r#final,
        reply,
    };
    match ask(&http, asked, answer, Duration::from_secs(900)).await {
        Ok(Ok(stored)) => axum::Json(snapshot_json(&stored)).into_response(),
        Ok(Err(e)) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(response) => response,
    }
}

async fn snapshot_delta<C: Coordination + Clone>(
    State(http): State<Http<C>>,
    verified: Option<Extension<VerifiedClient>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(refusal) = refuse_unauthorized(&http, verified, &headers, uri.path()).await {
        return refusal;
    }
    if let Some(response) = forward_unless_leader(&http, &headers, &uri).await {
        return response;
    }
    let (reply, answer) = oneshot::channel();
    match ask(
        &http,
        BackupRequest::Delta { reply },
        answer,
        Duration::from_secs(60),
    )
    .await
    {
        Ok(Ok(Some(stored))) => axum::Json(snapshot_json(&stored)).into_response(),
        Ok(Ok(None)) => {
            axum::Json(json!({ "message": "no changes since the last delta snapshot" }))
                .into_response()
        }
        Ok(Err(e)) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(response) => response,
    }
}

async fn ask<T>(
    http: &Http<impl Coordination>,
    request: BackupRequest,
    answer: oneshot::Receiver<T>,
    limit: Duration,
) -> Result<T, Response> {
    if http.backups.send(request).await.is_err() {
        return Err(failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "the backup loop is not running",
        ));
    }
    match tokio::time::timeout(limit, answer).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) => Err(failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "the backup leader stopped before answering",
        )),
        Err(_) => Err(failure(
            StatusCode::GATEWAY_TIMEOUT,
            format!("no snapshot within {limit:?}"),
        )),
    }
}

/// `None` when this member should answer itself; otherwise the leader's answer.
async fn forward_unless_leader<C: Coordination>(
    http: &Http<C>,
    headers: &HeaderMap,
    uri: &Uri,
) -> Option<Response> {
    if http.state.get().is_leader || headers.contains_key(FORWARDED) {
        return None;
    }
    let Some(url) = leader_agent_url(&http.coord).await else {
        return Some(failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "no backup leader is known; is the cluster quorate?",
        ));
    };
    let target = format!("{url}{}", uri.path_and_query().map_or("", |p| p.as_str()));
    let tls = http.state.get().agent_tls;
    let client = match agent_tls::http_client(tls.as_ref()) {
        Ok(client) => client,
        Err(e) => {
            return Some(failure(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the agents' TLS files cannot be used: {e}"),
            ));
        }
    };
    let mut request = client.get(&target).header(FORWARDED, "1");
    if let Some(auth) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        request = request.header("authorization", auth);
    }
    let sent = request.timeout(Duration::from_secs(900)).send().await;
    Some(match sent {
        Ok(response) => {
            let code =
                StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let body = response.bytes().await.unwrap_or_default();
            (code, [("content-type", "application/json")], body).into_response()
        }
        Err(e) => failure(
            StatusCode::BAD_GATEWAY,
            format!("forwarding to the backup leader at {url}: {e}"),
        ),
    })
}

/// Agent URL of the member whose lease says it leads.
async fn leader_agent_url(coord: &impl Coordination) -> Option<String> {
    let config = coord.cluster_config().await.ok()?;
    let leases = coord.member_leases().await.ok()?;
    let lease = leases.iter().find(|l| {
        l.holder_identity
            .as_deref()
            .is_some_and(|h| h.ends_with(":Leader"))
    })?;
    config
        .members
        .iter()
        .find(|m| m.lease_name == lease.name)
        .map(|m| m.agent_url.clone())
}

async fn snapshot_latest<C: Coordination + Clone>(State(http): State<Http<C>>) -> Response {
    let Some(backup) = http
        .coord
        .cluster_config()
        .await
        .ok()
        .and_then(|c| c.backup)
    else {
        return failure(
            StatusCode::NOT_FOUND,
            "backups are not configured (spec.backup.store is unset)",
        );
    };
    let listed = match crate::restore::open_store(&backup) {
        Ok(store) => store.list().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match listed {
        Ok(all) => {
            let full = all.iter().rposition(|s| s.name.kind == SnapshotKind::Full);
            let deltas: Vec<_> = all[full.map_or(0, |i| i + 1)..]
                .iter()
                .filter(|s| s.name.kind == SnapshotKind::Incr)
                .map(snapshot_json)
                .collect();
            axum::Json(json!({ "fullSnapshot": full.map(|i| snapshot_json(&all[i])), "deltaSnapshots": deltas }))
                .into_response()
        }
        Err(e) => failure(StatusCode::BAD_GATEWAY, e),
    }
}
