//! Issue 12: the automatic decisions about data rest on evidence, never on silence. Each test
//! reproduces one scenario against real etcd members run by the real `quorate` binary.

mod support;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::time::Duration;
use support::{
    Local, condition, copy_dir, dump, eventually, manifest, path_str, put_keys, runtime,
};

/// Backups to the Local provider, a delta every second.
fn with_backups(name: &str, replicas: u32) -> String {
    manifest(name, replicas, "").replace(
        "  backup: {}\n",
        "  backup:\n    store:\n      provider: Local\n      container: bucket\n      prefix: main\n    \
         deltaSnapshotPeriod: 1s\n    fullSnapshotSchedule: \"0 0 1 1 *\"\n    garbageCollectionPeriod: 5s\n",
    )
}

/// The agent and etcd processes of one member.
fn member_pids(local: &Local, cluster: &str, member: &str) -> Vec<i32> {
    [
        local.agent_pid(cluster, member),
        local.etcd_pid(cluster, member),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn signal_member(local: &Local, cluster: &str, member: &str, signal: Signal) {
    let pids = member_pids(local, cluster, member);
    assert!(!pids.is_empty(), "{member} runs");
    for pid in pids {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// A member's lease as its agent wrote it.
fn lease(local: &Local, cluster: &str, member: &str) -> serde_json::Value {
    let path = local
        .cluster_dir(cluster)
        .join("leases")
        .join(format!("{member}.json"));
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn annotation(lease: &serde_json::Value, key: &str) -> Option<String> {
    lease["annotations"][key].as_str().map(String::from)
}

/// The cluster ID every member's etcd reports, asked of each member itself.
fn cluster_ids(rt: &tokio::runtime::Runtime, endpoints: &[String]) -> BTreeSet<u64> {
    rt.block_on(async {
        let mut ids = BTreeSet::new();
        for url in endpoints {
            let mut client = etcd_client::Client::connect([url.as_str()], None)
                .await
                .expect("connect");
            let status = client.status().await.expect("status");
            ids.insert(status.header().expect("header").cluster_id());
        }
        ids
    })
}

/// Every member's etcd answers with a leader and is a voter.
fn wait_for_voters(local: &Local, cluster: &str, n: usize) {
    eventually(
        &format!("{n} started voters in {cluster}"),
        Duration::from_secs(120),
        || {
            let out = local.quorate(&["members", cluster]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let voters = text
                .lines()
                .skip(1)
                .filter(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() >= 7 && cols[5] == "false" && cols[6] == "true"
                })
                .count();
            (voters == n).then_some(())
        },
    );
}

fn keys_everywhere(rt: &tokio::runtime::Runtime, endpoints: &[String], prefix: &str, n: usize) {
    for url in endpoints {
        let got = rt.block_on(async {
            for _ in 0..150 {
                let got = dump(url, prefix).await;
                if got.len() >= n {
                    return got;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            dump(url, prefix).await
        });
        assert_eq!(got.len(), n, "every acknowledged {prefix} key on {url}");
    }
}

/// The fork scenario: every member restarts, member 0 comes back on an empty volume, and its
/// peers are held stopped (image pull, slow volume, long WAL replay) for longer than the 15 s
/// the old rule waited. Member 0 must not restore an older cluster from the bucket beside them:
/// it waits, says why on its lease, and once they are back it rejoins their cluster.
#[test]
fn member_0_wiped_while_its_peers_are_stopped_does_not_fork_the_cluster() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("fork", 3));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let rt = runtime();
    let endpoints = local.endpoints("fork");
    rt.block_on(put_keys(&endpoints, "before/", 40));
    eventually(
        "a full snapshot in the bucket",
        Duration::from_secs(30),
        || {
            local
                .ok(&["backups", "list", "fork"])
                .contains("Full-")
                .then_some(())
        },
    );
    let original = cluster_ids(&rt, &endpoints);
    assert_eq!(original.len(), 1);

    for member in ["fork-1", "fork-2"] {
        signal_member(&local, "fork", member, Signal::SIGSTOP);
    }
    // Member 0 is frozen, wiped, then killed: its supervisor restarts its agent on an empty
    // volume (killed first, the agent could restart etcd on the old data before the wipe).
    signal_member(&local, "fork", "fork-0", Signal::SIGSTOP);
    let data = local.cluster_dir("fork").join("members/fork-0/data");
    std::fs::remove_dir_all(&data).expect("wipe member 0");
    signal_member(&local, "fork", "fork-0", Signal::SIGKILL);

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let waiting = loop {
        let current = lease(&local, "fork", "fork-0");
        if let Some(w) =
            annotation(&current, "quorate.io/waiting").filter(|w| w.contains("fork-1 has data"))
        {
            break w;
        }
        if std::time::Instant::now() > deadline {
            let dir = local.cluster_dir("fork");
            let log = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            panic!(
                "member 0 did not say why it waits; its lease: {current}\nagent log:\n{}\nsupervisor log:\n{}",
                log("members/fork-0/agent.log"),
                log("supervisor.log")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(waiting.contains("quorate recover"), "{waiting}");
    // Longer than the 15 s grace the old rule restored after.
    std::thread::sleep(Duration::from_secs(20));
    assert!(
        local.etcd_pid("fork", "fork-0").is_none(),
        "member 0 started etcd while its peers were silent"
    );
    assert!(
        !data.join("member").exists(),
        "member 0 restored from the bucket while its peers were silent"
    );

    for member in ["fork-1", "fork-2"] {
        signal_member(&local, "fork", member, Signal::SIGCONT);
    }
    wait_for_voters(&local, "fork", 3);
    assert_eq!(
        cluster_ids(&rt, &endpoints),
        original,
        "one cluster on every member, the original one"
    );
    keys_everywhere(&rt, &endpoints, "before/", 40);
}

/// Two of three data directories wiped under a writing client: a majority lost its data (their
/// agents say so), the survivor still answers, so quorate recovers by itself from the survivor
/// and the others rejoin as learners. Every write acknowledged before the loss is kept.
#[test]
fn two_of_three_wiped_recover_automatically_with_every_acknowledged_write() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("qloss", 3, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let rt = runtime();
    let endpoints = local.endpoints("qloss");
    rt.block_on(put_keys(&endpoints, "acked/", 60));
    let original = cluster_ids(&rt, &endpoints);

    for member in ["qloss-1", "qloss-2"] {
        // Stop the member, wipe it, let the supervisor restart its agent on an empty volume.
        signal_member(&local, "qloss", member, Signal::SIGSTOP);
        let data = local
            .cluster_dir("qloss")
            .join(format!("members/{member}/data"));
        std::fs::remove_dir_all(&data).expect("wipe");
        signal_member(&local, "qloss", member, Signal::SIGKILL);
    }

    let record = eventually(
        "the survivor to record its recovery",
        Duration::from_secs(90),
        || annotation(&lease(&local, "qloss", "qloss-0"), "quorate.io/recovery"),
    );
    let record: serde_json::Value = serde_json::from_str(&record).expect("record");
    assert_eq!(record["member"], "qloss-0");
    assert_eq!(record["dropped"].as_array().map(Vec::len), Some(2));
    let recorded = eventually(
        "the status to show the recovery",
        Duration::from_secs(30),
        || condition(&local, "qloss", "LastQuorumRecovery").filter(|(s, _)| s == "True"),
    );
    assert!(recorded.1.contains("qloss-0 recovered"), "{}", recorded.1);
    wait_for_voters(&local, "qloss", 3);
    assert_eq!(cluster_ids(&rt, &endpoints), original);
    keys_everywhere(&rt, &endpoints, "acked/", 60);
    let log = std::fs::read_to_string(local.cluster_dir("qloss").join("members/qloss-0/agent.log"))
        .unwrap_or_default();
    assert!(
        log.contains("recovering from quorum loss"),
        "the agent log records the recovery"
    );
}

/// Two of three members stopped (not wiped) is not evidence of lost data: nothing happens by
/// itself and the survivor says what is missing. `quorate recover --yes` recovers from the
/// survivor; the stopped members, once back, find they were dropped and rejoin as learners.
#[test]
fn two_of_three_stopped_wait_and_the_explicit_trigger_recovers() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("held", 3, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let rt = runtime();
    let endpoints = local.endpoints("held");
    rt.block_on(put_keys(&endpoints, "acked/", 30));
    let survivor_etcd = local.etcd_pid("held", "held-0");

    for member in ["held-1", "held-2"] {
        signal_member(&local, "held", member, Signal::SIGSTOP);
    }
    let waiting = eventually(
        "the survivor to say quorum is lost",
        Duration::from_secs(60),
        || {
            annotation(&lease(&local, "held", "held-0"), "quorate.io/waiting")
                .filter(|w| w.contains("quorum lost"))
        },
    );
    assert!(
        waiting.contains("held-1") && waiting.contains("held-2"),
        "{waiting}"
    );
    assert_eq!(
        local.etcd_pid("held", "held-0"),
        survivor_etcd,
        "no automatic action"
    );
    assert_eq!(
        annotation(&lease(&local, "held", "held-0"), "quorate.io/recovery"),
        None
    );

    let plan = local.ok(&["recover", "held"]);
    assert!(plan.contains("recovery uses held-0 at revision"), "{plan}");
    local.ok(&["recover", "held", "--yes"]);
    eventually(
        "the survivor to serve alone",
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let mut c = etcd_client::Client::connect([endpoints[0].as_str()], None)
                    .await
                    .ok()?;
                c.put("after/one", "v", None).await.ok()
            })
        },
    );
    for member in ["held-1", "held-2"] {
        signal_member(&local, "held", member, Signal::SIGCONT);
    }
    wait_for_voters(&local, "held", 3);
    keys_everywhere(&rt, &endpoints, "acked/", 30);
    keys_everywhere(&rt, &endpoints, "after/", 1);
    for member in ["held-1", "held-2"] {
        let aside = std::fs::read_dir(local.cluster_dir("held").join(format!("members/{member}")))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("data.invalid-"));
        assert!(aside, "{member}'s old data was moved aside, not deleted");
    }
}

/// etcd behind the bucket (every volume brought back from an older copy, same cluster): the
/// backup leader must not continue the chain. BackupReady turns False with the reason and
/// nothing in the bucket is deleted or added.
#[test]
fn etcd_behind_the_bucket_stops_backups_and_deletes_nothing() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("behind", 3));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let rt = runtime();
    let list = || local.ok(&["backups", "list", "behind"]);
    let newest = |listing: &str| {
        listing
            .lines()
            .skip(2)
            .filter_map(|l| l.split_whitespace().nth(2)?.parse::<i64>().ok())
            .max()
            .unwrap_or(0)
    };
    let first = rt.block_on(put_keys(&local.endpoints("behind"), "a/", 20));
    eventually(
        "backups through the first writes",
        Duration::from_secs(30),
        || (newest(&list()) >= first).then_some(()),
    );
    local.ok(&["down", "behind"]);
    let members = local.cluster_dir("behind").join("members");
    let old = local.state.path().join("old-members");
    copy_dir(&members, &old);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let second = rt.block_on(put_keys(&local.endpoints("behind"), "b/", 20));
    eventually(
        "backups through the second writes",
        Duration::from_secs(30),
        || (newest(&list()) >= second).then_some(()),
    );
    local.ok(&["down", "behind"]);
    std::fs::remove_dir_all(&members).unwrap();
    copy_dir(&old, &members);
    let before = list();

    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let message = eventually(
        "BackupReady False with the leader's reason",
        Duration::from_secs(60),
        || {
            let (status, message) = condition(&local, "behind", "BackupReady")?;
            (status == "False" && message.contains("behind the backups")).then_some(message)
        },
    );
    assert!(message.contains("backups stopped"), "{message}");
    rt.block_on(put_keys(&local.endpoints("behind"), "c/", 5));
    std::thread::sleep(Duration::from_secs(7)); // more than a delta period and a GC period
    assert_eq!(
        list(),
        before,
        "nothing written to or deleted from the bucket"
    );
}

/// A cluster restored to an earlier revision into an adopted prefix is another history: it is
/// not rolled forward to the bucket's newest state (not at start, not after a crash), and its
/// backups stop instead of continuing the old chain.
#[test]
fn a_cluster_restored_to_an_earlier_revision_stays_there_after_a_crash() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("past", 1));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let rt = runtime();
    eventually("the first full snapshot", Duration::from_secs(30), || {
        local
            .ok(&["backups", "list", "past"])
            .contains("Full-")
            .then_some(())
    });
    let first = rt.block_on(put_keys(&local.endpoints("past"), "a/", 20));
    let second = rt.block_on(put_keys(&local.endpoints("past"), "b/", 20));
    eventually(
        "backups through the writes",
        Duration::from_secs(30),
        || (local.newest_backup("past") >= second).then_some(()),
    );
    let bucket = local.state.path().join("bucket-copy");
    copy_dir(&local.cluster_dir("past").join("backups"), &bucket);
    local.ok(&["down", "past", "--purge"]);

    let rev = first.to_string();
    local.ok(&[
        "restore",
        "-f",
        path_str(&path),
        "--up",
        "--to-revision",
        &rev,
        "--local-root",
        path_str(&bucket),
    ]);
    local.ok(&["down", "past"]);
    let backups = local.cluster_dir("past").join("backups");
    std::fs::remove_dir_all(&backups).unwrap();
    copy_dir(&bucket, &backups);
    let adopted = local.manifest(
        "adopt.yaml",
        &with_backups("past", 1).replace(
            "  namespace: default\n",
            "  namespace: default\n  annotations:\n    quorate.io/adopt-backups: \"true\"\n",
        ),
    );
    local.ok(&["apply", "-f", path_str(&adopted)]);
    local.ok(&["up", "-d", "-f", path_str(&adopted), "--timeout", "60s"]);
    let endpoint = local.endpoints("past")[0].clone();
    let at_restore = |what: &str| {
        assert_eq!(rt.block_on(dump(&endpoint, "a/")).len(), 20, "{what}");
        assert!(
            rt.block_on(dump(&endpoint, "b/")).is_empty(),
            "{what}: rolled forward to the bucket's newer history"
        );
    };
    at_restore("after up");
    eventually(
        "BackupReady False naming the other history",
        Duration::from_secs(60),
        || {
            let (status, message) = condition(&local, "past", "BackupReady")?;
            (status == "False" && message.contains("history of cluster")).then_some(())
        },
    );

    // A crash of etcd: the agent restarts it on the same data.
    let pid = local.etcd_pid("past", "past-0").expect("etcd runs");
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    eventually("etcd to be restarted", Duration::from_secs(60), || {
        local
            .etcd_pid("past", "past-0")
            .filter(|p| *p != pid)
            .and_then(|_| {
                rt.block_on(async {
                    let mut c = etcd_client::Client::connect([endpoint.as_str()], None)
                        .await
                        .ok()?;
                    c.status().await.ok()
                })
            })
    });
    at_restore("after the crash");

    // Asked for a new chain: the old snapshots are moved aside (kept) and backups resume.
    let new_chain = local.manifest(
        "new-chain.yaml",
        &std::fs::read_to_string(&adopted).unwrap().replace(
            "    quorate.io/adopt-backups: \"true\"\n",
            "    quorate.io/adopt-backups: \"true\"\n    quorate.io/new-backup-chain: \"1\"\n",
        ),
    );
    local.ok(&["apply", "-f", path_str(&new_chain)]);
    eventually(
        "BackupReady True on a new chain",
        Duration::from_secs(60),
        || condition(&local, "past", "BackupReady").filter(|(s, _)| s == "True"),
    );
    let superseded = std::fs::read_dir(backups.join("bucket"))
        .unwrap()
        .flatten()
        .find(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            // Beside it, `<archive>.hashkv/` holds the old chain's key-space hashes.
            name.starts_with("superseded-") && name.ends_with("-main")
        })
        .expect("the old chain moved aside");
    assert!(
        superseded.path().join("v2").read_dir().unwrap().count() >= 2,
        "the old snapshots are kept"
    );
    at_restore("on the new chain");
}

/// `quorate restore --data-dir` never replaces what a directory holds without being told, and
/// never touches the data directory of a running etcd.
#[test]
fn restore_refuses_a_running_members_or_a_non_empty_directory() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("into", 1));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let rt = runtime();
    let written = rt.block_on(put_keys(&local.endpoints("into"), "k/", 5));
    eventually("a backup", Duration::from_secs(30), || {
        (local.newest_backup("into") >= written).then_some(())
    });

    let live = local.cluster_dir("into").join("members/into-0/data");
    let out = local.quorate(&[
        "restore",
        "-f",
        path_str(&path),
        "--data-dir",
        path_str(&live),
        "--force",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("running etcd"), "{err}");
    assert_eq!(
        rt.block_on(dump(&local.endpoints("into")[0], "k/")).len(),
        5
    );

    let dir = local.state.path().join("somewhere");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    let out = local.quorate(&[
        "restore",
        "-f",
        path_str(&path),
        "--data-dir",
        path_str(&dir),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "mine"
    );

    local.ok(&[
        "restore",
        "-f",
        path_str(&path),
        "--data-dir",
        path_str(&dir),
        "--force",
    ]);
    assert!(dir.join("member").exists(), "restored");
    let kept = std::fs::read_dir(local.state.path())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("somewhere.invalid-")
        })
        .any(|e| e.path().join("keep.txt").exists());
    assert!(kept, "the old content was moved aside, not deleted");
}

/// Issue 12, defect 4: a prefix with snapshots but no owner marker (what etcd-druid or
/// etcd-backup-restore leave) is not claimed silently: backups stop with the reason until the
/// adopt annotation says to take it over.
#[test]
fn a_prefix_with_snapshots_but_no_owner_is_taken_over_only_when_adopted() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("orphan", 1));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("a full snapshot", Duration::from_secs(30), || {
        local
            .ok(&["backups", "list", "orphan"])
            .contains("Full-")
            .then_some(())
    });
    local.ok(&["down", "orphan"]);
    let bucket = local.cluster_dir("orphan").join("backups/bucket");
    for marker in ["main.owner", "main.chain"] {
        std::fs::remove_file(bucket.join(marker)).expect(marker);
    }

    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let (_, message) = eventually(
        "BackupReady False naming the missing owner",
        Duration::from_secs(60),
        || {
            condition(&local, "orphan", "BackupReady")
                .filter(|(s, m)| s == "False" && m.contains("no owner marker"))
        },
    );
    assert!(message.contains("quorate.io/adopt-backups"), "{message}");
    assert!(!bucket.join("main.owner").exists(), "not claimed silently");

    let adopted = local.manifest(
        "adopt.yaml",
        &with_backups("orphan", 1).replace(
            "  namespace: default\n",
            "  namespace: default\n  annotations:\n    quorate.io/adopt-backups: \"true\"\n",
        ),
    );
    local.ok(&["apply", "-f", path_str(&adopted)]);
    eventually(
        "BackupReady True once adopted",
        Duration::from_secs(60),
        || condition(&local, "orphan", "BackupReady").filter(|(s, _)| s == "True"),
    );
    assert!(bucket.join("main.owner").exists(), "claimed once adopted");
}

/// Issue 12, defect 9: an automatic restore that cannot succeed (a truncated delta) says which
/// object and why in the status, and retries with a growing pause instead of a storm.
#[test]
fn a_restore_that_cannot_succeed_says_why_in_the_status_and_backs_off() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("broken", 1));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let rt = runtime();
    eventually("a full snapshot", Duration::from_secs(30), || {
        local
            .ok(&["backups", "list", "broken"])
            .contains("Full-")
            .then_some(())
    });
    let written = rt.block_on(put_keys(&local.endpoints("broken"), "k/", 10));
    eventually(
        "a delta through the writes",
        Duration::from_secs(30),
        || (local.newest_backup("broken") >= written).then_some(()),
    );
    local.ok(&["down", "broken"]);
    let objects = local.cluster_dir("broken").join("backups/bucket/main/v2");
    let delta = std::fs::read_dir(&objects)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("Incr-"))
        .expect("a delta object")
        .path();
    let bytes = std::fs::read(&delta).unwrap();
    std::fs::write(&delta, &bytes[..bytes.len() / 2]).unwrap();
    std::fs::remove_dir_all(local.cluster_dir("broken").join("members/broken-0/data")).unwrap();

    let out = local.quorate(&["up", "-d", "-f", path_str(&path), "--timeout", "20s"]);
    assert!(
        !out.status.success(),
        "a restore from a truncated delta cannot succeed"
    );
    let object = delta.file_name().unwrap().to_string_lossy().into_owned();
    let (_, message) = eventually("the reason in the status", Duration::from_secs(30), || {
        condition(&local, "broken", "MembersWaiting")
            .filter(|(s, m)| s == "True" && m.contains("restoring from the bucket failed"))
    });
    assert!(
        message.contains(object.trim_end_matches(".gz")),
        "the status names the broken object {object}: {message}"
    );
    let log = std::fs::read_to_string(
        local
            .cluster_dir("broken")
            .join("members/broken-0/agent.log"),
    )
    .unwrap_or_default();
    let attempts = log
        .matches("no member has data: restoring from the bucket")
        .count();
    assert!(
        (1..=8).contains(&attempts),
        "{attempts} restore attempts in about 20 s: a storm, not a backoff"
    );
}
