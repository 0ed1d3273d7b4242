//! Test-time augmentation: a [`Predictor`] that averages the predictions of the field of view
//! reflected (and with x and y swapped), the symmetries training augments with.
//!
//! [`Symmetries`] names a group of such transforms: every combination of the chosen reflections
//! and, optionally, the x/y swap (so `count()` is a power of two, up to 16). [`SymmetricPredictor`]
//! shows the inner predictor the image and seed patches under each transform, maps each prediction
//! back and writes the mean of the logits. Averaging over a group makes the prediction exactly
//! equivariant: the prediction of a transformed patch is the transformed prediction. With no
//! transform chosen (the default) the inner predictor is called directly, bit for bit as without
//! the wrapper.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use super::{InferenceError, Predictor};

/// The reflections and swap whose predictions are averaged; the default is none (one prediction).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Symmetries {
    /// Reflect along z, y and x (`[z, y, x]`); each doubles the predictions.
    pub flip: [bool; 3],
    /// Also swap x and y (the FOV must be as wide in x as in y); doubles the predictions.
    pub swap_xy: bool,
}

/// The names [`Symmetries::parse`] reads and `Display` writes, in `Display`'s order.
const NAMES: [&str; 4] = ["flip-z", "flip-y", "flip-x", "swap-xy"];

impl Symmetries {
    /// All 16: every reflection and the x/y swap.
    pub const ALL: Self = Self {
        flip: [true; 3],
        swap_xy: true,
    };

    /// How many predictions one call makes: 2 to the number of chosen transforms.
    pub fn count(&self) -> usize {
        1 << (self.flip.iter().filter(|&&f| f).count() + usize::from(self.swap_xy))
    }

    /// Whether nothing is chosen (plain predictions).
    pub fn is_identity(&self) -> bool {
        self.count() == 1
    }

    /// Reads `none`, `all`, or a comma-separated list of `flip-z`, `flip-y`, `flip-x` and
    /// `swap-xy`. The error names the unknown word and lists the known ones.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "none" => return Ok(Self::default()),
            "all" => return Ok(Self::ALL),
            _ => {}
        }
        let mut s = Self::default();
        for word in text.split(',').map(str::trim) {
            match word {
                "flip-z" => s.flip[0] = true,
                "flip-y" => s.flip[1] = true,
                "flip-x" => s.flip[2] = true,
                "swap-xy" => s.swap_xy = true,
                other => {
                    return Err(alloc::format!(
                        "unknown symmetry {other:?}: expected none, all, or a comma-separated \
                         list of {}",
                        NAMES.join(", ")
                    ));
                }
            }
        }
        Ok(s)
    }

    /// Whether each of [`NAMES`] is chosen, in that order.
    fn chosen(&self) -> [bool; 4] {
        [self.flip[0], self.flip[1], self.flip[2], self.swap_xy]
    }

    /// Every transform of the group, the identity first: each subset of the chosen transforms,
    /// as a bit mask over [`NAMES`] in increasing order.
    fn transforms(&self) -> Vec<Transform> {
        let chosen = self.chosen();
        let bit = |mask: usize, b: usize| mask >> b & 1 == 1;
        (0..1 << NAMES.len())
            .filter(|&mask| (0..NAMES.len()).all(|b| !bit(mask, b) || chosen[b]))
            .map(|mask| Transform {
                flip: [bit(mask, 0), bit(mask, 1), bit(mask, 2)],
                swap_xy: bit(mask, 3),
            })
            .collect()
    }
}

impl fmt::Display for Symmetries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = NAMES
            .iter()
            .zip(self.chosen())
            .filter_map(|(n, c)| c.then_some(*n))
            .collect();
        if names.is_empty() {
            write!(f, "none")
        } else {
            write!(f, "{}", names.join(","))
        }
    }
}

/// One element of the group: reflections first, then the swap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Transform {
    flip: [bool; 3],
    swap_xy: bool,
}

impl Transform {
    /// For each voxel `[z][y][x]` of a patch of shape `fov`, its index in the transformed patch.
    fn positions(&self, fov: [usize; 3]) -> Vec<u32> {
        let mut out = Vec::with_capacity(fov.iter().product());
        for z in 0..fov[0] {
            for y in 0..fov[1] {
                for x in 0..fov[2] {
                    let mut v = [z, y, x];
                    for a in 0..3 {
                        if self.flip[a] {
                            v[a] = fov[a] - 1 - v[a];
                        }
                    }
                    if self.swap_xy {
                        v.swap(1, 2);
                    }
                    out.push(((v[0] * fov[1] + v[1]) * fov[2] + v[2]) as u32);
                }
            }
        }
        out
    }
}

/// How many transformed patches go to the inner predictor at once (bounds its batch workspace).
const BATCH: usize = 4;

/// A predictor whose prediction is the mean logit of `inner`'s predictions under every transform
/// of a [`Symmetries`] group (see the module docs).
pub struct SymmetricPredictor<P> {
    inner: P,
    /// Per transform (the identity first), each voxel's index in the transformed patch.
    positions: Vec<Vec<u32>>,
    image: Vec<f32>,
    seed: Vec<f32>,
    out: Vec<f32>,
}

impl<P: Predictor> SymmetricPredictor<P> {
    /// Wraps `inner`. Swapping x and y needs a FOV as wide in x as in y (else an error naming
    /// both sizes).
    pub fn new(inner: P, symmetries: Symmetries) -> Result<Self, InferenceError> {
        let fov = inner.fov();
        if symmetries.swap_xy && fov[1] != fov[2] {
            return Err(InferenceError::Geometry(alloc::format!(
                "symmetry swap-xy needs a FOV as wide in x as in y, found x {} and y {}",
                fov[2],
                fov[1]
            )));
        }
        let positions: Vec<Vec<u32>> = if symmetries.is_identity() {
            Vec::new()
        } else {
            symmetries
                .transforms()
                .iter()
                .map(|t| t.positions(fov))
                .collect()
        };
        let n = fov.iter().product::<usize>() * positions.len().min(BATCH);
        Ok(Self {
            inner,
            positions,
            image: vec![0.0; n],
            seed: vec![0.0; n],
            out: vec![0.0; n],
        })
    }
}

impl<P: Predictor> Predictor for SymmetricPredictor<P> {
    fn fov(&self) -> [usize; 3] {
        self.inner.fov()
    }

    fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
        if self.positions.is_empty() {
            return self.inner.predict(image, seed, out);
        }
        let n = out.len();
        out.fill(0.0);
        for group in self.positions.chunks(BATCH) {
            for (t, pos) in group.iter().enumerate() {
                let (img, sd) = (
                    &mut self.image[t * n..(t + 1) * n],
                    &mut self.seed[t * n..(t + 1) * n],
                );
                for (v, &p) in pos.iter().enumerate() {
                    img[p as usize] = image[v];
                    sd[p as usize] = seed[v];
                }
            }
            let k = group.len();
            self.inner.predict_batch(
                &self.image[..k * n],
                &self.seed[..k * n],
                k,
                &mut self.out[..k * n],
            );
            for (t, pos) in group.iter().enumerate() {
                let o = &self.out[t * n..(t + 1) * n];
                for (v, &p) in pos.iter().enumerate() {
                    out[v] += o[p as usize];
                }
            }
        }
        let scale = 1.0 / self.positions.len() as f32;
        for v in out.iter_mut() {
            *v *= scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::{LabelOracle, SegmentOptions, segment};

    /// A predictor that treats every voxel differently (no symmetry at all): each logit mixes the
    /// seed, the image voxel weighted by its index, and the next voxel's image value.
    struct Lopsided {
        fov: [usize; 3],
    }

    impl Predictor for Lopsided {
        fn fov(&self) -> [usize; 3] {
            self.fov
        }
        fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
            let n = out.len();
            for i in 0..n {
                out[i] = seed[i] + image[i] * (1.0 + 0.01 * i as f32) + 0.5 * image[(i + 1) % n];
            }
        }
    }

    /// Counts the FOVs its oracle predicts.
    struct Counting {
        oracle: LabelOracle,
        fovs: usize,
    }

    impl Predictor for Counting {
        fn fov(&self) -> [usize; 3] {
            self.oracle.fov
        }
        fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
            self.fovs += 1;
            self.oracle.predict(image, seed, out);
        }
    }

    /// `patch` under `t`.
    fn transformed(t: &Transform, fov: [usize; 3], patch: &[f32]) -> Vec<f32> {
        let mut out = vec![f32::NAN; patch.len()];
        for (v, &p) in t.positions(fov).iter().enumerate() {
            out[p as usize] = patch[v];
        }
        out
    }

    fn patches(n: usize) -> (Vec<f32>, Vec<f32>) {
        let image = (0..n).map(|i| ((i * 37 % 11) as f32) - 5.0).collect();
        let seed = (0..n).map(|i| ((i * 13 % 7) as f32) * 0.3 - 1.0).collect();
        (image, seed)
    }

    fn predict(p: &mut impl Predictor, image: &[f32], seed: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; image.len()];
        p.predict(image, seed, &mut out);
        out
    }

    #[test]
    fn names_parse_and_print_back() {
        assert_eq!(Symmetries::parse("none").unwrap(), Symmetries::default());
        assert_eq!(Symmetries::parse("all").unwrap(), Symmetries::ALL);
        assert_eq!(Symmetries::ALL.count(), 16);
        assert!(Symmetries::default().is_identity());
        let s = Symmetries::parse("swap-xy, flip-x").unwrap();
        assert_eq!((s.count(), s.to_string()), (4, "flip-x,swap-xy".into()));
        assert_eq!(Symmetries::parse(&s.to_string()).unwrap(), s);
        assert_eq!(Symmetries::default().to_string(), "none");
        let e = Symmetries::parse("flip-x,mirror").unwrap_err();
        assert!(e.contains("\"mirror\"") && e.contains("swap-xy"), "{e}");
    }

    #[test]
    fn the_group_has_every_transform_once() {
        let all = Symmetries::ALL.transforms();
        assert_eq!(all.len(), 16);
        assert_eq!(all[0], Transform::default());
        for (i, a) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|b| b != a), "{a:?} twice");
        }
    }

    #[test]
    fn without_symmetries_the_inner_prediction_passes_unchanged() {
        let fov = [3, 4, 5];
        let (image, seed) = patches(60);
        let plain = predict(&mut Lopsided { fov }, &image, &seed);
        let mut wrapped = SymmetricPredictor::new(Lopsided { fov }, Symmetries::default()).unwrap();
        assert_eq!(wrapped.fov(), fov);
        assert_eq!(predict(&mut wrapped, &image, &seed), plain);
    }

    #[test]
    fn one_reflection_averages_the_prediction_and_the_reflected_one() {
        let fov = [3, 4, 5];
        let (image, seed) = patches(60);
        let flip_x = Transform {
            flip: [false, false, true],
            swap_xy: false,
        };
        let plain = predict(&mut Lopsided { fov }, &image, &seed);
        let mirrored = predict(
            &mut Lopsided { fov },
            &transformed(&flip_x, fov, &image),
            &transformed(&flip_x, fov, &seed),
        );
        // Mirrored back: voxel v of the patch is voxel positions[v] of the mirrored one.
        let back: Vec<f32> = flip_x
            .positions(fov)
            .iter()
            .map(|&p| mirrored[p as usize])
            .collect();
        let s = Symmetries::parse("flip-x").unwrap();
        let mut wrapped = SymmetricPredictor::new(Lopsided { fov }, s).unwrap();
        let got = predict(&mut wrapped, &image, &seed);
        for v in 0..60 {
            assert!(
                (got[v] - 0.5 * (plain[v] + back[v])).abs() < 1e-5,
                "voxel {v}: {} against {}",
                got[v],
                0.5 * (plain[v] + back[v])
            );
        }
        assert_ne!(got, plain);
    }

    #[test]
    fn the_average_over_the_group_is_equivariant() {
        // 16 transforms, more than one batch of the inner predictor.
        let fov = [3, 4, 4];
        let (image, seed) = patches(48);
        let mut wrapped = SymmetricPredictor::new(Lopsided { fov }, Symmetries::ALL).unwrap();
        let base = predict(&mut wrapped, &image, &seed);
        for t in Symmetries::ALL.transforms() {
            let got = predict(
                &mut wrapped,
                &transformed(&t, fov, &image),
                &transformed(&t, fov, &seed),
            );
            let want = transformed(&t, fov, &base);
            for v in 0..48 {
                assert!((got[v] - want[v]).abs() < 1e-4, "{t:?} voxel {v}");
            }
        }
    }

    #[test]
    fn swapping_x_and_y_needs_a_square_fov() {
        let e = SymmetricPredictor::new(Lopsided { fov: [3, 4, 5] }, Symmetries::ALL)
            .err()
            .unwrap();
        assert!(e.to_string().contains("x 5 and y 4"), "{e}");
        let flips = Symmetries::parse("flip-z,flip-y,flip-x").unwrap();
        assert!(SymmetricPredictor::new(Lopsided { fov: [3, 4, 5] }, flips).is_ok());
    }

    #[test]
    fn segmenting_with_symmetries_predicts_each_fov_under_each_of_them() {
        let shape = [9, 9, 18];
        let image: Vec<f32> = (0..9 * 9 * 18)
            .map(|i| if i % 18 < 9 { 1.0 } else { 2.0 })
            .collect();
        let run = |symmetries: Symmetries| {
            let mut options: SegmentOptions = LabelOracle::exhaustive_options();
            options.inference.symmetries = symmetries;
            let mut p = Counting {
                oracle: LabelOracle { fov: [5, 5, 5] },
                fovs: 0,
            };
            let seg = segment(&image, shape, &mut p, &options, &|| 0.0, &mut |_| {}).unwrap();
            (seg.labels, seg.counters.predict_calls, p.fovs)
        };
        let (plain, calls, fovs) = run(Symmetries::default());
        assert_eq!(fovs as u64, calls);
        // The oracle is symmetric: the same segmentation, from 8 predictions per call.
        let (flipped, calls8, fovs8) = run(Symmetries::parse("flip-z,flip-y,flip-x").unwrap());
        assert_eq!((flipped, calls8, fovs8), (plain, calls, 8 * fovs));
    }
}
