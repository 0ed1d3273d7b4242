//! The error type of ffn-io.
//!
//! Every variant renders as one line that names the file (and dataset, tensor or key where there is
//! one) and says what was expected and what was found.

use std::path::PathBuf;

/// Everything that can go wrong while reading or writing ffn-rs files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// An option of an inference or tiling run that cannot work.
    #[error("{field}: expected {expected}, found {found}")]
    InvalidOption {
        /// The option, e.g. `tile_overlap` (the CLI's flag names map to these).
        field: String,
        /// What would be accepted.
        expected: String,
        /// What was given.
        found: String,
    },
    /// Flood-fill inference failed on a volume or tile (`what` names which).
    #[error("{what}: {source}")]
    Inference {
        /// The volume, region or tile being segmented.
        what: String,
        /// The core error.
        source: ffn_core::inference::InferenceError,
    },
    /// Tiling or reconciliation failed (`what` names the plan, store or tile).
    #[error("{what}: {source}")]
    Segmentation {
        /// The plan, store or tile.
        what: String,
        /// The core error.
        source: ffn_core::segmentation::SegmentationError,
    },
    /// The file does not exist.
    #[error("{path}: file not found")]
    NotFound {
        /// The missing file.
        path: PathBuf,
    },
    /// An operating-system error while reading or writing a file.
    #[error("{path}: {source}")]
    Os {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A `file.h5:dataset` argument that cannot be parsed.
    #[error(
        "invalid volume '{spec}': {reason} (expected FILE:DATASET, e.g. raw.h5:raw, or STORE.zarr/ARRAY, e.g. raw.zarr/raw)"
    )]
    InvalidSpec {
        /// The text given by the user.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The file exists but the HDF5 library cannot open it (another format, truncated, damaged).
    #[error("{path}: not a readable HDF5 file (another format, truncated or damaged): {detail}")]
    NotHdf5 {
        /// The file.
        path: PathBuf,
        /// The HDF5 library's message.
        detail: String,
    },
    /// The HDF5 file has no dataset of the requested name.
    #[error("{path}: no dataset '{dataset}'; datasets in the file: {available}")]
    MissingDataset {
        /// The file.
        path: PathBuf,
        /// The dataset asked for.
        dataset: String,
        /// The datasets that exist, comma-separated (or `none`).
        available: String,
    },
    /// A dataset of an element type this reader does not accept.
    #[error("{spec}: wrong element type: expected {expected}, found {found}")]
    WrongDtype {
        /// `file:dataset` (or `file: tensor`).
        spec: String,
        /// The accepted types.
        expected: String,
        /// The type on disk.
        found: String,
    },
    /// A dataset or array of the wrong number of dimensions.
    #[error("{spec}: expected a {expected}D array ({axes}), found {found}D with shape {shape:?}")]
    WrongRank {
        /// `file:dataset`.
        spec: String,
        /// Expected number of dimensions.
        expected: usize,
        /// Axis names of the expected layout, e.g. `z,y,x`.
        axes: String,
        /// Found number of dimensions.
        found: usize,
        /// Found shape.
        shape: Vec<usize>,
    },
    /// Two volumes that must have one shape do not.
    #[error("shape mismatch: {a} has shape {a_shape:?} (z,y,x) but {b} has shape {b_shape:?}")]
    ShapeMismatch {
        /// First volume.
        a: String,
        /// Its shape.
        a_shape: Vec<usize>,
        /// Second volume.
        b: String,
        /// Its shape.
        b_shape: Vec<usize>,
    },
    /// A sub-volume that does not lie inside the dataset.
    #[error(
        "{spec}: region at offset {offset:?} with shape {shape:?} (z,y,x) lies outside the dataset of shape {dataset_shape:?}"
    )]
    RegionOutOfBounds {
        /// `file:dataset`.
        spec: String,
        /// Requested offset.
        offset: [usize; 3],
        /// Requested shape.
        shape: [usize; 3],
        /// The dataset's shape.
        dataset_shape: Vec<usize>,
    },
    /// NaN or infinity in a float image.
    #[error("{spec}: non-finite value {value} at (z,y,x) = {index:?}; images must be finite")]
    NonFinite {
        /// `file:dataset`.
        spec: String,
        /// Position of the first bad value.
        index: [usize; 3],
        /// The value.
        value: f64,
    },
    /// A negative id in a label volume.
    #[error("{spec}: negative label {value} at {index:?}; label ids must be >= 0")]
    NegativeLabel {
        /// `file:dataset`.
        spec: String,
        /// Position of the first bad value (z,y,x, or row,column for tables).
        index: Vec<usize>,
        /// The value.
        value: i64,
    },
    /// A volume or region too large to read into memory (see [`crate::memory`]).
    #[error("{spec}: {reason}")]
    TooLarge {
        /// The volume, `file.h5:dataset`.
        spec: String,
        /// What it declares and the limit.
        reason: String,
    },
    /// Any other error reported by the HDF5 library.
    #[error("{spec}: HDF5 error: {detail}")]
    Hdf5 {
        /// `file:dataset` or the file.
        spec: String,
        /// The library's message.
        detail: String,
    },
    /// An error reported by the Zarr library (a damaged array, an unsupported codec, ...).
    #[error("{spec}: Zarr error: {detail}")]
    Zarr {
        /// `store.zarr/array`.
        spec: String,
        /// The library's message.
        detail: String,
    },
    /// A PNG file that cannot be decoded or is not 8-bit grayscale.
    #[error("{path}: {reason}")]
    Image {
        /// The slice file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A slice whose size differs from the first slice of the stack.
    #[error(
        "{path}: slice of size {found_w}x{found_h} (width x height), but the stack's first slice {first} is {expected_w}x{expected_h}"
    )]
    SliceSize {
        /// The odd slice.
        path: PathBuf,
        /// The stack's first slice.
        first: PathBuf,
        /// Expected width.
        expected_w: u32,
        /// Expected height.
        expected_h: u32,
        /// Found width.
        found_w: u32,
        /// Found height.
        found_h: u32,
    },
    /// A folder or pattern that matches no slice, or slices that cannot be ordered.
    #[error("{source_desc}: {reason}")]
    Stack {
        /// The folder or pattern.
        source_desc: String,
        /// What is wrong.
        reason: String,
    },
    /// A supervoxel -> body table that does not fit the supervoxel volume.
    #[error("{spec}: {reason}")]
    LabelTable {
        /// `file:dataset` of the table.
        spec: String,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint file that cannot be parsed.
    #[error("{path}: not a valid checkpoint: {reason}")]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint of another architecture than the one expected.
    #[error("{path}: checkpoint architecture differs: {diff}")]
    Architecture {
        /// The file.
        path: PathBuf,
        /// Every difference, `field: expected X, found Y`, separated by `; `.
        diff: String,
    },
    /// A TensorFlow tensor-bundle checkpoint that cannot be parsed.
    #[error("{path}: invalid TensorFlow checkpoint: {reason}")]
    TfBundle {
        /// The `.index` or data file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A checksum that does not match (corrupt file).
    #[error(
        "{path}: checksum mismatch in {what}: stored crc32c {expected:#010x}, computed {found:#010x}"
    )]
    Crc {
        /// The file.
        path: PathBuf,
        /// The block or tensor whose checksum failed.
        what: String,
        /// The stored (unmasked) crc32c.
        expected: u32,
        /// The crc32c of the bytes read.
        found: u32,
    },
    /// A config file that cannot be parsed or that has a wrong key or value.
    #[error("{path}: {reason}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong (for an unknown key: its name and the valid keys).
        reason: String,
    },
}

impl IoError {
    /// An [`IoError::Os`], or [`IoError::NotFound`] when the OS says the file does not exist.
    pub fn os(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if source.kind() == std::io::ErrorKind::NotFound {
            IoError::NotFound { path }
        } else {
            IoError::Os { path, source }
        }
    }
}

/// Makes a multi-line library message fit on one line.
pub(crate) fn one_line(text: &str) -> String {
    text.split('\n')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

impl From<ffn_core::segmentation::SegmentationError> for IoError {
    fn from(source: ffn_core::segmentation::SegmentationError) -> Self {
        Self::Segmentation {
            what: "reconciling tiles".into(),
            source,
        }
    }
}
