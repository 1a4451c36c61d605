//! Network partitions between local members, for real: every member's agent runs in a cgroup
//! of its own (`QUORATE_MEMBER_CGROUP_ROOT`), a mangle rule marks each connection with the
//! member that opened it, and a partition drops every packet of a connection between the cut
//! member and another member (both directions, both who-dialled-whom). Clients and the
//! supervisor (unmarked) still reach every member, as in etcd's own robustness tests, which cut
//! peers only. Needs root, iptables with the cgroup match and a cgroup v2 mount.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why partitions cannot be made here.
#[derive(Debug, thiserror::Error)]
#[error("network partitions are not available: {0}")]
pub struct Unavailable(pub String);

/// The ports of one member (client, peer, agent).
pub type MemberPorts = [u16; 3];

/// The installed marking rules; removes them and the cgroups when dropped.
pub struct Partitioner {
    cgroup_root: PathBuf,
    /// The cgroup root as iptables' cgroup match names it (relative to the v2 mount).
    cgroup_path: String,
    /// Connection mark of each member.
    marks: BTreeMap<String, u32>,
    /// Chain that marks connections by member (mangle table), one per run.
    mark_chain: String,
    /// Chain holding the current partition's drops (filter table).
    drop_chain: String,
}

impl Partitioner {
    /// Prepares cgroups and marking rules for `members` of cluster `cluster`; the agents must
    /// then be started with [`Partitioner::env`].
    pub fn install(cluster: &str, members: &[String]) -> Result<Self, Unavailable> {
        if !nix::unistd::Uid::effective().is_root() {
            return Err(Unavailable("not root".into()));
        }
        let mount = cgroup2_mount().ok_or_else(|| Unavailable("no cgroup v2 mount".into()))?;
        // Runs in one process (tests) and in several (concurrent suites) never share a name.
        static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}-{run}", std::process::id());
        let name = format!("quorate-chaos-{id}");
        let cgroup_root = mount.join(&name);
        std::fs::create_dir_all(&cgroup_root)
            .map_err(|e| Unavailable(format!("cannot create {}: {e}", cgroup_root.display())))?;
        let mut me = Self {
            cgroup_root,
            cgroup_path: format!("/{name}"),
            marks: BTreeMap::new(),
            mark_chain: format!("QCHAOS-MARK-{id}"),
            drop_chain: format!("QCHAOS-CUT-{id}"),
        };
        let (mark_chain, drop_chain) = (me.mark_chain.clone(), me.drop_chain.clone());
        let (mark_chain, drop_chain) = (mark_chain.as_str(), drop_chain.as_str());
        iptables(&["-t", "mangle", "-N", mark_chain]).map_err(Unavailable)?;
        iptables(&["-t", "mangle", "-I", "OUTPUT", "-j", mark_chain]).map_err(Unavailable)?;
        iptables(&["-N", drop_chain]).map_err(Unavailable)?;
        iptables(&["-I", "OUTPUT", "-j", drop_chain]).map_err(Unavailable)?;
        for (i, member) in members.iter().enumerate() {
            // Marks of concurrent runs must differ too.
            let mark = ((std::process::id() % 10_000) * 64 + run % 64) * 16 + i as u32 + 1;
            let dir = me.cgroup_root.join(format!("{cluster}.{member}"));
            std::fs::create_dir_all(&dir)
                .map_err(|e| Unavailable(format!("cannot create {}: {e}", dir.display())))?;
            let path = format!("{}/{cluster}.{member}", me.cgroup_path);
            iptables(&[
                "-t",
                "mangle",
                "-A",
                mark_chain,
                "-m",
                "conntrack",
                "--ctstate",
                "NEW",
                "-m",
                "cgroup",
                "--path",
                &path,
                "-j",
                "CONNMARK",
                "--set-mark",
                &mark.to_string(),
            ])
            .map_err(Unavailable)?;
            me.marks.insert(member.clone(), mark);
        }
        Ok(me)
    }

    /// The environment that puts each member's agent into its cgroup.
    pub fn env(&self) -> (String, String) {
        (
            "QUORATE_MEMBER_CGROUP_ROOT".into(),
            self.cgroup_root.display().to_string(),
        )
    }

    /// Cuts `member` off from every other member; `ports` are every member's ports.
    pub fn cut(&self, member: &str, ports: &BTreeMap<String, MemberPorts>) -> Result<(), String> {
        let Some(own) = ports.get(member) else {
            return Err(format!("no ports recorded for {member}"));
        };
        let own_ports = join_ports(own.iter());
        let others: Vec<u16> = ports
            .iter()
            .filter(|(m, _)| m.as_str() != member)
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        // Connections the cut member opened to the others' ports, both directions.
        self.drop_marked(self.marks[member], &join_ports(others.iter()))?;
        // Connections the others opened to the cut member's ports.
        for (other, other_mark) in &self.marks {
            if other != member {
                self.drop_marked(*other_mark, &own_ports)?;
            }
        }
        Ok(())
    }

    /// Drops every packet of connections marked `mark` to or from `ports` (comma-separated,
    /// at most 15: iptables' multiport limit).
    fn drop_marked(&self, mark: u32, ports: &str) -> Result<(), String> {
        let mark = mark.to_string();
        iptables(&[
            "-A",
            &self.drop_chain,
            "-p",
            "tcp",
            "-m",
            "connmark",
            "--mark",
            &mark,
            "-m",
            "multiport",
            "--ports",
            ports,
            "-j",
            "DROP",
        ])
    }

    /// Heals every partition.
    pub fn heal(&self) -> Result<(), String> {
        iptables(&["-F", &self.drop_chain])
    }
}

impl Drop for Partitioner {
    fn drop(&mut self) {
        let (mark_chain, drop_chain) = (self.mark_chain.as_str(), self.drop_chain.as_str());
        let _ = iptables(&["-D", "OUTPUT", "-j", drop_chain]);
        let _ = iptables(&["-F", drop_chain]);
        let _ = iptables(&["-X", drop_chain]);
        let _ = iptables(&["-t", "mangle", "-D", "OUTPUT", "-j", mark_chain]);
        let _ = iptables(&["-t", "mangle", "-F", mark_chain]);
        let _ = iptables(&["-t", "mangle", "-X", mark_chain]);
        for entry in std::fs::read_dir(&self.cgroup_root)
            .into_iter()
            .flatten()
            .flatten()
        {
            if entry.path().is_dir() {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
        let _ = std::fs::remove_dir(&self.cgroup_root);
    }
}

fn join_ports<'a>(ports: impl Iterator<Item = &'a u16>) -> String {
    ports.map(u16::to_string).collect::<Vec<_>>().join(",")
}

fn iptables(args: &[&str]) -> Result<(), String> {
    let out = Command::new("iptables")
        .args(["-w", "5"])
        .args(args)
        .output()
        .map_err(|e| format!("iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Where cgroup v2 is mounted (`/sys/fs/cgroup` or the hybrid `/sys/fs/cgroup/unified`).
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, dir, kind) = (fields.next()?, fields.next()?, fields.next()?);
        (kind == "cgroup2").then(|| Path::new(dir).to_path_buf())
    })
}
