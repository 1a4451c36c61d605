//! The backup leader records etcd's hash of the key space (`HashKV`) at a stored snapshot's
//! revision beside the snapshots (`quorate_backup::store::HashRecord`), asking the member core
//! `backup_hash` chooses. A restore to that revision then proves it rebuilt the same key
//! space. Recording is best effort: a hash that cannot be taken is logged and the backups go on
//! (a restore without a record says it was not verified).

use std::time::Duration;

use quorate_backup::store::{HashRecord, SnapStore, StoreError};
use quorate_core::backup_hash::{HashCandidate, HashOccasion, HashSource, hash_source};
use quorate_core::cluster_config::ClusterConfig;
use quorate_etcd::{EtcdError, EtcdTimeouts, MemberClient};
use thiserror::Error;

/// How long one recording may take in all (status of every member, the hash, the upload).
const RECORD_TIMEOUT: Duration = Duration::from_secs(60);

/// Records etcd's hash at `revision` for the snapshot stored at it.
pub async fn record_hash(
    cluster: &ClusterConfig,
    me: &str,
    store: &SnapStore,
    revision: i64,
    occasion: HashOccasion,
) {
    let outcome = tokio::time::timeout(
        RECORD_TIMEOUT,
        try_record(cluster, me, store, revision, occasion),
    )
    .await
    .unwrap_or(Err(RecordError::Timeout(RECORD_TIMEOUT)));
    match outcome {
        Ok(Some(record)) => {
            tracing::debug!(member = %me, revision, hash = record.hash, by = %record.member, "key-space hash recorded");
        }
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(member = %me, revision, %error, "recording etcd's key-space hash failed; a restore to this revision will not be verified");
        }
    }
}

/// Why a hash was not recorded (a member that could not be asked is left out before
/// [`hash_source`] chooses; when it chooses none, nothing is recorded and that is no failure).
#[derive(Debug, Error)]
enum RecordError {
    /// The whole recording took longer than [`RECORD_TIMEOUT`].
    #[error("no answer within {}s", .0.as_secs())]
    Timeout(Duration),
    /// The chosen member did not hash its key space.
    #[error("{member} did not hash the key space: {source}")]
    Hash {
        /// The member asked.
        member: String,
        /// etcd's error (its class says whether waiting would help).
        source: EtcdError,
    },
    /// The record could not be stored.
    #[error("storing the record failed: {0}")]
    Store(#[from] StoreError),
}

async fn try_record(
    cluster: &ClusterConfig,
    me: &str,
    store: &SnapStore,
    revision: i64,
    occasion: HashOccasion,
) -> Result<Option<HashRecord>, RecordError> {
    let tls = quorate_etcd::client_tls(cluster);
    let members: Vec<_> = cluster
        .members
        .iter()
        .filter(|m| !cluster.is_leaving(&m.name))
        .collect();
    let answers = futures::future::join_all(members.iter().map(|m| {
        let tls = tls.clone();
        async move {
            let client =
                MemberClient::connect(&m.client_url, tls.as_ref(), EtcdTimeouts::default())
                    .await
                    .ok()?;
            let status = client.status().await.ok()?;
            Some((m.name.clone(), client, status))
        }
    }))
    .await;
    let answered: Vec<_> = answers.into_iter().flatten().collect();
    let candidates: Vec<HashCandidate> = answered
        .iter()
        .map(|(name, _, status)| HashCandidate {
            is_self: name == me,
            is_learner: status.is_learner,
            has_leader: status.has_leader(),
            revision: status.revision,
            db_size: status.db_size,
        })
        .collect();
    let index = match hash_source(&candidates, revision, occasion) {
        HashSource::Ask(index) => index,
        HashSource::Skip(why) => {
            tracing::debug!(member = %me, revision, %why, "key-space hash not taken");
            return Ok(None);
        }
    };
    let (name, client, _) = &answered[index];
    let answer = client
        .hash_kv(revision)
        .await
        .map_err(|source| RecordError::Hash {
            member: name.clone(),
            source,
        })?;
    let record = HashRecord::new(answer, name, crate::clock::now().to_string());
    store.put_hash_record(&record).await?;
    Ok(Some(record))
}
