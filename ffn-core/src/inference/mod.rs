//! Flood-fill inference: the canvas that segments a volume object by object, its movement policy,
//! seed policies and options.
//!
//! The network is behind the small [`Predictor`] trait, so that the canvas runs with the real
//! `convstack_3d` network, with another model, or with an oracle in tests. Nothing here touches files
//! or threads; ffn-io's `infer` and `tiled` modules add those.
//!
//! [`segment`] is the entry point: seeds by a [`SeedPolicy`], then the canvas, object by object.
//!
//! Coordinates are `[z, y, x]` throughout.

mod agglomerate;
mod canvas;
mod image;
pub mod movement;
pub mod options;
mod oracle;
pub mod seeds;
mod segment;
mod symmetry;

#[cfg(test)]
mod tests;

pub use agglomerate::{AgglomerateOptions, AgglomerationSummary, agglomerate};
pub use canvas::{Canvas, Counters, Origin, SeedOutcome, quantize_probability};
pub use image::{CanvasImage, normalise};
pub use movement::FaceMaxPolicy;
pub use options::{InferenceOptions, Logits, logit, sigmoid};
pub use oracle::LabelOracle;
pub use segment::{SeedPolicy, SegmentOptions, Segmentation, segment};
pub use symmetry::{SymmetricPredictor, Symmetries};

use alloc::string::String;
use core::fmt;

/// A model that predicts object-mask logits for one field of view.
///
/// Patches are `[z][y][x]` flattened, of the predictor's FOV size. The prediction is the new mask
/// (logits), not an update: for `convstack_3d` it is the seed plus the network's output.
pub trait Predictor {
    /// The field of view `[z, y, x]`.
    fn fov(&self) -> [usize; 3];

    /// Writes the predicted logits for one FOV into `out`.
    fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]);

    /// `batch` FOVs at once (each slice holds them back to back). The default loops over
    /// [`Predictor::predict`]; batched models override it.
    fn predict_batch(&mut self, image: &[f32], seed: &[f32], batch: usize, out: &mut [f32]) {
        let n = self.fov().iter().product::<usize>();
        for b in 0..batch {
            let r = b * n..(b + 1) * n;
            self.predict(&image[r.clone()], &seed[r.clone()], &mut out[r]);
        }
    }
}

impl<P: Predictor + ?Sized> Predictor for &mut P {
    fn fov(&self) -> [usize; 3] {
        (**self).fov()
    }
    fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
        (**self).predict(image, seed, out)
    }
    fn predict_batch(&mut self, image: &[f32], seed: &[f32], batch: usize, out: &mut [f32]) {
        (**self).predict_batch(image, seed, batch, out)
    }
}

/// The `convstack_3d` network predicts `seed + update` for its configured FOV.
impl Predictor for crate::network::ConvStack3d {
    fn fov(&self) -> [usize; 3] {
        self.config().fov
    }
    fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
        self.forward(image, seed, 1, out);
    }
    fn predict_batch(&mut self, image: &[f32], seed: &[f32], batch: usize, out: &mut [f32]) {
        self.forward(image, seed, batch, out);
    }
}

/// Errors of inference set-up and runs.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum InferenceError {
    /// A buffer has the wrong number of elements.
    Shape {
        /// What the buffer is.
        what: &'static str,
        /// Elements expected.
        expected: usize,
        /// Elements found.
        actual: usize,
    },
    /// FOV, deltas or volume geometry do not fit (the message names the field).
    Geometry(String),
    /// Invalid options.
    Options(options::OptionsError),
    /// Segment ids ran out (more than 2^32 - 2 segments).
    TooManySegments,
}

impl fmt::Display for InferenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape {
                what,
                expected,
                actual,
            } => {
                write!(f, "{what}: expected {expected} values, found {actual}")
            }
            Self::Geometry(m) => write!(f, "{m}"),
            Self::Options(e) => write!(f, "{e}"),
            Self::TooManySegments => write!(f, "too many segments: ids ran out (2^32 - 2)"),
        }
    }
}

impl core::error::Error for InferenceError {}

/// Mean and (population) standard deviation of image values, summed in `f64` in the iteration
/// order: the per-volume normalisation of training, and of inference with a model trained so.
pub fn mean_stddev<I: Iterator<Item = f32> + Clone>(values: I) -> (f64, f64) {
    let passes = mean_stddev_in_passes::<core::convert::Infallible>(|visit| {
        values.clone().for_each(visit);
        Ok(())
    });
    match passes {
        Ok(m) => m,
        Err(never) => match never {},
    }
}

/// [`mean_stddev`] of values that `pass` visits, in the same order, twice (the sum, then the
/// squared deviations): for volumes read piece by piece, with the same result as in one piece.
/// The first error of a pass is returned.
pub fn mean_stddev_in_passes<E>(
    mut pass: impl FnMut(&mut dyn FnMut(f32)) -> Result<(), E>,
) -> Result<(f64, f64), E> {
    let (mut count, mut sum) = (0u64, -0.0f64);
    pass(&mut |x| {
        count += 1;
        sum += f64::from(x);
    })?;
    let n = count.max(1) as f64;
    let mean = sum / n;
    let mut squares = -0.0f64;
    pass(&mut |x| squares += (f64::from(x) - mean) * (f64::from(x) - mean))?;
    Ok((mean, libm::sqrt(squares / n)))
}

/// Image normalisation of google/ffn requests: `(x - mean) / stddev`, in `f32`.
pub fn normalize_image(raw: &[f32], mean: f32, stddev: f32, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(raw) {
        *o = normalise(v, mean, stddev);
    }
}

/// [`normalize_image`] in place: the same values without a second buffer.
pub fn normalize_image_in_place(image: &mut [f32], mean: f32, stddev: f32) {
    for v in image {
        *v = normalise(*v, mean, stddev);
    }
}
