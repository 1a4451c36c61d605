//! "Wait and retry", kept apart from failures: a member that waits says why in its state, on its
//! lease and in the log, and tries again later; a failure ends the agent.

use std::fmt;

/// A reason to wait and try again; not a failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait(String);

impl Wait {
    /// A wait for `reason`, phrased for a person.
    pub fn new(reason: impl Into<String>) -> Self {
        Wait(reason.into())
    }

    /// An etcd call that did not work out: the next attempt may.
    pub fn from_etcd(error: quorate_etcd::EtcdError) -> Self {
        Wait(error.to_string())
    }

    /// The reason.
    pub fn reason(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Wait> for String {
    fn from(w: Wait) -> String {
        w.0
    }
}
