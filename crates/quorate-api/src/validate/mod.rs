//! Validation of an `Etcd` before anything acts on it, on create ([`validate`]) and on change
//! ([`validate_update`]). Every rule of etcd-druid's CRD (patterns, enums, CEL rules) is here,
//! plus checks druid leaves to runtime failures (port clashes, empty Secret names, ...), so
//! local mode and the webhook reject the same manifests with messages a person can act on.

mod backup;
mod format;
mod spec;
mod tasks;
mod update;

use std::fmt;

use crate::etcd::Etcd;

pub use tasks::{
    validate_copy_task, validate_copy_task_update, validate_ops_task, validate_ops_task_update,
};
pub use update::check_replicas_change;

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    /// Where, as a JSON path without the leading dot, e.g. `spec.backup.deltaSnapshotPeriod`.
    pub path: String,
    /// What is wrong with the value and what is allowed.
    pub message: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// All problems found in one object; shown one per line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationErrors {
    /// The problems, in the order the fields appear in the spec.
    pub errors: Vec<FieldError>,
}

impl ValidationErrors {
    /// Whether a problem was reported at exactly this path.
    pub fn has_path(&self, path: &str) -> bool {
        self.errors.iter().any(|e| e.path == path)
    }

    /// The problems at exactly this path.
    pub fn at<'a>(&'a self, path: &'a str) -> impl Iterator<Item = &'a FieldError> + 'a {
        self.errors.iter().filter(move |e| e.path == path)
    }

    fn into_result(self) -> Result<(), ValidationErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// Collects problems while the rules walk the object.
#[derive(Default)]
pub(crate) struct Problems {
    errors: Vec<FieldError>,
}

impl Problems {
    pub(crate) fn into_errors(self) -> Result<(), ValidationErrors> {
        ValidationErrors {
            errors: self.errors,
        }
        .into_result()
    }

    pub(crate) fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError::new(path, message));
    }
}

/// Checks a new or complete `Etcd`: names, values, enums, durations, cron schedules,
/// quantities, ports, TLS references, backup store and cross-field rules.
pub fn validate(etcd: &Etcd) -> Result<(), ValidationErrors> {
    let mut problems = Problems::default();
    spec::check(etcd, &mut problems);
    backup::check(etcd, &mut problems);
    ValidationErrors {
        errors: problems.errors,
    }
    .into_result()
}

/// Checks a change from `old` to `new`: everything [`validate`] checks on `new`, plus the
/// transition rules (replicas only grow or drop to 0, immutable storage class, volume claim
/// template and member name prefix, create-only `bootstrapWithExistingCluster`).
pub fn validate_update(old: &Etcd, new: &Etcd) -> Result<(), ValidationErrors> {
    let mut problems = Problems::default();
    spec::check(new, &mut problems);
    backup::check(new, &mut problems);
    update::check(old, new, &mut problems);
    ValidationErrors {
        errors: problems.errors,
    }
    .into_result()
}

#[cfg(test)]
mod tests;
