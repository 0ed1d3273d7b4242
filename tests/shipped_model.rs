//! The model trained by ffn-rs that ships in `models/ffn-rs-fib25/` segments the held-out FIB-25
//! box as its model card says: the box x,y,z 140,30,160 of size 80^3 in `training_sample2` (z >= 150,
//! never trained on), segmented with 24 voxels of context inside z >= 150, PolicyPeaks seeds and
//! the inference settings recorded with the model (chosen on the selection boxes; google/ffn's
//! defaults otherwise), scored against the ground truth, must score what the model card reports (inference is deterministic; the AVX2 and AVX-512 kernels give the same bits, the
//! portable ones differ in rounding, hence the small tolerance). A worse model shipped, a training
//! normalisation lost, or a broken inference or scoring path fails it.

use std::path::PathBuf;

use ffn_core::network::ConvStack3d;
use ffn_io::VolumeSpec;
use ffn_io::flyem_sample::FlyEmSample;
use ffn_io::heldout::{HeldOut, context_region};

/// The model card's held-out scores of `models/ffn-rs-fib25/model.safetensors`.
const CARD_ADAPTED_RAND_ERROR: f64 = 0.416;
const CARD_UNSEGMENTED: f64 = 0.021;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn shipped_model_segments_the_held_out_fib25_box_as_its_card_says() {
    let FlyEmSample { image, labels } = FlyEmSample::read(&repo().join("data/fib25")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fib25.h5");
    let (image_spec, labels_spec) = (
        VolumeSpec::new(&file, "image"),
        VolumeSpec::new(&file, "labels"),
    );
    ffn_io::write_image_u8(&image_spec, &image).unwrap();
    ffn_io::write_labels(&labels_spec, &labels).unwrap();

    let full = [image.dim().0, image.dim().1, image.dim().2];
    let (offset, shape) = ([160, 30, 140], [80, 80, 80]);
    let context = context_region(offset, shape, 24, [150, 0, 0], full);
    let held = HeldOut::read(&image_spec, &labels_spec, (offset, shape), context).unwrap();

    let model = ffn_io::load_model(&repo().join("models/ffn-rs-fib25/model.safetensors")).unwrap();
    assert!(
        model.normalisation.is_some(),
        "the shipped checkpoint records its training normalisation"
    );
    let settings = model
        .inference_defaults
        .expect("the shipped checkpoint records the inference settings chosen for it");
    let net = ConvStack3d::from_params(model.config, model.params).unwrap();
    let scored = held
        .segment(net, model.normalisation, &settings.options(), None)
        .unwrap();
    let arand = scored.scores.adapted_rand_error;
    println!(
        "shipped model on the held-out box: {} segments, {:.1}% unsegmented, VI split {:.3} merge \
         {:.3}, adapted Rand error {:.3} ({:.0} s)",
        scored.segments,
        100.0 * scored.unsegmented,
        scored.scores.voi_split,
        scored.scores.voi_merge,
        arand,
        scored.seconds
    );
    assert!(
        arand <= CARD_ADAPTED_RAND_ERROR + 0.005 && scored.unsegmented <= CARD_UNSEGMENTED + 0.005,
        "adapted Rand error {arand:.3} (card {CARD_ADAPTED_RAND_ERROR}), unsegmented {:.1}% (card \
         {:.1}%)",
        100.0 * scored.unsegmented,
        100.0 * CARD_UNSEGMENTED
    );
}
