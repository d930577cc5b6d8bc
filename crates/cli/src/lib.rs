//! The parts of the `scion` command that other code reaches: what it decodes from outside.

pub mod client;
pub mod stream;
pub mod wire;
