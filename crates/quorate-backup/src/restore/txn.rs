//! The fallback applier ([`super::ReplayMethod::Txn`]): a temporary etcd started on the
//! restored full snapshot receives one txn per source revision while every lease is kept alive
//! ([`super::leases`]); etcd's resulting revision must be the source's. A member of a
//! multi-member `initial-cluster` cannot run alone on its data (it would wait for a quorum), so
//! for such identities the replay runs in a single-member scratch copy, snapshotted and restored
//! once more with the real identity.

use std::collections::HashSet;

use etcd_client::{Client, LeaseGrantOptions, PutOptions, Txn, TxnOp};
use tokio::io::AsyncWriteExt;

use super::apply::{Applier, Landed, Landing, Pending, ReplayError};
use super::finish::{member_db, verify_file};
use super::leases::LeaseKeepalive;
use super::temp_etcd::{TempEtcd, TempEtcdConfig};
use super::tools::{self, MemberIdentity};
use super::{RestoreError, RestoreOptions, swap};
use crate::delta::EVENT_DELETE;

/// The scratch member's name in a replay that runs apart from the real identity.
const SCRATCH_NAME: &str = "quorate-restore";

/// One txn per revision through a running etcd's API.
pub struct TxnApplier {
    etcd: TempEtcd,
    client: Client,
    /// The etcd runs on `part` itself (a single-member identity), not on a scratch copy.
    single: bool,
    no_fsync: bool,
    head: i64,
    leases: HashSet<i64>,
    keepalive: LeaseKeepalive,
    default_lease_ttl: i64,
}

impl std::fmt::Debug for TxnApplier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnApplier")
            .field("etcd", &self.etcd)
            .field("single", &self.single)
            .field("head", &self.head)
            .field("leases", &self.leases.len())
            .finish()
    }
}

impl TxnApplier {
    /// Restores the full snapshot `db` where the replay runs (`part` for a single member, else
    /// a scratch copy in `work`), starts a temporary etcd on it, reads its head revision and
    /// starts renewing all its leases at once.
    pub async fn start(
        options: &RestoreOptions,
        tools: &tools::EtcdTools,
        db: &std::path::Path,
        full_name: &str,
        member: &MemberIdentity,
        part: &std::path::Path,
        work: &std::path::Path,
    ) -> Result<TxnApplier, RestoreError> {
        let scratch_dir = work.join("replay");
        let scratch_peer = "http://127.0.0.1:2380";
        let single = member.cluster_size() == 1;
        let (dir, identity) = if single {
            (part.to_path_buf(), member.clone())
        } else {
            (
                scratch_dir,
                MemberIdentity {
                    name: SCRATCH_NAME.to_string(),
                    peer_urls: vec![scratch_peer.to_string()],
                    initial_cluster: format!("{SCRATCH_NAME}={scratch_peer}"),
                    cluster_token: SCRATCH_NAME.to_string(),
                },
            )
        };
        tools::snapshot_restore(
            tools,
            db,
            full_name,
            &identity,
            &dir,
            options.skip_hash_check,
        )
        .await?;
        let mut config =
            TempEtcdConfig::new(&tools.etcd, &dir, &identity.name, &work.join("etcd.log"));
        config.quota_backend_bytes = options.quota_backend_bytes;
        config.start_timeout = options.etcd_start_timeout;
        config.no_fsync = tools::etcd_version(&tools.etcd)
            .await
            .is_some_and(|version| version >= (3, 5));
        let no_fsync = config.no_fsync;
        let (etcd, client) = TempEtcd::start(config).await?;

        let etcd_err = |operation, message: String| ReplayError::Etcd {
            operation,
            object: full_name.to_string(),
            revision: 0,
            message,
        };
        let mut c = client.clone();
        let leases: HashSet<i64> = c
            .leases()
            .await
            .map_err(|e| etcd_err("listing leases", e.to_string()))?
            .leases()
            .iter()
            .map(|l| l.id())
            .collect();
        let keepalive =
            LeaseKeepalive::start(client.clone(), leases.iter().copied().collect()).await;
        let head = head_revision(&mut c)
            .await
            .map_err(|e| etcd_err("reading the head revision", e))?;
        Ok(TxnApplier {
            etcd,
            client,
            single,
            no_fsync,
            head,
            leases,
            keepalive,
            default_lease_ttl: options.default_lease_ttl,
        })
    }

    /// Grants lease `id` unless the target has it (granting does not change the revision);
    /// returns how many leases were granted.
    async fn ensure_lease(&mut self, id: i64, ttl: Option<i64>) -> Result<u64, String> {
        if self.leases.contains(&id) {
            return Ok(0);
        }
        let ttl = ttl.filter(|t| *t > 0).unwrap_or(self.default_lease_ttl);
        let granted = match self
            .client
            .lease_grant(ttl, Some(LeaseGrantOptions::new().with_id(id)))
            .await
        {
            Ok(_) => 1,
            Err(e) if e.to_string().contains("lease already exists") => 0,
            Err(e) => return Err(format!("lease {id:x} with TTL {ttl}s: {e}")),
        };
        self.leases.insert(id);
        self.keepalive.add(id);
        Ok(granted)
    }
}

impl Applier for TxnApplier {
    fn head(&self) -> i64 {
        self.head
    }

    /// Applies one revision as one txn and checks etcd's revision after it.
    async fn apply(&mut self, pending: &Pending) -> Result<u64, ReplayError> {
        let etcd_err = |operation, message: String| ReplayError::Etcd {
            operation,
            object: pending.object.clone(),
            revision: pending.revision,
            message,
        };
        let mut granted = 0;
        let mut ops = Vec::with_capacity(pending.events.len());
        for event in &pending.events {
            let kv = event.etcd_event.kv.as_ref().expect("validated");
            if event.etcd_event.kind == EVENT_DELETE {
                ops.push(TxnOp::delete(kv.key.clone(), None));
                continue;
            }
            let options = if kv.lease != 0 {
                granted += self
                    .ensure_lease(kv.lease, event.lease_ttl)
                    .await
                    .map_err(|e| etcd_err("granting the key's lease", e))?;
                Some(PutOptions::new().with_lease(kv.lease))
            } else {
                None
            };
            ops.push(TxnOp::put(kv.key.clone(), kv.value.clone(), options));
        }
        let response = self
            .client
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(|e| etcd_err("the txn", e.to_string()))?;
        let actual = response.header().map_or(0, |h| h.revision());
        if actual != pending.revision {
            return Err(ReplayError::RevisionMismatch {
                object: pending.object.clone(),
                expected: pending.revision,
                actual,
            });
        }
        self.head = actual;
        Ok(granted)
    }

    /// Stops renewing leases; a single member's etcd is stopped on `part` (synced once when it
    /// ran without fsync), a scratch member is snapshotted and restored with the real identity.
    async fn finish(self, landing: &Landing<'_>, replayed: i64) -> Result<Landed, RestoreError> {
        let TxnApplier {
            etcd,
            client,
            single,
            no_fsync,
            keepalive,
            ..
        } = self;
        drop(keepalive);
        let part = landing.part;
        if single {
            drop(client);
            etcd.stop().await?;
            if no_fsync {
                swap::sync_tree(part).map_err(|source| RestoreError::Io {
                    data_dir: part.display().to_string(),
                    what: format!("sync {}", part.display()),
                    source,
                })?;
            }
        } else {
            let replayed_db = landing.work.join("replayed.db");
            snapshot_to_file(client, &replayed_db).await?;
            etcd.stop().await?;
            tools::snapshot_restore(
                landing.tools,
                &replayed_db,
                landing.label,
                landing.member,
                part,
                false,
            )
            .await?;
        }
        Ok(Landed {
            restored_revision: replayed,
            verification: verify_file(member_db(part), replayed, landing.options).await?,
        })
    }
}

/// The etcd's current revision.
async fn head_revision(client: &mut Client) -> Result<i64, String> {
    let status = client.status().await.map_err(|e| e.to_string())?;
    Ok(status.header().map_or(0, |h| h.revision()))
}

/// Streams a snapshot of the etcd behind `client` to `path`.
async fn snapshot_to_file(mut client: Client, path: &std::path::Path) -> Result<(), RestoreError> {
    let err = |message: String| RestoreError::Snapshot { message };
    let mut stream = client
        .snapshot()
        .await
        .map_err(|e| err(format!("starting the snapshot: {e}")))?;
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(|e| err(format!("create {}: {e}", path.display())))?;
    while let Some(message) = stream
        .message()
        .await
        .map_err(|e| err(format!("receiving the snapshot: {e}")))?
    {
        file.write_all(message.blob())
            .await
            .map_err(|e| err(format!("write {}: {e}", path.display())))?;
    }
    file.sync_all()
        .await
        .map_err(|e| err(format!("sync {}: {e}", path.display())))
}
