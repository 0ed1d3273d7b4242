//! Round trips of every data type and encoding, scales and offsets, missing and gzip chunks, and
//! errors that name the field.

use super::*;
use crate::volume::{
    VolumeSpec, dataset_dtype, dataset_shape, read_image_f32, read_image_u8, read_image_u8_region,
    read_labels, read_labels_region, write_image_f32, write_image_u8, write_labels,
};
use ndarray::{Array3, s};

fn ramp<T>(shape: (usize, usize, usize), f: impl Fn(usize) -> T) -> Array3<T> {
    let n = shape.0 * shape.1 * shape.2;
    Array3::from_shape_vec(shape, (0..n).map(f).collect()).unwrap()
}

#[test]
fn images_and_labels_round_trip_with_partial_edge_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let img = VolumeSpec::precomputed(dir.path().join("img"), "");
    let v = ramp((70, 9, 131), |i| (i % 251) as u8);
    write_image_u8(&img, &v).unwrap();
    assert_eq!(read_image_u8(&img).unwrap(), v);
    assert_eq!(
        read_image_u8_region(&img, [60, 2, 60], [10, 5, 71]).unwrap(),
        v.slice(s![60..70, 2..7, 60..131])
    );
    assert_eq!(dataset_shape(&img).unwrap(), [70, 9, 131]);
    let info = read_info(&img.path, None).unwrap();
    assert_eq!((info.encoding, info.key.as_str()), (Encoding::Raw, "8_8_8"));
    assert!(img.path.join("8_8_8/128-131_0-9_64-70").is_file());
    // Labels beyond 32 bits: uint64, compressed_segmentation; small ones: uint32.
    for (max, dtype) in [(1u64 << 40, "uint64"), (77, "uint32")] {
        let seg = VolumeSpec::precomputed(dir.path().join(format!("seg_{dtype}")), "");
        let ids = ramp((33, 65, 20), |i| (i as u64 / 7 * 2_654_435_761) % max);
        write_labels(&seg, &ids).unwrap();
        assert_eq!(read_labels(&seg).unwrap(), ids);
        assert_eq!(
            read_labels_region(&seg, [30, 60, 3], [3, 5, 17]).unwrap(),
            ids.slice(s![30..33, 60..65, 3..20])
        );
        assert_eq!(dataset_dtype(&seg).unwrap(), dtype);
        let info = read_info(&seg.path, None).unwrap();
        assert_eq!(info.layer, LayerType::Segmentation);
        assert_eq!(
            info.encoding,
            Encoding::CompressedSegmentation {
                block_zyx: [8, 8, 8]
            }
        );
    }
    // float32 images.
    let f = VolumeSpec::precomputed(dir.path().join("prob"), "4_4_40");
    let p = ramp((3, 4, 5), |i| i as f32 / 7.0);
    write_image_f32(&f, &p).unwrap();
    assert_eq!(read_image_f32(&f).unwrap(), p);
    assert!(f.path.join("4_4_40/0-5_0-4_0-3").is_file());
}

#[test]
fn specs_name_the_folder_and_the_scale() {
    let dir = tempfile::tempdir().unwrap();
    let s: VolumeSpec = "precomputed:///data/fib25#8_8_8".parse().unwrap();
    assert_eq!(s.format, crate::VolumeFormat::Precomputed);
    assert_eq!(
        (s.path.to_str().unwrap(), s.dataset.as_str()),
        ("/data/fib25", "8_8_8")
    );
    assert_eq!(s.to_string(), "precomputed:///data/fib25#8_8_8");
    let f: VolumeSpec = "precomputed://file:///data/x".parse().unwrap();
    assert_eq!(
        (f.path.to_str().unwrap(), f.dataset.as_str()),
        ("/data/x", "")
    );
    assert!("precomputed://".parse::<VolumeSpec>().is_err());
    // A folder holding an info file is a precomputed volume.
    let vol = dir.path().join("vol");
    write_image_u8(
        &VolumeSpec::precomputed(&vol, ""),
        &Array3::zeros((2, 2, 2)),
    )
    .unwrap();
    let found: VolumeSpec = vol.to_str().unwrap().parse().unwrap();
    assert_eq!(found, VolumeSpec::precomputed(&vol, ""));
}

/// A two-scale volume with a voxel offset, written by hand as other clients do (the second scale
/// gzip-compressed and missing a chunk).
#[test]
fn scales_offsets_gzip_and_missing_chunks_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("v");
    std::fs::create_dir_all(root.join("s0")).unwrap();
    std::fs::create_dir_all(root.join("s1")).unwrap();
    let info = r#"{"type": "image", "data_type": "uint16", "num_channels": 1, "scales": [
        {"key": "s0", "size": [4, 2, 1], "resolution": [4, 4, 40], "voxel_offset": [10, -3, 5],
         "chunk_sizes": [[2, 2, 1]], "encoding": "raw"},
        {"key": "s1", "size": [2, 1, 1], "resolution": [8, 8, 40], "voxel_offset": [5, -2, 5],
         "chunk_sizes": [[1, 1, 1]], "encoding": "raw"}]}"#;
    std::fs::write(root.join("info"), info).unwrap();
    let words = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(root.join("s0/10-12_-3--1_5-6"), words(&[1, 2, 3, 4])).unwrap();
    std::fs::write(root.join("s0/12-14_-3--1_5-6"), words(&[5, 6, 7, 8])).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &words(&[9])).unwrap();
    std::fs::write(root.join("s1/5-6_-2--1_5-6.gz"), gz.finish().unwrap()).unwrap();
    let s0 = VolumeSpec::precomputed(&root, "");
    assert_eq!(dataset_dtype(&s0).unwrap(), "uint16");
    assert_eq!(
        read_labels(&s0)
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![1, 2, 5, 6, 3, 4, 7, 8]
    );
    let s1 = VolumeSpec::precomputed(&root, "s1");
    assert_eq!(dataset_shape(&s1).unwrap(), [1, 1, 2]);
    assert_eq!(
        read_labels(&s1)
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![9, 0],
        "the missing chunk reads as zeros"
    );
    let e = read_labels(&VolumeSpec::precomputed(&root, "s9"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no scale \"s9\"") && e.contains("s0, s1"), "{e}");
    // A damaged chunk is named.
    std::fs::write(root.join("s0/10-12_-3--1_5-6"), [1u8, 2, 3]).unwrap();
    let e = read_labels(&s0).unwrap_err().to_string();
    assert!(
        e.contains("10-12_-3--1_5-6") && e.contains("expected 8 bytes, found 3"),
        "{e}"
    );
}

#[test]
fn bad_info_files_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("info");
    let base = r#"{"type": "segmentation", "data_type": "uint64", "num_channels": 1, "scales": [
        {"key": "k", "size": [4, 4, 4], "resolution": [8, 8, 8], "chunk_sizes": [[4, 4, 4]],
         "encoding": "compressed_segmentation", "compressed_segmentation_block_size": [8, 8, 8]}]}"#;
    assert!(parse_info(base, &path, None).is_ok());
    for (from, to, want) in [
        ("\"uint64\"", "\"int8\"", "field 'data_type'"),
        (
            "\"num_channels\": 1",
            "\"num_channels\": 3",
            "field 'num_channels'",
        ),
        (
            "\"encoding\": \"compressed_segmentation\"",
            "\"encoding\": \"jpeg\"",
            "field 'encoding'",
        ),
        ("\"size\": [4, 4, 4]", "\"size\": [4, 4]", "field 'size'"),
        ("[[4, 4, 4]]", "[[4, 0, 4]]", "chunk_sizes"),
        ("[[4, 4, 4]]", "[[100000, 100000, 100000]]", "chunk_sizes"),
        ("\"key\": \"k\"", "\"key\": \"../up\"", "scale key"),
        (
            "\"encoding\"",
            "\"sharding\": {\"@type\": \"neuroglancer_uint64_sharded_v1\"}, \"encoding\"",
            "sharded",
        ),
        (
            "\"size\": [4, 4, 4]",
            "\"size\": [4611686018427387904, 4, 4]",
            "size",
        ),
    ] {
        let text = base.replace(from, to);
        let e = parse_info(&text, &path, None).unwrap_err().to_string();
        assert!(e.contains(want), "{to}: {e}");
    }
    let e = parse_info(&base.replace("\"uint64\"", "\"uint8\""), &path, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("compressed_segmentation needs uint32 or uint64"),
        "{e}"
    );
}
