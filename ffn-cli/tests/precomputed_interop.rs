//! Neuroglancer precomputed interoperability with a reference client, Google's `tensorstore`
//! Python package: volumes it writes (uint8 raw image with a voxel offset, uint64 and uint32
//! segmentations in `compressed_segmentation`, sizes not a multiple of the chunks) are read by
//! ffn-rs with equal values, and volumes ffn-rs writes (through the library, and a segmentation
//! written tile by tile by `ffn infer-tiled`) are read by tensorstore with equal values.
//!
//! The interpreter comes from `FFN_PYTHON` (`scripts/python-interop-env.sh`); see
//! [`support::interop`].

mod support;

use std::path::Path;

use ffn_io::VolumeSpec;
use ndarray::Array3;
use support::interop::{python, run_python};

const SHAPE: (usize, usize, usize) = (21, 37, 45);

/// The image both sides compute: voxel i (C order, z,y,x) holds i mod 251.
fn image() -> Array3<u8> {
    let n = SHAPE.0 * SHAPE.1 * SHAPE.2;
    Array3::from_shape_vec(SHAPE, (0..n).map(|i| (i % 251) as u8).collect()).unwrap()
}

/// The labels both sides compute: boxes of 4 x 6 x 5 voxels with ids beyond 32 bits for `wide`.
fn labels(wide: bool) -> Array3<u64> {
    Array3::from_shape_fn(SHAPE, |(z, y, x)| {
        let id = (z / 4 * 100 + y / 6 * 10 + x / 5) as u64;
        if wide { id * 1_000_003 + (1 << 40) } else { id }
    })
}

const COMMON: &str = r#"
import sys, numpy as np, tensorstore as ts
shape = (21, 37, 45)  # z, y, x
n = shape[0] * shape[1] * shape[2]
image = (np.arange(n) % 251).astype(np.uint8).reshape(shape)
z, y, x = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
ids = (z // 4 * 100 + y // 6 * 10 + x // 5).astype(np.uint64)
wide = ids * np.uint64(1000003) + np.uint64(2**40)
root = sys.argv[1]

def xyz(a):
    return np.ascontiguousarray(a.transpose(2, 1, 0))

def open_ng(path):
    return ts.open({"driver": "neuroglancer_precomputed",
                    "kvstore": {"driver": "file", "path": path}}).result()
"#;

const WRITE: &str = r#"
def create(path, kind, dtype, encoding, offset, chunk):
    scale = {"size": [shape[2], shape[1], shape[0]], "resolution": [4, 4, 40],
             "voxel_offset": offset, "chunk_size": chunk, "encoding": encoding}
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [8, 8, 8]
    return ts.open({"driver": "neuroglancer_precomputed",
                    "kvstore": {"driver": "file", "path": root + "/" + path},
                    "multiscale_metadata": {"type": kind, "data_type": dtype, "num_channels": 1},
                    "scale_metadata": scale, "create": True}).result()

img = create("ts_image", "image", "uint8", "raw", [5, -3, 2], [16, 16, 8])
img[..., 0] = xyz(image)
seg = create("ts_seg64", "segmentation", "uint64", "compressed_segmentation", [0, 0, 0], [16, 16, 8])
seg[..., 0] = xyz(wide)
seg32 = create("ts_seg32", "segmentation", "uint32", "compressed_segmentation", [0, 0, 0], [32, 8, 8])
seg32[..., 0] = xyz(ids.astype(np.uint32))
print("tensorstore wrote", open(root + "/ts_seg64/info").read())
"#;

const READ: &str = r#"
for path, want in [("/ffn_image", image), ("/ffn_seg", wide), ("/ffn_seg32", ids), ("/tiled", None)]:
    store = open_ng(root + path)
    got = store[..., 0].read().result().transpose(2, 1, 0)
    if want is None:
        want = np.load(root + "/tiled.npy")
    assert got.shape == want.shape, (path, got.shape, want.shape)
    assert np.array_equal(got.astype(np.uint64), want.astype(np.uint64)), path + " differs"
    print("tensorstore read", path, store.dtype, got.shape)
"#;

#[test]
fn volumes_tensorstore_writes_are_read_with_equal_values() {
    let Some(python) = python("tensorstore -> ffn-rs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    eprintln!(
        "{}",
        run_python(&python, &format!("{COMMON}{WRITE}"), dir.path())
    );
    let spec = |name: &str| -> VolumeSpec {
        format!("precomputed://{}", dir.path().join(name).display())
            .parse()
            .unwrap()
    };
    assert_eq!(ffn_io::read_image_u8(&spec("ts_image")).unwrap(), image());
    assert_eq!(
        ffn_io::read_labels(&spec("ts_seg64")).unwrap(),
        labels(true)
    );
    assert_eq!(
        ffn_io::read_labels(&spec("ts_seg32")).unwrap(),
        labels(false)
    );
    assert_eq!(ffn_io::dataset_dtype(&spec("ts_seg32")).unwrap(), "uint32");
    let region = ffn_io::read_labels_region(&spec("ts_seg64"), [3, 10, 7], [15, 20, 30]).unwrap();
    assert_eq!(
        region,
        labels(true).slice(ndarray::s![3..18, 10..30, 7..37])
    );
}

#[test]
fn volumes_ffn_rs_writes_are_read_by_tensorstore_with_equal_values() {
    let Some(python) = python("ffn-rs -> tensorstore") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| VolumeSpec::precomputed(dir.path().join(name), "");
    ffn_io::write_image_u8(&at("ffn_image"), &image()).unwrap();
    ffn_io::write_labels(&at("ffn_seg"), &labels(true)).unwrap();
    ffn_io::write_labels(&at("ffn_seg32"), &labels(false)).unwrap();
    // A segmentation written tile core by tile core by the CLI, from a Zarr image of label ids.
    let truth = support::tiled::boxes([SHAPE.0, SHAPE.1, SHAPE.2], 7, 3);
    let ids = VolumeSpec::new(dir.path().join("ids.zarr"), "ids");
    ffn_io::write_image_f32(&ids, &truth.mapv(|v| v as f32)).unwrap();
    let out = at("tiled").to_string();
    let f = support::run(
        {
            let mut c = std::process::Command::new(support::FFN);
            c.args(["infer-tiled", "--image", &ids.to_string(), "--out", &out])
                .args(["--tile-size", "16", "--tile-overlap", "7"])
                .args(support::tiled::ORACLE);
            c
        },
        std::time::Duration::from_secs(300),
    );
    support::ok(&f, "ffn infer-tiled --out precomputed://");
    let tiled = ffn_io::read_labels(&at("tiled")).unwrap();
    assert_eq!(support::tiled::arand(&truth, &tiled), 0.0);
    write_npy(&dir.path().join("tiled.npy"), &tiled);
    eprintln!(
        "{}",
        run_python(&python, &format!("{COMMON}{READ}"), dir.path())
    );
}

/// A uint64 array as a `.npy` file (version 1.0, C order), for the Python side.
fn write_npy(path: &Path, v: &Array3<u64>) {
    let sh = v.shape();
    let mut header = format!(
        "{{'descr': '<u8', 'fortran_order': False, 'shape': ({}, {}, {}), }}",
        sh[0], sh[1], sh[2]
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for x in v.iter() {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}
