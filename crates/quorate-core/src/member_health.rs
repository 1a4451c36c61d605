//! Member health from member leases, by etcd-druid's rules, so `status.members` means the same
//! as under druid: a member is as healthy as its agent's last lease renewal says.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use quorate_api::status::{EtcdMemberConditionStatus, EtcdMemberStatus};

use crate::lease::MemberLease;

/// Reason: the lease was renewed within the unknown threshold.
pub const REASON_LEASE_SUCCEEDED: &str = "LeaseSucceeded";
/// Reason: the lease is stale, the process/pod still looks ready.
pub const REASON_LEASE_EXPIRED: &str = "LeaseExpired";
/// Reason: the lease is stale and the process/pod is not ready.
pub const REASON_CONTAINERS_NOT_READY: &str = "ContainersNotReady";
/// Reason: the lease has been stale for longer than both thresholds together.
pub const REASON_UNKNOWN_GRACE_PERIOD_EXCEEDED: &str = "UnknownGracePeriodExceeded";

/// How long a lease may go unrenewed before its member turns Unknown, and then NotReady.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthThresholds {
    /// Stale for longer than this: Unknown (or NotReady if its process is not ready).
    pub unknown: SignedDuration,
    /// Stale for longer than `unknown + not_ready`: NotReady whatever the process says.
    pub not_ready: SignedDuration,
}

impl Default for HealthThresholds {
    /// druid's defaults: 1 minute, then 5 more minutes.
    fn default() -> Self {
        HealthThresholds {
            unknown: SignedDuration::from_mins(1),
            not_ready: SignedDuration::from_mins(5),
        }
    }
}

/// The `status.members` entries for the expected member lease names (in that order).
///
/// - a missing lease is skipped; so is a lease never renewed (the member is bootstrapping);
/// - stale beyond `unknown + not_ready`: NotReady / `UnknownGracePeriodExceeded`;
/// - stale beyond `unknown`: NotReady / `ContainersNotReady` if `process_ready(name)` is false,
///   else Unknown / `LeaseExpired`;
/// - otherwise Ready / `LeaseSucceeded`.
///
/// "Stale beyond" is strict, as in druid. `lastTransitionTime` is carried over from `previous`
/// when the status is unchanged. ID and role come from the holder identity; an identity that
/// does not parse keeps its text before the first `:` as the ID and no role.
pub fn member_statuses(
    expected: &[String],
    leases: &[MemberLease],
    process_ready: impl Fn(&str) -> bool,
    previous: &[EtcdMemberStatus],
    thresholds: &HealthThresholds,
    now: Timestamp,
) -> Vec<EtcdMemberStatus> {
    expected
        .iter()
        .filter_map(|name| leases.iter().find(|l| &l.name == name))
        .filter_map(|lease| {
            let renewed = lease.renew_time?;
            let (status, reason) = judge(renewed, || process_ready(&lease.name), thresholds, now);
            let (id, role) = identity(lease);
            let last_transition_time = previous
                .iter()
                .find(|p| p.name == lease.name && p.status == status)
                .map_or(Time(now), |p| p.last_transition_time.clone());
            Some(EtcdMemberStatus {
                name: lease.name.clone(),
                id,
                role,
                status,
                reason: reason.to_string(),
                last_transition_time,
                etcd_version: lease
                    .annotations
                    .get(crate::upgrade::RUNNING_VERSION_ANNOTATION)
                    .cloned(),
            })
        })
        .collect()
}

fn judge(
    renewed: Timestamp,
    process_ready: impl FnOnce() -> bool,
    t: &HealthThresholds,
    now: Timestamp,
) -> (EtcdMemberConditionStatus, &'static str) {
    use EtcdMemberConditionStatus::*;
    let stale_beyond = |d: SignedDuration| renewed.checked_add(d).is_ok_and(|at| at < now);
    if stale_beyond(t.unknown.saturating_add(t.not_ready)) {
        (NotReady, REASON_UNKNOWN_GRACE_PERIOD_EXCEEDED)
    } else if stale_beyond(t.unknown) {
        if process_ready() {
            (Unknown, REASON_LEASE_EXPIRED)
        } else {
            (NotReady, REASON_CONTAINERS_NOT_READY)
        }
    } else {
        (Ready, REASON_LEASE_SUCCEEDED)
    }
}

fn identity(lease: &MemberLease) -> (Option<String>, Option<quorate_api::status::EtcdRole>) {
    match lease.holder() {
        None => (None, None),
        Some(Ok(h)) => (Some(format!("{:x}", h.member_id)), Some(h.role)),
        Some(Err(_)) => {
            let raw = lease.holder_identity.as_deref().unwrap_or_default();
            let id = raw.split(':').next().filter(|s| !s.is_empty());
            (id.map(str::to_string), None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EtcdMemberConditionStatus::*;
    use quorate_api::status::EtcdRole;

    fn now() -> Timestamp {
        "2024-03-01T12:00:00Z".parse().unwrap()
    }

    fn ago(secs: i64) -> Timestamp {
        now() - SignedDuration::from_secs(secs)
    }

    fn lease(name: &str, holder: Option<&str>, renewed: Option<Timestamp>) -> MemberLease {
        MemberLease {
            name: name.into(),
            holder_identity: holder.map(String::from),
            renew_time: renewed,
            ..MemberLease::default()
        }
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("etcd-{i}")).collect()
    }

    fn one(l: MemberLease, ready: bool) -> Option<EtcdMemberStatus> {
        let name = l.name.clone();
        member_statuses(
            &[name],
            &[l],
            |_| ready,
            &[],
            &HealthThresholds::default(),
            now(),
        )
        .pop()
    }

    fn status_of(renewed_secs_ago: i64, ready: bool) -> (EtcdMemberConditionStatus, String) {
        let s = one(
            lease("etcd-0", Some("a:Member"), Some(ago(renewed_secs_ago))),
            ready,
        )
        .unwrap();
        (s.status, s.reason)
    }

    #[test]
    fn defaults_are_druids() {
        let t = HealthThresholds::default();
        assert_eq!(t.unknown, SignedDuration::from_secs(60));
        assert_eq!(t.not_ready, SignedDuration::from_secs(300));
    }

    #[test]
    fn fresh_lease_is_ready() {
        assert_eq!(status_of(0, false), (Ready, "LeaseSucceeded".into()));
        // Exactly at the threshold is not yet beyond it.
        assert_eq!(status_of(60, false), (Ready, "LeaseSucceeded".into()));
    }

    #[test]
    fn stale_lease_depends_on_the_process() {
        assert_eq!(status_of(61, true), (Unknown, "LeaseExpired".into()));
        assert_eq!(
            status_of(61, false),
            (NotReady, "ContainersNotReady".into())
        );
        assert_eq!(status_of(360, true), (Unknown, "LeaseExpired".into()));
    }

    #[test]
    fn long_stale_lease_is_not_ready_whatever_the_process_says() {
        assert_eq!(
            status_of(361, true),
            (NotReady, "UnknownGracePeriodExceeded".into())
        );
    }

    #[test]
    fn process_readiness_is_asked_about_the_right_member() {
        let leases = [
            lease("etcd-0", Some("a:Member"), Some(ago(120))),
            lease("etcd-1", Some("b:Member"), Some(ago(120))),
        ];
        let out = member_statuses(
            &names(2),
            &leases,
            |n| n == "etcd-1",
            &[],
            &HealthThresholds::default(),
            now(),
        );
        assert_eq!(
            out.iter().map(|s| s.status).collect::<Vec<_>>(),
            vec![NotReady, Unknown]
        );
    }

    #[test]
    fn missing_and_bootstrapping_members_are_not_listed() {
        let leases = [
            lease("etcd-2", Some("c:Leader"), Some(now())),
            lease("etcd-1", None, None),
            lease("other", Some("d:Member"), Some(now())),
        ];
        let out = member_statuses(
            &names(3),
            &leases,
            |_| true,
            &[],
            &HealthThresholds::default(),
            now(),
        );
        assert_eq!(
            out.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            vec!["etcd-2"]
        );
    }

    #[test]
    fn output_follows_expected_order() {
        let leases = [
            lease("etcd-10", Some("a:Member"), Some(now())),
            lease("etcd-2", Some("b:Member"), Some(now())),
        ];
        let expected = vec!["etcd-2".to_string(), "etcd-10".to_string()];
        let out = member_statuses(
            &expected,
            &leases,
            |_| true,
            &[],
            &HealthThresholds::default(),
            now(),
        );
        assert_eq!(
            out.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            vec!["etcd-2", "etcd-10"]
        );
    }

    #[test]
    fn id_and_role_come_from_the_holder_identity() {
        let s = one(lease("etcd-0", Some("00AB:cd:Leader"), Some(now())), true).unwrap();
        assert_eq!(s.id.as_deref(), Some("ab"));
        assert_eq!(s.role, Some(EtcdRole::Leader));
        let old = one(lease("etcd-0", Some("1f:Member"), Some(now())), true).unwrap();
        assert_eq!(
            (old.id.as_deref(), old.role),
            (Some("1f"), Some(EtcdRole::Member))
        );
        let odd = one(lease("etcd-0", Some("1f:Follower"), Some(now())), true).unwrap();
        assert_eq!((odd.id.as_deref(), odd.role), (Some("1f"), None));
        let none = one(lease("etcd-0", None, Some(now())), true).unwrap();
        assert_eq!((none.id, none.role), (None, None));
    }

    #[test]
    fn transition_time_is_kept_only_while_the_status_holds() {
        let earlier: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let previous = vec![
            EtcdMemberStatus {
                name: "etcd-0".into(),
                id: Some("a".into()),
                role: Some(EtcdRole::Member),
                status: Ready,
                reason: "LeaseSucceeded".into(),
                last_transition_time: Time(earlier),
                etcd_version: None,
            },
            EtcdMemberStatus {
                name: "etcd-1".into(),
                id: Some("b".into()),
                role: Some(EtcdRole::Member),
                status: Ready,
                reason: "LeaseSucceeded".into(),
                last_transition_time: Time(earlier),
                etcd_version: None,
            },
        ];
        let leases = [
            lease("etcd-0", Some("a:Member"), Some(now())),
            lease("etcd-1", Some("b:Member"), Some(ago(1000))),
            lease("etcd-2", Some("c:Member"), Some(now())),
        ];
        let out = member_statuses(
            &names(3),
            &leases,
            |_| true,
            &previous,
            &HealthThresholds::default(),
            now(),
        );
        assert_eq!(out[0].last_transition_time, Time(earlier));
        assert_eq!(out[1].status, NotReady);
        assert_eq!(out[1].last_transition_time, Time(now()));
        assert_eq!(out[2].last_transition_time, Time(now()));
    }

    #[test]
    fn custom_thresholds_apply() {
        let t = HealthThresholds {
            unknown: SignedDuration::from_secs(5),
            not_ready: SignedDuration::from_secs(5),
        };
        let out = member_statuses(
            &names(1),
            &[lease("etcd-0", Some("a:Member"), Some(ago(11)))],
            |_| true,
            &[],
            &t,
            now(),
        );
        assert_eq!(out[0].status, NotReady);
        assert_eq!(out[0].reason, "UnknownGracePeriodExceeded");
    }

    fn rank(s: EtcdMemberConditionStatus) -> u8 {
        match s {
            NotReady => 0,
            Unknown => 1,
            Ready => 2,
        }
    }

    proptest::proptest! {
        /// Without a renewal, a member's status only gets worse as time passes.
        #[test]
        fn status_never_improves_without_a_renewal(
            unknown in 0i64..600,
            not_ready in 0i64..600,
            a in 0i64..2000,
            b in 0i64..2000,
            ready in proptest::bool::ANY,
        ) {
            let t = HealthThresholds {
                unknown: SignedDuration::from_secs(unknown),
                not_ready: SignedDuration::from_secs(not_ready),
            };
            let at = |secs: i64| {
                member_statuses(
                    &names(1),
                    &[lease("etcd-0", Some("a:Member"), Some(ago(2000)))],
                    |_| ready,
                    &[],
                    &t,
                    ago(2000) + SignedDuration::from_secs(secs),
                )[0]
                .status
            };
            let (early, late) = (a.min(b), a.max(b));
            proptest::prop_assert!(rank(at(late)) <= rank(at(early)));
        }
    }
}
