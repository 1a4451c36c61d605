//! The operator's plain-HTTP endpoints: `/metrics` for Prometheus, `/healthz` (the process
//! answers) and `/readyz` (the caches are synced or this replica is a standby).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// What the endpoints read.
#[derive(Clone)]
pub struct Probes {
    /// The metrics to serve.
    pub metrics: Metrics,
    /// Set once the replica is ready to work (leading with synced caches, or standing by).
    pub ready: Arc<AtomicBool>,
}

/// The router of the endpoints.
pub fn router(probes: Probes) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(probes)
}

async fn metrics(State(p): State<Probes>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        p.metrics.encode(),
    )
}

async fn readyz(State(p): State<Probes>) -> impl IntoResponse {
    if p.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

/// Serves the endpoints on `addr` until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    probes: Probes,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router(probes))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    #[tokio::test]
    async fn metrics_serve_the_process_and_the_build() {
        let probes = Probes {
            metrics: Metrics::default(),
            ready: Arc::default(),
        };
        let answer = router(probes)
            .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        for series in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "quorate_build_info{version=\"",
            "quorate_operator_reconciles_total{result=\"succeeded\"} 0",
        ] {
            assert!(text.contains(series), "{series} in:\n{text}");
        }
    }
}
