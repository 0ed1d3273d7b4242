//! FFN agglomeration (Januszewski et al. 2018, "agglomeration"): merges segments of a finished
//! flood fill that the network itself joins when asked again where they touch.
//!
//! A flood that stops early leaves one object in two segments (a split). For every pair of
//! segments that touch over at least [`AgglomerateOptions::min_contact`] voxel faces, the network
//! floods twice in a small box around the middle of their contact, on an empty canvas: once from a
//! seed inside the first segment, once from a seed inside the second. The pair is merged when each
//! flood covers at least [`AgglomerateOptions::min_coverage`] of the other segment's voxels in the
//! box. Both directions must agree, so a flood that leaks across a real boundary once does not
//! merge two objects. Merges are transitive (union-find); merged segments take the smallest id of
//! their set.
//!
//! Every pair is tested against the segmentation as the flood fill left it, so the result does
//! not depend on the order of the pairs. A pair that earlier merges have already joined (through
//! a third segment) is skipped: its test could not change the result.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::seeds::distance_transform;
use super::{Canvas, CanvasImage, InferenceError, InferenceOptions, Predictor};
use crate::segmentation::union_find::UnionFind;

/// How [`agglomerate`] chooses and tests pairs of segments.
#[derive(Clone, Debug, PartialEq)]
pub struct AgglomerateOptions {
    /// Pairs that touch over fewer voxel faces are not tested.
    pub min_contact: u64,
    /// Each of the two floods must cover at least this fraction of the other segment's voxels
    /// inside the box (0 < value <= 1).
    pub min_coverage: f64,
    /// The box flooded around a contact reaches this many voxels beyond half the FOV on each side
    /// of the contact's middle (`[z, y, x]`): the FOV centre may move this far.
    pub reach: [usize; 3],
}

impl Default for AgglomerateOptions {
    /// Contacts of at least 20 faces, 50% coverage both ways, a reach of 8 voxels.
    fn default() -> Self {
        Self {
            min_contact: 20,
            min_coverage: 0.5,
            reach: [8; 3],
        }
    }
}

impl AgglomerateOptions {
    /// Checks the fields; the message names the one out of range.
    pub fn validate(&self) -> Result<(), InferenceError> {
        if !(self.min_coverage > 0.0 && self.min_coverage <= 1.0) {
            return Err(InferenceError::Geometry(alloc::format!(
                "agglomeration min_coverage: expected a fraction in (0, 1], found {}",
                self.min_coverage
            )));
        }
        Ok(())
    }
}

/// What [`agglomerate`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgglomerationSummary {
    /// Pairs of touching segments found.
    pub touching_pairs: u64,
    /// Pairs tested (contact at least `min_contact` faces, a box that holds the FOV, not already
    /// joined through other pairs).
    pub tested_pairs: u64,
    /// Pairs not tested because merges of other pairs had already joined them: testing them could
    /// not change the result.
    pub already_joined_pairs: u64,
    /// Pairs both floods joined.
    pub joined_pairs: u64,
    /// Segments before.
    pub segments_before: u64,
    /// Segments after.
    pub segments_after: u64,
    /// Network predictions of all the floods.
    pub predictions: u64,
}

/// The faces two segments share and the sum of their positions (the contact's middle).
#[derive(Clone, Copy, Debug, Default)]
struct Contact {
    faces: u64,
    sum: [u64; 3],
}

/// Pairs `(a, b)` with `a < b` of touching non-zero ids and their contacts, by the voxel faces
/// between 6-neighbours.
fn contacts(labels: &[u32], shape: [usize; 3]) -> BTreeMap<(u32, u32), Contact> {
    let mut found: BTreeMap<(u32, u32), Contact> = BTreeMap::new();
    let strides = [shape[1] * shape[2], shape[2], 1];
    for z in 0..shape[0] {
        for y in 0..shape[1] {
            for x in 0..shape[2] {
                let p = [z, y, x];
                let i = z * strides[0] + y * strides[1] + x;
                let a = labels[i];
                if a == 0 {
                    continue;
                }
                for axis in 0..3 {
                    if p[axis] + 1 >= shape[axis] {
                        continue;
                    }
                    let b = labels[i + strides[axis]];
                    if b == 0 || b == a {
                        continue;
                    }
                    let c = found.entry((a.min(b), a.max(b))).or_default();
                    c.faces += 1;
                    // Twice the face's centre, in whole voxels: 2 p + 1 along the axis.
                    for (k, (sum, &pk)) in c.sum.iter_mut().zip(&p).enumerate() {
                        *sum += 2 * pk as u64 + u64::from(k == axis);
                    }
                }
            }
        }
    }
    found
}

/// The voxels of a box of the image, owned.
enum BoxImage {
    Normalised(Vec<f32>),
    Raw8 {
        voxels: Vec<u8>,
        mean: f32,
        stddev: f32,
    },
}

impl BoxImage {
    fn view(&self) -> CanvasImage<'_> {
        match self {
            Self::Normalised(v) => CanvasImage::Normalised(v),
            Self::Raw8 {
                voxels,
                mean,
                stddev,
            } => CanvasImage::Raw8 {
                voxels,
                mean: *mean,
                stddev: *stddev,
            },
        }
    }
}

/// Copies the box `lo .. lo + size` of a `[z][y][x]` volume of `shape`.
fn cut<T: Copy>(v: &[T], shape: [usize; 3], lo: [usize; 3], size: [usize; 3]) -> Vec<T> {
    let mut out = Vec::with_capacity(size.iter().product());
    for z in lo[0]..lo[0] + size[0] {
        for y in lo[1]..lo[1] + size[1] {
            let start = (z * shape[1] + y) * shape[2] + lo[2];
            out.extend_from_slice(&v[start..start + size[2]]);
        }
    }
    out
}

fn cut_image(
    image: CanvasImage<'_>,
    shape: [usize; 3],
    lo: [usize; 3],
    size: [usize; 3],
) -> BoxImage {
    match image {
        CanvasImage::Normalised(v) => BoxImage::Normalised(cut(v, shape, lo, size)),
        CanvasImage::Raw8 {
            voxels,
            mean,
            stddev,
        } => BoxImage::Raw8 {
            voxels: cut(voxels, shape, lo, size),
            mean,
            stddev,
        },
    }
}

/// The seed of segment `id` in a box: its voxel deepest inside it (largest distance to another
/// label) among those where the FOV fits (`margin` from the box's faces), ties to the one nearest
/// `centre`; `None` when it has no such voxel.
fn seed_in(
    labels: &[u32],
    size: [usize; 3],
    id: u32,
    margin: [usize; 3],
    centre: [usize; 3],
) -> Option<[usize; 3]> {
    let outside: Vec<bool> = labels.iter().map(|&l| l != id).collect();
    let depth = distance_transform(&outside, size, [1.0; 3]);
    let mut best: Option<([usize; 3], f64, usize)> = None;
    for z in margin[0]..size[0].saturating_sub(margin[0]) {
        for y in margin[1]..size[1].saturating_sub(margin[1]) {
            for x in margin[2]..size[2].saturating_sub(margin[2]) {
                let i = (z * size[1] + y) * size[2] + x;
                if outside[i] {
                    continue;
                }
                let p = [z, y, x];
                let d2: usize = (0..3).map(|k| p[k].abs_diff(centre[k]).pow(2)).sum();
                let better = match best {
                    None => true,
                    Some((_, bd, bd2)) => depth[i] > bd || (depth[i] == bd && d2 < bd2),
                };
                if better {
                    best = Some((p, depth[i], d2));
                }
            }
        }
    }
    best.map(|(p, _, _)| p)
}

/// Floods from `seed` on an empty canvas over the box and returns the voxels at or above the
/// segment threshold, and the predictions made.
fn flood<P: Predictor + ?Sized>(
    image: CanvasImage<'_>,
    size: [usize; 3],
    seed: [usize; 3],
    predictor: &mut P,
    deltas: [usize; 3],
    inference: &InferenceOptions,
) -> Result<(Vec<bool>, u64), InferenceError> {
    let mut canvas = Canvas::new(image, size, predictor.fov(), deltas, inference.clone())?;
    let predictions = canvas.segment_at(seed, predictor, &mut |_| {});
    let threshold = inference.logits().segment_threshold;
    let mask = canvas
        .seed_logits()
        .iter()
        .map(|&l| l >= threshold)
        .collect();
    Ok((mask, predictions))
}

/// The fraction of segment `id`'s voxels of the box that `mask` covers (0 when it has none).
fn coverage(labels: &[u32], mask: &[bool], id: u32) -> f64 {
    let (mut all, mut covered) = (0u64, 0u64);
    for (&l, &m) in labels.iter().zip(mask) {
        if l == id {
            all += 1;
            covered += u64::from(m);
        }
    }
    if all == 0 {
        0.0
    } else {
        covered as f64 / all as f64
    }
}

/// Merges the touching segments of `labels` (`[z][y][x]` of `shape`, 0 = unassigned) that
/// `predictor` joins in both directions (module docs), in place, and says what it did. `deltas`
/// and `inference` are the flood fill's (movement step and thresholds).
///
/// # Examples
/// ```
/// use ffn_core::inference::{AgglomerateOptions, InferenceOptions, LabelOracle, agglomerate};
/// // One object (the image is 1 everywhere) that a flood fill left as two segments.
/// let shape = [9, 9, 18];
/// let image = vec![1.0f32; 9 * 9 * 18];
/// let mut labels: Vec<u32> = (0..9 * 9 * 18).map(|i| if i % 18 < 9 { 1 } else { 2 }).collect();
/// let inference = LabelOracle::exhaustive_options().inference;
/// let options = AgglomerateOptions { reach: [2; 3], ..Default::default() };
/// let done = agglomerate(&image, shape, &mut labels, &mut LabelOracle { fov: [5, 5, 5] },
///     [1; 3], &inference, &options)?;
/// assert_eq!((done.segments_before, done.segments_after), (2, 1));
/// assert!(labels.iter().all(|&l| l == 1));
/// # Ok::<(), ffn_core::inference::InferenceError>(())
/// ```
pub fn agglomerate<'a, P: Predictor + ?Sized>(
    image: impl Into<CanvasImage<'a>>,
    shape: [usize; 3],
    labels: &mut [u32],
    predictor: &mut P,
    deltas: [usize; 3],
    inference: &InferenceOptions,
    options: &AgglomerateOptions,
) -> Result<AgglomerationSummary, InferenceError> {
    let image = image.into();
    let n: usize = shape.iter().product();
    for (what, len) in [("image", image.len()), ("labels", labels.len())] {
        if len != n {
            return Err(InferenceError::Shape {
                what,
                expected: n,
                actual: len,
            });
        }
    }
    options.validate()?;
    inference.validate().map_err(InferenceError::Options)?;
    let fov = predictor.fov();
    let margin = fov.map(|f| f / 2);
    // Union-find over the distinct ids (not 0..=max id: ids may be anything up to u32::MAX).
    let ids = distinct_ids(labels);
    let index = |id: u32| ids.binary_search(&id).expect("an id of the labels");
    let mut summary = AgglomerationSummary {
        segments_before: ids.len() as u64,
        ..Default::default()
    };
    let pairs = contacts(labels, shape);
    summary.touching_pairs = pairs.len() as u64;
    let mut sets = UnionFind::new(ids.len());
    for (&(a, b), c) in pairs.iter().filter(|(_, c)| c.faces >= options.min_contact) {
        if sets.find(index(a)) == sets.find(index(b)) {
            summary.already_joined_pairs += 1;
            continue;
        }
        let middle: [usize; 3] = core::array::from_fn(|k| (c.sum[k] / (2 * c.faces)) as usize);
        // The box: the contact's middle +- (half the FOV + reach), moved inside the volume.
        let size: [usize; 3] =
            core::array::from_fn(|k| (2 * (margin[k] + options.reach[k]) + 1).min(shape[k]));
        if (0..3).any(|k| size[k] < fov[k]) {
            continue;
        }
        let lo: [usize; 3] = core::array::from_fn(|k| {
            middle[k]
                .saturating_sub(margin[k] + options.reach[k])
                .min(shape[k] - size[k])
        });
        let centre: [usize; 3] = core::array::from_fn(|k| middle[k] - lo[k]);
        let box_labels = cut(labels, shape, lo, size);
        let (Some(seed_a), Some(seed_b)) = (
            seed_in(&box_labels, size, a, margin, centre),
            seed_in(&box_labels, size, b, margin, centre),
        ) else {
            continue;
        };
        summary.tested_pairs += 1;
        let box_image = cut_image(image, shape, lo, size);
        let (from_a, pa) = flood(box_image.view(), size, seed_a, predictor, deltas, inference)?;
        summary.predictions += pa;
        if coverage(&box_labels, &from_a, b) < options.min_coverage {
            continue;
        }
        let (from_b, pb) = flood(box_image.view(), size, seed_b, predictor, deltas, inference)?;
        summary.predictions += pb;
        if coverage(&box_labels, &from_b, a) < options.min_coverage {
            continue;
        }
        summary.joined_pairs += 1;
        sets.union(index(a), index(b));
    }
    // The sorted ids make a set's smallest index its smallest id.
    for l in labels.iter_mut().filter(|l| **l != 0) {
        *l = ids[sets.min_member(index(*l))];
    }
    summary.segments_after = distinct_ids(labels).len() as u64;
    Ok(summary)
}

/// The distinct non-zero ids, sorted.
fn distinct_ids(labels: &[u32]) -> Vec<u32> {
    let mut ids: Vec<u32> = labels.iter().copied().filter(|&l| l != 0).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::LabelOracle;

    /// The volume of these tests, `[z, y, x]`: x runs 0..18.
    const SHAPE: [usize; 3] = [9, 9, 18];

    /// A volume of `SHAPE` whose voxel at x holds `at(x)`.
    fn along_x<T>(at: impl Fn(usize) -> T) -> Vec<T> {
        (0..9 * 9 * 18).map(|i| at(i % 18)).collect()
    }

    /// [`agglomerate`] of `labels` over `image` with the label oracle (FOV 5, moves of 1, its
    /// exhaustive options) and `options` (reach 2 where the caller does not say otherwise).
    fn run(
        image: &[f32],
        labels: &mut [u32],
        options: &AgglomerateOptions,
    ) -> Result<AgglomerationSummary, InferenceError> {
        let inference = LabelOracle::exhaustive_options().inference;
        let mut oracle = LabelOracle { fov: [5, 5, 5] };
        agglomerate(
            image,
            SHAPE,
            labels,
            &mut oracle,
            [1; 3],
            &inference,
            options,
        )
    }

    fn reach_2() -> AgglomerateOptions {
        AgglomerateOptions {
            reach: [2; 3],
            ..Default::default()
        }
    }

    #[test]
    fn contacts_count_faces_between_touching_ids() {
        // 1 | 2 along x in a 2 x 2 x 4 volume: 4 faces; 0 touches nothing.
        let shape = [2, 2, 4];
        let labels: Vec<u32> = (0..16).map(|i| [1, 1, 2, 0][i % 4]).collect();
        let found = contacts(&labels, shape);
        assert_eq!(found.len(), 1);
        let c = found[&(1, 2)];
        assert_eq!(c.faces, 4);
        // Face centres at x = 1.5, y and z in {0, 1}: middle (0.5, 0.5, 1.5) * 2 summed.
        assert_eq!(c.sum, [4, 4, 12]);
    }

    #[test]
    fn a_split_object_is_joined_and_a_true_boundary_kept() {
        // Two objects of the image (x < 9, x >= 9); the labels split the first at x = 4.
        let image = along_x(|x| if x < 9 { 1.0 } else { 2.0 });
        let mut labels = along_x(|x| match x {
            0..4 => 1,
            4..9 => 2,
            _ => 3,
        });
        let done = run(&image, &mut labels, &reach_2()).unwrap();
        assert_eq!(done.touching_pairs, 2);
        assert_eq!(done.tested_pairs, 2);
        assert_eq!(done.joined_pairs, 1);
        assert_eq!((done.segments_before, done.segments_after), (3, 2));
        assert!(done.predictions > 0);
        for (i, &l) in labels.iter().enumerate() {
            assert_eq!(l, if i % 18 < 9 { 1 } else { 3 }, "voxel {i}");
        }
    }

    #[test]
    fn a_pair_already_joined_through_a_third_segment_is_not_flooded_again() {
        // One object in three segments that all touch: 1 (x < 9), 2 (x >= 9, y < 5), 3 (the
        // rest). (1, 2) and (1, 3) join first, so (2, 3) needs no floods.
        let image = along_x(|_| 1.0f32);
        let mut labels: Vec<u32> = (0..9 * 9 * 18)
            .map(|i| match (i % 18, i / 18 % 9) {
                (0..9, _) => 1,
                (_, 0..5) => 2,
                _ => 3,
            })
            .collect();
        let done = run(&image, &mut labels, &reach_2()).unwrap();
        assert_eq!(done.touching_pairs, 3);
        assert_eq!((done.tested_pairs, done.already_joined_pairs), (2, 1));
        assert_eq!((done.joined_pairs, done.segments_after), (2, 1));
        assert!(labels.iter().all(|&l| l == 1));
    }

    #[test]
    fn ids_up_to_u32_max_are_merged_without_a_table_of_that_size() {
        let image = along_x(|_| 1.0f32);
        let (low, high) = (u32::MAX - 1, u32::MAX);
        let mut labels = along_x(|x| if x < 9 { high } else { low });
        let done = run(&image, &mut labels, &reach_2()).unwrap();
        assert_eq!((done.joined_pairs, done.segments_after), (1, 1));
        assert!(labels.iter().all(|&l| l == low));
    }

    #[test]
    fn small_contacts_are_not_tested_and_bad_options_are_named() {
        let image = along_x(|_| 1.0f32);
        let mut labels = along_x(|x| 1 + u32::from(x >= 9));
        // The contact has 81 faces.
        let options = AgglomerateOptions {
            min_contact: 82,
            ..reach_2()
        };
        let done = run(&image, &mut labels, &options).unwrap();
        assert_eq!((done.tested_pairs, done.segments_after), (0, 2));
        let bad = AgglomerateOptions {
            min_coverage: 0.0,
            ..options
        };
        let e = run(&image, &mut labels, &bad).unwrap_err();
        assert!(e.to_string().contains("min_coverage"), "{e}");
        let e = run(&image[1..], &mut labels, &options).unwrap_err();
        assert!(e.to_string().contains("image"), "{e}");
    }
}
