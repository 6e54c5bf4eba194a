//! Each seed example's promises, tested.
//!
//! One binary for the crate, its files as modules: one link instead of
//! one per file.

mod seed000_web_middleware;
mod seed001_table_sqlite_guards;
mod seed002_tutorial;
mod seed003_actions;
mod seed004_service_requirements;
