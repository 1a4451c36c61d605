//! `quorate members`: etcd's own view of the membership, with each member's health, the
//! leader and the etcd version it runs, asked of the members themselves.

use crate::LocalError;
use crate::commands::LocalContext;
use crate::render::read_config;
use quorate_etcd::{ClusterClient, EtcdTimeouts, MemberClient};

/// The member table of cluster `name`.
pub async fn members_table(ctx: &LocalContext, name: &str) -> Result<String, LocalError> {
    let dir = crate::commands::awake(ctx, name)?;
    let config = read_config(&dir)?;
    let timeouts = EtcdTimeouts::fast();
    let tls = quorate_etcd::client_tls(&config);
    let members = ClusterClient::new(&config.client_urls(), tls.as_ref(), timeouts)
        .await?
        .member_list()
        .await?;
    let mut leader = None;
    let mut rows = vec![
        [
            "ID",
            "NAME",
            "PEER URLS",
            "CLIENT URLS",
            "LEADER",
            "LEARNER",
            "HEALTHY",
            "VERSION",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let mut health = Vec::new();
    for m in &members {
        let status = match m.client_urls.first() {
            Some(url) => match MemberClient::connect(url, tls.as_ref(), timeouts).await {
                Ok(client) => client.status().await.ok(),
                Err(_) => None,
            },
            None => None,
        };
        if let Some(s) = &status
            && s.leader_id != 0
        {
            leader = Some(s.leader_id);
        }
        health.push((
            status.as_ref().is_some_and(|s| s.leader_id != 0),
            status.map_or_else(|| "-".to_string(), |s| s.version),
        ));
    }
    for (m, (healthy, version)) in members.iter().zip(health) {
        rows.push(vec![
            format!("{:x}", m.id),
            if m.name.is_empty() {
                "(not started)".into()
            } else {
                m.name.clone()
            },
            m.peer_urls.join(","),
            m.client_urls.join(","),
            (leader == Some(m.id)).to_string(),
            m.is_learner.to_string(),
            healthy.to_string(),
            version,
        ]);
    }
    Ok(crate::table::format_columns(&rows))
}
