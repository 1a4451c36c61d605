//! Asking a cluster's agents for an on-demand snapshot: `GET /snapshot/full[?final=true]` or
//! `/snapshot/delta` on the client Service's backup port (any member forwards to the backup
//! leader), with the task's timeout. The answer is sorted into done, unreachable (retried)
//! and failed. The credential is the cluster's agent token Secret (`<name>-agent-token`), or
//! with `spec.backup.tls` HTTPS with its CA and client certificate.

use std::time::Duration;

use quorate_api::Etcd;
use quorate_api::names::client_hostname;
use quorate_core::tasks::ops_task::{ExecutionOutcome, SnapshotRequest};
use serde_json::Value;

/// What the operator presents to a cluster's agents.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    /// The bearer token, when the cluster has one.
    pub token: Option<String>,
    /// HTTPS with the CA of `spec.backup.tls` (and its client certificate, when configured).
    pub tls: Option<rustls::ClientConfig>,
}

/// HTTP client for the agents.
#[derive(Clone)]
pub struct AgentClient {
    http: reqwest::Client,
}

impl Default for AgentClient {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentClient {
    /// A client; its TLS stack is rustls with aws-lc (installed once per process).
    pub fn new() -> Self {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        AgentClient {
            http: reqwest::Client::new(),
        }
    }

    /// The agents' address of `etcd`.
    pub fn base_url(&self, etcd: &Etcd) -> String {
        let name = etcd.metadata.name.as_deref().unwrap_or_default();
        let namespace = etcd.metadata.namespace.as_deref().unwrap_or("default");
        format!(
            "{}://{}:{}",
            quorate_core::components::addresses::agent_scheme(etcd),
            client_hostname(name, namespace),
            etcd.spec.backup.port()
        )
    }

    /// Asks for the snapshot with `credentials` and sorts the answer.
    pub async fn snapshot(
        &self,
        etcd: &Etcd,
        request: SnapshotRequest,
        credentials: Credentials,
    ) -> ExecutionOutcome {
        let kind = if request.full { "full" } else { "delta" };
        let mut url = format!("{}/snapshot/{kind}", self.base_url(etcd));
        if request.is_final {
            url.push_str("?final=true");
        }
        let http = match credentials.tls {
            Some(tls) => match reqwest::Client::builder()
                .tls_backend_preconfigured(tls)
                .build()
            {
                Ok(client) => client,
                Err(e) => return ExecutionOutcome::Unreachable(format!("an HTTPS client: {e}")),
            },
            None => self.http.clone(),
        };
        let mut get = http
            .get(&url)
            .timeout(request.timeout + Duration::from_secs(5));
        if let Some(token) = &credentials.token {
            get = get.bearer_auth(token);
        }
        let sent = get.send().await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return ExecutionOutcome::Unreachable(format!("GET {url}: {e}")),
        };
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        outcome(kind, status.as_u16(), &body)
    }
}

/// What an agent's answer means.
fn outcome(kind: &str, status: u16, body: &Value) -> ExecutionOutcome {
    let text = |key: &str| {
        body.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match status {
        200 if body.get("path").is_some() => ExecutionOutcome::Done(format!(
            "{kind} snapshot {} uploaded (revisions {}-{}, {} bytes)",
            text("path"),
            body.get("startRevision").unwrap_or(&Value::Null),
            body.get("lastRevision").unwrap_or(&Value::Null),
            body.get("size").unwrap_or(&Value::Null),
        )),
        200 => ExecutionOutcome::Done(format!(
            "delta snapshot skipped by the backup leader: {}",
            text("message")
        )),
        // No backup leader known yet, or it stopped mid-way: the cluster may answer soon.
        502 | 503 => {
            ExecutionOutcome::Unreachable(format!("the agent answered {status}: {}", text("error")))
        }
        _ => ExecutionOutcome::Failed(format!("the agent answered {status}: {}", text("error"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_sorted_into_done_retry_and_failed() {
        let full =
            json!({"path": "v2/Full-0-9-1", "startRevision": 0, "lastRevision": 9, "size": 10});
        assert!(
            matches!(outcome("full", 200, &full), ExecutionOutcome::Done(d) if d.contains("v2/Full-0-9-1"))
        );
        let skipped = json!({"message": "no changes since the last delta snapshot"});
        assert!(
            matches!(outcome("delta", 200, &skipped), ExecutionOutcome::Done(d) if d.contains("skipped"))
        );
        let no_leader = json!({"error": "no backup leader is known"});
        assert!(matches!(
            outcome("full", 503, &no_leader),
            ExecutionOutcome::Unreachable(_)
        ));
        let failed = json!({"error": "etcdserver: request timed out"});
        assert!(
            matches!(outcome("full", 500, &failed), ExecutionOutcome::Failed(d) if d.contains("timed out"))
        );
    }

    #[test]
    fn the_agents_are_reached_through_the_client_service() {
        let mut etcd = Etcd::new("main", Default::default());
        etcd.metadata.namespace = Some("shoot".into());
        assert_eq!(
            AgentClient::new().base_url(&etcd),
            "http://main-client.shoot.svc:8080"
        );
    }
}
