//! Filling a buffer chunk by chunk on several threads, deterministically:
//! what a chunk holds depends only on its index, never on the thread count.

use std::sync::{Mutex, PoisonError};

/// Calls `fill(i, chunk)` for every `chunk_len`-element chunk `i` of `out`,
/// spread over the available cores. A worker that cannot be started (or
/// fails) has its chunks filled on the calling thread.
pub(super) fn fill_chunks(out: &mut [f64], chunk_len: usize, fill: impl Fn(usize, &mut [f64]) + Sync) {
    let chunks: Vec<Mutex<&mut [f64]>> = out.chunks_mut(chunk_len.max(1)).map(Mutex::new).collect();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = cores.min(chunks.len()).max(1);
    let work = |worker: usize| {
        for (index, chunk) in chunks.iter().enumerate().skip(worker).step_by(threads) {
            let mut chunk = chunk.lock().unwrap_or_else(PoisonError::into_inner);
            fill(index, &mut chunk);
        }
    };
    if threads == 1 {
        work(0);
        return;
    }
    let work = &work;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                let spawned = std::thread::Builder::new().spawn_scoped(scope, move || work(worker));
                (worker, spawned)
            })
            .collect();
        for (worker, spawned) in workers {
            match spawned.map(|handle| handle.join()) {
                Ok(Ok(())) => {}
                _ => work(worker),
            }
        }
    });
}
