//! google/ffn's `build_coordinates`: training locations drawn from partition volumes so that every
//! partition class is equally represented.
//!
//! Steps: drop a margin from every volume; group the remaining voxels by partition value
//! (skipping [`EXCLUDED`](super::partitions::EXCLUDED)); optionally subsample each class to at most
//! `max_per_class` (memory bound for large volumes; google/ffn has no such limit); oversample every
//! class to the size of the largest one by repeating a random permutation of it; shuffle everything.

use alloc::vec::Vec;

use ndarray::ArrayView3;

use super::partitions::EXCLUDED;
use super::{TrainingError, invalid};
use crate::rng::Rng;

/// One training location: the volume's index in the list of volumes and the voxel `[z, y, x]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Coordinate {
    /// Index into the list of volumes (names are kept by the caller / the file).
    pub volume: u32,
    /// Voxel position `[z, y, x]` in the full volume.
    pub zyx: [u32; 3],
}

impl Coordinate {
    /// The voxel `zyx` of volume number `volume`.
    pub const fn new(volume: u32, zyx: [u32; 3]) -> Self {
        Self { volume, zyx }
    }
}

/// Parameters of [`build_coordinates`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinateConfig {
    /// Voxels closer than this to a face `[z, y, x]` are skipped.
    pub margin: [usize; 3],
    /// When set, each class is first subsampled (randomly) to at most this many voxels.
    pub max_per_class: Option<usize>,
}

/// Builds the class-balanced, shuffled coordinate list.
///
/// Every class with at least one voxel ends with exactly as many coordinates as the largest
/// (possibly capped) class; within a class, every voxel appears `k` or `k + 1` times.
pub fn build_coordinates(
    partitions: &[ArrayView3<u8>],
    cfg: &CoordinateConfig,
    rng: &mut Rng,
) -> Result<Vec<Coordinate>, TrainingError> {
    if partitions.len() > u32::MAX as usize {
        return Err(invalid("volumes", "at most 2^32 volumes", partitions.len()));
    }
    if cfg.max_per_class == Some(0) {
        return Err(invalid("max_per_class", ">= 1", 0));
    }
    let m = cfg.margin;
    let mut classes: Vec<Vec<Coordinate>> = (0..256).map(|_| Vec::new()).collect();
    for (v, p) in partitions.iter().enumerate() {
        let (nz, ny, nx) = p.dim();
        if (nz.max(ny).max(nx) as u64) > u32::MAX as u64 {
            return Err(invalid("partitions", "sizes below 2^32", [nz, ny, nx]));
        }
        if nz <= 2 * m[0] || ny <= 2 * m[1] || nx <= 2 * m[2] {
            continue;
        }
        for z in m[0]..nz - m[0] {
            for y in m[1]..ny - m[1] {
                for x in m[2]..nx - m[2] {
                    let c = p[(z, y, x)];
                    if c != EXCLUDED {
                        classes[c as usize].push(Coordinate {
                            volume: v as u32,
                            zyx: [z as u32, y as u32, x as u32],
                        });
                    }
                }
            }
        }
    }
    let mut classes: Vec<Vec<Coordinate>> = classes.into_iter().filter(|c| !c.is_empty()).collect();
    for c in &mut classes {
        rng.shuffle(c);
        if let Some(cap) = cfg.max_per_class {
            c.truncate(cap);
        }
    }
    let target = classes.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(target * classes.len());
    for c in &classes {
        out.extend(c.iter().cycle().take(target).copied());
    }
    rng.shuffle(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use ndarray::Array3;

    #[test]
    fn classes_are_balanced_and_voxels_used_evenly() {
        // 1 voxel row of class 1 (10 voxels), class 2 (50), class 3 (200) inside a margin of 1
        // filled with class 9 that must not appear; 255 never appears.
        let mut p = Array3::from_elem((3, 3, 262), 9u8);
        for x in 1..261 {
            p[(1, 1, x)] = if x <= 10 {
                1
            } else if x <= 60 {
                2
            } else {
                3
            };
        }
        p[(1, 1, 5)] = EXCLUDED;
        let cfg = CoordinateConfig {
            margin: [1, 1, 1],
            max_per_class: None,
        };
        let coords = build_coordinates(&[p.view()], &cfg, &mut Rng::new(1)).unwrap();
        let mut per_class = BTreeMap::new();
        let mut per_voxel = BTreeMap::new();
        for c in &coords {
            let [z, y, x] = c.zyx.map(|v| v as usize);
            *per_class.entry(p[(z, y, x)]).or_insert(0) += 1;
            *per_voxel.entry(c.zyx).or_insert(0usize) += 1;
        }
        assert_eq!(
            per_class.into_iter().collect::<Vec<_>>(),
            [(1, 200), (2, 200), (3, 200)]
        );
        // Class 1 has 9 voxels (one excluded): 200 = 9 * 22 + 2 -> each used 22 or 23 times.
        for x in 1..=10u32 {
            let n = per_voxel.get(&[1, 1, x]).copied().unwrap_or(0);
            if x == 5 {
                assert_eq!(n, 0);
            } else {
                assert!(n == 22 || n == 23, "voxel {x}: {n}");
            }
        }
        // Class 2: 50 voxels, 4 uses each; class 3: 200 voxels, once each.
        assert!((11..=60u32).all(|x| per_voxel[&[1, 1, x]] == 4));
        assert!((61..=260u32).all(|x| per_voxel[&[1, 1, x]] == 1));
        // Shuffled: not grouped by class.
        let first: Vec<u8> = coords[..30]
            .iter()
            .map(|c| p[(1, 1, c.zyx[2] as usize)])
            .collect();
        assert!(first.iter().any(|&c| c != first[0]));
    }

    #[test]
    fn several_volumes_and_cap() {
        let a = Array3::from_elem((4, 4, 4), 1u8);
        let b = Array3::from_elem((4, 4, 4), 2u8);
        let cfg = CoordinateConfig {
            margin: [0, 0, 0],
            max_per_class: Some(10),
        };
        let coords = build_coordinates(&[a.view(), b.view()], &cfg, &mut Rng::new(2)).unwrap();
        assert_eq!(coords.len(), 20);
        assert_eq!(coords.iter().filter(|c| c.volume == 1).count(), 10);
        // Same seed, same list.
        assert_eq!(
            coords,
            build_coordinates(&[a.view(), b.view()], &cfg, &mut Rng::new(2)).unwrap()
        );
        let empty = CoordinateConfig {
            margin: [2, 2, 2],
            max_per_class: None,
        };
        assert!(
            build_coordinates(&[a.view()], &empty, &mut Rng::new(2))
                .unwrap()
                .is_empty()
        );
    }
}
