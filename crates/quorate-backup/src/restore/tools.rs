//! etcd's own tools for what no Rust crate does: turning a snapshot file into a member's data
//! directory (`snapshot restore`) and reading a snapshot's revision (`snapshot status`).
//! etcd 3.4 has them in `etcdctl`; 3.5 and later in `etcdutl` (3.6 removed etcdctl's), so
//! `etcdutl` is used when there is one.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use thiserror::Error;
use tokio::process::Command;

/// The etcd binaries a restore runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTools {
    /// `etcd`, for the temporary member that replays deltas.
    pub etcd: PathBuf,
    /// `etcdctl` (etcd 3.4's snapshot tool).
    pub etcdctl: PathBuf,
    /// `etcdutl` (etcd 3.5+), preferred for snapshot work when present.
    pub etcdutl: Option<PathBuf>,
}

impl EtcdTools {
    /// The tools at these paths, with `etcdutl` taken from `etcdctl`'s directory when it is
    /// there (etcd 3.5+ ships them together).
    pub fn new(etcd: impl Into<PathBuf>, etcdctl: impl Into<PathBuf>) -> EtcdTools {
        let etcdctl = etcdctl.into();
        let etcdutl = etcdctl
            .parent()
            .map(|dir| dir.join("etcdutl"))
            .filter(|p| p.is_file());
        EtcdTools {
            etcd: etcd.into(),
            etcdctl,
            etcdutl,
        }
    }

    fn snapshot_tool(&self) -> &Path {
        self.etcdutl.as_deref().unwrap_or(&self.etcdctl)
    }
}

/// The `major.minor` version of an etcd binary (`etcd --version`), `None` when it cannot be
/// told.
pub async fn etcd_version(binary: &Path) -> Option<(u32, u32)> {
    let output = run(binary, &["--version".to_string()]).await.ok()?;
    parse_version(&String::from_utf8_lossy(&output.stdout))
}

fn parse_version(text: &str) -> Option<(u32, u32)> {
    let version = text
        .lines()
        .find_map(|line| line.strip_prefix("etcd Version:"))?
        .trim();
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Who the restored member is; `snapshot restore` derives the member and cluster IDs from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberIdentity {
    /// `--name`.
    pub name: String,
    /// `--initial-advertise-peer-urls`.
    pub peer_urls: Vec<String>,
    /// `--initial-cluster` (`name=url,...`), including this member.
    pub initial_cluster: String,
    /// `--initial-cluster-token`.
    pub cluster_token: String,
}

impl MemberIdentity {
    /// Members listed in `initial_cluster`.
    pub fn cluster_size(&self) -> usize {
        let names: std::collections::HashSet<&str> = self
            .initial_cluster
            .split(',')
            .filter_map(|entry| entry.split_once('=').map(|(name, _)| name.trim()))
            .filter(|name| !name.is_empty())
            .collect();
        names.len()
    }

    /// What is wrong with this identity, if anything.
    pub fn problem(&self) -> Option<String> {
        if self.name.is_empty() {
            return Some("the member name is empty".to_string());
        }
        if self.peer_urls.is_empty() {
            return Some(format!("member {} has no peer URL", self.name));
        }
        let listed = self.initial_cluster.split(',').any(|entry| {
            entry.split_once('=').is_some_and(|(name, url)| {
                name == self.name && self.peer_urls.iter().any(|u| u == url)
            })
        });
        if !listed {
            return Some(format!(
                "initial cluster {:?} does not list member {} with one of its peer URLs {:?}",
                self.initial_cluster, self.name, self.peer_urls
            ));
        }
        None
    }
}

/// Bounds of one run of an etcd tool on a snapshot from the bucket, which anyone who can write
/// to the bucket may have crafted: past `timeout` the tool is killed, and its private memory
/// (`RLIMIT_DATA`: Go's heap, not bbolt's mapping of the file) is capped at `memory` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolLimits {
    /// How long the tool may run.
    pub timeout: Duration,
    /// Private writable memory the tool may map, in bytes.
    pub memory: u64,
}

impl ToolLimits {
    /// For a database of `db_len` bytes: a minute plus a second per 10 MB (etcd's tools read and
    /// hash it a few times), and 1 GiB plus twice its size of heap.
    pub fn for_database(db_len: u64) -> ToolLimits {
        ToolLimits {
            timeout: Duration::from_secs(60 + db_len / 10_000_000),
            memory: (1u64 << 30).saturating_add(db_len.saturating_mul(2)),
        }
    }

    /// For a database file at `db` (its size; the smallest limits when it cannot be read).
    fn for_file(db: &Path) -> ToolLimits {
        ToolLimits::for_database(std::fs::metadata(db).map_or(0, |m| m.len()))
    }
}

/// An etcd tool failed.
#[derive(Debug, Error)]
pub enum ToolError {
    /// The tool could not be run.
    #[error("cannot run {tool}: {source}; install etcd's tools (etcd-client) or pass their paths")]
    Spawn {
        /// The binary.
        tool: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The tool ran and failed.
    #[error(
        "`{tool} snapshot {command}` failed on full snapshot {object} ({status}): {stderr}; check \
         that the object is a complete etcd snapshot (it may be truncated or not decompressed)"
    )]
    Failed {
        /// The binary.
        tool: String,
        /// `restore` or `status`.
        command: &'static str,
        /// The snapshot object.
        object: String,
        /// Exit status.
        status: String,
        /// The end of its error output.
        stderr: String,
    },
    /// The tool ran past its time limit and was killed.
    #[error(
        "`{tool} snapshot {command}` on full snapshot {object} ran past {seconds} s and was \
         stopped; a snapshot of that size takes far less, so the object is damaged or crafted: \
         restore from another full snapshot"
    )]
    TimedOut {
        /// The binary.
        tool: String,
        /// `restore` or `status`.
        command: &'static str,
        /// The snapshot object.
        object: String,
        /// The limit.
        seconds: u64,
    },
    /// Output that could not be understood.
    #[error(
        "`{tool} snapshot status` of full snapshot {object} printed {output:?}, not JSON with a revision"
    )]
    Unreadable {
        /// The binary.
        tool: String,
        /// The snapshot object.
        object: String,
        /// What it printed.
        output: String,
    },
}

/// The revision stored in snapshot file `db` (of object `object`), read within the limits for
/// its size ([`ToolLimits::for_database`]).
pub async fn snapshot_revision(
    tools: &EtcdTools,
    db: &Path,
    object: &str,
) -> Result<i64, ToolError> {
    snapshot_revision_within(tools, db, object, ToolLimits::for_file(db)).await
}

/// [`snapshot_revision`] within `limits`.
pub async fn snapshot_revision_within(
    tools: &EtcdTools,
    db: &Path,
    object: &str,
    limits: ToolLimits,
) -> Result<i64, ToolError> {
    let tool = tools.snapshot_tool();
    let output = run_limited(
        tool,
        &[
            "snapshot".into(),
            "status".into(),
            db.display().to_string(),
            "--write-out=json".into(),
        ],
        ("status", object, limits),
    )
    .await?;
    check(tool, "status", object, &output)?;
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str::<serde_json::Value>(text.trim())
        .ok()
        .and_then(|v| v.get("revision").and_then(|r| r.as_i64()))
        .ok_or_else(|| ToolError::Unreadable {
            tool: tool.display().to_string(),
            object: object.to_string(),
            output: text.chars().take(200).collect(),
        })
}

/// Restores snapshot file `db` into the new data directory `data_dir` (which must not exist)
/// as member `member`.
pub async fn snapshot_restore(
    tools: &EtcdTools,
    db: &Path,
    object: &str,
    member: &MemberIdentity,
    data_dir: &Path,
    skip_hash_check: bool,
) -> Result<(), ToolError> {
    let tool = tools.snapshot_tool();
    let mut args = vec![
        "snapshot".to_string(),
        "restore".to_string(),
        db.display().to_string(),
        format!("--name={}", member.name),
        format!("--data-dir={}", data_dir.display()),
        format!("--initial-cluster={}", member.initial_cluster),
        format!("--initial-cluster-token={}", member.cluster_token),
        format!(
            "--initial-advertise-peer-urls={}",
            member.peer_urls.join(",")
        ),
    ];
    if skip_hash_check {
        args.push("--skip-hash-check".to_string());
    }
    let limits = ToolLimits::for_file(db);
    let output = run_limited(tool, &args, ("restore", object, limits)).await?;
    check(tool, "restore", object, &output)
}

async fn run(tool: &Path, args: &[String]) -> Result<Output, ToolError> {
    command(tool, args)
        .output()
        .await
        .map_err(|source| ToolError::Spawn {
            tool: tool.display().to_string(),
            source,
        })
}

fn command(tool: &Path, args: &[String]) -> Command {
    let mut command = Command::new(tool);
    command
        .args(args)
        .stdin(Stdio::null())
        // ETCDCTL_* variables act as flags (ETCDCTL_API=2 would even change the command set).
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .kill_on_drop(true);
    command
}

/// Runs `tool` on a snapshot from the bucket within `limits`; `what` is the command and the
/// object, for errors.
async fn run_limited(
    tool: &Path,
    args: &[String],
    (command_name, object, limits): (&'static str, &str, ToolLimits),
) -> Result<Output, ToolError> {
    let mut command = command(tool, args);
    // Go collects garbage harder as it nears this, before the hard limit below fails it.
    command.env("GOMEMLIMIT", (limits.memory / 4 * 3).to_string());
    let memory = limits.memory;
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        command.pre_exec(move || {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_DATA, memory, memory)
                .map_err(std::io::Error::from)
        });
    }
    // Dropping the running `output()` kills the child (kill_on_drop), and tokio reaps it.
    match tokio::time::timeout(limits.timeout, command.output()).await {
        Ok(output) => output.map_err(|source| ToolError::Spawn {
            tool: tool.display().to_string(),
            source,
        }),
        Err(_) => Err(ToolError::TimedOut {
            tool: tool.display().to_string(),
            command: command_name,
            object: object.to_string(),
            seconds: limits.timeout.as_secs(),
        }),
    }
}

fn check(
    tool: &Path,
    command: &'static str,
    object: &str,
    output: &Output,
) -> Result<(), ToolError> {
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    Err(ToolError::Failed {
        tool: tool.display().to_string(),
        command,
        object: object.to_string(),
        status: output.status.to_string(),
        stderr: lines[lines.len().saturating_sub(5)..].join(" | "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(cluster: &str) -> MemberIdentity {
        MemberIdentity {
            name: "m0".into(),
            peer_urls: vec!["http://10.0.0.1:2380".into()],
            initial_cluster: cluster.into(),
            cluster_token: "t".into(),
        }
    }

    #[test]
    fn identity_must_list_itself_in_the_initial_cluster() {
        assert_eq!(identity("m0=http://10.0.0.1:2380").problem(), None);
        assert_eq!(identity("m0=http://10.0.0.1:2380").cluster_size(), 1);
        let three =
            identity("m0=http://10.0.0.1:2380,m1=http://10.0.0.2:2380,m2=http://10.0.0.3:2380");
        assert_eq!(three.problem(), None);
        assert_eq!(three.cluster_size(), 3);
        assert!(
            identity("m1=http://10.0.0.1:2380")
                .problem()
                .unwrap()
                .contains("does not list member m0")
        );
        assert!(identity("m0=http://10.0.0.9:2380").problem().is_some());
        let mut nameless = identity("m0=http://10.0.0.1:2380");
        nameless.name.clear();
        assert!(nameless.problem().unwrap().contains("name is empty"));
    }

    #[test]
    fn versions_are_read_from_etcd_version_output() {
        let v34 = "etcd Version: 3.4.23\nGit SHA: Not provided\nGo Version: go1.19.8\n";
        assert_eq!(parse_version(v34), Some((3, 4)));
        assert_eq!(parse_version("etcd Version: 3.5.1\n"), Some((3, 5)));
        assert_eq!(parse_version("something else"), None);
    }

    #[tokio::test]
    async fn the_installed_etcd_reports_its_version() {
        let etcd = quorate_testkit::etcd_binary();
        let (major, minor) = etcd_version(&etcd).await.expect("etcd --version");
        assert_eq!(major, 3);
        assert!(minor >= 4);
    }

    #[test]
    fn etcdutl_is_found_next_to_etcdctl() {
        let dir = tempfile::tempdir().unwrap();
        let ctl = dir.path().join("etcdctl");
        std::fs::write(&ctl, "").unwrap();
        assert_eq!(EtcdTools::new("etcd", &ctl).etcdutl, None);
        std::fs::write(dir.path().join("etcdutl"), "").unwrap();
        let tools = EtcdTools::new("etcd", &ctl);
        assert_eq!(tools.etcdutl, Some(dir.path().join("etcdutl")));
        assert_eq!(tools.snapshot_tool(), dir.path().join("etcdutl"));
    }
}
