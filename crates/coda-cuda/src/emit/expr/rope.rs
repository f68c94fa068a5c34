//! Rotary embeddings in the statement writer: the arguments of the
//! `cg::rope_*` helpers, and the rotary frequencies, looked up in a table
//! emitted beside the kernel or computed in double.

use super::Emitter;
use crate::emit::code::Code;
use crate::emit::ops::double_lit;
use crate::kir::{NodeId, Op};
use coda_ir::{BinaryOp, RopeSpec, RopeStyle, RopeTable};

impl Emitter<'_> {
    /// The `start, end, head_dim, interleaved` arguments of the
    /// `cg::rope_*` helpers, with `rotary_dim` after `head_dim` for a
    /// partial rotary embedding (the helpers' overloads that take it).
    pub(super) fn rope_args(&mut self, spec: &RopeSpec) -> String {
        let start = self.dim_int(&spec.start);
        let end = self.dim_int(&spec.end);
        let inter = spec.style == RopeStyle::Interleaved;
        match spec.rotary_dim == spec.head_dim {
            true => format!("{start}, {end}, {}, {inter}", spec.head_dim),
            false => format!("{start}, {end}, {}, {}, {inter}", spec.head_dim, spec.rotary_dim),
        }
    }

    /// A rotary table (frequency or sign) at column `k`.
    pub(super) fn rope_table(&mut self, spec: &RopeSpec, table: RopeTable, k: &Code) -> Code {
        let args = self.rope_args(spec);
        let text = match table {
            RopeTable::Freq => format!("cg::rope_freq({k}, {args}, {})", freq_exponent(spec)),
            RopeTable::Sign => format!("cg::rope_sign({k}, {args})"),
        };
        Code::of(text, [k])
    }

    /// `(x, spec)` when `node` is `x * freq` with `freq` a rotary frequency
    /// table (possibly broadcast): the angle is then formed in double.
    pub(super) fn rope_angle(&self, node: NodeId) -> Option<(NodeId, RopeSpec)> {
        let Op::Binary(BinaryOp::Mul, a, b) = &self.kernel.nodes.get(node)?.op else { return None };
        let freq_of = |mut id: NodeId| loop {
            match &self.kernel.nodes.get(id)?.op {
                Op::Broadcast(x) => id = *x,
                Op::Rope(spec, RopeTable::Freq) => return Some(spec.clone()),
                _ => return None,
            }
        };
        match (freq_of(*b), freq_of(*a)) {
            (Some(spec), _) if self.kernel.nodes.get(*a)?.reg.is_none() => Some((*a, spec)),
            (_, Some(spec)) if self.kernel.nodes.get(*b)?.reg.is_none() => Some((*b, spec)),
            _ => None,
        }
    }

    /// The expression of the `{hi, lo}` frequency pair of column `k`: a
    /// look-up in a file-scope table of the head's `rotary_dim / 2`
    /// frequencies `base^(-2 i / rotary_dim)`, computed here in double exactly
    /// as the interpreter does and stored as float pairs with `hi + lo` the
    /// double to about 2^-48 (what `cg::reduced_angle` needs), so the
    /// epilogue looks a frequency up instead of evaluating an `exp2` or
    /// converting doubles per element; or, for a head too wide for a table
    /// of at most [`MAX_ROPE_TABLE_PAIRS`] (the emitted code would grow with
    /// the head's width), the frequency computed in double.
    pub(super) fn rope_freq_lookup(&mut self, spec: &RopeSpec, k: &str, args: &str) -> String {
        let rd = spec.rotary_dim;
        if rd / 2 > MAX_ROPE_TABLE_PAIRS {
            let partial = rd != spec.head_dim;
            let (name, rd_param, rd_arg, width) = match partial {
                true => ("coda_rope_freq2_part", " int rd,", " rd,", "rd"),
                false => ("coda_rope_freq2", "", "", "hd"),
            };
            let decl = format!(
                "// base ^ (-2 i / {width}) of column n computed in double (a table of {width} / 2 pairs would be too large)\n\
                __device__ __forceinline__ float2 {name}(int n, int start, int end, int hd,{rd_param} bool interleaved, double c) {{\n    \
                const double f = cg::rope_freq_d(n, start, end, hd,{rd_arg} interleaved, c);\n    \
                const float hi = (float)f;\n    \
                return make_float2(hi, (float)(f - (double)hi));\n}}\n"
            );
            self.globals.entry(name.to_string()).or_insert(decl);
            return format!("{name}({k}, {args}, {})", freq_exponent(spec));
        }
        let name = format!("coda_rope_freq2_{rd}_{}", spec.base.to_bits());
        if !self.globals.contains_key(&name) {
            let values: Vec<String> =
                (0..rd / 2).map(|i| float_pair_lit(spec.base.powf(-((2 * i) as f64) / rd as f64))).collect();
            let decl = format!(
                "// base {} ^ (-2 i / {rd}), i < {}, as {{hi, lo}} float pairs\n__device__ const float2 {name}[{}] = {{{}}};\n",
                double_lit(spec.base),
                rd / 2,
                rd / 2,
                values.join(", ")
            );
            self.globals.insert(name.clone(), decl);
        }
        format!("cg::rope_freq_tab({k}, {args}, {name})")
    }
}

/// The most frequency pairs a rotary table emitted beside a kernel holds
/// (32 KiB of constants, about 140 KB of source; heads are 64 to 256 wide
/// in practice). Wider heads compute their frequencies instead.
const MAX_ROPE_TABLE_PAIRS: i64 = 4096;

/// `{hi, lo}`: the float nearest `x` and the float nearest the rest, as C
/// literals with 9 significant digits (enough to read back the same float).
fn float_pair_lit(x: f64) -> String {
    let hi = x as f32;
    let lo = (x - f64::from(hi)) as f32;
    format!("{{{:.8e}f, {:.8e}f}}", hi, lo)
}

/// `-2 log2(base) / rotary_dim`: a rotary frequency is `2^(pair * this)`.
fn freq_exponent(spec: &RopeSpec) -> String {
    double_lit(-2.0 * spec.base.log2() / spec.rotary_dim as f64)
}
