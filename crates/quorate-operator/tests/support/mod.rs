//! What the test binaries of this crate share.

pub mod operator;
pub mod webhooks;
