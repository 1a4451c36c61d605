//! Looking at members from the inside: `etcdctl` in a member pod, the pods' incarnations and
//! restarts, what their leases publish, and the canary writer's totals.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::Api;
use quorate_api::Etcd;
use serde::Deserialize;

use crate::cluster::{Cluster, KubectlOutput};
use crate::etcd::{fully_ready, status_summary};
use crate::observe::namespace_state;
use crate::scenario::Scenario;
use crate::wait::wait_for;

/// `etcdctl <args>` inside member pod `pod`, against its own etcd.
pub async fn etcdctl(
    cluster: &Cluster,
    namespace: &str,
    pod: &str,
    args: &[&str],
) -> KubectlOutput {
    let mut command = vec![
        "-n",
        namespace,
        "exec",
        pod,
        "-c",
        "etcd",
        "--",
        "etcdctl",
        "--endpoints=http://127.0.0.1:2379",
        "--command-timeout=15s",
    ];
    command.extend_from_slice(args);
    cluster.kubectl(&command).await
}

/// A member as `etcdctl member list -w json` shows it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct ListedMember {
    /// Member ID.
    #[serde(rename = "ID")]
    pub id: u64,
    /// Name; empty until the member first started.
    #[serde(default)]
    pub name: String,
    /// Peer URLs.
    #[serde(rename = "peerURLs", default)]
    pub peer_urls: Vec<String>,
    /// Learner or voter.
    #[serde(rename = "isLearner", default)]
    pub is_learner: bool,
}

/// `(name, ID)` of every listed member, sorted: what stays the same when members come back with
/// their data, and changes when one is replaced.
pub fn names_and_ids(list: &[ListedMember]) -> Vec<(String, u64)> {
    let mut ids: Vec<(String, u64)> = list.iter().map(|m| (m.name.clone(), m.id)).collect();
    ids.sort();
    ids
}

/// The member list as member pod `pod` sees it; `Err` with the reason while it cannot answer.
pub async fn member_list(
    cluster: &Cluster,
    namespace: &str,
    pod: &str,
) -> Result<Vec<ListedMember>, String> {
    #[derive(Deserialize)]
    struct List {
        members: Vec<ListedMember>,
    }
    let out = etcdctl(cluster, namespace, pod, &["member", "list", "-w", "json"]).await;
    if !out.success {
        return Err(format!("{}: {}", out.command, out.stderr.trim()));
    }
    serde_json::from_str::<List>(&out.stdout)
        .map(|l| l.members)
        .map_err(|e| format!("member list JSON: {e}: {}", out.stdout))
}

/// Waits until member pod `pod` lists `count` members, every one started and a voter.
pub async fn wait_for_voters(
    cluster: &Cluster,
    namespace: &str,
    pod: &str,
    count: usize,
    timeout: Duration,
) -> Vec<ListedMember> {
    wait_for(
        &format!("{count} voters"),
        timeout,
        Duration::from_secs(1),
        || async {
            match member_list(cluster, namespace, pod).await {
                Ok(l)
                    if l.len() == count
                        && l.iter().all(|m| !m.is_learner && !m.name.is_empty()) =>
                {
                    Ok(l)
                }
                Ok(l) => Err(format!("{l:?}")),
                Err(e) => Err(e),
            }
        },
    )
    .await
}

/// A serializable (member-local) read of `key` in member pod `pod`: what that member holds.
pub async fn local_value(cluster: &Cluster, namespace: &str, pod: &str, key: &str) -> String {
    etcdctl(
        cluster,
        namespace,
        pod,
        &["get", key, "--print-value-only", "--consistency=s"],
    )
    .await
    .ok()
    .trim()
    .to_string()
}

/// The number of keys under `prefix`, read through member pod `pod` (linearizable: the member
/// first catches up with the leader, then counts from its own data). etcdctl 3.4 has no
/// `--count-only`; the JSON range response carries the count anyway.
pub async fn count_prefix(cluster: &Cluster, namespace: &str, pod: &str, prefix: &str) -> u64 {
    let out = etcdctl(
        cluster,
        namespace,
        pod,
        &["get", prefix, "--prefix", "--keys-only", "-w", "json"],
    )
    .await
    .ok();
    let value: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("count JSON: {e}: {out}"));
    value["count"].as_u64().unwrap_or(0)
}

/// Every incarnation of the member pods seen while watching them: a pod deleted and created
/// again by its StatefulSet has a new UID, a container that crashed has a restart count.
#[derive(Debug, Default)]
pub struct PodIncarnations {
    /// Pod name → UIDs in the order seen, with the highest container restart count of each.
    pods: BTreeMap<String, Vec<(String, i32)>>,
}

impl PodIncarnations {
    /// Looks at `names` once; missing pods are skipped (a deleted pod between incarnations).
    pub async fn observe(&mut self, pods: &Api<Pod>, names: &[String]) {
        for name in names {
            let Ok(Some(pod)) = pods.get_opt(name).await else {
                continue;
            };
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let restarts: i32 = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|cs| cs.iter().map(|c| c.restart_count).sum())
                .unwrap_or(0);
            self.record(name, &uid, restarts);
        }
    }

    /// Notes that pod `name` was seen as incarnation `uid` with `restarts` container restarts.
    pub fn record(&mut self, name: &str, uid: &str, restarts: i32) {
        let seen = self.pods.entry(name.to_string()).or_default();
        match seen.iter_mut().find(|(u, _)| u == uid) {
            Some(entry) => entry.1 = entry.1.max(restarts),
            None => seen.push((uid.to_string(), restarts)),
        }
    }

    /// How often `name` restarted: every new incarnation after the first, plus every container
    /// restart within any incarnation.
    pub fn restarts(&self, name: &str) -> u32 {
        self.pods.get(name).map_or(0, |seen| {
            (seen.len() as u32).saturating_sub(1) + seen.iter().map(|(_, r)| *r as u32).sum::<u32>()
        })
    }

    /// `pod=restarts` for every pod seen, for the results.
    pub fn summary(&self) -> String {
        self.pods
            .keys()
            .map(|name| format!("{name}={}", self.restarts(name)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The canary writer's last totals line (see `quorate canary`), if it printed one yet.
pub async fn canary_totals(
    cluster: &Cluster,
    namespace: &str,
    pod: &str,
) -> Option<serde_json::Value> {
    let out = cluster.kubectl(&["-n", namespace, "logs", pod]).await;
    out.stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
}

/// Waits until the canary pod `pod` has had at least 10 writes acknowledged.
pub async fn wait_canary_writing(cluster: &Cluster, namespace: &str, pod: &str) {
    wait_for(
        "the canary writing",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            match canary_totals(cluster, namespace, pod).await {
                Some(t) if t["acknowledged"].as_u64().unwrap_or(0) >= 10 => Ok(()),
                Some(t) => Err(t.to_string()),
                None => Err(namespace_state(&cluster.client, namespace).await),
            }
        },
    )
    .await;
}

/// `etcdctl endpoint status -w json` of member pod `pod`: its `Status` object.
async fn endpoint_status(cluster: &Cluster, namespace: &str, pod: &str) -> serde_json::Value {
    let out = etcdctl(
        cluster,
        namespace,
        pod,
        &["endpoint", "status", "-w", "json"],
    )
    .await
    .ok();
    let status: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("endpoint status JSON: {e}: {out}"));
    status[0]["Status"].clone()
}

/// The store revision as member pod `pod` reports it (`etcdctl endpoint status`).
pub async fn revision(cluster: &Cluster, namespace: &str, pod: &str) -> i64 {
    let status = endpoint_status(cluster, namespace, pod).await;
    status["header"]["revision"]
        .as_i64()
        .unwrap_or_else(|| panic!("no revision in {status}"))
}

/// The raft term as member pod `pod` reports it: one more per election, planned or not.
pub async fn raft_term(cluster: &Cluster, namespace: &str, pod: &str) -> u64 {
    let status = endpoint_status(cluster, namespace, pod).await;
    status["header"]["raft_term"]
        .as_u64()
        .unwrap_or_else(|| panic!("no raft_term in {status}"))
}

/// The UID of object `name`, if it exists.
pub async fn uid_of<K>(api: &Api<K>, name: &str) -> Option<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|o| o.meta().uid.clone())
}

/// Deletes member pods together with their volume claims (`(pod, claim)` pairs), as a lost
/// disk looks to Kubernetes, and waits until every pod is back on a new claim.
///
/// A StatefulSet can recreate the pod while the old claim is still terminating; that pod then
/// waits for a claim that is gone. Deleting such a pod once more (what a user does) lets the
/// StatefulSet make both anew.
pub async fn delete_pods_and_claims(
    cluster: &Cluster,
    namespace: &str,
    members: &[(String, String)],
    timeout: Duration,
) {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), namespace);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.client.clone(), namespace);
    let mut old = Vec::new();
    for (pod, claim) in members {
        let claim_uid = uid_of(&claims, claim).await;
        assert!(claim_uid.is_some(), "no PVC {claim}");
        old.push((uid_of(&pods, pod).await, claim_uid));
        cluster
            .kubectl(&["-n", namespace, "delete", "pvc", claim, "--wait=false"])
            .await
            .ok();
    }
    for (pod, _) in members {
        cluster
            .kubectl(&["-n", namespace, "delete", "pod", pod, "--wait=false"])
            .await
            .ok();
    }
    let started = std::time::Instant::now();
    let mut deleted_again: Vec<Option<String>> = old.iter().map(|(p, _)| p.clone()).collect();
    loop {
        let mut waiting = Vec::new();
        for (i, (pod, claim)) in members.iter().enumerate() {
            let p = uid_of(&pods, pod).await;
            let c = uid_of(&claims, claim).await;
            let (old_pod, old_claim) = &old[i];
            if p.is_some() && p != *old_pod && c.is_some() && c != *old_claim {
                continue;
            }
            if p.is_some() && p != deleted_again[i] && c.is_none() {
                tokio::time::sleep(Duration::from_secs(3)).await;
                if uid_of(&claims, claim).await.is_none() {
                    println!("  {pod} was recreated before its claim; deleting it once more");
                    cluster
                        .kubectl(&["-n", namespace, "delete", "pod", pod, "--wait=false"])
                        .await
                        .ok();
                    deleted_again[i] = p.clone();
                }
            }
            waiting.push(format!("{pod}: pod {p:?}, claim {c:?}"));
        }
        if waiting.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < timeout,
            "members not back on new claims after {timeout:?}: {}",
            waiting.join("; ")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until `name` is Ready / Quorate / AllMembersReady (and BackupReady when
/// `with_backup`) with `replicas` members ready, printing how it gets there.
pub async fn wait_fully_ready(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    replicas: i32,
    with_backup: bool,
    timeout: Duration,
) -> Etcd {
    let etcds: Api<Etcd> = Api::namespaced(cluster.client.clone(), namespace);
    wait_for(
        &format!("etcd {name} ready with {replicas} members"),
        timeout,
        Duration::from_millis(500),
        || async {
            let etcd = match etcds.get_opt(name).await {
                Ok(Some(e)) if fully_ready(&e, replicas, with_backup) => return Ok(e),
                Ok(Some(e)) => status_summary(&e),
                Ok(None) => "not found".into(),
                Err(e) => format!("get: {e}"),
            };
            Err(format!(
                "{etcd}; {}",
                namespace_state(&cluster.client, namespace).await
            ))
        },
    )
    .await
}

/// The etcd version each member's agent publishes on its lease.
pub async fn lease_versions(leases: &Api<Lease>, members: &[String]) -> Vec<String> {
    lease_annotations(leases, members, "quorate.io/etcd-version").await
}

/// Annotation `key` of each member's lease (empty where it is not set).
pub async fn lease_annotations(leases: &Api<Lease>, members: &[String], key: &str) -> Vec<String> {
    let mut values = Vec::new();
    for m in members {
        let value = leases
            .get_opt(m)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.metadata.annotations)
            .and_then(|a| a.get(key).cloned())
            .unwrap_or_default();
        values.push(value);
    }
    values
}

/// What a writer saw over one change.
pub struct Writes {
    pub failed: u64,
    pub longest_ms: u64,
}

/// The canary's totals, recorded as a measurement.
pub async fn writer_totals(s: &mut Scenario, canary: &str, what: &str) -> Writes {
    let totals = canary_totals(&s.cluster, &s.namespace, canary)
        .await
        .expect("canary totals");
    s.measure(
        what,
        format!(
            "{} acknowledged, {} failed, longest write {} ms",
            totals["acknowledged"], totals["failed"], totals["longest_wait_ms"]
        ),
    );
    let through = totals["acknowledged_through"].as_u64().unwrap_or(0);
    let stored = count_prefix(
        &s.cluster,
        &s.namespace,
        &format!("{}-0", canary.trim_end_matches("-canary")),
        "canary/",
    )
    .await;
    assert!(stored >= through, "{through} acknowledged, {stored} stored");
    Writes {
        failed: totals["failed"].as_u64().unwrap_or(u64::MAX),
        longest_ms: totals["longest_wait_ms"].as_u64().unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_count_new_incarnations_and_container_restarts() {
        let mut seen = PodIncarnations::default();
        seen.record("e-0", "a", 0);
        seen.record("e-0", "a", 0);
        seen.record("e-1", "b", 0);
        assert_eq!(seen.restarts("e-0"), 0);
        seen.record("e-0", "c", 0);
        assert_eq!(seen.restarts("e-0"), 1, "recreated once");
        seen.record("e-1", "b", 2);
        seen.record("e-1", "b", 1);
        assert_eq!(
            seen.restarts("e-1"),
            2,
            "crashed twice, counts never go down"
        );
        assert_eq!(seen.summary(), "e-0=1 e-1=2");
    }

    #[test]
    fn member_list_json_of_etcdctl_parses() {
        let text = r#"{"header":{"cluster_id":1,"member_id":2,"raft_term":3},"members":[
            {"ID":17093437512327411346,"name":"e-0","peerURLs":["https://e-0.e-peer.ns.svc:2380"],"clientURLs":["http://e-0.e-peer.ns.svc:2379"]},
            {"ID":42,"peerURLs":["https://e-1.e-peer.ns.svc:2380"],"isLearner":true}]}"#;
        #[derive(Deserialize)]
        struct List {
            members: Vec<ListedMember>,
        }
        let list: List = serde_json::from_str(text).unwrap();
        assert_eq!(list.members[0].id, 17093437512327411346);
        assert!(!list.members[0].is_learner);
        assert_eq!(list.members[1].name, "");
        assert!(list.members[1].is_learner);
    }
}
