//! Zarr interoperability with the reference client, the `zarr` Python package: arrays it writes
//! (Zarr v3 with zstd, v3 sharded, v2 with blosc, an OME-NGFF 0.4 multiscale group) are read by
//! ffn-rs with equal values, and arrays ffn-rs writes (with OME 0.5 multiscales metadata in a
//! `.ome.zarr` store) are read by it with equal values. The CLI reads and writes Zarr like HDF5.
//!
//! The Python interpreter comes from `FFN_PYTHON` (a venv with `zarr` and `numpy`, made by
//! `scripts/python-interop-env.sh`); without it the tests say they were skipped, unless
//! `FFN_REQUIRE_INTEROP=1` (CI), where its absence fails them.

mod support;

use std::path::Path;
use std::process::Command;

use ffn_io::VolumeSpec;
use ndarray::Array3;
use support::*;

const SHAPE: (usize, usize, usize) = (7, 50, 33);

/// The image both sides compute: voxel i (C order) holds i mod 251.
fn image() -> Array3<u8> {
    let n = SHAPE.0 * SHAPE.1 * SHAPE.2;
    Array3::from_shape_vec(SHAPE, (0..n).map(|i| (i % 251) as u8).collect()).unwrap()
}

/// The labels both sides compute: voxel i holds (i * 2654435761) mod 2^40 (ids beyond 32 bits).
fn labels() -> Array3<u64> {
    let n = SHAPE.0 * SHAPE.1 * SHAPE.2;
    Array3::from_shape_vec(
        SHAPE,
        (0..n as u64)
            .map(|i| (i * 2_654_435_761) % (1 << 40))
            .collect(),
    )
    .unwrap()
}

const COMMON: &str = r#"
import sys, numpy as np, zarr
shape = (7, 50, 33)
n = shape[0] * shape[1] * shape[2]
image = (np.arange(n) % 251).astype(np.uint8).reshape(shape)
labels = ((np.arange(n, dtype=np.uint64) * np.uint64(2654435761)) % np.uint64(2**40)).reshape(shape)
root = sys.argv[1]
"#;

const WRITE: &str = r#"
import numcodecs
for fmt, store in [(3, root + "/v3.zarr"), (2, root + "/v2.zarr")]:
    g = zarr.open_group(store, mode="w", zarr_format=fmt)
    extra = {"compressors": numcodecs.Blosc(cname="lz4", clevel=5)} if fmt == 2 else {}
    a = g.create_array("raw", shape=shape, chunks=(4, 16, 16), dtype="uint8", **extra)
    a[:] = image
    b = g.create_array("seg/ids", shape=shape, chunks=(3, 20, 11), dtype="uint64", **extra)
    b[:] = labels
s = zarr.open_group(root + "/sharded.zarr", mode="w", zarr_format=3)
c = s.create_array("seg", shape=shape, chunks=(4, 10, 11), shards=(8, 20, 22), dtype="uint64")
c[:] = labels
# OME-NGFF 0.4 in Zarr v2: a multiscale group with levels "0" and "1".
o = zarr.open_group(root + "/img.ome.zarr", mode="w", zarr_format=2)
o.attrs["multiscales"] = [{"version": "0.4", "axes": [{"name": a, "type": "space"} for a in "zyx"],
    "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 1]}]},
                 {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [1, 2, 2]}]}]}]
o.create_array("0", shape=shape, chunks=(4, 16, 16), dtype="uint8")[:] = image
o.create_array("1", shape=(7, 25, 17), chunks=(4, 16, 16), dtype="uint8")[:] = image[:, ::2, ::2]
print("written:", open(root + "/v2.zarr/raw/.zarray").read().replace("\n", " "))
"#;

const READ: &str = r#"
raw = zarr.open_array(root + "/ffn.zarr/raw", mode="r")
seg = zarr.open_array(root + "/ffn.zarr/seg/ids", mode="r")
assert raw.dtype == np.uint8 and raw.shape == shape, (raw.dtype, raw.shape)
assert np.array_equal(raw[:], image), "raw differs"
assert np.array_equal(seg[:].astype(np.uint64), labels), "seg differs"
assert list(raw.metadata.dimension_names) == ["z", "y", "x"], raw.metadata.dimension_names
assert np.array_equal(raw[2:5, 40:50, 30:33], image[2:5, 40:50, 30:33])
ome = zarr.open_group(root + "/ffn.ome.zarr", mode="r")
levels = [d["path"] for d in ome.attrs["ome"]["multiscales"][0]["datasets"]]
assert levels == ["0", "1"], levels
assert np.array_equal(ome["0"][:], image), "OME level 0 differs"
print("python read", raw.dtype, seg.dtype, raw.shape, "OME levels", levels)
"#;

fn py(python: &str, script: &str, root: &Path) -> String {
    support::interop::run_python(python, &format!("{COMMON}{script}"), root)
}

#[test]
fn arrays_the_zarr_package_writes_are_read_with_equal_values() {
    let Some(python) = support::interop::python("zarr package -> ffn-rs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    eprintln!("{}", py(&python, WRITE, dir.path()));
    for store in ["v3.zarr", "v2.zarr"] {
        let raw = VolumeSpec::new(dir.path().join(store), "raw");
        let seg = VolumeSpec::new(dir.path().join(store), "seg/ids");
        assert_eq!(ffn_io::read_image_u8(&raw).unwrap(), image(), "{store}/raw");
        assert_eq!(
            ffn_io::read_labels(&seg).unwrap(),
            labels(),
            "{store}/seg/ids"
        );
        let region = ffn_io::volume::read_labels_region(&seg, [2, 17, 9], [4, 30, 20]).unwrap();
        assert_eq!(
            region,
            labels().slice(ndarray::s![2..6, 17..47, 9..29]),
            "{store}: a region across chunk borders"
        );
    }
    let sharded = VolumeSpec::new(dir.path().join("sharded.zarr"), "seg");
    assert_eq!(ffn_io::read_labels(&sharded).unwrap(), labels(), "sharded");
    // An OME-Zarr group reads as its full-resolution level; a level by path is that array.
    let ome = VolumeSpec::new(dir.path().join("img.ome.zarr"), "");
    assert_eq!(ffn_io::read_image_u8(&ome).unwrap(), image(), "OME level 0");
    let half = VolumeSpec::new(dir.path().join("img.ome.zarr"), "1");
    assert_eq!(ffn_io::dataset_shape(&half).unwrap(), [7, 25, 17]);
}

#[test]
fn arrays_ffn_rs_writes_are_read_by_the_zarr_package_with_equal_values() {
    let Some(python) = support::interop::python("ffn-rs -> zarr package") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("ffn.zarr");
    ffn_io::write_image_u8(&VolumeSpec::new(&store, "raw"), &image()).unwrap();
    ffn_io::write_labels(&VolumeSpec::new(&store, "seg/ids"), &labels()).unwrap();
    // Levels written into an OME-Zarr store are recorded in its multiscales metadata.
    let ome = dir.path().join("ffn.ome.zarr");
    let half = image().slice(ndarray::s![.., ..;2, ..;2]).to_owned();
    ffn_io::write_image_u8(&VolumeSpec::new(&ome, "1"), &half).unwrap();
    ffn_io::write_image_u8(&VolumeSpec::new(&ome, "0"), &image()).unwrap();
    assert_eq!(
        ffn_io::read_image_u8(&VolumeSpec::new(&ome, "")).unwrap(),
        image()
    );
    eprintln!("{}", py(&python, READ, dir.path()));
}

#[test]
fn the_cli_imports_into_zarr_and_evaluates_zarr_against_hdf5() {
    let dir = tempfile::tempdir().unwrap();
    let maps =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/fib25/grayscale_maps/iso.260?.png");
    let zarr = dir.path().join("fib.zarr");
    let h5 = dir.path().join("fib.h5");
    for out in [
        format!("{}/raw", zarr.display()),
        format!("{}:raw", h5.display()),
    ] {
        let f = run(
            {
                let mut c = Command::new(FFN);
                c.args(["import", "stack", maps.to_str().unwrap(), "--output", &out]);
                c
            },
            std::time::Duration::from_secs(120),
        );
        ok(&f, &format!("ffn import stack --output {out}"));
        assert!(f.stdout.contains(&format!("wrote {out}")), "{}", f.stdout);
    }
    let a = ffn_io::read_image_u8(&VolumeSpec::new(&zarr, "raw")).unwrap();
    let b = ffn_io::read_image_u8(&VolumeSpec::new(&h5, "raw")).unwrap();
    assert_eq!(a.shape(), [10, 250, 250]);
    assert_eq!(a, b);
}
