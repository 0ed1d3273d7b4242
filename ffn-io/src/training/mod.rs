//! Training runs from files: the volumes and coordinates of a run, its checkpoints (with the
//! trainer-state convention that makes `resume` exact), its metrics log and training curve.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use ffn_comm::data_parallel::DataParallelOptions;
//! use ffn_core::model_spec::ModelConfig;
//! use ffn_io::training::{TrainOptions, train};
//!
//! let spec = |s: &str| -> anyhow::Result<_> { Ok(("vol".to_string(), s.parse()?)) };
//! let model = ModelConfig { depth: 6, features: 32, fov: [25, 25, 25], deltas: [6, 6, 6] };
//! let opts = TrainOptions::new(
//!     vec![spec("train.h5:image")?],
//!     vec![spec("train.h5:labels")?],
//!     "train.coords",
//!     "run",
//!     model,
//! );
//! // One machine; `DataParallelOptions::over(Backend::Shm, 1)` etc. for data-parallel training.
//! let summary = train(&opts, &DataParallelOptions::default(), |_, step| {
//!     if let Some(row) = &step.row {
//!         println!("{}", row.csv());
//!     }
//! })?;
//! println!("checkpoint {}", summary.checkpoint.display());
//! # Ok(())
//! # }
//! ```

mod log;
mod options;
mod run;
pub mod stop;
mod volumes;

pub use log::{CSV_HEADER, LogRow, write_training_curve};
pub use options::{LogFormat, OptimizerKind, TrainOptions};
pub use run::{Start, StepOutcome, Summary, TRAINER_STATE, TrainingRun, train};
pub use volumes::{Normalisation, TrainingData, VolumeReads, load_training_data};
