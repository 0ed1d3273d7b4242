//! google/ffn's `compute_partitions`: for every labelled voxel, the fraction of the cube of radius
//! `lom_radius` around it that carries the same label (the "local object mask" fraction), quantised by
//! thresholds into classes. [`build_coordinates`](super::coordinates::build_coordinates) then samples
//! every class equally often, so training sees thin processes and object interiors alike.
//!
//! Output values: `0` for interior voxels without an object (label 0 or removed as dust), `1..=T+1`
//! for the classes (`i + 1` for the first threshold `t_i` with `fraction < t_i`, `T + 1` when the
//! fraction reaches the last threshold), and [`EXCLUDED`] for the margin of width `lom_radius` where
//! the cube does not fit.
//!
//! Each object's counts come from a summed-volume table over its bounding box grown by the radius, so
//! the cost is the sum of those boxes, not objects x volume.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use ndarray::{Array3, ArrayView3};

use super::{TrainingError, invalid};

/// Value of voxels excluded from sampling (the margin).
pub const EXCLUDED: u8 = 255;

/// google/ffn's default thresholds.
pub const DEFAULT_THRESHOLDS: [f32; 12] = [
    0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
];

/// google/ffn's default minimum object size (voxels); smaller objects become background.
pub const DEFAULT_MIN_SIZE: usize = 10_000;

/// Parameters of [`compute_partitions`].
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionConfig {
    /// Increasing thresholds in `(0, 1]`; at most 254 of them.
    pub thresholds: Vec<f32>,
    /// Cube radius `[z, y, x]` (google/ffn: `fov // 2 + delta`, e.g. 24).
    pub lom_radius: [usize; 3],
    /// Objects with fewer voxels are set to 0 first.
    pub min_size: usize,
}

impl Default for PartitionConfig {
    fn default() -> Self {
        Self {
            thresholds: DEFAULT_THRESHOLDS.to_vec(),
            lom_radius: [24, 24, 24],
            min_size: DEFAULT_MIN_SIZE,
        }
    }
}

impl PartitionConfig {
    /// Checks thresholds (increasing, within `(0, 1]`, at most 254).
    pub fn validate(&self) -> Result<(), TrainingError> {
        let t = &self.thresholds;
        if t.is_empty() || t.len() > 254 {
            return Err(invalid("thresholds", "1 to 254 values", t.len()));
        }
        if t.iter().any(|&v| !(v > 0.0 && v <= 1.0)) || t.windows(2).any(|w| w[0] >= w[1]) {
            return Err(invalid(
                "thresholds",
                "strictly increasing values in (0, 1]",
                t,
            ));
        }
        Ok(())
    }
}

/// Sizes (voxel counts) of every label, 0 included.
pub fn object_sizes(labels: ArrayView3<u64>) -> BTreeMap<u64, usize> {
    let mut sizes = BTreeMap::new();
    let mut run: Option<(u64, usize)> = None;
    for &l in labels.iter() {
        match &mut run {
            Some((cur, n)) if *cur == l => *n += 1,
            _ => {
                if let Some((cur, n)) = run {
                    *sizes.entry(cur).or_insert(0) += n;
                }
                run = Some((l, 1));
            }
        }
    }
    if let Some((cur, n)) = run {
        *sizes.entry(cur).or_insert(0) += n;
    }
    sizes
}

/// Sets every object with fewer than `min_size` voxels to 0; returns how many objects were removed.
pub fn clear_dust(labels: &mut Array3<u64>, min_size: usize) -> usize {
    let sizes = object_sizes(labels.view());
    let small: BTreeMap<u64, ()> = sizes
        .iter()
        .filter(|&(&l, &n)| l != 0 && n < min_size)
        .map(|(&l, _)| (l, ()))
        .collect();
    if small.is_empty() {
        return 0;
    }
    labels.map_inplace(|l| {
        if small.contains_key(l) {
            *l = 0;
        }
    });
    small.len()
}

/// The class of a fraction: `i + 1` for the first threshold it is below, `T + 1` above all.
pub fn quantise(fraction: f32, thresholds: &[f32]) -> u8 {
    thresholds
        .iter()
        .position(|&t| fraction < t)
        .unwrap_or(thresholds.len()) as u8
        + 1
}

/// Computes the partition volume (same shape as `labels`). See the module docs for the values.
pub fn compute_partitions(
    labels: ArrayView3<u64>,
    cfg: &PartitionConfig,
) -> Result<Array3<u8>, TrainingError> {
    cfg.validate()?;
    let (nz, ny, nx) = labels.dim();
    let shape = [nz, ny, nx];
    let r = cfg.lom_radius;
    let mut labels = labels.as_standard_layout().into_owned();
    clear_dust(&mut labels, cfg.min_size);
    let mut out = Array3::from_elem((nz, ny, nx), EXCLUDED);
    if (0..3).any(|d| shape[d] <= 2 * r[d]) {
        return Ok(out);
    }
    let interior = |p: [usize; 3]| (0..3).all(|d| p[d] >= r[d] && p[d] < shape[d] - r[d]);
    for z in r[0]..nz - r[0] {
        for y in r[1]..ny - r[1] {
            for x in r[2]..nx - r[2] {
                out[(z, y, x)] = 0;
            }
        }
    }
    // Bounding boxes [lo, hi) of every object.
    let mut boxes: BTreeMap<u64, ([usize; 3], [usize; 3])> = BTreeMap::new();
    for ((z, y, x), &l) in labels.indexed_iter() {
        if l == 0 {
            continue;
        }
        let b = boxes.entry(l).or_insert(([z, y, x], [z + 1, y + 1, x + 1]));
        for (d, c) in [z, y, x].into_iter().enumerate() {
            b.0[d] = b.0[d].min(c);
            b.1[d] = b.1[d].max(c + 1);
        }
    }
    let diam = [2 * r[0] + 1, 2 * r[1] + 1, 2 * r[2] + 1];
    let cube = (diam[0] * diam[1] * diam[2]) as f64;
    let mut table: Vec<u32> = Vec::new();
    for (&l, &(lo, hi)) in &boxes {
        // Region = box grown by the radius, clipped: every interior voxel of the object has its
        // whole cube inside it.
        let a = [0, 1, 2].map(|d| lo[d].saturating_sub(r[d]));
        let b = [0, 1, 2].map(|d| (hi[d] + r[d]).min(shape[d]));
        let e = [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
        // Summed-volume table with a zero plane in front on every axis: t[i][j][k] = count of the
        // object in region[..i][..j][..k].
        let (sy, sx) = ((e[1] + 1) * (e[2] + 1), e[2] + 1);
        table.clear();
        table.resize((e[0] + 1) * sy, 0);
        for i in 0..e[0] {
            for j in 0..e[1] {
                let mut row = 0u32;
                for k in 0..e[2] {
                    row += (labels[(a[0] + i, a[1] + j, a[2] + k)] == l) as u32;
                    let t = (i + 1) * sy + (j + 1) * sx + k + 1;
                    table[t] = row + table[t - sy] + table[t - sx] - table[t - sy - sx];
                }
            }
        }
        let at = |i: usize, j: usize, k: usize| table[i * sy + j * sx + k] as i64;
        for z in lo[0]..hi[0] {
            for y in lo[1]..hi[1] {
                for x in lo[2]..hi[2] {
                    if labels[(z, y, x)] != l || !interior([z, y, x]) {
                        continue;
                    }
                    // Cube [p - r, p + r] in region coordinates, as half-open table indices.
                    let (i0, j0, k0) = (z - r[0] - a[0], y - r[1] - a[1], x - r[2] - a[2]);
                    let (i1, j1, k1) = (i0 + diam[0], j0 + diam[1], k0 + diam[2]);
                    let count = at(i1, j1, k1) - at(i0, j1, k1) - at(i1, j0, k1) - at(i1, j1, k0)
                        + at(i0, j0, k1)
                        + at(i0, j1, k0)
                        + at(i1, j0, k0)
                        - at(i0, j0, k0);
                    out[(z, y, x)] = quantise((count as f64 / cube) as f32, &cfg.thresholds);
                }
            }
        }
    }
    Ok(out)
}

/// Voxel counts of every partition value (index = value), margin ([`EXCLUDED`]) included.
pub fn class_histogram(partitions: ArrayView3<u8>) -> Vec<usize> {
    let mut h = vec![0usize; 256];
    for &p in partitions.iter() {
        h[p as usize] += 1;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Slow reference: count the cube voxel by voxel.
    fn brute(labels: &Array3<u64>, cfg: &PartitionConfig) -> Array3<u8> {
        let mut labels = labels.clone();
        clear_dust(&mut labels, cfg.min_size);
        let (nz, ny, nx) = labels.dim();
        let r = cfg.lom_radius;
        let mut out = Array3::from_elem((nz, ny, nx), EXCLUDED);
        for z in 0..nz {
            for y in 0..ny {
                for x in 0..nx {
                    if z < r[0]
                        || z + r[0] >= nz
                        || y < r[1]
                        || y + r[1] >= ny
                        || x < r[2]
                        || x + r[2] >= nx
                    {
                        continue;
                    }
                    let l = labels[(z, y, x)];
                    if l == 0 {
                        out[(z, y, x)] = 0;
                        continue;
                    }
                    let mut n = 0;
                    for a in z - r[0]..=z + r[0] {
                        for b in y - r[1]..=y + r[1] {
                            for c in x - r[2]..=x + r[2] {
                                n += (labels[(a, b, c)] == l) as usize;
                            }
                        }
                    }
                    let vol = ((2 * r[0] + 1) * (2 * r[1] + 1) * (2 * r[2] + 1)) as f64;
                    out[(z, y, x)] = quantise((n as f64 / vol) as f32, &cfg.thresholds);
                }
            }
        }
        out
    }

    #[test]
    fn hand_computed_case() {
        // 3x3x4 volume, radius 1: interior voxels are (1,1,1) and (1,1,2).
        // Labels: x = 0 -> 1, x = 1 -> 2, x = 2,3 -> 3.
        // (1,1,1) has label 2: its cube x in 0..=2 holds 9 voxels of label 2 -> 9/27 = 0.333:
        //   first threshold above it is 0.4 (index 6) -> class 7.
        // (1,1,2) has label 3: cube x in 1..=3 holds 18 voxels of label 3 -> 0.667 -> 0.7 (index 9)
        //   -> class 10.
        let labels = Array3::from_shape_fn((3, 3, 4), |(_, _, x)| match x {
            0 => 1,
            1 => 2,
            _ => 3,
        });
        let cfg = PartitionConfig {
            lom_radius: [1, 1, 1],
            min_size: 0,
            ..Default::default()
        };
        let p = compute_partitions(labels.view(), &cfg).unwrap();
        assert_eq!(p[(1, 1, 1)], 7);
        assert_eq!(p[(1, 1, 2)], 10);
        assert_eq!(p.iter().filter(|&&v| v == EXCLUDED).count(), 36 - 2);
        // With min_size 10, label 1 (9 voxels) is dust; label 2 (9 voxels) too: (1,1,1) becomes 0.
        let cfg = PartitionConfig {
            min_size: 10,
            ..cfg
        };
        let p = compute_partitions(labels.view(), &cfg).unwrap();
        assert_eq!(p[(1, 1, 1)], 0);
        assert_eq!(p[(1, 1, 2)], 10);
    }

    #[test]
    fn top_class_and_thresholds() {
        assert_eq!(quantise(0.0, &DEFAULT_THRESHOLDS), 1);
        assert_eq!(quantise(0.025, &DEFAULT_THRESHOLDS), 2);
        assert_eq!(quantise(0.95, &DEFAULT_THRESHOLDS), 13);
        assert_eq!(quantise(1.0, &DEFAULT_THRESHOLDS), 13);
        let cfg = PartitionConfig {
            thresholds: vec![0.5, 0.2],
            ..Default::default()
        };
        assert!(compute_partitions(Array3::zeros((3, 3, 3)).view(), &cfg).is_err());
    }

    #[test]
    fn matches_brute_force_on_random_blocks() {
        let mut rng = Rng::new(5);
        // Blocky random labels (so fractions vary) with an anisotropic radius.
        let labels = Array3::from_shape_fn((9, 11, 13), |(z, y, x)| {
            ((z / 3) * 7 + (y / 4) * 3 + (x / 5)) as u64 % 5
        });
        let mut labels = labels;
        for _ in 0..60 {
            let p = (rng.below(9), rng.below(11), rng.below(13));
            labels[p] = rng.below(6) as u64;
        }
        for (r, min_size) in [
            ([1, 2, 3], 0),
            ([2, 1, 1], 30),
            ([0, 0, 0], 0),
            ([4, 5, 6], 0),
        ] {
            let cfg = PartitionConfig {
                lom_radius: r,
                min_size,
                ..Default::default()
            };
            let fast = compute_partitions(labels.view(), &cfg).unwrap();
            assert_eq!(
                fast,
                brute(&labels, &cfg),
                "radius {r:?} min_size {min_size}"
            );
        }
    }

    #[test]
    fn dust_and_histogram() {
        let mut labels = Array3::from_shape_fn((2, 2, 5), |(_, _, x)| if x < 4 { 1 } else { 2 });
        assert_eq!(object_sizes(labels.view()).get(&2), Some(&4));
        assert_eq!(clear_dust(&mut labels, 5), 1);
        assert_eq!(labels.iter().filter(|&&l| l == 0).count(), 4);
        let h = class_histogram(Array3::from_elem((2, 2, 2), 3u8).view());
        assert_eq!(h[3], 8);
    }
}
