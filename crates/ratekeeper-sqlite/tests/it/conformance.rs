//! The store conformance suite on a SQLite file.

use ratekeeper_sqlite::SqliteStore;
use ratekeeper_test_support::conformance::Supports;

async fn sqlite() -> Option<(tempfile::TempDir, SqliteStore)> {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::builder(dir.path().join("conformance.db"))
        .open()
        .unwrap();
    Some((dir, store))
}

ratekeeper_test_support::store_conformance!(sqlite, Supports::EVERYTHING);
