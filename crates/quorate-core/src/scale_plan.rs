//! Which member pods run on Kubernetes while `spec.replicas` changes: the StatefulSet shrinks
//! only after etcd's leader says the members above the new size left its membership (a
//! StatefulSet removes its highest ordinals, so those are the ones that leave first), and a
//! hibernation keeps every pod until the backup leader reports the final snapshot stored.
//! Without that evidence the pods keep running; the wait costs minutes, a pod stopped while
//! still a member costs quorum.

use jiff::Timestamp;
use quorate_api::Etcd;
use quorate_api::annotations::HIBERNATE_WITHOUT_FINAL_SNAPSHOT;
use quorate_api::names::member_lease_name;

use crate::components::cluster_config::annotation;
use crate::hibernation::{self, Hibernation, HibernationStep};
use crate::lease::MemberLease;
use crate::membership::published::PublishedMembership;

/// The member pods that run: ordinals `0..replicas`, of which `leaving` are no longer desired
/// but still etcd members (or not known not to be).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunningMembers {
    /// How many pods (the StatefulSet's replicas).
    pub replicas: i32,
    /// Members among them that are not desired, in ordinal order.
    pub leaving: Vec<String>,
}

/// What the controller observed, for [`plan`].
#[derive(Clone, Copy, Debug)]
pub struct ScaleEvidence<'a> {
    /// The `Etcd`.
    pub etcd: &'a Etcd,
    /// The member leases of every pod that may run (ordinals below the larger of
    /// `spec.replicas` and the StatefulSet's replicas).
    pub leases: &'a [MemberLease],
    /// The StatefulSet's `spec.replicas` (0 when there is none).
    pub statefulset_replicas: i32,
    /// Now, for the time a hibernation is recorded at.
    pub now: Timestamp,
}

/// The pods to run and what status says about the scale operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePlan {
    /// The pods that run.
    pub running: RunningMembers,
    /// etcd's voting members as the newest leader published them.
    pub voters: Option<Vec<String>>,
    /// Where a hibernation stands (`spec.replicas` is 0).
    pub hibernation: Option<Hibernation>,
}

/// The pods to run now; see the module docs.
pub fn plan(e: &ScaleEvidence<'_>) -> ScalePlan {
    let etcd = e.etcd;
    let replicas = etcd.spec.replicas.max(0);
    let published = PublishedMembership::latest(e.leases);
    let voters = published.as_ref().map(PublishedMembership::voters);
    let hibernation = (replicas == 0).then(|| {
        let request = etcd.metadata.generation.unwrap_or(0).to_string();
        let overridden =
            annotation(etcd, HIBERNATE_WITHOUT_FINAL_SNAPSHOT).as_deref() == Some("true");
        hibernation::next_step(
            &request,
            etcd.spec.backup.store.is_some(),
            overridden,
            e.leases,
            e.now,
        )
    });
    if let Some(HibernationStep::Stop(state)) = hibernation {
        return ScalePlan {
            running: RunningMembers::default(),
            voters,
            hibernation: Some(state),
        };
    }
    let above = replicas..e.statefulset_replicas.max(replicas);
    let leaving_ordinals: Vec<i32> = match &published {
        Some(p) => {
            let members = p.names();
            let highest = members
                .iter()
                .filter_map(|m| ordinal_of(etcd, m))
                .max()
                .map_or(0, |i| i + 1);
            (replicas..highest.max(replicas))
                .filter(|i| members.contains(&name(etcd, *i)))
                .collect()
        }
        None => above.collect(),
    };
    let run = leaving_ordinals.last().map_or(replicas, |i| i + 1);
    ScalePlan {
        running: RunningMembers {
            replicas: run,
            leaving: leaving_ordinals.iter().map(|i| name(etcd, *i)).collect(),
        },
        voters,
        hibernation: hibernation.map(|(HibernationStep::Wait(s) | HibernationStep::Stop(s))| s),
    }
}

fn name(etcd: &Etcd, ordinal: i32) -> String {
    member_lease_name(etcd, u32::try_from(ordinal).unwrap_or(0))
}

/// The ordinal of member `member` of `etcd`, if it is one of its names.
fn ordinal_of(etcd: &Etcd, member: &str) -> Option<i32> {
    let (_, i) = member.rsplit_once('-')?;
    let i: i32 = i.parse().ok()?;
    (name(etcd, i) == member).then_some(i)
}

impl ScalePlan {
    /// Why the scale operation is not done yet (a controller requeues), `None` when it is.
    pub fn waits_for(&self) -> Option<String> {
        if let Some(Hibernation::Pending {
            failures,
            last_error,
        }) = &self.hibernation
        {
            return Some(Hibernation::pending_message(
                *failures,
                last_error.as_deref(),
            ));
        }
        (!self.running.leaving.is_empty()).then(|| {
            format!(
                "waiting for {} to leave etcd's membership before their pods stop",
                self.running.leaving.join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hibernation::{FINAL_SNAPSHOT_ANNOTATION, FinalSnapshotReport};
    use crate::membership::published::{MEMBERSHIP_ANNOTATION, PublishedMember};

    fn etcd(replicas: i32, store: bool) -> Etcd {
        let mut e = crate::components::meta::tests::etcd("e", replicas);
        e.metadata.generation = Some(4);
        e.spec.backup.store = store.then(quorate_api::backup::StoreSpec::default);
        e
    }

    fn leases(n: usize, members: Option<(&[&str], u64)>) -> Vec<MemberLease> {
        let mut out: Vec<MemberLease> =
            (0..n).map(|i| MemberLease::new(format!("e-{i}"))).collect();
        if let Some((names, term)) = members {
            let published = PublishedMembership {
                cluster_id: "1".into(),
                term,
                members: names
                    .iter()
                    .map(|n| PublishedMember {
                        name: n.to_string(),
                        learner: false,
                    })
                    .collect(),
            };
            out[0]
                .annotations
                .insert(MEMBERSHIP_ANNOTATION.into(), published.to_annotation());
        }
        out
    }

    fn evidence<'a>(etcd: &'a Etcd, leases: &'a [MemberLease], sts: i32) -> ScaleEvidence<'a> {
        ScaleEvidence {
            etcd,
            leases,
            statefulset_replicas: sts,
            now: Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn pods_above_the_new_size_run_until_the_leader_says_they_left() {
        let e = etcd(3, true);
        let five = ["e-0", "e-1", "e-2", "e-3", "e-4"];
        let l = leases(5, Some((&five, 7)));
        let p = plan(&evidence(&e, &l, 5));
        assert_eq!(
            p.running,
            RunningMembers {
                replicas: 5,
                leaving: vec!["e-3".into(), "e-4".into()]
            }
        );
        let l = leases(5, Some((&five[..4], 7)));
        assert_eq!(
            plan(&evidence(&e, &l, 5)).running.replicas,
            4,
            "e-4 left: its pod may go"
        );
        let l = leases(5, Some((&five[..3], 8)));
        let p = plan(&evidence(&e, &l, 5));
        assert_eq!(
            p.running,
            RunningMembers {
                replicas: 3,
                leaving: vec![]
            }
        );
        assert_eq!(p.waits_for(), None);
    }

    #[test]
    fn without_the_leaders_word_no_pod_stops() {
        let e = etcd(3, true);
        let l = leases(5, None);
        let p = plan(&evidence(&e, &l, 5));
        assert_eq!(p.running.replicas, 5);
        assert_eq!(p.running.leaving, ["e-3", "e-4"]);
        assert_eq!(p.voters, None);
        assert!(p.waits_for().unwrap().contains("e-3, e-4"));
    }

    #[test]
    fn a_member_above_the_size_etcd_still_lists_keeps_its_pod_even_past_the_statefulset() {
        // The StatefulSet was shrunk by someone else; e-3 is still a member: its pod comes back.
        let e = etcd(3, true);
        let l = leases(4, Some((&["e-0", "e-1", "e-2", "e-3"], 2)));
        assert_eq!(plan(&evidence(&e, &l, 3)).running.replicas, 4);
    }

    #[test]
    fn hibernation_keeps_every_pod_until_the_final_snapshot_is_reported() {
        let e = etcd(0, true);
        let three = ["e-0", "e-1", "e-2"];
        let mut l = leases(3, Some((&three, 3)));
        let p = plan(&evidence(&e, &l, 3));
        assert_eq!(p.running.replicas, 3);
        assert!(matches!(p.hibernation, Some(Hibernation::Pending { .. })));
        let report = FinalSnapshotReport {
            request: "4".into(),
            revision: Some(99),
            ..FinalSnapshotReport::default()
        };
        l[1].annotations
            .insert(FINAL_SNAPSHOT_ANNOTATION.into(), report.to_annotation());
        let p = plan(&evidence(&e, &l, 3));
        assert_eq!(p.running, RunningMembers::default());
        assert!(matches!(
            p.hibernation,
            Some(Hibernation::Hibernated {
                final_snapshot_revision: Some(99),
                ..
            })
        ));
        assert_eq!(p.waits_for(), None);
    }

    #[test]
    fn without_a_store_hibernation_stops_the_pods_at_once() {
        let e = etcd(0, false);
        let l = leases(3, Some((&["e-0", "e-1", "e-2"], 3)));
        assert_eq!(plan(&evidence(&e, &l, 3)).running.replicas, 0);
    }
}
