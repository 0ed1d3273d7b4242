//! Every command that reads or writes a volume, with each backend: HDF5 (`file.h5:name`), Zarr
//! (`store.zarr/name`) and Neuroglancer precomputed (`precomputed://folder`). One small pipeline
//! per backend: synth, import a PNG stack, partitions, coordinates, a short training run, infer,
//! infer-tiled (oracle), eval, consensus, view and export, all reading and writing that backend.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ffn_core::synth::{SynthConfig, generate};
use ffn_io::VolumeSpec;
use support::{FFN, ok, run};

/// Runs `ffn ARGS` in `dir`; panics with its output unless it succeeds; returns stdout.
fn ffn(dir: &Path, args: &[&str]) -> String {
    let mut c = Command::new(FFN);
    c.current_dir(dir)
        .args(args)
        .env("HDF5_USE_FILE_LOCKING", "FALSE");
    let f = run(c, Duration::from_secs(300));
    ok(&f, &format!("ffn {}", args.join(" ")));
    f.stdout
}

/// The spec of volume `name` in backend `backend`.
fn spec(backend: &str, name: &str) -> String {
    match backend {
        "hdf5" => format!("vols.h5:{name}"),
        "zarr" => format!("vols.zarr/{name}"),
        _ => format!("precomputed://ng/{name}"),
    }
}

fn pipeline(backend: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let v = |name: &str| spec(backend, name);
    let synth = generate(&SynthConfig {
        shape: [24, 40, 40],
        neurites: 8,
        ..SynthConfig::default()
    })
    .unwrap();
    let at = |name: &str| -> VolumeSpec {
        let s: VolumeSpec = v(name).parse().unwrap();
        VolumeSpec {
            path: d.join(&s.path),
            ..s
        }
    };
    std::fs::create_dir_all(d.join("ng")).unwrap();
    let out = match backend {
        "hdf5" => "vols.h5",
        "zarr" => "vols.zarr",
        _ => "precomputed://ng",
    };
    ffn(
        d,
        &[
            "synth",
            "--out",
            out,
            "--image-dataset",
            "raw",
            "--labels-dataset",
            "labels",
            "--shape",
            "40,40,24",
            "--neurites",
            "8",
        ],
    );
    assert_eq!(ffn_io::read_image_u8(&at("raw")).unwrap(), synth.image);
    assert_eq!(ffn_io::read_labels(&at("labels")).unwrap(), synth.labels);
    // The oracle reads label ids from a float image.
    ffn_io::write_image_f32(&at("ids"), &synth.labels.mapv(|l| l as f32)).unwrap();

    let maps =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/fib25/grayscale_maps/iso.260?.png");
    let out = ffn(
        d,
        &[
            "import",
            "stack",
            maps.to_str().unwrap(),
            "--output",
            &v("fib"),
        ],
    );
    assert!(out.contains(&format!("wrote {}", v("fib"))), "{out}");
    assert_eq!(ffn_io::dataset_shape(&at("fib")).unwrap(), [10, 250, 250]);

    ffn(
        d,
        &[
            "partitions",
            "--labels",
            &v("labels"),
            "--out",
            &v("af"),
            "--lom-radius",
            "6,6,6",
            "--min-size",
            "50",
        ],
    );
    let named = format!("s:{}", v("af"));
    ffn(
        d,
        &[
            "coordinates",
            "--partitions",
            &named,
            "--out",
            "train.coords",
            "--margin",
            "6,6,6",
        ],
    );
    let (image, labels) = (format!("s:{}", v("raw")), format!("s:{}", v("labels")));
    ffn(
        d,
        &[
            "train",
            "--image",
            &image,
            "--labels",
            &labels,
            "--coords",
            "train.coords",
            "--out",
            "run",
            "--depth",
            "1",
            "--features",
            "4",
            "--fov",
            "9,9,9",
            "--deltas",
            "2,2,2",
            "--batch-size",
            "1",
            "--max-steps",
            "2",
            "--quiet",
        ],
    );
    let out = ffn(
        d,
        &[
            "infer",
            "--checkpoint",
            "run",
            "--image",
            &v("raw"),
            "--out",
            &v("seg"),
            "--min-segment-size",
            "10",
            "--quiet",
        ],
    );
    assert!(!out.is_empty());
    assert_eq!(ffn_io::dataset_shape(&at("seg")).unwrap(), [24, 40, 40]);

    let (labels_v, tiled_v) = (v("ids"), v("tiled"));
    let mut tiled = vec![
        "infer-tiled",
        "--image",
        &labels_v,
        "--out",
        &tiled_v,
        "--tile-size",
        "20",
        "--tile-overlap",
        "8",
        "--tile-store",
        "tiles",
    ];
    tiled.extend(support::tiled::ORACLE);
    let out = ffn(d, &tiled);
    assert!(out.contains("merged"), "{out}");
    let eval = ffn(
        d,
        &[
            "eval",
            "--truth",
            &v("labels"),
            "--test",
            &v("tiled"),
            "--json",
        ],
    );
    let score: serde_json::Value = serde_json::from_str(eval.trim()).unwrap();
    assert!(
        score["adapted_rand_error"].as_f64().unwrap() < 0.05,
        "{backend}: {score}"
    );
    ffn(
        d,
        &["consensus", &v("tiled"), &v("labels"), "--out", &v("cons")],
    );
    assert_eq!(ffn_io::dataset_shape(&at("cons")).unwrap(), [24, 40, 40]);
    ffn(
        d,
        &[
            "view",
            &v("tiled"),
            "--image",
            &v("raw"),
            "--out",
            "slice.png",
        ],
    );
    assert!(d.join("slice.png").is_file());
    ffn(
        d,
        &[
            "export",
            "--image",
            &v("raw"),
            "--seg",
            &v("tiled"),
            "--out",
            "export",
        ],
    );
    let back =
        ffn_io::read_labels(&VolumeSpec::precomputed(d.join("export/segmentation"), "")).unwrap();
    assert_eq!(
        back,
        ffn_io::read_labels(&at("tiled")).unwrap(),
        "{backend}"
    );
}

#[test]
fn every_command_reads_and_writes_hdf5() {
    pipeline("hdf5");
}

#[test]
fn every_command_reads_and_writes_zarr() {
    pipeline("zarr");
}

#[test]
fn every_command_reads_and_writes_precomputed() {
    pipeline("precomputed");
}
