//! The agent's HTTP endpoints, compatible in spirit with etcd-backup-restore's: `/healthz` (200
//! only while etcd serves with a leader), `/initialization/status`, `/config`, `/member`.

use crate::state::{Phase, SharedState};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;

/// The router serving the agent's endpoints.
pub fn router(state: SharedState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/initialization/status", get(initialization_status))
        .route("/config", get(config))
        .route("/member", get(member))
        .with_state(state)
}

async fn healthz(State(state): State<SharedState>) -> impl IntoResponse {
    let healthy = state.get().healthy;
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(json!({ "health": healthy })))
}

async fn initialization_status(State(state): State<SharedState>) -> &'static str {
    match state.get().phase {
        Phase::Running => "Successful",
        Phase::Removed => "Failed",
        Phase::Initializing | Phase::Waiting => "Progress",
    }
}

async fn config(State(state): State<SharedState>) -> impl IntoResponse {
    axum::Json(json!({ "etcdArgs": state.get().etcd_args }))
}

async fn member(State(state): State<SharedState>) -> impl IntoResponse {
    axum::Json(state.get())
}
