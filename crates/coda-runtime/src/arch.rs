//! GPU architectures (`sm_80`, `sm_90a`, ...): parsing, printing and the
//! mapping from a device's compute capability.

use std::fmt;
use std::str::FromStr;

use crate::error::RuntimeError;

/// Architecture-specific feature-set suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ArchSuffix {
    /// Plain, forward-compatible target (`sm_80`).
    None,
    /// Architecture-specific features, exact arch only (`sm_90a`).
    A,
    /// Family-specific features (`sm_100f`, CUDA 12.9+).
    F,
}

/// A real GPU architecture, e.g. `sm_90a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// Compute capability major version (9 for sm_90a).
    pub major: u32,
    /// Compute capability minor version (0 for sm_90a).
    pub minor: u32,
    /// Feature-set suffix.
    pub suffix: ArchSuffix,
}

impl Arch {
    /// `sm_80`.
    pub const SM_80: Arch = Arch::new(8, 0, ArchSuffix::None);
    /// `sm_86`.
    pub const SM_86: Arch = Arch::new(8, 6, ArchSuffix::None);
    /// `sm_89`.
    pub const SM_89: Arch = Arch::new(8, 9, ArchSuffix::None);
    /// `sm_90a`.
    pub const SM_90A: Arch = Arch::new(9, 0, ArchSuffix::A);

    /// Builds an arch from its parts.
    pub const fn new(major: u32, minor: u32, suffix: ArchSuffix) -> Arch {
        Arch { major, minor, suffix }
    }

    /// The arch to compile for on a device of compute capability
    /// `major.minor`: the exact arch, with the `a` (architecture-specific)
    /// suffix from Hopper on (9.0 → `sm_90a`, 10.0 → `sm_100a`) so that
    /// wgmma / TMA style instructions are available; 8.x → `sm_8x`.
    pub fn from_compute_capability(major: u32, minor: u32) -> Arch {
        let suffix = if major >= 9 { ArchSuffix::A } else { ArchSuffix::None };
        Arch::new(major, minor, suffix)
    }

    /// The two/three-digit number, e.g. 90 for `sm_90a`, 100 for `sm_100a`.
    pub fn number(&self) -> u32 {
        self.major * 10 + self.minor
    }

    fn suffix_str(&self) -> &'static str {
        match self.suffix {
            ArchSuffix::None => "",
            ArchSuffix::A => "a",
            ArchSuffix::F => "f",
        }
    }

    /// The real-architecture name, `sm_90a`; used as `-arch=sm_90a`.
    pub fn sm_name(&self) -> String {
        format!("sm_{}{}", self.number(), self.suffix_str())
    }

    /// The virtual-architecture name, `compute_90a`; used to emit PTX.
    pub fn compute_name(&self) -> String {
        format!("compute_{}{}", self.number(), self.suffix_str())
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sm_name())
    }
}

impl FromStr for Arch {
    type Err = RuntimeError;

    /// Parses `sm_80`, `sm_90a`, `sm_100f`, `compute_90a` (same arch), and the
    /// compute-capability forms `9.0` / `8.6` (mapped like
    /// [`Arch::from_compute_capability`]).
    fn from_str(s: &str) -> Result<Arch, RuntimeError> {
        let err = |reason: &str| RuntimeError::InvalidArch { input: s.to_string(), reason: reason.to_string() };
        let t = s.trim().to_ascii_lowercase();
        if let Some((maj, min)) = t.split_once('.') {
            let major: u32 = maj.parse().map_err(|_| err("bad major version"))?;
            let minor: u32 = min.parse().map_err(|_| err("bad minor version"))?;
            if !(1..=99).contains(&major) || minor > 9 {
                return Err(err("compute capability out of range"));
            }
            return Ok(Arch::from_compute_capability(major, minor));
        }
        let rest =
            t.strip_prefix("sm_").or_else(|| t.strip_prefix("compute_")).ok_or_else(|| err("must start with `sm_`"))?;
        let (digits, suffix) = match rest.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            None => (rest, ArchSuffix::None),
            Some((i, _)) => {
                let suffix = match &rest[i..] {
                    "a" => ArchSuffix::A,
                    "f" => ArchSuffix::F,
                    _ => return Err(err("unknown suffix (only `a` and `f` exist)")),
                };
                (&rest[..i], suffix)
            }
        };
        if digits.len() < 2 || digits.len() > 3 {
            return Err(err("expected two or three digits"));
        }
        let n: u32 = digits.parse().map_err(|_| err("not a number"))?;
        let (major, minor) = (n / 10, n % 10);
        if major < 3 {
            return Err(err("architectures before sm_30 are not supported"));
        }
        Ok(Arch::new(major, minor, suffix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Arch {
        match s.parse::<Arch>() {
            Ok(a) => a,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn parses_real_archs() {
        assert_eq!(p("sm_80"), Arch::SM_80);
        assert_eq!(p("sm_86"), Arch::SM_86);
        assert_eq!(p("sm_90a"), Arch::SM_90A);
        assert_eq!(p(" SM_90A "), Arch::SM_90A);
        assert_eq!(p("sm_90"), Arch::new(9, 0, ArchSuffix::None));
        assert_eq!(p("sm_100a"), Arch::new(10, 0, ArchSuffix::A));
        assert_eq!(p("sm_120f"), Arch::new(12, 0, ArchSuffix::F));
        assert_eq!(p("compute_90a"), Arch::SM_90A);
    }

    #[test]
    fn round_trips_through_display() {
        for s in ["sm_80", "sm_89", "sm_90a", "sm_100a", "sm_103f", "sm_120"] {
            assert_eq!(p(s).to_string(), s);
        }
        assert_eq!(Arch::SM_90A.compute_name(), "compute_90a");
        assert_eq!(Arch::SM_80.number(), 80);
    }

    #[test]
    fn compute_capability_mapping() {
        assert_eq!(Arch::from_compute_capability(9, 0), Arch::SM_90A);
        assert_eq!(Arch::from_compute_capability(8, 0), Arch::SM_80);
        assert_eq!(Arch::from_compute_capability(8, 6), Arch::SM_86);
        assert_eq!(Arch::from_compute_capability(8, 9).to_string(), "sm_89");
        assert_eq!(Arch::from_compute_capability(10, 0).to_string(), "sm_100a");
        assert_eq!(p("9.0"), Arch::SM_90A);
        assert_eq!(p("8.6"), Arch::SM_86);
    }

    #[test]
    fn rejects_garbage() {
        for s in ["", "sm", "sm_", "sm_9", "sm_9000", "sm_90b", "sm_90ab", "gfx90a", "sm_20", "x.y"] {
            let e = s.parse::<Arch>();
            assert!(e.is_err(), "{s} should not parse");
        }
        let msg = "sm_90b".parse::<Arch>().err().map(|e| e.to_string());
        assert_eq!(
            msg.as_deref(),
            Some("invalid GPU architecture `sm_90b`: unknown suffix (only `a` and `f` exist) (expected e.g. sm_80, sm_90a)")
        );
    }
}
