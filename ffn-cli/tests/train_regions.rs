//! `ffn train --volume-reads regions`: each example's patch is read from disk, so a run trains on
//! volumes larger than the memory it may use, with the same result, bit for bit, as a run that
//! reads its volumes whole (HDF5 and Zarr; across a resume; the image's own mean and stddev
//! streamed).

mod support;

use std::path::Path;

use ffn_core::training::coordinates::Coordinate;
use ffn_io::VolumeSpec;
use ffn_io::coords::{CoordinateFile, write_coords};
use ffn_io::region_writer::{write_image_u8_by_region, write_labels_by_region};

use support::dist::{bits, checkpoint, ffn, prepare, set, with};

/// `ffn ARGS`, which must succeed; its output.
fn ok(args: &[String]) -> support::Finished {
    let f = support::run(ffn(args), support::dist::LIMIT);
    support::ok(&f, &format!("ffn {args:?}"));
    f
}

const BY_REGION: &str = "reading the training volumes by region";

#[test]
fn reading_by_region_trains_bitwise_like_reading_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = |s: &str| dir.path().join(s).display().to_string();
    let data = prepare(dir.path());
    // The same volume as Zarr.
    let h5 = d("s.h5");
    let zarr = d("s.zarr");
    let image = ffn_io::read_image_u8(&format!("{h5}:image").parse().unwrap()).unwrap();
    let labels = ffn_io::read_labels(&format!("{h5}:labels").parse().unwrap()).unwrap();
    ffn_io::write_image_u8(&format!("{zarr}/image").parse().unwrap(), &image).unwrap();
    ffn_io::write_labels(&format!("{zarr}/labels").parse().unwrap(), &labels).unwrap();
    let train = |out: &str, steps: &str, reads: &str| {
        with(
            &data,
            &["--out", out, "--max-steps", steps, "--volume-reads", reads],
        )
    };
    let whole = d("whole");
    ok(&train(&whole, "30", "whole"));
    // By region from HDF5, stopped at step 12 and resumed (the examples in flight are read
    // again from disk); by region from Zarr in one go.
    let by_region = d("regions");
    let mut first = train(&by_region, "12", "regions");
    first.retain(|a| a != "--quiet");
    let first = ok(&first);
    assert!(first.stderr.contains(BY_REGION), "{}", first.stderr);
    ok(&with(&train(&by_region, "30", "regions"), &["--resume"]));
    let zarr_run = d("zarr-regions");
    let on_zarr = set(
        &train(&zarr_run, "30", "regions"),
        "--image",
        &format!("s:{zarr}/image"),
    );
    ok(&set(&on_zarr, "--labels", &format!("s:{zarr}/labels")));

    let reference = checkpoint(Path::new(&whole), 30);
    for run in [&by_region, &zarr_run] {
        let c = checkpoint(Path::new(run), 30);
        assert_eq!(bits(&c.params), bits(&reference.params), "weights of {run}");
        assert_eq!(c.optimizer.len(), reference.optimizer.len());
        for ((na, va), (nb, vb)) in c.optimizer.iter().zip(&reference.optimizer) {
            assert_eq!(na, nb);
            assert_eq!(bits(va), bits(vb), "buffer {na} of {run}");
        }
        assert_eq!(
            c.training_config["config"]["volumes"], reference.training_config["config"]["volumes"],
            "the streamed image mean and stddev of {run}"
        );
    }
    let stddev = &reference.training_config["config"]["volumes"][0]["stddev"];
    assert!(
        stddev
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .is_some_and(|s| s > 1.0),
        "{stddev}"
    );
    // Training moved the weights.
    let early = checkpoint(Path::new(&by_region), 12);
    assert_ne!(bits(&early.params), bits(&reference.params));
}

/// The big volume `[z, y, x]`: 18.4 M voxels; read whole for training it takes 220 MB
/// (`f32` image and `u64` labels), more than twice the address space the process may use.
const SHAPE: [usize; 3] = [224, 256, 320];
const LIMIT_BYTES: u64 = 96 << 20;

/// Blocks of 16^3 voxels, each its own object (ids from 1), the image bright inside and dark on
/// block faces.
fn block_id(z: usize, y: usize, x: usize) -> u64 {
    let n = [SHAPE[1] / 16, SHAPE[2] / 16];
    1 + ((z / 16 * n[0] + y / 16) * n[1] + x / 16) as u64
}

fn grey(z: usize, y: usize, x: usize) -> u8 {
    if [z, y, x].iter().any(|v| v % 16 == 0) {
        40
    } else {
        200
    }
}

#[test]
fn a_volume_twice_the_memory_limit_trains_by_region() {
    let whole_bytes = SHAPE.iter().product::<usize>() as u64 * 12;
    assert!(whole_bytes >= 2 * LIMIT_BYTES, "{whole_bytes}");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("big.zarr").display().to_string();
    let image: VolumeSpec = format!("{store}/image").parse().unwrap();
    let labels: VolumeSpec = format!("{store}/labels").parse().unwrap();
    let slab = |z0: usize, f: &dyn Fn(usize, usize, usize) -> u64| {
        let nz = 16.min(SHAPE[0] - z0);
        let mut v = Vec::with_capacity(nz * SHAPE[1] * SHAPE[2]);
        for z in z0..z0 + nz {
            for y in 0..SHAPE[1] {
                for x in 0..SHAPE[2] {
                    v.push(f(z, y, x));
                }
            }
        }
        (nz, v)
    };
    write_labels_by_region(
        &labels,
        SHAPE,
        block_id(SHAPE[0] - 1, SHAPE[1] - 1, SHAPE[2] - 1),
        |w| {
            for z0 in (0..SHAPE[0]).step_by(16) {
                let (nz, v) = slab(z0, &block_id);
                w.write([z0, 0, 0], [nz, SHAPE[1], SHAPE[2]], &v)?;
            }
            Ok(())
        },
    )
    .unwrap();
    write_image_u8_by_region(&image, SHAPE, |w| {
        for z0 in (0..SHAPE[0]).step_by(16) {
            let (nz, v) = slab(z0, &|z, y, x| grey(z, y, x) as u64);
            let a = ndarray::Array3::from_shape_vec(
                (nz, SHAPE[1], SHAPE[2]),
                v.into_iter().map(|g| g as u8).collect(),
            )
            .unwrap();
            w.write([z0, 0, 0], &a)?;
        }
        Ok(())
    })
    .unwrap();
    // Partitions under the limit, block by block (chosen by the memory limit), equal to those of
    // the whole volume computed here without one.
    let parts = format!("{store}/af");
    let args = [
        "partitions",
        "--labels",
        &labels.to_string(),
        "--out",
        &parts,
        "--lom-radius",
        "6",
        "--min-size",
        "100",
    ];
    let f = support::run(
        support::ffn_with_address_limit(&args, LIMIT_BYTES),
        support::dist::LIMIT,
    );
    support::ok(&f, "ffn partitions under the memory limit");
    let cfg = ffn_core::training::partitions::PartitionConfig {
        lom_radius: [6, 6, 6],
        min_size: 100,
        ..Default::default()
    };
    let whole = ffn_core::training::partitions::compute_partitions(
        ffn_io::read_labels(&labels).unwrap().view(),
        &cfg,
    )
    .unwrap();
    assert_eq!(
        ffn_io::read_image_u8(&parts.parse().unwrap()).unwrap(),
        whole
    );
    // Coordinates spread over the whole volume (block centres), away from the faces.
    let coords: Vec<Coordinate> = (0..64u32)
        .map(|i| Coordinate {
            volume: 0,
            zyx: [
                8 + 16 * (1 + i % 12),
                8 + 16 * (1 + (i * 7) % 14),
                8 + 16 * (1 + (i * 5) % 18),
            ],
        })
        .collect();
    let coords_path = dir.path().join("big.coords");
    write_coords(
        &coords_path,
        &CoordinateFile {
            volumes: vec!["s".into()],
            coords,
        },
    )
    .unwrap();
    let small = tempfile::tempdir().unwrap();
    let data = prepare(small.path());
    let run = |reads: &str, out: &str| {
        let mut args = set(&data, "--image", &format!("s:{image}"));
        args = set(&args, "--labels", &format!("s:{labels}"));
        args = set(&args, "--coords", &coords_path.display().to_string());
        args.retain(|a| a != "--quiet");
        let out = dir.path().join(out).display().to_string();
        let args = with(
            &args,
            &["--out", &out, "--max-steps", "8", "--volume-reads", reads],
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let cmd = support::ffn_with_address_limit(&args, LIMIT_BYTES);
        support::run(cmd, support::dist::LIMIT)
    };
    // Whole: refused up front with an error that names the volume and the way out.
    let whole = run("whole", "whole");
    assert_eq!(whole.code, 1, "{}", whole.stderr);
    assert!(
        whole.stderr.contains("big.zarr") && whole.stderr.contains("--volume-reads regions"),
        "{}",
        whole.stderr
    );
    // Auto chooses regions under the limit, and trains.
    let auto = run("auto", "auto");
    support::ok(
        &auto,
        "ffn train --volume-reads auto under the memory limit",
    );
    assert!(auto.stderr.contains(BY_REGION), "{}", auto.stderr);
    let c = checkpoint(&dir.path().join("auto"), 8);
    assert!(c.params.iter().all(|p| p.is_finite()));
}
