//! The store's integration tests, in one test binary (each module was a binary of its own, and linking each one
//! cost more than running it): the contract suite run against both backends, then the store's behaviour around
//! the databases themselves (errors, migrations, the peer channel, dying and silent PostgreSQL connections,
//! SQLite's statement cache, upgrades from an older schema).

mod contract;
mod errors;
mod migrations;
mod peers;
mod pg_proxy;
mod pg_sessions;
mod pg_silence;
mod sqlite_limits;
mod upgrade;
