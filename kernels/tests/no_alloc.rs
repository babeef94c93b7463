//! The matmul's hot path allocates nothing per call: with its activation and output buffers
//! kept by the caller, repeated products of one shape leave the heap alone.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use specgate_kernels::{Q8Batch, QuantFormat, QuantMatrix};

/// The system allocator, counting allocations in every thread (the pool's helpers too).
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn repeated_products_allocate_nothing_per_call() {
    let (out_dim, in_dim) = (1536, 576); // the default model's FFN gate
    let bytes: Vec<u8> = (0..out_dim * in_dim / 32 * 20)
        .map(|i| (i * 37 % 251) as u8 & if i % 20 < 4 { 0x3b } else { 0xff })
        .collect();
    let m = QuantMatrix::from_ggml_bytes(QuantFormat::Q4_1, out_dim, in_dim, &bytes)
        .expect("valid matrix");
    let mut acts = Q8Batch::default();
    for rows in [1, 8, 13] {
        let xs: Vec<f32> = (0..rows * in_dim)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let mut y = vec![0.0f32; rows * out_dim];
        m.matmul_into(&xs, &mut acts, &mut y); // warm: buffers grow, the pool starts
        let want = m.matmul(&xs);
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let calls = 200;
        for _ in 0..calls {
            m.matmul_into(&xs, &mut acts, &mut y);
        }
        let allocated = ALLOCATIONS.load(Ordering::Relaxed) - before;
        // rayon's job queue takes a new block every few dozen injected jobs: a handful over
        // 200 calls, never one per call.
        assert!(
            allocated <= calls / 20,
            "{rows} rows: {allocated} allocations in {calls} calls"
        );
        assert_eq!(y, want, "{rows} rows: reused buffers change nothing");
    }
}
