//! A warm forward pass and a warm training step allocate nothing: every buffer is planned on the
//! first call for a batch shape and reused. A counting global allocator checks it, for every
//! convolution algorithm (training passes under `Bf16`, a precision of inference, compute as
//! `Winograd`). (One test in this binary, so no other test allocates meanwhile.)

use ffn_core::conv::winograd::ConvAlgorithm;
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;
use ffn_core::rng::Rng;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts allocations and reallocations, then defers to the system allocator.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds the contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    f();
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

/// With the `rayon` feature the passes run inside a two-thread pool, as `ffn` runs them (called
/// from outside a pool, rayon itself allocates now and then to queue the job).
#[test]
fn warm_forward_and_training_step_do_not_allocate() {
    #[cfg(feature = "rayon")]
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("a thread pool")
        .install(check_passes);
    #[cfg(not(feature = "rayon"))]
    check_passes();
}

fn check_passes() {
    let cfg = ModelConfig {
        depth: 3,
        features: 32,
        fov: [9, 9, 11],
        ..ModelConfig::default()
    };
    let batch = 2;
    let n = batch * cfg.fov.iter().product::<usize>();
    let mut rng = Rng::new(5);
    let image: Vec<f32> = (0..n).map(|_| rng.next_f32() - 0.5).collect();
    let seed: Vec<f32> = (0..n).map(|_| rng.next_f32() - 0.5).collect();
    let labels: Vec<f32> = (0..n).map(|_| rng.next_f32()).collect();
    let mut out = vec![0.0f32; n];
    let mut net = ConvStack3d::new(cfg, 0.05, &mut rng);
    let mut grads = vec![0.0f32; net.params().len()];
    for algorithm in [
        ConvAlgorithm::Winograd,
        ConvAlgorithm::Direct,
        ConvAlgorithm::Winograd1d,
        ConvAlgorithm::Winograd3d,
        ConvAlgorithm::Bf16,
    ] {
        net.set_conv_algorithm(algorithm);
        for _ in 0..2 {
            net.forward_backward(&image, &seed, &labels, batch, &mut out, &mut grads);
            net.forward(&image, &seed, batch, &mut out);
        }
        let forward = allocations_during(|| net.forward(&image, &seed, batch, &mut out));
        assert_eq!(forward, 0, "{algorithm:?}: a warm forward pass allocated");
        net.forward_backward(&image, &seed, &labels, batch, &mut out, &mut grads);
        let step = allocations_during(|| {
            net.forward_backward(&image, &seed, &labels, batch, &mut out, &mut grads);
        });
        assert_eq!(step, 0, "{algorithm:?}: a warm training step allocated");
    }
}
