//! The baseline: the same 1 → 3 scale-out done by hand with `etcdctl`, the way the etcd
//! documentation describes it. For each new member: `member add --learner` (retried while etcd
//! answers "unhealthy cluster" or "too many learners"), start etcd with
//! `--initial-cluster-state existing` and the initial cluster etcdctl printed, then
//! `member promote` (retried while the learner is "not in sync" or etcd refuses for another
//! passing reason). No sleeps beyond the 100 ms between retries.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use quorate_testkit::{ClusterState, EtcdMemberConfig, EtcdProcess, RaftTiming, etcdctl_binary};

use crate::error::{BenchError, Result};
use crate::observe::{LeaderMonitor, Writer, wait_for_voters};
use crate::scale_out_report::{Method, RoundResult};

/// etcd's own raft defaults, which quorate also renders for every member.
pub const ETCD_DEFAULT_TIMING: RaftTiming = RaftTiming {
    heartbeat: Duration::from_millis(100),
    election: Duration::from_millis(1000),
};
/// Pause between two attempts of a refused membership call.
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// Give up on one membership call after this long.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);
/// Give up waiting for the member list after this long.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(180);
const TOKEN: &str = "quorate-bench-hand";

fn member_config(name: &str, dir: &Path) -> EtcdMemberConfig {
    let mut config = EtcdMemberConfig::new(name, dir);
    config.timing = Some(ETCD_DEFAULT_TIMING);
    config.initial_cluster_token = TOKEN.to_string();
    config
}

/// One round of the hand procedure in fresh directories on fresh ports.
pub async fn run_round(round: u32) -> Result<RoundResult> {
    let dir = tempfile::Builder::new()
        .prefix("quorate-bench-hand-")
        .tempdir()
        .map_err(BenchError::io(
            "create a temporary directory in",
            &std::env::temp_dir(),
        ))?;
    let seed =
        EtcdProcess::start_ready(member_config("hand-0", dir.path()), Duration::from_secs(30))
            .await?;
    let url = seed.client_url();

    let writer = Writer::start(&url).await?;
    let monitor = LeaderMonitor::start(&url).await?;
    let mut refusals = BTreeMap::new();

    let t0 = Instant::now();
    let writes_at_t0 = writer.counts();
    let procedure = async {
        let mut joined = Vec::new();
        for name in ["hand-1", "hand-2"] {
            joined.push(add_member(&url, name, dir.path(), &mut refusals).await?);
        }
        Ok::<_, BenchError>(joined)
    };
    let converge = wait_for_voters(&url, t0, 3, CONVERGE_TIMEOUT);
    let (members, converged) = tokio::try_join!(procedure, converge)?;

    let (writes, write_errors) = writer.stop().await;
    let leader = monitor.stop().await;
    drop(members);
    drop(seed);
    Ok(RoundResult::new(Method::Hand, round, t0, converged, leader)
        .with_writes(writes - writes_at_t0, write_errors)
        .with_refusals(refusals))
}

/// Adds, starts and promotes one member; returns its running etcd.
async fn add_member(
    endpoint: &str,
    name: &str,
    dir: &Path,
    refusals: &mut BTreeMap<String, u32>,
) -> Result<EtcdProcess> {
    let mut config = member_config(name, dir);
    config.initial_cluster_state = ClusterState::Existing;
    let peer_urls = format!("--peer-urls={}", config.peer_url());
    let added = etcdctl_until_accepted(
        endpoint,
        &["member", "add", name, "--learner", &peer_urls],
        Step::Add,
        refusals,
    )
    .await?;
    let id = parse_added_id(&added).ok_or_else(|| {
        BenchError::failed(format!(
            "no member ID in `etcdctl member add` output:\n{added}"
        ))
    })?;
    config.initial_cluster = parse_initial_cluster(&added).ok_or_else(|| {
        BenchError::failed(format!(
            "no ETCD_INITIAL_CLUSTER in `etcdctl member add` output:\n{added}"
        ))
    })?;
    let member = EtcdProcess::start(config.clone())
        .map_err(BenchError::io("start etcd member", &config.data_dir))?;
    etcdctl_until_accepted(
        endpoint,
        &["member", "promote", &id],
        Step::Promote,
        refusals,
    )
    .await?;
    Ok(member)
}

/// Which membership call is being retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `member add --learner`.
    Add,
    /// `member promote`.
    Promote,
}

/// What to do with one etcdctl answer that was not a success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A passing refusal; try again after [`RETRY_EVERY`]. Carries a short reason.
    Retry(String),
    /// The call's purpose is already achieved (a promote that finds a voter).
    Done,
    /// A real failure.
    Fail,
}

/// Classifies etcdctl's output for a failed `step`, by etcd's error strings.
pub fn classify(step: Step, output: &str) -> Verdict {
    let retry = |reason: &str| Verdict::Retry(reason.to_string());
    if output.contains("unhealthy cluster") {
        return retry("unhealthy cluster");
    }
    match step {
        Step::Add if output.contains("too many learner") => retry("too many learners"),
        Step::Add => Verdict::Fail,
        Step::Promote if output.contains("in sync with leader") => retry("learner not in sync"),
        Step::Promote if output.contains("can only promote a learner member") => Verdict::Done,
        Step::Promote if output.contains("member not found") => Verdict::Fail,
        Step::Promote if output.contains("deadline exceeded") => retry("deadline exceeded"),
        Step::Promote => match output.find("etcdserver: ") {
            Some(at) => {
                let reason = output[at + "etcdserver: ".len()..]
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim();
                retry(reason)
            }
            None => Verdict::Fail,
        },
    }
}

/// Runs `etcdctl --endpoints=<endpoint> <args>` until etcd accepts it, retrying passing refusals
/// every [`RETRY_EVERY`] and counting them in `refusals`; returns etcdctl's standard output.
async fn etcdctl_until_accepted(
    endpoint: &str,
    args: &[&str],
    step: Step,
    refusals: &mut BTreeMap<String, u32>,
) -> Result<String> {
    let started = Instant::now();
    let what = format!("etcdctl {}", args.join(" "));
    loop {
        let output = tokio::process::Command::new(etcdctl_binary())
            .arg(format!("--endpoints={endpoint}"))
            .arg("--dial-timeout=2s")
            .arg("--command-timeout=5s")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("ETCDCTL_API", "3")
            .kill_on_drop(true)
            .output()
            .await
            .map_err(BenchError::io("run", &etcdctl_binary()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            return Ok(stdout);
        }
        let text = format!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
        match classify(step, &text) {
            Verdict::Done => return Ok(stdout),
            Verdict::Retry(reason) if started.elapsed() < STEP_TIMEOUT => {
                let step = match step {
                    Step::Add => "member add",
                    Step::Promote => "member promote",
                };
                *refusals.entry(format!("{step}: {reason}")).or_default() += 1;
                tokio::time::sleep(RETRY_EVERY).await;
            }
            Verdict::Retry(_) => {
                return Err(BenchError::failed(format!(
                    "`{what}` was still refused after {STEP_TIMEOUT:?}:\n{}",
                    text.trim()
                )));
            }
            Verdict::Fail => {
                return Err(BenchError::failed(format!(
                    "`{what}` failed ({}):\n{}",
                    output.status,
                    text.trim()
                )));
            }
        }
    }
}

/// The new member's ID from `Member <hex> added to cluster <hex>` (etcdctl pads IDs with
/// spaces to 16 characters).
pub fn parse_added_id(output: &str) -> Option<String> {
    output.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Member", id, "added", "to", "cluster", _] if u64::from_str_radix(id, 16).is_ok() => {
                Some(id.to_string())
            }
            _ => None,
        }
    })
}

/// The `ETCD_INITIAL_CLUSTER="name=url,..."` line as (name, peer URL) pairs.
pub fn parse_initial_cluster(output: &str) -> Option<Vec<(String, String)>> {
    let value = output.lines().find_map(|line| {
        line.trim()
            .strip_prefix("ETCD_INITIAL_CLUSTER=")
            .map(|v| v.trim_matches('"'))
    })?;
    value
        .split(',')
        .map(|entry| {
            let (name, url) = entry.split_once('=')?;
            (!name.is_empty() && !url.is_empty()).then(|| (name.to_string(), url.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDED: &str = "Member  e9e05c52164694d added to cluster cdf818194e3a8c32

ETCD_NAME=\"hand-1\"
ETCD_INITIAL_CLUSTER=\"hand-0=http://127.0.0.1:4001,hand-1=http://127.0.0.1:4002\"
ETCD_INITIAL_ADVERTISE_PEER_URLS=\"http://127.0.0.1:4002\"
ETCD_INITIAL_CLUSTER_STATE=\"existing\"
";

    #[test]
    fn parses_member_add_output() {
        assert_eq!(parse_added_id(ADDED).as_deref(), Some("e9e05c52164694d"));
        assert_eq!(
            parse_initial_cluster(ADDED).unwrap(),
            vec![
                ("hand-0".to_string(), "http://127.0.0.1:4001".to_string()),
                ("hand-1".to_string(), "http://127.0.0.1:4002".to_string()),
            ]
        );
        assert_eq!(parse_added_id("Error: etcdserver: unhealthy cluster"), None);
        assert_eq!(parse_initial_cluster("nothing"), None);
    }

    #[test]
    fn documented_refusals_are_retried() {
        let unhealthy = "{\"level\":\"warn\"}\nError: etcdserver: unhealthy cluster\n";
        assert_eq!(
            classify(Step::Add, unhealthy),
            Verdict::Retry("unhealthy cluster".into())
        );
        assert_eq!(
            classify(
                Step::Add,
                "Error: etcdserver: too many learner members in cluster"
            ),
            Verdict::Retry("too many learners".into())
        );
        assert_eq!(
            classify(
                Step::Promote,
                "Error: etcdserver: can only promote a learner member which is in sync with leader"
            ),
            Verdict::Retry("learner not in sync".into())
        );
        assert_eq!(
            classify(Step::Promote, "Error: etcdserver: leader changed"),
            Verdict::Retry("leader changed".into())
        );
    }

    #[test]
    fn real_failures_and_finished_promotes_are_told_apart() {
        assert_eq!(
            classify(Step::Add, "Error: etcdserver: Peer URLs already exists"),
            Verdict::Fail
        );
        assert_eq!(
            classify(Step::Add, "Error: context deadline exceeded"),
            Verdict::Fail
        );
        assert_eq!(
            classify(Step::Promote, "Error: etcdserver: member not found"),
            Verdict::Fail
        );
        assert_eq!(
            classify(
                Step::Promote,
                "Error: etcdserver: can only promote a learner member"
            ),
            Verdict::Done
        );
        assert_eq!(
            classify(Step::Promote, "Error: connection refused"),
            Verdict::Fail
        );
    }
}
