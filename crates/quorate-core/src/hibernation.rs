//! Hibernation (`spec.replicas: 0`): the members stop only once a final full snapshot is in the
//! bucket, so waking never depends on the data directories alone. etcd-druid scales to zero
//! even when that snapshot failed; here a failed snapshot keeps the cluster running, says why,
//! and is retried. Without a store, or when a person explicitly overrides it, the members stop
//! without one and status says so.
//!
//! The evidence is what the backup leader's agent publishes on its member lease
//! ([`FINAL_SNAPSHOT_ANNOTATION`]): the final snapshot it stored for this hibernation request,
//! or why it could not. The controller (local supervisor or operator) stops the members on that
//! word only.

use crate::lease::MemberLease;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Member lease annotation: the backup leader's final snapshot for a hibernation request.
pub const FINAL_SNAPSHOT_ANNOTATION: &str = "quorate.io/final-snapshot";

/// Where a requested hibernation stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum Hibernation {
    /// Requested; the members still run until the final snapshot is taken.
    Pending {
        /// Failed attempts so far.
        failures: u32,
        /// Why the last attempt failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_error: Option<String>,
    },
    /// The members were stopped (or may be now).
    Hibernated {
        /// The final full snapshot's revision; `None` when the members stopped without one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        final_snapshot_revision: Option<i64>,
        /// Why there is no final snapshot, when there is none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warning: Option<String>,
        /// When the members stopped.
        at: Timestamp,
    },
}

impl Hibernation {
    /// The message a person reads while hibernation waits for its final snapshot.
    pub fn pending_message(failures: u32, last_error: Option<&str>) -> String {
        match last_error {
            None => "taking the final full snapshot before the members stop".into(),
            Some(e) => format!(
                "the members keep running: the final full snapshot failed {failures} time(s) \
                 ({e}); retrying. Fix the store, or set {}=true to hibernate without it",
                quorate_api::annotations::HIBERNATE_WITHOUT_FINAL_SNAPSHOT
            ),
        }
    }
}

/// What the backup leader publishes about the final snapshot of one hibernation request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalSnapshotReport {
    /// The hibernation request this answers (the cluster configuration's
    /// `hibernationRequest`).
    pub request: String,
    /// The stored final snapshot's last revision, once taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Failed attempts.
    #[serde(default)]
    pub failures: u32,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl FinalSnapshotReport {
    /// The report as annotated on a lease, if it parses.
    pub fn from_lease(lease: &MemberLease) -> Option<Self> {
        serde_json::from_str(lease.annotations.get(FINAL_SNAPSHOT_ANNOTATION)?).ok()
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }
}

/// What a hibernating cluster does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HibernationStep {
    /// Keep the members running; the backup leader takes the final snapshot.
    Wait(Hibernation),
    /// Stop the members.
    Stop(Hibernation),
}

/// The next step of hibernation request `request`, from whether the cluster has a store,
/// whether a person asked to stop without a final snapshot
/// (`quorate.io/hibernate-without-final-snapshot`), and the member leases.
pub fn next_step(
    request: &str,
    backup_configured: bool,
    override_requested: bool,
    leases: &[MemberLease],
    now: Timestamp,
) -> HibernationStep {
    let stop_without = |warning: String| {
        HibernationStep::Stop(Hibernation::Hibernated {
            final_snapshot_revision: None,
            warning: Some(warning),
            at: now,
        })
    };
    if !backup_configured {
        return stop_without(
            "no backup store is configured: hibernated without a final snapshot; waking \
             relies on the members' data directories alone"
                .into(),
        );
    }
    let reports: Vec<FinalSnapshotReport> = leases
        .iter()
        .filter_map(FinalSnapshotReport::from_lease)
        .filter(|r| r.request == request)
        .collect();
    if let Some(revision) = reports.iter().filter_map(|r| r.revision).max() {
        return HibernationStep::Stop(Hibernation::Hibernated {
            final_snapshot_revision: Some(revision),
            warning: None,
            at: now,
        });
    }
    if override_requested {
        return stop_without(format!(
            "hibernated without a final snapshot, as {}=true asks; the bucket may miss the \
             last writes",
            quorate_api::annotations::HIBERNATE_WITHOUT_FINAL_SNAPSHOT
        ));
    }
    let failed = reports.iter().max_by_key(|r| r.failures);
    HibernationStep::Wait(Hibernation::Pending {
        failures: failed.map_or(0, |r| r.failures),
        last_error: failed.and_then(|r| r.error.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, report: Option<FinalSnapshotReport>) -> MemberLease {
        let mut l = MemberLease::new(name);
        if let Some(r) = report {
            l.annotations
                .insert(FINAL_SNAPSHOT_ANNOTATION.into(), r.to_annotation());
        }
        l
    }

    fn report(request: &str, revision: Option<i64>, failures: u32) -> FinalSnapshotReport {
        FinalSnapshotReport {
            request: request.into(),
            revision,
            failures,
            error: (failures > 0).then(|| "store refused".into()),
        }
    }

    const NOW: Timestamp = Timestamp::UNIX_EPOCH;

    #[test]
    fn the_members_stop_only_on_the_leaders_word_that_the_final_snapshot_is_stored() {
        let waiting = next_step("7", true, false, &[lease("e-0", None)], NOW);
        assert_eq!(
            waiting,
            HibernationStep::Wait(Hibernation::Pending {
                failures: 0,
                last_error: None
            })
        );
        let leases = [
            lease("e-0", None),
            lease("e-1", Some(report("7", Some(42), 1))),
        ];
        assert_eq!(
            next_step("7", true, false, &leases, NOW),
            HibernationStep::Stop(Hibernation::Hibernated {
                final_snapshot_revision: Some(42),
                warning: None,
                at: NOW
            })
        );
    }

    #[test]
    fn a_report_for_another_request_is_not_evidence() {
        let leases = [lease("e-0", Some(report("6", Some(42), 0)))];
        assert!(matches!(
            next_step("7", true, false, &leases, NOW),
            HibernationStep::Wait(_)
        ));
    }

    #[test]
    fn failures_keep_the_members_running_and_say_why_until_overridden() {
        let leases = [lease("e-0", Some(report("7", None, 3)))];
        let HibernationStep::Wait(Hibernation::Pending {
            failures,
            last_error,
        }) = next_step("7", true, false, &leases, NOW)
        else {
            panic!("a failed snapshot must not stop the members")
        };
        assert_eq!(
            (failures, last_error.as_deref()),
            (3, Some("store refused"))
        );
        let message = Hibernation::pending_message(failures, last_error.as_deref());
        assert!(
            message.contains("hibernate-without-final-snapshot"),
            "{message}"
        );
        assert!(matches!(
            next_step("7", true, true, &leases, NOW),
            HibernationStep::Stop(Hibernation::Hibernated { final_snapshot_revision: None, warning: Some(w), .. })
                if w.contains("as quorate.io/hibernate-without-final-snapshot=true asks")
        ));
    }

    #[test]
    fn without_a_store_the_members_stop_at_once_with_a_warning() {
        assert!(matches!(
            next_step("7", false, false, &[], NOW),
            HibernationStep::Stop(Hibernation::Hibernated { warning: Some(w), .. }) if w.contains("no backup store")
        ));
    }

    #[test]
    fn the_state_survives_a_round_trip() {
        let h = Hibernation::Hibernated {
            final_snapshot_revision: Some(12),
            warning: None,
            at: NOW,
        };
        let text = serde_json::to_string(&h).unwrap();
        assert!(text.contains("\"state\":\"hibernated\""), "{text}");
        assert_eq!(serde_json::from_str::<Hibernation>(&text).unwrap(), h);
    }
}
