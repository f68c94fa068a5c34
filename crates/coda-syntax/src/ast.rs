//! The spanned abstract syntax tree produced by the parser.
//!
//! The AST mirrors the surface syntax exactly (sugar such as `rmsnorm` is an
//! ordinary call here); meaning is given by `coda-lower`. Every node carries
//! the byte span it was parsed from.

use coda_diagnostics::Span;

/// A name with where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where it was written.
    pub span: Span,
}

/// A whole `.coda` file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct File {
    /// Top-level items in source order.
    pub items: Vec<Item>,
}

/// A top-level item.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `dim M` or `dim D = 4096`.
    Dim(DimDecl),
    /// A `block` or an explicit `kernel`.
    Block(Block),
    /// A `grad` declaration: the backward of a block.
    Grad(GradDecl),
}

/// `grad NAME = BLOCK wrt (inputs)` or `grad NAME = BLOCK(outputs) wrt (inputs)`:
/// the backward block of `BLOCK`, giving the gradients of `inputs` from the
/// gradients of `outputs` (all float outputs when the list is omitted).
#[derive(Debug, Clone, PartialEq)]
pub struct GradDecl {
    /// The backward block's name.
    pub name: Ident,
    /// The forward block.
    pub forward: Ident,
    /// The outputs whose gradients are given, if listed.
    pub outputs: Option<Vec<Ident>>,
    /// The inputs whose gradients are wanted.
    pub inputs: Vec<Ident>,
    /// The whole declaration.
    pub span: Span,
}

/// `dim NAME` (symbolic, bound at run time) or `dim NAME = expr` (a named constant).
#[derive(Debug, Clone, PartialEq)]
pub struct DimDecl {
    /// The dimension's name.
    pub name: Ident,
    /// Its value, when it is a constant.
    pub value: Option<Expr>,
    /// The whole declaration.
    pub span: Span,
}

/// Whether a body is plain math or an explicit GEMM-plus-epilogue kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// `block`: plain math; the compiler partitions it into kernels.
    Block,
    /// `kernel`: one GEMM plus an epilogue written with explicit primitives.
    Kernel,
}

/// `block name(params) -> (outputs) { body }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Block or kernel.
    pub kind: BlockKind,
    /// The block's name.
    pub name: Ident,
    /// Input tensors.
    pub params: Vec<Param>,
    /// Output tensors.
    pub outputs: Vec<Param>,
    /// Statements in order.
    pub body: Vec<Stmt>,
    /// From the keyword to the closing brace.
    pub span: Span,
}

/// `name: dtype[dims]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// The tensor's name.
    pub name: Ident,
    /// Its declared type.
    pub ty: TypeExpr,
    /// The whole declaration.
    pub span: Span,
}

/// `bf16[M, K]`, `f32[D]` or `f32` (a scalar).
#[derive(Debug, Clone, PartialEq)]
pub struct TypeExpr {
    /// The element type name as written (`bf16`, `f32`, `e4m3`, ...).
    pub dtype: Ident,
    /// The dimensions; empty for a scalar.
    pub dims: Vec<Expr>,
    /// The whole type.
    pub span: Span,
}

/// A statement of a body.
#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    /// `let name = value`.
    Let {
        /// The bound name.
        name: Ident,
        /// Its value.
        value: Expr,
        /// The whole statement.
        span: Span,
    },
    /// `output = value` or `output += value` (accumulate into the existing buffer).
    Assign {
        /// The output's name.
        name: Ident,
        /// The value stored.
        value: Expr,
        /// True for `+=`.
        accumulate: bool,
        /// The whole statement.
        span: Span,
    },
    /// A block-local `dim`.
    Dim(DimDecl),
    /// A statement that failed to parse (already reported).
    Error(Span),
}

/// An expression with its span.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where it was written.
    pub span: Span,
    /// Height of this expression tree (1 for a leaf); the parser caps it so
    /// that later recursive passes cannot overflow the stack.
    pub depth: u32,
}

impl Expr {
    /// A leaf or a node whose children have the given depths.
    pub fn new(kind: ExprKind, span: Span) -> Self {
        let depth = 1 + kind.child_depth();
        Expr { kind, span, depth }
    }
}

impl ExprKind {
    fn child_depth(&self) -> u32 {
        let arg_depth = |a: &Arg| match &a.value {
            ArgValue::Expr(e) => e.depth,
            ArgValue::Range(a, b) => a.depth.max(b.depth),
        };
        match self {
            ExprKind::Number(_) | ExprKind::Name(_) | ExprKind::Str(_) | ExprKind::Error => 0,
            ExprKind::Binary { lhs, rhs, .. } => lhs.depth.max(rhs.depth),
            ExprKind::Neg(e) | ExprKind::Transpose(e) => e.depth,
            ExprKind::Call { args, .. } => args.iter().map(arg_depth).max().unwrap_or(0),
            ExprKind::List(items) => items.iter().map(|e| e.depth).max().unwrap_or(0),
            ExprKind::Member { base, args, .. } => {
                args.iter().flatten().map(arg_depth).max().unwrap_or(0).max(base.depth)
            }
            ExprKind::Index { base, items } => items
                .iter()
                .map(|item| match item {
                    IndexItem::Slice { start, end, .. } => {
                        start.as_ref().map_or(0, |e| e.depth).max(end.as_ref().map_or(0, |e| e.depth))
                    }
                    IndexItem::NewAxis(_) => 0,
                    IndexItem::Single(e) => e.depth,
                })
                .max()
                .unwrap_or(0)
                .max(base.depth),
        }
    }
}

/// Binary operators, in the surface syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `@` (matrix product)
    MatMul,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::MatMul => "@",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
        }
    }
}

/// Expression forms.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// A numeric literal, kept as written (`4096`, `1e-5`); the checker parses it.
    Number(String),
    /// A name: a tensor, a `let` binding, a dimension or a keyword value such as `half`.
    Name(Ident),
    /// `lhs op rhs`.
    Binary {
        /// The operator.
        op: BinOp,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
    },
    /// `-arg`.
    Neg(Box<Expr>),
    /// `f(args)`; casts are calls of a dtype name (`bf16(x)`).
    Call {
        /// The function's name.
        callee: Ident,
        /// Positional and keyword arguments in order.
        args: Vec<Arg>,
    },
    /// `base[items]`.
    Index {
        /// The indexed expression.
        base: Box<Expr>,
        /// One item per axis.
        items: Vec<IndexItem>,
    },
    /// `base.T`.
    Transpose(Box<Expr>),
    /// `base.name` (other than `.T`) or `base.name(args)`: PyTorch's
    /// attributes, methods and module functions (`x.float()`,
    /// `torch.tanh(x)`), which the language does not have; kept so that
    /// the checker can say what to write instead.
    Member {
        /// What precedes the dot.
        base: Box<Expr>,
        /// The name after the dot.
        name: Ident,
        /// The arguments of a method call; `None` for an attribute.
        args: Option<Vec<Arg>>,
    },
    /// A quoted string (`"tanh"`), which the language does not have; the
    /// text between the quotes.
    Str(String),
    /// A Python list (`[a, b]`), which the language does not have; kept so
    /// that the checker can say what to write instead.
    List(Vec<Expr>),
    /// An expression that failed to parse or was too deep (already reported).
    Error,
}

/// One call argument.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    /// `Some` for `name = value`.
    pub name: Option<Ident>,
    /// The value.
    pub value: ArgValue,
    /// The whole argument.
    pub span: Span,
}

/// An argument's value: an expression, or a column range `a:b` for keyword arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    /// An ordinary expression.
    Expr(Expr),
    /// `start:end`.
    Range(Expr, Expr),
}

/// One axis of an index expression.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexItem {
    /// `start:end`, either bound optional (`:` alone takes the whole axis).
    Slice {
        /// First index, default 0.
        start: Option<Expr>,
        /// One past the last, default the axis length.
        end: Option<Expr>,
        /// The whole item.
        span: Span,
    },
    /// `None`: insert an axis of length 1 (turns a length-M vector into a column).
    NewAxis(Span),
    /// A single index (not supported by the checker; parsed for a good error).
    Single(Expr),
}
