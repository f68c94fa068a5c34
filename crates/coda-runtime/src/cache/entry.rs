//! On-disk format of one kernel-cache entry, with a checksum so that a
//! corrupt or truncated file is detected and never trusted.
//!
//! Layout (all integers little-endian):
//!
//! | offset | size | field |
//! |--------|------|-------|
//! | 0 | 8 | magic `CODACKC\x01` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | flags (bit 0: PTX present) |
//! | 16 | 32 | cache key (sha256) the entry was written for |
//! | 48 | 8 | cubin length |
//! | 56 | 8 | PTX length |
//! | 64 | 8 | log length |
//! | 72 | 32 | sha256 of bytes 0..72 followed by the payload |
//! | 104 | … | payload: cubin, PTX, log |

use sha2::{Digest, Sha256};

use super::{Artifacts, CacheKey};

const MAGIC: &[u8; 8] = b"CODACKC\x01";
const VERSION: u32 = 1;
const FLAG_PTX: u32 = 1;
const HEADER_LEN: usize = 104;
const CHECKSUM_AT: usize = 72;

/// Why an entry was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Corrupt {
    /// Shorter than the header or than the lengths it announces.
    Truncated,
    /// Wrong magic or version.
    BadHeader,
    /// Written for another key.
    WrongKey,
    /// Checksum mismatch.
    BadChecksum,
    /// Lengths announce more or fewer bytes than the file has.
    BadLength,
    /// PTX or log is not UTF-8.
    BadText,
}

fn checksum(header_prefix: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(header_prefix);
    h.update(payload);
    h.finalize().into()
}

/// Serialises an entry.
pub(crate) fn encode(key: &CacheKey, a: &Artifacts) -> Vec<u8> {
    let ptx = a.ptx.as_deref().unwrap_or("").as_bytes();
    let flags = if a.ptx.is_some() { FLAG_PTX } else { 0 };
    let mut out = Vec::with_capacity(HEADER_LEN + a.cubin.len() + ptx.len() + a.log.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&(a.cubin.len() as u64).to_le_bytes());
    out.extend_from_slice(&(ptx.len() as u64).to_le_bytes());
    out.extend_from_slice(&(a.log.len() as u64).to_le_bytes());
    let mut payload = Vec::with_capacity(a.cubin.len() + ptx.len() + a.log.len());
    payload.extend_from_slice(&a.cubin);
    payload.extend_from_slice(ptx);
    payload.extend_from_slice(a.log.as_bytes());
    let sum = checksum(&out, &payload);
    out.extend_from_slice(&sum);
    out.extend_from_slice(&payload);
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Parses and verifies an entry written for `key`.
pub(crate) fn decode(key: &CacheKey, bytes: &[u8]) -> Result<Artifacts, Corrupt> {
    if bytes.len() < HEADER_LEN {
        return Err(Corrupt::Truncated);
    }
    if &bytes[0..8] != MAGIC || u32_at(bytes, 8) != VERSION {
        return Err(Corrupt::BadHeader);
    }
    let flags = u32_at(bytes, 12);
    if bytes[16..48] != key.0 {
        return Err(Corrupt::WrongKey);
    }
    let lens = [u64_at(bytes, 48), u64_at(bytes, 56), u64_at(bytes, 64)];
    let total = lens.iter().try_fold(0u64, |acc, &l| acc.checked_add(l)).ok_or(Corrupt::BadLength)?;
    let payload = &bytes[HEADER_LEN..];
    if (payload.len() as u64) < total {
        return Err(Corrupt::Truncated);
    }
    if payload.len() as u64 != total {
        return Err(Corrupt::BadLength);
    }
    if checksum(&bytes[..CHECKSUM_AT], payload)[..] != bytes[CHECKSUM_AT..HEADER_LEN] {
        return Err(Corrupt::BadChecksum);
    }
    // All lengths fit in `payload.len()` (a usize) now.
    let (cubin_len, ptx_len) = (lens[0] as usize, lens[1] as usize);
    let cubin = payload[..cubin_len].to_vec();
    let ptx_bytes = &payload[cubin_len..cubin_len + ptx_len];
    let log_bytes = &payload[cubin_len + ptx_len..];
    let ptx = if flags & FLAG_PTX != 0 {
        Some(String::from_utf8(ptx_bytes.to_vec()).map_err(|_| Corrupt::BadText)?)
    } else {
        None
    };
    let log = String::from_utf8(log_bytes.to_vec()).map_err(|_| Corrupt::BadText)?;
    Ok(Artifacts { cubin, ptx, log })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Artifacts {
        Artifacts {
            cubin: (0..=255u8).cycle().take(1000).collect(),
            ptx: Some(".version 9.0\n".into()),
            log: "warning: x".into(),
        }
    }

    #[test]
    fn round_trip_and_every_single_byte_flip_is_caught() {
        let key = CacheKey::from_parts(&[b"k"]);
        let bytes = encode(&key, &sample());
        assert_eq!(decode(&key, &bytes), Ok(sample()));
        for i in (0..bytes.len()).step_by(7) {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(decode(&key, &b).is_err(), "flip at {i} not detected");
        }
    }

    #[test]
    fn truncation_wrong_key_and_no_ptx() {
        let key = CacheKey::from_parts(&[b"k"]);
        let bytes = encode(&key, &sample());
        for cut in [0, 10, HEADER_LEN - 1, HEADER_LEN, bytes.len() - 1] {
            assert_eq!(decode(&key, &bytes[..cut]), Err(Corrupt::Truncated));
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&key, &longer), Err(Corrupt::BadLength));
        let other = CacheKey::from_parts(&[b"other"]);
        assert_eq!(decode(&other, &bytes), Err(Corrupt::WrongKey));
        let no_ptx = Artifacts { ptx: None, ..sample() };
        assert_eq!(decode(&key, &encode(&key, &no_ptx)), Ok(no_ptx));
    }
}
