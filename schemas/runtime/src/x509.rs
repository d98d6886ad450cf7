//! The few fields of an X.509 certificate (DER) that Switchyard reads itself: when it expires, for the expiry
//! metrics and warnings, and its subject public key, whose SHA-256 names a client certificate in a credential.
//! Everything else about a certificate (chains, signatures, names) is rustls' business.

/// The end of the certificate's validity (`notAfter`), in seconds since the Unix epoch.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let validity = tbs_fields(der)?.nth(VALIDITY)?;
    let mut times = Der(validity.body);
    let _not_before = times.next()?;
    time(times.next()?)
}

/// The certificate's `subjectPublicKeyInfo`, whole (tag and length included), as SPKI pins hash it.
pub fn subject_public_key_info(der: &[u8]) -> Option<&[u8]> {
    tbs_fields(der)?
        .nth(SUBJECT_PUBLIC_KEY_INFO)
        .map(|f| f.whole)
}

/// Positions in `TBSCertificate` once the optional `[0] version` is skipped: serialNumber, signature,
/// issuer, validity, subject, subjectPublicKeyInfo.
const VALIDITY: usize = 3;
const SUBJECT_PUBLIC_KEY_INFO: usize = 5;

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The fields of the certificate's `TBSCertificate`, after its version.
fn tbs_fields(der: &[u8]) -> Option<impl Iterator<Item = Tlv<'_>>> {
    let certificate = Der(der).next().filter(|t| t.tag == SEQUENCE)?;
    let tbs = Der(certificate.body).next().filter(|t| t.tag == SEQUENCE)?;
    let mut fields = Der(tbs.body).peekable();
    fields.next_if(|t| t.tag == VERSION);
    Some(fields)
}

/// One DER element.
#[derive(Clone, Copy)]
struct Tlv<'a> {
    tag: u8,
    body: &'a [u8],
    /// The element with its tag and length.
    whole: &'a [u8],
}

/// The elements of a DER sequence's body, in order; ends at the first malformed one.
struct Der<'a>(&'a [u8]);

impl<'a> Iterator for Der<'a> {
    type Item = Tlv<'a>;

    fn next(&mut self) -> Option<Tlv<'a>> {
        let input = self.0;
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = match first {
            0..=0x7f => (usize::from(first), rest),
            0x81..=0x84 => {
                let n = usize::from(first - 0x80);
                let bytes = rest.get(..n)?;
                let len = bytes
                    .iter()
                    .fold(0usize, |len, &b| (len << 8) | usize::from(b));
                (len, &rest[n..])
            }
            _ => return None,
        };
        let body = rest.get(..len)?;
        let header = input.len() - rest.len();
        self.0 = &rest[len..];
        Some(Tlv {
            tag,
            body,
            whole: &input[..header + len],
        })
    }
}

/// A UTCTime (`YYMMDDHHMMSSZ`, years 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), as X.509 writes them.
fn time(tlv: Tlv<'_>) -> Option<i64> {
    let text = std::str::from_utf8(tlv.body).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tlv.tag {
        UTC_TIME if text.len() == 12 => {
            let yy: i64 = text.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &text[2..])
        }
        GENERALIZED_TIME if text.len() == 14 => (text.get(..4)?.parse().ok()?, &text[4..]),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day) = (field(0)?, field(2)?);
    let seconds = field(4)? * 3600 + field(6)? * 60 + field(8)?;
    Some(days_from_civil(year, month, day) * 86_400 + seconds)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2038, 1, 19), 24_855);
    }

    #[test]
    fn both_time_forms() {
        let utc = Tlv {
            tag: UTC_TIME,
            body: b"380119031408Z",
            whole: &[],
        };
        assert_eq!(time(utc), Some(2_147_483_648));
        let generalized = Tlv {
            tag: GENERALIZED_TIME,
            body: b"20380119031408Z",
            whole: &[],
        };
        assert_eq!(time(generalized), Some(2_147_483_648));
        let local = Tlv {
            tag: UTC_TIME,
            body: b"380119031408+0100",
            whole: &[],
        };
        assert_eq!(time(local), None);
    }

    #[test]
    fn reads_a_real_certificate() {
        let mut params = rcgen::CertificateParams::new(vec!["example.test".to_string()]).unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(4_102_444_800).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(not_after(cert.der()), Some(4_102_444_800));
        assert_eq!(
            subject_public_key_info(cert.der()),
            Some(&rcgen::PublicKeyData::subject_public_key_info(&key)[..])
        );
    }

    #[test]
    fn garbage_is_none() {
        assert_eq!(not_after(b""), None);
        assert_eq!(not_after(&[0x30, 0x85, 0, 0, 0, 0, 0]), None);
        assert_eq!(not_after(&[0x30, 0x03, 0x30, 0x01]), None);
        assert_eq!(subject_public_key_info(&[0x30, 0x02, 0x30, 0x00]), None);
    }
}
