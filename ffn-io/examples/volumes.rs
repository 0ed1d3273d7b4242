//! Volumes from Rust in every backend: the same labels written to HDF5 (`file.h5:name`), Zarr
//! (`store.zarr/name`) and Neuroglancer precomputed (`precomputed://DIR`), one whole and one box
//! by box (`region_writer`, as `ffn infer-tiled` writes volumes larger than memory), then read
//! back whole and by region, and scored against each other slab by slab (`evaluate_volumes`);
//! then their training partitions computed whole and block by block (`partitions`, as for
//! volumes larger than memory), which agree voxel for voxel.
//!
//! `cargo run -p ffn-io --example volumes`. Fails unless every read equals what was written.
use anyhow::{Result, ensure};
use ffn_core::metrics::MetricOptions;
use ffn_core::training::partitions::PartitionConfig;
use ffn_io::partitions::{PartitionOptions, write_partitions};
use ffn_io::region_writer::write_labels_by_region;
use ffn_io::{VolumeSpec, evaluation::evaluate_volumes};
use ndarray::{Array3, s};

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let labels = Array3::from_shape_fn((20, 70, 90), |(z, y, x)| {
        (z / 5 * 1000 + y / 9 * 30 + x / 11) as u64 + 1
    });
    let root = dir.path().display();
    for spec in [
        format!("{root}/v.h5:labels"),
        format!("{root}/v.zarr/labels"),
        format!("precomputed://{root}/ng"),
    ] {
        let whole: VolumeSpec = spec.parse()?;
        ffn_io::write_labels(&whole, &labels)?;
        ensure!(
            ffn_io::read_labels(&whole)? == labels,
            "{whole}: read differs"
        );
        // The same volume written box by box (boxes not aligned to the chunks), never held whole.
        let boxed = match whole.format {
            ffn_io::VolumeFormat::Precomputed => {
                VolumeSpec::precomputed(format!("{root}/ng_boxed"), "")
            }
            _ => VolumeSpec {
                dataset: "boxed".into(),
                ..whole.clone()
            },
        };
        write_labels_by_region(&boxed, [20, 70, 90], 5000, |w| {
            for z in (0..20).step_by(7) {
                for y in (0..70).step_by(33) {
                    let n = [7.min(20 - z), 33.min(70 - y), 90];
                    let part = labels.slice(s![z..z + n[0], y..y + n[1], ..]);
                    w.write([z, y, 0], n, &part.iter().copied().collect::<Vec<_>>())?;
                }
            }
            Ok(())
        })?;
        let region = ffn_io::read_labels_region(&boxed, [3, 40, 50], [10, 30, 40])?;
        ensure!(
            region == labels.slice(s![3..13, 40..70, 50..90]),
            "{boxed}: region differs"
        );
        let score = evaluate_volumes(&whole, &boxed, None, &MetricOptions::default(), 3)?;
        ensure!(
            score.scores.adapted_rand_error == 0.0,
            "{whole} vs {boxed}: {:?}",
            score.scores
        );
        println!(
            "{whole}: {} {:?} (z,y,x); written box by box: equal, adapted Rand error 0",
            ffn_io::dataset_dtype(&whole)?,
            ffn_io::dataset_shape(&whole)?
        );
    }
    // Training partitions of the Zarr labels, whole and in blocks of 8 x 32 x 32 (z,y,x).
    let labels_spec: VolumeSpec = format!("{root}/v.zarr/labels").parse()?;
    let config = PartitionConfig {
        lom_radius: [2, 4, 5],
        min_size: 100,
        ..PartitionConfig::default()
    };
    let mut parts = Vec::new();
    for (name, block) in [("whole", None), ("blocks", Some([8, 32, 32]))] {
        let out: VolumeSpec = format!("{root}/v.zarr/af_{name}").parse()?;
        let histogram = write_partitions(&PartitionOptions {
            labels: labels_spec.clone(),
            out: out.clone(),
            config: config.clone(),
            block,
        })?;
        parts.push(ffn_io::read_image_u8(&out)?);
        let classes: Vec<(usize, usize)> = histogram
            .into_iter()
            .enumerate()
            .filter(|&(_, n)| n > 0)
            .collect();
        println!("partitions {name}: (class, voxels) {classes:?}");
    }
    ensure!(parts[0] == parts[1], "partitions by block differ");
    println!("partitions by block: equal to the whole volume's");
    Ok(())
}
