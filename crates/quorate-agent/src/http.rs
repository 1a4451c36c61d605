//! The agent's HTTP endpoints, as etcd-backup-restore serves them: `/healthz` (200 only while
//! this member serves linearizable reads as a voter, the pod's readiness), `/metrics` ([`crate::metrics`]), `/initialization/status`, `/config`, `/member`, and the
//! on-demand snapshots `/snapshot/full[?final=true]`, `/snapshot/delta`, `/snapshot/latest`,
//! which any member answers (a member that is not the backup leader forwards to the one that
//! is). The two that take snapshots need a credential: with `spec.backup.tls` and a client
//! certificate configured, a client certificate the CA verified (see `listener.rs`); otherwise
//! the cluster's bearer token (its Secret is named by the configuration, `agentTokenSecret`).
//!
//! Requests cost little before they are authorized ([`Guard`]): a request without a token is
//! refused without reading anything, the token Secret is cached and read again at most every
//! [`TOKEN_REREAD`] (when a token does not match the cached one), authorized snapshot requests
//! are bounded to [`SNAPSHOT_BURST`] at once and [`SNAPSHOT_PER_SECOND`] a second, and
//! `/snapshot/latest` answers from a listing at most [`LATEST_TTL`] old, made by one request
//! at a time.

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
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// The token Secret is read again at most this often, when a request's token does not match
/// the cached one (a rotated token counts within this time).
pub const TOKEN_REREAD: Duration = Duration::from_secs(2);
/// Authorized `/snapshot/*` requests allowed at once...
pub const SNAPSHOT_BURST: f64 = 10.0;
/// ...and refilled per second; beyond, 429.
pub const SNAPSHOT_PER_SECOND: f64 = 2.0;
/// `/snapshot/latest` lists the bucket at most this often.
pub const LATEST_TTL: Duration = Duration::from_secs(5);

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
    /// What bounds the work requests cause.
    pub guard: Guard,
}

/// The token cache, the snapshot request budget and the cached listing of one agent's
/// endpoints (cloned handles share them).
#[derive(Clone, Default)]
pub struct Guard {
    state: Arc<Mutex<GuardState>>,
    /// Held while `/snapshot/latest` lists the bucket: one listing at a time.
    listing: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct GuardState {
    /// The token Secret's name and its token, as last read.
    token: Option<(String, String)>,
    /// When the Secret was last read (or tried).
    token_read: Option<Instant>,
    /// Requests the budget holds, and when it was last refilled.
    budget: Option<(f64, Instant)>,
    /// The last `/snapshot/latest` answer and when it was listed.
    latest: Option<(Instant, serde_json::Value)>,
}

/// What the cached token says about a request's token.
enum TokenCheck {
    Match,
    Mismatch,
    /// Read the Secret (the caller holds the one read allowed now).
    Read,
    /// No token is known and the last read is too recent to try again.
    Unknown,
}

impl Guard {
    fn lock(&self) -> std::sync::MutexGuard<'_, GuardState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_token(&self, secret: &str, given: &str, now: Instant) -> TokenCheck {
        let mut st = self.lock();
        let cached = st
            .token
            .as_ref()
            .filter(|(name, _)| name == secret)
            .map(|(_, token)| token.clone());
        if cached
            .as_ref()
            .is_some_and(|t| same(given.as_bytes(), t.as_bytes()))
        {
            return TokenCheck::Match;
        }
        if st
            .token_read
            .is_some_and(|at| now.saturating_duration_since(at) < TOKEN_REREAD)
            && st.token.as_ref().is_some_and(|(name, _)| name == secret)
        {
            return TokenCheck::Mismatch;
        }
        if st
            .token_read
            .is_some_and(|at| now.saturating_duration_since(at) < TOKEN_REREAD)
        {
            return TokenCheck::Unknown;
        }
        st.token_read = Some(now);
        TokenCheck::Read
    }

    fn store_token(&self, secret: &str, token: Option<String>) {
        self.lock().token = token.map(|t| (secret.to_string(), t));
    }

    /// Takes one request from the budget; false when it is spent.
    fn take(&self, now: Instant) -> bool {
        let mut st = self.lock();
        let (held, at) = st.budget.unwrap_or((SNAPSHOT_BURST, now));
        let held = (held + now.saturating_duration_since(at).as_secs_f64() * SNAPSHOT_PER_SECOND)
            .min(SNAPSHOT_BURST);
        if held < 1.0 {
            st.budget = Some((held, now));
            return false;
        }
        st.budget = Some((held - 1.0, now));
        true
    }

    fn latest(&self, now: Instant) -> Option<serde_json::Value> {
        let st = self.lock();
        st.latest
            .as_ref()
            .filter(|(at, _)| now.saturating_duration_since(*at) < LATEST_TTL)
            .map(|(_, v)| v.clone())
    }

    fn store_latest(&self, value: serde_json::Value, now: Instant) {
        self.lock().latest = Some((now, value));
    }
}

fn too_many() -> Response {
    let mut response = failure(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "more than {SNAPSHOT_BURST} snapshot requests at once or {SNAPSHOT_PER_SECOND} a \
             second; retry in a second"
        ),
    );
    response
        .headers_mut()
        .insert("retry-after", axum::http::HeaderValue::from_static("1"));
    response
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
    let healthy = http.state.get().ready();
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(json!({ "health": healthy })))
}

async fn metrics<C>(State(http): State<Http<C>>) -> impl IntoResponse {
    (
        [("content-type", crate::metrics::exposition::CONTENT_TYPE)],
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
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|g| !g.is_empty());
    let unauthorized = |why: &str| {
        http.state.metrics().refused(path);
        let mut response = failure(
            StatusCode::UNAUTHORIZED,
            format!("{why}; the token is the key {AGENT_TOKEN_KEY:?} of the Secret {secret}"),
        );
        response.headers_mut().insert(
            "www-authenticate",
            axum::http::HeaderValue::from_static("Bearer"),
        );
        Some(response)
    };
    // No token: refused before anything is read.
    let Some(given) = given else {
        return unauthorized("this endpoint needs `Authorization: Bearer <token>`");
    };
    match http.guard.check_token(&secret, given, Instant::now()) {
        TokenCheck::Match => return None,
        TokenCheck::Mismatch => return unauthorized("the bearer token is not this cluster's"),
        TokenCheck::Unknown => {
            return Some(failure(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the agent token Secret {secret} could not be read a moment ago; retry in \
                     {} s",
                    TOKEN_REREAD.as_secs()
                ),
            ));
        }
        TokenCheck::Read => {}
    }
    let token = match http.coord.secret_data(&secret).await {
        Ok(data) => data.and_then(|d| d.get(AGENT_TOKEN_KEY).cloned()),
        Err(e) => {
            return Some(failure(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("reading the agent token Secret {secret}: {e}"),
            ));
        }
    };
    let token = token
        .map(|t| String::from_utf8_lossy(&t).trim().to_string())
        .filter(|t| !t.is_empty());
    http.guard.store_token(&secret, token.clone());
    let Some(token) = token else {
        return Some(failure(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the agent token Secret {secret} has no {AGENT_TOKEN_KEY:?} yet"),
        ));
    };
    if same(given.as_bytes(), token.as_bytes()) {
        return None;
    }
    unauthorized("the bearer token is not this cluster's")
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
    if !http.guard.take(Instant::now()) {
        return too_many();
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
    if !http.guard.take(Instant::now()) {
        return too_many();
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
    if let Some(latest) = http.guard.latest(Instant::now()) {
        return axum::Json(latest).into_response();
    }
    // One listing at a time; who waited for it answers from it.
    let _listing = http.guard.listing.lock().await;
    if let Some(latest) = http.guard.latest(Instant::now()) {
        return axum::Json(latest).into_response();
    }
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
            let latest = json!({ "fullSnapshot": full.map(|i| snapshot_json(&all[i])), "deltaSnapshots": deltas });
            http.guard.store_latest(latest.clone(), Instant::now());
            axum::Json(latest).into_response()
        }
        Err(e) => failure(StatusCode::BAD_GATEWAY, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_secret_is_read_at_most_once_per_interval() {
        let guard = Guard::default();
        let t0 = Instant::now();
        let check = |given: &str, at: Duration| guard.check_token("s", given, t0 + at);
        assert!(matches!(check("a", Duration::ZERO), TokenCheck::Read));
        guard.store_token("s", Some("a".into()));
        assert!(matches!(check("a", Duration::ZERO), TokenCheck::Match));
        // Wrong tokens within the interval are refused from the cache: no read.
        for ms in 0..1000 {
            let at = Duration::from_millis(ms);
            assert!(matches!(check("b", at), TokenCheck::Mismatch));
        }
        // Then one read (the Secret may have been rotated), and the cache again.
        assert!(matches!(check("b", TOKEN_REREAD), TokenCheck::Read));
        assert!(matches!(check("b", TOKEN_REREAD), TokenCheck::Mismatch));
        guard.store_token("s", Some("b".into()));
        assert!(matches!(check("b", TOKEN_REREAD), TokenCheck::Match));
        assert!(matches!(
            guard.check_token("other", "b", t0 + TOKEN_REREAD),
            TokenCheck::Unknown
        ));
        // A Secret without a token: not read again until the interval passed.
        guard.store_token("s", None);
        assert!(matches!(check("b", TOKEN_REREAD), TokenCheck::Unknown));
        assert!(matches!(check("b", TOKEN_REREAD * 2), TokenCheck::Read));
    }

    #[test]
    fn snapshot_requests_are_bounded_at_once_and_per_second() {
        let guard = Guard::default();
        let t0 = Instant::now();
        let takes = |at: Duration| (0..100).filter(|_| guard.take(t0 + at)).count();
        assert_eq!(takes(Duration::ZERO), SNAPSHOT_BURST as usize);
        assert_eq!(takes(Duration::from_secs(1)), SNAPSHOT_PER_SECOND as usize);
        assert_eq!(takes(Duration::from_secs(3600)), SNAPSHOT_BURST as usize);
    }

    #[test]
    fn latest_answers_from_a_listing_younger_than_its_ttl() {
        let guard = Guard::default();
        let t0 = Instant::now();
        assert_eq!(guard.latest(t0), None);
        guard.store_latest(json!({ "fullSnapshot": null }), t0);
        let almost = t0 + LATEST_TTL - Duration::from_millis(1);
        assert_eq!(guard.latest(almost), Some(json!({ "fullSnapshot": null })));
        assert_eq!(guard.latest(t0 + LATEST_TTL), None);
    }
}
