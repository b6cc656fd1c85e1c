//! The live action catalog: Cairn's built-in actions plus the actions registered workers serve, kept in the
//! database (`cairn_store::Store::actions_register`) so that every orchestrator of the database knows every
//! registered action, and knows them again after a restart, before any worker reconnects.
//!
//! Submissions validate against a snapshot (an `Arc`), so registering a worker never blocks validation and a
//! submission sees one consistent catalog. A plan naming an action this orchestrator has not seen yet reloads
//! the catalog from the database first ([`LiveCatalog::snapshot_for`]): the action may have been registered
//! through another orchestrator. A registered spec replaces a built-in of the same name (a newer version of an
//! action wins).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};

use cairn_core::catalog::{ActionCatalog, ActionSpec, CatalogEntry, SchemaError, StaticCatalog};
use cairn_core::recipient;
use cairn_store::{Store, StoreError};
use serde_json::Value;

/// Built-ins plus registered actions.
pub struct LiveCatalog {
    base: Arc<dyn ActionCatalog + Send + Sync>,
    store: Store,
    registered: RwLock<(BTreeMap<String, ActionSpec>, Arc<StaticCatalog>)>,
}

impl std::fmt::Debug for LiveCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCatalog").finish_non_exhaustive()
    }
}

/// A consistent view for one validation.
pub struct Snapshot {
    base: Arc<dyn ActionCatalog + Send + Sync>,
    registered: Arc<StaticCatalog>,
    /// The literal recipient ids of the plan that were looked up, and which of them exist.
    recipients: RecipientsSeen,
}

/// Recipient ids looked up for one validation: `checked` were asked of the database, `existing` were there.
#[derive(Debug, Default)]
struct RecipientsSeen {
    checked: HashSet<String>,
    existing: HashSet<String>,
}

/// Most literal recipient ids looked up for one plan; ids past it are not checked at submit (their deliveries
/// fail at run time if the recipient is missing then).
const MAX_RECIPIENTS_LOOKED_UP: usize = 1000;

impl ActionCatalog for Snapshot {
    fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.registered.get(name).or_else(|| self.base.get(name))
    }
    fn recipient_exists(&self, id: &str) -> Option<bool> {
        self.recipients.checked.contains(id).then(|| self.recipients.existing.contains(id))
    }
    fn names(&self) -> Vec<&str> {
        let mut names = self.base.names();
        names.extend(self.registered.names());
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// Why a registration was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// A spec's args schema is not a valid JSON Schema; nothing was registered. Not retryable.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The store failed; retryable when the inner error is.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl LiveCatalog {
    /// A catalog over `base` with nothing registered yet; [`LiveCatalog::load`] reads what the database holds.
    pub fn new(base: Arc<dyn ActionCatalog + Send + Sync>, store: Store) -> Self {
        Self { base, store, registered: RwLock::new((BTreeMap::new(), Arc::new(StaticCatalog::default()))) }
    }

    /// The current view.
    pub fn snapshot(&self) -> Snapshot {
        let guard = self.registered.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        Snapshot { base: self.base.clone(), registered: guard.1.clone(), recipients: RecipientsSeen::default() }
    }

    /// The view to validate `plan` against: the current one, or, when the plan names an action it lacks, the
    /// catalog as the database holds it now (a store error is logged and the current view used); with the
    /// literal recipients its steps name looked up, so that a missing one is a diagnostic.
    pub async fn snapshot_for(&self, plan: &Value) -> Snapshot {
        let mut snapshot = self.snapshot();
        if actions_of(plan).any(|name| snapshot.get(name).is_none()) {
            if let Err(e) = self.load().await {
                tracing::warn!(error = %e, "could not reload the action catalog; validating against the last one");
            }
            snapshot = self.snapshot();
        }
        snapshot.recipients = self.recipients_seen(&snapshot, plan).await;
        snapshot
    }

    /// Looks up the literal recipient ids `plan`'s steps name (a store error is logged and nothing is checked).
    async fn recipients_seen(&self, snapshot: &Snapshot, plan: &Value) -> RecipientsSeen {
        let ids = recipient::literal_ids(plan, snapshot, MAX_RECIPIENTS_LOOKED_UP);
        if ids.is_empty() {
            return RecipientsSeen::default();
        }
        match self.store.recipients_get(&ids).await {
            Ok(found) => RecipientsSeen {
                existing: found.into_iter().map(|r| r.id).collect(),
                checked: ids.into_iter().collect(),
            },
            Err(e) => {
                tracing::warn!(error = %e, "could not look up the plan's recipients; not checking them at submit");
                RecipientsSeen::default()
            }
        }
    }

    /// Replaces the registered actions with those stored in the database. A stored spec that does not decode
    /// or compile is left out, with an error logged.
    ///
    /// # Errors
    /// Store errors.
    pub async fn load(&self) -> Result<(), StoreError> {
        let stored = self.store.actions_all().await?;
        let mut specs = BTreeMap::new();
        for action in stored {
            match serde_json::from_str::<ActionSpec>(&action.spec) {
                Ok(spec) if StaticCatalog::new([spec.clone()]).is_ok() => {
                    specs.insert(spec.name.clone(), spec);
                }
                Ok(_) | Err(_) => tracing::error!(action = %action.name, "a stored action spec is unusable; left out"),
            }
        }
        self.replace(specs).map_err(|e| StoreError::Corrupt { what: "actions", message: e.to_string() })
    }

    /// Adds (or replaces) the actions `worker_id` serves: in the database first, so that every orchestrator
    /// accepts them, then here.
    ///
    /// # Errors
    /// [`RegisterError::Schema`] when a spec's args schema is not a valid JSON Schema (nothing is registered);
    /// [`RegisterError::Store`].
    pub async fn register(&self, worker_id: &str, specs: Vec<ActionSpec>, now_ms: i64) -> Result<(), RegisterError> {
        StaticCatalog::new(specs.iter().cloned())?;
        let stored: Vec<(String, String)> = specs
            .iter()
            .map(|s| serde_json::to_string(s).map(|json| (s.name.clone(), json)))
            .collect::<Result<_, _>>()
            .map_err(|e| StoreError::Corrupt { what: "action spec", message: e.to_string() })?;
        self.store.actions_register(worker_id, &stored, now_ms).await?;
        let mut guard = self.registered.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = guard.0.clone();
        for spec in specs {
            next.insert(spec.name.clone(), spec);
        }
        let compiled = StaticCatalog::new(next.values().cloned())?;
        *guard = (next, Arc::new(compiled));
        Ok(())
    }

    fn replace(&self, specs: BTreeMap<String, ActionSpec>) -> Result<(), SchemaError> {
        let compiled = StaticCatalog::new(specs.values().cloned())?;
        *self.registered.write().unwrap_or_else(std::sync::PoisonError::into_inner) = (specs, Arc::new(compiled));
        Ok(())
    }

    /// Every action spec: built-ins overridden by registered ones, sorted by name.
    pub fn specs(&self) -> Vec<ActionSpec> {
        let snapshot = self.snapshot();
        snapshot.names().into_iter().filter_map(|n| snapshot.get(n).map(|e| e.spec().clone())).collect()
    }
}

/// The action names a plan document's steps use (leniently: a malformed plan names what it can).
fn actions_of(plan: &Value) -> impl Iterator<Item = &str> {
    plan.get("steps").and_then(Value::as_array).into_iter().flatten().filter_map(|s| s.get("action")?.as_str())
}
