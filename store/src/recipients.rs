//! Recipients in the database (migration `0017_recipients_deliveries`): who `notify.send` delivers to. The store
//! keeps each recipient's JSON as given and never reads inside it: the API checks it with
//! `cairn_core::recipient::Recipient::parse` before [`Store::recipient_put`], and the worker that delivers parses
//! it again. The same SQL text on both backends.

use crate::{Store, StoreResult};

/// A recipient as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct StoredRecipient {
    /// Its id (`cairn_core::recipient::RECIPIENT_ID`).
    pub id: String,
    /// Its JSON text, as it was put.
    pub body: String,
    /// Epoch ms of its first put (kept when it is replaced).
    pub created_at: i64,
    /// Epoch ms of its last put.
    pub updated_at: i64,
}

/// Most ids one statement of [`Store::recipients_get`] names (`MAX_RECIPIENTS_PER_STEP`): longer lists are read
/// in several statements, so a statement's parameters stay bounded.
const IDS_PER_STATEMENT: usize = cairn_core::recipient::MAX_RECIPIENTS_PER_STEP;

/// Most recipients one page of [`Store::recipients_page`] returns, whatever the caller asks for.
pub const MAX_RECIPIENTS_PAGE: u32 = 1000;

/// A new recipient; a present one is left alone (then [`RECIPIENT_REPLACE`] applies). Index: PK.
const RECIPIENT_INSERT: &str = "INSERT INTO recipients (id, body, created_at, updated_at) VALUES ($1, $2, $3, $3) \
     ON CONFLICT (id) DO NOTHING";

/// Replace a present recipient's body, keeping when it was created. Index: PK.
const RECIPIENT_REPLACE: &str = "UPDATE recipients SET body = $2, updated_at = $3 WHERE id = $1";

/// One recipient. Index: PK.
const RECIPIENT_GET: &str = "SELECT id, body, created_at, updated_at FROM recipients WHERE id = $1";

/// The page after the id `$1` (`''` for the first: every id is at least one byte), in id order (`+ 0` keeps
/// SQLite from preparing it again for each limit: `tests/store/sqlite_limits.rs`). Index: PK.
const RECIPIENTS_PAGE: &str =
    "SELECT id, body, created_at, updated_at FROM recipients WHERE id > $1 ORDER BY id LIMIT $2 + 0";

/// Delete one recipient. Its ledger rows stay (history). Index: PK.
const RECIPIENT_DELETE: &str = "DELETE FROM recipients WHERE id = $1";

/// The statement reading the recipients of `count` ids (`$1` … `$count`), in id order. Index: PK.
fn recipients_in(count: usize) -> String {
    let params: Vec<String> = (1..=count).map(|n| format!("${n}")).collect();
    format!("SELECT id, body, created_at, updated_at FROM recipients WHERE id IN ({}) ORDER BY id", params.join(", "))
}

impl Store {
    /// Stores the recipient `id` with its JSON `body` at `now_ms`: true when it was created, false when it
    /// replaced one (whose `created_at` is kept). Two statements, each atomic on its own, so the answer is
    /// exact without locking: the insert, and when the id is taken the replace; a recipient deleted between
    /// them is inserted again (the loop ends unless deletes keep winning that race).
    ///
    /// # Errors
    /// Database errors (classified by [`crate::ErrorClass`]).
    pub async fn recipient_put(&self, id: &str, body: &str, now_ms: i64) -> StoreResult<bool> {
        loop {
            let inserted = on_pool!(self, Db, pool => sqlx::query::<Db>(RECIPIENT_INSERT)
                .bind(id).bind(body).bind(now_ms).execute(pool).await?.rows_affected());
            if inserted == 1 {
                return Ok(true);
            }
            let replaced = on_pool!(self, Db, pool => sqlx::query::<Db>(RECIPIENT_REPLACE)
                .bind(id).bind(body).bind(now_ms).execute(pool).await?.rows_affected());
            if replaced == 1 {
                return Ok(false);
            }
        }
    }

    /// The recipient `id`, if stored.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn recipient_get(&self, id: &str) -> StoreResult<Option<StoredRecipient>> {
        Ok(on_pool!(self, Db, pool => sqlx::query_as::<Db, StoredRecipient>(RECIPIENT_GET)
            .bind(id).fetch_optional(pool).await?))
    }

    /// The stored recipients among `ids`, in id order, each once; ids not stored are left out. One statement
    /// per 100 ids (so one for a step's recipients), keeping each statement's parameters bounded.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn recipients_get(&self, ids: &[String]) -> StoreResult<Vec<StoredRecipient>> {
        let mut wanted: Vec<&str> = ids.iter().map(String::as_str).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut found = Vec::new();
        for chunk in wanted.chunks(IDS_PER_STATEMENT) {
            let sql = recipients_in(chunk.len());
            let rows = on_pool!(self, Db, pool => {
                let mut query = sqlx::query_as::<Db, StoredRecipient>(sqlx::AssertSqlSafe(sql.as_str()));
                for id in chunk {
                    query = query.bind(*id);
                }
                query.fetch_all(pool).await?
            });
            found.extend(rows);
        }
        Ok(found)
    }

    /// Up to `limit` recipients (at most [`MAX_RECIPIENTS_PAGE`]) in id order, after the id `after` (from the
    /// start when `None`): the next page starts after the last id of this one.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn recipients_page(&self, after: Option<&str>, limit: u32) -> StoreResult<Vec<StoredRecipient>> {
        let limit = i64::from(limit.min(MAX_RECIPIENTS_PAGE));
        Ok(on_pool!(self, Db, pool => sqlx::query_as::<Db, StoredRecipient>(RECIPIENTS_PAGE)
            .bind(after.unwrap_or("")).bind(limit).fetch_all(pool).await?))
    }

    /// Deletes the recipient `id`: true when it was stored. Its ledger rows stay.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn recipient_delete(&self, id: &str) -> StoreResult<bool> {
        let deleted = on_pool!(self, Db, pool => sqlx::query::<Db>(RECIPIENT_DELETE)
            .bind(id).execute(pool).await?.rows_affected());
        Ok(deleted == 1)
    }
}
