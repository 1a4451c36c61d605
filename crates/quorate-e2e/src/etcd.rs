//! Reading an `Etcd`'s status the way `kubectl get etcd -o wide` shows it.

use quorate_api::Etcd;
use quorate_api::status::EtcdStatus;

/// The status of condition `type_` (`True`, `False`, ...), `-` when absent.
pub fn condition_status(status: Option<&EtcdStatus>, type_: &str) -> String {
    status
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .map(|c| c.status.as_str().to_string())
        .unwrap_or_else(|| "-".to_string())
}

/// One line with everything that says how far a cluster is: the printer columns, members,
/// last operation and errors.
pub fn status_summary(etcd: &Etcd) -> String {
    let status = etcd.status.as_ref();
    let ready = status
        .and_then(|s| s.ready)
        .map(|r| r.to_string())
        .unwrap_or_else(|| "-".into());
    let members = status
        .map(|s| {
            s.members
                .iter()
                .map(|m| {
                    let role = m.role.map(|r| format!("{r:?}")).unwrap_or_default();
                    format!(
                        "{}={:?}{}",
                        m.name,
                        m.status,
                        if role.is_empty() {
                            String::new()
                        } else {
                            format!("/{role}")
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let operation = status
        .and_then(|s| s.last_operation.as_ref())
        .map(|o| format!("{:?}/{:?}", o.type_, o.state))
        .unwrap_or_else(|| "-".into());
    let errors = status
        .map(|s| {
            s.last_errors
                .iter()
                .map(|e| format!("{}: {}", e.code, e.description))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    format!(
        "ready={ready} Quorate={} AllMembersReady={} BackupReady={} replicas={}/{} members=[{members}] op={operation}{}",
        condition_status(status, "Ready"),
        condition_status(status, "AllMembersReady"),
        condition_status(status, "BackupReady"),
        status.map(|s| s.ready_replicas).unwrap_or(0),
        status.map(|s| s.current_replicas).unwrap_or(0),
        if errors.is_empty() {
            String::new()
        } else {
            format!(" errors=[{errors}]")
        }
    )
}

/// True when the `Etcd` is what a user calls ready: `READY true`, `QUORATE`, `ALL MEMBERS
/// READY` and `BACKUP READY` `True` (the last only when `with_backup`), and `replicas`
/// members current and ready.
pub fn fully_ready(etcd: &Etcd, replicas: i32, with_backup: bool) -> bool {
    let Some(status) = etcd.status.as_ref() else {
        return false;
    };
    status.ready == Some(true)
        && condition_status(Some(status), "Ready") == "True"
        && condition_status(Some(status), "AllMembersReady") == "True"
        && (!with_backup || condition_status(Some(status), "BackupReady") == "True")
        && status.ready_replicas == replicas
        && status.current_replicas == replicas
}
