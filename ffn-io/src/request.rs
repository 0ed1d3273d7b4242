//! google/ffn inference requests: the text-protobuf `InferenceRequest` (`.pbtxt`) files that
//! google/ffn users already have.
//!
//! The parser reads the text format generically (fields `name: value` or `name { ... }`, strings
//! with C escapes, numbers, identifiers, `#` comments) and then picks the fields that matter for
//! `ffn infer`: the image volume, `image_mean` / `image_stddev`, `model_args` (JSON, with
//! `fov_size` and `deltas` in x,y,z order), `model_checkpoint_path`, `seed_policy` and
//! `seed_policy_args`, `inference_options`, `segmentation_output_dir`. Every other field is listed
//! in [`InferenceRequest::ignored`] so that the caller can say what it does not use.

use std::path::{Path, PathBuf};

use ffn_core::inference::InferenceOptions;
use ffn_core::model_spec::ModelConfig;
use serde_json::Value;

use crate::IoError;

/// A parsed text-protobuf value.
#[derive(Clone, Debug, PartialEq)]
pub enum TextValue {
    /// A quoted string (escapes resolved).
    Str(String),
    /// A number or identifier, as written.
    Word(String),
    /// A nested message: its fields in order.
    Message(Vec<(String, TextValue)>),
}

/// The fields of a google/ffn `InferenceRequest` that `ffn infer` uses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InferenceRequest {
    /// `image { hdf5: "file.h5:dataset" }`.
    pub image_hdf5: Option<String>,
    /// `image_mean`.
    pub image_mean: Option<f32>,
    /// `image_stddev`.
    pub image_stddev: Option<f32>,
    /// `model_checkpoint_path`.
    pub model_checkpoint_path: Option<String>,
    /// `model_name`, e.g. `convstack_3d.ConvStack3DFFNModel`.
    pub model_name: Option<String>,
    /// `model_args` as JSON.
    pub model_args: Option<Value>,
    /// `seed_policy`, e.g. `PolicyPeaks`.
    pub seed_policy: Option<String>,
    /// `seed_policy_args` as JSON.
    pub seed_policy_args: Option<Value>,
    /// `segmentation_output_dir`.
    pub segmentation_output_dir: Option<String>,
    /// `inference_options`, over the defaults.
    pub options: InferenceOptions,
    /// Fields present in the file that `ffn infer` does not use (dotted paths).
    pub ignored: Vec<String>,
}

impl InferenceRequest {
    /// The network architecture from `model_args` (depth, fov_size, deltas), over `base`.
    /// google/ffn writes `fov_size` and `deltas` as x,y,z; the result is z,y,x.
    pub fn model_config(&self, base: ModelConfig, path: &Path) -> Result<ModelConfig, IoError> {
        let mut cfg = base;
        let Some(args) = &self.model_args else {
            return Ok(cfg);
        };
        let err = |reason: String| IoError::Config {
            path: path.into(),
            reason,
        };
        let obj = args
            .as_object()
            .ok_or_else(|| err(format!("model_args: expected a JSON object, found {args}")))?;
        for (k, v) in obj {
            match k.as_str() {
                "depth" => {
                    cfg.depth = v.as_u64().ok_or_else(|| {
                        err(format!(
                            "model_args.depth: expected a positive integer, found {v}"
                        ))
                    })? as usize
                }
                "fov_size" | "deltas" => {
                    let a = v
                        .as_array()
                        .filter(|a| a.len() == 3 && a.iter().all(|x| x.as_u64().is_some()));
                    let a = a.ok_or_else(|| {
                        err(format!("model_args.{k}: expected three non-negative integers [x, y, z], found {v}"))
                    })?;
                    let xyz: Vec<usize> = a
                        .iter()
                        .filter_map(Value::as_u64)
                        .map(|x| x as usize)
                        .collect();
                    let zyx = [xyz[2], xyz[1], xyz[0]];
                    if k == "fov_size" {
                        cfg.fov = zyx;
                    } else {
                        cfg.deltas = zyx;
                    }
                }
                _ => {}
            }
        }
        Ok(cfg)
    }

    /// Keys of `model_args` that `ffn infer` does not use.
    pub fn ignored_model_args(&self) -> Vec<String> {
        match &self.model_args {
            Some(Value::Object(o)) => o
                .keys()
                .filter(|k| !matches!(k.as_str(), "depth" | "fov_size" | "deltas"))
                .map(|k| format!("model_args.{k}"))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Deepest nesting of messages accepted (google/ffn's requests nest 2 deep); deeper text is an
/// error instead of a stack overflow.
pub const MAX_NESTING: usize = 32;

struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
    path: &'a Path,
    depth: usize,
}

impl<'a> Lexer<'a> {
    fn err(&self, what: String) -> IoError {
        let line = 1 + self.s[..self.i.min(self.s.len())]
            .iter()
            .filter(|&&c| c == b'\n')
            .count();
        IoError::Config {
            path: self.path.into(),
            reason: format!("line {line}: {what}"),
        }
    }

    fn skip(&mut self) {
        while self.i < self.s.len() {
            match self.s[self.i] {
                b' ' | b'\t' | b'\r' | b'\n' | b',' | b';' => self.i += 1,
                b'#' => {
                    while self.i < self.s.len() && self.s[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip();
        self.s.get(self.i).copied()
    }

    fn word(&mut self) -> Option<String> {
        self.skip();
        let start = self.i;
        while self.i < self.s.len() {
            let c = self.s[self.i];
            if c.is_ascii_alphanumeric()
                || matches!(c, b'_' | b'.' | b'-' | b'+' | b'/' | b'[' | b']')
            {
                self.i += 1;
            } else {
                break;
            }
        }
        (self.i > start).then(|| String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    /// A string: one quoted literal or several adjacent ones, which concatenate as in protobuf
    /// text format (read in a loop, so that any number of them takes no stack).
    fn string(&mut self) -> Result<String, IoError> {
        let mut out = Vec::new();
        loop {
            self.literal(&mut out)?;
            if !matches!(self.peek(), Some(b'"' | b'\'')) {
                break;
            }
        }
        String::from_utf8(out).map_err(|_| self.err("string is not valid UTF-8".into()))
    }

    /// One quoted literal at the cursor, escapes resolved, appended to `out`.
    fn literal(&mut self, out: &mut Vec<u8>) -> Result<(), IoError> {
        let quote = self.s[self.i];
        self.i += 1;
        loop {
            let Some(&c) = self.s.get(self.i) else {
                return Err(self.err("unterminated string".into()));
            };
            self.i += 1;
            if c == quote {
                return Ok(());
            }
            if c == b'\n' {
                return Err(self.err("newline inside a string".into()));
            }
            if c != b'\\' {
                out.push(c);
                continue;
            }
            let Some(&e) = self.s.get(self.i) else {
                return Err(self.err("unterminated string".into()));
            };
            self.i += 1;
            match e {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                b'0'..=b'7' => {
                    let mut v = (e - b'0') as u32;
                    for _ in 0..2 {
                        match self.s.get(self.i) {
                            Some(&d @ b'0'..=b'7') => {
                                v = v * 8 + (d - b'0') as u32;
                                self.i += 1;
                            }
                            _ => break,
                        }
                    }
                    let byte = u8::try_from(v).map_err(|_| {
                        self.err(format!(
                            "octal escape \\{v:o} is beyond one byte (at most \\377)"
                        ))
                    })?;
                    out.push(byte);
                }
                other => out.push(other),
            }
        }
    }

    fn message(&mut self, close: Option<u8>) -> Result<Vec<(String, TextValue)>, IoError> {
        let mut fields = Vec::new();
        loop {
            match self.peek() {
                None if close.is_none() => return Ok(fields),
                None => return Err(self.err("unexpected end of file: a '}' is missing".into())),
                Some(c) if Some(c) == close => {
                    self.i += 1;
                    return Ok(fields);
                }
                _ => {}
            }
            let name = self.word().ok_or_else(|| {
                let c = self.s[self.i] as char;
                self.err(format!("expected a field name, found {c:?}"))
            })?;
            let mut colon = false;
            if self.peek() == Some(b':') {
                self.i += 1;
                colon = true;
            }
            let value = match self.peek() {
                Some(open @ (b'{' | b'<')) => {
                    if self.depth >= MAX_NESTING {
                        return Err(self.err(format!(
                            "field {name}: messages nested deeper than {MAX_NESTING} levels"
                        )));
                    }
                    self.i += 1;
                    self.depth += 1;
                    let close = if open == b'{' { b'}' } else { b'>' };
                    let inner = self.message(Some(close))?;
                    self.depth -= 1;
                    TextValue::Message(inner)
                }
                Some(b'"' | b'\'') if colon => TextValue::Str(self.string()?),
                _ if colon => TextValue::Word(
                    self.word()
                        .ok_or_else(|| self.err(format!("field {name}: expected a value")))?,
                ),
                _ => return Err(self.err(format!("field {name}: expected ':' or '{{'"))),
            };
            fields.push((name, value));
        }
    }
}

/// Parses protobuf text format into its fields (no schema).
pub fn parse_text_proto(text: &str, path: &Path) -> Result<Vec<(String, TextValue)>, IoError> {
    Lexer {
        s: text.as_bytes(),
        i: 0,
        path,
        depth: 0,
    }
    .message(None)
}

fn number(v: &TextValue, field: &str, path: &Path) -> Result<f64, IoError> {
    let bad = || IoError::Config {
        path: path.into(),
        reason: format!("{field}: expected a number, found {v:?}"),
    };
    match v {
        TextValue::Word(w) => {
            let w = w.trim_end_matches(['f', 'F']);
            match w.to_ascii_lowercase().as_str() {
                "inf" | "infinity" => Ok(f64::INFINITY),
                "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
                _ => w.parse::<f64>().map_err(|_| bad()),
            }
        }
        _ => Err(bad()),
    }
}

fn string(v: &TextValue, field: &str, path: &Path) -> Result<String, IoError> {
    match v {
        TextValue::Str(s) => Ok(s.clone()),
        TextValue::Word(w) => Ok(w.clone()),
        _ => Err(IoError::Config {
            path: path.into(),
            reason: format!("{field}: expected a string, found a message"),
        }),
    }
}

fn json(v: &TextValue, field: &str, path: &Path) -> Result<Value, IoError> {
    let s = string(v, field, path)?;
    serde_json::from_str(&s).map_err(|e| IoError::Config {
        path: path.into(),
        reason: format!("{field}: expected a JSON object string, found {s:?} ({e})"),
    })
}

fn message<'v>(
    v: &'v TextValue,
    field: &str,
    path: &Path,
) -> Result<&'v [(String, TextValue)], IoError> {
    match v {
        TextValue::Message(m) => Ok(m),
        _ => Err(IoError::Config {
            path: path.into(),
            reason: format!("{field}: expected a message {{ ... }}"),
        }),
    }
}

fn probability(v: &TextValue, field: &str, path: &Path) -> Result<f32, IoError> {
    let p = number(v, field, path)?;
    if !(p > 0.0 && p < 1.0) {
        return Err(IoError::Config {
            path: path.into(),
            reason: format!("{field}: expected a probability strictly between 0 and 1, found {p}"),
        });
    }
    Ok(p as f32)
}

fn count(v: &TextValue, field: &str, path: &Path) -> Result<usize, IoError> {
    let x = number(v, field, path)?;
    if !(x >= 0.0 && x.fract() == 0.0 && x < 1e15) {
        return Err(IoError::Config {
            path: path.into(),
            reason: format!("{field}: expected a non-negative integer, found {x}"),
        });
    }
    Ok(x as usize)
}

/// Reads the fields of an `InferenceRequest` from text (see the module docs); `path` names the
/// source in errors.
pub fn parse_inference_request(text: &str, path: &Path) -> Result<InferenceRequest, IoError> {
    let fields = parse_text_proto(text, path)?;
    let mut r = InferenceRequest::default();
    for (name, v) in &fields {
        match name.as_str() {
            "image" => {
                for (k, iv) in message(v, "image", path)? {
                    match k.as_str() {
                        "hdf5" => r.image_hdf5 = Some(string(iv, "image.hdf5", path)?),
                        other => r.ignored.push(format!("image.{other}")),
                    }
                }
            }
            "image_mean" => r.image_mean = Some(number(v, name, path)? as f32),
            "image_stddev" => {
                let s = number(v, name, path)?;
                if !(s > 0.0 && s.is_finite()) {
                    return Err(IoError::Config {
                        path: path.into(),
                        reason: format!("image_stddev: expected a positive number, found {s}"),
                    });
                }
                r.image_stddev = Some(s as f32);
            }
            "model_checkpoint_path" => r.model_checkpoint_path = Some(string(v, name, path)?),
            "model_name" => r.model_name = Some(string(v, name, path)?),
            "model_args" => r.model_args = Some(json(v, name, path)?),
            "seed_policy" => r.seed_policy = Some(string(v, name, path)?),
            "seed_policy_args" => r.seed_policy_args = Some(json(v, name, path)?),
            "segmentation_output_dir" => r.segmentation_output_dir = Some(string(v, name, path)?),
            "inference_options" => {
                for (k, ov) in message(v, "inference_options", path)? {
                    let f = format!("inference_options.{k}");
                    let o = &mut r.options;
                    match k.as_str() {
                        "init_activation" => o.init_activation = probability(ov, &f, path)?,
                        "pad_value" => o.pad_value = probability(ov, &f, path)?,
                        "move_threshold" => o.move_threshold = probability(ov, &f, path)?,
                        "segment_threshold" => o.segment_threshold = probability(ov, &f, path)?,
                        "min_segment_size" => o.min_segment_size = count(ov, &f, path)?,
                        "disco_seed_threshold" => {
                            o.disco_seed_threshold = number(ov, &f, path)? as f32
                        }
                        "min_boundary_dist" => {
                            for (axis, av) in message(ov, &f, path)? {
                                let fa = format!("{f}.{axis}");
                                let n = count(av, &fa, path)?;
                                match axis.as_str() {
                                    "x" => o.min_boundary_dist[2] = n,
                                    "y" => o.min_boundary_dist[1] = n,
                                    "z" => o.min_boundary_dist[0] = n,
                                    _ => r.ignored.push(fa),
                                }
                            }
                        }
                        _ => r.ignored.push(f),
                    }
                }
            }
            other => r.ignored.push(other.to_string()),
        }
    }
    let ignored_args = r.ignored_model_args();
    r.ignored.extend(ignored_args);
    Ok(r)
}

/// Reads an `InferenceRequest` file.
pub fn load_inference_request(path: &Path) -> Result<InferenceRequest, IoError> {
    let text = std::fs::read_to_string(path).map_err(|e| IoError::os(PathBuf::from(path), e))?;
    parse_inference_request(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
image {
  hdf5: "third_party/neuroproof_examples/training_sample2/grayscale_maps.h5:raw"
}
image_mean: 128
image_stddev: 33
checkpoint_interval: 1800
seed_policy: "PolicyPeaks"
model_checkpoint_path: "models/fib25/model.ckpt-27465036"
model_name: "convstack_3d.ConvStack3DFFNModel"
model_args: "{\"depth\": 12, \"fov_size\": [33, 33, 33], \"deltas\": [8, 8, 8]}"
segmentation_output_dir: "results/fib25/training2"
inference_options {
  init_activation: 0.95
  pad_value: 0.05
  move_threshold: 0.9
  min_boundary_dist { x: 1 y: 1 z: 1}
  segment_threshold: 0.6
  min_segment_size: 1000
}
"#;

    #[test]
    fn google_sample_request() {
        let p = Path::new("sample.pbtxt");
        let r = parse_inference_request(SAMPLE, p).unwrap();
        assert_eq!(
            r.image_hdf5.as_deref(),
            Some("third_party/neuroproof_examples/training_sample2/grayscale_maps.h5:raw")
        );
        assert_eq!((r.image_mean, r.image_stddev), (Some(128.0), Some(33.0)));
        assert_eq!(r.seed_policy.as_deref(), Some("PolicyPeaks"));
        assert_eq!(
            r.model_checkpoint_path.as_deref(),
            Some("models/fib25/model.ckpt-27465036")
        );
        assert_eq!(r.options, InferenceOptions::default());
        assert_eq!(r.ignored, vec!["checkpoint_interval".to_string()]);
        let cfg = r.model_config(ModelConfig::default(), p).unwrap();
        assert_eq!(
            cfg,
            ModelConfig {
                depth: 12,
                features: 32,
                fov: [33, 33, 33],
                deltas: [8, 8, 8]
            }
        );
    }

    #[test]
    fn xyz_order_options_comments_and_ignored_fields() {
        let text = r#"
# a comment
model_args: '{"depth": 3, "fov_size": [9, 7, 5], "deltas": [4, 3, 2], "batch_size": 2}'
inference_options: {
  move_threshold: 0.8, min_boundary_dist < x: 3 y: 2 z: 1 >; disco_seed_threshold: -1
  consistency_threshold: 0.5
}
seed_policy_args: "{\"step\": " "16}"
masks { channel_mask { } }
"#;
        let p = Path::new("r.pbtxt");
        let r = parse_inference_request(text, p).unwrap();
        let cfg = r.model_config(ModelConfig::default(), p).unwrap();
        assert_eq!((cfg.depth, cfg.fov, cfg.deltas), (3, [5, 7, 9], [2, 3, 4]));
        assert_eq!(r.options.move_threshold, 0.8);
        assert_eq!(r.options.min_boundary_dist, [1, 2, 3]);
        assert_eq!(r.options.disco_seed_threshold, -1.0);
        assert_eq!(r.seed_policy_args, Some(serde_json::json!({"step": 16})));
        assert_eq!(
            r.ignored,
            vec![
                "inference_options.consistency_threshold",
                "masks",
                "model_args.batch_size"
            ]
        );
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let p = Path::new("bad.pbtxt");
        let e = parse_inference_request(
            "image_mean: 1\ninference_options { move_threshold: 1.5 }",
            p,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("bad.pbtxt") && e.contains("inference_options.move_threshold"),
            "{e}"
        );
        let e = parse_inference_request("image {\n hdf5: \"x.h5:raw\"\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("'}' is missing"), "{e}");
        let e = parse_inference_request("model_args: \"{depth\"", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("model_args") && e.contains("JSON"), "{e}");
        // 60 KB of nested `a{` (a stack overflow before the limit): an error.
        let deep = "a{".repeat(30_000);
        let e = parse_inference_request(&deep, p).unwrap_err().to_string();
        assert!(e.contains("nested deeper than 32 levels"), "{e}");
        let ok = format!("{}{}", "a{".repeat(MAX_NESTING), "}".repeat(MAX_NESTING));
        assert!(parse_text_proto(&ok, p).is_ok());
        // A NaN mean parses, and choosing the normalisation refuses it, naming the request.
        let r = parse_inference_request("image_mean: nan", p).unwrap();
        let choice = crate::NormalisationChoice {
            request: (r.image_mean, r.image_stddev),
            ..Default::default()
        };
        let e = choice.resolve(|| unreachable!()).unwrap_err().to_string();
        assert!(
            e.contains("image mean") && e.contains("NaN (from the request)"),
            "{e}"
        );
        let e = parse_inference_request("image_stddev: 0", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("image_stddev"), "{e}");
        let e = parse_inference_request("seed_policy \"x\"", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("seed_policy"), "{e}");
        let e = parse_inference_request("a: \"unterminated", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unterminated"), "{e}");
        let e = parse_inference_request("model_args: '{\"fov_size\": [1, 2]}'", p).unwrap();
        assert!(
            e.model_config(ModelConfig::default(), p)
                .unwrap_err()
                .to_string()
                .contains("model_args.fov_size")
        );
    }

    /// Found while writing the `request_pbtxt` fuzz target: `\777` was silently truncated to one
    /// byte; octal escapes above `\377` are errors naming the escape.
    #[test]
    fn fuzz_octal_escapes_beyond_a_byte_are_refused() {
        let p = Path::new("o.pbtxt");
        let ok = parse_inference_request("model_name: \"a\\101\\60\"\n", p).unwrap();
        assert_eq!(ok.model_name.as_deref(), Some("aA0"));
        let e = parse_inference_request("model_name: \"\\777\"\n", p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("o.pbtxt") && e.contains("octal escape \\777"),
            "{e}"
        );
    }

    /// Found while writing the `request_pbtxt` fuzz target: every adjacent string literal was one
    /// more recursive call, so enough `"" ""...` overflowed the stack (an abort).
    #[test]
    fn fuzz_many_adjacent_strings_take_no_stack() {
        let text = format!("a: {}'x'", "\"\" ".repeat(200_000));
        let fields = parse_text_proto(&text, Path::new("r.pbtxt")).unwrap();
        assert_eq!(fields, vec![("a".to_string(), TextValue::Str("x".into()))]);
    }
}
