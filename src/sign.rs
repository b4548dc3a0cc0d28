//! Signed claims records (`CLAIMS_KEY`): whoever can write to the claims
//! topic can fence instances, strand orders or fake completions, so a pool
//! may share a secret key and sign every record it appends.
//!
//! The signature is HMAC-SHA256 (the `hmac` and `sha2` crates) over the
//! record's value, the exact bytes of its JSON, carried in a Kafka record
//! header [`HEADER`] as lower-case hex. The value stays the wire format
//! (`kcat` shows the same JSON as before); the key (`<instance>:<event>`)
//! is not signed, since decoding refuses a key that does not match its
//! value. With a key set, a record with no signature or a wrong one is
//! *foreign*: skipped with one warning, it changes nothing
//! (`Record::decode_with`; model-checked in tests/pure/model.rs,
//! `foreign_records_change_nothing`).
//!
//! What it does not stop: a writer of the claims topic can still append a
//! *copy* of a record the pool signed earlier (a replay) and can delete or
//! compact records away (docs/deploy.md, "The claims topic"). Kafka ACLs
//! remain the boundary; the signature makes a forged record worthless.
//!
//! Pure (no I/O): the shell reads the header and the key, this module says
//! what they are worth.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

/// The Kafka record header that carries a record's signature.
pub const HEADER: &str = "pool-sig";

/// The shortest key accepted (bytes).
pub const MIN_KEY_BYTES: usize = 16;

/// The pool's shared secret. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClaimsKey(Vec<u8>);

impl fmt::Debug for ClaimsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClaimsKey(..)")
    }
}

/// What a record's signature is worth, as the shell found it; decoding
/// takes it (`Record::decode_with`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The pool has no key: nothing is checked.
    Unchecked,
    /// Signed with the pool's key.
    Valid,
    /// No signature, though the pool has a key.
    Unsigned,
    /// A signature that is not the pool's key's over these bytes.
    Bad,
}

impl ClaimsKey {
    /// A key from its bytes (surrounding whitespace, such as a file's final
    /// newline, is not part of it).
    pub fn new(bytes: &[u8]) -> Result<ClaimsKey, String> {
        let s = bytes.trim_ascii();
        if s.len() < MIN_KEY_BYTES {
            return Err(format!(
                "is {} bytes long; use at least {MIN_KEY_BYTES} random bytes (for example `openssl rand -hex 32`)",
                s.len()
            ));
        }
        Ok(ClaimsKey(s.to_vec()))
    }

    /// The key from `CLAIMS_KEY` (its value) or `CLAIMS_KEY_FILE` (a
    /// file's contents, read by the caller); not both. Errors name the
    /// variable.
    pub fn from_sources(
        value: Option<&str>,
        file: Option<(&str, std::io::Result<Vec<u8>>)>,
    ) -> Result<Option<ClaimsKey>, String> {
        match (value.filter(|v| !v.is_empty()), file) {
            (Some(_), Some(_)) => {
                Err("CLAIMS_KEY and CLAIMS_KEY_FILE are both set; set one".into())
            }
            (Some(v), None) => ClaimsKey::new(v.as_bytes())
                .map(Some)
                .map_err(|e| format!("CLAIMS_KEY {e}")),
            (None, Some((path, Ok(bytes)))) => ClaimsKey::new(&bytes)
                .map(Some)
                .map_err(|e| format!("CLAIMS_KEY_FILE: the key in {path} {e}")),
            (None, Some((path, Err(e)))) => {
                Err(format!("CLAIMS_KEY_FILE: cannot read {path}: {e}"))
            }
            (None, None) => Ok(None),
        }
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }

    /// The signature of a record's value: HMAC-SHA256, lower-case hex.
    pub fn sign(&self, value: &[u8]) -> String {
        let mut m = self.mac();
        m.update(value);
        m.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Whether `sig` (the header's bytes) is this key's signature of
    /// `value` (compared in constant time).
    fn checks(&self, value: &[u8], sig: &[u8]) -> bool {
        let Some(tag) = unhex(sig) else { return false };
        let mut m = self.mac();
        m.update(value);
        m.verify_slice(&tag).is_ok()
    }
}

/// The verdict on one record: `key` is the pool's (none: nothing is
/// checked), `value` the record's value, `sig` its [`HEADER`].
pub fn verdict(key: Option<&ClaimsKey>, value: Option<&[u8]>, sig: Option<&[u8]>) -> Verdict {
    let Some(key) = key else {
        return Verdict::Unchecked;
    };
    match sig {
        None => Verdict::Unsigned,
        Some(sig) if key.checks(value.unwrap_or_default(), sig) => Verdict::Valid,
        Some(_) => Verdict::Bad,
    }
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> ClaimsKey {
        ClaimsKey::new(s.as_bytes()).unwrap()
    }

    /// RFC 4231, test case 2 (a short key is refused by `new`, so built
    /// directly), checks that this is HMAC-SHA256 and nothing home-made.
    #[test]
    fn it_is_hmac_sha256() {
        let k = ClaimsKey(b"Jefe".to_vec());
        assert_eq!(
            k.sign(b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn verdicts() {
        let k = key("0123456789abcdef0123");
        let v = br#"{"instance":1,"event":"booted","incarnation":"a","ts":1}"#;
        let sig = k.sign(v);
        assert_eq!(verdict(None, Some(v), None), Verdict::Unchecked);
        assert_eq!(verdict(None, Some(v), Some(b"junk")), Verdict::Unchecked);
        assert_eq!(
            verdict(Some(&k), Some(v), Some(sig.as_bytes())),
            Verdict::Valid
        );
        assert_eq!(
            verdict(Some(&k), Some(v), Some(sig.to_uppercase().as_bytes())),
            Verdict::Valid,
            "hex in either case"
        );
        assert_eq!(verdict(Some(&k), Some(v), None), Verdict::Unsigned);
        let other = key("another key, 16+ bytes");
        assert_eq!(
            verdict(Some(&k), Some(v), Some(other.sign(v).as_bytes())),
            Verdict::Bad,
            "another key"
        );
        let mut changed = v.to_vec();
        changed[12] = b'2';
        assert_eq!(
            verdict(Some(&k), Some(&changed), Some(sig.as_bytes())),
            Verdict::Bad,
            "another value"
        );
        for junk in [
            &b""[..],
            b"zz",
            b"abc",
            &sig.as_bytes()[..62],
            "é".as_bytes(),
        ] {
            assert_eq!(
                verdict(Some(&k), Some(v), Some(junk)),
                Verdict::Bad,
                "{junk:?}"
            );
        }
        assert_eq!(verdict(Some(&k), None, Some(sig.as_bytes())), Verdict::Bad);
    }

    #[test]
    fn keys_are_checked_and_not_shown() {
        assert!(ClaimsKey::new(b"short")
            .unwrap_err()
            .contains("at least 16"));
        assert_eq!(
            ClaimsKey::new(b"0123456789abcdef\n").unwrap(),
            key("0123456789abcdef")
        );
        assert_eq!(format!("{:?}", key("0123456789abcdef")), "ClaimsKey(..)");
        assert_eq!(ClaimsKey::from_sources(None, None), Ok(None));
        assert!(ClaimsKey::from_sources(Some("0123456789abcdef"), None)
            .unwrap()
            .is_some());
        let file = || Some(("/k", Ok(b"0123456789abcdef\n".to_vec())));
        assert_eq!(
            ClaimsKey::from_sources(None, file()).unwrap(),
            Some(key("0123456789abcdef"))
        );
        assert!(ClaimsKey::from_sources(Some("0123456789abcdef"), file())
            .unwrap_err()
            .contains("both"));
        let e = ClaimsKey::from_sources(None, Some(("/k", Err(std::io::Error::other("denied")))))
            .unwrap_err();
        assert!(e.starts_with("CLAIMS_KEY_FILE: cannot read /k"), "{e}");
        assert!(ClaimsKey::from_sources(Some("x"), None)
            .unwrap_err()
            .starts_with("CLAIMS_KEY "));
    }
}
