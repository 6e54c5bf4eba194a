//! Opening one new database file from many connections at once: the first
//! switches it to WAL and creates the table while the others wait, within
//! the busy timeout, instead of failing with "database is locked".

use futures_executor::block_on;
use std::sync::{Arc, Barrier};

use ratekeeper::{Gcra, Limit, Store};
use ratekeeper_sqlite::SqliteStore;

#[test]
fn many_connections_open_a_new_file_at_once() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limits.db");
        let start = Arc::new(Barrier::new(8));
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let (path, start) = (path.clone(), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    SqliteStore::open(&path)
                })
            })
            .collect();
        let limit = Limit::new("opening", Gcra::per_minute(100).unwrap()).unwrap();
        for opener in openers {
            let store = opener
                .join()
                .unwrap()
                .unwrap_or_else(|error| panic!("round {round}: {error:?}"));
            assert!(block_on(store.check(&limit, b"k", 1)).unwrap().is_allowed());
        }
    }
}
