//! One module per subcommand (client commands over the REST API share `runs`).

pub mod bench;
pub mod find;
pub mod plan;
pub mod recipient;
pub mod run;
pub mod runs;
pub mod schedule;
pub mod schema;
pub mod serve;
pub mod validate;
pub mod worker;
