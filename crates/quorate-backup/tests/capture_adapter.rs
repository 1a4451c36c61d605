//! The two etcd calls delta capture adds to `MemberClient`, against real etcd: a watch over
//! all keys from a past revision, and the granted TTL of a lease.

mod capture_common;

use capture_common::{PATIENCE, head, member_client, raw_client};
use etcd_client::{EventType, PutOptions};
use quorate_etcd::ErrorKind;
use quorate_testkit::EtcdTestCluster;

#[tokio::test]
async fn watch_all_from_replays_history_of_every_key() {
    let cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let mut etcd = raw_client(&cluster.client_urls()).await;
    etcd.put("before", "0", None).await.unwrap();
    let from = head(&member).await + 1;
    etcd.put("a", "1", None).await.unwrap();
    etcd.put("zz/b", "2", None).await.unwrap();
    etcd.delete("a", None).await.unwrap();

    let mut stream = member.watch_all_from(from).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let response = tokio::time::timeout(PATIENCE, stream.message())
            .await
            .unwrap()
            .unwrap()
            .expect("stream open");
        for event in response.events() {
            let kv = event.kv().unwrap();
            seen.push((
                event.event_type(),
                kv.key_str().unwrap().to_string(),
                kv.mod_revision(),
            ));
        }
    }
    assert_eq!(
        seen,
        vec![
            (EventType::Put, "a".into(), from),
            (EventType::Put, "zz/b".into(), from + 1),
            (EventType::Delete, "a".into(), from + 2),
        ]
    );
}

#[tokio::test]
async fn lease_granted_ttl_is_none_for_unknown_and_revoked_leases() {
    let mut cluster = EtcdTestCluster::start(1).await;
    let member = member_client(&cluster.member(0).client_url()).await;
    let mut etcd = raw_client(&cluster.client_urls()).await;
    let id = etcd.lease_grant(77, None).await.unwrap().id();
    etcd.put("leased", "v", Some(PutOptions::new().with_lease(id)))
        .await
        .unwrap();
    assert_eq!(member.lease_granted_ttl(id).await.unwrap(), Some(77));
    assert_eq!(member.lease_granted_ttl(0x5eed).await.unwrap(), None);
    etcd.lease_revoke(id).await.unwrap();
    assert_eq!(member.lease_granted_ttl(id).await.unwrap(), None);

    cluster.member_mut(0).kill();
    let err = member.lease_granted_ttl(id).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
    let err = member.watch_all_from(1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
}
