//! `kubectl quorate wait NAME… --for=condition=TYPE[=STATUS] --timeout D`: as `kubectl wait`,
//! on the Etcd's status conditions, through a watch (no polling).

use crate::error::FlagError;
use crate::output::{self, OutputFormat, Printed};
use crate::{Io, KubectlError, Target};
use quorate_api::Etcd;
use std::time::Duration;

/// `--for=condition=TYPE[=STATUS]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitFor {
    /// The condition type (compared without case, as kubectl does).
    pub condition: String,
    /// The wanted status (default `True`).
    pub status: String,
}

impl WaitFor {
    /// Parses `condition=TYPE[=STATUS]`.
    pub fn parse(text: &str) -> Result<WaitFor, FlagError> {
        let Some(rest) = text.strip_prefix("condition=") else {
            return Err(FlagError(format!(
                "{text:?}: only conditions can be waited for: --for=condition=Ready or \
                 --for=condition=BackupReady=False"
            )));
        };
        let (condition, status) = match rest.split_once('=') {
            Some((c, s)) => (c, s),
            None => (rest, "True"),
        };
        if condition.is_empty() || status.is_empty() {
            return Err(FlagError(format!(
                "{text:?}: give a condition type, e.g. --for=condition=Ready"
            )));
        }
        Ok(WaitFor {
            condition: condition.to_string(),
            status: status.to_string(),
        })
    }

    /// Whether `etcd` has the condition with the status.
    pub fn met(&self, etcd: &Etcd) -> bool {
        etcd.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_.eq_ignore_ascii_case(&self.condition)
                    && serde_json::to_value(c.status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .is_some_and(|v| v.eq_ignore_ascii_case(&self.status))
            })
        })
    }
}

/// Waits for every named Etcd in turn, all within `timeout`.
pub async fn wait(
    target: &Target,
    names: &[String],
    for_: &WaitFor,
    timeout: Duration,
    format: Option<&OutputFormat>,
    io: &mut Io<'_>,
) -> Result<(), KubectlError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let api = target.etcds();
    let mut met = Vec::new();
    for name in names {
        // Named objects must exist, as kubectl wait requires.
        target.etcd(name).await?;
        let condition = {
            let for_ = for_.clone();
            move |etcd: Option<&Etcd>| etcd.is_some_and(|e| for_.met(e))
        };
        let waited = tokio::time::timeout_at(
            deadline,
            kube::runtime::wait::await_condition(api.clone(), name, condition),
        )
        .await;
        match waited {
            Err(_) => {
                return Err(KubectlError::Timeout {
                    what: format!(
                        "condition {}={} on etcd {}/{name}",
                        for_.condition, for_.status, target.namespace
                    ),
                    timeout,
                });
            }
            Ok(Err(e)) => {
                return Err(KubectlError::Usage(format!(
                    "watching etcd {}/{name}: {e}",
                    target.namespace
                )));
            }
            Ok(Ok(Some(etcd))) => met.push(etcd),
            Ok(Ok(None)) => {
                return Err(KubectlError::NotFound {
                    namespace: target.namespace.clone(),
                    name: name.clone(),
                });
            }
        }
    }
    let printed = Printed {
        items: met
            .iter()
            .map(output::etcd_value)
            .collect::<Result<_, _>>()?,
        names: names.iter().map(|n| output::etcd_name(n)).collect(),
        single: names.len() == 1,
    };
    if !output::print(io.out, format, &printed)? {
        for name in &printed.names {
            writeln!(io.out, "{name} condition met")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_takes_a_condition_and_an_optional_status() {
        let ready = WaitFor::parse("condition=Ready").unwrap();
        assert_eq!(
            (ready.condition.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
        let backup = WaitFor::parse("condition=BackupReady=False").unwrap();
        assert_eq!(backup.status, "False");
        assert!(
            WaitFor::parse("delete")
                .unwrap_err()
                .0
                .contains("only conditions")
        );
        assert!(WaitFor::parse("condition=").is_err());
    }
}
