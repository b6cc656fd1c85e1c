//! Cairn's persistence layer: every SQL statement for SQLite and PostgreSQL lives here.
//!
//! Empty until the durable-core issue lands (schema, migrations, the store contract and its two backends).
