//! Errors from etcd, classified so callers can tell "wait and retry" from real failures.
//!
//! etcd reports most conditions as a gRPC status whose message starts with `etcdserver:`; the
//! code alone is ambiguous (for example `Unavailable` is used both for "no leader" and for a
//! refused connection), so classification looks at the message first and the code second.

use std::fmt;

use tonic::Code;

/// What kind of failure an [`EtcdError`] is; drives retries and the planner's decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// `etcdserver: unhealthy cluster`: a membership change was refused because the receiving
    /// member has not been connected to a quorum for 5 s (strict reconfig check); another
    /// member may accept it.
    UnhealthyCluster,
    /// `etcdserver: too many learner members in cluster`: etcd allows one learner at a time.
    TooManyLearners,
    /// `etcdserver: can only promote a learner member which is in sync with leader`.
    LearnerNotInSync,
    /// `etcdserver: can only promote a learner member`: the member already votes; callers
    /// treat a promote that gets this as done.
    MemberNotLearner,
    /// `etcdserver: member not found`.
    MemberNotFound,
    /// `etcdserver: Peer URLs already exists`: another member already has these peer URLs.
    PeerUrlExists,
    /// `etcdserver: re-configuration failed due to not enough started members`.
    NotEnoughStartedMembers,
    /// No answer: connection refused, connect or request timeout, TLS handshake failure, or no
    /// endpoint of a cluster client answered.
    Unreachable,
    /// `etcdserver: no leader`: the member is in an election or cut off from a quorum.
    NoLeader,
    /// `etcdserver: not leader`: the call (e.g. move-leader) must go to the leader.
    NotLeader,
    /// `etcdserver: rpc not supported for learner`: learners only serve status and
    /// serializable reads; ask a voting member.
    LearnerRejected,
    /// etcd gave up on the request for now (`leader changed`, `request timed out`,
    /// `server stopped`, `too many requests`); the request may or may not have been applied.
    Transient,
    /// `etcdserver: mvcc: database space exceeded`: the NOSPACE alarm is raised.
    NoSpace,
    /// The endpoint URL or TLS material is unusable; fix the configuration.
    InvalidConfig,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// True for conditions that clear by themselves, where the right reaction is to wait and
    /// retry the same request rather than fail.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::UnhealthyCluster
                | ErrorKind::TooManyLearners
                | ErrorKind::LearnerNotInSync
                | ErrorKind::NotEnoughStartedMembers
                | ErrorKind::Unreachable
                | ErrorKind::NoLeader
                | ErrorKind::Transient
        )
    }

    /// True when another endpoint of the same cluster may answer where this one did not.
    /// `UnhealthyCluster` is one: etcd checks "connected to a quorum for 5 s" against the
    /// receiving member's own view of its peers (a leader can keep a replaced peer marked
    /// inactive while the other members take the change), and a refused change wrote nothing.
    pub fn is_endpoint_specific(self) -> bool {
        matches!(
            self,
            ErrorKind::UnhealthyCluster
                | ErrorKind::Unreachable
                | ErrorKind::NoLeader
                | ErrorKind::LearnerRejected
                | ErrorKind::Transient
        )
    }

    /// What a person (or caller) should do about it.
    pub fn hint(self) -> &'static str {
        match self {
            ErrorKind::UnhealthyCluster => {
                "etcd accepts membership changes only once its members have been connected for 5s; wait and retry"
            }
            ErrorKind::TooManyLearners => {
                "etcd allows one learner at a time; wait until the current learner is promoted or removed, then retry"
            }
            ErrorKind::LearnerNotInSync => {
                "the learner has not caught up with the leader yet; retry the promotion shortly"
            }
            ErrorKind::MemberNotLearner => {
                "the member is already a voting member; nothing to promote"
            }
            ErrorKind::MemberNotFound => {
                "the member ID is not in the member list; re-read the member list"
            }
            ErrorKind::PeerUrlExists => {
                "a member with these peer URLs already exists; re-read the member list and reuse or remove that member"
            }
            ErrorKind::NotEnoughStartedMembers => {
                "too few members are started to keep quorum after this change; start the missing members, then retry"
            }
            ErrorKind::Unreachable => {
                "check that etcd runs and listens at this URL and that the TLS settings (CA, client certificate) match"
            }
            ErrorKind::NoLeader => {
                "the member has no leader (election running or quorum lost); retry, and check the other members if it persists"
            }
            ErrorKind::NotLeader => "send this request to the current leader",
            ErrorKind::LearnerRejected => {
                "learners serve only status and serializable reads; use a voting member's endpoint"
            }
            ErrorKind::Transient => {
                "etcd could not finish the request in time (leader change or overload); retry, after checking whether it was applied"
            }
            ErrorKind::NoSpace => {
                "the backend quota is exhausted (NOSPACE alarm); compact, defragment, then disarm the alarm"
            }
            ErrorKind::InvalidConfig => "fix the endpoint URL or TLS configuration",
            ErrorKind::Other => "see the message from etcd",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ErrorKind::UnhealthyCluster => "unhealthy cluster",
            ErrorKind::TooManyLearners => "too many learners",
            ErrorKind::LearnerNotInSync => "learner not in sync",
            ErrorKind::MemberNotLearner => "member not a learner",
            ErrorKind::MemberNotFound => "member not found",
            ErrorKind::PeerUrlExists => "peer URL exists",
            ErrorKind::NotEnoughStartedMembers => "not enough started members",
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::NoLeader => "no leader",
            ErrorKind::NotLeader => "not leader",
            ErrorKind::LearnerRejected => "rejected by learner",
            ErrorKind::Transient => "transient",
            ErrorKind::NoSpace => "no space",
            ErrorKind::InvalidConfig => "invalid configuration",
            ErrorKind::Other => "error",
        };
        f.write_str(name)
    }
}

/// A failed etcd call: what was attempted, against which endpoint, what etcd said, and what
/// to do about it.
#[derive(Debug, thiserror::Error)]
#[error("{operation} on {endpoint} failed ({kind}): {message}; {hint}", hint = kind.hint())]
pub struct EtcdError {
    kind: ErrorKind,
    operation: String,
    endpoint: String,
    message: String,
    #[source]
    source: Option<etcd_client::Error>,
}

impl EtcdError {
    /// An error of `kind` for `operation` on `endpoint`.
    pub fn new(
        kind: ErrorKind,
        operation: impl Into<String>,
        endpoint: impl Into<String>,
        message: impl Into<String>,
    ) -> EtcdError {
        EtcdError {
            kind,
            operation: operation.into(),
            endpoint: endpoint.into(),
            message: message.into(),
            source: None,
        }
    }

    /// Classifies an etcd-client error from `operation` on `endpoint`.
    pub fn from_client(
        operation: impl Into<String>,
        endpoint: impl Into<String>,
        err: etcd_client::Error,
    ) -> EtcdError {
        EtcdError {
            kind: classify(&err),
            operation: operation.into(),
            endpoint: endpoint.into(),
            message: describe(&err),
            source: Some(err),
        }
    }

    /// The classification.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What was attempted, e.g. `member promote 8e9e05c52164694d`.
    pub fn operation(&self) -> &str {
        &self.operation
    }

    /// The endpoint (or endpoints) that failed.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// etcd's (or the transport's) own words.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Shorthand for `self.kind().is_retryable()`.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

/// The kind of an etcd-client error, from etcd's message text and the gRPC code.
pub fn classify(err: &etcd_client::Error) -> ErrorKind {
    match err {
        etcd_client::Error::GRpcStatus(status) => classify_status(status.code(), status.message()),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
            ErrorKind::Unreachable
        }
        etcd_client::Error::InvalidUri(_) | etcd_client::Error::InvalidArgs(_) => {
            ErrorKind::InvalidConfig
        }
        _ => ErrorKind::Other,
    }
}

/// The kind for a gRPC status `code` with `message`, as etcd 3.4–3.6 word them.
pub fn classify_status(code: Code, message: &str) -> ErrorKind {
    let msg = message.to_ascii_lowercase();
    if msg.contains("etcdserver:") {
        // Order matters: the "not in sync" message extends the "not a learner" one.
        let by_text: &[(&str, ErrorKind)] = &[
            ("unhealthy cluster", ErrorKind::UnhealthyCluster),
            ("too many learner", ErrorKind::TooManyLearners),
            ("in sync with leader", ErrorKind::LearnerNotInSync),
            (
                "can only promote a learner member",
                ErrorKind::MemberNotLearner,
            ),
            ("member not found", ErrorKind::MemberNotFound),
            ("peer urls already exist", ErrorKind::PeerUrlExists),
            (
                "not enough started members",
                ErrorKind::NotEnoughStartedMembers,
            ),
            ("no leader", ErrorKind::NoLeader),
            ("not leader", ErrorKind::NotLeader),
            ("not supported for learner", ErrorKind::LearnerRejected),
            ("database space exceeded", ErrorKind::NoSpace),
            ("leader changed", ErrorKind::Transient),
            ("request timed out", ErrorKind::Transient),
            ("server stopped", ErrorKind::Transient),
            ("too many requests", ErrorKind::Transient),
        ];
        if let Some((_, kind)) = by_text.iter().find(|(text, _)| msg.contains(text)) {
            return *kind;
        }
        return ErrorKind::Other;
    }
    match code {
        // Without an etcdserver message these come from the client transport: connection
        // refused, connect timeout, broken connection, TLS handshake failure.
        Code::Unavailable => ErrorKind::Unreachable,
        // tonic reports its own request timeout as Cancelled("Timeout expired").
        Code::Cancelled | Code::DeadlineExceeded => ErrorKind::Unreachable,
        Code::Unknown if msg.contains("transport") || msg.contains("connect") => {
            ErrorKind::Unreachable
        }
        _ => ErrorKind::Other,
    }
}

fn describe(err: &etcd_client::Error) -> String {
    use std::error::Error as _;
    // Transport failures hide the useful part (e.g. "Connection refused") in the source chain.
    let (mut text, mut source) = match err {
        etcd_client::Error::GRpcStatus(status) => (
            format!("{:?}: {}", status.code(), status.message()),
            status.source(),
        ),
        etcd_client::Error::TransportError(e) => (err.to_string(), e.source()),
        other => (other.to_string(), None),
    };
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    // Messages as etcd 3.4 sends them (api/v3rpc/rpctypes); the integration tests check the
    // ones a test can provoke against the real server.
    #[test]
    fn etcd_messages_map_to_kinds() {
        let cases = [
            (
                Code::Unavailable,
                "etcdserver: unhealthy cluster",
                ErrorKind::UnhealthyCluster,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: too many learner members in cluster",
                ErrorKind::TooManyLearners,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: can only promote a learner member which is in sync with leader",
                ErrorKind::LearnerNotInSync,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: can only promote a learner member",
                ErrorKind::MemberNotLearner,
            ),
            (
                Code::NotFound,
                "etcdserver: member not found",
                ErrorKind::MemberNotFound,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: Peer URLs already exists",
                ErrorKind::PeerUrlExists,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: re-configuration failed due to not enough started members",
                ErrorKind::NotEnoughStartedMembers,
            ),
            (
                Code::Unavailable,
                "etcdserver: no leader",
                ErrorKind::NoLeader,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: not leader",
                ErrorKind::NotLeader,
            ),
            (
                Code::Unavailable,
                "etcdserver: rpc not supported for learner",
                ErrorKind::LearnerRejected,
            ),
            (
                Code::ResourceExhausted,
                "etcdserver: mvcc: database space exceeded",
                ErrorKind::NoSpace,
            ),
            (
                Code::Unavailable,
                "etcdserver: leader changed",
                ErrorKind::Transient,
            ),
            (
                Code::Unavailable,
                "etcdserver: request timed out, possibly due to previous leader failure",
                ErrorKind::Transient,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: bad leader transferee",
                ErrorKind::Other,
            ),
            (
                Code::Unavailable,
                "tcp connect error: Connection refused (os error 111)",
                ErrorKind::Unreachable,
            ),
            (Code::Cancelled, "Timeout expired", ErrorKind::Unreachable),
            (Code::InvalidArgument, "bad request", ErrorKind::Other),
        ];
        for (code, message, kind) in cases {
            assert_eq!(classify_status(code, message), kind, "{code:?} {message}");
        }
    }

    #[test]
    fn retryable_kinds_are_exactly_the_wait_and_retry_ones() {
        use ErrorKind::*;
        let retryable = [
            UnhealthyCluster,
            TooManyLearners,
            LearnerNotInSync,
            NotEnoughStartedMembers,
            Unreachable,
            NoLeader,
            Transient,
        ];
        let final_ = [
            MemberNotLearner,
            MemberNotFound,
            PeerUrlExists,
            NotLeader,
            LearnerRejected,
            NoSpace,
            InvalidConfig,
            Other,
        ];
        assert!(retryable.iter().all(|k| k.is_retryable()));
        assert!(final_.iter().all(|k| !k.is_retryable()));
    }

    #[test]
    fn error_text_names_operation_endpoint_and_remedy() {
        let status = tonic::Status::new(Code::Unavailable, "etcdserver: unhealthy cluster");
        let err = EtcdError::from_client(
            "member remove 1a",
            "http://127.0.0.1:2379",
            etcd_client::Error::GRpcStatus(status),
        );
        assert_eq!(err.kind(), ErrorKind::UnhealthyCluster);
        let text = err.to_string();
        assert!(text.contains("member remove 1a"), "{text}");
        assert!(text.contains("http://127.0.0.1:2379"), "{text}");
        assert!(text.contains("etcdserver: unhealthy cluster"), "{text}");
        assert!(text.contains("wait and retry"), "{text}");
    }
}
