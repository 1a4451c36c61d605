//! etcd versions in local mode, with real etcd 3.4 (Debian bookworm) and 3.5 (built from its Go module): a
//! 3-member 3.4 cluster with backups upgraded to 3.5 under `quorate canary` (one member at a
//! time, the leader last after a planned handover, after a full snapshot), a downgrade and a
//! version skip refused before anything restarts, and an upgrade whose first restarted member
//! cannot start stopping there.

mod support;

use std::path::Path;
use std::time::Duration;

use support::canary::{
    Canary, leadership_transfers, newest_full_snapshot, raft_term, with_backups,
};
use support::versions::{etcd_versions, versioned};
use support::{
    Local, condition, eventually, every_write_on_every_member, manifest, path_str, put_keys,
    runtime,
};

/// Each member's etcd version, as `quorate members` shows it.
fn versions(local: &Local, name: &str) -> Vec<String> {
    local
        .ok(&["members", name])
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().last().unwrap_or_default().to_string())
        .collect()
}

fn all_on(local: &Local, name: &str, prefix: &str) -> bool {
    let v = versions(local, name);
    !v.is_empty() && v.iter().all(|v| v.starts_with(prefix))
}

#[test]
fn three_members_upgrade_from_3_4_to_3_5_under_a_canary_and_lose_nothing() {
    let local = Local::new();
    let base = with_backups("upg", 3);
    let path = local.manifest("c.yaml", &versioned(&base, "3.4"));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    assert!(
        all_on(&local, "upg", "3.4."),
        "{:?}",
        versions(&local, "upg")
    );
    let endpoints = local.endpoints("upg");
    let rt = runtime();
    let head = rt.block_on(put_keys(&endpoints, "k/", 100));
    let term_before = rt.block_on(raft_term(&endpoints[0]));
    let dir = local.cluster_dir("upg");
    let transfers_before = leadership_transfers(&dir);

    let canary = Canary::start(&endpoints);
    std::thread::sleep(Duration::from_secs(1));
    local.manifest("c.yaml", &versioned(&base, "3.5"));
    local.ok(&["apply", "-f", path_str(&path)]);
    eventually(
        "every member runs etcd 3.5",
        Duration::from_secs(240),
        || all_on(&local, "upg", "3.5.").then_some(()),
    );
    eventually(
        "the cluster version moved to 3.5",
        Duration::from_secs(30),
        || {
            etcd_versions(&endpoints[0])
                .is_some_and(|(_, cluster)| cluster == "3.5.0")
                .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(1));
    let acked = canary.finish_unhurt();

    // The leader restarted last, after handing leadership to an updated follower: the only
    // election of the upgrade (one raft term) and etcd's only transfer.
    let moves = leadership_transfers(&dir) - transfers_before;
    assert_eq!(moves, 1, "one planned leadership transfer");
    let term_after = rt.block_on(raft_term(&endpoints[0]));
    assert_eq!(
        term_after - term_before,
        1,
        "no election but the planned transfer: term {term_before} → {term_after}"
    );
    // A full snapshot was taken for the upgrade, after the data written before it.
    let (full, _) = newest_full_snapshot(&local, "upg").expect("a full snapshot");
    assert!(
        full >= head,
        "full snapshot at {full}, data written up to {head}"
    );
    let (status, message) = condition(&local, "upg", "AllMembersUpdated").unwrap();
    assert_eq!(status, "True", "{message}");
    every_write_on_every_member(&endpoints, 100, acked);

    // A restart of the whole cluster keeps running 3.5 (the version is recorded).
    local.ok(&["down", "upg"]);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    assert!(
        all_on(&local, "upg", "3.5."),
        "{:?}",
        versions(&local, "upg")
    );
}

#[test]
fn a_downgrade_a_skip_and_a_wrong_binary_are_refused_before_anything_restarts() {
    let local = Local::new();
    // No annotation: a new cluster runs 3.6, the default.
    let text = manifest("keep", 1, "");
    let path = local.manifest("c.yaml", &text);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    assert!(
        all_on(&local, "keep", "3.6."),
        "{:?}",
        versions(&local, "keep")
    );
    let pid = local.etcd_pid("keep", "keep-0").expect("etcd runs");

    local.manifest("c.yaml", &versioned(&text, "3.4"));
    let out = local.quorate(&["apply", "-f", path_str(&path)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("downgrading etcd from 3.6 to 3.4 is refused")
            && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    local.manifest("c.yaml", &versioned(&text, "3.8"));
    let out = local.quorate(&["apply", "-f", path_str(&path)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("etcd 3.8 is not supported") && stderr.contains("3.4, 3.5, 3.6, 3.7"),
        "{stderr}"
    );

    // Leaving the annotation out keeps the version the cluster runs.
    local.manifest("c.yaml", &text);
    local.ok(&["apply", "-f", path_str(&path)]);
    assert_eq!(
        local.etcd_pid("keep", "keep-0"),
        Some(pid),
        "nothing restarted"
    );
    assert!(all_on(&local, "keep", "3.6."));

    // A 3.4 binary for a cluster that runs 3.6 would downgrade it: refused before starting.
    local.ok(&["down", "keep"]);
    let debian_34 = quorate_testkit::etcd_binary();
    let out = local.quorate(&[
        "up",
        "-d",
        "-f",
        path_str(&path),
        "--etcd-binary",
        path_str(&debian_34),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("is etcd 3.4, but the cluster runs etcd 3.6")
            && stderr.contains("nothing was started"),
        "{stderr}"
    );
    assert!(local.etcd_pid("keep", "keep-0").is_none());
}

/// A request two minor versions up is a chain of single steps (3.4 → 3.5 → 3.6), not a
/// refusal; a downgrade below 3.5 is refused, as etcd refuses it.
#[test]
fn a_skip_is_a_chain_and_a_downgrade_below_3_5_is_refused() {
    let v = |s| quorate_api::EtcdVersion::parse(s).unwrap();
    assert!(v("3.4").check_change(v("3.6")).is_ok());
    assert_eq!(v("3.4").steps_to(v("3.6")), [v("3.5"), v("3.6")]);
    let down = v("3.6").check_change(v("3.4")).unwrap_err().to_string();
    assert!(down.contains("reach 3.5 at the lowest"), "{down}");
}

/// An etcd 3.5 "installation" whose `etcd` runs `--version` but fails to start a member: the
/// fault of a broken binary on a node, on real etcd otherwise.
fn broken_etcd35(dir: &Path) {
    let real = quorate_etcd::binaries::EtcdBinaries::default()
        .etcd(quorate_api::EtcdVersion::V3_5)
        .expect("etcd 3.5 installed (scripts/install-deps.sh)");
    std::fs::create_dir_all(dir).unwrap();
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then exec {} --version; fi\n\
         echo 'etcd cannot start: broken installation' >&2\nexit 1\n",
        real.display()
    );
    let etcd = dir.join("etcd");
    std::fs::write(&etcd, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&etcd, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn an_upgrade_whose_member_cannot_start_stops_there_and_says_why() {
    let local = Local::new();
    let base = manifest("stuck", 3, "");
    let path = local.manifest("c.yaml", &versioned(&base, "3.4"));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    local.ok(&["down", "stuck"]);
    // The supervisor and its agents find "3.5" in this directory.
    let broken = local.state.path().join("broken-etcd-3.5");
    broken_etcd35(&broken);
    let up = local
        .command(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"])
        .env("QUORATE_ETCD_3_5_DIR", &broken)
        .output()
        .expect("run quorate up");
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );

    local.manifest("c.yaml", &versioned(&base, "3.5"));
    let apply = local
        .command(&["apply", "-f", path_str(&path)])
        .env("QUORATE_ETCD_3_5_DIR", &broken)
        .output()
        .expect("run quorate apply");
    assert!(
        apply.status.success(),
        "{}",
        String::from_utf8_lossy(&apply.stderr)
    );

    // The first follower restarts onto the broken binary and does not come back; the others
    // wait for it (by etcd's answers) and keep serving 3.4.
    let waiting = eventually(
        "the rollout stops with the others waiting for the failed member",
        Duration::from_secs(120),
        || {
            let (status, message) = condition(&local, "stuck", "MembersWaiting")?;
            (status == "True" && message.contains("does not answer with a leader"))
                .then_some(message)
        },
    );
    let (status, message) = condition(&local, "stuck", "AllMembersUpdated").unwrap();
    assert_eq!(status, "False", "{message}");
    assert!(message.starts_with("0 of 3"), "{message}");
    let members = local.ok(&["members", "stuck"]);
    let serving: Vec<String> = members
        .lines()
        .filter(|l| l.ends_with(" 3.4.23") && l.contains(" true "))
        .filter_map(|l| l.split_whitespace().nth(3).map(String::from))
        .collect();
    assert_eq!(
        serving.len(),
        2,
        "two members still serve on 3.4 ({waiting}):\n{members}"
    );
    // They have quorum: writes go on.
    runtime().block_on(put_keys(&serving, "still/", 10));

    // Once the node's etcd 3.5 works, the failed member starts and the rollout goes on.
    let real = quorate_etcd::binaries::EtcdBinaries::default()
        .etcd(quorate_api::EtcdVersion::V3_5)
        .unwrap();
    std::fs::remove_file(broken.join("etcd")).unwrap();
    std::os::unix::fs::symlink(real, broken.join("etcd")).unwrap();
    eventually(
        "the rollout finishes once the member can start",
        Duration::from_secs(180),
        || all_on(&local, "stuck", "3.5.").then_some(()),
    );
    eventually("AllMembersUpdated", Duration::from_secs(30), || {
        let (status, _) = condition(&local, "stuck", "AllMembersUpdated")?;
        (status == "True").then_some(())
    });
}
