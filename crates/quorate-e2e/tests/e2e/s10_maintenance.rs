//! Scenario 10: maintenance of a running cluster under `quorate canary --write-timeout 5s`:
//! druid's `EtcdOpsTask` takes an on-demand full snapshot through the agents, a scheduled
//! defragmentation round goes through every member (followers first, the leader last after a
//! handover, never two at once) and so does one asked for with `quorate.io/defragment`, each
//! member's defragmentation is an event, and druid's `EtcdCopyBackupsTask` copies the bucket
//! with a Job running `quorate backups copy`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use quorate_api::tasks::{EtcdCopyBackupsTask, EtcdOpsTask, TaskState};
use quorate_e2e::manifests::canary_pod;
use quorate_e2e::members::{canary_totals, wait_canary_writing};
use quorate_e2e::{E2eEnv, Scenario, wait_for};
use serde_json::Value;

/// Snapshot file names (`Full-…`, `Incr-…`) in a `Local` bucket directory.
fn snapshots(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("Full-") || n.starts_with("Incr-"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Each member lease's `quorate.io/defragmentation` record and whether it leads.
async fn defrag_records(leases: &Api<Lease>, name: &str) -> BTreeMap<String, (Value, bool)> {
    let mut records = BTreeMap::new();
    for i in 0..3 {
        let lease_name = format!("{name}-{i}");
        let Ok(Some(lease)) = leases.get_opt(&lease_name).await else {
            continue;
        };
        let record = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("quorate.io/defragmentation"))
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or(Value::Null);
        let leads = lease
            .spec
            .and_then(|s| s.holder_identity)
            .is_some_and(|h| h.ends_with(":Leader"));
        records.insert(lease_name, (record, leads));
    }
    records
}

/// Waits for a round with `reason` newer than `after` that every member is through, and checks
/// its order; returns the round's number.
async fn wait_round(leases: &Api<Lease>, name: &str, reason: &str, after: u64) -> u64 {
    let (round, records) = wait_for(
        &format!("a {reason} defragmentation round through every member"),
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            let records = defrag_records(leases, name).await;
            let round = records
                .values()
                .filter_map(|(r, _)| {
                    r["round"]["id"]
                        .as_u64()
                        .map(|id| (id, r["round"]["reason"].clone()))
                })
                .max_by_key(|(id, _)| *id);
            let Some((id, why)) = round
                .clone()
                .filter(|(id, why)| *id > after && why == reason)
            else {
                return Err(format!("newest round {round:?}"));
            };
            let through = records
                .values()
                .filter(|(r, _)| r["last"]["round"].as_u64() >= Some(id))
                .count();
            if records.len() == 3 && through == 3 {
                Ok((id, records))
            } else {
                Err(format!(
                    "round {id} ({why}): {through} of 3 members through"
                ))
            }
        },
    )
    .await;
    // Every member defragmented, none failed, never two at once, the last one not leading
    // (the leader handed over before its turn).
    let mut spans: Vec<(String, i64, i64, bool)> = records
        .iter()
        .map(|(member, (r, leads))| {
            let last = &r["last"];
            assert_eq!(last["round"].as_u64(), Some(round), "{member}: {last}");
            assert!(last.get("error").is_none(), "{member} failed: {last}");
            assert!(
                last.get("skipped").is_none(),
                "{member} skipped in a {reason} round: {last}"
            );
            let end: jiff::Timestamp = last["at"].as_str().unwrap().parse().unwrap();
            let end = end.as_millisecond();
            let millis = last["millis"].as_i64().unwrap_or(0);
            (member.clone(), end - millis, end, *leads)
        })
        .collect();
    spans.sort_by_key(|s| s.2);
    for pair in spans.windows(2) {
        assert!(
            pair[0].2 <= pair[1].1 + 50,
            "two members defragmented at once: {spans:?}"
        );
    }
    let (last_member, .., leads_now) = spans.last().unwrap();
    assert!(
        !leads_now,
        "{last_member} was defragmented last but leads: {spans:?}"
    );
    round
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10_tasks_and_defragmentation_under_a_canary() {
    let Some(env) = E2eEnv::from_env_or_skip("s10_tasks_and_defragmentation_under_a_canary") else {
        return;
    };
    let mut s = Scenario::start(&env, "s10-maintenance").await;
    let ns = s.namespace.clone();
    let name = "etcd-maint";
    s.create_ready_etcd(name, 3, true).await;
    s.cluster
        .apply(&canary_pod(&env.image, name, &ns, "5s"))
        .await;
    let canary = format!("{name}-canary");
    wait_canary_writing(&s.cluster, &ns, &canary).await;
    let bucket = s.bucket_dir().join("backups").join(name).join("v2");
    let local = env.node_is_local();

    // 1. druid's on-demand full snapshot task.
    let started = Instant::now();
    s.cluster
        .apply(&format!(
            "apiVersion: druid.gardener.cloud/v1alpha1\nkind: EtcdOpsTask\nmetadata:\n  name: full-now\n  namespace: {ns}\n\
             spec:\n  etcdName: {name}\n  config:\n    onDemandSnapshot:\n      type: full\n"
        ))
        .await;
    let tasks: Api<EtcdOpsTask> = Api::namespaced(s.cluster.client.clone(), &ns);
    let done = wait_for(
        "the EtcdOpsTask Succeeded",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            let task = tasks.get("full-now").await.map_err(|e| e.to_string())?;
            let status = task.status.clone().unwrap_or_default();
            match status.state {
                Some(TaskState::Succeeded) => Ok(status),
                Some(TaskState::Failed | TaskState::Rejected) => {
                    panic!("the task ended {status:?}")
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    s.measure(
        "EtcdOpsTask full snapshot",
        format!("{:.1} s", started.elapsed().as_secs_f64()),
    );
    let said = done
        .last_operation
        .map(|o| o.description)
        .unwrap_or_default();
    let object = said
        .split_whitespace()
        .find(|w| w.contains("/v2/Full-"))
        .unwrap_or_else(|| panic!("no snapshot named: {said}"));
    if local {
        let file = object.rsplit('/').next().unwrap();
        assert!(
            snapshots(&bucket).iter().any(|n| n == file),
            "{file} not in {}",
            bucket.display()
        );
    }

    // 2. A scheduled round: every minute from now on (the schedule reaches the agents through
    // the ConfigMap; no pod is replaced).
    let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), &ns);
    let before = defrag_records(&leases, name)
        .await
        .values()
        .filter_map(|(r, _)| r["round"]["id"].as_u64())
        .max()
        .unwrap_or(0);
    let started = Instant::now();
    s.cluster
        .kubectl(&["-n", &ns, "patch", "etcd", name, "--type=merge", "-p",
            r#"{"metadata":{"annotations":{"gardener.cloud/operation":"reconcile"}},"spec":{"etcd":{"defragmentationSchedule":"*/1 * * * *"}}}"#])
        .await
        .ok();
    let scheduled = wait_round(&leases, name, "schedule", before).await;
    s.measure(
        "scheduled defragmentation round",
        format!(
            "{:.1} s after the schedule was set",
            started.elapsed().as_secs_f64()
        ),
    );

    // 3. One asked for with the annotation.
    let started = Instant::now();
    s.cluster
        .kubectl(&[
            "-n",
            &ns,
            "annotate",
            "etcd",
            name,
            "--overwrite",
            "quorate.io/defragment=e2e-1",
            "gardener.cloud/operation=reconcile",
        ])
        .await
        .ok();
    wait_round(&leases, name, "onDemand", scheduled).await;
    s.measure(
        "requested defragmentation round",
        format!("{:.1} s", started.elapsed().as_secs_f64()),
    );

    // Each member's defragmentation is an event on the Etcd.
    let events: Api<Event> = Api::namespaced(s.cluster.client.clone(), &ns);
    wait_for(
        "Defragmented events for every member",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            let listed = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let mut members: Vec<String> = listed
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("Defragmented"))
                .filter_map(|e| e.related.as_ref()?.name.clone())
                .collect();
            members.sort();
            members.dedup();
            if members.len() == 3 {
                Ok(())
            } else {
                Err(format!("events for {members:?}"))
            }
        },
    )
    .await;

    let totals = canary_totals(&s.cluster, &ns, &canary)
        .await
        .expect("canary totals");
    s.writer_held(&totals, 5000);

    // 4. druid's copy task: a Job copies the bucket into another container.
    let started = Instant::now();
    s.cluster
        .apply(&format!(
            "apiVersion: druid.gardener.cloud/v1alpha1\nkind: EtcdCopyBackupsTask\nmetadata:\n  name: copy\n  namespace: {ns}\n\
             spec:\n  sourceStore:\n    provider: Local\n    container: backups\n    prefix: {name}\n    secretRef: {{name: {name}-backup}}\n\
             \x20 targetStore:\n    provider: Local\n    container: copied\n    prefix: {name}\n    secretRef: {{name: {name}-backup}}\n"
        ))
        .await;
    let copies: Api<EtcdCopyBackupsTask> = Api::namespaced(s.cluster.client.clone(), &ns);
    wait_for(
        "the EtcdCopyBackupsTask Succeeded",
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            let task = copies.get("copy").await.map_err(|e| e.to_string())?;
            let status = task.status.clone().unwrap_or_default();
            let conditions = status.conditions.clone().unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Failed" && c.status == quorate_api::ConditionStatus::True)
            {
                panic!("the copy failed: {status:?}");
            }
            if conditions
                .iter()
                .any(|c| c.type_ == "Succeeded" && c.status == quorate_api::ConditionStatus::True)
            {
                Ok(())
            } else {
                Err(format!("{status:?}"))
            }
        },
    )
    .await;
    s.measure(
        "EtcdCopyBackupsTask",
        format!("{:.1} s", started.elapsed().as_secs_f64()),
    );
    if local {
        let copied = snapshots(&s.bucket_dir().join("copied").join(name).join("v2"));
        let file = object.rsplit('/').next().unwrap();
        assert!(
            copied.iter().any(|n| n == file),
            "the on-demand snapshot {file} was not copied: {copied:?}"
        );
    }
    s.pass().await;
}
