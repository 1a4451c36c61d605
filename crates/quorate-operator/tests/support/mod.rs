//! What the test binaries of this crate share.

pub mod webhooks;
