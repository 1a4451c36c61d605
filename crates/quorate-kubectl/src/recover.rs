//! `kubectl quorate recover NAME [--yes]`: quorum-loss recovery through `quorate.io/recover`.
//! From outside the cluster the plugin cannot ask the members' etcd; it shows what the
//! operator and the agents report (the `Ready` condition, which is quorum, and each member's
//! published data state and what it waits for). With `--yes` it sets the annotation to a
//! fresh request ID (with `druid.gardener.cloud/operation: reconcile`, which passes it on); the agents then make the same decision local mode's dry run shows (core
//! `membership::recovery`): the surviving member with the newest data, or wait and say why.

use crate::output::{self, OutputFormat, Printed};
use crate::{Io, KubectlError, Outcome, Target};
use quorate_api::printer::format_columns;
use serde_json::{Value, json};

/// Shows the state and, with `yes`, requests the recovery.
pub async fn recover(
    target: &Target,
    name: &str,
    yes: bool,
    format: Option<&OutputFormat>,
    io: &mut Io<'_>,
) -> Result<Outcome, KubectlError> {
    let etcd = target.etcd(name).await?;
    let leases = crate::members::leases(target, &etcd).await?;
    let quorate = etcd
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| {
            (
                serde_json::to_value(c.status).unwrap_or_default(),
                c.message.clone(),
            )
        });
    let has_quorum = quorate
        .as_ref()
        .is_some_and(|(status, _)| status == &json!("True"));
    let members: Vec<Value> = leases
        .iter()
        .map(|l| crate::members::member_value(&etcd, l))
        .collect();
    let (action, request) = if has_quorum {
        ("none", None)
    } else if yes {
        crate::annotate::refuse_suspended(std::slice::from_ref(&etcd), "recovery")?;
        let id = crate::client::request_id("recover");
        target
            .annotate(
                &etcd,
                &crate::annotate::request_annotations(quorate_api::annotations::RECOVER, &id),
            )
            .await?;
        ("requested", Some(id))
    } else {
        ("dryRun", None)
    };
    let plan = json!({
        "kind": "RecoveryPlan",
        "etcd": name,
        "namespace": target.namespace,
        "quorate": quorate.as_ref().map(|(s, _)| s.clone()),
        "message": quorate.as_ref().map(|(_, m)| m.clone()),
        "action": action,
        "request": request,
        "members": members,
    });
    let printed = Printed {
        items: vec![plan],
        names: vec![output::etcd_name(name)],
        single: true,
    };
    if output::print(io.out, format, &printed)? {
        return Ok(Outcome::Success);
    }
    match (action, &request) {
        ("none", _) => writeln!(
            io.out,
            "{name} has quorum (condition Ready is True): nothing to recover"
        )?,
        (_, Some(id)) => writeln!(
            io.out,
            "recovery requested ({id}): the surviving member with the newest data becomes a \
             one-member cluster and the others rejoin as learners (their data moved aside, never \
             deleted); `kubectl quorate wait {name} --for=condition=Ready` waits for it"
        )?,
        _ => {
            let why = quorate
                .as_ref()
                .map(|(s, m)| format!("condition Ready is {s}: {m}"))
                .unwrap_or_else(|| "no Ready condition yet".to_string());
            writeln!(io.out, "{name} has no quorum ({why})")?;
        }
    }
    let mut rows = vec![
        ["MEMBER", "ROLE", "READY", "DATA", "WAITING"]
            .map(String::from)
            .to_vec(),
    ];
    for member in &printed.items[0]["members"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let text = |v: &Value| match v {
            Value::Null => "<none>".to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let published = &member["published"];
        rows.push(vec![
            text(&member["name"]),
            text(&member["role"]),
            text(&member["ready"]),
            text(&published["quorate.io/data-state"]),
            text(&published[quorate_core::membership::data_state::WAITING_ANNOTATION]),
        ]);
    }
    write!(io.out, "{}", format_columns(&rows))?;
    if action == "dryRun" {
        writeln!(
            io.out,
            "run `kubectl quorate recover {name} --yes` to request it (runbook: \
             docs/operations/quorum-loss-recovery.md)"
        )?;
    }
    Ok(Outcome::Success)
}
