//! Issue 13: the short, fixed-seed run of the fault-injection suite. Every kind of fault and
//! operation once (after the scale-out 1 → 3 every run starts with), under four writing clients, against the real `quorate` binary; the history
//! must be linearizable with nothing acknowledged lost. `scripts/chaos.sh --duration 30m` runs
//! the long soak with a drawn schedule.

use std::time::Duration;

use quorate_chaos::faults::store_proxy::StoreFault;
use quorate_chaos::faults::{Step, Target};
use quorate_chaos::run::{RunPlan, run};

#[test]
fn every_fault_once_loses_nothing_acknowledged() {
    let hold = Duration::from_secs(6);
    let steps = vec![
        Step::Kill {
            member: 0,
            target: Target::Etcd,
        },
        Step::Pause {
            member: 1,
            target: Target::Etcd,
            hold,
        },
        Step::Partition { member: 2, hold },
        Step::BackupLeaderChange,
        Step::Kill {
            member: 1,
            target: Target::Agent,
        },
        Step::Pause {
            member: 2,
            target: Target::Agent,
            hold,
        },
        Step::DiskFull { member: 0, hold },
        Step::PauseSupervisor { hold },
        Step::Store {
            fault: StoreFault::Slow(Duration::from_millis(1500)),
            hold,
        },
        Step::Store {
            fault: StoreFault::CutAfter(4096),
            hold,
        },
        Step::Store {
            fault: StoreFault::Refuse,
            hold,
        },
        Step::ClockSkew {
            member: 0,
            skew_s: 2 * 86_400,
            hold,
        },
        Step::ClockSkew {
            member: 1,
            skew_s: -3_600,
            hold,
        },
        Step::CorruptBackup,
        Step::RollingUpdate,
        Step::ScaleIn,
        Step::Defragment,
        Step::Hibernate,
        Step::SlowRestart {
            stopped: 1,
            wiped: 0,
            hold: Duration::from_secs(40),
        },
        // A total loss, then a quorum loss that drops member 0 as restored, then another total
        // loss: member 0 restores with the same IDs the old record names (seed 2026112502
        // found it; `a_record_older_than_the_restored_data_does_not_drop_it`).
        Step::TotalLoss,
        Step::QuorumLoss { survivor: 2 },
        Step::CrashAll,
        Step::TotalLoss,
    ];
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime
        .block_on(run(RunPlan {
            quorate_bin: env!("CARGO_BIN_EXE_quorate").into(),
            seed: 13,
            duration: Duration::MAX,
            max_steps: None,
            steps: Some(steps),
            clients: 4,
        }))
        .unwrap_or_else(|e| panic!("the run could not be carried out: {e}"));
    for missing in &report.unavailable {
        eprintln!("NOT INJECTED here: {missing}");
    }
    // CI runs as root with everything installed: no fault may be left out there.
    if std::env::var_os("CI").is_some() && nix::unistd::Uid::effective().is_root() {
        assert!(
            report.unavailable.is_empty(),
            "faults left out under CI: {:?}",
            report.unavailable
        );
    }
    let anomalies: Vec<String> = report
        .check
        .anomalies
        .iter()
        .map(ToString::to_string)
        .chain(report.other_anomalies.iter().cloned())
        .collect();
    assert!(anomalies.is_empty(), "anomalies:\n{}", anomalies.join("\n"));
    assert_eq!(report.check.lost_acknowledged_writes, 0);
    assert!(
        report.check.acknowledged_writes > 200,
        "the clients wrote: {} acknowledged writes",
        report.check.acknowledged_writes
    );
}

/// The control: a total loss that does not wait for the bucket loses the writes acknowledged
/// since the last delta snapshot, and the suite must see it. A suite that passed this would
/// pass anything.
#[test]
fn the_suite_sees_writes_lost_by_an_unbacked_total_loss() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime
        .block_on(run(RunPlan {
            quorate_bin: env!("CARGO_BIN_EXE_quorate").into(),
            seed: 14,
            duration: Duration::MAX,
            max_steps: None,
            steps: Some(vec![Step::TotalLossUnbacked]),
            clients: 4,
        }))
        .unwrap_or_else(|e| panic!("the run could not be carried out: {e}"));
    assert!(
        report.check.lost_acknowledged_writes > 0,
        "a total loss ahead of the bucket lost nothing the checker saw: {}",
        report.check
    );
}
