//! Shared helpers for the cross-crate tests: fixture discovery and tensor comparison.
