//! The tables of one limit's plans, which hand keys to each other.
//!
//! A limit whose numbers depend on the key's plan keeps one table per plan
//! (each table has one policy), all hashing keys alike. A key lives in one
//! of them at a time: the first time a table meets a key that another plan's
//! table holds (the key's plan changed), the state moves over, carried to
//! the new numbers ([`Policy::carry`](crate::Policy::carry)), so a change of
//! plan gives no fresh quota and loses no use. Nothing here is on the path
//! of a key its table already tracks.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// The tables of one limit's plans (`T` is a table's shared state).
pub(crate) struct PlanTables<T> {
    /// The current table of each plan. Weak, so that a table dropped by
    /// every user (and its sweeper thread) goes, and no table keeps its
    /// siblings alive.
    members: Mutex<Vec<Weak<T>>>,
    /// Held while a key moves between tables. A move holds it, then the
    /// destination's shard lock, then the source's: one lock over every
    /// move, since two moves towards each other's tables (of keys in the
    /// same shards) would otherwise each hold the lock the other waits
    /// for. Only a key's first request to a table comes here.
    moves: Mutex<()>,
}

impl<T> PlanTables<T> {
    pub(crate) fn new() -> Self {
        PlanTables {
            members: Mutex::new(Vec::new()),
            moves: Mutex::new(()),
        }
    }

    /// Adds `table`, in place of `replacing` (a table whose numbers changed)
    /// if given.
    pub(crate) fn join(&self, table: &Arc<T>, replacing: Option<&Arc<T>>) {
        let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        members.retain(|member| {
            member.strong_count() > 0
                && replacing.is_none_or(|old| !std::ptr::eq(member.as_ptr(), Arc::as_ptr(old)))
        });
        members.push(Arc::downgrade(table));
    }

    /// Every live table but `table`.
    pub(crate) fn others(&self, table: &Arc<T>) -> Vec<Arc<T>> {
        let members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        members
            .iter()
            .filter(|member| !std::ptr::eq(member.as_ptr(), Arc::as_ptr(table)))
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// The lock a move holds.
    pub(crate) fn lock_moves(&self) -> MutexGuard<'_, ()> {
        self.moves.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_are_the_live_tables_but_the_one_asking() {
        let tables = PlanTables::new();
        let (free, pro) = (Arc::new("free"), Arc::new("pro"));
        tables.join(&free, None);
        tables.join(&pro, None);
        assert_eq!(tables.others(&free), vec![Arc::clone(&pro)]);
        let renumbered = Arc::new("pro, renumbered");
        tables.join(&renumbered, Some(&pro));
        assert_eq!(tables.others(&free), vec![Arc::clone(&renumbered)]);
        drop(renumbered);
        assert!(tables.others(&free).is_empty());
    }
}
