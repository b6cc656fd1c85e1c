//! Shared harness for Cairn's end-to-end and failure-case tests (`tests/tests/*.rs`).
