//! Bad input to the volume readers: every case is a one-line error naming the file (and dataset)
//! and saying what was expected and found. No panics.

use ffn_io::{
    IoError, VolumeSpec, check_same_shape, dataset_shape, read_image_f32, read_image_u8,
    read_labels,
};
use hdf5::File;
use ndarray::{Array2, Array3};
use std::path::Path;

/// A file with datasets of several kinds.
fn fixture(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("mixed.h5");
    let f = File::create(&path).unwrap();
    f.new_dataset_builder()
        .with_data(&Array3::<u8>::zeros((4, 5, 6)))
        .create("raw")
        .unwrap();
    f.new_dataset_builder()
        .with_data(&Array3::<u64>::ones((4, 5, 7)))
        .create("labels")
        .unwrap();
    f.new_dataset_builder()
        .with_data(&Array3::<f64>::zeros((2, 2, 2)))
        .create("f64")
        .unwrap();
    f.new_dataset_builder()
        .with_data(&Array3::<u16>::zeros((2, 2, 2)))
        .create("u16")
        .unwrap();
    f.new_dataset_builder()
        .with_data(&Array2::<u8>::zeros((5, 6)))
        .create("plane")
        .unwrap();
    let mut nan = Array3::<f32>::zeros((2, 3, 4));
    nan[[1, 2, 3]] = f32::INFINITY;
    f.new_dataset_builder()
        .with_data(&nan)
        .create("inf")
        .unwrap();
    f.create_group("g")
        .unwrap()
        .new_dataset_builder()
        .with_data(&Array3::<f32>::zeros((1, 1, 1)))
        .create("x")
        .unwrap();
    path
}

fn one_line(e: IoError) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "multi-line: {s}");
    s
}

#[test]
fn missing_file_and_missing_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let e =
        one_line(read_image_u8(&VolumeSpec::new(dir.path().join("none.h5"), "raw")).unwrap_err());
    assert!(e.ends_with("none.h5: file not found"), "{e}");
    let path = fixture(dir.path());
    let e = one_line(read_image_u8(&VolumeSpec::new(&path, "rwa")).unwrap_err());
    assert!(e.contains("mixed.h5: no dataset 'rwa'; datasets in the file: f64, g/x, inf, labels, plane, raw, u16"), "{e}");
    // A group is not a dataset either.
    let e = one_line(read_image_u8(&VolumeSpec::new(&path, "g")).unwrap_err());
    assert!(e.contains("no dataset 'g'"), "{e}");
}

#[test]
fn wrong_dtype_and_rank() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path());
    let e = one_line(read_image_u8(&VolumeSpec::new(&path, "labels")).unwrap_err());
    assert!(
        e.contains("mixed.h5:labels: wrong element type: expected an image of uint8, found uint64"),
        "{e}"
    );
    // uint16 images (16-bit EM) read as float; uint64 ids are no image.
    let u16 = read_image_f32(&VolumeSpec::new(&path, "u16")).unwrap();
    assert!(
        u16.iter()
            .all(|v| v.fract() == 0.0 && *v >= 0.0 && *v <= 65535.0)
    );
    let e = one_line(read_image_f32(&VolumeSpec::new(&path, "labels")).unwrap_err());
    assert!(
        e.contains(":labels: wrong element type")
            && e.contains("uint8, uint16, float32 or float64")
            && e.contains("found uint64"),
        "{e}"
    );
    let e = one_line(read_labels(&VolumeSpec::new(&path, "f64")).unwrap_err());
    assert!(
        e.contains(":f64: wrong element type: expected labels of an integer type")
            && e.contains("found float64"),
        "{e}"
    );
    assert_eq!(
        read_image_f32(&VolumeSpec::new(&path, "f64"))
            .unwrap()
            .shape(),
        [2, 2, 2]
    );
    let e = one_line(read_image_u8(&VolumeSpec::new(&path, "plane")).unwrap_err());
    assert!(
        e.contains(":plane: expected a 3D array (z,y,x), found 2D with shape [5, 6]"),
        "{e}"
    );
    let e = one_line(dataset_shape(&VolumeSpec::new(&path, "plane")).unwrap_err());
    assert!(e.contains("found 2D"), "{e}");
}

#[test]
fn image_and_label_shapes_differ() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path());
    let (img, lab) = (
        VolumeSpec::new(&path, "raw"),
        VolumeSpec::new(&path, "labels"),
    );
    let e = one_line(
        check_same_shape(
            &img,
            &dataset_shape(&img).unwrap(),
            &lab,
            &dataset_shape(&lab).unwrap(),
        )
        .unwrap_err(),
    );
    assert!(
        e.contains("raw has shape [4, 5, 6]") && e.contains("labels has shape [4, 5, 7]"),
        "{e}"
    );
}

#[test]
fn non_finite_float_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path());
    let e = one_line(read_image_f32(&VolumeSpec::new(&path, "inf")).unwrap_err());
    assert!(
        e.contains(":inf: non-finite value inf at (z,y,x) = [1, 2, 3]"),
        "{e}"
    );
    // A region that avoids the bad voxel reads fine.
    assert!(
        ffn_io::read_image_f32_region(&VolumeSpec::new(&path, "inf"), [0, 0, 0], [1, 3, 4]).is_ok()
    );
}

#[test]
fn truncated_and_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.path().join("cut.h5");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let r = read_image_u8(&VolumeSpec::new(&cut, "raw"));
    let e = one_line(r.unwrap_err());
    assert!(
        e.contains("cut.h5: not a readable HDF5 file") && e.contains("truncated file"),
        "{e}"
    );
    let text = dir.path().join("notes.h5");
    std::fs::write(&text, "just text, not HDF5").unwrap();
    let e = one_line(read_labels(&VolumeSpec::new(&text, "stack")).unwrap_err());
    assert!(e.contains("notes.h5: not a readable HDF5 file"), "{e}");
    // Writing into a non-HDF5 file refuses instead of clobbering it.
    let e = one_line(
        ffn_io::write_image_u8(&VolumeSpec::new(&text, "raw"), &Array3::zeros((1, 1, 1)))
            .unwrap_err(),
    );
    assert!(e.contains("notes.h5: not a readable HDF5 file"), "{e}");
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "just text, not HDF5"
    );
    let e = one_line(
        ffn_io::write_image_u8(
            &VolumeSpec::new(dir.path().join("no/dir/x.h5"), "raw"),
            &Array3::zeros((1, 1, 1)),
        )
        .unwrap_err(),
    );
    assert!(e.contains("no/dir: file not found"), "{e}");
}
