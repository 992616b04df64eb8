//! What the serving layer keeps per database in memory, beside the host's connections: the
//! follower, the last reconcile's outcome, the storage options last given for a Paimon source
//! and the last publish. `Database` is the value every SQL function receives: the host's
//! `Session` (its connections) and this state, neither reaching into the other.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::core::location::same_table;
use crate::core::source::Origin;
use crate::host::sandbox::Sandbox;
use crate::host::session::SharedSession;
use crate::lake::{Access, LakeOptions};
use crate::serving::follow::Follower;
use crate::serving::meta::PlaceCache;
use crate::serving::publish::LastPublish;
use crate::serving::reconcile::Reconciled;

/// One database's extension state: its connections and the serving layer's memory.
pub struct Database {
    pub session: SharedSession,
    /// The follower of this database's Paimon source, if one runs.
    follower: Mutex<Option<Follower>>,
    /// The last reconcile's outcome, for when the writer was busy and it could not be stored.
    reconciled: Mutex<Option<Reconciled>>,
    /// The storage options last given per Paimon table (path, options; the source and any
    /// publish target), kept in memory only so that refresh, follow, status and publish reach
    /// the table a build or publish reached; never persisted.
    lake_options: Mutex<Vec<(String, LakeOptions)>>,
    /// What this database last published to a Paimon mart table (`serving_publish`).
    pub published: LastPublish,
    /// Where the layer lives per caller search_path, for the dashboard (`meta::PlaceCache`).
    pub places: PlaceCache,
}

/// How many tables' storage options are remembered (the oldest is forgotten first).
const REMEMBERED_TABLES: usize = 16;

/// What each registered function receives as extra info.
pub type SharedDatabase = Arc<Database>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Database {
    pub fn new(session: SharedSession) -> SharedDatabase {
        Arc::new(Database {
            session,
            follower: Mutex::new(None),
            reconciled: Mutex::new(None),
            lake_options: Mutex::new(Vec::new()),
            published: LastPublish::default(),
            places: PlaceCache::default(),
        })
    }

    pub fn follower(&self) -> MutexGuard<'_, Option<Follower>> {
        lock(&self.follower)
    }

    pub fn reconciled(&self) -> MutexGuard<'_, Option<Reconciled>> {
        lock(&self.reconciled)
    }

    /// How a call reaches the Paimon table `source` names: with the options it gives (then
    /// remembered for that table), or else with those last given for the same table.
    pub fn lake_access(&self, access: &Access, lake: Option<&str>) -> Access {
        if let Some(path) = lake.filter(|_| !access.options.is_empty()) {
            let mut memo = lock(&self.lake_options);
            memo.retain(|(p, _)| p != path);
            if memo.len() >= REMEMBERED_TABLES {
                memo.remove(0);
            }
            memo.push((path.to_string(), access.options.clone()));
            return access.clone();
        }
        self.remembered_access(access, lake)
    }

    /// `lake_access` without remembering anything (for bind, which must have no side effects).
    pub fn remembered_access(&self, access: &Access, lake: Option<&str>) -> Access {
        let Some(path) = lake.filter(|_| access.options.is_empty()) else { return access.clone() };
        match lock(&self.lake_options).iter().find(|(p, _)| p == path) {
            Some((_, options)) => Access { sandbox: access.sandbox.clone(), options: options.clone() },
            None => access.clone(),
        }
    }

    /// The source of the running follower, if one runs and it follows something other than
    /// `source` (a build from `source` would leave it applying another table's changes).
    pub fn followed_elsewhere(&self, source: &str, sandbox: &Sandbox) -> Option<String> {
        let guard = self.follower();
        let followed = guard.as_ref()?;
        let same = match (Origin::lake_path(&followed.source, sandbox), Origin::lake_path(source, sandbox)) {
            (Some(a), Some(b)) => same_table(&a, &b),
            _ => false,
        };
        (!same).then(|| followed.source.clone())
    }

    /// Stops the running follower if it still follows `source` (one started since is left alone);
    /// waits for an apply in progress, so never call it from the follower's own thread.
    pub fn stop_following(&self, source: &str) {
        let old = {
            let mut guard = self.follower();
            match guard.as_ref() {
                Some(f) if f.source == source => guard.take(),
                _ => None,
            }
        };
        if let Some(old) = old {
            old.stop();
        }
    }
}
