//! A cluster's life on etcd 3.5 and on etcd 3.7 (built from Go modules by
//! `scripts/install-etcd.sh`) in local mode; 3.6, the default, runs every other local test.
//! Each version: create one member with backups, scale out to three (learners added, then
//! promoted), scale in to one, restart the cluster; every member runs that version as etcd
//! itself reports it, and the keys written first are there at the end.

mod support;

use std::path::Path;
use std::time::Duration;

use support::canary::with_backups;
use support::versions::{etcd_versions, versioned};
use support::{Local, dump, eventually, path_str, put_keys, runtime};

/// `quorate members`' rows as (name, learner, version): the name is the second column, the
/// learner flag and the version the third-last and the last (the headers hold spaces).
fn members(local: &Local, name: &str) -> Vec<(String, String, String)> {
    let mut rows: Vec<_> = local
        .ok(&["members", name])
        .lines()
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            let from_end = |i: usize| cells[cells.len() - i].to_string();
            (cells[1].to_string(), from_end(3), from_end(1))
        })
        .collect();
    rows.sort();
    rows
}

/// Waits until every member's etcd answers `/version` with server `version`.x and cluster
/// version `version`.0, and `quorate members` lists exactly `count` voters running it.
fn all_run(local: &Local, name: &str, version: &str, count: usize) {
    eventually(
        &format!("{count} voting members, each reporting etcd {version} and cluster {version}.0"),
        Duration::from_secs(60),
        || {
            let endpoints = local.endpoints(name);
            let reported = endpoints.len() == count
                && endpoints.iter().all(|e| {
                    etcd_versions(e).is_some_and(|(server, cluster)| {
                        server.starts_with(&format!("{version}."))
                            && cluster == format!("{version}.0")
                    })
                });
            let rows = members(local, name);
            let listed = rows.len() == count
                && rows.iter().all(|(_, learner, v)| {
                    learner == "false" && v.starts_with(&format!("{version}."))
                });
            (reported && listed).then_some(())
        },
    );
}

fn apply(local: &Local, path: &Path) {
    local.ok(&["apply", "-f", path_str(path), "--wait", "--timeout", "120s"]);
}

/// Every member of `name` holds the `n` keys under `k/` written at `head`.
fn keys_everywhere(local: &Local, name: &str, n: usize, head: i64) {
    runtime().block_on(async {
        for url in &local.endpoints(name) {
            let keys = dump(url, "k/").await;
            assert_eq!(keys.len(), n, "every key is on {url}");
            assert_eq!(keys.iter().map(|k| k.2).max(), Some(head), "on {url}");
        }
    });
}

fn lifecycle(version: &str) {
    let name = format!("v{}", version.replace('.', ""));
    let local = Local::new();
    let path = local.manifest("c.yaml", &versioned(&with_backups(&name, 1), version));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    all_run(&local, &name, version, 1);
    let head = runtime().block_on(put_keys(&local.endpoints(&name), "k/", 50));

    local.manifest("c.yaml", &versioned(&with_backups(&name, 3), version));
    apply(&local, &path);
    all_run(&local, &name, version, 3);
    assert_eq!(
        members(&local, &name)
            .into_iter()
            .map(|m| m.0)
            .collect::<Vec<_>>(),
        (0..3).map(|i| format!("{name}-{i}")).collect::<Vec<_>>()
    );
    keys_everywhere(&local, &name, 50, head);

    local.manifest("c.yaml", &versioned(&with_backups(&name, 1), version));
    apply(&local, &path);
    all_run(&local, &name, version, 1);
    assert_eq!(members(&local, &name)[0].0, format!("{name}-0"));
    for gone in 1..3 {
        assert!(
            local.etcd_pid(&name, &format!("{name}-{gone}")).is_none(),
            "{name}-{gone}'s etcd stopped"
        );
    }

    let pid = local
        .etcd_pid(&name, &format!("{name}-0"))
        .expect("etcd runs");
    local.ok(&["down", &name]);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    assert_ne!(
        local.etcd_pid(&name, &format!("{name}-0")),
        Some(pid),
        "etcd restarted"
    );
    all_run(&local, &name, version, 1);
    keys_everywhere(&local, &name, 50, head);
    local.ok(&["down", &name]);
}

#[test]
fn etcd_3_5_creates_scales_out_and_in_and_restarts() {
    lifecycle("3.5");
}

#[test]
fn etcd_3_7_creates_scales_out_and_in_and_restarts() {
    lifecycle("3.7");
}
