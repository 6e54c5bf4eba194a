//! Each seed example's promises, tested.
//!
//! One binary for the crate, its files as modules: one link instead of
//! one per file.

mod axum_middleware;
mod llm_tokens;
mod named_actions;
mod service_requirements;
mod sqlite_shared_file;
mod tutorial;
