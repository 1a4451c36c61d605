//! Scale-in and hibernation in local mode, with real etcd members and `quorate canary` writing
//! throughout: members leave one at a time (the leader last, after handing over), no write
//! waits past the canary's 5 s timeout, and a hibernation stops the members only once the
//! final snapshot is in the bucket.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::canary::{
    Canary, leadership_transfers, newest_full_snapshot, raft_term, with_backups,
};
use support::{
    Local, condition, dump, eventually, every_write_on_every_member, manifest, path_str, put_keys,
    runtime,
};

fn member_names(local: &Local, name: &str) -> Vec<String> {
    let mut names: Vec<String> = local
        .ok(&["members", name])
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_string())
        .collect();
    names.sort();
    names
}

fn apply_and_wait(local: &Local, path: &Path) {
    local.ok(&["apply", "-f", path_str(path), "--wait", "--timeout", "120s"]);
}

#[test]
fn five_to_three_to_one_to_three_under_a_canary_loses_nothing() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("shrink", 5, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let endpoints = local.endpoints("shrink");
    let rt = runtime();

    // Make a leaving member the leader, so the scale-in must hand leadership over first.
    let ids = local.ok(&["members", "shrink"]);
    let id_of = |member: &str| {
        ids.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(member))
            .and_then(|l| l.split_whitespace().next())
            .unwrap()
            .to_string()
    };
    let target = id_of("shrink-4");
    eventually(
        "etcdctl move-leader to shrink-4",
        Duration::from_secs(30),
        || {
            let out = Command::new(quorate_testkit::etcdctl_binary())
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &endpoints.join(","), "move-leader", &target])
                .output()
                .unwrap();
            out.status.success().then_some(())
        },
    );
    let term_before = rt.block_on(raft_term(&endpoints[0]));
    let transfers_before = leadership_transfers(&local.cluster_dir("shrink"));

    let canary = Canary::start(&endpoints);
    std::thread::sleep(Duration::from_secs(1));
    let mut wanted = vec![];
    for replicas in [3u32, 1, 3] {
        local.manifest("c.yaml", &manifest("shrink", replicas, ""));
        apply_and_wait(&local, &path);
        wanted = (0..replicas)
            .map(|i| format!("shrink-{i}"))
            .collect::<Vec<_>>();
        assert_eq!(
            member_names(&local, "shrink"),
            wanted,
            "etcd's members after scaling to {replicas}"
        );
        let (status, _) = condition(&local, "shrink", "ScaleOperationComplete").unwrap();
        assert_eq!(status, "True");
        for gone in replicas..5 {
            let member = format!("shrink-{gone}");
            assert!(
                local.etcd_pid("shrink", &member).is_none(),
                "{member}'s etcd stopped"
            );
            assert!(
                local.agent_pid("shrink", &member).is_none(),
                "{member}'s agent stopped"
            );
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    let acked = canary.finish_unhurt();

    let dir = local.cluster_dir("shrink");
    let trash: Vec<String> = std::fs::read_dir(dir.join("trash"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for member in ["shrink-1", "shrink-2", "shrink-3", "shrink-4"] {
        assert!(
            trash.iter().any(|t| t.starts_with(&format!("{member}-"))),
            "{member}'s data went to the trash: {trash:?}"
        );
    }
    // shrink-4 led and left: it handed leadership to shrink-0, which stays throughout, and
    // that is the only election of the whole sequence (each election is one more raft term).
    let moves = leadership_transfers(&dir) - transfers_before;
    assert_eq!(moves, 1, "the leaving leader handed leadership over once");
    let endpoints = local.endpoints("shrink");
    assert_eq!(endpoints.len(), wanted.len());
    let term_after = rt.block_on(raft_term(&endpoints[0]));
    assert_eq!(
        term_after - term_before,
        1,
        "no election but the planned leadership move: term {term_before} → {term_after}"
    );
    every_write_on_every_member(&endpoints, 0, acked);
}

#[test]
fn hibernation_takes_a_final_snapshot_and_wakes_at_the_same_revision() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_backups("sleepy", 3));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let endpoints = local.endpoints("sleepy");
    let rt = runtime();
    let head = rt.block_on(put_keys(&endpoints, "k/", 50));
    let ids_before = local.ok(&["members", "sleepy"]);

    local.manifest("c.yaml", &with_backups("sleepy", 0));
    apply_and_wait(&local, &path);
    let (status, message) = condition(&local, "sleepy", "ScaleOperationComplete").unwrap();
    assert_eq!(status, "True", "{message}");
    assert!(message.contains("final full snapshot"), "{message}");
    for i in 0..3 {
        assert!(
            local.etcd_pid("sleepy", &format!("sleepy-{i}")).is_none(),
            "no etcd runs"
        );
    }
    let (revision, is_final) = newest_full_snapshot(&local, "sleepy").expect("a full snapshot");
    assert!(
        revision >= head,
        "the final snapshot ({revision}) reaches the head ({head})"
    );
    assert!(is_final, "it is marked final");
    let members = local.quorate(&["members", "sleepy"]);
    assert!(!members.status.success());
    assert!(
        String::from_utf8_lossy(&members.stderr).contains("hibernated"),
        "{}",
        String::from_utf8_lossy(&members.stderr)
    );
    let table = local.ok(&["get", "etcd", "sleepy"]);
    assert!(table.contains("Hibernated"), "{table}");

    local.manifest("c.yaml", &with_backups("sleepy", 3));
    apply_and_wait(&local, &path);
    assert_eq!(local.ok(&["members", "sleepy"]).lines().count(), 4);
    let same_ids = |text: &str| {
        let mut ids: Vec<String> = text
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(
        same_ids(&local.ok(&["members", "sleepy"])),
        same_ids(&ids_before),
        "the members woke on their own data and IDs"
    );
    rt.block_on(async {
        for url in &local.endpoints("sleepy") {
            let keys = dump(url, "k/").await;
            assert_eq!(keys.len(), 50, "every key is on {url}");
            assert_eq!(keys.iter().map(|k| k.2).max(), Some(head));
        }
    });
}

#[test]
fn waking_at_a_smaller_size_leaves_etcd_with_that_many_members() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &manifest("wake", 5, ""));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let rt = runtime();
    rt.block_on(put_keys(&local.endpoints("wake"), "k/", 20));
    local.manifest("c.yaml", &manifest("wake", 0, ""));
    apply_and_wait(&local, &path);
    let (_, message) = condition(&local, "wake", "ScaleOperationComplete").unwrap();
    assert!(message.contains("no backup store"), "{message}");

    local.manifest("c.yaml", &manifest("wake", 3, ""));
    apply_and_wait(&local, &path);
    assert_eq!(
        member_names(&local, "wake"),
        ["wake-0", "wake-1", "wake-2"],
        "etcd's member list agrees with spec.replicas"
    );
    for gone in ["wake-3", "wake-4"] {
        assert!(
            local.etcd_pid("wake", gone).is_none(),
            "{gone} does not run"
        );
    }
    rt.block_on(async {
        for url in &local.endpoints("wake") {
            assert_eq!(dump(url, "k/").await.len(), 20, "every key is on {url}");
        }
    });
}

#[test]
fn a_failing_store_keeps_the_cluster_running_until_overridden() {
    let local = Local::new();
    let text = |replicas: u32, annotations: &str| {
        manifest("stuck", replicas, "")
            .replace(
                "  backup: {}\n",
                "  backup:\n    store:\n      provider: aws\n      container: nowhere\n      prefix: main\n      \
                 endpointOverride: http://127.0.0.1:9\n      secretRef:\n        name: s3-creds\n",
            )
            .replace("  namespace: default\n", &format!("  namespace: default\n{annotations}"))
    };
    let path = local.manifest("c.yaml", &text(1, ""));
    local.s3_secret("stuck");
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    let endpoints = local.endpoints("stuck");
    local.manifest("c.yaml", &text(0, ""));
    local.ok(&["apply", "-f", path_str(&path)]);
    let (_, message) = eventually(
        "the failed final snapshot to be reported",
        Duration::from_secs(60),
        || {
            condition(&local, "stuck", "ScaleOperationComplete")
                .filter(|(s, m)| s == "False" && m.contains("failed"))
        },
    );
    assert!(
        message.contains("hibernate-without-final-snapshot"),
        "the message names the override: {message}"
    );
    assert!(
        local.etcd_pid("stuck", "stuck-0").is_some(),
        "the member keeps running while the final snapshot is missing"
    );
    let rt = runtime();
    rt.block_on(put_keys(&endpoints, "still/", 1));

    let overridden = text(
        0,
        "  annotations:\n    quorate.io/hibernate-without-final-snapshot: \"true\"\n",
    );
    local.manifest("c.yaml", &overridden);
    apply_and_wait(&local, &path);
    let (status, message) = condition(&local, "stuck", "ScaleOperationComplete").unwrap();
    assert_eq!(status, "True");
    assert!(message.contains("without a final snapshot"), "{message}");
    assert!(local.etcd_pid("stuck", "stuck-0").is_none());
}
