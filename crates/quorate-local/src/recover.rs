//! `quorate recover NAME`: the explicit trigger for quorum-loss recovery. Without `--yes` it
//! says which member recovery would use and at which revision (the same decision the agents
//! make, with unreachable members treated as lost); with `--yes` it puts the `quorate.io/recover`
//! annotation on the stored `Etcd`, which reaches the agents through the cluster configuration,
//! and the chosen member's agent carries the recovery out once.

use crate::LocalError;
use crate::commands::LocalContext;
use crate::object;
use crate::render::read_config;
use quorate_coord::{Coordination, FileCoordination};
use quorate_core::membership::data_state::DataState;
use quorate_core::membership::recovery::{
    EtcdAnswer, RecoveryDecision, VoterReport, decide_recovery,
};
use quorate_etcd::{EtcdTimeouts, MemberClient};

/// What recovery of cluster `name` would do now, in words.
pub async fn plan(ctx: &LocalContext, name: &str) -> Result<RecoveryDecision, LocalError> {
    let dir = ctx.existing(name)?;
    let config = read_config(&dir)?;
    let leases = FileCoordination::new(dir.root()).member_leases().await?;
    let tls = quorate_etcd::client_tls(&config);
    let timeouts = EtcdTimeouts::fast();
    let mut list = None;
    for url in config.client_urls() {
        if let Ok(client) = MemberClient::connect(&url, tls.as_ref(), timeouts).await
            && let Ok(l) = client.member_list_of_cluster().await
        {
            list = Some(l);
            break;
        }
    }
    let Some(list) = list else {
        return Ok(RecoveryDecision::Wait(
            "no member's etcd answers: there is no member with data to recover from; when every \
             member lost its data, the first member restores the bucket by itself"
                .into(),
        ));
    };
    let mut reports = Vec::new();
    for member in list.members.into_iter().filter(|m| !m.is_learner) {
        let desired = config.members.iter().find(|d| d.name == member.name);
        let url = member
            .client_urls
            .first()
            .cloned()
            .or_else(|| desired.map(|d| d.client_url.clone()));
        let mut answer = None;
        if let Some(url) = url
            && let Ok(client) = MemberClient::connect(&url, tls.as_ref(), timeouts).await
            && let Ok(s) = client.status().await
            && s.cluster_id == list.cluster_id
        {
            answer = Some(EtcdAnswer {
                cluster_id: s.cluster_id,
                member_id: s.member_id,
                revision: s.revision,
                leader_id: s.leader_id,
            });
        }
        let data = desired
            .and_then(|d| leases.iter().find(|l| l.name == d.lease_name))
            .and_then(DataState::of_lease);
        reports.push(VoterReport {
            member,
            data,
            answer,
        });
    }
    Ok(decide_recovery(&reports, None, true))
}

/// Asks the agents of cluster `name` to recover; returns the request's ID.
pub fn request(ctx: &LocalContext, name: &str) -> Result<String, LocalError> {
    object::request(
        &ctx.existing(name)?,
        quorate_api::annotations::RECOVER,
        "recover",
    )
}
