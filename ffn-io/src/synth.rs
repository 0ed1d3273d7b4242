//! Synthetic labelled volumes on disk (`ffn synth`): [`ffn_core::synth`]'s branching neurites
//! written as an 8-bit image and a label volume, for tests, examples and demos that must not
//! depend on downloaded data.

use std::path::Path;

use anyhow::Result;
use ffn_core::synth::{SynthConfig, generate};

use crate::VolumeSpec;

/// Generates the volume `cfg` describes and writes it to `file` as the datasets `image` (uint8)
/// and `labels`; returns their specs (other datasets of the file are kept). `file` is an HDF5
/// file, a Zarr store (`*.zarr`: the datasets are arrays in it) or a folder named
/// `precomputed://DIR` (the datasets are precomputed volumes `DIR/image` and `DIR/labels`).
pub fn write_synthetic(
    file: &Path,
    image: &str,
    labels: &str,
    cfg: &SynthConfig,
) -> Result<(VolumeSpec, VolumeSpec)> {
    let v = generate(cfg)?;
    let text = file.to_string_lossy();
    let (image, labels) = match text.strip_prefix(crate::precomputed::SPEC_PREFIX) {
        Some(dir) => (
            VolumeSpec::precomputed(Path::new(dir).join(image), ""),
            VolumeSpec::precomputed(Path::new(dir).join(labels), ""),
        ),
        None => (VolumeSpec::new(file, image), VolumeSpec::new(file, labels)),
    };
    crate::write_image_u8(&image, &v.image)?;
    crate::write_labels(&labels, &v.labels)?;
    Ok((image, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_generated_image_and_labels() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.h5");
        let cfg = SynthConfig {
            shape: [16, 20, 24],
            neurites: 3,
            ..SynthConfig::default()
        };
        let (image, labels) = write_synthetic(&file, "im", "lab", &cfg).unwrap();
        let v = generate(&cfg).unwrap();
        assert_eq!(crate::read_image_u8(&image).unwrap(), v.image);
        assert_eq!(crate::read_labels(&labels).unwrap(), v.labels);
        let ng = dir.path().join("ng");
        let (image, labels) = write_synthetic(
            Path::new(&format!("precomputed://{}", ng.display())),
            "im",
            "lab",
            &cfg,
        )
        .unwrap();
        assert_eq!(image, VolumeSpec::precomputed(ng.join("im"), ""));
        assert_eq!(crate::read_image_u8(&image).unwrap(), v.image);
        assert_eq!(crate::read_labels(&labels).unwrap(), v.labels);
        let bad = SynthConfig { neurites: 0, ..cfg };
        assert!(write_synthetic(&file, "im2", "lab2", &bad).is_err());
    }
}
