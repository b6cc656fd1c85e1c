//! Fresh databases for tests: a new SQLite file, or a new PostgreSQL database cloned from a template.
//!
//! Migrating a PostgreSQL database (every migration, then the stored functions) costs far more than copying one,
//! and nearly every PostgreSQL test wants a fresh database. So the schema is built once, into a template database
//! named after a hash of what goes into it (`cairn_tpl_<hash>`: the migrations' checksums and the stored
//! functions' files), and each test's database (`cairn_t_<pid>_<uuid>`) is `CREATE DATABASE … TEMPLATE` of it.
//! Opening the store on a clone then finds every migration applied. A change to a migration or a function file
//! changes the hash, so the next test builds a new template and drops the old ones.
//!
//! The harness's apps and orchestrators own their database as a [`Dropped`] guard, which drops it (PostgreSQL)
//! or removes its file (SQLite) when they end, pass or fail. What a killed test process leaves behind is swept
//! by the next one: the databases and directories of processes that are gone.

use std::path::{Path, PathBuf};

use cairn_store::{POSTGRES_MIGRATIONS, Store};
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection};

/// The session advisory lock the template is built under ("cairntpl" in ASCII), so concurrent test processes
/// build it once and never clone a half-built one.
const TEMPLATE_LOCK: i64 = i64::from_be_bytes(*b"cairntpl");

/// How many times a clone is tried when its template disappeared under it (dropped by a test process of
/// another build, whose migrations differ) before the test fails.
const CLONE_ATTEMPTS: usize = 5;

/// A fresh SQLite database URL: a new file in this test process's directory under the system temp dir
/// (`cairn-tests/<pid>/`), so that orchestrator processes a test restarts find it again. The directories of test
/// processes that are gone are removed first, as [`postgres_url`] drops their databases.
pub fn sqlite_url() -> String {
    let root: PathBuf = std::env::temp_dir().join("cairn-tests");
    remove_directories_of_gone_processes(&root);
    let dir = root.join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.db", uuid::Uuid::new_v4()));
    format!("sqlite:{}", path.display())
}

/// Removes the subdirectories of `root` named by the id of a process that no longer runs (other names, such as
/// the [`crate::http::TempDir`]s, are left alone: those remove themselves).
fn remove_directories_of_gone_processes(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let pid = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok());
        if pid.is_some_and(|p| !process_runs(p)) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn process_runs(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Creates a fresh, migrated database named `cairn_t_<pid>_<uuid>` on the `DATABASE_URL` server, cloned from the
/// current template (built first if missing), and drops the ones left by test processes that are gone.
// Database names are generated here (pid, uuid, hash), never taken from input, so formatting them into DDL is
// safe.
pub async fn postgres_url() -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let mut admin = PgConnection::connect(&base).await.unwrap();
    drop_databases_of_gone_processes(&mut admin).await;
    let template = template_name();
    let name = format!("cairn_t_{}_{}", std::process::id(), uuid::Uuid::new_v4().simple());
    let create = format!("CREATE DATABASE \"{name}\" TEMPLATE \"{template}\"");
    for attempt in 1..=CLONE_ATTEMPTS {
        ensure_template(&mut admin, &base, &template).await;
        match sqlx::query(sqlx::AssertSqlSafe(create.clone())).execute(&mut admin).await {
            Ok(_) => break,
            Err(e) if attempt < CLONE_ATTEMPTS && template_went_away(&e) => {}
            Err(e) => panic!("cloning {template} into {name}: {e}"),
        }
    }
    let _ = admin.close().await;
    database_url(&base, &name)
}

/// `base` with its database replaced by `name`.
fn database_url(base: &str, name: &str) -> String {
    let (prefix, _) = base.rsplit_once('/').unwrap();
    format!("{prefix}/{name}")
}

async fn drop_databases_of_gone_processes(admin: &mut PgConnection) {
    let stale: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'cairn_t_%'")
        .fetch_all(&mut *admin)
        .await
        .unwrap();
    for name in stale {
        let pid = name.split('_').nth(2).and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !process_runs(p)) {
            drop_database(admin, &name).await;
        }
    }
}

async fn drop_database(admin: &mut PgConnection, name: &str) {
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
        .execute(admin)
        .await;
}

/// A clone fails this way when its template was dropped (`3D000`, it does not exist) or is being built or
/// dropped (`55006`, another session is connected to it) between the check and the clone.
fn template_went_away(error: &sqlx::Error) -> bool {
    let code = error.as_database_error().and_then(|e| e.code());
    matches!(code.as_deref(), Some("3D000" | "55006"))
}

/// `cairn_tpl_<hash>`: the first 64 bits of a SHA-256 over the embedded PostgreSQL migrations (version and
/// checksum, what the store compares on open) and the stored functions' files.
pub fn template_name() -> String {
    let mut hash = Sha256::new();
    for migration in POSTGRES_MIGRATIONS.iter() {
        hash.update(migration.version.to_be_bytes());
        hash.update(&*migration.checksum);
    }
    let functions = Path::new(env!("CARGO_MANIFEST_DIR")).join("../store/sql/postgres/functions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&functions)
        .unwrap_or_else(|e| panic!("{}: {e}", functions.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        hash.update(file.file_name().unwrap().as_encoded_bytes());
        hash.update(std::fs::read(&file).unwrap());
    }
    let hex: String = hash.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("cairn_tpl_{hex}")
}

async fn database_exists(admin: &mut PgConnection, name: &str) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(admin)
        .await
        .unwrap()
}

/// Builds `template` unless it exists: under [`TEMPLATE_LOCK`], drops every other template (older hashes, and a
/// build a crashed process left), migrates a new database through the store, and renames it into place only
/// once no session is connected to it, so a template that exists under its name is complete.
async fn ensure_template(admin: &mut PgConnection, base: &str, template: &str) {
    if database_exists(admin, template).await {
        return;
    }
    sqlx::query("SELECT pg_advisory_lock($1)").bind(TEMPLATE_LOCK).execute(&mut *admin).await.unwrap();
    if !database_exists(admin, template).await {
        let others: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'cairn\\_tpl\\_%'")
                .fetch_all(&mut *admin)
                .await
                .unwrap();
        for other in others {
            drop_database(admin, &other).await;
        }
        let building = format!("{template}_building");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{building}\""))).execute(&mut *admin).await.unwrap();
        let store = Store::connect(&database_url(base, &building)).await.expect("the template migrates");
        if let Store::Postgres(pool) = store {
            pool.close().await;
        }
        // A closed connection's server process may still be exiting; a rename needs the database to itself.
        let name = building.as_str();
        crate::http::within(
            std::time::Duration::from_secs(30),
            "the template's sessions are gone",
            move || async move {
                let mut admin = PgConnection::connect(base).await.ok()?;
                let sessions: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
                    .bind(name)
                    .fetch_one(&mut admin)
                    .await
                    .ok()?;
                (sessions == 0).then_some(())
            },
        )
        .await;
        sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE \"{building}\" RENAME TO \"{template}\"")))
            .execute(&mut *admin)
            .await
            .unwrap();
    }
    sqlx::query("SELECT pg_advisory_unlock($1)").bind(TEMPLATE_LOCK).execute(&mut *admin).await.unwrap();
}

/// Drops the database at its URL when it goes out of scope: a PostgreSQL `cairn_t_*` database is dropped (on a
/// thread of its own, waited for, bounded in time), a SQLite file removed with its WAL and shared-memory files.
#[derive(Debug)]
pub struct Dropped(pub String);

impl Drop for Dropped {
    fn drop(&mut self) {
        let url = self.0.clone();
        if let Some(path) = url.strip_prefix("sqlite:") {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
            return;
        }
        let Some((_, name)) = url.rsplit_once('/') else { return };
        if !name.starts_with("cairn_t_") {
            return;
        }
        let (Ok(base), name) = (std::env::var("DATABASE_URL"), name.to_owned()) else { return };
        let dropping = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            runtime.block_on(async {
                let work = async {
                    if let Ok(mut admin) = PgConnection::connect(&base).await {
                        drop_database(&mut admin, &name).await;
                        let _ = admin.close().await;
                    }
                };
                let _ = tokio::time::timeout(std::time::Duration::from_secs(20), work).await;
            });
        });
        let _ = dropping.join();
    }
}
