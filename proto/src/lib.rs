//! Cairn's worker protocol (`proto/cairn/v1`), compiled with tonic and prost through protox.
//!
//! Empty until the worker issue lands.
