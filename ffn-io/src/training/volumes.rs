//! The training volumes of a run: found by name, checked, normalised, and served to the trainer
//! whole from memory or region by region from disk ([`VolumeReads`]).

use anyhow::{Context, Result, bail, ensure};
use ffn_core::training::TrainingError;
use ffn_core::training::source::{InMemory, PatchSource, read_error};
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

/// How a run reads its training volumes. Training is identical, bit for bit, either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum VolumeReads {
    /// [`VolumeReads::Whole`] when the volumes take at most half the memory the process may use
    /// ([`crate::memory::memory_limit_bytes`]), else [`VolumeReads::Regions`].
    #[default]
    Auto,
    /// Each volume read into memory once (12 bytes per voxel: `f32` image, `u64` labels).
    Whole,
    /// Each example's training patch read from disk when the example starts; memory does not grow
    /// with the volumes (a volume's own mean and stddev take two streamed passes over its image).
    Regions,
}

impl VolumeReads {
    /// The name used by `--volume-reads`.
    pub fn name(self) -> &'static str {
        match self {
            VolumeReads::Auto => "auto",
            VolumeReads::Whole => "whole",
            VolumeReads::Regions => "regions",
        }
    }
}

impl std::str::FromStr for VolumeReads {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "auto" => VolumeReads::Auto,
            "whole" => VolumeReads::Whole,
            "regions" => VolumeReads::Regions,
            other => return Err(format!("expected auto, whole or regions, found {other:?}")),
        })
    }
}

/// The training data of a run: the patch source, each volume's normalisation, and how the volumes
/// are read ([`VolumeReads::Whole`] or [`VolumeReads::Regions`], never `Auto`).
pub struct TrainingData {
    /// What the trainer reads its patches from.
    pub source: Box<dyn PatchSource>,
    /// Per volume, in the coordinate file's order.
    pub normalisations: Vec<Normalisation>,
    /// The way chosen.
    pub reads: VolumeReads,
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

/// One volume of the run: its name and the specs of its image and labels.
struct Named {
    name: String,
    image: VolumeSpec,
    labels: VolumeSpec,
}

/// The image and label specs of the volumes `names`, checked to have one shape each.
fn find_volumes(opts: &TrainOptions, names: &[String]) -> Result<Vec<(Named, [usize; 3])>> {
    names
        .iter()
        .map(|name| {
            let find = |list: &[(String, VolumeSpec)], flag: &str| {
                list.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone()).with_context(|| {
                    format!(
                        "{} names volume '{name}' but no --{flag} {name}:FILE:DATASET was given (given: {})",
                        opts.coords.display(),
                        list.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                    )
                })
            };
            let (image, labels) = (find(&opts.images, "image")?, find(&opts.labels, "labels")?);
            let shape = crate::dataset_shape(&image)?;
            crate::check_same_shape(&image, &shape, &labels, &crate::dataset_shape(&labels)?)?;
            Ok((Named { name: name.clone(), image, labels }, shape))
        })
        .collect()
}

/// The memory whole volumes would take: `f32` image and `u64` labels per voxel.
fn whole_bytes(shapes: &[[usize; 3]]) -> u64 {
    shapes
        .iter()
        .map(|s| crate::memory::bytes_of(s, 12).unwrap_or(u64::MAX))
        .fold(0u64, u64::saturating_add)
}

/// Reads or opens the volumes `names` (those of the coordinate file, in its order) from the image
/// and label specs of `opts`, checks their shapes, and normalises each image with the given or its
/// own mean and stddev; whole or by region as `opts.volume_reads` says.
pub fn load_training_data(opts: &TrainOptions, names: &[String]) -> Result<TrainingData> {
    let means = per_volume(&opts.image_mean, names.len(), "image_mean (--image-mean)")?;
    let stds = per_volume(
        &opts.image_stddev,
        names.len(),
        "image_stddev (--image-stddev)",
    )?;
    let found = find_volumes(opts, names)?;
    let shapes: Vec<[usize; 3]> = found.iter().map(|(_, s)| *s).collect();
    let reads = match opts.volume_reads {
        VolumeReads::Auto if whole_bytes(&shapes) <= crate::memory::memory_limit_bytes() / 2 => {
            VolumeReads::Whole
        }
        VolumeReads::Auto => VolumeReads::Regions,
        chosen => chosen,
    };
    if reads == VolumeReads::Whole {
        let what = format!(
            "reading the training volumes whole ({}; 12 bytes per voxel)",
            found
                .iter()
                .map(|(v, _)| format!("{} and {}", v.image, v.labels))
                .collect::<Vec<_>>()
                .join(", ")
        );
        crate::memory::check_allocation(&what, Some(whole_bytes(&shapes)))
            .map_err(anyhow::Error::msg)?;
    }
    let mut whole = Vec::new();
    let mut regions = Vec::new();
    let mut normalisations = Vec::new();
    for (i, (vol, shape)) in found.into_iter().enumerate() {
        let given = (means.as_ref().map(|m| m[i]), stds.as_ref().map(|s| s[i]));
        let own = |image: Option<&ndarray::Array3<f32>>| -> Result<(f64, f64)> {
            Ok(match image {
                Some(a) => ffn_core::inference::mean_stddev(a.iter().copied()),
                None => streamed_mean_stddev(&vol.image, shape)?,
            })
        };
        let resolve = |image: Option<&ndarray::Array3<f32>>| -> Result<Normalisation> {
            let (mean, stddev) = match given {
                (Some(m), Some(s)) => (m, s),
                (m, s) => {
                    let (m0, s0) = own(image)?;
                    (m.unwrap_or(m0), s.unwrap_or(s0))
                }
            };
            ensure!(
                stddev > 0.0 && stddev.is_finite(),
                "volume '{}' ({}): image stddev must be > 0, found {stddev}",
                vol.name,
                vol.image
            );
            Ok(Normalisation {
                name: vol.name.clone(),
                mean,
                stddev,
            })
        };
        if reads == VolumeReads::Whole {
            let mut image = crate::read_image_f32(&vol.image)?;
            let labels = crate::read_labels(&vol.labels)?;
            let norm = resolve(Some(&image))?;
            image.mapv_inplace(|x| normalise(x, &norm));
            whole.push(TrainingVolume {
                name: vol.name.clone(),
                image,
                labels,
            });
            normalisations.push(norm);
        } else {
            let norm = resolve(None)?;
            regions.push(RegionVolume {
                named: vol,
                shape,
                norm: norm.clone(),
            });
            normalisations.push(norm);
        }
    }
    let source = match reads {
        VolumeReads::Whole => InMemory::new(whole)?.boxed(),
        _ => Box::new(RegionSource { volumes: regions }),
    };
    Ok(TrainingData {
        source,
        normalisations,
        reads,
    })
}

/// `(x - mean) / stddev` in `f64`, as `f32`.
fn normalise(x: f32, n: &Normalisation) -> f32 {
    ((x as f64 - n.mean) / n.stddev) as f32
}

/// The mean and stddev of an image read slab by slab (about 4 M voxels each), equal to those of
/// the whole image in memory.
fn streamed_mean_stddev(spec: &VolumeSpec, shape: [usize; 3]) -> Result<(f64, f64)> {
    ffn_core::inference::mean_stddev_in_passes(|visit| -> Result<()> {
        for (z, n) in crate::volume::z_slabs(shape, 4 << 20) {
            let part = crate::read_image_f32_region(spec, [z, 0, 0], [n, shape[1], shape[2]])?;
            part.iter().for_each(|&x| visit(x));
        }
        Ok(())
    })
    .with_context(|| format!("the image mean and stddev of {spec}"))
}

/// A training volume on disk.
#[derive(Debug)]
struct RegionVolume {
    named: Named,
    shape: [usize; 3],
    norm: Normalisation,
}

impl std::fmt::Debug for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}, {})", self.name, self.image, self.labels)
    }
}

/// Training patches read from the volumes on disk, one region per example.
#[derive(Debug)]
struct RegionSource {
    volumes: Vec<RegionVolume>,
}

impl PatchSource for RegionSource {
    fn volume_count(&self) -> usize {
        self.volumes.len()
    }

    fn name(&self, volume: usize) -> &str {
        &self.volumes[volume].named.name
    }

    fn shape(&self, volume: usize) -> [usize; 3] {
        self.volumes[volume].shape
    }

    fn read(
        &mut self,
        volume: usize,
        start: [usize; 3],
        shape: [usize; 3],
        image: &mut Vec<f32>,
        labels: &mut Vec<u64>,
    ) -> Result<(), TrainingError> {
        let v = &self.volumes[volume];
        let fail = |e: crate::IoError| read_error(&v.named.name, e);
        let raw = crate::read_image_f32_region(&v.named.image, start, shape).map_err(fail)?;
        let ids = crate::read_labels_region(&v.named.labels, start, shape).map_err(fail)?;
        image.clear();
        image.extend(raw.iter().map(|&x| normalise(x, &v.norm)));
        labels.clear();
        labels.extend(ids.iter().copied());
        Ok(())
    }
}
