//! The benchmark's global allocator: the system allocator, plus, only while a measurement
//! asks for it, a count of the heap bytes live, so a benchmark can tell how much memory some
//! data takes once deserialized. Off, it costs one relaxed atomic load per call.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// The system allocator with an optional live-bytes count.
pub struct CountingAlloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);
/// One measurement at a time.
static MEASURING: Mutex<()> = Mutex::new(());

/// What glibc's malloc takes for a request of `size` bytes: 8 bytes of header, rounded up to
/// 16, at least 32.
fn chunk(size: usize) -> i64 {
    (size.saturating_add(8 + 15) & !15).max(32) as i64
}

// SAFETY: every call is passed on to `System` unchanged; the counting only reads the layouts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(chunk(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(chunk(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
        }
        // SAFETY: as in `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(chunk(new_size) - chunk(layout.size()), Ordering::Relaxed);
        }
        p
    }
}

/// Runs `make` and returns its value with the heap bytes (in malloc chunks) that were
/// allocated during the call and are still live at its end: what the value holds, as long as
/// no other thread allocates or frees meanwhile (run it while the process is quiet).
pub fn retained_by<T>(make: impl FnOnce() -> T) -> (T, u64) {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let before = LIVE.load(Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let value = make();
    COUNTING.store(false, Ordering::SeqCst);
    let after = LIVE.load(Ordering::SeqCst);
    (value, (after - before).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_the_value_keeps() {
        assert_eq!(chunk(0), 32);
        assert_eq!(chunk(24), 32);
        assert_eq!(chunk(25), 48);
        // Other test threads may allocate or free meanwhile: a few tries.
        let measured: Vec<u64> = (0..10)
            .map(|_| {
                let (v, bytes) = retained_by(|| {
                    let scratch = vec![0u8; 1 << 20];
                    drop(scratch);
                    vec![1u8; 1000]
                });
                assert_eq!(v.len(), 1000);
                bytes
            })
            .collect();
        // 1000 bytes + the 8-byte header, rounded up to 16.
        assert!(measured.contains(&1008), "{measured:?}");
    }
}
