//! The live action catalog: Cairn's built-in actions plus the actions registered workers serve.
//!
//! Submissions validate against a snapshot (an `Arc`), so registering a worker never blocks validation and a
//! submission sees one consistent catalog. A registered spec replaces a built-in of the same name (a newer
//! version of an action wins).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use cairn_core::catalog::{ActionCatalog, ActionSpec, CatalogEntry, SchemaError, StaticCatalog};

/// Built-ins plus registered actions.
pub struct LiveCatalog {
    base: Arc<dyn ActionCatalog + Send + Sync>,
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
}

impl ActionCatalog for Snapshot {
    fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.registered.get(name).or_else(|| self.base.get(name))
    }
    fn names(&self) -> Vec<&str> {
        let mut names = self.base.names();
        names.extend(self.registered.names());
        names.sort_unstable();
        names.dedup();
        names
    }
}

impl LiveCatalog {
    /// A catalog over `base` with nothing registered yet.
    pub fn new(base: Arc<dyn ActionCatalog + Send + Sync>) -> Self {
        Self { base, registered: RwLock::new((BTreeMap::new(), Arc::new(StaticCatalog::default()))) }
    }

    /// The current view.
    pub fn snapshot(&self) -> Snapshot {
        let guard = self.registered.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        Snapshot { base: self.base.clone(), registered: guard.1.clone() }
    }

    /// Adds (or replaces) registered actions.
    ///
    /// # Errors
    /// [`SchemaError`] when a spec's args schema is not a valid JSON Schema; nothing is registered then.
    pub fn register(&self, specs: Vec<ActionSpec>) -> Result<(), SchemaError> {
        let mut guard = self.registered.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = guard.0.clone();
        for spec in specs {
            next.insert(spec.name.clone(), spec);
        }
        let compiled = StaticCatalog::new(next.values().cloned())?;
        *guard = (next, Arc::new(compiled));
        Ok(())
    }

    /// Every action spec: built-ins overridden by registered ones, sorted by name.
    pub fn specs(&self) -> Vec<ActionSpec> {
        let snapshot = self.snapshot();
        snapshot.names().into_iter().filter_map(|n| snapshot.get(n).map(|e| e.spec().clone())).collect()
    }
}
