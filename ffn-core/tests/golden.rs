//! Golden test: the network's logits, loss and gradients against the independent PyTorch
//! implementation (`/work/shared/peers/ffn_torch.py`, `ConvStack3D`), depth 2, 4 features, FOV 9^3,
//! batch 2, fixed weights.

use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Asserts `|a - b| <= rtol * max(|b|, floor)` element-wise. `floor` (a small fraction of the
/// tensor's largest magnitude) keeps entries that are nearly zero from demanding more than f32 gives.
fn assert_rel(what: &str, got: &[f32], want: &[f32], rtol: f32, floor_frac: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let floor = floor_frac * want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let mut worst = 0f32;
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let rel = (a - b).abs() / b.abs().max(floor);
        worst = worst.max(rel);
        assert!(
            rel <= rtol,
            "{what}[{i}]: {a} vs expected {b} (relative error {rel:e})"
        );
    }
    eprintln!("{what}: worst relative error {worst:e}");
}

#[test]
fn matches_pytorch_depth2_fov9() {
    // Expected values written by (from the repository root):
    //   ~/peer-venv/bin/python scripts/golden/make_golden.py /work/shared/peers ffn-core/tests/golden
    // (PyTorch 2.15, float64 forward/backward of ffn_torch.ConvStack3D(depth=2, features=4)).
    let params = f32s(include_bytes!("golden/params.f32"));
    let image = f32s(include_bytes!("golden/image.f32"));
    let seed = f32s(include_bytes!("golden/seed.f32"));
    let labels = f32s(include_bytes!("golden/labels.f32"));
    let want_logits = f32s(include_bytes!("golden/logits.f32"));
    let want_loss = f32s(include_bytes!("golden/loss.f32"))[0];
    let want_grads = f32s(include_bytes!("golden/grads.f32"));

    let cfg = ModelConfig {
        depth: 2,
        features: 4,
        fov: [9, 9, 9],
        deltas: [1, 1, 1],
    };
    let batch = 2;
    assert_eq!(image.len(), batch * 729);
    let mut net =
        ConvStack3d::from_params(cfg, params).expect("fixture has the model's parameter count");
    let mut logits = vec![0.0; image.len()];
    let mut grads = vec![0.0; cfg.num_params()];
    let loss = net.forward_backward(&image, &seed, &labels, batch, &mut logits, &mut grads);

    assert!(
        (loss - want_loss).abs() <= 1e-4 * want_loss.abs(),
        "loss {loss} vs expected {want_loss}"
    );
    assert_rel("logits", &logits, &want_logits, 1e-4, 1e-3);
    for spec in cfg.param_specs() {
        let r = spec.offset..spec.offset + spec.len();
        assert_rel(&spec.name, &grads[r.clone()], &want_grads[r], 1e-4, 1e-2);
    }
    // Inference gives the same logits.
    let mut out = vec![0.0; image.len()];
    net.forward(&image, &seed, batch, &mut out);
    assert_rel("forward logits", &out, &want_logits, 1e-4, 1e-3);
}
