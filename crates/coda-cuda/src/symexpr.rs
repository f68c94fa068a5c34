//! Symbolic sizes in the manifest: integer expressions over the block's
//! run-time dimensions, written as text (`M`, `4096`, `2*M + 3`,
//! `ceil(M/128)`, `ceil(333/8)*8`).
//!
//! The code generator builds them from IR [`Dim`]s ([`SymExpr`]) and prints
//! them; a host parses and evaluates them for concrete bindings with
//! [`eval_str`]. Grammar (whitespace is ignored):
//!
//! ```text
//! expr   := term (('+' | '-') term)*
//! term   := factor ('*' factor)*
//! factor := INTEGER | NAME | '(' expr ')' | 'ceil' '(' expr '/' INTEGER ')'
//! ```
//!
//! Arithmetic is checked 64-bit; `ceil(a/b)` needs a positive constant `b`.

use coda_ir::Dim;
use std::collections::BTreeMap;
use std::fmt;

/// A symbolic size: a [`Dim`] polynomial, a ceiling division by a constant,
/// or a product of those.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SymExpr {
    /// A polynomial over run-time dims.
    Dim(Dim),
    /// `ceil(e / d)` for a positive constant `d`.
    CeilDiv(Box<SymExpr>, i64),
    /// `a * b`.
    Mul(Box<SymExpr>, Box<SymExpr>),
}

/// Why a symbolic size could not be parsed or evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SymError {
    /// The text is not in the grammar.
    #[error("cannot parse size expression `{text}`: {message}")]
    Parse {
        /// The expression.
        text: String,
        /// What is wrong.
        message: String,
    },
    /// A name has no binding.
    #[error("size expression `{text}` uses `{name}`, which is not bound")]
    Unbound {
        /// The expression.
        text: String,
        /// The unbound name.
        name: String,
    },
    /// Overflow or division by a non-positive number.
    #[error("size expression `{text}` overflows or divides by zero")]
    Arithmetic {
        /// The expression.
        text: String,
    },
}

impl SymExpr {
    /// A constant.
    pub fn constant(value: i64) -> SymExpr {
        SymExpr::Dim(Dim::constant(value))
    }

    /// The value when the expression is a constant.
    pub fn as_const(&self) -> Option<i64> {
        match self {
            SymExpr::Dim(d) => d.as_const(),
            SymExpr::CeilDiv(e, d) => {
                let v = e.as_const()?;
                (*d > 0).then(|| v.div_euclid(*d) + i64::from(v.rem_euclid(*d) != 0))
            }
            SymExpr::Mul(a, b) => a.as_const()?.checked_mul(b.as_const()?),
        }
    }

    /// `ceil(self / d)`, folded when constant.
    pub fn ceil_div(self, d: i64) -> SymExpr {
        if d == 1 {
            return self;
        }
        let e = SymExpr::CeilDiv(Box::new(self), d);
        match e.as_const() {
            Some(v) => SymExpr::constant(v),
            None => e,
        }
    }

    /// `self * other`, folded when constant.
    pub fn times(self, other: SymExpr) -> SymExpr {
        if let (SymExpr::Dim(a), SymExpr::Dim(b)) = (&self, &other) {
            if let Ok(p) = a.mul(b) {
                return SymExpr::Dim(p);
            }
        }
        let e = SymExpr::Mul(Box::new(self), Box::new(other));
        match e.as_const() {
            Some(v) => SymExpr::constant(v),
            None => e,
        }
    }

    /// `self` rounded up to a multiple of `d`.
    pub fn round_up(self, d: i64) -> SymExpr {
        self.ceil_div(d).times(SymExpr::constant(d))
    }

    /// The value under `bindings`.
    pub fn eval(&self, bindings: &BTreeMap<String, i64>) -> Result<i64, SymError> {
        eval_str(&self.to_string(), bindings)
    }
}

impl From<Dim> for SymExpr {
    fn from(d: Dim) -> SymExpr {
        SymExpr::Dim(d)
    }
}

impl From<&Dim> for SymExpr {
    fn from(d: &Dim) -> SymExpr {
        SymExpr::Dim(d.clone())
    }
}

impl SymExpr {
    /// Whether the printed form needs parentheses as an operand of `*` or `/`.
    fn is_compound(&self) -> bool {
        match self {
            SymExpr::Dim(d) => {
                let text = d.to_string();
                text.contains(' ') || text.starts_with('-')
            }
            SymExpr::CeilDiv(..) | SymExpr::Mul(..) => false,
        }
    }

    /// The printed form, parenthesized when compound.
    fn operand_text(&self) -> String {
        if self.is_compound() {
            format!("({self})")
        } else {
            self.to_string()
        }
    }
}

impl fmt::Display for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymExpr::Dim(d) => write!(f, "{d}"),
            SymExpr::CeilDiv(e, d) => write!(f, "ceil({}/{d})", e.operand_text()),
            SymExpr::Mul(a, b) => write!(f, "{}*{}", a.operand_text(), b.operand_text()),
        }
    }
}

/// Parses and evaluates a size expression.
pub fn eval_str(text: &str, bindings: &BTreeMap<String, i64>) -> Result<i64, SymError> {
    let tokens = tokenize(text)?;
    let mut parser = Parser { text, tokens, pos: 0, bindings };
    let value = parser.expr()?;
    if parser.pos != parser.tokens.len() {
        return Err(parser.parse_error("unexpected trailing input"));
    }
    Ok(value)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Int(i64),
    Name(String),
    Punct(char),
}

fn tokenize(text: &str) -> Result<Vec<Token>, SymError> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let digits: String = chars[start..i].iter().collect();
            let value = digits.parse().map_err(|_| SymError::Arithmetic { text: text.into() })?;
            tokens.push(Token::Int(value));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Name(chars[start..i].iter().collect()));
        } else if "+-*/()".contains(c) {
            tokens.push(Token::Punct(c));
            i += 1;
        } else {
            return Err(SymError::Parse { text: text.into(), message: format!("unexpected character `{c}`") });
        }
    }
    Ok(tokens)
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    pos: usize,
    bindings: &'a BTreeMap<String, i64>,
}

impl Parser<'_> {
    fn parse_error(&self, message: &str) -> SymError {
        SymError::Parse { text: self.text.into(), message: message.into() }
    }

    fn overflow(&self) -> SymError {
        SymError::Arithmetic { text: self.text.into() }
    }

    fn peek_punct(&self, c: char) -> bool {
        self.tokens.get(self.pos) == Some(&Token::Punct(c))
    }

    fn expect(&mut self, c: char) -> Result<(), SymError> {
        if self.peek_punct(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.parse_error(&format!("expected `{c}`")))
        }
    }

    fn expr(&mut self) -> Result<i64, SymError> {
        let mut value = self.term()?;
        loop {
            if self.peek_punct('+') {
                self.pos += 1;
                let rhs = self.term()?;
                value = value.checked_add(rhs).ok_or_else(|| self.overflow())?;
            } else if self.peek_punct('-') {
                self.pos += 1;
                let rhs = self.term()?;
                value = value.checked_sub(rhs).ok_or_else(|| self.overflow())?;
            } else {
                return Ok(value);
            }
        }
    }

    fn term(&mut self) -> Result<i64, SymError> {
        let mut value = self.factor()?;
        while self.peek_punct('*') {
            self.pos += 1;
            let rhs = self.factor()?;
            value = value.checked_mul(rhs).ok_or_else(|| self.overflow())?;
        }
        Ok(value)
    }

    fn factor(&mut self) -> Result<i64, SymError> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        match token {
            Some(Token::Int(v)) => Ok(v),
            Some(Token::Punct('(')) => {
                let v = self.expr()?;
                self.expect(')')?;
                Ok(v)
            }
            Some(Token::Name(name)) if name == "ceil" => self.ceil(),
            Some(Token::Name(name)) => {
                self.bindings.get(&name).copied().ok_or(SymError::Unbound { text: self.text.into(), name })
            }
            _ => Err(self.parse_error("expected a number, a name or `(`")),
        }
    }

    fn ceil(&mut self) -> Result<i64, SymError> {
        self.expect('(')?;
        let num = self.expr()?;
        self.expect('/')?;
        let den = match self.tokens.get(self.pos) {
            Some(Token::Int(d)) if *d > 0 => *d,
            _ => return Err(self.parse_error("`ceil(a/b)` needs a positive integer b")),
        };
        self.pos += 1;
        self.expect(')')?;
        Ok(num.div_euclid(den) + i64::from(num.rem_euclid(den) != 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn prints_and_evaluates() -> Result<(), SymError> {
        let m = SymExpr::Dim(Dim::symbol("M"));
        let tiles = m.clone().ceil_div(128);
        assert_eq!(tiles.to_string(), "ceil(M/128)");
        let grid = tiles.times(SymExpr::constant(4096).ceil_div(128));
        assert_eq!(grid.to_string(), "ceil(M/128)*32");
        assert_eq!(grid.eval(&bind(&[("M", 1000)]))?, 8 * 32);
        assert_eq!(SymExpr::constant(333).round_up(8).to_string(), "336");
        let two_m = Dim::symbol("M").mul(&Dim::constant(2)).and_then(|d| d.add(&Dim::constant(3)));
        let two_m = SymExpr::Dim(two_m.map_err(|_| SymError::Arithmetic { text: String::new() })?);
        let padded = two_m.round_up(8);
        assert_eq!(padded.to_string(), "ceil((2*M + 3)/8)*8");
        assert_eq!(padded.eval(&bind(&[("M", 3)]))?, 16);
        Ok(())
    }

    #[test]
    fn rejects_bad_text() {
        let b = bind(&[("M", 4)]);
        assert!(eval_str("M +", &b).is_err());
        assert!(eval_str("ceil(M/0)", &b).is_err());
        assert!(matches!(eval_str("N", &b), Err(SymError::Unbound { .. })));
        assert!(eval_str("9223372036854775807 + 1", &b).is_err());
        assert_eq!(eval_str(" ( M - 1 ) * 2 ", &b), Ok(6));
    }
}
