//! Validating admission webhooks.
