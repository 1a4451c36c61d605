//! druidctl's commands as annotations druid defines and the operator reads: suspend and resume
//! spec reconciliation, reconcile now, component protection on and off.

use crate::output::{self, OutputFormat, Printed};
use crate::{Io, KubectlError, Selection, Target};
use quorate_api::annotations::{
    DISABLE_ETCD_COMPONENT_PROTECTION, DRUID_OPERATION, OPERATION_RECONCILE,
    SUSPEND_ETCD_SPEC_RECONCILE,
};

/// One of the changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Sets the suspend annotation.
    Suspend,
    /// Removes it.
    Resume,
    /// Sets `druid.gardener.cloud/operation: reconcile` (the operator removes it once done).
    Reconcile,
    /// Removes the disable-protection annotation.
    ProtectOn,
    /// Sets it.
    ProtectOff,
}

impl Change {
    /// The annotation change, and the word kubectl-style output uses.
    fn patch(self) -> (&'static str, Option<&'static str>, &'static str) {
        match self {
            Change::Suspend => (SUSPEND_ETCD_SPEC_RECONCILE, Some("true"), "suspended"),
            Change::Resume => (SUSPEND_ETCD_SPEC_RECONCILE, None, "resumed"),
            Change::Reconcile => (
                DRUID_OPERATION,
                Some(OPERATION_RECONCILE),
                "reconcile requested",
            ),
            Change::ProtectOn => (DISABLE_ETCD_COMPONENT_PROTECTION, None, "protected"),
            Change::ProtectOff => (
                DISABLE_ETCD_COMPONENT_PROTECTION,
                Some("true"),
                "unprotected",
            ),
        }
    }
}

/// Applies `change` to every selected Etcd, then prints them.
pub async fn change(
    target: &Target,
    selection: &Selection,
    change: Change,
    io: &mut Io<'_>,
) -> Result<(), KubectlError> {
    let etcds = target.selected(&selection.names, true).await?;
    if etcds.is_empty() {
        writeln!(io.err, "No resources found.")?;
        return Ok(());
    }
    let (key, value, done) = change.patch();
    if change == Change::Reconcile {
        refuse_suspended(&etcds, "reconcile")?;
    }
    let mut changed = Vec::new();
    for etcd in &etcds {
        changed.push(target.annotate(etcd, &[(key, value)]).await?);
    }
    let printed = Printed {
        items: changed
            .iter()
            .map(output::etcd_value)
            .collect::<Result<_, _>>()?,
        names: changed
            .iter()
            .map(|e| output::etcd_name(e.metadata.name.as_deref().unwrap_or_default()))
            .collect(),
        single: selection.names.len() == 1,
    };
    if output::print(io.out, selection.output.as_ref(), &printed)? {
        return Ok(());
    }
    for name in &printed.names {
        writeln!(io.out, "{name} {done}")?;
    }
    if selection.output == Some(OutputFormat::Wide) {
        writeln!(io.err, "note: -o wide prints the same as no -o here")?;
    }
    Ok(())
}

/// The operator carries a request (`reconcile`, and the requests that reach the agents through
/// the cluster configuration with it) out only when spec reconciliation is not suspended; a
/// request on a suspended Etcd would be ignored silently, so it is refused (druidctl's rule).
pub fn refuse_suspended(etcds: &[quorate_api::Etcd], what: &str) -> Result<(), KubectlError> {
    let suspended: Vec<String> = etcds
        .iter()
        .filter(|e| {
            e.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(SUSPEND_ETCD_SPEC_RECONCILE))
        })
        .map(|e| e.metadata.name.clone().unwrap_or_default())
        .collect();
    if suspended.is_empty() {
        return Ok(());
    }
    Err(KubectlError::Usage(format!(
        "{} suspended ({SUSPEND_ETCD_SPEC_RECONCILE}): the operator would not carry the {what} \
         request out; `kubectl quorate resume {}` first",
        suspended.join(", "),
        suspended.join(" ")
    )))
}

/// The annotations of a request the agents carry out once (`quorate.io/defragment`,
/// `quorate.io/recover`): the request itself, and `druid.gardener.cloud/operation: reconcile`,
/// without which an operator without spec auto-reconcile (druid's default) does not pass the
/// request on to the agents' configuration (an annotation does not change the generation).
pub fn request_annotations<'a>(key: &'a str, id: &'a str) -> [(&'a str, Option<&'a str>); 2] {
    [
        (key, Some(id)),
        (DRUID_OPERATION, Some(OPERATION_RECONCILE)),
    ]
}
