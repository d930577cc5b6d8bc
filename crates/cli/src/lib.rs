//! The parts of the `scion` command that other code reaches: what it decodes from outside
//! (`stream`, `wire`), and what the small front binary needs to ask a daemon (`client`).

pub mod client;
pub mod stream;
pub mod wire;
