//! Numbered store migrations and the runner that records `schema_version`.
