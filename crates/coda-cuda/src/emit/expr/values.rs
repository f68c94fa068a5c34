//! Elementwise functions, casts and column concatenations in the
//! statement writer.

use super::Emitter;
use crate::emit::code::Code;
use crate::emit::ops::unary_reg;
use crate::error::CodegenError;
use crate::kir::{NodeId, Op};
use coda_ir::{DType, Dim, UnaryOp, Value};

impl Emitter<'_> {
    /// A function of one operand at `(m, k)` (a sine or cosine of a rotary
    /// angle reduces the angle in double first).
    pub(super) fn unary(&mut self, op: UnaryOp, a: NodeId, m: &str, k: &str) -> Result<Code, CodegenError> {
        if matches!(op, UnaryOp::Sin | UnaryOp::Cos) {
            if let Some((x, spec)) = self.rope_angle(a) {
                // Partners share their frequency: `cos(x · freq[kp])` is `cos(x · freq[k])`.
                let k = match self.rope_partners.get(k) {
                    Some((col, partner_spec)) if *partner_spec == spec => col.clone(),
                    _ => k.to_string(),
                };
                let k = k.as_str();
                let args = self.rope_args(&spec);
                if let Some(table) = self.row_angle(x, &spec, k, &args) {
                    let cs = self.column_local((a, "rope_cs", k), "cs", table);
                    let part = if op == UnaryOp::Sin { "y" } else { "x" };
                    return Ok(Code::of(format!("{cs}.{part}"), [&cs]));
                }
                let xv = self.eval(x, m, k)?;
                let lookup = Code::of(self.rope_freq_lookup(&spec, k, &args), [&Code::index(k)]);
                // One local per column for the sine and the cosine (and
                // hoisted out of the row loop of a GEMM epilogue).
                let freq = self.column_local((a, "rope_freq", k), "freq", lookup);
                let f = if op == UnaryOp::Sin { "sin_angle" } else { "cos_angle" };
                return Ok(Code::of(format!("cg::{f}({xv}, {freq})"), [&xv, &freq]));
            }
        }
        let a = self.eval(a, m, k)?;
        Ok(Code::of(unary_reg(op, &a), [&a]))
    }

    /// A `float2` local of node `node`'s `what` at column `k`, defined as
    /// `init` once per scope and reused after.
    fn column_local(&mut self, (node, what, k): (NodeId, &str, &str), prefix: &str, init: Code) -> Code {
        let key = (node, what.to_string(), k.to_string());
        if let Some(local) = self.lookup(&key) {
            return local;
        }
        let local = self.locals.fresh(prefix);
        let value = self.kernel.nodes[node].value;
        self.define("float2", &local, init, Some(value));
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(key, Code::local(&local));
        }
        Code::local(local)
    }

    /// The C expression of `a` converted to `to` (rounded to a storage type).
    pub(crate) fn cast(&self, to: DType, a: &str, value: Value) -> Result<String, CodegenError> {
        Ok(match to {
            DType::BF16 => format!("cg::to_bf16({a})"),
            DType::F16 => format!("cg::to_f16({a})"),
            DType::F32 => a.to_string(),
            DType::I32 => format!("cg::to_i32({a})"),
            DType::Bool => format!("cg::to_bool({a})"),
            DType::E4M3 | DType::E5M2 => {
                return Err(self.internal(format!("a cast to {to} at {} reached the emitter", self.loc(value))))
            }
        })
    }

    /// The part of a concatenation that holds every column of the current
    /// loop piece ([`Self::k_range`]), when it is evaluated at `k` itself
    /// and its offsets are constants.
    fn part_covering_k(&self, parts: &[(NodeId, Dim)], k: &str) -> Option<usize> {
        let (lo, hi) = self.k_range.filter(|_| k == "k")?;
        let starts: Vec<i64> = parts.iter().map(|(_, off)| off.as_const()).collect::<Option<_>>()?;
        (0..parts.len()).find(|&i| starts[i] <= lo && starts.get(i + 1).is_none_or(|&next| hi <= next))
    }

    /// A column concatenation at `(m, k)`: the one part covering the loop
    /// piece, else a select between the parts by the offset of `k`.
    pub(super) fn concat(&mut self, parts: &[(NodeId, Dim)], m: &str, k: &str) -> Result<Code, CodegenError> {
        let ki = Code::index(k);
        if let Some(part) = self.part_covering_k(parts, k) {
            let (node, offset) = &parts[part];
            let off = self.dim_int(offset);
            let idx = if off == "0" || self.is_constant(*node) {
                ki
            } else {
                let idx = self.index("kq", Code::of(format!("{k} - {off}"), [&ki]));
                if let Some(offset) = offset.as_const() {
                    self.chunk_shift(&idx, k, -offset);
                }
                idx
            };
            return self.eval(*node, m, &idx);
        }
        let mut values = Vec::new();
        for (part, offset) in parts {
            let off = self.dim_int(offset);
            // A constant part (the zero padding of a gradient) needs no index.
            let idx = if off == "0" || self.is_constant(*part) {
                ki.clone()
            } else {
                self.index("kq", Code::of(format!("{k} - {off}"), [&ki]))
            };
            values.push((self.eval(*part, m, &idx)?, off));
        }
        let mut expr = values.last().map(|(v, _)| v.clone()).unwrap_or_else(|| Code::lit("0.0f"));
        for i in (0..values.len().saturating_sub(1)).rev() {
            let next_off = &values[i + 1].1;
            let text = format!("({k} < {next_off} ? {} : {expr})", values[i].0);
            expr = Code::of(text, [&ki, &values[i].0, &expr]);
        }
        Ok(expr)
    }

    /// Whether `node` is a constant, possibly broadcast: its value does not
    /// depend on the row or column it is evaluated at.
    fn is_constant(&self, mut node: NodeId) -> bool {
        while let Some(Op::Broadcast(a)) = self.kernel.nodes.get(node).map(|n| &n.op) {
            node = *a;
        }
        matches!(self.kernel.nodes.get(node).map(|n| &n.op), Some(Op::Const(_)))
    }
}
