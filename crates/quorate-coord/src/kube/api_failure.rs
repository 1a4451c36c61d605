//! A failed Kubernetes API call described for the person reading the agent's log: which verb on
//! which object failed, what the API server said, and what to check. A 403 in a member pod
//! almost always means the Role or RoleBinding the operator renders is missing or outdated, so
//! the message names it.

use std::fmt;

/// One failed call to the Kubernetes API. Clonable (unlike `kube::Error`) so the ConfigMap
/// watch can keep its last failure and hand it to every caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiFailure {
    /// The RBAC verb of the call (`get`, `list`, `watch`, `patch`).
    pub verb: &'static str,
    /// The resource (`leases`, `configmaps`).
    pub resource: &'static str,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object, or the label selector of a list.
    pub name: String,
    /// Name of the `Etcd`, to name its Role.
    pub cluster: String,
    /// HTTP status of the answer; `None` when there was no answer (connection, timeout).
    pub status: Option<u16>,
    /// What the API server or the transport said.
    pub message: String,
}

impl ApiFailure {
    /// A failure of `verb` on `resource` `namespace/name` caused by `error`.
    pub fn from_kube(
        target: &Target<'_>,
        verb: &'static str,
        resource: &'static str,
        name: &str,
        error: &::kube::Error,
    ) -> Self {
        let (status, message) = match error {
            ::kube::Error::Api(status) => (Some(status.code), status_message(status)),
            other => (None, other.to_string()),
        };
        Self::new(target, verb, resource, name, status, message)
    }

    /// A failure reported inside a watch stream (an `ERROR` event).
    pub fn from_status(
        target: &Target<'_>,
        verb: &'static str,
        resource: &'static str,
        name: &str,
        status: &::kube::core::Status,
    ) -> Self {
        Self::new(
            target,
            verb,
            resource,
            name,
            Some(status.code),
            status_message(status),
        )
    }

    /// A failure built from its parts.
    pub fn new(
        target: &Target<'_>,
        verb: &'static str,
        resource: &'static str,
        name: &str,
        status: Option<u16>,
        message: String,
    ) -> Self {
        Self {
            verb,
            resource,
            namespace: target.namespace.to_string(),
            name: name.to_string(),
            cluster: target.cluster.to_string(),
            status,
            message,
        }
    }

    /// Whether retrying soon may succeed: no answer, throttled, or a server-side failure.
    pub fn is_transient(&self) -> bool {
        is_transient_status(self.status)
    }

    fn advice(&self) -> String {
        let role = quorate_api::names::role_name(&self.cluster);
        match self.status {
            Some(403) => format!(
                "the agent's ServiceAccount lacks `{}` on {}; is the Role `{role}` in place, with \
                 that verb, and bound to the ServiceAccount by the RoleBinding of the same name?",
                self.verb, self.resource
            ),
            Some(401) => "the API server does not accept the agent's credentials; is the \
                          ServiceAccount token mounted (automountServiceAccountToken) and valid?"
                .to_string(),
            Some(404) => format!(
                "it does not exist; the operator creates it when it reconciles the Etcd {}",
                self.cluster
            ),
            Some(409) => "it was changed at the same time; the next attempt retries".to_string(),
            Some(422) => "the API server refused the change as invalid".to_string(),
            status if is_transient_status(status) => {
                "the API server is unreachable or overloaded; the agent retries".to_string()
            }
            _ => "the API server refused the request".to_string(),
        }
    }
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self
            .status
            .map_or_else(|| "no answer".to_string(), |s| format!("HTTP {s}"));
        write!(
            f,
            "{} {} {}/{} failed ({status}: {}); {}",
            self.verb,
            self.resource,
            self.namespace,
            self.name,
            self.message,
            self.advice()
        )
    }
}

impl std::error::Error for ApiFailure {}

/// Where the objects live: the `Etcd`'s namespace and name.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// Namespace of the `Etcd`, its leases and its ConfigMap.
    pub namespace: &'a str,
    /// Name of the `Etcd`.
    pub cluster: &'a str,
}

/// Whether an error from kube is worth retrying at once (see [`ApiFailure::is_transient`]).
pub fn is_transient(error: &::kube::Error) -> bool {
    match error {
        ::kube::Error::Api(status) => is_transient_status(Some(status.code)),
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) => true,
        _ => false,
    }
}

fn is_transient_status(status: Option<u16>) -> bool {
    match status {
        None => true,
        Some(code) => code == 429 || code >= 500,
    }
}

fn status_message(status: &::kube::core::Status) -> String {
    match (status.reason.is_empty(), status.message.is_empty()) {
        (false, false) => format!("{}: {}", status.reason, status.message),
        (false, true) => status.reason.clone(),
        _ => status.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(status: Option<u16>) -> ApiFailure {
        ApiFailure::new(
            &Target {
                namespace: "shoot",
                cluster: "etcd-main",
            },
            "patch",
            "leases",
            "etcd-main-0",
            status,
            "denied".into(),
        )
    }

    #[test]
    fn forbidden_names_the_verb_resource_and_role() {
        let text = failure(Some(403)).to_string();
        assert!(text.starts_with("patch leases shoot/etcd-main-0 failed (HTTP 403: denied)"));
        assert!(text.contains("lacks `patch` on leases"), "{text}");
        assert!(
            text.contains("Role `druid.gardener.cloud:etcd:etcd-main`"),
            "{text}"
        );
        assert!(!failure(Some(403)).is_transient());
    }

    #[test]
    fn no_answer_and_server_errors_are_transient() {
        assert!(failure(None).is_transient());
        assert!(failure(Some(503)).is_transient());
        assert!(failure(Some(429)).is_transient());
        assert!(!failure(Some(404)).is_transient());
        assert!(failure(None).to_string().contains("(no answer: denied)"));
        assert!(failure(Some(500)).to_string().contains("the agent retries"));
    }
}
