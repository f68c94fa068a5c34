//! Rotary embeddings in the statement writer: the arguments of the
//! `cg::rope_*` helpers, and the rotary frequencies, looked up in a table
//! emitted beside the kernel or computed in double, and the shared table of
//! a row's rotary cosines and sines in a CTA-per-row kernel.

use super::Emitter;
use crate::emit::code::Code;
use crate::emit::ops::double_lit;
use crate::error::CodegenError;
use crate::kir::{NodeId, Op, Space};
use coda_ir::{BinaryOp, RopeSpec, RopeStyle, RopeTable, UnaryOp};

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
    /// look-up in the rotation's frequency table
    /// ([`Self::rope_freq_table`]), so the epilogue looks a frequency up
    /// instead of evaluating an `exp2` or converting doubles per element;
    /// or, for a head too wide for a table, the frequency computed in
    /// double.
    pub(super) fn rope_freq_lookup(&mut self, spec: &RopeSpec, k: &str, args: &str) -> String {
        if let Some(name) = self.rope_freq_table(spec) {
            return format!("cg::rope_freq_tab({k}, {args}, {name})");
        }
        let partial = spec.rotary_dim != spec.head_dim;
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
        format!("{name}({k}, {args}, {})", freq_exponent(spec))
    }

    /// The name of the file-scope table of a rotation's `rotary_dim / 2`
    /// frequencies `base^(-2 i / rotary_dim)`, declared on first use:
    /// computed here in double exactly as the interpreter does and stored
    /// as float pairs with `hi + lo` the double to about 2^-48 (what
    /// `cg::reduced_angle` needs). `None` for a head too wide for a table
    /// of at most [`MAX_ROPE_TABLE_PAIRS`] (the emitted code would grow
    /// with the head's width).
    fn rope_freq_table(&mut self, spec: &RopeSpec) -> Option<String> {
        let rd = spec.rotary_dim;
        if rd / 2 > MAX_ROPE_TABLE_PAIRS {
            return None;
        }
        let name = freq_table_name(spec);
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
        Some(name)
    }

    /// Fills a shared table of the cosine and sine of each rotary pair's
    /// angle at the top of a CTA-per-row kernel's row, for every rotation
    /// whose angle is a per-row input (the token's position) times the
    /// pair's frequency; [`Self::row_angle`] then reads the table. A row of
    /// Qwen3's 40 heads of 128 has 64 distinct angles, against 5,120
    /// columns that each formed and reduced an angle and took two SFU
    /// functions of it, in every pass over the row. The table holds the
    /// very values the columns computed (`cg::cos_sin_angle` is
    /// `cg::cos_angle` and `cg::sin_angle` of the same reduced angle), so
    /// the results are unchanged to the bit.
    pub(crate) fn row_angle_tables(&mut self, threads: u32) -> Result<(), CodegenError> {
        for id in 0..self.kernel.nodes.len() {
            let Op::Unary(UnaryOp::Sin | UnaryOp::Cos, angle) = self.kernel.nodes[id].op else { continue };
            let Some((x, spec)) = self.rope_angle(angle) else { continue };
            let x = self.through_broadcasts(x);
            if spec.rotary_dim / 2 > MAX_ROW_ANGLES || !self.is_row_input(x) || self.angle_table(x, &spec).is_some() {
                continue;
            }
            let Some(freq) = self.rope_freq_table(&spec) else { continue };
            let xv = self.eval(x, "m", "0")?;
            let array = self.locals.fresh("rope_cs");
            let pairs = spec.rotary_dim / 2;
            self.line(format!(
                "__shared__ float2 {array}[{pairs}];  // cos and sin of each rotary pair's angle in this row"
            ));
            let fill = format!(
                "for (int i = (int)threadIdx.x; i < {pairs}; i += {threads}) {array}[i] = cg::cos_sin_angle({xv}, {freq}[i]);"
            );
            self.line_of(Code::of(fill, [&xv]));
            self.angle_tables.push(AngleTable { x, freq, array });
        }
        if !self.angle_tables.is_empty() {
            self.line("__syncthreads();");
        }
        Ok(())
    }

    /// `cos` and `sin` of the angle `x · freq` at column `k` from a table
    /// that [`Self::row_angle_tables`] filled: a `float2` code of the pair.
    pub(super) fn row_angle(&mut self, x: NodeId, spec: &RopeSpec, k: &str, args: &str) -> Option<Code> {
        let x = self.through_broadcasts(x);
        let array = self.angle_table(x, spec)?;
        Some(Code::of(format!("cg::rope_cs_tab({k}, {args}, {array})"), [&Code::index(k)]))
    }

    /// The shared array of the angles `x · freq` of `spec`'s rotation, if
    /// the row has one.
    fn angle_table(&self, x: NodeId, spec: &RopeSpec) -> Option<String> {
        let freq = freq_table_name(spec);
        self.angle_tables.iter().find(|t| t.x == x && t.freq == freq).map(|t| t.array.clone())
    }

    /// The operand under any broadcasts.
    fn through_broadcasts(&self, mut node: NodeId) -> NodeId {
        while let Op::Broadcast(inner) = self.kernel.nodes[node].op {
            node = inner;
        }
        node
    }

    /// Whether `node` is one value per row (or one in all) computed from
    /// inputs alone: loads, constants, conversions and transposes (a
    /// `[1, M]` input read per row), so that the row evaluates it before
    /// anything else.
    fn is_row_input(&self, node: NodeId) -> bool {
        let n = &self.kernel.nodes[node];
        matches!(n.space, Space::Row | Space::Scalar) && self.is_input_only(node)
    }

    fn is_input_only(&self, node: NodeId) -> bool {
        let n = &self.kernel.nodes[node];
        n.reg.is_none()
            && match &n.op {
                Op::Load(_) | Op::Const(_) | Op::Dim(_) => true,
                Op::Cast(_, a) | Op::Broadcast(a) | Op::Transpose(a) => self.is_input_only(*a),
                _ => false,
            }
    }
}

/// A row's table of rotary cosines and sines (see
/// [`Emitter::row_angle_tables`]): the per-row operand of the angles, the
/// frequency table's name, and the shared array.
#[derive(Debug, Clone)]
pub(crate) struct AngleTable {
    x: NodeId,
    freq: String,
    array: String,
}

/// The name of the file-scope frequency table of `spec`'s rotation
/// ([`Emitter::rope_freq_table`]): one per rotary width and base.
fn freq_table_name(spec: &RopeSpec) -> String {
    format!("coda_rope_freq2_{}_{}", spec.rotary_dim, spec.base.to_bits())
}

/// The most rotary pairs a row's shared angle table holds (8 KiB).
const MAX_ROW_ANGLES: i64 = 1024;

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
