//! Which image normalisation inference uses: a value given by the caller (the command line), else
//! the request, else what the model's checkpoint records from training, else google/ffn's 128 / 33
//! — and where it came from, so that `ffn infer` and `ffn infer-tiled` can say so.

use crate::error::IoError;
use crate::model::TrainingNormalisation;

/// The chosen `(x - mean) / stddev` and a phrase naming its source.
#[derive(Clone, Debug, PartialEq)]
pub struct ChosenNormalisation {
    /// Mean subtracted.
    pub mean: f32,
    /// Standard deviation divided by.
    pub stddev: f32,
    /// Where the values came from, e.g. "from the checkpoint (the model's training volumes)".
    pub source: String,
}

/// The candidates for the normalisation, in order of precedence: `given` (mean, stddev) >
/// `request` > the checkpoint's `trained` record > 128 / 33. Mean and stddev are resolved
/// separately, as a caller may override one field only.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NormalisationChoice {
    /// Values given by the user (the command line).
    pub given: (Option<f32>, Option<f32>),
    /// Values of a google/ffn inference request.
    pub request: (Option<f32>, Option<f32>),
    /// What the model's checkpoint says about its training volumes.
    pub trained: Option<TrainingNormalisation>,
}

impl NormalisationChoice {
    /// Resolves the normalisation. `image_stats` computes the image's own mean and stddev, called
    /// only when the model was trained with per-volume statistics and nothing overrides them. A
    /// stddev that is not positive or a mean that is not finite is an error naming its source.
    pub fn resolve(
        &self,
        image_stats: impl FnOnce() -> Result<(f64, f64), IoError>,
    ) -> Result<ChosenNormalisation, IoError> {
        let (flag, request) = (self.given, self.request);
        let from_model = match self.trained {
            Some(TrainingNormalisation::Fixed { mean, stddev }) => Some((
                mean as f32,
                stddev as f32,
                "the checkpoint (the mean and stddev the model was trained with)",
            )),
            Some(TrainingNormalisation::PerVolume)
                if flag.0.or(request.0).is_none() || flag.1.or(request.1).is_none() =>
            {
                let (m, s) = image_stats()?;
                Some((
                    m as f32,
                    s as f32,
                    "this image's own statistics (the checkpoint says each training volume was normalised by its own)",
                ))
            }
            _ => None,
        };
        let pick = |f: Option<f32>, r: Option<f32>, m: Option<f32>, default: f32| match (f, r, m) {
            (Some(v), _, _) => (v, "the command line"),
            (None, Some(v), _) => (v, "the request"),
            (None, None, Some(v)) => (v, "model"),
            (None, None, None) => (default, "google/ffn's default"),
        };
        let model_source = from_model.map(|(_, _, s)| s).unwrap_or("");
        let (mean, mean_src) = pick(flag.0, request.0, from_model.map(|m| m.0), 128.0);
        let (stddev, std_src) = pick(flag.1, request.1, from_model.map(|m| m.1), 33.0);
        if !(stddev > 0.0 && stddev.is_finite()) {
            return Err(IoError::InvalidOption {
                field: "image stddev".into(),
                expected: "a positive number".into(),
                found: format!("{stddev} (from {std_src})"),
            });
        }
        if !mean.is_finite() {
            return Err(IoError::InvalidOption {
                field: "image mean".into(),
                expected: "a finite number".into(),
                found: format!("{mean} (from {mean_src})"),
            });
        }
        let name = |s: &'static str| if s == "model" { model_source } else { s };
        let source = if mean_src == std_src {
            format!("from {}", name(mean_src))
        } else {
            format!(
                "mean from {}, stddev from {}",
                name(mean_src),
                name(std_src)
            )
        };
        Ok(ChosenNormalisation {
            mean,
            stddev,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXED: Option<TrainingNormalisation> = Some(TrainingNormalisation::Fixed {
        mean: 120.0,
        stddev: 30.0,
    });

    fn choose(
        given: (Option<f32>, Option<f32>),
        request: (Option<f32>, Option<f32>),
        trained: Option<TrainingNormalisation>,
        stats: impl FnOnce() -> Result<(f64, f64), IoError>,
    ) -> Result<ChosenNormalisation, IoError> {
        NormalisationChoice {
            given,
            request,
            trained,
        }
        .resolve(stats)
    }

    fn no_stats() -> Result<(f64, f64), IoError> {
        panic!("image statistics not needed here")
    }

    #[test]
    fn flags_beat_the_request_which_beats_the_checkpoint_which_beats_the_default() {
        let c = choose((None, None), (None, None), None, no_stats).unwrap();
        assert_eq!((c.mean, c.stddev), (128.0, 33.0));
        assert!(c.source.contains("google/ffn's default"), "{}", c.source);
        let c = choose((None, None), (None, None), FIXED, no_stats).unwrap();
        assert_eq!((c.mean, c.stddev), (120.0, 30.0));
        assert!(c.source.contains("checkpoint"), "{}", c.source);
        let c = choose((None, None), (Some(100.0), Some(20.0)), FIXED, no_stats).unwrap();
        assert_eq!((c.mean, c.stddev), (100.0, 20.0));
        assert_eq!(c.source, "from the request");
        let c = choose((Some(1.0), None), (Some(100.0), None), FIXED, no_stats).unwrap();
        assert_eq!((c.mean, c.stddev), (1.0, 30.0));
        assert!(
            c.source
                .starts_with("mean from the command line, stddev from the checkpoint")
        );
    }

    #[test]
    fn per_volume_training_uses_the_images_own_statistics() {
        let per = Some(TrainingNormalisation::PerVolume);
        let c = choose((None, None), (None, None), per, || Ok((90.0, 11.0))).unwrap();
        assert_eq!((c.mean, c.stddev), (90.0, 11.0));
        assert!(c.source.contains("own statistics"), "{}", c.source);
        // Both given elsewhere: the image is not even measured.
        let c = choose((Some(5.0), Some(2.0)), (None, None), per, no_stats).unwrap();
        assert_eq!((c.mean, c.stddev), (5.0, 2.0));
    }

    #[test]
    fn a_bad_stddev_is_an_error_naming_its_source() {
        let e = choose((None, Some(0.0)), (None, None), None, no_stats).unwrap_err();
        assert!(e.to_string().contains("command line"), "{e}");
        let e = choose((None, None), (None, Some(-1.0)), None, no_stats).unwrap_err();
        assert!(e.to_string().contains("request"), "{e}");
    }
}
