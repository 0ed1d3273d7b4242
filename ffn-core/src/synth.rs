//! Synthetic labelled volumes for tests and demos: branching, tube-like neurites packed densely in a
//! volume, rendered as EM-like images (bright cytoplasm, dark membranes, blur and noise).
//!
//! Construction, all driven by one seed:
//! 1. every neurite is a tree of random walks with persistent direction ("tubes") that branch now
//!    and then; each walk point is a site with the neurite's label and a radius;
//! 2. every voxel takes the label of the site nearest to it in the radius-weighted distance
//!    `|v - site| / radius` (a Dijkstra sweep over the voxel grid), so the neurites fill the volume
//!    densely like neuropil, thick ones claiming more space;
//! 3. voxels with a 6-neighbour of another label are membranes: dark; the inside of every neurite is
//!    bright with a per-neurite offset; the image is blurred with a Gaussian and gets Gaussian noise.
//!
//! Labels are dense (every voxel belongs to a neurite, as in FIB-25's ground truth), ids `1..=n`.

use alloc::collections::BinaryHeap;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::fmt;

use ndarray::Array3;

use crate::rng::Rng;

/// Parameters of a synthetic volume.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthConfig {
    /// Volume shape `[z, y, x]`.
    pub shape: [usize; 3],
    /// Number of neurites (trees); each gets its own label.
    pub neurites: usize,
    /// Tube radius range in voxels `(min, max)`; each neurite draws one radius uniformly.
    pub radius: (f32, f32),
    /// Probability per walk step that a tube branches.
    pub branch_prob: f32,
    /// Direction persistence of the walks in `[0, 1)`: higher is straighter.
    pub persistence: f32,
    /// Grey value of the cytoplasm (0-255).
    pub interior: f32,
    /// Spread of the per-neurite grey offset (uniform in `+-interior_spread`).
    pub interior_spread: f32,
    /// Grey value of membranes (0-255).
    pub membrane: f32,
    /// Gaussian blur sigma in voxels (0 disables the blur).
    pub blur_sigma: f32,
    /// Stddev of the additive Gaussian noise in grey levels.
    pub noise_stddev: f32,
    /// Random seed.
    pub seed: u64,
}

impl Default for SynthConfig {
    /// A 64^3 volume with 24 neurites: a few seconds of training data for tests.
    fn default() -> Self {
        Self {
            shape: [64, 64, 64],
            neurites: 24,
            radius: (3.0, 7.0),
            branch_prob: 0.02,
            persistence: 0.85,
            interior: 170.0,
            interior_spread: 20.0,
            membrane: 40.0,
            blur_sigma: 0.8,
            noise_stddev: 12.0,
            seed: 1,
        }
    }
}

/// A generated volume: an 8-bit image and its dense labels, both `[z, y, x]`.
#[derive(Clone, Debug)]
pub struct SynthVolume {
    /// EM-like grey values.
    pub image: Array3<u8>,
    /// Neurite ids `1..=neurites` (ids whose tubes never entered the volume are absent).
    pub labels: Array3<u64>,
}

/// A parameter of [`SynthConfig`] out of range.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SynthError {
    /// The field name.
    pub field: &'static str,
    /// What was expected.
    pub expected: &'static str,
}

impl fmt::Display for SynthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "synth.{}: expected {}", self.field, self.expected)
    }
}

impl core::error::Error for SynthError {}

fn check(ok: bool, field: &'static str, expected: &'static str) -> Result<(), SynthError> {
    if ok {
        Ok(())
    } else {
        Err(SynthError { field, expected })
    }
}

impl SynthConfig {
    /// A volume of `shape` (`[z, y, x]`) with `neurites` objects; the other fields as in
    /// [`SynthConfig::default`].
    pub fn new(shape: [usize; 3], neurites: usize) -> Self {
        Self {
            shape,
            neurites,
            ..Self::default()
        }
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), SynthError> {
        check(
            self.shape.iter().all(|&s| s >= 1),
            "shape",
            "every size >= 1",
        )?;
        let voxels = self.shape.iter().try_fold(1usize, |n, &s| n.checked_mul(s));
        check(
            voxels.is_some_and(|v| v <= 1 << 30),
            "shape",
            "at most 2^30 voxels",
        )?;
        check(self.neurites >= 1, "neurites", ">= 1")?;
        check(self.neurites < u32::MAX as usize, "neurites", "< 2^32")?;
        let (r0, r1) = self.radius;
        check(
            r0.is_finite() && r0 > 0.0 && r1 >= r0 && r1.is_finite(),
            "radius",
            "0 < min <= max",
        )?;
        check(
            (0.0..=1.0).contains(&self.branch_prob),
            "branch_prob",
            "in [0, 1]",
        )?;
        check(
            (0.0..1.0).contains(&self.persistence),
            "persistence",
            "in [0, 1)",
        )?;
        check(
            self.blur_sigma.is_finite() && self.blur_sigma >= 0.0,
            "blur_sigma",
            ">= 0",
        )?;
        check(
            self.noise_stddev.is_finite() && self.noise_stddev >= 0.0,
            "noise_stddev",
            ">= 0",
        )?;
        check(
            self.interior.is_finite() && self.membrane.is_finite(),
            "interior/membrane",
            "finite",
        )?;
        check(
            self.interior_spread.is_finite(),
            "interior_spread",
            "finite",
        )?;
        Ok(())
    }
}

/// One walk point: position (z, y, x), radius and label.
#[derive(Clone, Copy, Debug)]
struct Site {
    pos: [f32; 3],
    radius: f32,
    label: u32,
}

fn random_unit(rng: &mut Rng) -> [f32; 3] {
    loop {
        let v = [
            rng.next_f32() * 2.0 - 1.0,
            rng.next_f32() * 2.0 - 1.0,
            rng.next_f32() * 2.0 - 1.0,
        ];
        let n2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
        if n2 > 1e-4 && n2 <= 1.0 {
            let n = libm::sqrtf(n2);
            return [v[0] / n, v[1] / n, v[2] / n];
        }
    }
}

fn normalise(v: [f32; 3]) -> [f32; 3] {
    let n = libm::sqrtf(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).max(1e-6);
    [v[0] / n, v[1] / n, v[2] / n]
}

/// Random walks of every neurite, as sites.
fn grow_sites(cfg: &SynthConfig, rng: &mut Rng) -> Vec<Site> {
    let shape = cfg.shape.map(|s| s as f32);
    let step = 1.0f32;
    let max_steps = (4.0 * shape.iter().fold(0.0f32, |a, &b| a.max(b))) as usize + 8;
    // A tip may wander this far outside the volume before it ends, so tubes can re-enter.
    let slack = 4.0f32;
    let inside = |p: &[f32; 3]| (0..3).all(|d| p[d] >= -slack && p[d] <= shape[d] - 1.0 + slack);
    let mut sites = Vec::new();
    for n in 0..cfg.neurites {
        let label = n as u32 + 1;
        let (r0, r1) = cfg.radius;
        let radius = r0 + (r1 - r0) * rng.next_f32();
        let start = [
            rng.next_f32() * (shape[0] - 1.0),
            rng.next_f32() * (shape[1] - 1.0),
            rng.next_f32() * (shape[2] - 1.0),
        ];
        let dir = random_unit(rng);
        // Two tips walking away from the start in opposite directions: the tube crosses the volume.
        let mut tips = vec![(start, dir), (start, dir.map(|c| -c))];
        let mut branches = 0usize;
        while let Some((mut pos, mut dir)) = tips.pop() {
            for _ in 0..max_steps {
                sites.push(Site { pos, radius, label });
                let jitter = random_unit(rng);
                let p = cfg.persistence;
                dir = normalise([
                    p * dir[0] + (1.0 - p) * jitter[0],
                    p * dir[1] + (1.0 - p) * jitter[1],
                    p * dir[2] + (1.0 - p) * jitter[2],
                ]);
                pos = [
                    pos[0] + step * dir[0],
                    pos[1] + step * dir[1],
                    pos[2] + step * dir[2],
                ];
                if !inside(&pos) {
                    break;
                }
                if branches < 16 && rng.next_f32() < cfg.branch_prob {
                    branches += 1;
                    let side = random_unit(rng);
                    tips.push((
                        pos,
                        normalise([dir[0] + side[0], dir[1] + side[1], dir[2] + side[2]]),
                    ));
                }
            }
        }
    }
    sites
}

#[derive(Clone, Copy, PartialEq)]
struct Entry {
    key: f32,
    voxel: usize,
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed, so that `BinaryHeap` pops the smallest key first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .key
            .total_cmp(&self.key)
            .then_with(|| other.voxel.cmp(&self.voxel))
    }
}

/// Assigns every voxel to its nearest site in the radius-weighted distance (Dijkstra over 6-neighbours,
/// each voxel inheriting the site of the neighbour it was reached from).
fn assign_labels(shape: [usize; 3], sites: &[Site]) -> Vec<u32> {
    let [nz, ny, nx] = shape;
    let n = nz * ny * nx;
    let mut best = vec![f32::INFINITY; n];
    let mut owner = vec![u32::MAX; n];
    let mut heap = BinaryHeap::new();
    let key_of = |site: &Site, z: usize, y: usize, x: usize| {
        let d = [
            z as f32 - site.pos[0],
            y as f32 - site.pos[1],
            x as f32 - site.pos[2],
        ];
        libm::sqrtf(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]) / site.radius
    };
    for (i, s) in sites.iter().enumerate() {
        let c = [0, 1, 2].map(|d| libm::roundf(s.pos[d]));
        if (0..3).any(|d| c[d] < 0.0 || c[d] > (shape[d] - 1) as f32) {
            continue;
        }
        let (z, y, x) = (c[0] as usize, c[1] as usize, c[2] as usize);
        let v = (z * ny + y) * nx + x;
        let k = key_of(s, z, y, x);
        if k < best[v] {
            best[v] = k;
            owner[v] = i as u32;
            heap.push(Entry { key: k, voxel: v });
        }
    }
    while let Some(Entry { key, voxel }) = heap.pop() {
        if key > best[voxel] {
            continue;
        }
        let site = &sites[owner[voxel] as usize];
        let (z, rest) = (voxel / (ny * nx), voxel % (ny * nx));
        let (y, x) = (rest / nx, rest % nx);
        let mut visit = |z: usize, y: usize, x: usize| {
            let w = (z * ny + y) * nx + x;
            let k = key_of(site, z, y, x);
            if k < best[w] {
                best[w] = k;
                owner[w] = owner[voxel];
                heap.push(Entry { key: k, voxel: w });
            }
        };
        if z > 0 {
            visit(z - 1, y, x);
        }
        if z + 1 < nz {
            visit(z + 1, y, x);
        }
        if y > 0 {
            visit(z, y - 1, x);
        }
        if y + 1 < ny {
            visit(z, y + 1, x);
        }
        if x > 0 {
            visit(z, y, x - 1);
        }
        if x + 1 < nx {
            visit(z, y, x + 1);
        }
    }
    owner
}

/// Separable Gaussian blur in place (edges clamped).
fn gaussian_blur(data: &mut [f32], shape: [usize; 3], sigma: f32) {
    if sigma <= 0.0 {
        return;
    }
    let radius = libm::ceilf(3.0 * sigma) as isize;
    let kernel: Vec<f32> = (-radius..=radius)
        .map(|i| libm::expf(-((i * i) as f32) / (2.0 * sigma * sigma)))
        .collect();
    let total: f32 = kernel.iter().sum();
    let kernel: Vec<f32> = kernel.iter().map(|k| k / total).collect();
    let strides = [shape[1] * shape[2], shape[2], 1];
    let mut line = Vec::new();
    for axis in 0..3 {
        let len = shape[axis];
        let others: Vec<usize> = (0..3).filter(|&a| a != axis).collect();
        for i in 0..shape[others[0]] {
            for j in 0..shape[others[1]] {
                let base = i * strides[others[0]] + j * strides[others[1]];
                line.clear();
                line.extend((0..len).map(|k| data[base + k * strides[axis]]));
                for k in 0..len {
                    let mut acc = 0.0;
                    for (t, w) in kernel.iter().enumerate() {
                        let p = (k as isize + t as isize - radius).clamp(0, len as isize - 1);
                        acc += w * line[p as usize];
                    }
                    data[base + k * strides[axis]] = acc;
                }
            }
        }
    }
}

/// Generates a volume; the same config (seed included) gives the same volume everywhere.
pub fn generate(cfg: &SynthConfig) -> Result<SynthVolume, SynthError> {
    cfg.validate()?;
    let shape = cfg.shape;
    let [nz, ny, nx] = shape;
    let mut rng = Rng::new(cfg.seed);
    let sites = grow_sites(cfg, &mut rng);
    let owner = assign_labels(shape, &sites);
    // A volume without any site inside (impossible in practice: every neurite starts inside).
    let labels: Vec<u64> = owner
        .iter()
        .map(|&o| {
            if o == u32::MAX {
                0
            } else {
                sites[o as usize].label as u64
            }
        })
        .collect();
    let offsets: Vec<f32> = (0..=cfg.neurites)
        .map(|_| (rng.next_f32() * 2.0 - 1.0) * cfg.interior_spread)
        .collect();
    let mut image = vec![0.0f32; labels.len()];
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let v = (z * ny + y) * nx + x;
                let l = labels[v];
                let boundary = (z > 0 && labels[v - ny * nx] != l)
                    || (z + 1 < nz && labels[v + ny * nx] != l)
                    || (y > 0 && labels[v - nx] != l)
                    || (y + 1 < ny && labels[v + nx] != l)
                    || (x > 0 && labels[v - 1] != l)
                    || (x + 1 < nx && labels[v + 1] != l);
                image[v] = if boundary {
                    cfg.membrane
                } else {
                    cfg.interior + offsets[l as usize]
                };
            }
        }
    }
    gaussian_blur(&mut image, shape, cfg.blur_sigma);
    let image: Vec<u8> = image
        .iter()
        .map(|&g| libm::roundf(g + cfg.noise_stddev * rng.normal() as f32).clamp(0.0, 255.0) as u8)
        .collect();
    // Shapes match the data lengths by construction.
    let image = Array3::from_shape_vec((nz, ny, nx), image).map_err(|_| SynthError {
        field: "shape",
        expected: "a shape whose product fits in memory",
    })?;
    let labels = Array3::from_shape_vec((nz, ny, nx), labels).map_err(|_| SynthError {
        field: "shape",
        expected: "a shape whose product fits in memory",
    })?;
    Ok(SynthVolume { image, labels })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    fn small() -> SynthConfig {
        SynthConfig {
            shape: [24, 28, 32],
            neurites: 8,
            ..SynthConfig::default()
        }
    }

    #[test]
    fn shapes_whose_voxel_count_overflows_are_refused() {
        let huge = SynthConfig::new([1 << 22, 1 << 22, 1 << 22], 3);
        let e = huge.validate().unwrap_err();
        assert_eq!(e.field, "shape");
        assert!(generate(&huge).is_err());
    }

    #[test]
    fn deterministic_and_seed_dependent() {
        let a = generate(&small()).unwrap();
        let b = generate(&small()).unwrap();
        assert_eq!(a.image, b.image);
        assert_eq!(a.labels, b.labels);
        let c = generate(&SynthConfig { seed: 2, ..small() }).unwrap();
        assert_ne!(a.labels, c.labels);
        assert_eq!(a.image.dim(), (24, 28, 32));
    }

    #[test]
    fn labels_are_dense_with_several_objects_and_membranes_are_dark() {
        let v = generate(&small()).unwrap();
        let mut sizes = BTreeMap::new();
        for &l in v.labels.iter() {
            *sizes.entry(l).or_insert(0usize) += 1;
        }
        assert!(!sizes.contains_key(&0), "labels must be dense");
        assert!(sizes.len() >= 4, "only {} objects", sizes.len());
        // Mean grey of boundary voxels is far below the interior mean.
        let (nz, ny, nx) = v.labels.dim();
        let (mut sb, mut nb, mut si, mut ni) = (0.0, 0, 0.0, 0);
        for z in 1..nz - 1 {
            for y in 1..ny - 1 {
                for x in 1..nx - 1 {
                    let l = v.labels[(z, y, x)];
                    let b = [(1, 0, 0), (0, 1, 0), (0, 0, 1)].iter().any(|&(a, b2, c)| {
                        v.labels[(z + a, y + b2, x + c)] != l
                            || v.labels[(z - a, y - b2, x - c)] != l
                    });
                    let g = v.image[(z, y, x)] as f64;
                    if b {
                        sb += g;
                        nb += 1;
                    } else {
                        si += g;
                        ni += 1;
                    }
                }
            }
        }
        assert!(nb > 0 && ni > 0);
        let (mb, mi) = (sb / nb as f64, si / ni as f64);
        assert!(mi - mb > 50.0, "membrane {mb} interior {mi}");
    }

    #[test]
    fn objects_are_connected() {
        // Every label forms one 6-connected component (the Dijkstra sweep grows regions from sites
        // along connected walks); checked by flood fill.
        let v = generate(&small()).unwrap();
        let (nz, ny, nx) = v.labels.dim();
        let mut seen = Array3::from_elem((nz, ny, nx), false);
        let mut components = BTreeMap::new();
        for start in 0..nz * ny * nx {
            let s = (start / (ny * nx), start / nx % ny, start % nx);
            if seen[s] {
                continue;
            }
            let l = v.labels[s];
            *components.entry(l).or_insert(0) += 1;
            let mut stack = vec![s];
            seen[s] = true;
            while let Some((z, y, x)) = stack.pop() {
                let n = [
                    (z.wrapping_sub(1), y, x),
                    (z + 1, y, x),
                    (z, y.wrapping_sub(1), x),
                    (z, y + 1, x),
                    (z, y, x.wrapping_sub(1)),
                    (z, y, x + 1),
                ];
                for p in n {
                    if p.0 < nz && p.1 < ny && p.2 < nx && !seen[p] && v.labels[p] == l {
                        seen[p] = true;
                        stack.push(p);
                    }
                }
            }
        }
        // Sites of one neurite that lie outside the volume can split a tube that leaves and
        // re-enters; allow that, but most labels must be single components.
        let single = components.values().filter(|&&c| c == 1).count();
        assert!(single * 4 >= components.len() * 3, "{components:?}");
    }

    #[test]
    fn bad_config_names_the_field() {
        let e = generate(&SynthConfig {
            neurites: 0,
            ..small()
        })
        .unwrap_err();
        assert_eq!(e.field, "neurites");
        let e = generate(&SynthConfig {
            radius: (2.0, 1.0),
            ..small()
        })
        .unwrap_err();
        assert!(e.to_string().contains("synth.radius"));
    }
}
