//! Defragmentation in local mode with real etcd members: on demand (`quorate defrag`) and by
//! threshold, one member at a time, followers first and the leader last after a handover,
//! never while a member's etcd does not answer, under `quorate canary` with no write waiting
//! more than 2 s.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use quorate_core::lease::MemberLease;
use quorate_core::maintenance::defrag::{DefragOutcome, DefragRecord};
use support::canary::{Canary, leadership_transfers, raft_term};
use support::versions::versioned;
use support::{Local, eventually, manifest, path_str, runtime};

/// Each member's defragmentation record, from its lease file.
fn records(local: &Local, name: &str) -> BTreeMap<String, DefragRecord> {
    let dir = local.cluster_dir(name).join("leases");
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let lease: MemberLease =
                serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok()?;
            Some((lease.name.clone(), DefragRecord::of_lease(&lease)?))
        })
        .collect()
}

/// The member whose etcd leads, by `quorate members` (ID, NAME, PEER URLS, CLIENT URLS,
/// LEADER, ...: one URL each here).
fn leader(local: &Local, name: &str) -> String {
    let out = local.ok(&["members", name]);
    out.lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(4) == Some(&"true"))
        .map(|f| f[1].to_string())
        .unwrap_or_else(|| panic!("no leader in:\n{out}"))
}

/// Rewrites `keys` keys of 64 KiB each `times` times, then compacts, leaving the history's
/// pages free for a defragmentation to reclaim.
fn churn(endpoints: &[String], keys: usize, times: usize) {
    runtime().block_on(async {
        let mut client = etcd_client::Client::connect(endpoints, None).await.unwrap();
        let value = vec![b'x'; 64 * 1024];
        let mut revision = 0;
        for _ in 0..times {
            for k in 0..keys {
                let resp = client
                    .put(format!("churn/{k}"), value.clone(), None)
                    .await
                    .unwrap();
                revision = resp.header().unwrap().revision();
            }
        }
        client
            .compact(
                revision,
                Some(etcd_client::CompactionOptions::new().with_physical()),
            )
            .await
            .unwrap();
    });
}

/// One member's defragmentation as a time interval.
fn interval(o: &DefragOutcome) -> (Timestamp, Timestamp) {
    let took = SignedDuration::from_millis(o.millis as i64);
    (o.at - took, o.at)
}

#[test]
fn on_demand_defragmentation_goes_followers_first_and_the_leader_last_after_a_handover() {
    on_demand_round("3.6");
}

#[test]
fn on_demand_defragmentation_of_etcd_3_4_goes_the_same_way() {
    on_demand_round("3.4");
}

fn on_demand_round(version: &str) {
    let local = Local::new();
    let path = local.manifest("c.yaml", &versioned(&manifest("defrag", 3, ""), version));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let endpoints = local.endpoints("defrag");
    churn(&endpoints, 100, 4);
    let first_leader = leader(&local, "defrag");
    let dir = local.cluster_dir("defrag");
    let rt = runtime();
    let term_before = rt.block_on(raft_term(&endpoints[0]));
    let transfers_before = leadership_transfers(&dir);

    let canary = Canary::start(&endpoints);
    let out = local.ok(&["defrag", "defrag", "--timeout", "120s"]);
    let last = canary.finish();
    assert_eq!(last["failed"], 0, "no write failed: {last}\n{out}");
    assert!(
        last["longest_wait_ms"].as_u64().unwrap() <= 2000,
        "no write waited more than 2 s: {last}\n{out}"
    );
    assert_eq!(out.matches("defragmented").count(), 3, "{out}");

    let records = records(&local, "defrag");
    let outcomes: BTreeMap<&String, &DefragOutcome> = records
        .iter()
        .map(|(m, r)| (m, r.last.as_ref().expect("every member defragmented")))
        .collect();
    assert_eq!(outcomes.len(), 3, "{records:?}");
    for (member, o) in &outcomes {
        assert!(o.error.is_none() && !o.skipped, "{member}: {o:?}");
        assert!(
            o.size_after < o.size_before,
            "{member} got smaller: {} → {}",
            o.size_before,
            o.size_after
        );
    }
    // Never two at once, and the member that led at the start went last.
    let mut spans: Vec<(Timestamp, Timestamp, &String)> = outcomes
        .iter()
        .map(|(m, o)| {
            let (from, to) = interval(o);
            (from, to, *m)
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "{} and {} were defragmented at the same time: {spans:?}",
            pair[0].2,
            pair[1].2
        );
    }
    assert_eq!(
        spans.last().unwrap().2,
        &first_leader,
        "the leader went last: {spans:?}"
    );
    // The leader handed over once, and that was the only election.
    let term_after = rt.block_on(raft_term(&endpoints[0]));
    assert_eq!(
        term_after - term_before,
        1,
        "no election by timeout: {out}\n{}",
        local.log_tails()
    );
    assert_eq!(leadership_transfers(&dir) - transfers_before, 1);
    assert_ne!(leader(&local, "defrag"), first_leader);

    // A second request is a new round; the first is not carried out again by itself.
    let round = records
        .values()
        .filter_map(|r| r.round.as_ref())
        .map(|r| r.id)
        .max();
    let again = local.ok(&["defrag", "defrag", "--timeout", "120s"]);
    assert_eq!(again.matches("defragmented").count(), 3, "{again}");
    let newer = self::records(&local, "defrag")
        .values()
        .filter_map(|r| r.round.as_ref())
        .map(|r| r.id)
        .max();
    assert_eq!(newer, round.map(|r| r + 1));
    // Each agent counts its two defragmentations under etcd-backup-restore's metric.
    for (i, member) in records.keys().enumerate() {
        let metrics = local.agent_metrics("defrag", i);
        let series = format!(
            "etcdbr_defragmentation_duration_seconds_count{{succeeded=\"true\",endpoint=\"{member}\"}}"
        );
        assert_eq!(
            support::metric(&metrics, &series),
            Some(2.0),
            "{series} in\n{metrics}"
        );
        assert!(
            support::metric(
                &metrics,
                "quorate_defragmentation_db_size_bytes{when=\"after\"}"
            )
            .is_some_and(|b| b > 0.0)
        );
    }
}

#[test]
fn a_database_over_the_threshold_is_defragmented_and_nobody_goes_while_a_member_is_stopped() {
    let local = Local::new();
    let annotated = manifest("thresh", 3, "").replace(
        "  namespace: default\n",
        "  namespace: default\n  annotations:\n    quorate.io/defrag-free-bytes: 1Mi\n",
    );
    let path = local.manifest("c.yaml", &annotated);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let endpoints = local.endpoints("thresh");

    // One follower's etcd stops answering; the free pages the churn leaves behind must wait.
    let stopped = (0..3)
        .map(|i| format!("thresh-{i}"))
        .find(|m| *m != leader(&local, "thresh"))
        .unwrap();
    let pid = local.etcd_pid("thresh", &stopped).expect("etcd runs");
    let reachable: Vec<String> = endpoints
        .iter()
        .filter(|e| {
            let i: usize = stopped.rsplit('-').next().unwrap().parse().unwrap();
            **e != endpoints[i]
        })
        .cloned()
        .collect();
    kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
    let resume = scopeguard(pid);
    churn(&reachable, 100, 4);
    let started = eventually(
        "the leader to start a threshold round",
        Duration::from_secs(30),
        || {
            records(&local, "thresh")
                .values()
                .find_map(|r| r.round.clone())
        },
    );
    assert_eq!(format!("{:?}", started.reason), "Threshold", "{started:?}");
    // For five more seconds of the round no member is defragmented (one that does not need it
    // may record that it skips: that touches nothing).
    for _ in 0..25 {
        std::thread::sleep(Duration::from_millis(200));
        let done: Vec<String> = records(&local, "thresh")
            .into_iter()
            .filter(|(_, r)| r.through(started.id) && !r.last.as_ref().is_some_and(|l| l.skipped))
            .map(|(m, _)| m)
            .collect();
        assert!(
            done.is_empty(),
            "{done:?} went while {stopped}'s etcd did not answer"
        );
    }
    drop(resume);
    let done = eventually(
        "every member through the round",
        Duration::from_secs(60),
        || {
            let records = records(&local, "thresh");
            (records.len() == 3 && records.values().all(|r| r.through(started.id)))
                .then_some(records)
        },
    );
    for (member, r) in &done {
        let o = r.last.as_ref().unwrap();
        assert!(o.error.is_none(), "{member}: {o:?}");
        if o.skipped {
            continue;
        }
        assert!(o.size_after < o.size_before, "{member}: {o:?}");
    }
    assert!(
        done.values().any(|r| !r.last.as_ref().unwrap().skipped),
        "the members over the threshold were defragmented: {done:?}"
    );
}

/// Resumes a stopped process when dropped (also when the test panics).
fn scopeguard(pid: i32) -> impl Drop {
    struct Resume(i32);
    impl Drop for Resume {
        fn drop(&mut self) {
            let _ = kill(Pid::from_raw(self.0), Signal::SIGCONT);
        }
    }
    Resume(pid)
}

/// Puts 256 KiB values at `key(i)` for i = 0, 1, ... until etcd refuses with NOSPACE; the
/// number of puts acknowledged.
fn fill_until_no_space(endpoints: &[String], key: impl Fn(usize) -> String) -> usize {
    runtime().block_on(async {
        let mut client = etcd_client::Client::connect(endpoints, None).await.unwrap();
        let value = vec![b'q'; 256 * 1024];
        for i in 0..10_000 {
            match client.put(key(i), value.clone(), None).await {
                Ok(_) => {}
                Err(e) if e.to_string().contains("database space exceeded") => return i,
                Err(e) => panic!("put {i}: {e}"),
            }
        }
        panic!("no NOSPACE after 10,000 puts of 256 KiB");
    })
}

/// Whether a put is accepted again (NOSPACE disarmed).
fn writable(endpoints: &[String]) -> bool {
    runtime().block_on(async {
        let mut client = etcd_client::Client::connect(endpoints, None).await.unwrap();
        client.put("probe", "x", None).await.is_ok()
    })
}

fn alarms(endpoints: &[String]) -> usize {
    runtime().block_on(async {
        let mut client = etcd_client::Client::connect(endpoints, None).await.unwrap();
        client
            .alarm(
                etcd_client::AlarmAction::Get,
                etcd_client::AlarmType::None,
                None,
            )
            .await
            .unwrap()
            .alarms()
            .len()
    })
}

/// Fills cluster `name` with distinct 256 KiB values (`live/00000`, ...) until its status says
/// the live data does not fit; returns the number of values written and the status.
///
/// One fill up to `NOSPACE` is not always enough: while etcd appends values this large, bbolt
/// leaves pages free that it cannot reuse yet, so the alarm can come with the file 15-20 %
/// free pages (plain etcd 3.5.35 and 3.6.16, three members, no quorate: `NOSPACE` after
/// 199-216 puts with 53-57 MB in use of 64-68 MB). quorate's round then finds that the live
/// data fits under 90 % of the quota and rightly disarms. Each round packs the file, so the
/// fill goes on after a disarm until the live data is over 90 % of the quota: the evidence at
/// every step is etcd's answer (a put refused or accepted) and the status.
fn fill_until_the_verdict(local: &Local, name: &str, endpoints: &[String]) -> (usize, String) {
    let mut puts = 0;
    for _ in 0..5 {
        let start = puts;
        puts += fill_until_no_space(endpoints, |i| format!("live/{:05}", start + i));
        let verdict = eventually(
            "the status to say the data does not fit, or writes accepted again",
            Duration::from_secs(60),
            || {
                let yaml = local.ok(&["get", "etcd", name, "-o", "yaml"]);
                if yaml.contains("raise spec.etcd.quota") {
                    Some(Some(yaml))
                } else {
                    writable(endpoints).then_some(None)
                }
            },
        );
        if let Some(verdict) = verdict {
            return (puts, verdict);
        }
    }
    panic!("{puts} values of 256 KiB and five NOSPACE rounds, and the live data still fits");
}

fn with_quota(name: &str) -> String {
    manifest(name, 3, "").replace(
        "    heartbeatDuration: 1s\n",
        "    heartbeatDuration: 1s\n    quota: 64Mi\n",
    )
}

#[test]
fn a_history_that_outgrows_a_64mi_quota_is_compacted_defragmented_and_disarmed_by_itself() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_quota("nospace"));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let endpoints = local.endpoints("nospace");
    let puts = fill_until_no_space(&endpoints, |i| format!("same/{}", i % 8));
    assert!(puts > 100, "the quota took {puts} puts");
    assert!(alarms(&endpoints) > 0, "etcd raised NOSPACE");
    eventually("writes accepted again", Duration::from_secs(60), || {
        writable(&endpoints).then_some(())
    });
    assert_eq!(alarms(&endpoints), 0);
    let records = records(&local, "nospace");
    let round = records
        .values()
        .filter_map(|r| r.round.clone())
        .max_by_key(|r| r.id)
        .unwrap();
    assert_eq!(format!("{:?}", round.reason), "NoSpace");
    for (member, r) in &records {
        let o = r.last.as_ref().unwrap();
        assert!(o.round >= round.id && o.error.is_none(), "{member}: {o:?}");
        assert!(o.size_after < 32 * 1024 * 1024, "{member}: {o:?}");
    }
}

#[test]
fn live_data_over_the_quota_is_reported_without_a_loop_and_a_delete_lets_it_recover() {
    let local = Local::new();
    let path = local.manifest("c.yaml", &with_quota("full"));
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let endpoints = local.endpoints("full");
    let (puts, verdict) = fill_until_the_verdict(&local, "full", &endpoints);
    assert!(verdict.contains("NOSPACE"), "{verdict}");
    let round_of = || {
        records(&local, "full")
            .values()
            .filter_map(|r| r.round.as_ref().map(|r| r.id))
            .max()
    };
    let first = round_of();
    // No new round while nothing changed (five seconds of agent checks).
    for _ in 0..25 {
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(round_of(), first, "no second round for the same alarm");
    }
    assert!(!writable(&endpoints));
    // A person deletes half of the data: the next round compacts it away and disarms.
    runtime().block_on(async {
        let mut client = etcd_client::Client::connect(&endpoints[..], None)
            .await
            .unwrap();
        let half = format!("live/{:05}", puts / 2);
        client
            .delete(
                "live/",
                Some(etcd_client::DeleteOptions::new().with_range(half)),
            )
            .await
            .unwrap();
    });
    eventually("writes accepted again", Duration::from_secs(60), || {
        writable(&endpoints).then_some(())
    });
    assert!(round_of() > first);
    eventually(
        "the status no longer reports the verdict",
        Duration::from_secs(30),
        || {
            let yaml = local.ok(&["get", "etcd", "full", "-o", "yaml"]);
            (!yaml.contains("raise spec.etcd.quota")).then_some(())
        },
    );
}

/// `(kind, first revision, last revision)` of every object in the cluster's Local bucket.
fn bucket(local: &Local, name: &str) -> Vec<(String, i64, i64)> {
    let dir = local.cluster_dir(name).join("backups/bucket/main/v2");
    let mut out: Vec<(String, i64, i64)> = std::fs::read_dir(dir)
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let mut parts = file.split('-');
            let kind = parts.next()?.to_string();
            let first = parts.next()?.parse().ok()?;
            let last = parts.next()?.parse().ok()?;
            Some((kind, first, last))
        })
        .collect();
    out.sort_by_key(|(_, _, last)| *last);
    out
}

#[test]
fn deltas_past_the_events_threshold_start_a_new_full_snapshot_so_restores_stay_short() {
    const THRESHOLD: i64 = 300;
    let local = Local::new();
    let text = support::canary::with_backups("compact", 1).replace(
        "    deltaSnapshotPeriod: 1s\n",
        &format!("    deltaSnapshotPeriod: 1s\n    snapshotCompaction:\n      eventsThreshold: {THRESHOLD}\n"),
    );
    let path = local.manifest("c.yaml", &text);
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "90s"]);
    let endpoints = local.endpoints("compact");
    // A steady writer (about 150 revisions per delta period), not a burst, so each delta is
    // small next to the threshold.
    let head = runtime().block_on(async {
        let mut client = etcd_client::Client::connect(&endpoints[..], None)
            .await
            .unwrap();
        let mut revision = 0;
        for i in 0..1000 {
            let put = client.put(format!("k/{i:04}"), "v", None).await.unwrap();
            revision = put.header().unwrap().revision();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        revision
    });
    let objects = eventually(
        "the bucket to reach the head",
        Duration::from_secs(60),
        || {
            let objects = bucket(&local, "compact");
            objects
                .last()
                .is_some_and(|(_, _, last)| *last >= head)
                .then_some(objects)
        },
    );
    let fulls = objects.iter().filter(|(kind, ..)| kind == "Full").count();
    assert!(
        fulls >= 3,
        "full snapshots taken as deltas piled up: {objects:?}"
    );
    // Between two full snapshots (and after the newest) the deltas never span much more than
    // the threshold: one delta batch at most beyond it.
    let mut since_full = 0;
    for (kind, first, last) in &objects {
        if kind == "Full" {
            since_full = 0;
        } else {
            since_full += last - first + 1;
            assert!(
                since_full < 2 * THRESHOLD,
                "{since_full} revisions of deltas after a full snapshot: {objects:?}"
            );
        }
    }
    let yaml = local.ok(&["get", "etcd", "compact", "-o", "yaml"]);
    assert!(yaml.contains("a restore now replays"), "{yaml}");
    // The backup leader's agent says the same under etcd-backup-restore's metrics.
    let metrics = local.agent_metrics("compact", 0);
    let newest = ["Incr", "Full"]
        .iter()
        .filter_map(|kind| {
            support::metric(
                &metrics,
                &format!("etcdbr_snapshot_latest_revision{{kind=\"{kind}\"}}"),
            )
        })
        .fold(0.0, f64::max);
    assert!(newest >= head as f64, "{metrics}");
    let fulls_taken = support::metric(
        &metrics,
        "etcdbr_snapshot_duration_seconds_count{kind=\"Full\",succeeded=\"true\"}",
    );
    assert!(fulls_taken >= Some(3.0), "{metrics}");
    let replay = support::metric(&metrics, "etcdbr_snapstore_latest_deltas_revisions_total");
    assert!(
        replay.is_some_and(|r| r < 2.0 * THRESHOLD as f64),
        "{metrics}"
    );
}
