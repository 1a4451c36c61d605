//! Cluster-wide calls with failover across endpoints.
//!
//! etcd-client's own multi-endpoint channel round-robins without failover (a dead endpoint
//! fails its share of calls), so this client holds one [`MemberClient`] per endpoint and tries
//! them in turn, starting with the one that last answered.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::config::{EtcdEndpoints, EtcdTimeouts, EtcdTls};
use crate::error::{ErrorKind, EtcdError};
use crate::member::MemberClient;
use crate::types::{Member, MemberStatus, format_id};

/// Client for cluster-wide calls (membership, reads, writes) that fails over between
/// endpoints.
///
/// Failover happens only for endpoint-specific failures ([`ErrorKind::is_endpoint_specific`]:
/// unreachable, no leader, learner, transient). When a mutation timed out on one endpoint it
/// may still have been applied, so a retry on the next endpoint can report the change as
/// already made (`PeerUrlExists` after an add, `MemberNotLearner` after a promote,
/// `MemberNotFound` after a remove); callers re-read the member list rather than trust a
/// single answer.
#[derive(Debug)]
pub struct ClusterClient {
    members: Vec<MemberClient>,
    preferred: AtomicUsize,
    /// Members whose last call got no answer at all (refused, timed out): asked only after
    /// the others, until one of their calls is answered again. A member on a vanished node
    /// times out every call; asking it first each time would spend a whole request timeout
    /// per call while the others could answer.
    unanswered: Vec<AtomicBool>,
}

impl ClusterClient {
    /// A client over `urls`. Connections are lazy, so this fails only for unusable URLs or
    /// TLS material, or when `urls` is empty.
    pub async fn new(
        urls: &[String],
        tls: Option<&EtcdTls>,
        timeouts: EtcdTimeouts,
    ) -> Result<ClusterClient, EtcdError> {
        if urls.is_empty() {
            return Err(EtcdError::new(
                ErrorKind::InvalidConfig,
                "connect",
                "(no endpoints)",
                "a cluster client needs at least one endpoint URL",
            ));
        }
        let mut members = Vec::with_capacity(urls.len());
        for url in urls {
            members.push(MemberClient::connect(url, tls, timeouts).await?);
        }
        Ok(ClusterClient {
            unanswered: members.iter().map(|_| AtomicBool::new(false)).collect(),
            members,
            preferred: AtomicUsize::new(0),
        })
    }

    /// Asks every member for its status at once, so each live member's connection is made
    /// now and its later calls get the request bound alone (see [`MemberClient`]), as an etcd
    /// client keeps a connection to every endpoint. Without it, the first call to a member
    /// came during a failover and got the connect allowance too: a follower holding a write
    /// its dead leader never answered then cost 3 s instead of 1 (CI's scenario 14, one
    /// failed canary write). Failures only mark the member as not answering.
    pub async fn connect_all(&self) {
        let answers =
            futures::future::join_all(self.members.iter().map(|m| async move { m.status().await }))
                .await;
        for (i, answer) in answers.iter().enumerate() {
            self.note_answer(i, answer);
        }
    }

    /// Records whether member `i` answered `answer` at all (an error of its own counts as an
    /// answer); returns true when it did not.
    fn note_answer<T>(&self, i: usize, answer: &Result<T, EtcdError>) -> bool {
        let unanswered = matches!(answer, Err(e) if e.kind() == ErrorKind::Unreachable);
        self.unanswered[i].store(unanswered, Ordering::Relaxed);
        unanswered
    }

    /// A client from an [`EtcdEndpoints`] configuration.
    pub async fn from_endpoints(endpoints: &EtcdEndpoints) -> Result<ClusterClient, EtcdError> {
        Self::new(&endpoints.urls, endpoints.tls.as_ref(), endpoints.timeouts).await
    }

    /// The endpoint URLs, in configuration order.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| m.endpoint().to_string())
            .collect()
    }

    /// One client per endpoint, for per-member calls.
    pub fn member_clients(&self) -> &[MemberClient] {
        &self.members
    }

    /// The member list as the answering member knows it. etcd serves it from local state, so
    /// right after a change made through another member it may briefly lag; the lists
    /// returned by the mutating calls come from the member that applied the change.
    pub async fn member_list(&self) -> Result<Vec<Member>, EtcdError> {
        self.with_failover("member list", |m| async move { m.member_list().await })
            .await
    }

    /// Adds a learner with `peer_urls`; returns its ID and the resulting member list.
    pub async fn add_learner(&self, peer_urls: &[String]) -> Result<(u64, Vec<Member>), EtcdError> {
        self.with_failover("member add learner", |m| async move {
            m.add_learner(peer_urls).await
        })
        .await
    }

    /// Promotes learner `id`; returns the resulting member list.
    pub async fn promote(&self, id: u64) -> Result<Vec<Member>, EtcdError> {
        self.with_failover("member promote", |m| async move { m.promote(id).await })
            .await
    }

    /// Removes member `id`; returns the resulting member list.
    pub async fn remove(&self, id: u64) -> Result<Vec<Member>, EtcdError> {
        self.with_failover("member remove", |m| async move { m.remove(id).await })
            .await
    }

    /// Replaces member `id`'s peer URLs; returns the resulting member list.
    pub async fn update_peer_urls(
        &self,
        id: u64,
        peer_urls: &[String],
    ) -> Result<Vec<Member>, EtcdError> {
        self.with_failover("member update", |m| async move {
            m.update_peer_urls(id, peer_urls).await
        })
        .await
    }

    /// Writes `value` at `key`; returns the new revision.
    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<i64, EtcdError> {
        self.with_failover("put", |m| async move { m.put(key, value).await })
            .await
    }

    /// Linearizable read of `key`.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EtcdError> {
        self.with_failover("get", |m| async move { m.get(key).await })
            .await
    }

    /// Status of every endpoint, queried concurrently, in endpoint order.
    pub async fn statuses(&self) -> Vec<Result<MemberStatus, EtcdError>> {
        futures::future::join_all(self.members.iter().map(|m| m.status())).await
    }

    /// The client of the current leader, with its status.
    pub async fn leader(&self) -> Result<(MemberClient, MemberStatus), EtcdError> {
        let statuses = self.statuses().await;
        let mut known_leader = None;
        let mut failures = Vec::new();
        for (client, status) in self.members.iter().zip(statuses) {
            match status {
                Ok(status) if status.is_leader() => return Ok((client.clone(), status)),
                Ok(status) if status.has_leader() => known_leader = Some(status.leader_id),
                Ok(status) => failures.push(format!(
                    "{}: member {} knows no leader",
                    status.endpoint,
                    format_id(status.member_id)
                )),
                Err(e) => failures.push(format!("{}: {}", e.endpoint(), e.message())),
            }
        }
        let (kind, message) = match known_leader {
            Some(id) => (
                ErrorKind::Other,
                format!(
                    "the leader is member {}, whose endpoint is not among this client's",
                    format_id(id)
                ),
            ),
            None if failures.iter().all(|f| !f.contains("knows no leader")) => {
                (ErrorKind::Unreachable, failures.join("; "))
            }
            None => (ErrorKind::NoLeader, failures.join("; ")),
        };
        Err(EtcdError::new(
            kind,
            "find leader",
            self.endpoints_label(),
            message,
        ))
    }

    /// Transfers leadership to member `to` (sent to the current leader); a no-op when `to`
    /// already leads.
    pub async fn move_leader(&self, to: u64) -> Result<(), EtcdError> {
        let (leader, status) = self.leader().await?;
        if status.member_id == to {
            return Ok(());
        }
        leader.move_leader(to).await
    }

    /// Runs `call` against each endpoint in turn until one gives an answer that is not
    /// endpoint-specific.
    async fn with_failover<'a, T, F, Fut>(
        &'a self,
        operation: &str,
        call: F,
    ) -> Result<T, EtcdError>
    where
        F: Fn(&'a MemberClient) -> Fut,
        Fut: Future<Output = Result<T, EtcdError>> + 'a,
    {
        let mut failures = Vec::new();
        for (k, i) in self.order().into_iter().enumerate() {
            let answer = call(&self.members[i]).await;
            if self.note_answer(i, &answer) && k == 0 {
                // The next call starts with the next member, also when none answers now (all
                // are then last alike): the one asked first in vain is not asked first again.
                self.preferred
                    .store((i + 1) % self.members.len(), Ordering::Relaxed);
            }
            match answer {
                Ok(value) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(value);
                }
                Err(e) if e.kind().is_endpoint_specific() => {
                    tracing::debug!(endpoint = %e.endpoint(), kind = %e.kind(), "{operation}: trying next endpoint");
                    failures.push(e);
                }
                Err(e) => {
                    // The member answered; its answer stands for the cluster.
                    self.preferred.store(i, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Err(self.all_failed(operation, failures))
    }

    /// The order to ask the members in: from the preferred one on, those whose last call got
    /// no answer at the end.
    fn order(&self) -> Vec<usize> {
        let n = self.members.len();
        let start = self.preferred.load(Ordering::Relaxed) % n;
        let mut order: Vec<usize> = (0..n).map(|k| (start + k) % n).collect();
        order.sort_by_key(|&i| self.unanswered[i].load(Ordering::Relaxed));
        order
    }

    fn all_failed(&self, operation: &str, failures: Vec<EtcdError>) -> EtcdError {
        // A member that answered (no leader, learner, timed out) says more than a refused
        // connection.
        let kind = failures
            .iter()
            .map(|e| e.kind())
            .find(|k| *k != ErrorKind::Unreachable)
            .unwrap_or(ErrorKind::Unreachable);
        let message = failures
            .iter()
            .map(|e| format!("{}: {}", e.endpoint(), e.message()))
            .collect::<Vec<_>>()
            .join("; ");
        EtcdError::new(kind, operation, self.endpoints_label(), message)
    }

    fn endpoints_label(&self) -> String {
        format!("all endpoints [{}]", self.endpoints().join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn client_over(n: usize) -> ClusterClient {
        let urls: Vec<String> = (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 1 + i))
            .collect();
        ClusterClient::new(&urls, None, EtcdTimeouts::default())
            .await
            .expect("lazy clients")
    }

    /// etcd checks "connected to a quorum for 5 s" on the member that receives a membership
    /// change, against its own view of its peers: in e2e s3 a leader kept a replaced pod's peer
    /// marked inactive and refused 4,925 learner adds that the other voter would have taken.
    #[tokio::test]
    async fn unhealthy_cluster_from_one_member_asks_the_next() {
        let client = client_over(3).await;
        let asked = std::sync::Mutex::new(Vec::new());
        let answer = client
            .with_failover("member add learner", |m| {
                let endpoint = m.endpoint().to_string();
                asked.lock().unwrap().push(endpoint.clone());
                async move {
                    if endpoint.ends_with(":1") {
                        Err(EtcdError::new(
                            ErrorKind::UnhealthyCluster,
                            "member add learner",
                            endpoint,
                            "etcdserver: unhealthy cluster",
                        ))
                    } else {
                        Ok(endpoint)
                    }
                }
            })
            .await;
        assert_eq!(answer.unwrap(), "http://127.0.0.1:2");
        assert_eq!(asked.lock().unwrap().len(), 2);
        // The member that took it is asked first next time.
        assert_eq!(client.preferred.load(Ordering::Relaxed), 1);
    }

    /// A member that stops answering (its node vanished: every call times out) is asked last
    /// from then on, so the next calls go to members that answer, until it answers again.
    #[tokio::test]
    async fn a_member_that_did_not_answer_is_asked_last_until_it_answers() {
        let client = client_over(3).await;
        // :1 is gone (times out), :2 has no leader yet, :3 answers; later :1 is back and :3
        // has no leader.
        async fn call(
            client: &ClusterClient,
            asked: &std::sync::Mutex<Vec<String>>,
            back: bool,
        ) -> Result<String, EtcdError> {
            client
                .with_failover("put", |m| {
                    let endpoint = m.endpoint().to_string();
                    asked.lock().unwrap().push(endpoint.clone());
                    async move {
                        let no_leader =
                            endpoint.ends_with(":2") || (back && endpoint.ends_with(":3"));
                        if endpoint.ends_with(":1") && !back {
                            Err(EtcdError::new(
                                ErrorKind::Unreachable,
                                "put",
                                endpoint,
                                "Timeout expired",
                            ))
                        } else if no_leader {
                            Err(EtcdError::new(
                                ErrorKind::NoLeader,
                                "put",
                                endpoint,
                                "etcdserver: no leader",
                            ))
                        } else {
                            Ok(endpoint)
                        }
                    }
                })
                .await
        }
        let asked = std::sync::Mutex::new(Vec::new());
        assert_eq!(
            call(&client, &asked, false).await.unwrap(),
            "http://127.0.0.1:3"
        );
        assert_eq!(
            asked.lock().unwrap().len(),
            3,
            "the first call tried all three"
        );
        // The preferred member is :3 now; make the next call start at the dead one.
        client.preferred.store(0, Ordering::Relaxed);
        let asked = std::sync::Mutex::new(Vec::new());
        assert_eq!(
            call(&client, &asked, false).await.unwrap(),
            "http://127.0.0.1:3"
        );
        assert_eq!(
            *asked.lock().unwrap(),
            ["http://127.0.0.1:2", "http://127.0.0.1:3"],
            "the member that did not answer is not asked while others answer"
        );
        // Still asked when the others do not do: it answers, and is no longer put last.
        let asked = std::sync::Mutex::new(Vec::new());
        assert_eq!(
            call(&client, &asked, true).await.unwrap(),
            "http://127.0.0.1:1"
        );
        assert_eq!(asked.lock().unwrap().last().unwrap(), "http://127.0.0.1:1");
        assert_eq!(client.order(), [0, 1, 2]);
    }

    /// While no member answers (a leader's node vanished, the followers still forward to it),
    /// each call starts one member further on: the next round does not begin with the member
    /// that failed first again.
    #[tokio::test]
    async fn when_no_member_answers_the_next_call_starts_further_on() {
        let client = client_over(3).await;
        let first = || async {
            let asked = std::sync::Mutex::new(Vec::new());
            let _ = client
                .with_failover("put", |m| {
                    let endpoint = m.endpoint().to_string();
                    asked.lock().unwrap().push(endpoint.clone());
                    async move {
                        Err::<(), _>(EtcdError::new(
                            ErrorKind::Unreachable,
                            "put",
                            endpoint,
                            "Timeout expired",
                        ))
                    }
                })
                .await;
            asked.into_inner().unwrap()[0].clone()
        };
        assert_eq!(first().await, "http://127.0.0.1:1");
        assert_eq!(first().await, "http://127.0.0.1:2");
        assert_eq!(first().await, "http://127.0.0.1:3");
    }

    /// A refusal every member gives stays a wait the caller recognises, naming each endpoint.
    #[tokio::test]
    async fn unhealthy_cluster_from_every_member_stays_unhealthy_cluster() {
        let client = client_over(2).await;
        let err = client
            .with_failover("member add learner", |m| {
                let endpoint = m.endpoint().to_string();
                async move {
                    Err::<(), _>(EtcdError::new(
                        ErrorKind::UnhealthyCluster,
                        "member add learner",
                        endpoint,
                        "etcdserver: unhealthy cluster",
                    ))
                }
            })
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnhealthyCluster);
        assert!(err.is_retryable());
        assert!(err.message().contains("127.0.0.1:1"), "{err}");
        assert!(err.message().contains("127.0.0.1:2"), "{err}");
    }
}
