//! Declares the `cairn_pg` cfg: set when `DATABASE_URL` is present at build time, so the PostgreSQL variants of
//! the contract tests (`tests/store/contract.rs`) run, and are reported as ignored (skipped, with the reason) otherwise
//! instead of passing without having run. It also rebuilds the crate when a migration is added: `sqlx::migrate!`
//! embeds the files of `../migrations`, which lie outside the package, so cargo would not notice a new one.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cairn_pg)");
    println!("cargo::rerun-if-env-changed=DATABASE_URL");
    println!("cargo::rerun-if-changed=../migrations");
    if std::env::var_os("DATABASE_URL").is_some_and(|url| !url.is_empty()) {
        println!("cargo::rustc-cfg=cairn_pg");
    }
}
