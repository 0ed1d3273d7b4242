//! Inference of a volume on disk: read the image (or a box of it), normalise it (an 8-bit image
//! patch by patch as the canvas cuts it, so it stays 1 byte per voxel), segment it with
//! [`ffn_core::inference::segment`], write the labels (and optionally the probability map).
//! `ffn infer` is [`resolve_infer`] (flags over a google/ffn request over the defaults), this
//! function, a progress bar and [`InferReport`] (the JSON summary and info file).
//!
//! ```no_run
//! use ffn_core::inference::{SeedPolicy, SegmentOptions};
//! use ffn_io::infer::{InferOptions, infer_volume};
//!
//! let model = ffn_io::load_model("model.safetensors".as_ref())?;
//! let mut net = ffn_core::network::ConvStack3d::from_params(model.config, model.params)
//!     .expect("parameters of the checkpoint's architecture");
//! let mut opts = InferOptions::new("raw.h5:raw".parse()?, "seg.h5:seg".parse()?);
//! opts.normalisation.trained = model.normalisation;
//! opts.segment = SegmentOptions {
//!     deltas: model.config.deltas,
//!     seeds: SeedPolicy::Grid { step: 16 },
//!     ..Default::default()
//! };
//! let done = infer_volume(&opts, &mut net, &mut |_| {})?;
//! println!("{} segments", done.segmentation.map_or(0, |s| s.counters.segments));
//! # Ok::<(), ffn_io::IoError>(())
//! ```

use std::path::PathBuf;
use std::time::Instant;

use ffn_core::inference::{
    CanvasImage, Counters, Predictor, SeedPolicy, SegmentOptions, Segmentation,
    normalize_image_in_place, segment,
};
use ndarray::Array3;

mod report;
mod settings;

pub use report::{InferReport, counters_json, default_info_path, options_json};
pub use settings::{
    InferOutputs, InferOverrides, ResolvedInfer, parse_seed_list, read_seed_list, resolve_infer,
};

use crate::atomic::write_atomic;
use crate::error::IoError;
use crate::normalisation::{ChosenNormalisation, NormalisationChoice};
use crate::volume::{
    VolumeSpec, dataset_dtype, dataset_shape, read_image_f32_region, read_image_u8_region,
    write_image_u8, write_labels_u32,
};

/// What [`infer_volume`] segments and where it writes.
#[derive(Clone, Debug, PartialEq)]
pub struct InferOptions {
    /// The image (uint8 or float32, axes z, y, x).
    pub image: VolumeSpec,
    /// Where the segmentation goes (the smallest unsigned type that holds its ids; other
    /// datasets of the file are kept).
    pub out: VolumeSpec,
    /// Where the quantised probability map goes (uint8, 0 = unassigned), if anywhere.
    pub prob_out: Option<VolumeSpec>,
    /// Segment only this box, `(offset, size)` in voxels `[z, y, x]`; `None` is the whole image.
    pub region: Option<([usize; 3], [usize; 3])>,
    /// Where the image normalisation comes from.
    pub normalisation: NormalisationChoice,
    /// Movement deltas, seed policy and flood-fill thresholds. Listed seeds are in the box's
    /// coordinates. `keep_probability_map` is set from `prob_out`.
    pub segment: SegmentOptions,
    /// Also write the seed points here, one `x,y,z` line each in image coordinates.
    pub seeds_out: Option<PathBuf>,
    /// Stop after computing (and writing, with `seeds_out`) the seed points.
    pub seeds_only: bool,
}

impl InferOptions {
    /// Segment all of `image` into `out` with the default options (PolicyPeaks seeds, google/ffn's
    /// thresholds, deltas 0 until set).
    pub fn new(image: VolumeSpec, out: VolumeSpec) -> Self {
        Self {
            image,
            out,
            prob_out: None,
            region: None,
            normalisation: NormalisationChoice::default(),
            segment: SegmentOptions::default(),
            seeds_out: None,
            seeds_only: false,
        }
    }
}

/// What happens during [`infer_volume`], for progress reports.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum InferEvent<'a> {
    /// The image was read and its normalisation chosen.
    Normalised(&'a ChosenNormalisation),
    /// The seed points were computed.
    Seeds {
        /// How many.
        count: usize,
        /// Seconds it took.
        seconds: f64,
    },
    /// A prediction or a seed finished.
    Progress(&'a Counters),
}

/// What [`infer_volume`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct InferOutcome {
    /// First voxel of the segmented box in the image, `[z, y, x]`.
    pub offset: [usize; 3],
    /// Shape of the segmented box, `[z, y, x]`.
    pub shape: [usize; 3],
    /// The normalisation applied.
    pub normalisation: ChosenNormalisation,
    /// The seed points (box coordinates, `[z, y, x]`).
    pub seeds: Vec<[usize; 3]>,
    /// Seconds spent choosing seeds.
    pub seed_seconds: f64,
    /// The segmentation (`None` with `seeds_only`); its origins are in box coordinates.
    pub segmentation: Option<Segmentation>,
    /// Seconds spent flood filling.
    pub seconds: f64,
}

/// Reads `opts.image` (or its box), normalises it, segments it with `predictor` and writes
/// `opts.out` (and `opts.prob_out`); see the module docs. Errors name the volume or file.
pub fn infer_volume<P: Predictor + ?Sized>(
    opts: &InferOptions,
    predictor: &mut P,
    on_event: &mut dyn FnMut(InferEvent<'_>),
) -> Result<InferOutcome, IoError> {
    let (offset, shape) = match opts.region {
        Some(r) => r,
        None => ([0; 3], dataset_shape(&opts.image)?),
    };
    // An 8-bit image stays 8-bit (the canvas normalises each patch as it cuts it: 1 byte per
    // voxel instead of 4, the same values); any other is normalised in place as float32.
    let (voxels, norm) = if dataset_dtype(&opts.image)? == "uint8" {
        let raw = into_flat(read_image_u8_region(&opts.image, offset, shape)?);
        let norm = opts.normalisation.resolve(|| {
            Ok(ffn_core::inference::mean_stddev(
                raw.iter().map(|&v| f32::from(v)),
            ))
        })?;
        (ImageVoxels::Raw8(raw), norm)
    } else {
        let mut raw = into_flat(read_image_f32_region(&opts.image, offset, shape)?);
        let norm = opts
            .normalisation
            .resolve(|| Ok(ffn_core::inference::mean_stddev(raw.iter().copied())))?;
        normalize_image_in_place(&mut raw, norm.mean, norm.stddev);
        (ImageVoxels::Normalised(raw), norm)
    };
    on_event(InferEvent::Normalised(&norm));
    let image = match &voxels {
        ImageVoxels::Raw8(v) => CanvasImage::Raw8 {
            voxels: v,
            mean: norm.mean,
            stddev: norm.stddev,
        },
        ImageVoxels::Normalised(v) => CanvasImage::Normalised(v),
    };
    let what = || format!("{} box {offset:?} + {shape:?} (z, y, x)", opts.image);
    let inference_err = |source| IoError::Inference {
        what: what(),
        source,
    };

    let t_seeds = Instant::now();
    let seeds = opts
        .segment
        .seeds
        .seeds(image, shape)
        .map_err(inference_err)?;
    let seed_seconds = t_seeds.elapsed().as_secs_f64();
    on_event(InferEvent::Seeds {
        count: seeds.len(),
        seconds: seed_seconds,
    });
    if let Some(p) = &opts.seeds_out {
        let text: String = seeds
            .iter()
            .map(|s| {
                let v = [0, 1, 2].map(|a| s[a] + offset[a]);
                format!("{},{},{}\n", v[2], v[1], v[0])
            })
            .collect();
        write_atomic(p, text.as_bytes())?;
    }
    let mut outcome = InferOutcome {
        offset,
        shape,
        normalisation: norm,
        seeds,
        seed_seconds,
        segmentation: None,
        seconds: 0.0,
    };
    if opts.seeds_only {
        return Ok(outcome);
    }

    let mut seg_opts = SegmentOptions {
        seeds: SeedPolicy::List(outcome.seeds.clone()),
        ..opts.segment.clone()
    };
    seg_opts.inference.keep_probability_map = opts.prob_out.is_some();
    let t0 = Instant::now();
    let clock = move || t0.elapsed().as_secs_f64();
    let mut seg = segment(image, shape, predictor, &seg_opts, &clock, &mut |c| {
        on_event(InferEvent::Progress(c))
    })
    .map_err(inference_err)?;
    outcome.seconds = t0.elapsed().as_secs_f64();
    drop(voxels);
    // The outputs are written from the result's own buffers (moved into arrays and back), not
    // from copies.
    let labels = array3(shape, core::mem::take(&mut seg.labels), "segmentation")?;
    write_labels_u32(&opts.out, &labels)?;
    seg.labels = labels.into_raw_vec_and_offset().0;
    if let (Some(spec), Some(prob)) = (&opts.prob_out, seg.probability.take()) {
        let prob = array3(shape, prob, "probability map")?;
        write_image_u8(spec, &prob)?;
        seg.probability = Some(prob.into_raw_vec_and_offset().0);
    }
    outcome.segmentation = Some(seg);
    Ok(outcome)
}

/// The image voxels [`infer_volume`] holds while it segments.
enum ImageVoxels {
    /// 8-bit voxels as read.
    Raw8(Vec<u8>),
    /// Normalised voxels.
    Normalised(Vec<f32>),
}

/// The voxels of `a`, `[z][y][x]` flattened: its own buffer when it holds exactly them in this
/// order (a freshly read volume), else a copy.
fn into_flat<T: Clone>(a: Array3<T>) -> Vec<T> {
    let n = a.len();
    if !a.is_standard_layout() {
        return a.iter().cloned().collect();
    }
    let (mut data, offset) = a.into_raw_vec_and_offset();
    let start = offset.unwrap_or(0);
    if start != 0 || data.len() != n {
        // A C-contiguous part of a larger buffer.
        data = data[start..start + n].to_vec();
    }
    data
}

/// `data` (`[z][y][x]` flattened) as an array of `shape`; `what` names it in the error.
pub(crate) fn array3<T>(shape: [usize; 3], data: Vec<T>, what: &str) -> Result<Array3<T>, IoError> {
    let found = data.len();
    Array3::from_shape_vec((shape[0], shape[1], shape[2]), data).map_err(|_| {
        IoError::InvalidOption {
            field: what.into(),
            expected: format!(
                "{} values for shape {shape:?} (z, y, x)",
                shape.iter().product::<usize>()
            ),
            found: format!("{found}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffn_core::inference::LabelOracle;

    /// Two boxes of ids 1 and 2 along x, 9 x 9 x 18 voxels, as float "image" values.
    fn two_boxes(dir: &std::path::Path) -> VolumeSpec {
        let spec = VolumeSpec::new(dir.join("v.h5"), "ids");
        let img = Array3::from_shape_fn((9, 9, 18), |(_, _, x)| if x < 9 { 1.0 } else { 2.0 });
        crate::write_image_f32(&spec, &img).unwrap();
        spec
    }

    /// Options segmenting [`two_boxes`] in `dir` into `seg.h5:seg` with the oracle.
    fn oracle_options(dir: &std::path::Path) -> InferOptions {
        let out = VolumeSpec::new(dir.join("seg.h5"), "seg");
        let mut o = InferOptions::new(two_boxes(dir), out);
        // Identity normalisation: the oracle compares raw label ids.
        o.normalisation.given = (Some(0.0), Some(1.0));
        o.segment = LabelOracle::exhaustive_options();
        o
    }

    /// The oracle, recording the bits of every image patch it is shown.
    struct Recording {
        oracle: LabelOracle,
        seen: Vec<Vec<u32>>,
    }

    impl Predictor for Recording {
        fn fov(&self) -> [usize; 3] {
            self.oracle.fov
        }

        fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
            self.seen.push(image.iter().map(|v| v.to_bits()).collect());
            self.oracle.predict(image, seed, out);
        }
    }

    #[test]
    fn an_8_bit_image_is_segmented_as_its_float32_copy_is() {
        let dir = tempfile::tempdir().unwrap();
        let values = Array3::from_shape_fn(
            (9, 9, 18),
            |(z, _, x)| {
                if x < 9 { 60 + z as u8 } else { 200 }
            },
        );
        let u8_spec = VolumeSpec::new(dir.path().join("u8.h5"), "image");
        let f32_spec = VolumeSpec::new(dir.path().join("f32.h5"), "image");
        crate::write_image_u8(&u8_spec, &values).unwrap();
        crate::write_image_f32(&f32_spec, &values.mapv(f32::from)).unwrap();
        let mut runs = Vec::new();
        for (name, spec) in [("u8", u8_spec), ("f32", f32_spec)] {
            let out = VolumeSpec::new(dir.path().join(format!("seg-{name}.h5")), "seg");
            let mut opts = InferOptions::new(spec, out);
            opts.segment = LabelOracle::exhaustive_options();
            let mut predictor = Recording {
                oracle: LabelOracle { fov: [5, 5, 5] },
                seen: Vec::new(),
            };
            let done = infer_volume(&opts, &mut predictor, &mut |_| {}).unwrap();
            let seg = done.segmentation.unwrap();
            runs.push((done.normalisation.mean, seg.labels, predictor.seen));
        }
        // The statistics of the volume normalise it (not 0 / 1), the same for both.
        assert!(
            runs[0].0 > 60.0 && runs[0].0 == runs[1].0,
            "{} {}",
            runs[0].0,
            runs[1].0
        );
        assert!(!runs[0].2.is_empty());
        assert_eq!(runs[0].2, runs[1].2, "the same patches, bit for bit");
        assert_eq!(runs[0].1, runs[1].1);
    }

    #[test]
    fn arrays_are_flattened_in_z_y_x_order_without_a_copy_when_they_can_be() {
        let a = Array3::from_shape_fn((2, 3, 4), |(z, y, x)| z * 100 + y * 10 + x);
        let expected: Vec<usize> = a.iter().copied().collect();
        let fresh = a.clone();
        let ptr = fresh.as_ptr();
        let flat = into_flat(fresh);
        assert_eq!(flat, expected);
        assert_eq!(flat.as_ptr(), ptr, "a fresh array is its own buffer");
        // A contiguous part of a larger buffer: the last z plane.
        let last = a.clone().slice_move(ndarray::s![1.., .., ..]);
        assert_eq!(into_flat(last), expected[12..]);
        // Axes reversed (x, y, z in memory): copied in the array's z, y, x order.
        let mut transposed = Vec::new();
        for x in 0..4 {
            for y in 0..3 {
                for z in 0..2 {
                    transposed.push(z * 100 + y * 10 + x);
                }
            }
        }
        assert_eq!(into_flat(a.reversed_axes()), transposed);
    }

    #[test]
    fn a_volume_on_disk_is_segmented_and_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = oracle_options(dir.path());
        let out = opts.out.clone();
        opts.prob_out = Some(VolumeSpec::new(dir.path().join("seg.h5"), "prob"));
        let mut events = 0;
        let done = infer_volume(&opts, &mut LabelOracle { fov: [5, 5, 5] }, &mut |_| {
            events += 1
        })
        .unwrap();
        assert!(events > 2);
        assert_eq!(done.normalisation.source, "from the command line");
        let seg = done.segmentation.unwrap();
        assert_eq!(seg.counters.segments, 2);
        let written = crate::read_labels(&out).unwrap();
        let ids: Vec<u64> = seg.labels.iter().map(|&v| u64::from(v)).collect();
        assert_eq!(written.iter().copied().collect::<Vec<_>>(), ids);
        // The oracle's box interiors (FOV centres at least 2 voxels from every face) are covered.
        assert_ne!(written[[4, 4, 3]], written[[4, 4, 14]]);
        assert!(crate::read_image_u8(opts.prob_out.as_ref().unwrap()).is_ok());
    }

    #[test]
    fn a_box_and_seeds_only_write_seeds_in_image_coordinates() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = oracle_options(dir.path());
        let out = opts.out.clone();
        opts.region = Some(([1, 2, 3], [5, 5, 5]));
        opts.segment.seeds = SeedPolicy::List(vec![[2, 2, 2]]);
        opts.seeds_out = Some(dir.path().join("seeds.txt"));
        opts.seeds_only = true;
        let done = infer_volume(&opts, &mut LabelOracle { fov: [5, 5, 5] }, &mut |_| {}).unwrap();
        assert!(done.segmentation.is_none());
        let text = std::fs::read_to_string(dir.path().join("seeds.txt")).unwrap();
        assert_eq!(text, "5,4,3\n");
        assert!(
            crate::read_labels(&out).is_err(),
            "seeds only writes no labels"
        );
        // A listed seed outside the box is an error naming the volume and the seed.
        opts.segment.seeds = SeedPolicy::List(vec![[5, 0, 0]]);
        let e = infer_volume(&opts, &mut LabelOracle { fov: [5, 5, 5] }, &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("v.h5:ids") && e.contains("seed 0 at [5, 0, 0]"),
            "{e}"
        );
    }
}
