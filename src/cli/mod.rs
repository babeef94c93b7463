//! The command line's arguments, one module per family of commands; `main.rs` dispatches.

pub mod bench;
pub mod build_corpus;
pub mod calibrate_heads;
pub mod calibrate_policy;
pub mod check_kernels;
pub mod gateway;
pub mod penalty_args;
pub mod store;
pub mod train_eagle;
pub mod train_heads;
