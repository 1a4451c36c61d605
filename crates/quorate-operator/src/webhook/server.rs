//! Serving both webhooks over HTTPS: the axum routes, the component-protection glue between the
//! pure decision and the `Etcd` lookup, and the TLS server with a certificate that is reloaded
//! when its files change.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::post;
use axum::{Json, Router};
use kube::Client;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::{DynamicObject, TypeMeta};

use super::etcd::review_etcd;
use super::etcd_lookup::{EtcdLookup, KubeEtcdLookup};
use super::protection::{
    ComponentRequest, Decision, ProtectionConfig, Step, decide_with_etcd, first_step,
};
use super::review::{read_request, refuse};
use super::tasks::{TASK_VALIDATION_PATH, review_task};
use super::tls::{CertDir, DEFAULT_RELOAD_INTERVAL, TlsError};
use super::{COMPONENT_PROTECTION_PATH, ETCD_VALIDATION_PATH};

/// How long open requests may take to finish once shutdown is asked for. The API server's
/// webhook timeout is at most 30 s, and usually 10 s.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How the webhooks behave.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Who may change protected components.
    pub protection: ProtectionConfig,
    /// How often the certificate directory is checked for rotated files.
    pub cert_reload_interval: Duration,
}

impl WebhookConfig {
    /// Protection for an operator running as `operator_user`, no exempt users, the default
    /// reload interval.
    pub fn new(operator_user: impl Into<String>) -> WebhookConfig {
        WebhookConfig {
            protection: ProtectionConfig {
                operator_user: operator_user.into(),
                exempt_users: Vec::new(),
            },
            cert_reload_interval: DEFAULT_RELOAD_INTERVAL,
        }
    }
}

/// The webhook server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The address cannot be listened on.
    #[error(
        "cannot listen on {addr} for the webhooks: {source}; free the port or choose another one"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The listener handed in cannot be used.
    #[error("the webhook listener cannot be used: {0}")]
    Listener(#[source] std::io::Error),
    /// The serving certificate cannot be loaded.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The server failed while running.
    #[error("the webhook server failed: {0}")]
    Serve(#[source] std::io::Error),
}

struct AppState<L> {
    protection: ProtectionConfig,
    lookup: L,
}

/// The routes of the webhooks ([`ETCD_VALIDATION_PATH`], [`COMPONENT_PROTECTION_PATH`],
/// [`TASK_VALIDATION_PATH`]), each
/// taking and answering an `admission.k8s.io/v1` AdmissionReview. Every answer is HTTP 200:
/// unreadable requests are refused inside the review, so the API server shows why.
pub fn router<L: EtcdLookup>(protection: ProtectionConfig, lookup: L) -> Router {
    let state = Arc::new(AppState { protection, lookup });
    Router::new()
        .route(ETCD_VALIDATION_PATH, post(validate_etcd))
        .route(COMPONENT_PROTECTION_PATH, post(protect_components::<L>))
        .route(TASK_VALIDATION_PATH, post(validate_task))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(state)
}

/// The largest AdmissionReview read. An UPDATE carries the object twice (new and old), each up
/// to the API server's 3 MiB request limit; axum's default of 2 MiB would answer such a review
/// with HTTP 413, which the API server reports as a failed webhook call.
const MAX_REVIEW_BYTES: usize = 8 << 20;

/// The review that answers: always an `admission.k8s.io/v1` `AdmissionReview`. kube copies
/// the request review's own `apiVersion` and `kind`, so a request that misnamed them (a fuzzer
/// found `"kind": "1e400"`) would get an answer no API server reads.
fn answer(response: AdmissionResponse) -> Json<AdmissionReview<DynamicObject>> {
    let mut review = response.into_review();
    review.types = TypeMeta {
        api_version: "admission.k8s.io/v1".to_string(),
        kind: "AdmissionReview".to_string(),
    };
    Json(review)
}

async fn validate_etcd(body: Bytes) -> Json<AdmissionReview<DynamicObject>> {
    let response = match read_request(&body) {
        Ok(request) => review_etcd(&request),
        Err(refusal) => *refusal,
    };
    answer(response)
}

async fn validate_task(body: Bytes) -> Json<AdmissionReview<DynamicObject>> {
    let response = match read_request(&body) {
        Ok(request) => review_task(&request),
        Err(refusal) => *refusal,
    };
    answer(response)
}

async fn protect_components<L: EtcdLookup>(
    State(state): State<Arc<AppState<L>>>,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let response = match read_request(&body) {
        Ok(request) => review_component(&request, &state.protection, &state.lookup).await,
        Err(refusal) => *refusal,
    };
    answer(response)
}

/// Answers one request about a managed component, reading the owning `Etcd` only when the
/// decision depends on it. When it cannot be read, the request is refused (fail closed, as
/// with `failurePolicy: Fail`), saying so.
pub async fn review_component<L: EtcdLookup>(
    request: &AdmissionRequest<DynamicObject>,
    protection: &ProtectionConfig,
    lookup: &L,
) -> AdmissionResponse {
    let facts = ComponentRequest::from_admission(request);
    let decision = match first_step(&facts, protection) {
        Step::Done(decision) => decision,
        Step::LookUpEtcd(etcd) => match lookup.etcd_facts(&facts.namespace, etcd).await {
            Ok(etcd_facts) => decide_with_etcd(&facts, etcd, &etcd_facts),
            Err(e) => {
                tracing::warn!("component protection: {e}");
                return refuse(
                    request,
                    500,
                    "InternalError",
                    format!(
                        "{e}; {} {}/{} is protected while that Etcd cannot be checked, retry",
                        facts.kind, facts.namespace, facts.name
                    ),
                    Vec::new(),
                );
            }
        },
    };
    match decision {
        Decision::Allow(reason) => {
            tracing::debug!(
                kind = %facts.kind, namespace = %facts.namespace, name = %facts.name,
                user = %facts.username, %reason, "component change allowed"
            );
            AdmissionResponse::from(request)
        }
        Decision::Deny(message) => {
            tracing::info!(
                kind = %facts.kind, namespace = %facts.namespace, name = %facts.name,
                user = %facts.username, "component change refused"
            );
            refuse(request, 403, "Forbidden", message, Vec::new())
        }
    }
}

/// Serves both webhooks on `addr` over TLS from `cert_dir` (`tls.crt`, `tls.key`; reloaded
/// when they change) until `shutdown` completes, then lets open requests finish for
/// [`SHUTDOWN_GRACE`]. `client` reads the `Etcd`s component protection depends on.
pub async fn serve_webhooks(
    addr: SocketAddr,
    cert_dir: &Path,
    config: WebhookConfig,
    client: Client,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WebhookError> {
    let listener =
        std::net::TcpListener::bind(addr).map_err(|source| WebhookError::Bind { addr, source })?;
    serve_webhooks_on(listener, cert_dir, config, client, shutdown).await
}

/// [`serve_webhooks`] on a listener the caller bound (a test's free port, or a socket handed
/// over by the process manager).
pub async fn serve_webhooks_on(
    listener: std::net::TcpListener,
    cert_dir: &Path,
    config: WebhookConfig,
    client: Client,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WebhookError> {
    // axum-server panics on a blocking listener.
    listener
        .set_nonblocking(true)
        .map_err(WebhookError::Listener)?;
    let tls = CertDir::new(cert_dir).load().await?;
    let rustls = tls.rustls_config();
    let reload = AbortOnDrop(tokio::spawn(tls.watch(config.cert_reload_interval)));
    let app = router(config.protection, KubeEtcdLookup::new(client));
    let handle = axum_server::Handle::new();
    let server = axum_server::from_tcp_rustls(listener, rustls)
        .map_err(WebhookError::Listener)?
        .handle(handle.clone())
        .serve(app.into_make_service());
    tokio::pin!(server);
    let result = tokio::select! {
        result = &mut server => result,
        () = shutdown => {
            handle.graceful_shutdown(Some(SHUTDOWN_GRACE));
            server.await
        }
    };
    drop(reload);
    result.map_err(WebhookError::Serve)
}

/// Stops the certificate watcher with the server, also when the server's future is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::etcd_lookup::LookupError;
    use crate::webhook::protection::EtcdFacts;
    use serde_json::json;

    /// One Etcd, as a table.
    struct OneEtcd(Option<EtcdFacts>);

    impl EtcdLookup for OneEtcd {
        async fn etcd_facts(&self, namespace: &str, name: &str) -> Result<EtcdFacts, LookupError> {
            self.0.clone().ok_or_else(|| LookupError {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source: kube::Error::Api(Box::new(
                    kube::core::Status::failure("etcd is down", "InternalError").with_code(500),
                )),
            })
        }
    }

    fn delete_config_map(user: &str) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "42",
                "kind": { "group": "", "version": "v1", "kind": "ConfigMap" },
                "resource": { "group": "", "version": "v1", "resource": "configmaps" },
                "name": "etcd-main-config",
                "namespace": "shoot",
                "operation": "DELETE",
                "userInfo": { "username": user },
                "oldObject": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": "etcd-main-config",
                        "namespace": "shoot",
                        "labels": quorate_api::names::default_labels("etcd-main"),
                    },
                },
            },
        }))
        .expect("review");
        review.try_into().expect("request")
    }

    fn protection() -> ProtectionConfig {
        WebhookConfig::new("system:serviceaccount:ops:quorate").protection
    }

    #[tokio::test]
    async fn refusals_are_forbidden_with_the_reason_and_keep_the_uid() {
        let lookup = OneEtcd(Some(EtcdFacts::Present {
            protection_disabled: false,
        }));
        let response = review_component(&delete_config_map("jane"), &protection(), &lookup).await;
        assert!(!response.allowed);
        assert_eq!(response.uid, "42");
        assert_eq!(response.result.code, 403);
        assert!(
            response
                .result
                .message
                .starts_with("ConfigMap shoot/etcd-main-config is managed by quorate"),
            "{}",
            response.result.message
        );
        let response = review_component(
            &delete_config_map("system:serviceaccount:ops:quorate"),
            &protection(),
            &OneEtcd(None),
        )
        .await;
        assert!(response.allowed, "the operator needs no lookup");
    }

    #[tokio::test]
    async fn an_unreadable_etcd_refuses_and_says_so() {
        let response =
            review_component(&delete_config_map("jane"), &protection(), &OneEtcd(None)).await;
        assert!(!response.allowed);
        assert_eq!(response.result.code, 500);
        assert!(
            response
                .result
                .message
                .starts_with("cannot read Etcd shoot/etcd-main: "),
            "{}",
            response.result.message
        );
    }

    /// One HTTP/1.1 POST over TLS, trusting only `ca_pem`; the response body, or the TLS or
    /// I/O error.
    fn post(port: u16, ca_pem: &str, path: &str, body: &str) -> Result<String, String> {
        use rustls::pki_types::pem::PemObject;
        use std::io::{Read, Write};
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots
                .add(cert.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name =
            rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
        let conn =
            rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut response = String::new();
        match tls.read_to_string(&mut response) {
            Ok(_) => {}
            // Some servers close without close_notify; what was read is complete.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {}
            Err(e) => return Err(e.to_string()),
        }
        let (head, body) = response.split_once("\r\n\r\n").ok_or("no HTTP response")?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("unexpected response: {head}"));
        }
        Ok(body.to_string())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serves_over_tls_and_picks_up_a_rotated_certificate() {
        use crate::webhook::generate_webhook_certs;
        let names = ["127.0.0.1".to_string()];
        let first = generate_webhook_certs(&names, jiff::Timestamp::now()).expect("certs");
        let dir = tempfile::tempdir().expect("tempdir");
        first.write_to(dir.path()).expect("write");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // Never contacted: no request here needs an Etcd.
        let client = Client::try_from(kube::Config::new(
            "https://127.0.0.1:9".parse().expect("uri"),
        ))
        .expect("client");
        let config = WebhookConfig {
            cert_reload_interval: Duration::from_millis(100),
            ..WebhookConfig::new("system:serviceaccount:ops:quorate")
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let cert_dir = dir.path().to_path_buf();
        let server = tokio::spawn(async move {
            serve_webhooks_on(listener, &cert_dir, config, client, async {
                let _ = stopped.await;
            })
            .await
        });

        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "7",
                "kind": { "group": "druid.gardener.cloud", "version": "v1alpha1", "kind": "Etcd" },
                "resource": { "group": "druid.gardener.cloud", "version": "v1alpha1", "resource": "etcds" },
                "name": "etcd-main",
                "namespace": "shoot",
                "operation": "CREATE",
                "userInfo": { "username": "jane" },
                "object": {
                    "apiVersion": "druid.gardener.cloud/v1alpha1",
                    "kind": "Etcd",
                    "metadata": { "name": "etcd-main", "namespace": "shoot" },
                    "spec": { "replicas": "three", "labels": {}, "etcd": {}, "backup": {} },
                },
            },
        })
        .to_string();
        let ca = first.ca_pem.clone();
        let answer = tokio::task::spawn_blocking(move || {
            post(port, &ca, crate::webhook::ETCD_VALIDATION_PATH, &review)
        })
        .await
        .expect("join")
        .expect("the webhook answers over TLS");
        let answer: serde_json::Value = serde_json::from_str(&answer).expect("a review");
        let response = &answer["response"];
        assert_eq!(response["uid"], "7");
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 400);
        let message = response["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("spec.replicas: invalid type: string \"three\""),
            "{answer}"
        );

        let second = generate_webhook_certs(&names, jiff::Timestamp::now()).expect("certs");
        second.write_to(dir.path()).expect("rotate");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let ca = second.ca_pem.clone();
            let answer = tokio::task::spawn_blocking(move || {
                post(port, &ca, crate::webhook::COMPONENT_PROTECTION_PATH, "{}")
            })
            .await
            .expect("join");
            match answer {
                Ok(body) => {
                    assert!(body.contains("\"allowed\":false"), "{body}");
                    break;
                }
                Err(e) => assert!(
                    std::time::Instant::now() < deadline,
                    "the rotated certificate is not served after 10s: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ca = first.ca_pem.clone();
        let old = tokio::task::spawn_blocking(move || {
            post(port, &ca, crate::webhook::ETCD_VALIDATION_PATH, "{}")
        })
        .await
        .expect("join");
        assert!(old.is_err(), "the old certificate is still served");

        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(15), server)
            .await
            .expect("stops")
            .expect("no panic")
            .expect("no error");
    }

    #[test]
    fn a_body_that_is_no_review_is_refused_inside_a_review() {
        let refusal = read_request(b"{\"kind\": 3}").expect_err("unreadable");
        assert!(!refusal.allowed);
        assert!(
            refusal
                .result
                .message
                .starts_with("the webhook received no readable AdmissionReview"),
            "{}",
            refusal.result.message
        );
    }
}
