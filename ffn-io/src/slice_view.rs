//! One slice of a segmentation drawn over its image as a PNG (`ffn view`): only the slice is read
//! from the HDF5 files; the colours are ffn-core's overlay.

use std::path::Path;

use anyhow::{Context, Result, bail};
use ffn_core::segmentation::overlay::{render_overlay, to_grey, zoom_rgb};

use crate::VolumeSpec;

/// The axis a slice is cut across.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// A z slice (rows y, columns x).
    Z,
    /// A y slice (rows z, columns x).
    Y,
    /// An x slice (rows z, columns y).
    X,
}

impl Axis {
    /// The axis index in `[z, y, x]`.
    pub fn index(self) -> usize {
        match self {
            Axis::Z => 0,
            Axis::Y => 1,
            Axis::X => 2,
        }
    }
    /// `z`, `y` or `x`.
    pub fn name(self) -> &'static str {
        ["z", "y", "x"][self.index()]
    }
}

/// What [`render_slice_png`] drew.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceSummary {
    /// Picture width in pixels.
    pub width: usize,
    /// Picture height in pixels.
    pub height: usize,
    /// Distinct non-zero segments in the slice.
    pub segments: usize,
}

/// Reads one slice of `seg` (and `image`) across `axis` at `index`, draws the overlay and writes
/// it as an RGB PNG to `out`.
pub fn render_slice_png(
    seg: &VolumeSpec,
    image: Option<&VolumeSpec>,
    axis: Axis,
    index: usize,
    alpha: f32,
    zoom: usize,
    out: &Path,
) -> Result<SliceSummary> {
    if !(1..=64).contains(&zoom) {
        bail!("--zoom {zoom}: expected 1..=64");
    }
    let shape = crate::dataset_shape(seg).with_context(|| format!("reading {seg}"))?;
    if let Some(img) = image {
        let ishape = crate::dataset_shape(img).with_context(|| format!("reading {img}"))?;
        crate::check_same_shape(seg, &shape, img, &ishape)?;
    }
    let a = axis.index();
    if index >= shape[a] {
        bail!(
            "--{} {index}: expected 0..={} for {seg} of shape {shape:?} (z, y, x)",
            axis.name(),
            shape[a].saturating_sub(1)
        );
    }
    let mut offset = [0; 3];
    offset[a] = index;
    let mut size = shape;
    size[a] = 1;
    let (height, width) = match axis {
        Axis::Z => (shape[1], shape[2]),
        Axis::Y => (shape[0], shape[2]),
        Axis::X => (shape[0], shape[1]),
    };
    let labels: Vec<u64> = crate::read_labels_region(seg, offset, size)
        .with_context(|| format!("reading {} slice {index} of {seg}", axis.name()))?
        .iter()
        .copied()
        .collect();
    let grey: Vec<u8> = match image {
        None => vec![64; labels.len()],
        Some(img) => {
            let dtype = crate::dataset_dtype(img).with_context(|| format!("reading {img}"))?;
            if dtype == "uint8" {
                crate::read_image_u8_region(img, offset, size)?
                    .iter()
                    .copied()
                    .collect()
            } else {
                let v: Vec<f32> = crate::read_image_f32_region(img, offset, size)?
                    .iter()
                    .copied()
                    .collect();
                to_grey(&v).with_context(|| format!("{img}"))?
            }
        }
    };
    let mut segments: Vec<u64> = labels.iter().copied().filter(|&v| v != 0).collect();
    segments.sort_unstable();
    segments.dedup();
    let rgb =
        render_overlay(&grey, &labels, width, height, alpha).context("drawing the overlay")?;
    let (w, h) = (width * zoom, height * zoom);
    crate::write_rgb_png(out, w, h, &zoom_rgb(&rgb, width, height, zoom))?;
    Ok(SliceSummary {
        width: w,
        height: h,
        segments: segments.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array3;

    #[test]
    fn slices_are_drawn_across_each_axis() {
        let dir = tempfile::tempdir().unwrap();
        let seg = VolumeSpec::new(dir.path().join("seg.h5"), "seg");
        let img = VolumeSpec::new(dir.path().join("raw.h5"), "raw");
        let labels =
            Array3::from_shape_fn((4, 5, 6), |(z, _y, x)| if x < 3 { 1 + z as u64 } else { 0 });
        crate::write_labels(&seg, &labels).unwrap();
        crate::write_image_f32(
            &img,
            &Array3::from_shape_fn((4, 5, 6), |(z, y, x)| (z + y + x) as f32),
        )
        .unwrap();
        let out = dir.path().join("s.png");
        let s = render_slice_png(&seg, Some(&img), Axis::Z, 2, 0.5, 2, &out).unwrap();
        assert_eq!(
            s,
            SliceSummary {
                width: 12,
                height: 10,
                segments: 1
            }
        );
        let decoder =
            png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&out).unwrap()));
        let reader = decoder.read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (12, 10));
        let s = render_slice_png(&seg, None, Axis::X, 1, 0.5, 1, &out).unwrap();
        assert_eq!(
            s,
            SliceSummary {
                width: 5,
                height: 4,
                segments: 4
            }
        );
        let e = render_slice_png(&seg, None, Axis::Y, 5, 0.5, 1, &out)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--y 5: expected 0..=4"), "{e}");
        let other = VolumeSpec::new(dir.path().join("raw.h5"), "small");
        crate::write_image_u8(&other, &Array3::zeros((2, 2, 2))).unwrap();
        let e = render_slice_png(&seg, Some(&other), Axis::Z, 0, 0.5, 1, &out)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shape mismatch"), "{e}");
    }
}
