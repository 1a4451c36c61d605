//! Local mode with backups: real etcd members backing up to a real store, then losing
//! everything and coming back from the bucket.

mod support;

use etcd_client::Client;
use std::time::Duration;
use support::{
    Local, condition, copy_dir, dump, eventually, manifest, path_str, put_keys, runtime,
};

/// Backups to the Local provider, a delta every second, a full snapshot every minute.
fn with_backups(name: &str, replicas: u32) -> String {
    manifest(name, replicas, "").replace(
        "  backup: {}\n",
        "  backup:\n    store:\n      provider: Local\n      container: bucket\n      prefix: main\n    \
         deltaSnapshotPeriod: 1s\n    fullSnapshotSchedule: \"*/1 * * * *\"\n    garbageCollectionPeriod: 10s\n",
    )
}

#[test]
fn backups_run_and_a_total_loss_is_recovered_from_the_bucket() {
    let local = Local::new();
    total_loss_recovery(&local, "vault", &with_backups("vault", 3));
}

#[test]
fn a_total_loss_is_recovered_from_an_s3_bucket() {
    let Some(moto) = quorate_testkit::MotoServer::start("quorate-backups") else {
        return;
    };
    let local = Local::new();
    let store = format!(
        "  backup:\n    store:\n      provider: aws\n      container: {}\n      prefix: main\n      \
         endpointOverride: {}\n      secretRef:\n        name: s3-creds\n    deltaSnapshotPeriod: 1s\n",
        moto.bucket, moto.endpoint
    );
    local.s3_secret("cloud");
    total_loss_recovery(
        &local,
        "cloud",
        &manifest("cloud", 3, "").replace("  backup: {}\n", &store),
    );
}

#[test]
fn an_encrypted_bucket_holds_no_clear_object_and_a_total_loss_is_recovered() {
    let local = Local::new();
    let name = "sealed";
    let text = with_backups(name, 3).replace(
        "  namespace: default\n",
        "  namespace: default\n  annotations:\n    quorate.io/backup-encryption-secret: backup-keys\n",
    );
    let path = local.manifest("sealed.yaml", &text);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    // No key Secret yet: nothing is written (never in clear), and BackupReady says why.
    let (_, message) = eventually(
        "BackupReady False naming the key Secret",
        Duration::from_secs(60),
        || {
            condition(&local, name, "BackupReady")
                .filter(|c| c.0 == "False" && c.1.contains("backup-keys"))
        },
    );
    assert!(message.contains("encryption"), "{message}");
    let bucket = local.cluster_dir(name).join("backups/bucket");
    let objects = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let v2 = dir.join("main/v2");
        std::fs::read_dir(&v2)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    };
    assert!(objects(&bucket).is_empty(), "{:?}", objects(&bucket));
    let keys = local.cluster_dir(name).join("secrets/backup-keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("k1"), "5".repeat(64)).unwrap();
    std::fs::write(keys.join("active"), "k1").unwrap();
    eventually("BackupReady to turn True", Duration::from_secs(60), || {
        (condition(&local, name, "BackupReady")?.0 == "True").then_some(())
    });
    recover_after_total_loss(&local, name, &path);
    let stored = objects(&bucket);
    assert!(stored.len() >= 2, "{stored:?}");
    for object in stored {
        let file = object.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            file.ends_with(".gz.enc") || file.ends_with(".gz.enc.final"),
            "{file}"
        );
        assert!(
            std::fs::read(&object).unwrap().starts_with(b"QRTENC"),
            "{file}"
        );
    }
}

/// Backs up a 3-member cluster, loses every process and data directory, brings it back with
/// `quorate up` and checks that every write is back at its original revision.
fn total_loss_recovery(local: &Local, name: &str, text: &str) {
    let path = local.manifest(&format!("{name}.yaml"), text);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("BackupReady to turn True", Duration::from_secs(60), || {
        (condition(local, name, "BackupReady")?.0 == "True").then_some(())
    });
    recover_after_total_loss(local, name, &path);
}

/// Writes to a backed-up cluster, kills every member and wipes their data, brings the cluster
/// back with `quorate up -f path` and checks every write is back at its original revision.
fn recover_after_total_loss(local: &Local, name: &str, path: &std::path::Path) {
    let rt = runtime();
    let endpoints = local.endpoints(name);
    let last = rt.block_on(async {
        let mut client = Client::connect(endpoints.clone(), None).await.unwrap();
        let mut last = 0;
        for i in 0..200 {
            last = client
                .put(format!("k/{i:04}"), format!("v{i}"), None)
                .await
                .unwrap()
                .header()
                .unwrap()
                .revision();
            if i % 50 == 0 {
                client
                    .delete(format!("k/{:04}", i / 2), None)
                    .await
                    .unwrap();
            }
        }
        last
    });
    let before = rt.block_on(dump(&endpoints[0], "k/"));
    // Every write is in the bucket (the newest delta reaches the last one) before the loss.
    eventually(
        "the bucket holds every write",
        Duration::from_secs(60),
        || (local.newest_backup(name) >= last).then_some(()),
    );
    let listing = local.ok(&["backups", "list", name]);
    assert!(
        listing.contains("Full") && listing.contains("Incr"),
        "{listing}"
    );

    // Total loss: every process killed, every data directory wiped.
    local.kill_cluster(name);
    for i in 0..3 {
        std::fs::remove_dir_all(
            local
                .cluster_dir(name)
                .join(format!("members/{name}-{i}/data")),
        )
        .unwrap();
    }
    local.ok(&["up", "-d", "-f", path_str(path), "--timeout", "120s"]);
    for url in &local.endpoints(name) {
        let after = rt.block_on(async {
            for _ in 0..50 {
                let got = dump(url, "k/").await;
                if got.len() == before.len() {
                    return got;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            dump(url, "k/").await
        });
        assert_eq!(
            after, before,
            "member {url} holds every write at its original revision"
        );
    }
}

#[test]
fn restore_to_a_revision_gives_the_exact_earlier_state() {
    let local = Local::new();
    // Keep every delta (BR deletes deltas older than the newest full snapshot unless a
    // retention is set) and take no scheduled full snapshot during the test.
    let text = with_backups("pit", 1)
        .replace("\"*/1 * * * *\"", "\"0 0 1 1 *\"")
        .replace(
            "    garbageCollectionPeriod: 10s\n",
            "    garbageCollectionPeriod: 10s\n    deltaSnapshotRetentionPeriod: 1h\n",
        );
    let path = local.manifest("c.yaml", &text);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("the first full snapshot", Duration::from_secs(60), || {
        (condition(&local, "pit", "BackupReady")?.0 == "True").then_some(())
    });
    let rt = runtime();
    let endpoint = local.endpoints("pit")[0].clone();
    let (middle, at_middle, last) = rt.block_on(async {
        let mut client = Client::connect([endpoint.as_str()], None).await.unwrap();
        for i in 0..50 {
            client
                .put(format!("k/{i:02}"), "first", None)
                .await
                .unwrap();
        }
        let middle = client
            .put("k/marker", "x", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
        let at_middle = dump(&endpoint, "k/").await;
        for i in 0..50 {
            client
                .put(format!("k/{i:02}"), "second", None)
                .await
                .unwrap();
        }
        let last = client
            .delete("k/marker", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
        (middle, at_middle, last)
    });
    // The bucket reaches the last write, and the backup leader recorded etcd's hash there.
    let hash_record = |revision: i64| {
        local
            .cluster_dir("pit")
            .join(format!("backups/bucket/main.hashkv/{revision:020}"))
    };
    let newest = eventually(
        "the bucket to hold every write, with etcd's hash at its newest revision",
        Duration::from_secs(60),
        || {
            let newest = local.newest_backup("pit");
            (newest >= last && hash_record(newest).is_file()).then_some(newest)
        },
    );
    let target = local.state.path().join("restored");
    let out = local.ok(&[
        "restore",
        "-f",
        path_str(&path),
        "--data-dir",
        path_str(&target),
        "--to-revision",
        &middle.to_string(),
    ]);
    // The bucket holds newer revisions: the restored revision is raised past them.
    assert!(
        out.contains(&format!("restored revision {middle} "))
            && out.contains("raised the revision by"),
        "{out}"
    );

    let check = local.state.path().join("check");
    std::fs::create_dir_all(&check).unwrap();
    let mut config = quorate_testkit::EtcdMemberConfig::new("pit-0", &check);
    config.data_dir = target.clone();
    // The data was restored for the version the manifest's cluster runs (3.6, the default).
    config.binary = Some(
        quorate_etcd::binaries::EtcdBinaries::default()
            .etcd(quorate_api::EtcdVersion::V3_6)
            .expect("etcd 3.6 (scripts/install-etcd.sh)"),
    );
    let member = rt
        .block_on(quorate_testkit::EtcdProcess::start_ready(
            config,
            Duration::from_secs(30),
        ))
        .unwrap();
    let restored = rt.block_on(dump(&member.client_url(), "k/"));
    assert_eq!(
        restored, at_middle,
        "the state right after revision {middle}"
    );
    let head = rt.block_on(async {
        let mut client = Client::connect([member.client_url()], None).await.unwrap();
        client.status().await.unwrap().header().unwrap().revision()
    });
    assert!(head > middle + 1_000_000_000, "revision {head}");

    // The newest revision: checked against etcd's hash recorded at backup time.
    let latest = local.state.path().join("restored-latest");
    let out = local.ok(&[
        "restore",
        "-f",
        path_str(&path),
        "--data-dir",
        path_str(&latest),
    ]);
    assert!(
        out.contains(&format!(
            "verified: the key space at revision {newest} hashes to"
        )),
        "{out}"
    );
    // A record that disagrees fails the restore and changes nothing; --no-verify overrides.
    let record = std::fs::read_to_string(hash_record(newest)).unwrap();
    let mut wrong: serde_json::Value = serde_json::from_str(&record).unwrap();
    wrong["hash"] = (wrong["hash"].as_u64().unwrap() ^ 1).into();
    std::fs::write(hash_record(newest), wrong.to_string()).unwrap();
    let refused = local.state.path().join("refused");
    let out = local.quorate(&[
        "restore",
        "-f",
        path_str(&path),
        "--data-dir",
        path_str(&refused),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("the restored key space at revision {newest}")),
        "{err}"
    );
    assert!(!refused.join("member").exists(), "nothing was restored");
    let out = local.ok(&[
        "restore",
        "-f",
        path_str(&path),
        "--data-dir",
        path_str(&refused),
        "--no-verify",
    ]);
    assert!(
        out.contains("not verified: verification was turned off"),
        "{out}"
    );
}

#[test]
fn an_unreachable_store_sets_backup_ready_false_while_etcd_serves() {
    let local = Local::new();
    let text = manifest("dark", 1, "").replace(
        "  backup: {}\n",
        "  backup:\n    store:\n      provider: aws\n      container: nowhere\n      prefix: main\n      \
         endpointOverride: http://127.0.0.1:9\n      secretRef:\n        name: s3-creds\n    deltaSnapshotPeriod: 1s\n",
    );
    let path = local.manifest("c.yaml", &text);
    local.s3_secret("dark");
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let (status, message) =
        eventually("BackupReady to turn False", Duration::from_secs(60), || {
            condition(&local, "dark", "BackupReady").filter(|(s, _)| s == "False")
        });
    assert_eq!(status, "False");
    assert!(
        message.contains("127.0.0.1:9") || message.to_lowercase().contains("connect"),
        "{message}"
    );
    let rt = runtime();
    let endpoint = local.endpoints("dark")[0].clone();
    rt.block_on(async {
        let mut client = Client::connect([endpoint.as_str()], None).await.unwrap();
        client.put("still", "serving", None).await.unwrap();
    });
}

#[test]
fn a_bucket_claimed_by_another_cluster_is_refused_unless_adopted() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("claim", 1));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("BackupReady to turn True", Duration::from_secs(60), || {
        (condition(&local, "claim", "BackupReady")?.0 == "True").then_some(())
    });
    let owner = local.cluster_dir("claim").join("backups/bucket/main.owner");
    assert!(owner.is_file(), "the prefix is claimed for this cluster");
    local.ok(&["down", "claim"]);
    std::fs::write(&owner, "another-cluster-uid").unwrap();
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let (_, message) = eventually(
        "BackupReady to turn False for the foreign bucket",
        Duration::from_secs(60),
        || {
            condition(&local, "claim", "BackupReady")
                .filter(|(s, m)| s == "False" && m.contains("another cluster"))
        },
    );
    assert!(
        message.contains("another cluster") && message.contains("quorate.io/adopt-backups"),
        "{message}"
    );

    let adopted = with_backups("claim", 1).replace(
        "  namespace: default\n",
        "  namespace: default\n  annotations:\n    quorate.io/adopt-backups: \"true\"\n",
    );
    local.manifest("c.yaml", &adopted);
    local.ok(&["apply", "-f", path_str(&path)]);
    eventually(
        "BackupReady to turn True after adopting",
        Duration::from_secs(60),
        || (condition(&local, "claim", "BackupReady")?.0 == "True").then_some(()),
    );
    assert_ne!(
        std::fs::read_to_string(&owner).unwrap(),
        "another-cluster-uid",
        "the prefix was taken over"
    );
}

/// `GET path` on an agent with `token`: the status code and the JSON object of the body.
fn http_get(port: u16, path: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let (code, body) = support::http_get_as(port, path, token);
    (
        code,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn any_member_takes_an_on_demand_snapshot_and_backups_resume_without_a_gap() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("demand", 3));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("BackupReady to turn True", Duration::from_secs(60), || {
        (condition(&local, "demand", "BackupReady")?.0 == "True").then_some(())
    });
    let leader = local.ok(&["members", "demand"]);
    let follower = (0..3)
        .find(|i| {
            leader.lines().any(|l| {
                l.contains(&format!("demand-{i} ")) && l.split_whitespace().nth(4) == Some("false")
            })
        })
        .unwrap();
    let port = local.agent_port("demand", follower);
    // Taking snapshots needs the cluster's token; without it, or with another, it is refused
    // and counted.
    for token in [None, Some("0123456789abcdef")] {
        let (code, refused) = http_get(port, "/snapshot/full", token);
        assert_eq!(code, 401, "{token:?}: {refused}");
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .contains("demand-agent-token"),
            "{refused}"
        );
    }
    let refusals = support::metric(
        &local.agent_metrics("demand", follower),
        "quorate_agent_requests_refused_total{path=\"/snapshot/full\"}",
    );
    assert_eq!(refusals, Some(2.0));
    let token = local.agent_token("demand");
    let token = Some(token.as_str());
    let (code, full) = http_get(port, "/snapshot/full", token);
    assert_eq!(code, 200, "{full}");
    assert_eq!(full["kind"], "Full", "{full}");
    let (code, latest) = http_get(port, "/snapshot/latest", None);
    assert_eq!(code, 200);
    assert_eq!(latest["fullSnapshot"]["path"], full["path"], "{latest}");

    // Requests for a full snapshot while one is under way join it: one snapshot, one answer
    // for all. 30 MB of data make the snapshot take long enough for the requests to meet.
    runtime().block_on(async {
        let mut client = etcd_client::Client::connect(local.endpoints("demand"), None)
            .await
            .unwrap();
        let value = vec![b'x'; 100 * 1024];
        for i in 0..300 {
            client
                .put(format!("big/{i:03}"), value.clone(), None)
                .await
                .unwrap();
        }
    });
    let concurrent: Vec<(u16, serde_json::Value)> = std::thread::scope(|scope| {
        let asks: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| http_get(port, "/snapshot/full", token)))
            .collect();
        asks.into_iter().map(|a| a.join().unwrap()).collect()
    });
    for (code, answer) in &concurrent {
        assert_eq!(*code, 200, "{answer}");
        assert_eq!(
            answer["path"], concurrent[0].1["path"],
            "one snapshot for all: {concurrent:?}"
        );
    }
    assert_ne!(concurrent[0].1["path"], full["path"]);

    // The bucket becomes unusable for a while (a file where its directory was); writes go on;
    // then it comes back.
    let bucket = local.cluster_dir("demand").join("backups/bucket");
    let hidden = local.cluster_dir("demand").join("backups/bucket.away");
    std::fs::rename(&bucket, &hidden).unwrap();
    std::fs::write(&bucket, b"not a bucket").unwrap();
    let rt = runtime();
    let endpoints = local.endpoints("demand");
    let last_write = rt.block_on(put_keys(&endpoints, "k/", 100));
    eventually(
        "BackupReady to turn False during the outage",
        Duration::from_secs(60),
        || condition(&local, "demand", "BackupReady").filter(|(s, _)| s == "False"),
    );
    std::fs::remove_file(&bucket).unwrap();
    std::fs::rename(&hidden, &bucket).unwrap();
    eventually(
        "BackupReady to turn True again",
        Duration::from_secs(60),
        || (condition(&local, "demand", "BackupReady")?.0 == "True").then_some(()),
    );
    // The chain from the newest full snapshot reaches every write, with no gap.
    let chain_head = || {
        let listing = local.ok(&["backups", "list", "demand"]);
        let rows = snapshot_rows(&listing);
        let newest_full = rows.iter().rposition(|r| r.0 == "Full").unwrap();
        let mut head = rows[newest_full].2;
        for (kind, start, last, _) in &rows[newest_full + 1..] {
            assert_eq!(kind, "Incr");
            assert!(
                *start <= head + 1,
                "gap before {start}..{last} (head {head}):\n{listing}"
            );
            head = head.max(*last);
        }
        (head, listing)
    };
    let (head, listing) = eventually(
        "the backups to reach the last write",
        Duration::from_secs(30),
        || {
            let (head, listing) = chain_head();
            (head >= last_write).then_some((head, listing))
        },
    );
    assert!(
        head >= last_write,
        "the backups reach revision {last_write}:\n{listing}"
    );
}

#[test]
fn a_lone_member_whose_data_is_older_than_the_backups_is_restored() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("stale", 1));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let rt = runtime();
    let put_all = |prefix: &str| rt.block_on(put_keys(&local.endpoints("stale"), prefix, 30));
    let backed_up_through = |rev: i64| {
        eventually(
            "the backups to reach the writes",
            Duration::from_secs(30),
            || {
                let listing = local.ok(&["backups", "list", "stale"]);
                listing
                    .lines()
                    .skip(2)
                    .filter_map(|l| l.split_whitespace().nth(2)?.parse::<i64>().ok())
                    .any(|last| last >= rev)
                    .then_some(())
            },
        )
    };
    backed_up_through(put_all("a/"));
    let data = local.cluster_dir("stale").join("members/stale-0/data");
    let old = local.state.path().join("old-data");
    local.ok(&["down", "stale"]);
    copy_dir(&data, &old);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let newest = put_all("b/");
    backed_up_through(newest);
    local.ok(&["down", "stale"]);
    std::fs::remove_dir_all(&data).unwrap();
    copy_dir(&old, &data);

    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let endpoint = local.endpoints("stale")[0].clone();
    let keys = rt.block_on(async {
        for _ in 0..100 {
            let got = dump(&endpoint, "b/").await;
            if got.len() == 30 {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        dump(&endpoint, "b/").await
    });
    assert_eq!(
        keys.len(),
        30,
        "the writes after the old copy came back from the bucket"
    );
    assert_eq!(
        keys.last().unwrap().2,
        newest,
        "at their original revisions"
    );
    let aside = std::fs::read_dir(local.cluster_dir("stale").join("members/stale-0"))
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("data.invalid-"));
    assert!(aside, "the old data was moved aside, not deleted");
}

#[test]
fn one_shot_snapshot_of_any_endpoint_is_a_valid_etcd_snapshot() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("shot", 1, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let endpoint = local.endpoints("shot")[0].clone();
    let file = local.state.path().join("shot.db");
    let out = local.ok(&["snapshot", "--endpoint", &endpoint, "-o", path_str(&file)]);
    assert!(out.contains("saved") && out.contains("revision"), "{out}");
    let status = std::process::Command::new(quorate_testkit::etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "status", path_str(&file)])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let dead = local.quorate(&[
        "snapshot",
        "--endpoint",
        "http://127.0.0.1:9",
        "-o",
        path_str(&file),
    ]);
    assert!(!dead.status.success());
    assert!(
        String::from_utf8_lossy(&dead.stderr).contains("127.0.0.1:9"),
        "{}",
        String::from_utf8_lossy(&dead.stderr)
    );
}

#[test]
fn a_new_backup_leader_continues_the_chain_without_gap_or_overlap() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("relay", 3));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("BackupReady to turn True", Duration::from_secs(60), || {
        (condition(&local, "relay", "BackupReady")?.0 == "True").then_some(())
    });
    let rt = runtime();
    let endpoints = local.endpoints("relay");
    rt.block_on(put_keys(&endpoints, "a/", 50));
    // Hand leadership to another member while writes continue.
    let members = local.ok(&["members", "relay"]);
    let follower_id = members
        .lines()
        .skip(1)
        .find(|l| l.split_whitespace().nth(4) == Some("false"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();
    let leader_url = members
        .lines()
        .skip(1)
        .find(|l| l.split_whitespace().nth(4) == Some("true"))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap()
        .to_string();
    let moved = std::process::Command::new(quorate_testkit::etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &leader_url, "move-leader", &follower_id])
        .output()
        .unwrap();
    assert!(
        moved.status.success(),
        "{}",
        String::from_utf8_lossy(&moved.stderr)
    );
    let last = rt.block_on(put_keys(&endpoints, "b/", 50));
    let listing = eventually(
        "the backups to reach the last write",
        Duration::from_secs(30),
        || {
            let listing = local.ok(&["backups", "list", "relay"]);
            let reached = listing
                .lines()
                .skip(2)
                .filter_map(|l| l.split_whitespace().nth(2)?.parse::<i64>().ok())
                .max()?;
            (reached >= last).then_some(listing)
        },
    );
    // Walk the deltas in revision order: each after the first starts right after the delta
    // before it, or right after a full snapshot's revision (a new base), and none overlaps the
    // one before.
    // (The listing's order is by creation time, in whole seconds: a full snapshot taken in the
    // same second as the delta it coincides with may come first.)
    let mut fulls = Vec::new();
    let mut deltas = Vec::new();
    for line in listing.lines().skip(2) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (start, last): (i64, i64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        match f[0] {
            "Full" => fulls.push(last),
            _ => deltas.push((start, last, line)),
        }
    }
    deltas.sort();
    let mut previous: Option<i64> = None;
    for (start, last, line) in deltas {
        assert!(
            previous.is_none() || previous == Some(start - 1) || fulls.contains(&(start - 1)),
            "a gap before {line}:\n{listing}"
        );
        assert!(
            previous.is_none_or(|p| start > p),
            "an overlap before {line}:\n{listing}"
        );
        previous = Some(last);
    }
}

/// A store that drops a delta after it acknowledged (and confirmed) it: the backup leader's
/// audit of the bucket's listing sees the gap in the chain and takes a full snapshot (the
/// cron schedule would not for a year), so a restore reaches the newest revision again.
#[test]
fn a_delta_the_store_dropped_later_is_repaired_with_a_full_snapshot() {
    let local = Local::new();
    let name = "leaky";
    let text = manifest(name, 1, "").replace(
        "  backup: {}\n",
        "  backup:\n    store:\n      provider: Local\n      container: bucket\n      prefix: main\n    \
         deltaSnapshotPeriod: 1s\n    fullSnapshotSchedule: \"0 0 1 1 *\"\n    garbageCollectionPeriod: 2s\n",
    );
    let path = local.manifest("leaky.yaml", &text);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("BackupReady to turn True", Duration::from_secs(60), || {
        (condition(&local, name, "BackupReady")?.0 == "True").then_some(())
    });
    let rt = runtime();
    let endpoints = local.endpoints(name);
    let rows = || snapshot_rows(&local.ok(&["backups", "list", name]));
    // Two deltas at least, each after its own writes.
    for batch in 0..2 {
        let last = rt.block_on(put_keys(&endpoints, &format!("d{batch}/"), 5));
        eventually("a delta with the writes", Duration::from_secs(30), || {
            rows()
                .iter()
                .any(|(kind, _, end, _)| kind == "Incr" && *end >= last)
                .then_some(())
        });
    }
    let listed = rows();
    let (_, _, full_last, _) = listed
        .iter()
        .find(|(kind, ..)| kind == "Full")
        .cloned()
        .expect("a full snapshot");
    let (_, _, dropped_last, dropped) = listed
        .iter()
        .find(|(kind, start, ..)| kind == "Incr" && *start > full_last)
        .cloned()
        .expect("a delta after the full snapshot");
    assert!(
        listed
            .iter()
            .any(|(kind, _, end, _)| kind == "Incr" && *end > dropped_last),
        "the dropped delta is not the newest: {listed:?}"
    );
    let file = local
        .cluster_dir(name)
        .join("backups/bucket")
        .join(&dropped);
    std::fs::remove_file(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let repaired = eventually(
        "a full snapshot after the lost delta",
        Duration::from_secs(60),
        || {
            rows()
                .into_iter()
                .find(|(kind, _, end, _)| kind == "Full" && *end > dropped_last)
        },
    );
    assert!(repaired.2 > full_last, "{repaired:?}");
}

/// (kind, start, last, object) of each snapshot row of a `backups list` output.
fn snapshot_rows(listing: &str) -> Vec<(String, i64, i64, String)> {
    listing
        .lines()
        .skip(2)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.to_string(),
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                f.last()?.to_string(),
            ))
        })
        .collect()
}

/// The object names in a `backups list` output (its OBJECT column), sorted.
fn objects(listing: &str) -> Vec<String> {
    let mut names: Vec<String> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|o| o.contains("/v2/"))
        .map(|o| o.rsplit('/').next().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// `quorate backups copy` (druid's EtcdCopyBackupsTask as a command): a Local bucket copied
/// into another one and into S3, all of it or only the newest backup, then restored from the
/// copy.
#[test]
fn backups_copy_between_buckets_and_the_copy_restores() {
    let local = Local::new();
    // A low events threshold: the deltas past it start a new full snapshot, so the bucket
    // holds more than one backup.
    let text = with_backups("src", 1).replace(
        "    deltaSnapshotPeriod: 1s\n",
        "    deltaSnapshotPeriod: 1s\n    snapshotCompaction:\n      eventsThreshold: 20\n",
    );
    let path = local.manifest("src.yaml", &text);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let endpoints = local.endpoints("src");
    let newest = |objects: &[String]| {
        objects
            .iter()
            .filter_map(|o| o.split('-').nth(2)?.parse::<i64>().ok())
            .max()
    };
    let rt = runtime();
    let first = rt.block_on(put_keys(&endpoints, "a/", 30));
    eventually(
        "the bucket to reach the first writes",
        Duration::from_secs(30),
        || (newest(&objects(&local.ok(&["backups", "list", "src"]))) >= Some(first)).then_some(()),
    );
    let head = rt.block_on(put_keys(&endpoints, "b/", 30));
    eventually(
        "a second full snapshot at the head",
        Duration::from_secs(30),
        || {
            let objects = objects(&local.ok(&["backups", "list", "src"]));
            let fulls = objects.iter().filter(|o| o.starts_with("Full-")).count();
            (fulls >= 2 && newest(&objects) >= Some(head)).then_some(())
        },
    );
    local.ok(&["down", "src"]);
    // What the copy must hold is the bucket once nothing writes to it any more: the frequent
    // full snapshots may add one between the wait above and `down`.
    let source = objects(&local.ok(&["backups", "list", "src"]));
    assert!(source.len() >= 2, "{source:?}");

    let root = local.state.path().join("elsewhere");
    let target = local.manifest(
        "dst.yaml",
        &with_backups("dst", 1).replace("container: bucket", "container: copied"),
    );
    let copy = |extra: &[&str]| {
        let mut args = vec![
            "backups",
            "copy",
            "src",
            "--to",
            path_str(&target),
            "--to-local-root",
            path_str(&root),
        ];
        args.extend_from_slice(extra);
        local.ok(&args)
    };
    let out = copy(&["--max-backups", "1"]);
    let listed = |file: &std::path::Path| {
        objects(&local.ok(&[
            "backups",
            "list",
            "-f",
            path_str(file),
            "--local-root",
            path_str(&root),
        ]))
    };
    let newest = listed(&target);
    assert!(!newest.is_empty() && newest.len() <= source.len(), "{out}");
    assert!(
        newest.iter().filter(|o| o.starts_with("Full-")).count() == 1,
        "{newest:?}"
    );
    copy(&[]);
    assert_eq!(listed(&target), source, "everything, once");
    let again = copy(&[]);
    assert!(again.contains("copying 0 of"), "nothing twice: {again}");

    let restored = local.state.path().join("restored");
    local.ok(&[
        "restore",
        "-f",
        path_str(&target),
        "--local-root",
        path_str(&root),
        "--data-dir",
        path_str(&restored),
    ]);
    assert!(
        restored.join("member").exists(),
        "a data directory was restored"
    );

    // Into S3 too, when moto is installed (CI installs it).
    let Some(moto) = quorate_testkit::MotoServer::start("copied") else {
        return;
    };
    let s3 = local.manifest(
        "s3.yaml",
        &manifest("dst", 1, "").replace(
            "  backup: {}\n",
            &format!(
                "  backup:\n    store:\n      provider: aws\n      container: {}\n      prefix: main\n      \
                 endpointOverride: {}\n      secretRef:\n        name: s3-creds\n",
                moto.bucket, moto.endpoint
            ),
        ),
    );
    local.s3_secret("dst");
    let secrets = local.cluster_dir("dst").join("secrets/s3-creds");
    local.ok(&[
        "backups",
        "copy",
        "src",
        "--to",
        path_str(&s3),
        "--to-secret-dir",
        path_str(&secrets),
    ]);
    let in_s3 = objects(&local.ok(&[
        "backups",
        "list",
        "-f",
        path_str(&s3),
        "--secret-dir",
        path_str(&secrets),
    ]));
    assert_eq!(in_s3, source);

    // The same through druid's EtcdCopyBackupsTask manifest (what the operator's Job runs):
    // from S3 back into another Local container.
    let task = |target_container: &str, target_provider: &str| {
        format!(
            "apiVersion: druid.gardener.cloud/v1alpha1\nkind: EtcdCopyBackupsTask\nmetadata:\n  name: back\n\
             spec:\n  sourceStore:\n    provider: aws\n    container: {}\n    prefix: main\n    \
             endpointOverride: {}\n    secretRef:\n      name: s3-creds\n  targetStore:\n    \
             provider: {target_provider}\n    container: {target_container}\n    prefix: main\n  maxBackups: 1\n",
            moto.bucket, moto.endpoint
        )
    };
    let task_file = local.manifest("task.yaml", &task("fromtask", "Local"));
    local.ok(&[
        "backups",
        "copy",
        "--task",
        path_str(&task_file),
        "--secret-dir",
        path_str(&secrets),
        "--to-local-root",
        path_str(&root),
    ]);
    let from_task = local.manifest(
        "fromtask.yaml",
        &with_backups("dst", 1).replace("container: bucket", "container: fromtask"),
    );
    let copied = listed(&from_task);
    assert_eq!(
        copied.iter().filter(|o| o.starts_with("Full-")).count(),
        1,
        "maxBackups: 1 from the task: {copied:?}"
    );
    assert!(copied.iter().all(|o| source.contains(o)), "{copied:?}");

    // A task copying a bucket onto itself is refused before anything is read, naming the field.
    let same = local.manifest(
        "same.yaml",
        &task("fromtask", "Local").replace(
            "  targetStore:\n    provider: Local\n    container: fromtask\n    prefix: main\n",
            &format!(
                "  targetStore:\n    provider: aws\n    container: {}\n    prefix: main\n    \
                 endpointOverride: {}\n    secretRef:\n      name: s3-creds\n",
                moto.bucket, moto.endpoint
            ),
        ),
    );
    let refused = local.quorate(&[
        "backups",
        "copy",
        "--task",
        path_str(&same),
        "--secret-dir",
        path_str(&secrets),
        "--to-secret-dir",
        path_str(&secrets),
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("spec.targetStore"),
        "{stderr}"
    );
}

/// A `Local` store whose Secret names a `hostPath` keeps its buckets there, e.g. on another
/// disk than the data (druid's way to place `Local` buckets); `down --purge` deletes the state
/// directory, says it kept them, and the cluster comes back from them with `restore --up`.
#[test]
fn a_host_path_bucket_outside_the_state_directory_survives_purge_and_restores() {
    let local = Local::new();
    let disk = tempfile::tempdir().unwrap();
    let text = with_backups("far", 1).replace(
        "      prefix: main\n",
        "      prefix: main\n      secretRef:\n        name: far-disk\n",
    );
    let path = local.manifest("far.yaml", &text);
    let secret = local.cluster_dir("far").join("secrets/far-disk");
    let name_the_disk = || {
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("hostPath"), disk.path().display().to_string()).unwrap();
    };
    name_the_disk();
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let rt = runtime();
    let endpoints = local.endpoints("far");
    let head = rt.block_on(put_keys(&endpoints, "k/", 20));
    let newest = |listing: &str| {
        objects(listing)
            .iter()
            .filter_map(|o| o.split('-').nth(2)?.parse::<i64>().ok())
            .max()
    };
    eventually(
        "the bucket to reach the last write",
        Duration::from_secs(30),
        || (newest(&local.ok(&["backups", "list", "far"])) >= Some(head)).then_some(()),
    );
    assert!(
        disk.path().join("bucket/main").is_dir(),
        "the bucket is on the other disk"
    );
    assert!(
        !local.cluster_dir("far").join("backups").exists(),
        "nothing in the state directory"
    );

    let out = local.ok(&["down", "far", "--purge"]);
    assert!(
        !local.cluster_dir("far").exists(),
        "the state directory is gone"
    );
    assert!(
        out.contains("were kept") && out.contains(&disk.path().display().to_string()),
        "{out}"
    );
    name_the_disk();
    assert!(
        newest(&local.ok(&["backups", "list", "-f", path_str(&path)])) >= Some(head),
        "the backups are still there"
    );
    local.ok(&["restore", "-f", path_str(&path), "--up"]);
    let keys = rt.block_on(dump(&local.endpoints("far")[0], "k/"));
    assert_eq!(keys.len(), 20, "every key is back: {keys:?}");
}

/// A fresh local cluster's state (manifest, records, logs, TLS keys, etcd's data and the
/// `Full-*.gz` backups of its bucket, a readable copy of the key space) is its user's alone:
/// every file and directory quorate, its agents and etcd create has no group or other bits,
/// and, run as root, another user (`nobody`) cannot read the manifest, a log or a backup.
#[test]
fn a_fresh_local_clusters_state_is_not_readable_by_another_user() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let local = Local::new();
    // The state directory itself open to all: only quorate's own modes protect what is in it.
    std::fs::set_permissions(local.state.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = local.manifest("own.yaml", &with_backups("own", 1));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let v2 = local.cluster_dir("own").join("backups/bucket/main/v2");
    let full = eventually(
        "a full snapshot in the bucket",
        Duration::from_secs(90),
        || {
            std::fs::read_dir(&v2)
                .ok()?
                .map(|e| e.unwrap().path())
                .find(|p| {
                    p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("Full-")
                })
        },
    );
    let clusters = local.state.path().join("clusters");
    let mut open = Vec::new();
    let mut seen = 0;
    let mut stack = vec![clusters.clone()];
    while let Some(dir) = stack.pop() {
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        seen += 1;
        if meta.permissions().mode() & 0o077 != 0 {
            open.push(format!("{} {:o}", dir.display(), meta.permissions().mode()));
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_symlink() {
                    continue;
                }
                stack.push(entry.path());
            }
        }
    }
    assert!(seen > 20, "the walk saw the state: {seen} entries");
    assert!(open.is_empty(), "readable by others: {open:#?}");
    if nix::unistd::geteuid().is_root() {
        let as_nobody = |file: &std::path::Path| {
            std::process::Command::new("cat")
                .arg(file)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .uid(65534)
                .gid(65534)
                .status()
                .unwrap()
                .success()
        };
        // The check can fail: nobody reads the manifest the test wrote with default modes.
        assert!(as_nobody(&path), "nobody reads a world-readable file");
        let cluster = local.cluster_dir("own");
        for file in [
            cluster.join("etcd.yaml"),
            cluster.join("cluster.json"),
            cluster.join("supervisor.log"),
            full,
        ] {
            assert!(file.is_file(), "{}", file.display());
            assert!(!as_nobody(&file), "nobody reads {}", file.display());
        }
    }
}

/// Kills and reaps a child process when dropped (also when the test panics).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A bucket that held clear backups before encryption was turned on: after a total loss the
/// agent refuses its clear objects (a writer of the bucket could have put them there) and says
/// so on its lease; `quorate.io/accept-plaintext-before` naming a time after them lets it
/// restore every write. A value that is not a time is refused by validation.
#[test]
fn clear_backups_restore_only_within_the_annotated_migration_window() {
    let local = Local::new();
    let name = "window";
    let path = local.manifest("clear.yaml", &with_backups(name, 1));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("BackupReady to turn True", Duration::from_secs(60), || {
        (condition(&local, name, "BackupReady")?.0 == "True").then_some(())
    });
    let rt = runtime();
    let endpoints = local.endpoints(name);
    let last = rt.block_on(async {
        let mut client = Client::connect(endpoints.clone(), None).await.unwrap();
        let mut last = 0;
        for i in 0..20 {
            let put = client.put(format!("k/{i:02}"), "v", None).await.unwrap();
            last = put.header().unwrap().revision();
        }
        last
    });
    let before = rt.block_on(dump(&endpoints[0], "k/"));
    eventually(
        "the bucket holds every write",
        Duration::from_secs(60),
        || (local.newest_backup(name) >= last).then_some(()),
    );
    local.kill_cluster(name);
    std::fs::remove_dir_all(
        local
            .cluster_dir(name)
            .join(format!("members/{name}-0/data")),
    )
    .unwrap();
    // Every clear object was written before this second ends; encryption is turned on now.
    let window = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 1).unwrap();
    let keys = local.cluster_dir(name).join("secrets/backup-keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("k1"), "7".repeat(64)).unwrap();
    std::fs::write(keys.join("active"), "k1").unwrap();
    let annotated = |extra: &str| {
        with_backups(name, 1).replace(
            "  namespace: default\n",
            &format!(
                "  namespace: default\n  annotations:\n    \
                 quorate.io/backup-encryption-secret: backup-keys\n{extra}"
            ),
        )
    };
    let encrypted = local.manifest("encrypted.yaml", &annotated(""));
    let up_output = local.state.path().join("up.out");
    let mut up = Reaped(
        local
            .command(&["up", "-d", "-f", path_str(&encrypted), "--timeout", "180s"])
            .stdout(std::fs::File::create(&up_output).unwrap())
            .stderr(std::fs::File::create(local.state.path().join("up.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let lease = local
        .cluster_dir(name)
        .join(format!("leases/{name}-0.json"));
    let waiting = eventually(
        "the agent to refuse the clear objects",
        Duration::from_secs(90),
        || {
            let lease: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&lease).ok()?).ok()?;
            lease["annotations"]["quorate.io/waiting"]
                .as_str()
                .filter(|w| w.contains("is not encrypted"))
                .map(String::from)
        },
    );
    assert!(
        waiting.contains("restoring from the bucket failed"),
        "{waiting}"
    );

    let bad = local.manifest(
        "bad.yaml",
        &annotated("    quorate.io/accept-plaintext-before: yesterday\n"),
    );
    let out = local.quorate(&["apply", "-f", path_str(&bad)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("quorate.io/accept-plaintext-before")
            && stderr.contains("not an RFC 3339 time"),
        "{stderr}"
    );
    let open = local.manifest(
        "window.yaml",
        &annotated(&format!(
            "    quorate.io/accept-plaintext-before: \"{window}\"\n"
        )),
    );
    local.ok(&["apply", "-f", path_str(&open)]);
    // `up` returns once the member is ready: restored from the clear objects.
    let status = up.0.wait().unwrap();
    let output = [up_output, local.state.path().join("up.err")]
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .join("\n");
    assert!(status.success(), "{output}\n{}", local.log_tails());
    let after = rt.block_on(dump(&local.endpoints(name)[0], "k/"));
    assert_eq!(
        after, before,
        "every write is back at its original revision"
    );
}
