//! `ffn view SEG --image RAW --z 120 --out slice.png`: one slice of a segmentation, each segment in
//! its own colour, blended over the grey image (see `ffn_core::segmentation::overlay`).
//!
//! Only the slice is read from the HDF5 files. [`render_slice_png`] is the reusable entry point.

use anyhow::{Context, Result, bail};
use ffn_core::segmentation::overlay::{render_overlay, to_grey, zoom_rgb};
use ffn_io::VolumeSpec;
use std::path::{Path, PathBuf};

/// Arguments of `ffn view`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The segmentation, FILE.h5:DATASET (any integer type, axes z,y,x).
    pub seg: String,
    /// The grey image under it, FILE.h5:DATASET (uint8, or float scaled to the slice's range).
    #[arg(long)]
    pub image: Option<String>,
    /// Draw the z slice with this index (the default, at the middle of the volume).
    #[arg(long, conflicts_with_all = ["y", "x"])]
    pub z: Option<usize>,
    /// Draw the y slice with this index (rows are z, columns x).
    #[arg(long, conflicts_with = "x")]
    pub y: Option<usize>,
    /// Draw the x slice with this index (rows are z, columns y).
    #[arg(long)]
    pub x: Option<usize>,
    /// Output PNG file.
    #[arg(long)]
    pub out: PathBuf,
    /// Opacity of the segment colours inside segments (boundaries are always opaque).
    #[arg(long, default_value_t = 0.45)]
    pub alpha: f32,
    /// Scale the picture up by this integer factor (nearest neighbour).
    #[arg(long, default_value_t = 1)]
    pub zoom: usize,
}

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
    fn index(self) -> usize {
        match self {
            Axis::Z => 0,
            Axis::Y => 1,
            Axis::X => 2,
        }
    }
    fn name(self) -> &'static str {
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

/// Runs `ffn view`.
pub fn run(args: Args) -> Result<()> {
    let seg: VolumeSpec = args
        .seg
        .parse()
        .context("ffn view: segmentation argument")?;
    let image: Option<VolumeSpec> = args
        .image
        .as_deref()
        .map(str::parse)
        .transpose()
        .context("ffn view: --image")?;
    let (axis, index) = match (args.z, args.y, args.x) {
        (Some(z), _, _) => (Axis::Z, Some(z)),
        (_, Some(y), _) => (Axis::Y, Some(y)),
        (_, _, Some(x)) => (Axis::X, Some(x)),
        _ => (Axis::Z, None),
    };
    let index = match index {
        Some(i) => i,
        None => {
            ffn_io::dataset_shape(&seg).with_context(|| format!("ffn view: reading {seg}"))?[0] / 2
        }
    };
    let s = render_slice_png(
        &seg,
        image.as_ref(),
        axis,
        index,
        args.alpha,
        args.zoom,
        &args.out,
    )?;
    println!(
        "ffn view: wrote {} ({} x {} pixels, {} slice {index}, {} segments)",
        args.out.display(),
        s.width,
        s.height,
        axis.name(),
        s.segments
    );
    Ok(())
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
    let shape = ffn_io::dataset_shape(seg).with_context(|| format!("reading {seg}"))?;
    if let Some(img) = image {
        let ishape = ffn_io::dataset_shape(img).with_context(|| format!("reading {img}"))?;
        ffn_io::check_same_shape(seg, &shape, img, &ishape)?;
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
    let labels: Vec<u64> = ffn_io::read_labels_region(seg, offset, size)
        .with_context(|| format!("reading {} slice {index} of {seg}", axis.name()))?
        .iter()
        .copied()
        .collect();
    let grey: Vec<u8> = match image {
        None => vec![64; labels.len()],
        Some(img) => {
            let dtype = ffn_io::dataset_dtype(img).with_context(|| format!("reading {img}"))?;
            if dtype == "uint8" {
                ffn_io::read_image_u8_region(img, offset, size)?
                    .iter()
                    .copied()
                    .collect()
            } else {
                let v: Vec<f32> = ffn_io::read_image_f32_region(img, offset, size)?
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
    ffn_io::write_rgb_png(out, w, h, &zoom_rgb(&rgb, width, height, zoom))?;
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
        ffn_io::write_labels(&seg, &labels).unwrap();
        ffn_io::write_image_f32(
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
        ffn_io::write_image_u8(&other, &Array3::zeros((2, 2, 2))).unwrap();
        let e = render_slice_png(&seg, Some(&other), Axis::Z, 0, 0.5, 1, &out)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shape mismatch"), "{e}");
    }
}
