//! The one entry point of whole-volume inference: choose the seeds, flood-fill object after
//! object, return the labels with what happened. `ffn infer`, every tile of `ffn infer-tiled` and
//! the demo go through [`segment`].

use alloc::format;
use alloc::vec::Vec;

use super::seeds::{GRID_OFFSETS, PeaksOptions, policy_grid, policy_peaks};
use super::{
    AgglomerateOptions, AgglomerationSummary, Canvas, CanvasImage, Counters, InferenceError,
    InferenceOptions, Origin, Predictor, SymmetricPredictor, agglomerate,
};

/// How the seed points of a run are chosen.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SeedPolicy {
    /// google/ffn's `PolicyPeaks`: distance-transform maxima away from image edges.
    Peaks(PeaksOptions),
    /// google/ffn's `PolicyGrid3d`: for every offset of [`GRID_OFFSETS`] in turn, the points
    /// `offset + k * step` (all offsets, also those at or above `step`, as google/ffn does).
    Grid {
        /// Distance between grid points along each axis (at least 1).
        step: usize,
    },
    /// These points `[z, y, x]`, in the segmented volume's coordinates, tried in order.
    List(Vec<[usize; 3]>),
}

impl Default for SeedPolicy {
    /// google/ffn's default, `PolicyPeaks` with its default options.
    fn default() -> Self {
        Self::Peaks(PeaksOptions::default())
    }
}

impl SeedPolicy {
    /// `peaks`, `grid` or `list`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Peaks(_) => "peaks",
            Self::Grid { .. } => "grid",
            Self::List(_) => "list",
        }
    }

    /// The seed points for an `image` of `shape` (`[z, y, x]`; normalised voxels, or raw ones with
    /// their normalisation: PolicyPeaks reads a normalised copy of those). A grid step of 0 and
    /// listed points outside the volume are errors naming the value.
    pub fn seeds<'a>(
        &self,
        image: impl Into<CanvasImage<'a>>,
        shape: [usize; 3],
    ) -> Result<Vec<[usize; 3]>, InferenceError> {
        let image = image.into();
        let n = shape.iter().product::<usize>();
        if image.len() != n {
            return Err(InferenceError::Shape {
                what: "image",
                expected: n,
                actual: image.len(),
            });
        }
        match self {
            Self::Peaks(opts) => Ok(policy_peaks(image, shape, opts)),
            Self::Grid { step: 0 } => Err(InferenceError::Geometry(
                "grid seed policy step: expected at least 1, found 0".into(),
            )),
            Self::Grid { step } => Ok(policy_grid(shape, *step, &GRID_OFFSETS)),
            Self::List(points) => {
                if let Some((k, p)) = points
                    .iter()
                    .enumerate()
                    .find(|(_, p)| (0..3).any(|a| p[a] >= shape[a]))
                {
                    return Err(InferenceError::Geometry(format!(
                        "seed {k} at {p:?} (z, y, x): expected inside the volume of shape {shape:?}"
                    )));
                }
                Ok(points.clone())
            }
        }
    }
}

/// What [`segment`] needs besides the image and the predictor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegmentOptions {
    /// Movement step of the FOV `[z, y, x]` (the model's deltas; at most half the FOV).
    pub deltas: [usize; 3],
    /// Where flood filling starts.
    pub seeds: SeedPolicy,
    /// Thresholds of the flood-fill loop.
    pub inference: InferenceOptions,
    /// Merge the segments the network joins where they touch, after the flood fill
    /// ([`agglomerate`]); `None` keeps the flood fill's segments.
    pub agglomerate: Option<AgglomerateOptions>,
}

/// A segmented volume and how it came about.
#[derive(Clone, Debug, PartialEq)]
pub struct Segmentation {
    /// Volume shape `[z, y, x]`.
    pub shape: [usize; 3],
    /// Segment ids `1..=n` in order of creation, `[z][y][x]` flattened; 0 = unassigned. Ids are
    /// 32-bit (4 bytes per voxel): one flood-fill run creates at most `u32::MAX - 1` segments.
    pub labels: Vec<u32>,
    /// The quantised object probability of every assigned voxel (0 elsewhere), when
    /// `inference.keep_probability_map` was on.
    pub probability: Option<Vec<u8>>,
    /// The seed points offered, in order (`[z, y, x]`).
    pub seeds: Vec<[usize; 3]>,
    /// How every segment was created, in id order.
    pub origins: Vec<Origin>,
    /// Counters of the run (of the flood fill: `segments` counts the segments before
    /// agglomeration).
    pub counters: Counters,
    /// What agglomeration did, when it ran.
    pub agglomeration: Option<AgglomerationSummary>,
}

/// Segments an `image` of `shape` (`[z][y][x]` flattened; normalised voxels, or raw 8-bit ones
/// with their normalisation: a [`CanvasImage`]) with `predictor`, starting at
/// the seeds of `options.seeds`. `clock` returns seconds from any origin (`&|| 0.0` without one)
/// and times each segment; `on_progress` is called after every prediction and every seed.
/// With `options.inference.symmetries` chosen, every prediction (of the flood fill and of
/// agglomeration) is the mean over them ([`SymmetricPredictor`]).
///
/// # Examples
/// ```
/// use ffn_core::inference::{LabelOracle, segment};
/// // Two boxes of ids 1 and 2 side by side; the oracle predicts the true mask.
/// let shape = [9, 9, 18];
/// let image: Vec<f32> = (0..9 * 9 * 18).map(|i| if i % 18 < 9 { 1.0 } else { 2.0 }).collect();
/// let options = LabelOracle::exhaustive_options();
/// let seg = segment(&image, shape, &mut LabelOracle { fov: [5, 5, 5] }, &options, &|| 0.0, &mut |_| {})?;
/// assert_eq!(seg.counters.segments, 2);
/// # Ok::<(), ffn_core::inference::InferenceError>(())
/// ```
pub fn segment<'a, P: Predictor + ?Sized>(
    image: impl Into<CanvasImage<'a>>,
    shape: [usize; 3],
    predictor: &mut P,
    options: &SegmentOptions,
    clock: &dyn Fn() -> f64,
    on_progress: &mut dyn FnMut(&Counters),
) -> Result<Segmentation, InferenceError> {
    let image = image.into();
    let seeds = options.seeds.seeds(image, shape)?;
    let predictor = &mut SymmetricPredictor::new(predictor, options.inference.symmetries)?;
    let mut canvas = Canvas::new(
        image,
        shape,
        predictor.fov(),
        options.deltas,
        options.inference.clone(),
    )?;
    canvas.segment_all(&seeds, predictor, clock, on_progress)?;
    let probability = canvas.probability_map().map(<[u8]>::to_vec);
    let origins = canvas.origins().to_vec();
    let counters = canvas.counters().clone();
    let mut labels = canvas.into_segmentation();
    let agglomeration = match &options.agglomerate {
        Some(a) => Some(agglomerate(
            image,
            shape,
            &mut labels,
            predictor,
            options.deltas,
            &options.inference,
            a,
        )?),
        None => None,
    };
    Ok(Segmentation {
        shape,
        labels,
        probability,
        seeds,
        origins,
        counters,
        agglomeration,
    })
}
