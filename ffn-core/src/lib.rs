//! # ffn-core
//!
//! The engine of ffn-rs: everything about Flood-Filling Networks that is pure computation. No files,
//! no processes, no threads required.
//!
//! The crate is `no_std` + `alloc` without its default `std` feature; `rayon` (which implies `std`)
//! parallelises the kernels.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]

extern crate alloc;

#[cfg(feature = "std")]
pub mod bench;
pub mod inference;
pub mod metrics;
pub mod model_spec;
pub mod rng;
pub mod segmentation;
pub mod synth;
pub mod training;

pub mod conv;
pub mod error;
pub mod hash;
pub mod layers;
pub mod loss;
pub mod network;
pub mod optim;
pub mod parallel;
pub mod tensor;
#[cfg(test)]
mod testutil;

pub use error::CoreError;

/// The version of this crate, as written in its manifest.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
