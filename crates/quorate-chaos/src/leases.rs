//! Leases in the workload, checked apart from the linearizability check. One lease client
//! grants leases, puts one key under each, and gives each a fate: kept alive (a long TTL,
//! renewed every round while it is one of the newest few), revoked (a long TTL, revoked at once)
//! or left to expire (a short TTL). It reads its keys back with linearizable gets, and every
//! request goes into the history as a `lease` line.
//!
//! The key-value model of both checkers has no expiry (a lease deletes its keys at a time no
//! client chooses), so the lease keys live outside the workload's prefix: neither the watch
//! nor porcupine sees them. [`check_leases`] checks instead, on the lines alone:
//! - after a revoke was acknowledged, no later read finds the lease's key;
//! - while a lease is provably alive without a break since its grant (a grant or keep-alive
//!   called at `t` answered TTL `T`, each renewal answered before the previous `t + T` less a
//!   second, and the read returned before the last one's; etcd never expires a lease sooner)
//!   and not revoked, a read after its acknowledged put finds the key. After a break the lease
//!   may have expired, and a restore from the bucket brings an expired lease back without its
//!   keys (deltas record key deletions, not lease revocations), so answers after a break prove
//!   nothing; such comebacks are counted;
//! - and it counts the leases left to expire (never renewed nor revoked) whose keys were seen
//!   gone (expiry happened).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, PutOptions};
use quorate_core::history_line::{HistoryOutcome, LeaseLine, LeaseOp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::workload::{WorkloadPlan, connection};

/// Prefix of the lease client's keys: outside `workload::PREFIX`, so the watch and both
/// linearizability checkers leave them out.
pub const LEASE_PREFIX: &str = "chaos-lease/";
/// TTL of kept-alive and revoked leases.
const LONG_TTL: i64 = 30;
/// TTL of leases left to expire.
const SHORT_TTL: i64 = 2;
/// How many leases are kept alive at once (the oldest is let go when a new one is kept).
const KEPT: usize = 3;
/// Pause between the client's rounds.
const ROUND: Duration = Duration::from_millis(300);

/// What one lease's fate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Keep,
    Revoke,
    Expire,
}

/// Runs the lease client `id` until `stop`, idle while `paused`; returns its lines.
pub async fn run_lease_client(
    plan: WorkloadPlan,
    id: u32,
    origin: Instant,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
) -> Vec<LeaseLine> {
    let mut rng = StdRng::seed_from_u64(plan.seed.wrapping_mul(7_919).wrapping_add(id.into()));
    let mut lines = Vec::new();
    let mut client: Option<Client> = None;
    let mut kept: Vec<(i64, String)> = Vec::new();
    let mut expiring: Vec<(i64, String)> = Vec::new();
    let mut n = 0u64;
    let ns = || origin.elapsed().as_nanos() as u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = connection(&mut client, &plan, &paused).await else {
            continue;
        };
        let mut ok = true;
        let mut record = |line: LeaseLine| {
            ok &= line.outcome == HistoryOutcome::Ok;
            lines.push(line);
        };
        n += 1;
        let fate = match rng.random_range(0..3) {
            0 => Fate::Keep,
            1 => Fate::Revoke,
            _ => Fate::Expire,
        };
        let ttl = if fate == Fate::Expire {
            SHORT_TTL
        } else {
            LONG_TTL
        };
        let grant = request(&plan, ns(), LeaseOp::Grant, 0, None, async {
            c.lease_grant(ttl, None)
                .await
                .map(|r| (r.id(), Some(r.ttl()), None, revision(r.header())))
        })
        .await;
        let lease = grant.lease;
        let granted = grant.outcome == HistoryOutcome::Ok;
        record(LeaseLine {
            ttl: grant.ttl.or(Some(ttl)),
            ..grant
        });
        if granted {
            let key = format!("{LEASE_PREFIX}c{id}-{n}");
            let value = format!("l{id}-{n}");
            let put = request(&plan, ns(), LeaseOp::Put, lease, Some(&key), async {
                c.put(
                    key.as_str(),
                    value.as_str(),
                    Some(PutOptions::new().with_lease(lease)),
                )
                .await
                .map(|r| (lease, None, None, revision(r.header())))
            })
            .await;
            record(LeaseLine {
                value: Some(value.clone()),
                ..put
            });
            match fate {
                Fate::Keep => {
                    kept.push((lease, key));
                    if kept.len() > KEPT {
                        kept.remove(0);
                    }
                }
                Fate::Expire => {
                    expiring.push((lease, key));
                }
                Fate::Revoke => {
                    let revoke = request(&plan, ns(), LeaseOp::Revoke, lease, Some(&key), async {
                        c.lease_revoke(lease)
                            .await
                            .map(|r| (lease, None, None, revision(r.header())))
                    })
                    .await;
                    let revoked = revoke.outcome == HistoryOutcome::Ok;
                    record(revoke);
                    if revoked {
                        record(check(&plan, ns(), c, lease, &key).await);
                    }
                }
            }
        }
        for (lease, key) in kept.clone() {
            let renewed = request(&plan, ns(), LeaseOp::KeepAlive, lease, None, async {
                let (mut keeper, mut answers) = c.lease_keep_alive(lease).await?;
                keeper.keep_alive().await?;
                let answer = answers.message().await?;
                Ok((lease, Some(answer.map_or(-1, |a| a.ttl())), None, 0))
            })
            .await;
            record(LeaseLine {
                revision: None,
                ..renewed
            });
            record(check(&plan, ns(), c, lease, &key).await);
        }
        // The oldest short-lived lease whose key is still there: is it gone yet?
        if let Some((lease, key)) = expiring.first().cloned() {
            let seen = check(&plan, ns(), c, lease, &key).await;
            if seen.found == Some(false) {
                expiring.remove(0);
            }
            record(seen);
        }
        if !ok {
            client = None;
        }
        tokio::time::sleep(ROUND).await;
    }
    for line in &mut lines {
        line.client = id;
    }
    lines
}

/// A linearizable get of a lease's key.
async fn check(
    plan: &WorkloadPlan,
    call_ns: u64,
    c: &mut Client,
    lease: i64,
    key: &str,
) -> LeaseLine {
    request(plan, call_ns, LeaseOp::Check, lease, Some(key), async {
        let r = c.get(key, None).await?;
        Ok((lease, None, Some(!r.kvs().is_empty()), revision(r.header())))
    })
    .await
}

/// One request with the plan's timeout, as a line: `answer` gives the lease, the TTL, whether
/// the key was found and the header's revision.
async fn request(
    plan: &WorkloadPlan,
    call_ns: u64,
    op: LeaseOp,
    lease: i64,
    key: Option<&str>,
    answer: impl Future<Output = Result<(i64, Option<i64>, Option<bool>, i64), etcd_client::Error>>,
) -> LeaseLine {
    let started = Instant::now();
    let answered = tokio::time::timeout(plan.op_timeout, answer).await;
    let return_ns = call_ns + started.elapsed().as_nanos() as u64;
    let mut line = LeaseLine {
        client: 0,
        call_ns,
        return_ns,
        op,
        lease,
        key: key.map(str::to_owned),
        ..LeaseLine::default()
    };
    match answered {
        Ok(Ok((id, ttl, found, revision))) => {
            line.lease = id;
            line.ttl = ttl;
            line.found = found;
            line.revision = (revision > 0).then_some(revision);
        }
        Ok(Err(e)) => {
            line.outcome = HistoryOutcome::Unknown;
            line.error = Some(e.to_string());
        }
        Err(_) => {
            line.outcome = HistoryOutcome::Unknown;
            line.error = Some(format!("no answer within {:?}", plan.op_timeout));
        }
    }
    line
}

fn revision(header: Option<&etcd_client::ResponseHeader>) -> i64 {
    header.map_or(0, |h| h.revision())
}

/// What [`check_leases`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LeaseReport {
    /// Leases granted (acknowledged).
    pub granted: usize,
    /// Acknowledged keep-alives that answered a live lease.
    pub kept_alive: usize,
    /// Acknowledged revokes.
    pub revoked: usize,
    /// Leases left to expire whose key a read found gone (expiry seen).
    pub expired: usize,
    /// Leases whose key a read found gone (without a revoke) and that a later keep-alive still
    /// renewed: an expired lease brought back by a restore from the bucket, whose deltas record
    /// key deletions but no lease revocation (etcd-backup-restore's format). Not an anomaly of
    /// the keys (they stay gone); reported so the report shows it happens.
    pub resurrected: usize,
    /// Reads that the rules above could judge (the key must be there, or must be gone).
    pub judged_reads: usize,
    /// Violations, each with the lines' times.
    pub anomalies: Vec<String>,
}

/// Checks the lease lines of one client's stream (see the module docs).
pub fn check_leases(lines: &[LeaseLine]) -> LeaseReport {
    const MARGIN_NS: u64 = 1_000_000_000;
    let ok = |l: &&LeaseLine| l.outcome == HistoryOutcome::Ok;
    let mut report = LeaseReport::default();
    let mut by_lease: BTreeMap<i64, Vec<&LeaseLine>> = BTreeMap::new();
    for line in lines {
        by_lease.entry(line.lease).or_default().push(line);
    }
    for (lease, lines) in by_lease {
        if !lines.iter().any(|l| l.op == LeaseOp::Grant && ok(l)) {
            continue;
        }
        report.granted += 1;
        let put = lines.iter().find(|l| l.op == LeaseOp::Put && ok(l));
        let revoked = lines
            .iter()
            .find(|l| l.op == LeaseOp::Revoke && ok(l))
            .map(|l| l.return_ns);
        // Any revoke, acknowledged or not, may end the lease from its call on.
        let revoke_called = lines
            .iter()
            .filter(|l| l.op == LeaseOp::Revoke)
            .map(|l| l.call_ns)
            .min();
        report.revoked += usize::from(revoked.is_some());
        // Every answer that (re)started the lease's TTL, in call order: (call, return, TTL).
        let mut renewals: Vec<(u64, u64, i64)> = lines
            .iter()
            .filter(|l| matches!(l.op, LeaseOp::Grant | LeaseOp::KeepAlive) && ok(l))
            .filter_map(|l| Some((l.call_ns, l.return_ns, l.ttl.filter(|t| *t > 0)?)))
            .collect();
        renewals.sort_unstable();
        // Until when the lease is proven alive without a break since its grant, from the
        // answers called before `before`: each renewal must have been answered while the
        // previous window still held; after a break it may have expired, and a restore from
        // the bucket brings an expired lease back (deltas record no revocation), so later
        // answers prove nothing about its keys.
        let proven_until = |before: u64| -> Option<(u64, i64, u64)> {
            let mut proven: Option<(u64, i64, u64)> = None;
            for &(call, returned, ttl) in renewals.iter().take_while(|r| r.0 <= before) {
                let until = (call + ttl as u64 * 1_000_000_000).saturating_sub(MARGIN_NS);
                match proven {
                    None => proven = Some((call, ttl, until)),
                    Some((_, _, held)) if returned <= held => {
                        proven = Some((call, ttl, until.max(held)));
                    }
                    Some(_) => break,
                }
            }
            proven
        };
        report.kept_alive += lines
            .iter()
            .filter(|l| l.op == LeaseOp::KeepAlive && ok(l) && l.ttl.is_some_and(|t| t > 0))
            .count();
        // Left to expire: never renewed nor revoked (etcd may grant more than the short TTL
        // asked for: its minimum is 1.5 election timeouts).
        let short = !lines
            .iter()
            .any(|l| matches!(l.op, LeaseOp::KeepAlive | LeaseOp::Revoke));
        let mut expired = false;
        let mut gone_then_renewed = false;
        for read in lines.iter().filter(|l| l.op == LeaseOp::Check && ok(l)) {
            let found = read.found == Some(true);
            let key = read.key.as_deref().unwrap_or_default();
            if let Some(r) = revoked.filter(|r| read.call_ns > *r) {
                report.judged_reads += 1;
                if found {
                    report.anomalies.push(format!(
                        "lease {lease:x}: its key {key} is still there at {} ns, after the revoke \
                         was acknowledged at {r} ns",
                        read.return_ns
                    ));
                }
                continue;
            }
            let proven = proven_until(read.call_ns).filter(|p| read.return_ns <= p.2);
            let put_before = put.is_some_and(|p| p.return_ns < read.call_ns);
            let not_revoking = revoke_called.is_none_or(|c| c > read.return_ns);
            if let (Some((call, ttl, _)), true, true) = (proven, put_before, not_revoking) {
                report.judged_reads += 1;
                if !found {
                    report.anomalies.push(format!(
                        "lease {lease:x}: its key {key} is gone at {} ns, though the lease was \
                         alive (an answer to a call at {call} ns gave it {ttl} s)",
                        read.return_ns
                    ));
                }
            }
            expired |= short && put_before && !found;
            // Seen gone, not revoked, then renewed: the lease came back (a restore).
            if put_before
                && !found
                && revoke_called.is_none()
                && renewals.iter().any(|r| r.0 > read.return_ns)
            {
                gone_then_renewed = true;
            }
        }
        report.expired += usize::from(expired);
        report.resurrected += usize::from(gone_then_renewed);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn line(
        op: LeaseOp,
        lease: i64,
        call_s: u64,
        ttl: Option<i64>,
        found: Option<bool>,
    ) -> LeaseLine {
        LeaseLine {
            op,
            lease,
            call_ns: call_s * S,
            return_ns: call_s * S + S / 10,
            ttl,
            found,
            key: Some(format!("{LEASE_PREFIX}{lease}")),
            ..LeaseLine::default()
        }
    }

    #[test]
    fn kept_revoked_and_expired_leases_as_etcd_keeps_them_pass() {
        let lines = [
            // kept: granted 30 s at 0, renewed at 20, read at 45 (alive until 50).
            line(LeaseOp::Grant, 1, 0, Some(30), None),
            line(LeaseOp::Put, 1, 1, None, None),
            line(LeaseOp::KeepAlive, 1, 20, Some(30), None),
            line(LeaseOp::Check, 1, 45, None, Some(true)),
            // no longer kept: gone at 90, which nothing forbids.
            line(LeaseOp::Check, 1, 90, None, Some(false)),
            // revoked: gone after.
            line(LeaseOp::Grant, 2, 0, Some(30), None),
            line(LeaseOp::Put, 2, 1, None, None),
            line(LeaseOp::Revoke, 2, 2, None, None),
            line(LeaseOp::Check, 2, 3, None, Some(false)),
            // expiring: there at 1, gone at 5.
            line(LeaseOp::Grant, 3, 0, Some(2), None),
            line(LeaseOp::Put, 3, 0, None, None),
            line(LeaseOp::Check, 3, 1, None, Some(true)),
            line(LeaseOp::Check, 3, 5, None, Some(false)),
        ];
        let report = check_leases(&lines);
        assert!(report.anomalies.is_empty(), "{:?}", report.anomalies);
        assert_eq!(
            (
                report.granted,
                report.kept_alive,
                report.revoked,
                report.expired
            ),
            (3, 1, 1, 1)
        );
        // Lease 1's read at 45 s and lease 2's after the revoke; the others prove nothing.
        assert_eq!(report.judged_reads, 2, "{report:?}");
    }

    /// A lease not renewed within its TTL may have expired; a restore brings it back without
    /// its key, and keep-alives then succeed: no read after the break is judged, and the
    /// comeback is counted.
    #[test]
    fn a_lease_back_from_a_restore_proves_nothing_about_its_key() {
        let lines = [
            line(LeaseOp::Grant, 1, 0, Some(30), None),
            line(LeaseOp::Put, 1, 1, None, None),
            line(LeaseOp::KeepAlive, 1, 20, Some(30), None),
            // No renewal between 20 and 60 (an outage): expired at 50, say.
            line(LeaseOp::Check, 1, 55, None, Some(false)),
            line(LeaseOp::KeepAlive, 1, 60, Some(3600), None),
            line(LeaseOp::Check, 1, 61, None, Some(false)),
        ];
        let report = check_leases(&lines);
        assert!(report.anomalies.is_empty(), "{:?}", report.anomalies);
        assert_eq!(
            (report.judged_reads, report.resurrected),
            (0, 1),
            "{report:?}"
        );
        // Renewed in time, the same reads are judged (and are anomalies).
        let mut in_time = lines.to_vec();
        in_time[2] = line(LeaseOp::KeepAlive, 1, 28, Some(30), None);
        in_time.insert(3, line(LeaseOp::KeepAlive, 1, 50, Some(30), None));
        let report = check_leases(&in_time);
        assert_eq!(report.anomalies.len(), 2, "{:?}", report.anomalies);
    }

    #[test]
    fn a_revoked_key_that_stays_and_a_kept_key_that_goes_are_anomalies() {
        let lines = [
            line(LeaseOp::Grant, 1, 0, Some(30), None),
            line(LeaseOp::Put, 1, 1, None, None),
            line(LeaseOp::KeepAlive, 1, 20, Some(30), None),
            line(LeaseOp::Check, 1, 45, None, Some(false)),
            line(LeaseOp::Grant, 2, 0, Some(30), None),
            line(LeaseOp::Put, 2, 1, None, None),
            line(LeaseOp::Revoke, 2, 2, None, None),
            line(LeaseOp::Check, 2, 3, None, Some(true)),
        ];
        let report = check_leases(&lines);
        assert_eq!(report.anomalies.len(), 2, "{:?}", report.anomalies);
        assert!(
            report.anomalies[0].contains("is gone"),
            "{:?}",
            report.anomalies
        );
        assert!(
            report.anomalies[1].contains("still there"),
            "{:?}",
            report.anomalies
        );
        // An unacknowledged put proves nothing about the key being there.
        let mut unknown_put = lines[..4].to_vec();
        unknown_put[1].outcome = HistoryOutcome::Unknown;
        assert!(check_leases(&unknown_put).anomalies.is_empty());
    }
}
