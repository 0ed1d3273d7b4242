//! A FlyEM / neuroproof example volume as FIB-25 `training_sample2` ships in `data/fib25`: the
//! image as `grayscale_maps/*.png` (one slice per z) and the ground truth as `groundtruth.h5.gz`
//! (supervoxels in `stack`, mapped to bodies through `transforms`).

use std::path::Path;

use anyhow::{Result, ensure};
use ndarray::Array3;

/// The image and the body labels of a FlyEM example folder, both z,y,x and of one shape.
pub struct FlyEmSample {
    /// Grey values.
    pub image: Array3<u8>,
    /// Body ids (0 = unlabelled).
    pub labels: Array3<u64>,
}

impl FlyEmSample {
    /// Reads `dir/grayscale_maps/*.png` and `dir/groundtruth.h5.gz`; an image and ground truth of
    /// different shapes are an error naming the folder.
    pub fn read(dir: &Path) -> Result<Self> {
        let maps = dir.join("grayscale_maps");
        let slices = crate::stack::find_slices(&maps.display().to_string())?;
        let image = crate::stack::read_stack(&slices)?;
        let labels = crate::labels::read_flyem_labels(
            &dir.join("groundtruth.h5.gz"),
            "stack",
            Some("transforms"),
        )?;
        ensure!(
            image.shape() == labels.shape(),
            "{}: image of shape {:?} but ground truth of shape {:?} (z,y,x)",
            dir.display(),
            image.shape(),
            labels.shape()
        );
        Ok(Self { image, labels })
    }

    /// The volume's shape, z,y,x.
    pub fn shape(&self) -> [usize; 3] {
        let (z, y, x) = self.image.dim();
        [z, y, x]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    /// A folder of `z` PNG slices of 4 x 3 and a ground truth of shape `truth` (plain HDF5 under
    /// the `.h5.gz` name: it is recognised by its content).
    fn sample(z: usize, truth: (usize, usize, usize)) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let maps = dir.path().join("grayscale_maps");
        std::fs::create_dir(&maps).unwrap();
        for i in 0..z {
            let file = std::fs::File::create(maps.join(format!("iso.{}.png", 100 + i))).unwrap();
            let mut enc = png::Encoder::new(std::io::BufWriter::new(file), 4, 3);
            enc.set_color(png::ColorType::Grayscale);
            enc.set_depth(png::BitDepth::Eight);
            let pixels: Vec<u8> = (0..12).map(|v| (v + 10 * i) as u8).collect();
            enc.write_header()
                .unwrap()
                .write_image_data(&pixels)
                .unwrap();
        }
        let f = hdf5::File::create(dir.path().join("groundtruth.h5.gz")).unwrap();
        let stack = ndarray::Array3::from_shape_fn(truth, |(z, _, x)| ((z + x) % 3) as i32 + 1);
        f.new_dataset_builder()
            .with_data(&stack)
            .create("stack")
            .unwrap();
        let table = Array2::from_shape_vec((3, 2), vec![1, 5, 2, 6, 3, 7]).unwrap();
        f.new_dataset_builder()
            .with_data(&table)
            .create("transforms")
            .unwrap();
        dir
    }

    #[test]
    fn reads_the_slices_and_the_bodies() {
        let dir = sample(2, (2, 3, 4));
        let s = FlyEmSample::read(dir.path()).unwrap();
        assert_eq!(s.shape(), [2, 3, 4]);
        assert_eq!(s.image[[1, 2, 3]], 21);
        assert_eq!(s.labels[[1, 0, 1]], 7, "stack 3 is body 7");
    }

    #[test]
    fn an_image_and_truth_of_other_shapes_are_an_error_naming_the_folder() {
        let dir = sample(2, (3, 3, 4));
        let e = FlyEmSample::read(dir.path()).err().expect("shapes differ");
        let text = format!("{e:#}");
        assert!(
            text.contains(&dir.path().display().to_string())
                && text.contains("[2, 3, 4]")
                && text.contains("[3, 3, 4]"),
            "{text}"
        );
    }

    #[test]
    fn a_folder_without_the_slices_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = FlyEmSample::read(dir.path()).err().expect("no slices");
        assert!(
            format!("{e:#}").contains("grayscale_maps"),
            "the message names the folder: {e:#}"
        );
    }
}
