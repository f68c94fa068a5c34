//! Size expressions as the manifest writes them: integer expressions over a
//! block's run-time dimensions (`M`, `4096`, `2*M + 3`, `ceil(M/128)`,
//! `ceil(333/8)*8`), and [`eval_str`], which a host uses to evaluate them
//! for concrete bindings. Grammar (whitespace is ignored):
//!
//! ```text
//! expr   := term (('+' | '-') term)*
//! term   := factor ('*' factor)*
//! factor := INTEGER | NAME | '(' expr ')' | 'ceil' '(' expr '/' INTEGER ')'
//! ```
//!
//! Arithmetic is checked 64-bit; `ceil(a/b)` needs a positive constant `b`.

use std::collections::BTreeMap;

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
