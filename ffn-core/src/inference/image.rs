//! The image a flood fill reads: normalised float32 voxels, or raw 8-bit voxels normalised as each
//! patch is cut (a quarter of the memory of a normalised copy, the same values).

use alloc::borrow::Cow;
use alloc::vec::Vec;

/// The normalised value of a raw voxel value: `(v - mean) / stddev`, in float32.
#[inline]
pub fn normalise(v: f32, mean: f32, stddev: f32) -> f32 {
    (v - mean) / stddev
}

/// A volume image, `[z][y][x]` flattened, as a canvas and the seed policies read it.
#[derive(Clone, Copy, Debug)]
pub enum CanvasImage<'a> {
    /// Voxels already normalised.
    Normalised(&'a [f32]),
    /// Raw 8-bit voxels and the normalisation applied to each as it is read ([`normalise`]).
    Raw8 {
        /// The voxels.
        voxels: &'a [u8],
        /// Subtracted first.
        mean: f32,
        /// Divided by next.
        stddev: f32,
    },
}

impl<'a> CanvasImage<'a> {
    /// Number of voxels.
    pub fn len(&self) -> usize {
        match self {
            Self::Normalised(v) => v.len(),
            Self::Raw8 { voxels, .. } => voxels.len(),
        }
    }

    /// True when there are no voxels.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the normalised voxels `start..start + out.len()` into `out`.
    pub fn copy_normalised(&self, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        match *self {
            Self::Normalised(v) => out.copy_from_slice(&v[start..end]),
            Self::Raw8 {
                voxels,
                mean,
                stddev,
            } => {
                for (o, &v) in out.iter_mut().zip(&voxels[start..end]) {
                    *o = normalise(f32::from(v), mean, stddev);
                }
            }
        }
    }

    /// All voxels normalised: borrowed, or a new buffer for raw voxels.
    pub fn normalised(&self) -> Cow<'a, [f32]> {
        match *self {
            Self::Normalised(v) => Cow::Borrowed(v),
            Self::Raw8 { .. } => {
                let mut out: Vec<f32> = alloc::vec![0.0; self.len()];
                self.copy_normalised(0, &mut out);
                Cow::Owned(out)
            }
        }
    }
}

impl<'a> From<&'a [f32]> for CanvasImage<'a> {
    fn from(v: &'a [f32]) -> Self {
        Self::Normalised(v)
    }
}

impl<'a> From<&'a Vec<f32>> for CanvasImage<'a> {
    fn from(v: &'a Vec<f32>) -> Self {
        Self::Normalised(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::SeedPolicy;
    use crate::inference::seeds::sobel_magnitude;

    #[test]
    fn raw_voxels_read_as_the_normalised_copy_would() {
        let raw: Vec<u8> = (0..=255).collect();
        let (mean, stddev) = (128.0, 33.0);
        let normalised: Vec<f32> = raw
            .iter()
            .map(|&v| (f32::from(v) - mean) / stddev)
            .collect();
        let image = CanvasImage::Raw8 {
            voxels: &raw,
            mean,
            stddev,
        };
        assert_eq!(image.len(), 256);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&image.normalised()), bits(&normalised));
        let mut row = [0.0f32; 7];
        image.copy_normalised(100, &mut row);
        assert_eq!(bits(&row), bits(&normalised[100..107]));
        let plain = CanvasImage::from(&normalised);
        plain.copy_normalised(100, &mut row);
        assert_eq!(bits(&row), bits(&normalised[100..107]));
        assert!(matches!(plain.normalised(), Cow::Borrowed(_)));
    }

    #[test]
    fn peaks_of_raw_voxels_are_the_peaks_of_their_normalised_copy() {
        let shape = [24, 40, 40];
        // Boxes of 10-12 voxels, bright and dark alternately.
        let raw: Vec<u8> = (0..shape.iter().product::<usize>())
            .map(|i| {
                let (z, y, x) = (i / 1600, i / 40 % 40, i % 40);
                if (z / 12 + y / 10 + x / 10) % 2 == 0 {
                    200
                } else {
                    40
                }
            })
            .collect();
        let normalised: Vec<f32> = raw
            .iter()
            .map(|&v| normalise(f32::from(v), 128.0, 33.0))
            .collect();
        let image = CanvasImage::Raw8 {
            voxels: &raw,
            mean: 128.0,
            stddev: 33.0,
        };
        let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(sobel_magnitude(image, shape)),
            bits(sobel_magnitude(&normalised, shape))
        );
        let policy = SeedPolicy::default();
        let from_raw = policy.seeds(image, shape).unwrap();
        assert!(!from_raw.is_empty());
        assert_eq!(from_raw, policy.seeds(&normalised, shape).unwrap());
    }
}
