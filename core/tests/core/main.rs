//! The core crate's integration tests, in one test binary (each module was a binary of its own): properties of
//! graphs, placeholders, retries and hostile input, the state machine, and every validation code and limit.
//! `placeholder_memory` stays a binary of its own: it installs a heap-profiling global allocator.

mod graph_props;
mod hostile_input_props;
mod placeholder_props;
mod retry_props;
mod state_machine;
mod validate_codes;
mod validate_limits;
