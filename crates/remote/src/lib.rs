//! scion's remotes (issue 41): trees published to an object store with the S3 API and
//! attached from it by any number of stores, which fetch a block when it is first read.
//!
//! - `layout`: what the remote holds, and the decoders of it (every one checks its input);
//! - `client`: the object store's calls, each under a deadline;
//! - `push`: a snapshot's blocks into packs, its tree object and manifest;
//! - `source`: the remote packs a store's block store reads, fetched and verified;
//! - `cache`: the bounded local cache of fetched blocks.

pub mod cache;
pub mod client;
pub mod gc;
pub mod layout;
pub mod lock;
pub mod push;
pub mod source;

pub use client::Client;
pub use source::{Health, Packs, Source};
