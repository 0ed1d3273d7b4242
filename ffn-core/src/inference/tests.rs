//! Canvas tests: an oracle flood fill that must recover a synthetic labelling, and unit cases of
//! the validity, disco, acceptance and failure rules.

use super::seeds::{PeaksOptions, policy_grid, policy_peaks};
use super::*;
use crate::metrics::{MetricOptions, evaluate};
use crate::rng::Rng;
use alloc::vec;
use alloc::vec::Vec;

/// Returns the true mask of the object at the FOV centre (the "image" holds the label ids) as
/// logits: -4 outside, and inside 3 minus a little for the distance from the FOV centre, so that,
/// as with a real network, confidence is highest at the centre and the face maxima are the object
/// voxels nearest to the face centres.
struct Oracle {
    fov: [usize; 3],
}

impl Predictor for Oracle {
    fn fov(&self) -> [usize; 3] {
        self.fov
    }
    fn predict(&mut self, image: &[f32], _seed: &[f32], out: &mut [f32]) {
        let c = image[image.len() / 2];
        let f = self.fov;
        for (i, o) in out.iter_mut().enumerate() {
            let p = [i / (f[1] * f[2]), i / f[2] % f[1], i % f[2]];
            let r2: f64 = (0..3)
                .map(|a| (p[a] as f64 - (f[a] / 2) as f64).powi(2))
                .sum();
            *o = if image[i] != c {
                -4.0
            } else {
                (3.0 - 0.05 * r2.sqrt()) as f32
            };
        }
    }
}

/// A Voronoi labelling of `k` random points (ids 1..=k): convex, connected objects.
fn voronoi(shape: [usize; 3], k: usize, seed: u64) -> Vec<u64> {
    let mut r = Rng::new(seed);
    let pts: Vec<[f64; 3]> = (0..k)
        .map(|_| [0, 1, 2].map(|a| r.next_f64() * shape[a] as f64))
        .collect();
    let mut out = Vec::with_capacity(shape.iter().product());
    for z in 0..shape[0] {
        for y in 0..shape[1] {
            for x in 0..shape[2] {
                let p = [z as f64, y as f64, x as f64];
                let d = |q: &[f64; 3]| (0..3).map(|a| (p[a] - q[a]).powi(2)).sum::<f64>();
                let best = (0..k)
                    .min_by(|&a, &b| d(&pts[a]).total_cmp(&d(&pts[b])))
                    .unwrap_or(0);
                out.push(best as u64 + 1);
            }
        }
    }
    out
}

fn membrane_image(labels: &[u64], shape: [usize; 3]) -> Vec<f32> {
    let mut img = vec![1.0f32; labels.len()];
    for z in 0..shape[0] {
        for y in 0..shape[1] {
            for x in 0..shape[2] {
                let i = idx(shape, [z, y, x]);
                let p = [z, y, x];
                for a in 0..3 {
                    if p[a] + 1 < shape[a] {
                        let mut q = p;
                        q[a] += 1;
                        let j = idx(shape, q);
                        if labels[j] != labels[i] {
                            img[i] = -2.0;
                            img[j] = -2.0;
                        }
                    }
                }
            }
        }
    }
    img
}

#[test]
fn oracle_recovers_the_labelling() {
    for volume_seed in [5, 6, 7] {
        oracle_run(volume_seed);
    }
}

fn oracle_run(volume_seed: u64) {
    let shape = [48, 56, 64];
    let labels = voronoi(shape, 24, volume_seed);
    let image: Vec<f32> = labels.iter().map(|&l| l as f32).collect();
    let opts = InferenceOptions {
        min_segment_size: 20,
        ..Default::default()
    };
    let fov = [9, 9, 9];
    let mut canvas = Canvas::new(&image, shape, fov, [2, 2, 2], opts).unwrap();
    let mut oracle = Oracle { fov };
    // Seeds from an EM-like rendering: dark membranes where a 6-neighbour has another label.
    let membranes = membrane_image(&labels, shape);
    let mut seeds = policy_peaks(&membranes, shape, &PeaksOptions::default());
    // Cells touching the volume border have their distance maxima at the border, where peaks are
    // excluded: only inner cells get peaks, and a grid afterwards picks up the rest.
    assert!(!seeds.is_empty(), "no peaks");
    seeds.extend(policy_grid(shape, 4, &[4, 6]));
    let mut calls = 0u64;
    canvas
        .segment_all(&seeds, &mut oracle, &|| 0.0, &mut |c| {
            calls = c.predict_calls
        })
        .unwrap();
    let seg: Vec<u64> = canvas.segmentation().into_iter().map(u64::from).collect();
    // Voxels within the margin (fov / 2) of the border can only be reached by FOVs centred further
    // in; a true object confined to that band is out of reach of any flood (as in google/ffn), so
    // the score is taken on the interior. (The whole volume scores VI 0.01 to 0.07 here.)
    let m = fov[0] / 2;
    let (mut t_in, mut s_in) = (Vec::new(), Vec::new());
    for z in m..shape[0] - m {
        for y in m..shape[1] - m {
            for x in m..shape[2] - m {
                t_in.push(labels[idx(shape, [z, y, x])]);
                s_in.push(seg[idx(shape, [z, y, x])]);
            }
        }
    }
    let s = evaluate(&t_in, &s_in, &MetricOptions::default()).unwrap();
    let c = canvas.counters();
    assert!(
        s.voi_split + s.voi_merge < 0.05,
        "volume {volume_seed}: {s:?} {c:?}"
    );
    assert!(s.adapted_rand_error < 0.01, "volume {volume_seed}: {s:?}");
    let whole = evaluate(&labels, &seg, &MetricOptions::default()).unwrap();
    assert!(
        whole.voi_split + whole.voi_merge < 0.2,
        "volume {volume_seed}: {whole:?}"
    );
    // Bookkeeping: every prediction belongs to a seed attempt; origins add up.
    assert_eq!(calls, c.predict_calls);
    let from_origins: u64 = canvas.origins().iter().map(|o| o.iterations).sum();
    assert!(from_origins <= c.predict_calls);
    assert_eq!(canvas.origins().len() as u64, c.segments);
    assert_eq!(
        canvas.origins().iter().map(|o| o.voxels).sum::<u64>(),
        c.voxels_segmented
    );
    assert_eq!(
        seg.iter().filter(|&&v| v != 0).count() as u64,
        c.voxels_segmented
    );
    assert_eq!(c.seeds_done, seeds.len() as u64);
}

/// Predicts `inside` within a box (canvas coordinates recovered from an image holding the linear
/// voxel index) and `outside` elsewhere.
struct BoxPredictor {
    fov: [usize; 3],
    shape: [usize; 3],
    lo: [usize; 3],
    hi: [usize; 3],
    inside: f32,
    outside: f32,
}

impl Predictor for BoxPredictor {
    fn fov(&self) -> [usize; 3] {
        self.fov
    }
    fn predict(&mut self, image: &[f32], _seed: &[f32], out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(image) {
            let i = v as usize;
            let p = [
                i / (self.shape[1] * self.shape[2]),
                i / self.shape[2] % self.shape[1],
                i % self.shape[2],
            ];
            let inb = (0..3).all(|a| p[a] >= self.lo[a] && p[a] < self.hi[a]);
            *o = if inb { self.inside } else { self.outside };
        }
    }
}

fn index_image(shape: [usize; 3]) -> Vec<f32> {
    (0..shape.iter().product::<usize>())
        .map(|i| i as f32)
        .collect()
}

fn idx(shape: [usize; 3], p: [usize; 3]) -> usize {
    (p[0] * shape[1] + p[1]) * shape[2] + p[2]
}

#[test]
fn validity_rules() {
    let shape = [20, 20, 20];
    let image = index_image(shape);
    let mut c = Canvas::new(
        &image,
        shape,
        [7, 7, 7],
        [2, 2, 2],
        InferenceOptions::default(),
    )
    .unwrap();
    // Margin 3: 3..=16 valid on each axis; unvisited (NaN) seeds pass the threshold test.
    assert!(c.is_valid_pos([3, 3, 16], false));
    assert!(!c.is_valid_pos([2, 10, 10], true));
    assert!(!c.is_valid_pos([10, 17, 10], true));
    assert!(!c.is_valid_pos([-1, 10, 10], true));
    assert!(!c.is_valid_pos([10, 10, 40], true));
    // After a flood whose box has low logits, positions there fail the threshold.
    let mut p = BoxPredictor {
        fov: [7; 3],
        shape,
        lo: [0; 3],
        hi: [0; 3],
        inside: 0.0,
        outside: -1.0,
    };
    let out = c
        .try_seed([10, 10, 10], &mut p, &|| 0.0, &mut |_| {})
        .unwrap();
    assert_eq!(out, SeedOutcome::WeakSeed);
    assert!(!c.is_valid_pos([10, 10, 11], false));
    assert!(c.is_valid_pos([10, 10, 11], true));
    assert_eq!(c.counters().predict_calls, 1);
    // A weak seed is marked failed and never retried.
    let again = c
        .try_seed([10, 10, 10], &mut p, &|| 0.0, &mut |_| {})
        .unwrap();
    assert_eq!(again, SeedOutcome::MarkedFailed);
    assert_eq!(c.counters().predict_calls, 1);
    assert_eq!(c.segmentation()[idx(shape, [10, 10, 10])], 0);
    assert_eq!(
        c.try_seed([1, 10, 10], &mut p, &|| 0.0, &mut |_| {})
            .unwrap(),
        SeedOutcome::Invalid
    );
}

#[test]
fn segments_never_overwrite_and_respect_min_size_and_boundary_distance() {
    let shape = [24, 24, 24];
    let image = index_image(shape);
    let opts = InferenceOptions {
        min_segment_size: 50,
        ..Default::default()
    };
    let mut c = Canvas::new(&image, shape, [7, 7, 7], [3, 3, 3], opts).unwrap();
    let run = |c: &mut Canvas, lo: [usize; 3], hi: [usize; 3], at: [usize; 3]| {
        let mut p = BoxPredictor {
            fov: [7; 3],
            shape,
            lo,
            hi,
            inside: 3.0,
            outside: -3.0,
        };
        c.try_seed(at, &mut p, &|| 0.0, &mut |_| {}).unwrap()
    };
    // First object: the box 4..12 on every axis (512 voxels).
    assert_eq!(
        run(&mut c, [4; 3], [12; 3], [8, 8, 8]),
        SeedOutcome::Segment { id: 1, voxels: 512 }
    );
    // Second object: 10..16 (one FOV at 13 covers it) overlaps the first in 2^3 = 8 voxels; it
    // gets only the rest. Its moves towards (10,10,10) are refused: that voxel is claimed.
    assert_eq!(
        run(&mut c, [10; 3], [16; 3], [13, 13, 13]),
        SeedOutcome::Segment {
            id: 2,
            voxels: 216 - 8
        }
    );
    let seg = c.segmentation();
    assert_eq!(seg[idx(shape, [11, 11, 11])], 1);
    assert_eq!(seg[idx(shape, [12, 12, 12])], 2);
    assert_eq!(c.origins()[1].overlaps, vec![(1, 8)]);
    assert_eq!(c.origins()[1].iterations, 1);
    assert_eq!(c.counters().voxels_overlapping, 8);
    // A seed right next to segment 1 (min_boundary_dist 1) is skipped and marked.
    assert_eq!(
        run(&mut c, [0; 3], [24; 3], [8, 8, 12]),
        SeedOutcome::NearSegment
    );
    assert_eq!(
        run(&mut c, [0; 3], [24; 3], [8, 8, 12]),
        SeedOutcome::MarkedFailed
    );
    // A seed inside a segment is invalid.
    assert_eq!(
        run(&mut c, [0; 3], [24; 3], [5, 5, 5]),
        SeedOutcome::Invalid
    );
    // Too small: a 3^3 object.
    let small = run(&mut c, [4, 16, 4], [7, 19, 7], [5, 17, 5]);
    assert_eq!(small, SeedOutcome::TooSmall { voxels: 27 });
    assert_eq!(c.segmentation()[idx(shape, [5, 17, 5])], 0);
    assert_eq!(c.counters().segments, 2);
}

/// Records the seed patches it receives; call 0 and calls >= 2 predict +3 everywhere, call 1
/// predicts -1 everywhere except at the start voxel (7, 7, 7), which stays +3.
struct Scripted {
    fov: [usize; 3],
    seen: Vec<Vec<f32>>,
}

impl Predictor for Scripted {
    fn fov(&self) -> [usize; 3] {
        self.fov
    }
    fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
        self.seen.push(seed.to_vec());
        let call = self.seen.len() - 1;
        let start = idx([15; 3], [7, 7, 7]) as f32;
        for (o, &v) in out.iter_mut().zip(image) {
            *o = if call == 1 && v != start { -1.0 } else { 3.0 };
        }
    }
}

#[test]
fn pad_value_and_disco_rule() {
    let shape = [15, 15, 15];
    let image = index_image(shape);
    let fov = [5, 5, 5];
    let lg = InferenceOptions::default().logits();
    let opts = InferenceOptions {
        min_segment_size: 1,
        ..Default::default()
    };
    let mut p = Scripted { fov, seen: vec![] };
    let mut c = Canvas::new(&image, shape, fov, [2, 2, 2], opts.clone()).unwrap();
    c.segment_at([7, 7, 7], &mut p, &mut |_| {});
    // First patch: pad everywhere but the seed voxel.
    let first = &p.seen[0];
    assert_eq!(first[62], lg.init_activation);
    assert!(
        first
            .iter()
            .enumerate()
            .all(|(i, &v)| i == 62 || v == lg.pad_value)
    );
    // Call 0 proposes (2,-2,-2), (-2,2,-2), (-2,-2,2), (-2,-2,-2) relative to the start, in that
    // order; call 1 at (9,5,5) writes -1 over z 7..12, y 3..8, x 3..8; call 2 at (5,9,5) covers
    // z 3..8, y 7..12, x 3..8 and predicts +3. Voxel (7,7,3) lies in both: the disco rule keeps -1.
    assert!(p.seen.len() >= 3);
    assert!(p.seen[1].contains(&3.0) && p.seen[1].contains(&lg.pad_value));
    assert_eq!(c.seed_logits()[idx(shape, [7, 7, 3])], -1.0);
    assert_eq!(c.seed_logits()[idx(shape, [7, 7, 7])], 3.0);

    // With the rule off, call 2 raises it again.
    let mut p2 = Scripted { fov, seen: vec![] };
    let off = InferenceOptions {
        disco_seed_threshold: -1.0,
        ..opts
    };
    let mut c2 = Canvas::new(&image, shape, fov, [2, 2, 2], off).unwrap();
    c2.segment_at([7, 7, 7], &mut p2, &mut |_| {});
    assert_eq!(c2.seed_logits()[idx(shape, [7, 7, 3])], 3.0);
    // The second canvas reset only what it wrote: a fresh object starts from NaN again.
    c2.segment_at([7, 7, 7], &mut Oracle { fov }, &mut |_| {});
    assert!(c2.seed_logits()[idx(shape, [7, 7, 3])].is_nan());
}

#[test]
fn geometry_errors() {
    let image = vec![0.0f32; 8];
    let opts = InferenceOptions::default();
    assert!(matches!(
        Canvas::new(&image, [2, 2, 3], [3, 3, 3], [1, 1, 1], opts.clone()),
        Err(InferenceError::Shape {
            expected: 12,
            actual: 8,
            ..
        })
    ));
    assert!(matches!(
        Canvas::new(&image, [2, 2, 2], [4, 3, 3], [1, 1, 1], opts.clone()),
        Err(InferenceError::Geometry(_))
    ));
    assert!(matches!(
        Canvas::new(&image, [2, 2, 2], [3, 3, 3], [2, 1, 1], opts.clone()),
        Err(InferenceError::Geometry(_))
    ));
    let bad = InferenceOptions {
        move_threshold: 1.0,
        ..opts
    };
    assert!(matches!(
        Canvas::new(&image, [2, 2, 2], [3, 3, 3], [1, 1, 1], bad),
        Err(InferenceError::Options(_))
    ));
}

#[test]
fn predictor_is_object_safe_and_batches_by_default() {
    let mut o = Oracle { fov: [1, 1, 3] };
    let p: &mut dyn Predictor = &mut o;
    let image = [1.0, 2.0, 2.0, 5.0, 5.0, 5.0];
    let mut out = [0.0; 6];
    p.predict_batch(&image, &[0.0; 6], 2, &mut out);
    assert_eq!(out[0], -4.0);
    assert!(out[1..].iter().all(|&v| v >= 2.5));
}

#[test]
fn probability_quantisation() {
    assert_eq!(quantize_probability(0.0), 1);
    assert_eq!(quantize_probability(0.5), 128);
    assert_eq!(quantize_probability(1.0), 255);
    assert_eq!(quantize_probability(f32::NAN), 0);
}

#[test]
fn convstack_predicts_through_the_trait() {
    use crate::model_spec::ModelConfig;
    use crate::network::ConvStack3d;
    let cfg = ModelConfig {
        depth: 1,
        features: 4,
        fov: [5, 5, 5],
        deltas: [1, 1, 1],
    };
    let mut net = ConvStack3d::new(cfg, 0.1, &mut Rng::new(3));
    let mut r = Rng::new(4);
    let image: Vec<f32> = (0..250).map(|_| r.next_f32()).collect();
    let seed: Vec<f32> = (0..250).map(|_| r.next_f32() - 0.5).collect();
    let mut direct = vec![0.0; 250];
    net.forward(&image, &seed, 2, &mut direct);
    let p: &mut dyn Predictor = &mut net;
    assert_eq!(p.fov(), [5, 5, 5]);
    let mut one = vec![0.0; 125];
    p.predict(&image[125..], &seed[125..], &mut one);
    assert_eq!(&one[..], &direct[125..]);
    // A canvas runs with it: one flood from the centre of a 15^3 volume.
    let vol: Vec<f32> = (0..15 * 15 * 15).map(|_| r.next_f32()).collect();
    let opts = InferenceOptions {
        min_segment_size: 1,
        ..Default::default()
    };
    let mut c = Canvas::new(&vol, [15, 15, 15], [5, 5, 5], [1, 1, 1], opts).unwrap();
    c.try_seed([7, 7, 7], &mut net, &|| 0.0, &mut |_| {})
        .unwrap();
    assert!(c.counters().predict_calls >= 1);
}

#[test]
fn mean_stddev_in_pieces_equals_mean_stddev_in_one_piece() {
    let values: Vec<f32> = (0..10_007u32)
        .map(|i| ((i * 7919) % 251) as f32 + 0.25)
        .collect();
    let whole = mean_stddev(values.iter().copied());
    let passes = mean_stddev_in_passes::<()>(|visit| {
        for piece in values.chunks(1000) {
            piece.iter().for_each(|&x| visit(x));
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(whole.0.to_bits(), passes.0.to_bits());
    assert_eq!(whole.1.to_bits(), passes.1.to_bits());
    assert!((whole.0 - 125.25).abs() < 1.0, "{whole:?}");
    // A failing pass is the result.
    assert_eq!(mean_stddev_in_passes(|_| Err("disk")), Err("disk"));
    // No values: mean and stddev 0.
    assert_eq!(mean_stddev(core::iter::empty()), (0.0, 0.0));
}

#[test]
fn normalising_in_place_gives_the_bits_of_a_normalised_copy() {
    let raw: Vec<f32> = (0..300).map(|i| (i as f32) * 0.77 - 20.0).collect();
    let mut copy = vec![0.0f32; raw.len()];
    normalize_image(&raw, 128.0, 33.0, &mut copy);
    let mut in_place = raw.clone();
    normalize_image_in_place(&mut in_place, 128.0, 33.0);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&in_place), bits(&copy));
    assert_ne!(bits(&in_place), bits(&raw));
}
