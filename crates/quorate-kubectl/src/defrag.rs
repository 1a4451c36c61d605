//! `kubectl quorate defrag NAME`: sets `quorate.io/defragment` to a fresh request ID, with
//! `druid.gardener.cloud/operation: reconcile` (the operator passes the request to the agents
//! in the cluster configuration; the leader's agent starts a round, every member takes its
//! turn, the leader last) and follows the round on the member
//! leases, where each agent publishes its outcome, as `quorate defrag` does locally.

use crate::output::{self, OutputFormat, Printed};
use crate::{Io, KubectlError, Outcome, Target};
use quorate_api::printer::format_columns;
use quorate_core::maintenance::defrag::{
    DefragOutcome, DefragRecord, RequestProgress, request_progress,
};
use serde_json::Value;
use std::time::Duration;

/// How often the member leases are read while waiting.
const POLL: Duration = Duration::from_secs(1);

/// Requests the round and, unless `no_wait`, waits for it and prints each member's outcome.
pub async fn defrag(
    target: &Target,
    name: &str,
    no_wait: bool,
    timeout: Duration,
    format: Option<&OutputFormat>,
    io: &mut Io<'_>,
) -> Result<Outcome, KubectlError> {
    let etcd = target.etcd(name).await?;
    if etcd.spec.replicas <= 0 {
        return Err(KubectlError::Usage(format!(
            "{name} is hibernated (spec.replicas: 0): no member runs to defragment"
        )));
    }
    crate::annotate::refuse_suspended(std::slice::from_ref(&etcd), "defragmentation")?;
    let id = crate::client::request_id("defrag");
    target
        .annotate(
            &etcd,
            &crate::annotate::request_annotations(quorate_api::defrag::DEFRAGMENT, &id),
        )
        .await?;
    writeln!(io.err, "defragmentation requested ({id})")?;
    if no_wait {
        let printed = result(name, &id, &[], false);
        if !output::print(io.out, format, &printed)? {
            writeln!(
                io.out,
                "{} defragmentation requested ({id}); progress: `kubectl quorate members {name}`",
                output::etcd_name(name)
            )?;
        }
        return Ok(Outcome::Success);
    }
    let replicas = etcd.spec.replicas.max(0) as usize;
    let members: Vec<String> = (0..replicas).map(|i| format!("{name}-{i}")).collect();
    let started = tokio::time::Instant::now();
    let mut last = None;
    let through = loop {
        let leases = crate::members::leases(target, &etcd).await?;
        let records: Vec<(String, DefragRecord)> = members
            .iter()
            .map(|m| {
                let record = leases
                    .iter()
                    .find(|l| &l.name == m)
                    .and_then(DefragRecord::of_lease)
                    .unwrap_or_default();
                (m.clone(), record)
            })
            .collect();
        let now = request_progress(records, &id);
        if last.as_ref() != Some(&now) {
            match &now {
                RequestProgress::NotStarted => {
                    writeln!(io.err, "waiting for the leader to start the round")?
                }
                RequestProgress::Running { waiting, .. } => {
                    writeln!(io.err, "defragmenting; still to go: {}", waiting.join(", "))?
                }
                RequestProgress::Done(_) => {}
            }
        }
        if let RequestProgress::Done(through) = now {
            break through;
        }
        if started.elapsed() >= timeout {
            return Err(KubectlError::Timeout {
                what: format!(
                    "the defragmentation round of {name} ({id}); the agents go on with it (a \
                     member waits while another's etcd does not answer): see `kubectl quorate \
                     members {name}`"
                ),
                timeout,
            });
        }
        last = Some(now);
        tokio::time::sleep(POLL).await;
    };
    let failed = through.iter().any(|(_, o)| o.error.is_some());
    let printed = result(name, &id, &through, true);
    if !output::print(io.out, format, &printed)? {
        let mut rows = vec![
            ["MEMBER", "BEFORE", "AFTER", "TOOK", "RESULT"]
                .map(String::from)
                .to_vec(),
        ];
        for (member, o) in &through {
            rows.push(vec![
                member.clone(),
                quorate_api::printer::human_size(o.size_before),
                quorate_api::printer::human_size(o.size_after),
                format!("{:.1}s", o.millis as f64 / 1000.0),
                verdict(o),
            ]);
        }
        write!(io.out, "{}", format_columns(&rows))?;
    }
    Ok(if failed {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}

/// A member's outcome in a word (with etcd's error when it failed).
fn verdict(o: &DefragOutcome) -> String {
    match (&o.error, o.skipped) {
        (Some(e), _) => format!("failed: {e}"),
        (None, true) => "skipped".to_string(),
        (None, false) => "defragmented".to_string(),
    }
}

/// The round's result as one object (`kind: DefragmentationResult`).
fn result(name: &str, id: &str, through: &[(String, DefragOutcome)], done: bool) -> Printed {
    let members: Vec<Value> = through
        .iter()
        .map(|(member, o)| {
            serde_json::json!({
                "name": member,
                "result": verdict(o),
                "round": o.round,
                "at": o.at,
                "sizeBefore": o.size_before,
                "sizeAfter": o.size_after,
                "millis": o.millis,
                "error": o.error,
            })
        })
        .collect();
    Printed {
        items: vec![serde_json::json!({
            "kind": "DefragmentationResult",
            "etcd": name,
            "request": id,
            "done": done,
            "members": members,
        })],
        names: vec![output::etcd_name(name)],
        single: true,
    }
}
