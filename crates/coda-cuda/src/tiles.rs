//! Tile selection, the stage between the partition and the kernel IR:
//! every GEMM's configuration, chosen before anything (partial buffer
//! widths) depends on the tile shape, and the one refinement that needs the
//! built epilogue (staged subtiles, [`Tiles::refined`]). The rules
//! themselves are in [`crate::config`].

use crate::config::{self, TileConfig};
use crate::kir::build::kernel_members;
use crate::kir::{Buffer, Node, NodeId, Op, PartialOut, Space, Store};
use crate::plan::{Home, KernelPlan, OperandPlan, Plan};
use crate::CodegenOptions;
use coda_ir::{Block, Dim, Inst, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The configuration of every GEMM kernel of a plan.
#[derive(Debug, Default)]
pub(crate) struct Tiles {
    /// By plan kernel.
    configs: BTreeMap<usize, TileConfig>,
    /// The GEMMs (by plan kernel) whose configuration the rules chose (none
    /// asked for): those may move to staged subtiles once their epilogue is
    /// built ([`config::subtiles_pay`]).
    rules_chose: BTreeSet<usize>,
    /// The matmuls whose GEMMs reduce heads in their epilogues but could
    /// run with no configuration holding whole heads in each warp: they
    /// are partitioned again without those reductions.
    split_heads: BTreeSet<Value>,
}

/// A built GEMM epilogue, as [`Tiles::refined`] judges it.
pub(crate) struct Epilogue<'a> {
    pub(crate) nodes: &'a [Node],
    pub(crate) stores: &'a [Store],
    pub(crate) partials: &'a [PartialOut],
    pub(crate) buffers: &'a [Buffer],
}

impl Tiles {
    /// The configuration of plan kernel `k`, if it is a GEMM.
    pub(crate) fn of(&self, k: usize) -> Option<TileConfig> {
        self.configs.get(&k).copied()
    }

    /// The matmuls whose per-head reductions no configuration of theirs
    /// holds (see [`TileConfig::holds_heads`]).
    pub(crate) fn split_heads(&self) -> &BTreeSet<Value> {
        &self.split_heads
    }

    /// The configuration of GEMM `k` once its epilogue is built: staged
    /// subtiles where the rules chose its configuration and the epilogue
    /// suits them ([`config::subtiles_pay`]; `depth` is its K), else
    /// `config`; with why, where the epilogue's traffic against K decided
    /// ([`config::tile_operands_hide`]).
    pub(crate) fn refined(
        &self,
        k: usize,
        config: TileConfig,
        n: &Dim,
        depth: &Dim,
        epilogue: &Epilogue<'_>,
    ) -> (TileConfig, Option<String>) {
        if !self.rules_chose.contains(&k) {
            return (config, None);
        }
        let fit = subtile_fit(epilogue, depth);
        let Some(staged) = config::subtiles_pay(config, n, fit.regions) else { return (config, None) };
        let heads = epilogue.nodes.iter().filter_map(|node| match node.op {
            Op::GroupReduce { groups, .. } if node.reg.is_some() => Some(groups.width()),
            _ => None,
        });
        if !heads.into_iter().all(|width| staged.holds_heads(width)) {
            return (config, None);
        }
        match fit.traffic {
            None => (staged, None),
            Some(per_1024) => {
                let (lo, hi) = config::HIDDEN_TRAFFIC;
                let moved =
                    format!("its tile operands and stores move {per_1024:.2} bytes per output element per 1024 of K");
                if config::tile_operands_hide(per_1024) {
                    let why = format!("within {lo} to {hi}: its epilogue hides behind the other tile's K loop");
                    (staged, Some(format!("{}: {moved}, {why}", staged.name())))
                } else {
                    let why = if per_1024 < lo {
                        format!("below {lo}: the cooperative mainloop gains more than hiding the epilogue would")
                    } else {
                        format!("above {hi}: the epilogue would outlast the other tile's K loop")
                    };
                    (config, Some(format!("{} rather than {}: {moved}, {why}", config.name(), staged.name())))
                }
            }
        }
    }
}

/// Chooses the configuration of every GEMM kernel of `plan`.
pub(crate) fn choose(block: &Block, plan: &Plan, options: &CodegenOptions) -> Tiles {
    Chooser { block, plan, members: kernel_members(plan) }.choose(options)
}

struct Chooser<'a> {
    block: &'a Block,
    plan: &'a Plan,
    /// The values each plan kernel computes, in arena order.
    members: Vec<Vec<Value>>,
}

impl Chooser<'_> {
    fn c(&self, v: Value) -> Value {
        self.plan.canon[v.index()]
    }

    fn members(&self, k: usize) -> &[Value] {
        self.members.get(k).map_or(&[], Vec::as_slice)
    }

    /// The tile configuration of every GEMM: the portable choice, then the
    /// target's ([`config::for_target`]), then a tuned one from `tiles` (by
    /// the GEMM's ordinal) when it is among that choice's
    /// [`TileConfig::alternatives`]; before anything (partial buffer widths)
    /// depends on the tile shape.
    fn choose(&self, options: &CodegenOptions) -> Tiles {
        let target = config::Target::from_arch(&options.arch);
        let no_tiles = BTreeMap::new();
        let tuned = options.tiles.get(&self.block.name).unwrap_or(&no_tiles);
        let mut tiles = Tiles::default();
        let mut ordinal = 0;
        for (k, kp) in self.plan.kernels.iter().enumerate() {
            let KernelPlan::Gemm { matmul, b, .. } = kp else { continue };
            let mut regs = 0;
            let mut heavy = false;
            for v in self.members(k) {
                match &self.plan.homes[v.index()] {
                    Home::Acc(_) => {
                        regs += 1;
                        heavy |= self.plan.maps[v.index()].as_ref().is_some_and(|m| m.stride == 2);
                    }
                    Home::RowPartial(..) | Home::ColPartial(_) => heavy = true,
                    _ => {}
                }
            }
            regs += self.plan.joined.values().filter(|joined| joined.kernel == k).count();
            heavy |= regs > config::HEAVY_NODES;
            let shape = &self.block.ty(*matmul).shape;
            let wide = self.wide_epilogue(k);
            let portable = config::choose(&shape.rows, &shape.cols, heavy);
            let (b_pairs, b_transposed, b_stacked) = match b {
                OperandPlan::Param { transposed, row_perm, stacked, .. } => (*row_perm, *transposed, stacked.is_some()),
                OperandPlan::Mat { transposed, row_perm, .. } => (*row_perm, *transposed, false),
            };
            // The Hopper loader reads stacked weights only as the two
            // halves of one pair group (`coda::Sm90PairRows`'s STACKED).
            let tma_stack = !b_stacked || b_pairs.is_some_and(|p| p.start == 0 && p.end == p.group);
            let targeted = match tma_stack {
                true => config::for_target(target, portable, &shape.cols, wide, b_pairs, b_transposed),
                false => portable,
            };
            let chosen = match targeted {
                c if c.is_sm90() || !wide => c,
                _ => TileConfig::Cfg64x64,
            };
            let chosen = match &options.launch {
                Some(hint) => {
                    let known = |d: &Dim| d.eval(&|name| hint.dims.get(name).copied()).ok();
                    config::for_shape(chosen, known(&shape.rows), known(&shape.cols), hint.multiprocessors)
                }
                None => chosen,
            };
            // A loss over the logits hides behind the other tile's K loop;
            // chosen here, before its partial buffers are sized per tile.
            let chosen = match chosen {
                TileConfig::Sm90Cfg128x256 if self.keeps_only_row_partials(k) => {
                    config::subtiles_pay(chosen, &shape.cols, Some(0)).unwrap_or(chosen)
                }
                c => c,
            };
            let widths = self.head_widths(k);
            let holds = |c: &TileConfig| widths.iter().all(|w| c.holds_heads(*w));
            let fits = |c: &TileConfig| chosen.alternatives().contains(c) && holds(c);
            let asked = [options.tile_config, tuned.get(&ordinal).copied()];
            let asked = asked.into_iter().flatten().find(fits);
            if asked.is_none() {
                tiles.rules_chose.insert(k);
            }
            let chosen = match config::holding_heads(asked.unwrap_or(chosen), &widths) {
                Some(c) => c,
                None => {
                    tiles.split_heads.insert(*matmul);
                    chosen
                }
            };
            ordinal += 1;
            tiles.configs.insert(k, chosen);
        }
        tiles
    }

    /// Whether GEMM `k`'s epilogue stores nothing, reads no tile operand
    /// and keeps per-row partials only (a loss over the logits).
    fn keeps_only_row_partials(&self, k: usize) -> bool {
        // Every member's home is in kernel `k`.
        let homes = || self.members(k).iter().map(|v| &self.plan.homes[v.index()]);
        let row_partials = homes().any(|home| matches!(home, Home::RowPartial(..)));
        let col_partials = homes().any(|home| matches!(home, Home::ColPartial(_)));
        let stores = self.plan.mats.values().any(|x| *x == k)
            || self.plan.output_kernels.contains(&k)
            || self.plan.joined.values().any(|joined| joined.kernel == k)
            || self.read_elsewhere(k);
        row_partials && !col_partials && !stores && !self.reads_tiles(k)
    }

    /// Whether another kernel reads a register value of GEMM `k` (which
    /// `k` then stores), directly or through values it recomputes.
    fn read_elsewhere(&self, k: usize) -> bool {
        let outside = |home: &Home| home.kernel().is_some_and(|x| x != k);
        let mut stack: Vec<Value> = (self.plan.homes.iter().enumerate())
            .filter(|(i, home)| self.plan.canon[*i].index() == *i && outside(home))
            .flat_map(|(i, _)| self.block.inst(Value::from_index(i)).operands())
            .collect();
        let mut seen = BTreeSet::new();
        while let Some(v) = stack.pop() {
            let v = self.c(v);
            if !seen.insert(v) {
                continue;
            }
            match self.plan.homes[v.index()] {
                Home::Acc(x) if x == k => return true,
                Home::Inline => stack.extend(self.block.inst(v).operands()),
                _ => {}
            }
        }
        false
    }

    /// Whether GEMM `k`'s epilogue reads a tensor of more than one row and
    /// column from memory (not the matmul's operands).
    fn reads_tiles(&self, k: usize) -> bool {
        let in_epilogue = |v: &Value| match self.plan.homes[v.index()] {
            Home::Acc(x) | Home::RowPartial(x, _) | Home::ColPartial(x) => x == k,
            _ => false,
        };
        let mut stack: Vec<Value> = (self.members(k).iter().copied())
            .filter(in_epilogue)
            .filter(|v| !matches!(self.block.inst(*v), Inst::MatMul { .. }))
            .flat_map(|v| self.block.inst(v).operands())
            .collect();
        let mut seen = BTreeSet::new();
        while let Some(v) = stack.pop() {
            let v = self.c(v);
            if !seen.insert(v) || in_epilogue(&v) {
                continue;
            }
            match &self.plan.homes[v.index()] {
                Home::Inline => stack.extend(self.block.inst(v).operands()),
                Home::Dead => {}
                _ => {
                    let shape = &self.block.ty(v).shape;
                    if !shape.rows.is_one() && !shape.cols.is_one() {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// The head widths of the per-head reductions in GEMM `k`'s epilogue.
    fn head_widths(&self, k: usize) -> Vec<i64> {
        let widths = self.members(k).iter().filter_map(|v| match self.block.inst(*v) {
            Inst::GroupReduce { groups, .. } if self.plan.homes[v.index()] == Home::Acc(k) => Some(groups.width()),
            _ => None,
        });
        widths.collect::<BTreeSet<i64>>().into_iter().collect()
    }

    /// Whether kernel `k` reads `v` from memory (an input, a stored value or
    /// partials) rather than computing it from constants and tables.
    fn reads_memory(&self, v: Value, k: usize) -> bool {
        let mut stack = vec![v];
        let mut seen = BTreeSet::new();
        while let Some(v) = stack.pop() {
            let v = self.c(v);
            if !seen.insert(v) {
                continue;
            }
            match &self.plan.homes[v.index()] {
                Home::Inline => stack.extend(self.block.inst(v).operands()),
                Home::Acc(x) if *x == k => {}
                Home::Dead => {}
                _ => return true,
            }
        }
        false
    }

    /// Whether the epilogue of GEMM `k` reads two or more per-column
    /// vectors from memory beside per-row values finished from partials (a
    /// deferred LayerNorm's consumer: `σ` and `σμ` per row, `γᵀW` and
    /// `βᵀW + b` per column). Each vector costs `2 × (columns per thread)`
    /// registers and each row value one per row of the thread, which spill
    /// beside 128 accumulators on the big tiles (measured with ptxas). Such
    /// a GEMM takes smaller tiles: `Sm90Cfg128x128` on `sm_90a`, `Cfg64x64`
    /// on the portable mainloop. One vector does not make it wide: the
    /// RMSNorm-backward dgrad of `llama3_block` (a gain, with the `zdz`
    /// row term) took 2.99 ms on 128×256 tiles against 3.86 ms on 128×128
    /// on the H100 (`codac bench --autotune`, M = 8192).
    fn wide_epilogue(&self, k: usize) -> bool {
        let mut vectors = BTreeSet::new();
        let mut finishes = false;
        let mut seen = BTreeSet::new();
        // The epilogue's values and what they read (not the matmul's operands).
        let mut stack: Vec<Value> = (self.members(k).iter().copied())
            .filter(|v| self.plan.homes[v.index()] == Home::Acc(k))
            .filter(|v| !matches!(self.block.inst(*v), Inst::MatMul { .. }))
            .flat_map(|v| self.block.inst(v).operands())
            .collect();
        while let Some(v) = stack.pop() {
            let v = self.c(v);
            if !seen.insert(v) {
                continue;
            }
            match &self.plan.homes[v.index()] {
                Home::RowPartial(..) => finishes = true,
                Home::Inline => {
                    if let Inst::Broadcast { arg, .. } = self.block.inst(v) {
                        let shape = &self.block.ty(*arg).shape;
                        if shape.rows.is_one() && !shape.cols.is_one() {
                            if self.reads_memory(*arg, k) {
                                vectors.insert(self.c(*arg));
                            }
                            continue;
                        }
                    }
                    stack.extend(self.block.inst(v).operands());
                }
                _ => {}
            }
        }
        finishes && vectors.len() >= 2
    }
}

/// What staged subtiles would make of a GEMM epilogue ([`subtile_fit`]).
struct SubtileFit {
    /// The regions it would need, if it suits them: one per stored value
    /// (at most three, each into 16-bit buffers, none accumulated; a
    /// concatenation part shifted by a multiple of 8 columns, a store put
    /// back from pair order in groups of whole subtiles), and no per-tile
    /// partials: their buffers already have one column per tile of the
    /// configuration chosen before the epilogue was built, so a GEMM that
    /// keeps partials cannot change its tile width here (a loss over the
    /// logits takes ping-pong tiles in [`choose`] instead).
    regions: Option<i64>,
    /// For an epilogue with a tile operand other than a tensor in pair
    /// layout read a quad per column pair: its bytes read and stored per
    /// output element per 1024 of the GEMM's K (`None` also where K is not
    /// a constant: then `regions` is `None`).
    traffic: Option<f64>,
}

/// How a GEMM epilogue suits staged subtiles, for a GEMM of K = `depth`.
fn subtile_fit(epilogue: &Epilogue<'_>, depth: &Dim) -> SubtileFit {
    let Epilogue { nodes, stores, partials, buffers } = *epilogue;
    let groups_fit = |s: &Store| s.col_perm.is_none_or(|p| config::subtiles_unpermute(p.start, p.group));
    let part_fits = |s: &Store| s.col_offset.is_none_or(|o| o % config::CHUNK_COLS == 0);
    let plain = |s: &Store| !s.accumulate && part_fits(s) && groups_fit(s) && buffers[s.buf].dtype.is_half();
    let read_as_quads = |id: NodeId| {
        nodes.iter().all(|n| match n.op {
            Op::Slice { arg, step, .. } if arg == id => step == 2,
            ref op => !op.operands().contains(&id),
        })
    };
    if !partials.is_empty() || !stores.iter().all(plain) {
        return SubtileFit { regions: None, traffic: None };
    }
    let values: BTreeSet<NodeId> = stores.iter().map(|s| s.node).collect();
    let regions = i64::try_from(values.len()).ok().filter(|n| (1..=3).contains(n));
    let tile_loads: BTreeSet<(NodeId, usize)> = (nodes.iter().enumerate())
        .filter_map(|(id, n)| match n.op {
            Op::Load(buf) if n.space == Space::Tile => Some((id, buf)),
            _ => None,
        })
        .collect();
    if tile_loads.iter().all(|&(id, _)| read_as_quads(id)) {
        return SubtileFit { regions, traffic: None };
    }
    let read: BTreeSet<usize> = tile_loads.iter().map(|&(_, buf)| buf).collect();
    let stored: BTreeSet<usize> = stores.iter().map(|s| s.buf).collect();
    let bytes: usize = read.iter().chain(&stored).map(|&b| buffers[b].dtype.size_bytes()).sum();
    match config::traffic_per_1024(bytes, depth) {
        Some(per_1024) => SubtileFit { regions, traffic: Some(per_1024) },
        None => SubtileFit { regions: None, traffic: None },
    }
}
