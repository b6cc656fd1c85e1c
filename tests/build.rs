//! Declares the `cairn_pg` cfg: set when `DATABASE_URL` is present at build time, so PostgreSQL-only tests run,
//! and are reported as ignored (skipped, with the reason) otherwise instead of passing without having run.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cairn_pg)");
    println!("cargo::rerun-if-env-changed=DATABASE_URL");
    if std::env::var_os("DATABASE_URL").is_some_and(|url| !url.is_empty()) {
        println!("cargo::rustc-cfg=cairn_pg");
    }
}
