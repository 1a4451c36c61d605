//! Scenario 13: every node drained in turn, as a cluster upgrade does, under the canary.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use quorate_api::Etcd;
use quorate_e2e::cluster::Cluster;
use quorate_e2e::members::{
    canary_totals, count_prefix, member_list, names_and_ids, uid_of, wait_fully_ready,
};
use quorate_e2e::nodes::{UncordonOnDrop, drain, node_of, schedulable_nodes, uncordon};
use quorate_e2e::{E2eEnv, Scenario, condition_status, status_summary, wait_for};

use crate::READY_TIMEOUT;

/// How long a drain may take: an eviction the budget allows, the pod's graceful stop.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);

/// Whether pod `name` exists as a new incarnation (not `old`) that the scheduler could not
/// place (`PodScheduled=False`, reason `Unschedulable`).
async fn replaced_and_unschedulable(pods: &Api<Pod>, name: &str, old: &Option<String>) -> bool {
    let Ok(Some(pod)) = pods.get_opt(name).await else {
        return false;
    };
    pod.metadata.uid != *old
        && pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
}

/// Whether pod `p` is Ready.
fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Three members, one per node on node-bound volumes, with backups; a canary writes through
/// the client Service. Each node in turn is drained (`kubectl drain`, as before a node's
/// upgrade) and uncordoned: the member on it is evicted, its replacement waits for the node
/// that holds its volume, and comes back on it with its data as the same member. While one
/// member is away, draining a second node is refused by the PodDisruptionBudget (the member
/// there keeps running). The canary sees zero failed writes and every acknowledged write is
/// there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13_every_node_drained_in_turn_without_failed_writes() {
    let Some(env) =
        E2eEnv::from_env_or_skip("s13_every_node_drained_in_turn_without_failed_writes")
    else {
        return;
    };
    let nodes = schedulable_nodes(&Cluster::connect(&env).await).await;
    if nodes.len() < 3 {
        // The node kit has three; another cluster may have fewer.
        eprintln!(
            "SKIPPED s13 (drain): the cluster has {} schedulable node(s), the scenario needs 3",
            nodes.len()
        );
        return;
    }
    let mut s = Scenario::start(&env, "s13-drain").await;
    let ns = s.namespace.clone();
    let name = "etcd-drain";
    let canary = s.create_one_per_node_under_a_canary(name).await;

    let _uncordon = UncordonOnDrop::new(&s.cluster, nodes.clone());
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    let members: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    let mut member_on = Vec::new();
    for node in &nodes[..3] {
        let mut here = Vec::new();
        for m in &members {
            if node_of(&pods, m).await.as_deref() == Some(node.as_str()) {
                here.push(m.clone());
            }
        }
        assert_eq!(
            here.len(),
            1,
            "one member per node expected on {node}: {here:?}"
        );
        member_on.push((node.clone(), here.remove(0)));
    }
    let ids_before = member_list(&s.cluster, &ns, &members[0])
        .await
        .expect("member list");

    for (turn, (node, member)) in member_on.iter().enumerate() {
        let old = uid_of(&pods, member).await;
        let t = Instant::now();
        drain(&s.cluster, node, DRAIN_TIMEOUT).await.ok();
        wait_for(
            &format!("{member} evicted, its replacement waiting for {node}"),
            READY_TIMEOUT,
            Duration::from_millis(500),
            || async {
                if replaced_and_unschedulable(&pods, member, &old).await {
                    Ok(())
                } else {
                    Err(format!("{member} on {:?}", node_of(&pods, member).await))
                }
            },
        )
        .await;
        // The status tells the truth at once: the member's pod waits, so the member is not
        // ready however fresh its lease (druid's lease rules alone would say Ready for a minute).
        wait_for(
            &format!("the status to say {member} is stopped"),
            Duration::from_secs(30),
            Duration::from_millis(500),
            || async {
                let etcd = etcds.get(name).await.map_err(|e| e.to_string())?;
                let stopped = etcd.status.as_ref().is_some_and(|st| {
                    st.members
                        .iter()
                        .any(|m| &m.name == member && m.reason == "MemberStopped")
                });
                if stopped && condition_status(etcd.status.as_ref(), "AllMembersReady") == "False" {
                    Ok(())
                } else {
                    Err(status_summary(&etcd))
                }
            },
        )
        .await;
        if turn == 0 {
            // One member is away: the budget lets no second one go.
            let (other_node, other_member) = &member_on[1];
            let other = uid_of(&pods, other_member).await;
            let refused = drain(&s.cluster, other_node, Duration::from_secs(15)).await;
            uncordon(&s.cluster, other_node).await;
            assert!(
                !refused.success,
                "draining {other_node} while {member} is away succeeded:\n{}{}",
                refused.stdout, refused.stderr
            );
            assert!(
                refused.stderr.contains("disruption budget"),
                "the drain of {other_node} failed for another reason than the budget:\n{}",
                refused.stderr
            );
            assert_eq!(
                uid_of(&pods, other_member).await,
                other,
                "{other_member} was evicted while {member} was away"
            );
            s.measure(
                "second drain while a member is away",
                "refused by the PodDisruptionBudget",
            );
        }
        uncordon(&s.cluster, node).await;
        wait_for(
            &format!("{member} ready again"),
            READY_TIMEOUT,
            Duration::from_millis(500),
            || async {
                match pods.get_opt(member).await {
                    Ok(Some(p)) if pod_ready(&p) => Ok(p.spec.and_then(|s| s.node_name)),
                    other => Err(format!("{:?}", other.map(|p| p.and_then(|p| p.status)))),
                }
            },
        )
        .await
        .filter(|on| on == node)
        .unwrap_or_else(|| {
            panic!("{member} came back on another node than {node}, which holds its volume")
        });
        wait_fully_ready(&s.cluster, &ns, name, 3, true, READY_TIMEOUT).await;
        s.measure(
            &format!("drain + uncordon {node} → Ready"),
            format!("{:.1} s", t.elapsed().as_secs_f64()),
        );
    }
    let ids_after = member_list(&s.cluster, &ns, &members[0])
        .await
        .expect("member list");
    assert_eq!(
        names_and_ids(&ids_after),
        names_and_ids(&ids_before),
        "every member came back with its data as the same member"
    );

    // The drains evicted the operator too: it runs again before the next scenario.
    s.cluster
        .kubectl(&[
            "-n",
            "quorate-system",
            "rollout",
            "status",
            "deployment/quorate-operator",
            "--timeout=120s",
        ])
        .await
        .ok();
    let totals = canary_totals(&s.cluster, &ns, &canary)
        .await
        .expect("canary totals");
    s.writer_held(&totals, 5000);
    let through = totals["acknowledged_through"].as_u64().unwrap_or(0);
    for m in &members {
        let stored = count_prefix(&s.cluster, &ns, m, "canary/").await;
        assert!(
            stored >= through,
            "{through} writes were acknowledged but {m} holds {stored}"
        );
    }
    s.pass().await;
}
