//! `kubectl quorate members NAME`: each member as its agent publishes it on its lease (holder
//! identity: etcd member and cluster ID, role; annotations: version, data state, what it waits
//! for) and as the operator's status reports its readiness.

use crate::output::{self, OutputFormat, Printed};
use crate::{Io, KubectlError, Target};
use quorate_api::Etcd;
use quorate_api::printer::{format_columns, human_duration};
use quorate_coord::{Coordination, KubeCoordination};
use quorate_core::lease::MemberLease;
use serde_json::{Value, json};

/// One member's row, as `-o json` prints it.
pub fn member_value(etcd: &Etcd, lease: &MemberLease) -> Value {
    let holder = lease.holder().and_then(Result::ok);
    let status = etcd
        .status
        .as_ref()
        .and_then(|s| s.members.iter().find(|m| m.name == lease.name));
    let published: serde_json::Map<String, Value> = lease
        .annotations
        .iter()
        .map(|(k, v)| {
            let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.clone()));
            (k.clone(), value)
        })
        .collect();
    json!({
        "name": lease.name,
        "id": holder.as_ref().map(|h| format!("{:x}", h.member_id)),
        "clusterId": holder.as_ref().and_then(|h| h.cluster_id).map(|c| format!("{c:x}")),
        "role": holder.as_ref().map(|h| quorate_core::lease::role_str(h.role)),
        "ready": status.map(|s| s.status),
        "reason": status.map(|s| s.reason.clone()),
        "etcdVersion": lease.annotations.get("quorate.io/etcd-version"),
        "renewTime": lease.renew_time,
        "published": published,
    })
}

/// The member leases of an Etcd that belong to its members (`<name>-<i>` for `i` below
/// `spec.replicas`, plus any other lease of the Etcd still there, e.g. a leaving member's).
pub async fn leases(target: &Target, etcd: &Etcd) -> Result<Vec<MemberLease>, KubectlError> {
    let namespace = etcd
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| target.namespace.clone());
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let coordination = KubeCoordination::new(target.client.clone(), namespace, name);
    Ok(coordination.member_leases().await?)
}

/// Prints the members of Etcd `name`.
pub async fn members(
    target: &Target,
    name: &str,
    format: Option<&OutputFormat>,
    io: &mut Io<'_>,
) -> Result<(), KubectlError> {
    let etcd = target.etcd(name).await?;
    let leases = leases(target, &etcd).await?;
    let printed = Printed {
        items: leases.iter().map(|l| member_value(&etcd, l)).collect(),
        names: leases
            .iter()
            .map(|l| format!("lease.coordination.k8s.io/{}", l.name))
            .collect(),
        single: false,
    };
    if output::print(io.out, format, &printed)? {
        return Ok(());
    }
    if leases.is_empty() {
        writeln!(
            io.err,
            "Etcd {name} has no member leases yet: the operator creates them when it reconciles"
        )?;
        return Ok(());
    }
    let wide = format == Some(&OutputFormat::Wide);
    let now = jiff::Timestamp::now();
    let mut header = vec!["NAME", "ID", "ROLE", "READY", "VERSION", "DATA", "WAITING"];
    if wide {
        header.extend(["CLUSTER ID", "RENEWED"]);
    }
    let mut table = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for (lease, value) in leases.iter().zip(&printed.items) {
        let text = |v: &Value| match v {
            Value::Null => "<none>".to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let data = quorate_core::membership::data_state::DataState::of_lease(lease)
            .map_or_else(|| "<none>".to_string(), |d| data_summary(&d));
        let waiting = lease
            .annotations
            .get("quorate.io/waiting")
            .cloned()
            .unwrap_or_else(|| "-".to_string());
        let mut row = vec![
            lease.name.clone(),
            text(&value["id"]),
            text(&value["role"]),
            text(&value["ready"]),
            text(&value["etcdVersion"]),
            data,
            waiting,
        ];
        if wide {
            row.push(text(&value["clusterId"]));
            row.push(lease.renew_time.map_or_else(
                || "<never>".to_string(),
                |t| format!("{} ago", human_duration(now.duration_since(t))),
            ));
        }
        table.push(row);
    }
    write!(io.out, "{}", format_columns(&table))?;
    Ok(())
}

/// A data state in a few words.
fn data_summary(state: &quorate_core::membership::data_state::DataState) -> String {
    use quorate_core::membership::data_state::DataState;
    match state {
        DataState::Empty => "none".to_string(),
        DataState::Present {
            revision: Some(revision),
            ..
        } => format!("present (revision {revision})"),
        DataState::Present { revision: None, .. } => "present".to_string(),
        DataState::Unknown { reason } => format!("unknown: {reason}"),
    }
}
