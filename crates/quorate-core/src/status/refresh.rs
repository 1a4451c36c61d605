//! When an unchanged status is written again only to move its conditions' `lastUpdateTime`
//! (the sign that the operator still looks): once a minute, but not while clusters wait for
//! their spec flow (new `Etcd`s, spec changes), whose passes need the API server more than a
//! refresh does — within a bound, so a cluster that never gets through cannot stop every
//! other cluster's refreshes. A status whose content changed is always written at once.

use jiff::SignedDuration;

/// How long a condition's `lastUpdateTime` may lag before an otherwise unchanged status is
/// written again: conditions are re-checked every pass, but rewriting the object every 15 s
/// only to move those times would make status writes the bulk of the operator's API traffic.
pub const CONDITION_REFRESH: SignedDuration = SignedDuration::from_secs(60);

/// How long a refresh may be put off while clusters wait for their spec flow: the longest
/// a condition's `lastUpdateTime` lags.
pub const CONDITION_REFRESH_DEFERRED: SignedDuration = SignedDuration::from_secs(300);

/// Whether an unchanged status whose oldest refreshable condition was last updated `age` ago
/// is written now, with `waiting` clusters of this operator waiting for their spec flow.
pub fn refresh_now(age: SignedDuration, waiting: usize) -> bool {
    if age <= CONDITION_REFRESH {
        return false;
    }
    waiting == 0 || age > CONDITION_REFRESH_DEFERRED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_status_is_refreshed_once_a_minute_when_nothing_waits() {
        assert!(!refresh_now(SignedDuration::from_secs(15), 0));
        assert!(!refresh_now(CONDITION_REFRESH, 0));
        assert!(refresh_now(SignedDuration::from_secs(61), 0));
    }

    #[test]
    fn refreshes_wait_for_clusters_waiting_for_their_spec_flow_within_a_bound() {
        assert!(!refresh_now(SignedDuration::from_secs(61), 1));
        assert!(!refresh_now(SignedDuration::from_secs(299), 2000));
        assert!(!refresh_now(CONDITION_REFRESH_DEFERRED, 2000));
        assert!(refresh_now(SignedDuration::from_secs(301), 2000));
    }
}
