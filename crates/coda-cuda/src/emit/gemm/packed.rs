//! Stores held in the accumulator registers until the pair loop ends
//! (`coda::pack_acc` / `coda::store_tile_packed`).
//!
//! A Hopper epilogue without a staged store (its full-tile outputs are
//! concatenation parts, or it keeps several partials) wrote its 16-bit
//! outputs with 4-byte pair stores from the pair loop: eight rows of 16
//! bytes per warp instruction. Each such output whose pairs cover the
//! accumulator's columns is instead rounded and packed into its pair's
//! accumulator registers once the loop has read them (two 16-bit values
//! fit one 32-bit register, so two outputs fit a pair), and stored after
//! the loop through the scratch with coalesced 16-byte stores, one output
//! at a time. The scratch stays free during the loop for the quad loads it
//! streams. On the Llama-3 backward this took the dSwiGLU GEMM from 1.55×
//! to 1.26× its bare GEMM on an H100.

use super::staging::{part_end, staging, Staging};
use super::Emitter;
use crate::emit::code::Code;
use crate::error::CodegenError;
use crate::kir::{GemmSpec, Store};

/// The stores to hold packed in the accumulators, slot by slot (at most
/// two): on the Hopper mainloop, when no store is staged (the caller's
/// condition), the stores the staged store would take on the accumulator's
/// own columns (`Staging::Identity`), also when they are a concatenation
/// part shifted by a multiple of 8 columns (so that every 16-byte chunk
/// stays aligned) of constant width.
pub(super) fn stores(em: &Emitter<'_>, spec: &GemmSpec) -> Vec<usize> {
    if !spec.config.is_sm90() {
        return Vec::new();
    }
    let packable = |s: &Store| {
        let unshifted = Store { col_offset: None, ..s.clone() };
        let shift_ok = s.col_offset.is_none_or(|o| o % crate::config::CHUNK_COLS == 0 && part_end(em, s).is_some());
        shift_ok && staging(em, spec, &unshifted) == Some(Staging::Identity)
    };
    let chosen = em.kernel.stores.iter().enumerate().filter(|(_, s)| packable(s)).map(|(i, _)| i);
    chosen.take(2).collect()
}

/// The pair loop's last statement for a packed store: its values, rounded,
/// into the pair's accumulator register `slot`.
pub(super) fn pack_line(em: &mut Emitter<'_>, slot: usize, store: &Store, vars: &[Code]) -> Result<(), CodegenError> {
    let [v0, v1] = vars else { return Err(em.internal("a packed store of one slot")) };
    let t = super::super::params::c_type(em.ir.buffers[store.buf].dtype);
    let text = format!("f.acc[i][j][{slot}] = coda::pack_acc<{t}>({v0}, {v1});");
    em.stmt(Code::of(text, [v0, v1]).reading(&["f", "i", "j"]), em.kernel.nodes[store.node].value);
    Ok(())
}

/// The store of a packed output after the loop.
pub(super) fn store_line(em: &mut Emitter<'_>, slot: usize, store: &Store) -> Result<String, CodegenError> {
    let (b, t) = (em.buf_w(store.buf), super::super::params::c_type(em.ir.buffers[store.buf].dtype));
    let (origin, cols) = match store.col_offset {
        Some(offset) => {
            let end = part_end(em, store).ok_or_else(|| em.internal("a packed part of run-time width"))?;
            let origin = if offset == 0 { "t.tile_n0".to_string() } else { format!("t.tile_n0 + {offset}") };
            (origin, end.to_string())
        }
        None => ("t.tile_n0".to_string(), format!("{b}_cols")),
    };
    let loc = em.loc(em.kernel.nodes[store.node].value);
    Ok(format!("coda::store_tile_packed<{t}, {slot}>(f, t, {b}, {b}_ld, {origin}, {cols}, smem);  // {loc}"))
}
