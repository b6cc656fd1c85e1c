//! The real `cairn` binary, in one test binary: its commands' exit codes and output, and `cairn bench`.

mod bench;
mod commands;
