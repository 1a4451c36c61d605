//! Ports of local members. A port the manifest sets is the base for member 0 and member *i*
//! uses base + 10·*i* (so a druid manifest with `clientPort: 2379` gives 2379, 2389, 2399); an
//! unset port is a free one chosen once. Assignments are recorded, so a member keeps its ports
//! (and therefore its peer URL and etcd member ID) for its whole life.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::TcpListener;
use thiserror::Error;

/// Distance between the ports of consecutive members when the manifest sets a base port.
pub const PORT_STRIDE: u16 = 10;

/// The ports of one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberPorts {
    /// etcd client port.
    pub client: u16,
    /// etcd peer port.
    pub peer: u16,
    /// Agent HTTP port.
    pub agent: u16,
    /// etcd's plain-HTTP metrics port (`--listen-metrics-urls`); chosen free, also for members
    /// recorded before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<u16>,
}

/// Base ports from the manifest, `None` where it leaves the choice to quorate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BasePorts {
    /// `spec.etcd.clientPort`.
    pub client: Option<u16>,
    /// `spec.etcd.serverPort`.
    pub peer: Option<u16>,
    /// `spec.backup.port`.
    pub agent: Option<u16>,
}

/// A port cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PortError {
    /// Another process listens on it.
    #[error(
        "port {port} ({role} port of member {member}) is already in use on 127.0.0.1; stop the \
         process using it (`ss -ltnp 'sport = :{port}'` shows it), or {hint}"
    )]
    InUse {
        /// The port.
        port: u16,
        /// `client`, `peer` or `agent`.
        role: &'static str,
        /// The member that needs it.
        member: String,
        /// What to change in the manifest.
        hint: &'static str,
    },
    /// Base + stride ran past 65535.
    #[error(
        "{role} port for member {member} would exceed 65535; lower the base port in the manifest"
    )]
    OutOfRange {
        /// `client`, `peer` or `agent`.
        role: &'static str,
        /// The member.
        member: String,
    },
}

/// Assigns ports to `members` that have none in `assigned`; `free` supplies unused ports.
pub fn assign(
    assigned: &mut BTreeMap<String, MemberPorts>,
    members: &[String],
    base: BasePorts,
    mut free: impl FnMut() -> u16,
) -> Result<(), PortError> {
    // Ports already taken by this cluster; `free` knows only what is bound right now.
    let mut taken: std::collections::BTreeSet<u16> = assigned
        .values()
        .flat_map(|p| [p.client, p.peer, p.agent].into_iter().chain(p.metrics))
        .collect();
    for (ordinal, member) in members.iter().enumerate() {
        if let Some(ports) = assigned.get_mut(member) {
            if ports.metrics.is_none() {
                ports.metrics = Some(pick_free(&mut taken, &mut free));
            }
            continue;
        }
        let mut pick = |base: Option<u16>, role: &'static str| -> Result<u16, PortError> {
            match base {
                Some(base) => {
                    u16::try_from(u32::from(base) + u32::from(PORT_STRIDE) * ordinal as u32)
                        .map_err(|_| PortError::OutOfRange {
                            role,
                            member: member.clone(),
                        })
                }
                None => Ok(pick_free(&mut taken, &mut free)),
            }
        };
        let ports = MemberPorts {
            client: pick(base.client, "client")?,
            peer: pick(base.peer, "peer")?,
            agent: pick(base.agent, "agent")?,
            metrics: Some(pick_free(&mut taken, &mut free)),
        };
        assigned.insert(member.clone(), ports);
    }
    Ok(())
}

/// A free port not `taken` yet (then taken). A port twice is left to the bind check to
/// report, after a fair try.
fn pick_free(taken: &mut std::collections::BTreeSet<u16>, free: &mut impl FnMut() -> u16) -> u16 {
    (0..100)
        .map(|_| free())
        .find(|port| taken.insert(*port))
        .unwrap_or_else(free)
}

/// A port the manifest asks for that a member does not have: its base port moved since the
/// member's ports were recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovedPort {
    /// The member.
    pub member: String,
    /// The manifest field.
    pub field: &'static str,
    /// The port the member has.
    pub recorded: u16,
    /// The port the manifest gives it now.
    pub wanted: u16,
}

/// The recorded ports of `members` (in ordinal order) that differ from what `base` gives them.
pub fn moved(
    assigned: &BTreeMap<String, MemberPorts>,
    members: &[String],
    base: BasePorts,
) -> Vec<MovedPort> {
    let mut found = Vec::new();
    for (ordinal, member) in members.iter().enumerate() {
        let Some(ports) = assigned.get(member) else {
            continue;
        };
        for (base, recorded, field) in [
            (base.client, ports.client, "spec.etcd.clientPort"),
            (base.peer, ports.peer, "spec.etcd.serverPort"),
            (base.agent, ports.agent, "spec.backup.port"),
        ] {
            let wanted = base.and_then(|b| {
                u16::try_from(u32::from(b) + u32::from(PORT_STRIDE) * ordinal as u32).ok()
            });
            if let Some(wanted) = wanted.filter(|w| *w != recorded) {
                found.push(MovedPort {
                    member: member.clone(),
                    field,
                    recorded,
                    wanted,
                });
            }
        }
    }
    found
}

/// The environment variable that narrows the ports quorate chooses for local members,
/// `LOW-HIGH` (HIGH excluded): for a firewall that opens only some, or for test runs side by side
/// that must never pick each other's ports.
pub const PORT_RANGE_ENV: &str = "QUORATE_LOCAL_PORTS";

/// The range [`PORT_RANGE_ENV`] names, if it is set, well-formed and not empty (a warning says
/// when it is set but unusable, and the default range is used).
fn configured_range() -> Option<std::ops::Range<u16>> {
    let text = std::env::var(PORT_RANGE_ENV).ok()?;
    let range = parse_range(&text);
    if range.is_none() {
        tracing::warn!(
            "{PORT_RANGE_ENV}={text:?} is not a port range LOW-HIGH with LOW < HIGH (e.g. \
             21000-22000); choosing ports below the ephemeral range instead"
        );
    }
    range
}

/// `LOW-HIGH` as a range; `None` when malformed or empty.
fn parse_range(text: &str) -> Option<std::ops::Range<u16>> {
    let (low, high) = text.split_once('-')?;
    let range = low.trim().parse().ok()?..high.trim().parse().ok()?;
    (!range.is_empty()).then_some(range)
}

/// A port free right now, from [`PORT_RANGE_ENV`]'s range if set, else from the 12,000 ports
/// below the OS's ephemeral range: a member's port must never be one the kernel may hand to an
/// outgoing connection, or a client reconnecting to a stopped member can connect to itself on
/// that very port and hold it, and the member cannot start again ("already in use"; the fault
/// suite found it after crashes).
pub fn free_port() -> u16 {
    let (low, below) = configured_range()
        .map(|range| (range.start, range.end))
        .unwrap_or_else(|| {
            let below = ephemeral_start().clamp(2_000, 65_535);
            (below.saturating_sub(12_000).max(1_024), below)
        });
    for _ in 0..200 {
        let port = rand::random_range(low..below);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("the OS hands out an ephemeral port")
}

/// The first port of the ephemeral range (`net.ipv4.ip_local_port_range`; Linux's default
/// 32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Chooses `ports`' metrics port again when something else holds it: quorate chose it, and
/// nothing depends on it staying the same.
pub fn free_metrics_port(ports: &mut MemberPorts) {
    if ports
        .metrics
        .is_some_and(|port| TcpListener::bind(("127.0.0.1", port)).is_err())
    {
        ports.metrics = Some(free_port());
    }
}

/// Checks that every port of `member` can be bound, so a conflict is reported before anything
/// starts instead of as an etcd crash loop.
pub fn check_available(member: &str, ports: &MemberPorts) -> Result<(), PortError> {
    for (port, role, hint) in [
        (
            ports.client,
            "client",
            "set spec.etcd.clientPort to a free base port (or remove it to let quorate choose)",
        ),
        (
            ports.peer,
            "peer",
            "set spec.etcd.serverPort to a free base port (or remove it to let quorate choose)",
        ),
        (
            ports.agent,
            "agent",
            "set spec.backup.port to a free base port (or remove it to let quorate choose)",
        ),
    ] {
        if TcpListener::bind(("127.0.0.1", port)).is_err() {
            return Err(PortError::InUse {
                port,
                role,
                member: member.to_string(),
                hint,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("etcd-{i}")).collect()
    }

    #[test]
    fn moved_base_ports_are_found_per_member_and_field() {
        let mut assigned = BTreeMap::new();
        let base = BasePorts {
            client: Some(2379),
            peer: Some(2380),
            agent: None,
        };
        assign(&mut assigned, &names(2), base, || 40000).unwrap();
        assert!(moved(&assigned, &names(2), base).is_empty());
        let now = BasePorts {
            client: Some(3379),
            ..base
        };
        assert_eq!(
            moved(&assigned, &names(2), now),
            vec![
                MovedPort {
                    member: "etcd-0".into(),
                    field: "spec.etcd.clientPort",
                    recorded: 2379,
                    wanted: 3379
                },
                MovedPort {
                    member: "etcd-1".into(),
                    field: "spec.etcd.clientPort",
                    recorded: 2389,
                    wanted: 3389
                },
            ]
        );
    }

    #[test]
    fn a_configured_port_range_is_low_to_high_exclusive_and_refused_when_malformed() {
        assert_eq!(parse_range("21000-22000"), Some(21_000..22_000));
        assert_eq!(parse_range(" 21000 - 22000 "), Some(21_000..22_000));
        for bad in ["", "21000", "22000-21000", "21000-21000", "a-b", "1-70000"] {
            assert_eq!(parse_range(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn free_ports_are_below_the_ephemeral_range() {
        let start = ephemeral_start();
        for _ in 0..50 {
            assert!(free_port() < start);
        }
    }

    #[test]
    fn explicit_bases_step_by_ten_and_free_ports_fill_the_rest() {
        let mut assigned = BTreeMap::new();
        let mut next = 40000;
        let base = BasePorts {
            client: Some(2379),
            peer: Some(2380),
            agent: None,
        };
        assign(&mut assigned, &names(3), base, || {
            next += 1;
            next
        })
        .unwrap();
        assert_eq!(
            assigned["etcd-0"],
            MemberPorts {
                client: 2379,
                peer: 2380,
                agent: 40001,
                metrics: Some(40002),
            }
        );
        assert_eq!(
            assigned["etcd-2"],
            MemberPorts {
                client: 2399,
                peer: 2400,
                agent: 40005,
                metrics: Some(40006),
            }
        );
    }

    #[test]
    fn existing_assignments_are_kept() {
        let mut assigned = BTreeMap::from([(
            "etcd-0".to_string(),
            MemberPorts {
                client: 1,
                peer: 2,
                agent: 3,
                metrics: None,
            },
        )]);
        assign(
            &mut assigned,
            &names(2),
            BasePorts {
                client: Some(5000),
                peer: Some(6000),
                agent: Some(7000),
            },
            || 9,
        )
        .unwrap();
        // Kept, and given the metrics port it was recorded without.
        assert_eq!(
            assigned["etcd-0"],
            MemberPorts {
                client: 1,
                peer: 2,
                agent: 3,
                metrics: Some(9),
            }
        );
        assert_eq!(
            assigned["etcd-1"],
            MemberPorts {
                client: 5010,
                peer: 6010,
                agent: 7010,
                metrics: Some(9),
            }
        );
    }

    #[test]
    fn ports_past_the_range_are_refused() {
        let mut assigned = BTreeMap::new();
        let err = assign(
            &mut assigned,
            &names(2),
            BasePorts {
                client: Some(65530),
                ..Default::default()
            },
            || 9,
        )
        .unwrap_err();
        assert_eq!(
            err,
            PortError::OutOfRange {
                role: "client",
                member: "etcd-1".into()
            }
        );
    }

    #[test]
    fn a_taken_port_is_reported_with_its_member_and_role() {
        let holder = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = holder.local_addr().unwrap().port();
        let ports = MemberPorts {
            client: free_port(),
            peer: taken,
            agent: free_port(),
            metrics: None,
        };
        let err = check_available("etcd-1", &ports).unwrap_err().to_string();
        assert!(
            err.contains(&format!("port {taken} (peer port of member etcd-1)")),
            "{err}"
        );
        assert!(err.contains("spec.etcd.serverPort"), "{err}");
    }
}
