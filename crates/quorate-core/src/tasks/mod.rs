//! druid's task resources: what the operator does next with an `EtcdOpsTask`
//! ([`ops_task`]), and the Job that runs an `EtcdCopyBackupsTask` with its status
//! ([`copy_job`]).

pub mod copy_job;
pub mod ops_task;
