//! Cairn's worker runtime and built-in actions. Workers never touch the database.
//!
//! Empty until the worker issue lands.
