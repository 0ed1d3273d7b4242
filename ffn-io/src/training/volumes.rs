//! The training volumes of a run: read, checked, normalised.

use anyhow::{Context, Result, bail, ensure};
use ffn_core::training::trainer::TrainingVolume;

use super::options::TrainOptions;
use crate::VolumeSpec;

/// The image normalisation `(x - mean) / stddev` used for one training volume.
#[derive(Clone, Debug, PartialEq)]
pub struct Normalisation {
    /// The volume's name (as in the coordinate file).
    pub name: String,
    /// Image mean.
    pub mean: f64,
    /// Image stddev.
    pub stddev: f64,
}

/// `values` (one for all volumes, or one per volume) as one value per volume.
fn per_volume(values: &Option<Vec<f64>>, n: usize, what: &str) -> Result<Option<Vec<f64>>> {
    let Some(v) = values else { return Ok(None) };
    match v.len() {
        1 => Ok(Some(vec![v[0]; n])),
        k if k == n => Ok(Some(v.clone())),
        k => bail!("{what}: expected 1 value or one per volume ({n}), found {k}"),
    }
}

/// Reads the volumes `names` (those of the coordinate file, in its order) from the image and
/// label specs of `opts`, checks their shapes, and normalises each image with the given or its own
/// mean and stddev.
pub fn load_training_volumes(
    opts: &TrainOptions,
    names: &[String],
) -> Result<(Vec<TrainingVolume>, Vec<Normalisation>)> {
    let means = per_volume(&opts.image_mean, names.len(), "image_mean (--image-mean)")?;
    let stds = per_volume(
        &opts.image_stddev,
        names.len(),
        "image_stddev (--image-stddev)",
    )?;
    let mut vols = Vec::new();
    let mut norms = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let find = |list: &[(String, VolumeSpec)], flag: &str| {
            list.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone()).with_context(|| {
                format!(
                    "{} names volume '{name}' but no --{flag} {name}:FILE:DATASET was given (given: {})",
                    opts.coords.display(),
                    list.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                )
            })
        };
        let (ispec, lspec) = (find(&opts.images, "image")?, find(&opts.labels, "labels")?);
        let mut image = crate::read_image_f32(&ispec)?;
        let labels = crate::read_labels(&lspec)?;
        crate::check_same_shape(&ispec, image.shape(), &lspec, labels.shape())?;
        let (m0, s0) = ffn_core::inference::mean_stddev(image.iter().copied());
        let mean = means.as_ref().map_or(m0, |m| m[i]);
        let stddev = stds.as_ref().map_or(s0, |s| s[i]);
        ensure!(
            stddev > 0.0 && stddev.is_finite(),
            "volume '{name}' ({ispec}): image stddev must be > 0, found {stddev}"
        );
        image.mapv_inplace(|x| ((x as f64 - mean) / stddev) as f32);
        norms.push(Normalisation {
            name: name.clone(),
            mean,
            stddev,
        });
        vols.push(TrainingVolume {
            name: name.clone(),
            image,
            labels,
        });
    }
    Ok((vols, norms))
}
