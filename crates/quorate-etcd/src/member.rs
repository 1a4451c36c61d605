//! A client bound to exactly one etcd member: status, health, maintenance, and membership
//! calls answered by that member. Per-member calls must not be load-balanced, because the
//! answer describes the member that gives it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::{
    AlarmAction, AlarmOptions, AlarmType, Client, GetOptions, MemberAddOptions, WatchOptions,
};

use crate::config::{EtcdTimeouts, EtcdTls, connect_options};
use crate::error::{ErrorKind, EtcdError};
use crate::snapshot::SnapshotStream;
use crate::types::{
    Alarm, AlarmKind, DowngradeCall, KeySpaceHash, Member, MemberList, MemberStatus, format_id,
    members,
};

/// Client for one member. Cheap to clone; clones share the connections.
#[derive(Clone)]
pub struct MemberClient {
    /// For calls a member answers on its own (status, member list, defragment, snapshot),
    /// which stay useful when it has lost its leader.
    client: Client,
    /// For calls that need a leader (reads, writes, membership changes, alarms): etcd rejects
    /// them at once with "no leader" instead of letting them hang until the timeout.
    leader_client: Client,
    endpoint: String,
    timeouts: EtcdTimeouts,
    /// The member answered the last call, so its connection works and the next call needs no
    /// time to connect: it gets the request bound alone. A follower whose leader just died
    /// holds a write until the client gives up; allowing connect time there too would spend
    /// it waiting on a member that is connected but cannot answer.
    answered: Arc<AtomicBool>,
}

impl std::fmt::Debug for MemberClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberClient")
            .field("endpoint", &self.endpoint)
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

impl MemberClient {
    /// Prepares a client for the member at `url`. The connection is made lazily by the first
    /// call, so this fails only for an unusable URL or TLS material, never for a dead member.
    pub async fn connect(
        url: &str,
        tls: Option<&EtcdTls>,
        timeouts: EtcdTimeouts,
    ) -> Result<MemberClient, EtcdError> {
        let options = connect_options(url, tls, &timeouts)?;
        let limit = timeouts.connect + timeouts.request;
        let client = lazy_client(url, options.clone(), limit).await?;
        let leader_client = lazy_client(url, options.with_require_leader(true), limit).await?;
        Ok(MemberClient {
            client,
            leader_client,
            endpoint: url.to_string(),
            timeouts,
            answered: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The member's client URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The time bounds this client applies.
    pub fn timeouts(&self) -> EtcdTimeouts {
        self.timeouts
    }

    /// The member's view of itself and the cluster. Learners answer this too.
    pub async fn status(&self) -> Result<MemberStatus, EtcdError> {
        let mut c = self.client.clone();
        let resp = self
            .call("status", self.unary(), async move { c.status().await })
            .await?;
        let header = resp.header();
        Ok(MemberStatus {
            endpoint: self.endpoint.clone(),
            member_id: header.map(|h| h.member_id()).unwrap_or_default(),
            cluster_id: header.map(|h| h.cluster_id()).unwrap_or_default(),
            revision: header.map(|h| h.revision()).unwrap_or_default(),
            leader_id: resp.leader(),
            raft_term: resp.raft_term(),
            raft_index: resp.raft_index(),
            raft_applied_index: resp.raft_applied_index(),
            db_size: resp.db_size(),
            db_size_in_use: resp.raft_used_db_size(),
            is_learner: resp.is_learner(),
            version: resp.version().to_string(),
            errors: resp.errors().to_vec(),
            storage_version: resp.storage_version().to_string(),
            downgrade_target: resp
                .downgrade_info()
                .filter(|d| d.enabled())
                .map(|d| d.target_version().to_string()),
        })
    }

    /// Checks the member serves: it answers status and, if it votes, knows a leader and
    /// completes a linearizable (quorum) read. Learners reject linearizable reads by design,
    /// so a learner that answers status counts as healthy. Returns the status on success.
    pub async fn check_health(&self) -> Result<MemberStatus, EtcdError> {
        let status = self.status().await?;
        if status.is_learner {
            return Ok(status);
        }
        if !status.has_leader() {
            return Err(EtcdError::new(
                ErrorKind::NoLeader,
                "health check",
                &self.endpoint,
                format!(
                    "member {} reports no leader in raft term {}",
                    format_id(status.member_id),
                    status.raft_term
                ),
            ));
        }
        self.linearizable_read().await?;
        Ok(status)
    }

    /// A linearizable (quorum) read through this member, counting one key: it completes only
    /// while the member is a voter in a cluster with a leader, which is what a member's
    /// readiness asks.
    pub async fn linearizable_read(&self) -> Result<(), EtcdError> {
        let mut c = self.leader_client.clone();
        self.call("linearizable read", self.unary(), async move {
            c.get("health", Some(GetOptions::new().with_count_only()))
                .await
        })
        .await?;
        Ok(())
    }

    /// True when [`MemberClient::check_health`] succeeds.
    pub async fn is_healthy(&self) -> bool {
        self.check_health().await.is_ok()
    }

    /// Active alarms in the cluster, as seen by this member.
    pub async fn alarms(&self) -> Result<Vec<Alarm>, EtcdError> {
        let mut c = self.leader_client.clone();
        let resp = self
            .call("alarm list", self.unary(), async move {
                c.alarm(AlarmAction::Get, AlarmType::None, None).await
            })
            .await?;
        Ok(resp
            .alarms()
            .iter()
            .filter_map(|a| {
                AlarmKind::from_client(a.alarm()).map(|kind| Alarm {
                    member_id: a.member_id(),
                    kind,
                })
            })
            .collect())
    }

    /// Clears `alarm` (after its cause has been dealt with, e.g. space reclaimed).
    pub async fn disarm(&self, alarm: Alarm) -> Result<(), EtcdError> {
        let mut c = self.leader_client.clone();
        let mut options = AlarmOptions::new();
        options.with_member(alarm.member_id);
        self.call(&format!("disarm {alarm}"), self.unary(), async move {
            c.alarm(
                AlarmAction::Deactivate,
                alarm.kind.to_client(),
                Some(options),
            )
            .await
        })
        .await?;
        Ok(())
    }

    /// Defragments this member's backend, returning free pages to the file system. Blocks
    /// reads and writes on this member while it runs, so callers do one member at a time.
    pub async fn defragment(&self) -> Result<(), EtcdError> {
        let mut c = self.client.clone();
        self.call(
            "defragment",
            self.long(),
            async move { c.defragment().await },
        )
        .await?;
        Ok(())
    }

    /// etcd's hash of its key space at `revision` (`HashKV`), with the compaction it was taken
    /// under: what a restore to that revision must reproduce. etcd scans its whole database for
    /// it and holds this member's commits meanwhile, so callers ask a follower, and only when
    /// the database is small or the occasion rare.
    pub async fn hash_kv(&self, revision: i64) -> Result<KeySpaceHash, EtcdError> {
        let mut c = self.client.clone();
        let resp = self
            .call(
                &format!("hash the key space at revision {revision}"),
                self.long(),
                async move { c.hash_kv(revision).await },
            )
            .await?;
        Ok(KeySpaceHash {
            revision,
            compact_revision: resp.compact_version(),
            hash: resp.hash(),
        })
    }

    /// Compacts the key-value history up to `revision` (physically: the call returns once the
    /// space is free for a defragmentation to reclaim).
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let mut c = self.leader_client.clone();
        let options = etcd_client::CompactionOptions::new().with_physical();
        self.call(
            &format!("compact at revision {revision}"),
            self.long(),
            async move { c.compact(revision, Some(options)).await },
        )
        .await?;
        Ok(())
    }

    /// etcd's downgrade API (3.6+, `etcdctl downgrade validate|enable|cancel`): validates or
    /// enables a downgrade of the cluster to `MAJOR.MINOR`, or cancels the one enabled.
    /// Returns the cluster version etcd answers with; etcd's refusal is the error.
    pub async fn downgrade(&self, action: DowngradeCall) -> Result<String, EtcdError> {
        let mut c = self.client.maintenance_client();
        let (what, options) = match &action {
            DowngradeCall::Validate(v) => (
                format!("downgrade validate {v}"),
                etcd_client::DowngradeOptions::Validate(v.clone()),
            ),
            DowngradeCall::Enable(v) => (
                format!("downgrade enable {v}"),
                etcd_client::DowngradeOptions::Enable(v.clone()),
            ),
            DowngradeCall::Cancel => (
                "downgrade cancel".to_string(),
                etcd_client::DowngradeOptions::Cancel,
            ),
        };
        let resp = self
            .call(
                &what,
                self.unary(),
                async move { c.downgrade(options).await },
            )
            .await?;
        Ok(resp.version().to_string())
    }

    /// Hands leadership to member `to`. Must be sent to the current leader (otherwise
    /// [`ErrorKind::NotLeader`]).
    pub async fn move_leader(&self, to: u64) -> Result<(), EtcdError> {
        let mut c = self.client.clone();
        self.call(
            &format!("move leader to {}", format_id(to)),
            self.unary(),
            async move { c.move_leader(to).await },
        )
        .await?;
        Ok(())
    }

    /// Streams a snapshot of this member's backend database. Each chunk must arrive within
    /// the long-request timeout.
    pub async fn snapshot(&self) -> Result<SnapshotStream, EtcdError> {
        let mut c = self.client.clone();
        let stream = self
            .call("snapshot", self.unary(), async move { c.snapshot().await })
            .await?;
        Ok(SnapshotStream::new(
            stream,
            self.endpoint.clone(),
            self.timeouts.long_request,
        ))
    }

    /// The member list from this member's local state (may briefly lag a change applied
    /// elsewhere; rejected by learners on etcd 3.4). Answers without a leader, too.
    pub async fn member_list(&self) -> Result<Vec<Member>, EtcdError> {
        Ok(self.member_list_of_cluster().await?.members)
    }

    /// [`Self::member_list`] with the cluster ID of the answer: a member list is evidence only
    /// about the cluster it came from.
    pub async fn member_list_of_cluster(&self) -> Result<MemberList, EtcdError> {
        let mut c = self.client.clone();
        let resp = self
            .call(
                "member list",
                self.unary(),
                async move { c.member_list().await },
            )
            .await?;
        Ok(MemberList {
            cluster_id: resp.header().map(|h| h.cluster_id()).unwrap_or(0),
            members: members(resp.members()),
        })
    }

    /// Adds a learner with `peer_urls`; returns its new ID and the resulting member list.
    pub async fn add_learner(&self, peer_urls: &[String]) -> Result<(u64, Vec<Member>), EtcdError> {
        let mut c = self.leader_client.clone();
        let urls = peer_urls.to_vec();
        let resp = self
            .call(
                &format!("member add learner {}", peer_urls.join(",")),
                self.unary(),
                async move {
                    c.member_add(urls, Some(MemberAddOptions::new().with_is_learner()))
                        .await
                },
            )
            .await?;
        let id = resp.member().map(|m| m.id()).ok_or_else(|| {
            EtcdError::new(
                ErrorKind::Other,
                "member add learner",
                &self.endpoint,
                "etcd accepted the learner but returned no member; re-read the member list",
            )
        })?;
        Ok((id, members(resp.member_list())))
    }

    /// Promotes learner `id` to a voting member; returns the resulting member list.
    pub async fn promote(&self, id: u64) -> Result<Vec<Member>, EtcdError> {
        let mut c = self.leader_client.clone();
        let resp = self
            .call(
                &format!("member promote {}", format_id(id)),
                self.unary(),
                async move { c.member_promote(id).await },
            )
            .await?;
        Ok(members(resp.members()))
    }

    /// Removes member `id`; returns the resulting member list.
    pub async fn remove(&self, id: u64) -> Result<Vec<Member>, EtcdError> {
        let mut c = self.leader_client.clone();
        let resp = self
            .call(
                &format!("member remove {}", format_id(id)),
                self.unary(),
                async move { c.member_remove(id).await },
            )
            .await?;
        Ok(members(resp.members()))
    }

    /// Replaces member `id`'s peer URLs (e.g. http → https); returns the resulting member list.
    pub async fn update_peer_urls(
        &self,
        id: u64,
        peer_urls: &[String],
    ) -> Result<Vec<Member>, EtcdError> {
        let mut c = self.leader_client.clone();
        let urls = peer_urls.to_vec();
        let resp = self
            .call(
                &format!(
                    "member update {} peer URLs to {}",
                    format_id(id),
                    peer_urls.join(",")
                ),
                self.unary(),
                async move { c.member_update(id, urls).await },
            )
            .await?;
        Ok(members(resp.members()))
    }

    /// Writes `value` at `key`; returns the new store revision.
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<i64, EtcdError> {
        let mut c = self.leader_client.clone();
        let (key, value) = (key.into(), value.into());
        let resp = self
            .call(
                "put",
                self.unary(),
                async move { c.put(key, value, None).await },
            )
            .await?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or_default())
    }

    /// Linearizable read of `key`; `None` when absent.
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<Option<Vec<u8>>, EtcdError> {
        let mut c = self.leader_client.clone();
        let key = key.into();
        let resp = self
            .call("get", self.unary(), async move { c.get(key, None).await })
            .await?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Watches every key from `start_revision` on (etcd replays history from there, then
    /// follows live changes). The watch runs on the leader-requiring connection, so a member
    /// cut off from its quorum ends the stream with `no leader` instead of silently stalling
    /// it. Only opening the stream is time-bounded; the stream itself lasts until dropped.
    ///
    /// Responses may carry many events (etcd sends up to 1000 revisions at once while catching
    /// up), so the decoding limit is raised to what etcd may send; a lower limit would fail the
    /// same response on every retry.
    pub async fn watch_all_from(
        &self,
        start_revision: i64,
    ) -> Result<etcd_client::WatchStream, EtcdError> {
        let mut c = self
            .leader_client
            .watch_client()
            .max_decoding_message_size(i32::MAX as usize);
        let options = WatchOptions::new()
            .with_all_keys()
            .with_start_revision(start_revision);
        self.call(
            &format!("watch all keys from revision {start_revision}"),
            self.unary(),
            async move { c.watch("", Some(options)).await },
        )
        .await
    }

    /// The TTL in seconds lease `id` was granted with, or `None` when no such lease exists
    /// (expired or revoked). etcd 3.4 answers an unknown lease with TTL -1; later versions may
    /// answer `requested lease not found`; both mean `None`.
    pub async fn lease_granted_ttl(&self, id: i64) -> Result<Option<i64>, EtcdError> {
        let mut c = self.leader_client.clone();
        let result = self
            .call(
                &format!("lease time-to-live {}", format_id(id as u64)),
                self.unary(),
                async move { c.lease_time_to_live(id, None).await },
            )
            .await;
        match result {
            Ok(resp) if resp.ttl() < 0 => Ok(None),
            Ok(resp) => Ok(Some(resp.granted_ttl())),
            Err(e) if e.message().contains("lease not found") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Adds two raft entries without touching the keyspace: grants a lease and revokes it
    /// (neither moves the revision). A member run with a low `--snapshot-count` takes its
    /// raft snapshot after a few such entries even when no client writes.
    pub async fn lease_grant_and_revoke(&self) -> Result<(), EtcdError> {
        let mut c = self.leader_client.clone();
        let granted = self
            .call("lease grant", self.unary(), async move {
                c.lease_grant(5, None).await
            })
            .await?;
        let id = granted.id();
        let mut c = self.leader_client.clone();
        self.call(
            &format!("lease revoke {}", format_id(id as u64)),
            self.unary(),
            async move { c.lease_revoke(id).await },
        )
        .await
        .map(|_| ())
    }

    /// Bound for ordinary calls: the first call on a lazy client also pays for connecting.
    fn unary(&self) -> Duration {
        self.connect_allowance() + self.timeouts.request
    }

    fn long(&self) -> Duration {
        self.connect_allowance() + self.timeouts.long_request
    }

    /// Time a call may spend connecting: none while the member answered its last call.
    fn connect_allowance(&self) -> Duration {
        if self.answered.load(Ordering::Relaxed) {
            Duration::ZERO
        } else {
            self.timeouts.connect
        }
    }

    /// Runs one call under a hard time bound and classifies its failure.
    async fn call<T>(
        &self,
        operation: &str,
        limit: Duration,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, EtcdError> {
        let result = match tokio::time::timeout(limit, fut).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                let err = EtcdError::from_client(operation, &self.endpoint, e);
                tracing::debug!(endpoint = %self.endpoint, kind = %err.kind(), "{err}");
                Err(err)
            }
            Err(_) => Err(EtcdError::new(
                ErrorKind::Unreachable,
                operation,
                &self.endpoint,
                format!("no answer within {limit:?}"),
            )),
        };
        let answered = !matches!(&result, Err(e) if e.kind() == ErrorKind::Unreachable);
        self.answered.store(answered, Ordering::Relaxed);
        result
    }
}

async fn lazy_client(
    url: &str,
    options: etcd_client::ConnectOptions,
    limit: Duration,
) -> Result<Client, EtcdError> {
    match tokio::time::timeout(limit, Client::connect([url], Some(options))).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(EtcdError::from_client("connect", url, e)),
        Err(_) => Err(EtcdError::new(
            ErrorKind::Unreachable,
            "connect",
            url,
            format!("no connection within {limit:?}"),
        )),
    }
}
