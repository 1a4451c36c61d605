//! The record of the etcd this member's agent started, and the look a starting agent takes for
//! that etcd before it starts one: etcd outlives the agent, so the next agent adopts it when the
//! evidence says it is this member's etcd and it serves (core `decide_adoption`). The record is
//! a small file beside the data directory (`quorate-etcd-process.json`): PID, start time (from
//! `/proc/PID/stat`), data directory, the cluster configuration etcd was started with, and the
//! cluster and member IDs once etcd reported them.

use crate::etcd_process::EtcdProcess;
use crate::executor::own_etcd;
use crate::options::AgentOptions;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::membership::adopt::{
    AdoptEvidence, Adoption, Answer, ProcessSeen, decide_adoption,
};
use quorate_core::membership::data_state::DataState;
use quorate_etcd::MemberClient;
use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What the agent recorded about the etcd it started.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EtcdRecord {
    pid: u32,
    /// Field 22 of `/proc/PID/stat`: clock ticks after boot; with the PID, names one process.
    start_time: u64,
    data_dir: String,
    /// The configuration etcd was started with (its flags, its etcd version).
    cluster: ClusterConfig,
    /// (cluster ID, member ID) as etcd reported them.
    ids: Option<(u64, u64)>,
}

fn record_path(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("quorate-etcd-process.json")
}

fn write(data_dir: &Path, record: &EtcdRecord) {
    let path = record_path(data_dir);
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string(record).expect("the etcd record serializes");
    if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path)) {
        tracing::warn!(path = %path.display(), error = %e, "recording the etcd process failed; a restarted agent will not adopt it");
    }
}

fn read(data_dir: &Path) -> Option<EtcdRecord> {
    serde_json::from_str(&std::fs::read_to_string(record_path(data_dir)).ok()?).ok()
}

/// Records the etcd this agent just started as `pid` with `cluster`'s configuration.
pub fn record(data_dir: &Path, pid: u32, cluster: &ClusterConfig) {
    let Some((start_time, _)) = stat(pid) else {
        return;
    };
    let record = EtcdRecord {
        pid,
        start_time,
        data_dir: data_dir.display().to_string(),
        cluster: cluster.clone(),
        ids: None,
    };
    write(data_dir, &record);
}

/// Adds what etcd reported about itself to the record (the adoption checks the answer of the
/// etcd it finds against it).
pub fn note_ids(data_dir: &Path, cluster_id: u64, member_id: u64) {
    if let Some(mut record) = read(data_dir) {
        record.ids = Some((cluster_id, member_id));
        write(data_dir, &record);
    }
}

/// Forgets the record once this agent stopped its etcd or saw it exit.
pub fn forget(data_dir: &Path) {
    let _ = std::fs::remove_file(record_path(data_dir));
}

/// What the starting agent found.
pub enum Found {
    /// This member's etcd runs and serves: adopted, with the configuration it was started with.
    Adopted(EtcdProcess, Box<ClusterConfig>),
    /// Start etcd as usual (the reason is for the log).
    Start(String),
    /// Wait and look again (the reason names what is missing).
    Wait(String),
}

/// Looks for the recorded etcd and gathers the evidence core's decision needs.
pub async fn look(opts: &AgentOptions) -> Found {
    let data_dir = opts.data_dir.display().to_string();
    let Some(record) = read(&opts.data_dir) else {
        return Found::Start("no etcd process was recorded for this member".into());
    };
    // Opened first: a pidfd names one process for good, so the checks below cannot be about a
    // process that reused the PID after they ran.
    let pidfd = rustix::process::Pid::from_raw(record.pid as i32).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    let process = match (&pidfd, stat(record.pid)) {
        (None, _) | (_, None) => ProcessSeen::Gone,
        (Some(_), Some((_, 'Z'))) => ProcessSeen::Gone,
        (Some(_), Some((start, _))) if start != record.start_time => ProcessSeen::Reused,
        (Some(_), Some(_)) if !runs_on(record.pid, &record.data_dir) => ProcessSeen::OtherDataDir,
        (Some(_), Some(_)) => ProcessSeen::Same,
    };
    let same = process == ProcessSeen::Same;
    let holds_lock = same && holds_lock(record.pid, &opts.data_dir);
    let answer = if same && holds_lock {
        answer(&record.cluster, &opts.member).await
    } else {
        Answer::Silent("not asked".into())
    };
    let expected = record.ids.or(match crate::facts::load(&opts.data_dir) {
        DataState::Present {
            cluster_id: Some(c),
            member_id: Some(m),
            ..
        } => Some((c, m)),
        _ => None,
    });
    let evidence = AdoptEvidence {
        recorded_pid: Some(record.pid),
        process,
        holds_lock,
        answer,
        expected,
    };
    match decide_adoption(&evidence, &data_dir) {
        Adoption::Adopt => {
            let pidfd: OwnedFd = pidfd.expect("a process seen alive has a pidfd");
            match EtcdProcess::adopt(record.pid, pidfd) {
                Ok(process) => Found::Adopted(process, Box::new(record.cluster)),
                Err(e) => Found::Wait(format!(
                    "cannot watch the running etcd (PID {}): {e}",
                    record.pid
                )),
            }
        }
        Adoption::Start(why) => {
            forget(&opts.data_dir);
            Found::Start(why)
        }
        Adoption::Wait(why) => Found::Wait(why),
    }
}

/// etcd's status on the client URL it was started with.
async fn answer(cluster: &ClusterConfig, me: &str) -> Answer {
    let (endpoint, tls) = own_etcd(cluster, me);
    let client =
        match MemberClient::connect(&endpoint, tls.as_ref(), crate::executor::timeouts()).await {
            Ok(client) => client,
            Err(e) => return Answer::Silent(format!("connecting to {endpoint}: {e}")),
        };
    match client.status().await {
        Ok(st) => Answer::Ids {
            cluster_id: st.cluster_id,
            member_id: st.member_id,
        },
        Err(e) => Answer::Silent(format!("status from {endpoint}: {e}")),
    }
}

/// (start time, state) of `pid`.
fn stat(pid: u32) -> Option<(u64, char)> {
    quorate_proc::stat(pid).map(|st| (st.start_time, st.state))
}

/// Whether `pid`'s command line names `data_dir` as etcd's data directory.
fn runs_on(pid: u32, data_dir: &str) -> bool {
    quorate_proc::has_arg(pid, &format!("--data-dir={data_dir}"))
}

/// Whether `pid` has a file under `data_dir` open that carries a write lock (etcd locks its
/// WAL files, and bbolt its database, for as long as it runs). Open file description locks
/// show no PID in `/proc/locks`, so the files come from the process's descriptors and the
/// locks are matched by device and inode.
fn holds_lock(pid: u32, data_dir: &Path) -> bool {
    let Ok(root) = std::fs::canonicalize(data_dir) else {
        return false;
    };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return false;
    };
    let locked: Vec<String> = locks
        .lines()
        .filter(|l| !l.contains("->") && l.contains("WRITE"))
        .filter_map(|l| l.split_whitespace().find(|t| t.matches(':').count() == 2))
        .map(String::from)
        .collect();
    fds.flatten().any(|fd| {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            return false;
        };
        if !target.starts_with(&root) {
            return false;
        }
        let Ok(meta) = std::fs::metadata(&target) else {
            return false;
        };
        let dev = meta.dev();
        let key = format!(
            "{:02x}:{:02x}:{}",
            nix::sys::stat::major(dev),
            nix::sys::stat::minor(dev),
            meta.ino()
        );
        locked.contains(&key)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_seen_with_its_start_time_and_state() {
        let me = std::process::id();
        let (start, state) = stat(me).expect("own stat");
        assert!(start > 0);
        assert!(matches!(state, 'R' | 'S'), "{state}");
        assert_eq!(stat(me), Some((start, stat(me).unwrap().1)));
        assert!(!runs_on(me, "/nonexistent"));
    }

    #[test]
    fn a_held_write_lock_under_the_data_dir_is_seen_and_an_unlocked_file_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let file = std::fs::File::create(data.join("wal")).unwrap();
        assert!(!holds_lock(std::process::id(), &data));
        file.lock().unwrap();
        assert!(holds_lock(std::process::id(), &data));
        file.unlock().unwrap();
        assert!(!holds_lock(std::process::id(), &data));
    }
}
