//! # ffn-io
//!
//! Files and formats of ffn-rs: HDF5 volumes, image stacks, label maps, checkpoints and configs;
//! inference of a volume on disk ([`infer`]) and tiled inference over a tile store ([`tiled`]).
//!
//! Volumes are named `file.h5:dataset` (as in google/ffn) and stored with axes **z, y, x**. Every
//! function returns [`IoError`], whose message is one line naming the file (and dataset, tensor or
//! key) and what was expected and found.
#![warn(missing_docs)]

pub mod atomic;
pub mod average;
pub mod checkpoint;
pub mod config;
pub mod coords;
pub mod cpu_time;
pub mod crc32c;
pub mod deepen;
pub mod demo;
pub mod derived;
pub mod error;
pub mod evaluation;
pub mod export;
pub mod flyem_sample;
pub mod heldout;
pub mod import;
pub mod infer;
pub mod inference_defaults;
pub mod labels;
pub mod learning;
pub mod memory;
pub mod model;
pub mod normalisation;
mod ome_zarr;
pub mod partitions;
pub mod picture;
pub mod plot;
pub mod precomputed;
pub mod region_writer;
pub mod request;
pub mod slice_view;
pub mod stack;
pub mod synth;
pub mod tf_bundle;
pub mod tiff_pages;
pub mod tile_overlaps;
pub mod tile_store;
pub mod tiled;
pub mod training;
pub mod volume;
pub mod xyz;
pub mod zarr_store;

pub use checkpoint::{Checkpoint, load_checkpoint, save_checkpoint};
pub use error::IoError;
pub use infer::{InferEvent, InferOptions, InferOutcome, infer_volume};
pub use model::{LoadedModel, TrainingNormalisation, load_any_model, load_model};
pub use normalisation::{ChosenNormalisation, NormalisationChoice};
pub use picture::write_rgb_png;
pub use request::{InferenceRequest, load_inference_request, parse_inference_request};
pub use volume::{
    VolumeFormat, VolumeSpec, check_same_shape, dataset_dtype, dataset_shape, list_datasets,
    read_image_f32, read_image_f32_region, read_image_u8, read_image_u8_region, read_labels,
    read_labels_region, write_image_f32, write_image_u8, write_labels, write_labels_u32,
};

/// The version of this crate, as written in its manifest.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
