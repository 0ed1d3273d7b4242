//! `ffn partitions` on label volumes of any size: google/ffn's `compute_partitions`
//! ([`ffn_core::training::partitions`]) over the whole volume in memory, or block by block, with
//! the same result voxel for voxel.
//!
//! By block: the object sizes are counted first in one streamed pass (objects below `min_size` are
//! dust everywhere, as in the whole volume); then each block is read with a halo of the cube
//! radius (clipped at the volume's faces), its dust cleared, its partitions computed and its core
//! written into the output. Every core voxel whose cube fits in the volume has it inside the
//! block's halo, and every one whose cube does not lies within the radius of a clipped face, so it
//! is excluded exactly as in the whole volume. Memory: one block with its halo.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use ffn_core::training::partitions::{
    PartitionConfig, class_histogram, compute_partitions, object_sizes,
};
use ndarray::s;

use crate::VolumeSpec;
use crate::region_writer::write_image_u8_by_region;

/// What [`write_partitions`] computes.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionOptions {
    /// The label volume.
    pub labels: VolumeSpec,
    /// The output (uint8; 255 = margin).
    pub out: VolumeSpec,
    /// Thresholds, cube radius, minimum object size.
    pub config: PartitionConfig,
    /// Block edge `[z, y, x]` of a blockwise computation; `None`: the whole volume when it takes at
    /// most half the memory the process may use (about 20 bytes per voxel), else the largest cubes
    /// of 256, 128, 64 or 32 whose halo-grown block does.
    pub block: Option<[usize; 3]>,
}

/// Bytes per voxel of a whole-volume computation: the `u64` labels twice (read, and the dust-free
/// copy), the output and the per-object summed-volume tables.
const WHOLE_BYTES_PER_VOXEL: u64 = 20;

/// Block edges tried, largest first, when the whole volume does not fit and none was asked for.
const BLOCK_EDGES: [usize; 4] = [256, 128, 64, 32];

/// Computes the partitions of `opts.labels` and writes them to `opts.out` (whole or nothing);
/// returns the voxel count of every value (index = value, [`EXCLUDED`](ffn_core::training::partitions::EXCLUDED) included).
pub fn write_partitions(opts: &PartitionOptions) -> Result<Vec<usize>> {
    VolumeSpec::check_not_input(&opts.out, "--out", &opts.labels, "--labels")?;
    opts.config
        .validate()
        .with_context(|| format!("partitions of {}", opts.labels))?;
    let shape = crate::dataset_shape(&opts.labels)?;
    let r = opts.config.lom_radius;
    let fits = |dims: [usize; 3]| {
        crate::memory::bytes_of(&dims, WHOLE_BYTES_PER_VOXEL as usize)
            .is_some_and(|b| b <= crate::memory::memory_limit_bytes() / 2)
    };
    let block = match opts.block {
        Some(b) => b,
        None if fits(shape) => shape,
        None => BLOCK_EDGES
            .into_iter()
            .map(|e| [e; 3])
            .find(|b| fits([0, 1, 2].map(|a| b[a] + 2 * r[a])))
            .unwrap_or([BLOCK_EDGES[3]; 3]),
    };
    if block.contains(&0) {
        anyhow::bail!("block (--block-size): expected sizes >= 1, found {block:?} (z,y,x)");
    }
    if block == shape {
        let labels = crate::read_labels(&opts.labels)?;
        let parts = compute_partitions(labels.view(), &opts.config)
            .with_context(|| format!("partitions of {}", opts.labels))?;
        crate::write_image_u8(&opts.out, &parts)?;
        return Ok(class_histogram(parts.view()));
    }
    let dust = dust_ids(&opts.labels, shape, opts.config.min_size)?;
    // The dust is cleared here, with the whole volume's sizes.
    let cfg = PartitionConfig {
        min_size: 0,
        ..opts.config.clone()
    };
    let mut histogram = vec![0usize; 256];
    write_image_u8_by_region(&opts.out, shape, |w| {
        for z in (0..shape[0]).step_by(block[0]) {
            for y in (0..shape[1]).step_by(block[1]) {
                for x in (0..shape[2]).step_by(block[2]) {
                    let core = [z, y, x];
                    let end = [0, 1, 2].map(|a| (core[a] + block[a]).min(shape[a]));
                    let lo = [0, 1, 2].map(|a| core[a].saturating_sub(r[a]));
                    let hi = [0, 1, 2].map(|a| (end[a] + r[a]).min(shape[a]));
                    let size = [0, 1, 2].map(|a| hi[a] - lo[a]);
                    let mut labels = crate::read_labels_region(&opts.labels, lo, size)?;
                    labels.map_inplace(|l| {
                        if dust.contains_key(l) {
                            *l = 0;
                        }
                    });
                    let parts = compute_partitions(labels.view(), &cfg).map_err(|e| {
                        crate::IoError::InvalidOption {
                            field: format!("partitions of {}", opts.labels),
                            expected: "a valid configuration".into(),
                            found: e.to_string(),
                        }
                    })?;
                    let c = [0, 1, 2].map(|a| core[a] - lo[a]);
                    let e = [0, 1, 2].map(|a| end[a] - lo[a]);
                    let core_parts = parts
                        .slice(s![c[0]..e[0], c[1]..e[1], c[2]..e[2]])
                        .to_owned();
                    for (h, n) in histogram.iter_mut().zip(class_histogram(core_parts.view())) {
                        *h += n;
                    }
                    w.write(core, &core_parts)?;
                }
            }
        }
        Ok(())
    })?;
    Ok(histogram)
}

/// The non-zero ids of `labels` with fewer than `min_size` voxels, counted slab by slab (about 1 M
/// voxels, 8 MB, each).
fn dust_ids(labels: &VolumeSpec, shape: [usize; 3], min_size: usize) -> Result<BTreeMap<u64, ()>> {
    let mut sizes: BTreeMap<u64, usize> = BTreeMap::new();
    for (z, n) in crate::volume::z_slabs(shape, 1 << 20) {
        let part = crate::read_labels_region(labels, [z, 0, 0], [n, shape[1], shape[2]])?;
        for (id, count) in object_sizes(part.view()) {
            *sizes.entry(id).or_insert(0) += count;
        }
    }
    Ok(sizes
        .into_iter()
        .filter(|&(id, n)| id != 0 && n < min_size)
        .map(|(id, _)| (id, ()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffn_core::synth::{SynthConfig, generate};

    #[test]
    fn blocks_of_any_size_give_the_whole_volumes_partitions() {
        let dir = tempfile::tempdir().unwrap();
        let synth = generate(&SynthConfig {
            shape: [30, 34, 38],
            neurites: 14,
            seed: 4,
            ..SynthConfig::default()
        })
        .unwrap();
        let labels: VolumeSpec = format!("{}:labels", dir.path().join("v.h5").display())
            .parse()
            .unwrap();
        crate::write_labels(&labels, &synth.labels).unwrap();
        // The median object size: half the objects are dust.
        let mut sizes: Vec<usize> = object_sizes(synth.labels.view())
            .into_iter()
            .filter(|&(id, _)| id != 0)
            .map(|(_, n)| n)
            .collect();
        sizes.sort_unstable();
        let config = PartitionConfig {
            lom_radius: [3, 4, 5],
            min_size: sizes[sizes.len() / 2],
            ..PartitionConfig::default()
        };
        let run = |name: &str, block: Option<[usize; 3]>| {
            let out: VolumeSpec =
                format!("{}/p", dir.path().join(format!("{name}.zarr")).display())
                    .parse()
                    .unwrap();
            let h = write_partitions(&PartitionOptions {
                labels: labels.clone(),
                out: out.clone(),
                config: config.clone(),
                block,
            })
            .unwrap();
            (crate::read_image_u8(&out).unwrap(), h)
        };
        let (whole, hist) = run("whole", Some([30, 34, 38]));
        assert_eq!(
            whole,
            compute_partitions(synth.labels.view(), &config).unwrap()
        );
        // Dust was removed and several classes occur.
        assert!(
            hist[0] > 0 && hist.iter().filter(|&&n| n > 0).count() > 4,
            "{hist:?}"
        );
        for block in [[7, 9, 11], [16, 16, 16], [1, 34, 38], [30, 5, 38]] {
            let (parts, h) = run(&format!("b{}", block[0]), Some(block));
            assert_eq!(parts, whole, "blocks of {block:?}");
            assert_eq!(h, hist);
        }
        let e = write_partitions(&PartitionOptions {
            labels: labels.clone(),
            out: labels.clone(),
            config: config.clone(),
            block: None,
        })
        .unwrap_err();
        assert!(e.to_string().contains("--out"), "{e}");
    }
}
