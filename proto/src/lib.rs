//! `cairn-proto`: the worker protocol (`proto/cairn/v1/worker.proto`), generated with tonic and prost through
//! protox at build time. [`v1`] holds the messages, `worker_service_client` and `worker_service_server`.

/// Protocol version 1.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("cairn.v1");
}

/// The major version of the worker protocol this crate describes (`RegisterRequest.protocol_version`).
pub const PROTOCOL_VERSION: u32 = 1;

/// Most completions one `CompleteBatch` may carry; the orchestrator refuses a larger batch whole
/// (`INVALID_ARGUMENT`).
pub const MAX_COMPLETE_BATCH_ITEMS: usize = 256;
