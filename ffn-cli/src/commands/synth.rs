//! `ffn synth`: writes a synthetic labelled volume (branching neurites, dark membranes, blur and
//! noise) to an HDF5 file, a Zarr store or precomputed volumes, for tests and demos that must not
//! depend on downloaded data.

use std::path::PathBuf;

use anyhow::Result;
use ffn_core::synth::SynthConfig;

use crate::args::parse_xyz;

/// Arguments of `ffn synth`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output: an HDF5 file (created or updated), a Zarr store `OUT.zarr`, or `precomputed://DIR`
    /// (the image and labels then go to the precomputed volumes `DIR/IMAGE_DATASET` and
    /// `DIR/LABELS_DATASET`).
    #[arg(long)]
    pub out: PathBuf,
    /// Dataset of the 8-bit image.
    #[arg(long, default_value = "image")]
    pub image_dataset: String,
    /// Dataset of the labels.
    #[arg(long, default_value = "labels")]
    pub labels_dataset: String,
    /// Volume size x,y,z.
    #[arg(long, default_value = "64,64,64")]
    pub shape: String,
    /// Number of neurites (objects).
    #[arg(long, default_value_t = 24)]
    pub neurites: usize,
    /// Smallest tube radius (voxels).
    #[arg(long, default_value_t = 3.0)]
    pub radius_min: f32,
    /// Largest tube radius (voxels).
    #[arg(long, default_value_t = 7.0)]
    pub radius_max: f32,
    /// Branching probability per walk step.
    #[arg(long, default_value_t = 0.02)]
    pub branch_prob: f32,
    /// Gaussian blur sigma (voxels).
    #[arg(long, default_value_t = 0.8)]
    pub blur: f32,
    /// Noise stddev (grey levels).
    #[arg(long, default_value_t = 12.0)]
    pub noise: f32,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl Args {
    /// The generator configuration these arguments describe.
    pub fn config(&self) -> Result<SynthConfig> {
        let shape = parse_xyz(&self.shape, "--shape")?;
        Ok(SynthConfig {
            shape,
            neurites: self.neurites,
            radius: (self.radius_min, self.radius_max),
            branch_prob: self.branch_prob,
            blur_sigma: self.blur,
            noise_stddev: self.noise,
            seed: self.seed,
            ..SynthConfig::default()
        })
    }
}

/// Runs `ffn synth`.
pub fn run(args: Args) -> Result<()> {
    let cfg = args.config()?;
    let (image, labels) =
        ffn_io::synth::write_synthetic(&args.out, &args.image_dataset, &args.labels_dataset, &cfg)?;
    println!(
        "wrote {image} (uint8) and {labels}: {}x{}x{} (x,y,z), {} neurites, seed {}",
        cfg.shape[2], cfg.shape[1], cfg.shape[0], cfg.neurites, cfg.seed
    );
    Ok(())
}
