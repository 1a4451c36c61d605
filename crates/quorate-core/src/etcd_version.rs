//! Which etcd version a cluster's members run after a change of its `Etcd`: what it asks for
//! (`quorate.io/etcd-version`, the target) against what its members were last configured
//! with (the current step) and what etcd reports. etcd moves one minor version at a time, so
//! a request for 3.5 → 3.7 runs as 3.5 → 3.6, then 3.6 → 3.7, and a downgrade 3.7 → 3.5 as
//! 3.7 → 3.6, then 3.6 → 3.5. Each step is one quorum-aware rolling restart
//! (`membership::rollout`); the next step starts only when every member's agent publishes
//! that its etcd runs the step's version and reports it as the cluster version.

use quorate_api::{EtcdVersion, VersionChangeRefused};

use crate::lease::MemberLease;
use crate::upgrade::{
    CLUSTER_VERSION_ANNOTATION, SNAPSHOT_CLUSTER_VERSION_ANNOTATION, running_version,
};

/// The `--snapshot-count` members run with while the 3.6 step of a chain that goes on to 3.7
/// waits for its raft snapshots: etcd takes one after this many entries (the agents' lease
/// grants provide them on an idle cluster), instead of after thousands.
pub const SNAPSHOT_GATE_COUNT: u64 = 10;

/// What one member's agent published about its etcd's versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberVersions {
    /// Member name.
    pub name: String,
    /// The version of the etcd server it runs (`quorate.io/etcd-version`).
    pub server: Option<EtcdVersion>,
    /// The cluster version its etcd reports (`quorate.io/etcd-cluster-version`).
    pub cluster: Option<EtcdVersion>,
    /// The cluster version recorded in its etcd's newest raft snapshot
    /// (`quorate.io/etcd-snapshot-cluster-version`); `None` without one or unpublished.
    pub snapshot: Option<EtcdVersion>,
}

impl MemberVersions {
    /// The versions `members` (lease names) publish on their leases; a member without a lease
    /// has published nothing.
    pub fn from_leases(members: &[String], leases: &[MemberLease]) -> Vec<MemberVersions> {
        members
            .iter()
            .map(|name| {
                let lease = leases.iter().find(|l| &l.name == name);
                MemberVersions {
                    name: name.clone(),
                    server: lease.and_then(running_version),
                    cluster: lease
                        .and_then(|l| l.annotations.get(CLUSTER_VERSION_ANNOTATION))
                        .and_then(|v| EtcdVersion::parse(v).ok()),
                    snapshot: lease
                        .and_then(|l| l.annotations.get(SNAPSHOT_CLUSTER_VERSION_ANNOTATION))
                        .and_then(|v| EtcdVersion::parse(v).ok()),
                }
            })
            .collect()
    }
}

/// The version the members run, and where a change of it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionDecision {
    /// The version to configure the members with now: the current step.
    pub run: EtcdVersion,
    /// The version asked for, the end of the chain.
    pub target: EtcdVersion,
    /// While a change is under way: which step runs and what it waits for (status).
    pub progress: Option<String>,
    /// The next step waits for raft snapshots on the members ([`snapshot_gate`]): status
    /// gives it its own reason, and the operator an event, as it needs a person's word when
    /// etcd takes none.
    pub snapshot_wait: bool,
}

/// Why a member is not yet through step `run`, or `None` when it is: it runs `run` and its
/// etcd reports `run` as the cluster version.
fn behind(member: &MemberVersions, run: EtcdVersion) -> Option<String> {
    let name = &member.name;
    match (member.server, member.cluster) {
        (None, _) => Some(format!("{name} has not published its etcd version")),
        (Some(server), _) if server != run => Some(format!("{name} runs etcd {server}")),
        (_, None) => Some(format!("{name} has not published etcd's cluster version")),
        (_, Some(cluster)) if cluster != run => {
            Some(format!("{name}'s etcd reports cluster version {cluster}"))
        }
        _ => None,
    }
}

/// Every reason the members are not through step `run`; empty when they all are. No members
/// known is not evidence of anything.
fn waiting_for(members: &[MemberVersions], run: EtcdVersion) -> Vec<String> {
    if members.is_empty() {
        return vec!["no member has published its versions".to_string()];
    }
    members.iter().filter_map(|m| behind(m, run)).collect()
}

fn direction(from: EtcdVersion, to: EtcdVersion) -> &'static str {
    if to > from {
        "upgrade"
    } else {
        "downgrade through etcd's downgrade API"
    }
}

/// Decides the version the members run. A new cluster (`running: None`) gets the requested
/// version or [`EtcdVersion::DEFAULT`]. An existing one runs `running` (the version its
/// members were last configured with) until every member (`members`, from their leases) runs
/// it and reports it as etcd's cluster version; then, while the request differs, the next
/// minor version towards it. The 3.6 → 3.7 step also waits for [`snapshot_gate`] unless
/// `without_snapshot` (the `quorate.io/etcd-3.7-without-snapshot` override). `Err` when the
/// request is refused; nothing should change then.
pub fn decide(
    requested: Option<EtcdVersion>,
    running: Option<EtcdVersion>,
    members: &[MemberVersions],
    without_snapshot: bool,
) -> Result<VersionDecision, VersionRefused> {
    let Some(running) = running else {
        let version = requested.unwrap_or(EtcdVersion::DEFAULT);
        return Ok(VersionDecision {
            run: version,
            target: version,
            progress: None,
            snapshot_wait: false,
        });
    };
    let target = requested.unwrap_or(running);
    running
        .check_change(target)
        .map_err(|refused| VersionRefused { running, refused })?;
    let waiting = waiting_for(members, running);
    let Some(next) = running.next_toward(target) else {
        // At the target: a step is still under way while a member shows another version.
        let shows_other = members.iter().any(|m| {
            m.server.is_some_and(|v| v != running) || m.cluster.is_some_and(|v| v != running)
        });
        let progress = (shows_other && !waiting.is_empty()).then(|| {
            format!(
                "etcd {running}: the last step waits for every member to run it and etcd to \
                 report it as the cluster version: {}",
                waiting.join("; ")
            )
        });
        return Ok(VersionDecision {
            run: running,
            target,
            progress,
            snapshot_wait: false,
        });
    };
    let chain = std::iter::once(running)
        .chain(running.steps_to(target))
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(" → ");
    if waiting.is_empty()
        && !without_snapshot
        && let Some(missing) = snapshot_gate(running, next, members)
    {
        return Ok(VersionDecision {
            run: running,
            target,
            progress: Some(format!(
                "etcd {chain}: step {running} → {next} ({}) waits for a raft snapshot taken at \
                 cluster version {running} on every member (etcd {next} cannot replay the older \
                 entries a write-ahead log may still hold): {}; the members run with \
                 --snapshot-count={SNAPSHOT_GATE_COUNT} until then, so etcd takes one after its \
                 next writes; to go on without it, annotate the Etcd {}=true",
                direction(running, next),
                missing.join("; "),
                quorate_api::annotations::ETCD_3_7_WITHOUT_SNAPSHOT,
            )),
            snapshot_wait: true,
        });
    }
    if waiting.is_empty() {
        let after = if next == target {
            String::new()
        } else {
            format!("; then {}", next.steps_to(target)[0])
        };
        return Ok(VersionDecision {
            run: next,
            target,
            progress: Some(format!(
                "etcd {chain}: step {running} → {next} ({}) starts: every member runs \
                 {running} and etcd reports it as the cluster version{after}",
                direction(running, next)
            )),
            snapshot_wait: false,
        });
    }
    Ok(VersionDecision {
        run: running,
        target,
        progress: Some(format!(
            "etcd {chain}: step to {running} runs; step {running} → {next} ({}) waits for \
             every member to run {running} and etcd to report it as the cluster version: {}",
            direction(running, next),
            waiting.join("; ")
        )),
        snapshot_wait: false,
    })
}

/// Whether the step `from` → `to` needs a raft snapshot taken at cluster version `from` on
/// every member first: etcd 3.7 replays a member's write-ahead log from its newest snapshot
/// and cannot parse the v2 requests 3.5 wrote (it panics in `apply`), so each 3.6 member must
/// have snapshotted past them, which a snapshot taken at cluster version 3.6 proves.
fn needs_snapshot(from: EtcdVersion, to: EtcdVersion) -> bool {
    from == EtcdVersion::V3_6 && to == EtcdVersion::V3_7
}

/// What the step `from` → `to` still lacks of its snapshot evidence: each member whose
/// newest raft snapshot does not record cluster version `from` or later (`None`: nothing).
pub fn snapshot_gate(
    from: EtcdVersion,
    to: EtcdVersion,
    members: &[MemberVersions],
) -> Option<Vec<String>> {
    if !needs_snapshot(from, to) {
        return None;
    }
    let missing: Vec<String> = members
        .iter()
        .filter_map(|m| match m.snapshot {
            Some(v) if v >= from => None,
            Some(v) => Some(format!(
                "{}'s newest raft snapshot records cluster version {v}",
                m.name
            )),
            None => Some(format!(
                "{} has reported no raft snapshot taken at cluster version {from}",
                m.name
            )),
        })
        .collect();
    (!missing.is_empty()).then_some(missing)
}

/// The `--snapshot-count` for members that run step `run` of a change towards `target`:
/// [`SNAPSHOT_GATE_COUNT`] (or `configured` when lower) while `run` is a version whose next
/// step towards `target` waits for raft snapshots, so etcd takes them soon; `configured`
/// otherwise.
pub fn snapshot_count(run: EtcdVersion, target: Option<EtcdVersion>, configured: u64) -> u64 {
    if reads_snapshot_evidence(run, target) {
        configured.min(SNAPSHOT_GATE_COUNT)
    } else {
        configured
    }
}

/// Whether a member configured for step `run` of a change towards `target` reads its newest
/// raft snapshot file (up to 64 MiB) and publishes the cluster version recorded in it: only
/// while that evidence can matter, i.e. `run` is a version whose next step towards `target`
/// waits for raft snapshots (3.6 on a chain to 3.7). Any other time the file is not read and
/// nothing is published, so no evidence from an earlier chain outlives it.
pub fn reads_snapshot_evidence(run: EtcdVersion, target: Option<EtcdVersion>) -> bool {
    target
        .and_then(|t| run.next_toward(t))
        .is_some_and(|next| needs_snapshot(run, next))
}

/// Whether a member should add raft entries (a lease grant and revoke) so its etcd takes the
/// snapshot the next step waits for: it runs step `run` with the lowered `snapshot_count` of
/// a chain that goes on (core [`snapshot_count`]), its etcd reports cluster version `cluster`
/// at least `run`, and its newest snapshot records an older version or none (`snapshot`).
pub fn wants_snapshot_entries(
    run: EtcdVersion,
    snapshot_count: u64,
    cluster: EtcdVersion,
    snapshot: Option<EtcdVersion>,
) -> bool {
    let gated = snapshot_gate(
        run,
        EtcdVersion::V3_7,
        &[MemberVersions {
            name: String::new(),
            server: Some(run),
            cluster: Some(cluster),
            snapshot,
        }],
    )
    .is_some();
    gated && snapshot_count <= SNAPSHOT_GATE_COUNT && cluster >= run
}

/// A refused change of the etcd version, with the version the cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the cluster runs etcd {running}: {refused}")]
pub struct VersionRefused {
    /// The version the members run.
    pub running: EtcdVersion,
    /// Why the change is refused.
    pub refused: VersionChangeRefused,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> EtcdVersion {
        EtcdVersion::parse(text).unwrap()
    }

    /// Three members, each running `server` and reporting `cluster` (`""`: not published).
    fn members(versions: [(&str, &str); 3]) -> Vec<MemberVersions> {
        versions
            .iter()
            .enumerate()
            .map(|(i, (server, cluster))| MemberVersions {
                name: format!("etcd-main-{i}"),
                server: EtcdVersion::parse(server).ok(),
                cluster: EtcdVersion::parse(cluster).ok(),
                snapshot: EtcdVersion::parse(cluster).ok(),
            })
            .collect()
    }

    fn all(version: &str) -> Vec<MemberVersions> {
        members([(version, version); 3])
    }

    #[test]
    fn a_new_cluster_gets_what_it_asks_for_or_the_default() {
        assert_eq!(
            decide(None, None, &[], false).unwrap().run,
            EtcdVersion::DEFAULT
        );
        assert_eq!(
            decide(Some(v("3.4")), None, &[], false).unwrap().run,
            v("3.4")
        );
    }

    #[test]
    fn an_existing_cluster_keeps_its_version_without_a_request() {
        let d = decide(None, Some(v("3.4")), &[], false).unwrap();
        assert_eq!((d.run, d.target, d.progress), (v("3.4"), v("3.4"), None));
        // Missing evidence while nothing changes is no change under way.
        let d = decide(
            Some(v("3.5")),
            Some(v("3.5")),
            &members([("3.5", ""); 3]),
            false,
        )
        .unwrap();
        assert_eq!(d.progress, None);
    }

    #[test]
    fn a_request_two_minors_up_runs_as_two_steps_each_after_etcd_reports_the_last() {
        let target = Some(v("3.7"));
        // Settled on 3.5: the first step starts.
        let d = decide(target, Some(v("3.5")), &all("3.5"), false).unwrap();
        assert_eq!((d.run, d.target), (v("3.6"), v("3.7")));
        let progress = d.progress.unwrap();
        assert!(
            progress.contains("3.5 → 3.6 → 3.7")
                && progress.contains("step 3.5 → 3.6 (upgrade) starts")
                && progress.contains("then 3.7"),
            "{progress}"
        );
        // Mid step: one member restarted, the cluster version is still 3.5.
        let mid = members([("3.5", "3.5"), ("3.6", "3.5"), ("3.5", "3.5")]);
        let d = decide(target, Some(v("3.6")), &mid, false).unwrap();
        assert_eq!(d.run, v("3.6"), "the step runs on");
        let progress = d.progress.unwrap();
        assert!(
            progress.contains("step 3.6 → 3.7 (upgrade) waits")
                && progress.contains("etcd-main-0 runs etcd 3.5")
                && progress.contains("etcd-main-1's etcd reports cluster version 3.5"),
            "{progress}"
        );
        // Every member runs 3.6, but etcd has not moved the cluster version yet.
        let d = decide(target, Some(v("3.6")), &members([("3.6", "3.5"); 3]), false).unwrap();
        assert_eq!(d.run, v("3.6"));
        // A member that has not published the cluster version is no evidence.
        let d = decide(
            target,
            Some(v("3.6")),
            &members([("3.6", "3.6"), ("3.6", ""), ("3.6", "3.6")]),
            false,
        )
        .unwrap();
        assert_eq!(d.run, v("3.6"));
        assert!(
            d.progress
                .unwrap()
                .contains("etcd-main-1 has not published")
        );
        assert_eq!(
            decide(target, Some(v("3.6")), &[], false).unwrap().run,
            v("3.6")
        );
        // etcd reports 3.6 everywhere: the second step starts.
        let d = decide(target, Some(v("3.6")), &all("3.6"), false).unwrap();
        assert_eq!(d.run, v("3.7"));
        // The last step under way, then done.
        let d = decide(target, Some(v("3.7")), &members([("3.7", "3.6"); 3]), false).unwrap();
        assert_eq!(d.run, v("3.7"));
        assert!(d.progress.unwrap().contains("the last step waits"));
        let d = decide(target, Some(v("3.7")), &all("3.7"), false).unwrap();
        assert_eq!((d.run, d.progress), (v("3.7"), None));
    }

    #[test]
    fn a_downgrade_runs_one_minor_at_a_time_too() {
        let target = Some(v("3.5"));
        let d = decide(target, Some(v("3.7")), &all("3.7"), false).unwrap();
        assert_eq!(d.run, v("3.6"));
        assert!(
            d.progress
                .unwrap()
                .contains("step 3.7 → 3.6 (downgrade through etcd's downgrade API) starts")
        );
        // Downgrade enabled: etcd reports the lower cluster version before any restart.
        let d = decide(target, Some(v("3.6")), &members([("3.7", "3.6"); 3]), false).unwrap();
        assert_eq!(d.run, v("3.6"));
        let d = decide(target, Some(v("3.6")), &all("3.6"), false).unwrap();
        assert_eq!(d.run, v("3.5"));
    }

    #[test]
    fn a_refused_change_names_the_running_version_and_changes_nothing() {
        let refused = decide(Some(v("3.4")), Some(v("3.5")), &all("3.5"), false).unwrap_err();
        let text = refused.to_string();
        assert!(
            text.starts_with("the cluster runs etcd 3.5: downgrading"),
            "{text}"
        );
        // Mid chain the request is judged against the current step.
        let refused = decide(Some(v("3.4")), Some(v("3.6")), &all("3.5"), false).unwrap_err();
        assert_eq!(refused.running, v("3.6"));
    }

    #[test]
    fn a_changed_request_mid_chain_turns_back_from_the_current_step() {
        // 3.5 → 3.7 asked, step 3.6 done; now 3.5 is asked again: one step down.
        let d = decide(Some(v("3.5")), Some(v("3.6")), &all("3.6"), false).unwrap();
        assert_eq!(d.run, v("3.5"));
        // Asked back to 3.6 while the step to 3.6 still runs: it finishes there.
        let mid = members([("3.6", "3.5"), ("3.5", "3.5"), ("3.5", "3.5")]);
        let d = decide(Some(v("3.6")), Some(v("3.6")), &mid, false).unwrap();
        assert_eq!(d.run, v("3.6"));
        assert!(d.progress.unwrap().contains("etcd-main-1 runs etcd 3.5"));
    }

    #[test]
    fn the_3_6_to_3_7_step_waits_for_a_raft_snapshot_taken_at_3_6_on_every_member() {
        let target = Some(v("3.7"));
        let mut settled = all("3.6");
        settled[1].snapshot = Some(v("3.5"));
        settled[2].snapshot = None;
        let d = decide(target, Some(v("3.6")), &settled, false).unwrap();
        assert_eq!(d.run, v("3.6"), "the step waits");
        assert!(d.snapshot_wait);
        let progress = d.progress.unwrap();
        assert!(
            progress.contains("step 3.6 → 3.7 (upgrade) waits for a raft snapshot")
                && progress
                    .contains("etcd-main-1's newest raft snapshot records cluster version 3.5")
                && progress.contains("etcd-main-2 has reported no raft snapshot")
                && !progress.contains("etcd-main-0")
                && progress.contains("quorate.io/etcd-3.7-without-snapshot=true"),
            "{progress}"
        );
        // The override goes on without the evidence.
        let d = decide(target, Some(v("3.6")), &settled, true).unwrap();
        assert_eq!(d.run, v("3.7"));
        // Every member reports one: the step starts.
        let d = decide(target, Some(v("3.6")), &all("3.6"), false).unwrap();
        assert_eq!(d.run, v("3.7"));
        // Other steps never wait for it.
        let mut old = all("3.5");
        for m in &mut old {
            m.snapshot = None;
        }
        assert_eq!(
            decide(target, Some(v("3.5")), &old, false).unwrap().run,
            v("3.6")
        );
        let mut down = all("3.6");
        down[0].snapshot = None;
        assert_eq!(
            decide(Some(v("3.5")), Some(v("3.6")), &down, false)
                .unwrap()
                .run,
            v("3.5")
        );
    }

    #[test]
    fn members_snapshot_often_only_while_the_3_6_step_leads_on_to_3_7() {
        assert_eq!(
            snapshot_count(v("3.6"), Some(v("3.7")), 10_000),
            SNAPSHOT_GATE_COUNT
        );
        assert_eq!(snapshot_count(v("3.6"), Some(v("3.7")), 5), 5);
        assert_eq!(snapshot_count(v("3.6"), Some(v("3.6")), 10_000), 10_000);
        assert_eq!(snapshot_count(v("3.6"), None, 10_000), 10_000);
        assert_eq!(snapshot_count(v("3.7"), Some(v("3.7")), 10_000), 10_000);
        assert_eq!(snapshot_count(v("3.5"), Some(v("3.7")), 10_000), 10_000);
        assert_eq!(snapshot_count(v("3.6"), Some(v("3.5")), 10_000), 10_000);
    }

    #[test]
    fn a_member_reads_its_snapshot_file_only_while_it_runs_3_6_on_a_chain_to_3_7() {
        assert!(reads_snapshot_evidence(v("3.6"), Some(v("3.7"))));
        for (run, target) in [
            ("3.6", None),
            ("3.6", Some("3.6")),
            ("3.6", Some("3.5")),
            ("3.5", Some("3.7")),
            ("3.5", Some("3.6")),
            ("3.7", Some("3.7")),
            ("3.7", Some("3.5")),
            ("3.4", Some("3.5")),
        ] {
            assert!(
                !reads_snapshot_evidence(v(run), target.map(v)),
                "{run} towards {target:?}"
            );
        }
    }

    #[test]
    fn a_member_adds_entries_only_while_its_3_6_snapshot_is_missing_and_the_count_is_lowered() {
        let lowered = SNAPSHOT_GATE_COUNT;
        let six = v("3.6");
        assert!(wants_snapshot_entries(six, lowered, six, None));
        assert!(wants_snapshot_entries(six, lowered, six, Some(v("3.5"))));
        assert!(
            !wants_snapshot_entries(six, lowered, six, Some(six)),
            "it has one"
        );
        assert!(
            !wants_snapshot_entries(six, 10_000, six, None),
            "no chain to 3.7"
        );
        assert!(
            !wants_snapshot_entries(six, lowered, v("3.5"), None),
            "not at 3.6 yet"
        );
        assert!(!wants_snapshot_entries(v("3.5"), lowered, v("3.5"), None));
        assert!(!wants_snapshot_entries(v("3.7"), lowered, v("3.7"), None));
    }
}
