//! Where a [`Trainer`](super::trainer::Trainer) takes its training patches from.
//!
//! A [`PatchSource`] names its volumes, gives their shapes, and reads the region of one volume that
//! an example needs (normalised image and labels). [`InMemory`] holds whole volumes; a source that
//! reads regions from disk (`ffn-io`) lets a run train on volumes larger than memory. Training is
//! the same, bit for bit, whichever source serves the same data.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use ndarray::ArrayView3;

use super::TrainingError;
use super::trainer::TrainingVolume;

/// The volumes of a training run, read region by region.
pub trait PatchSource: fmt::Debug + Send {
    /// Number of volumes (coordinates refer to them by index).
    fn volume_count(&self) -> usize;

    /// Name of volume `volume` (as in the coordinate file).
    fn name(&self, volume: usize) -> &str;

    /// Shape `[z, y, x]` of volume `volume` (image and labels agree).
    fn shape(&self, volume: usize) -> [usize; 3];

    /// Replaces `image` and `labels` with the region `start .. start + shape` of volume `volume`,
    /// row-major `[z][y][x]`: the normalised image and the object ids. The region lies inside the
    /// volume (the trainer checks coordinates against [`PatchSource::shape`]).
    fn read(
        &mut self,
        volume: usize,
        start: [usize; 3],
        shape: [usize; 3],
        image: &mut Vec<f32>,
        labels: &mut Vec<u64>,
    ) -> Result<(), TrainingError>;
}

/// Whole volumes in memory.
#[derive(Clone, Debug)]
pub struct InMemory {
    volumes: Vec<TrainingVolume>,
}

impl InMemory {
    /// Checks that each volume's image and labels have one shape.
    pub fn new(volumes: Vec<TrainingVolume>) -> Result<Self, TrainingError> {
        for v in &volumes {
            let (a, b) = (v.image.dim(), v.labels.dim());
            if a != b {
                return Err(TrainingError::ShapeMismatch {
                    what: format!("volume {:?}: labels vs image", v.name),
                    expected: [a.0, a.1, a.2],
                    found: [b.0, b.1, b.2],
                });
            }
        }
        Ok(Self { volumes })
    }

    /// The volumes.
    pub fn volumes(&self) -> &[TrainingVolume] {
        &self.volumes
    }

    /// As a boxed source for [`Trainer::with_source`](super::trainer::Trainer::with_source).
    pub fn boxed(self) -> Box<dyn PatchSource> {
        Box::new(self)
    }
}

impl PatchSource for InMemory {
    fn volume_count(&self) -> usize {
        self.volumes.len()
    }

    fn name(&self, volume: usize) -> &str {
        &self.volumes[volume].name
    }

    fn shape(&self, volume: usize) -> [usize; 3] {
        let d = self.volumes[volume].image.dim();
        [d.0, d.1, d.2]
    }

    fn read(
        &mut self,
        volume: usize,
        start: [usize; 3],
        shape: [usize; 3],
        image: &mut Vec<f32>,
        labels: &mut Vec<u64>,
    ) -> Result<(), TrainingError> {
        let v = &self.volumes[volume];
        let dims = self.shape(volume);
        if (0..3).any(|d| start[d] + shape[d] > dims[d]) {
            return Err(TrainingError::Read {
                volume: v.name.clone(),
                reason: format!(
                    "region {start:?} + {shape:?} (z,y,x) is outside the volume's {dims:?}"
                ),
            });
        }
        cut(v.image.view(), v.labels.view(), start, shape, image, labels);
        Ok(())
    }
}

/// Replaces `image_out` and `labels_out` with the region `start .. start + shape` (inside both).
pub(crate) fn cut(
    image: ArrayView3<f32>,
    labels: ArrayView3<u64>,
    start: [usize; 3],
    shape: [usize; 3],
    image_out: &mut Vec<f32>,
    labels_out: &mut Vec<u64>,
) {
    let n = shape.iter().product();
    image_out.clear();
    labels_out.clear();
    image_out.reserve(n);
    labels_out.reserve(n);
    for z in start[0]..start[0] + shape[0] {
        for y in start[1]..start[1] + shape[1] {
            for x in start[2]..start[2] + shape[2] {
                image_out.push(image[(z, y, x)]);
                labels_out.push(labels[(z, y, x)]);
            }
        }
    }
}

/// A read failure of a source outside this crate, as a [`TrainingError::Read`].
pub fn read_error(volume: &str, reason: impl fmt::Display) -> TrainingError {
    TrainingError::Read {
        volume: String::from(volume),
        reason: format!("{reason}"),
    }
}
