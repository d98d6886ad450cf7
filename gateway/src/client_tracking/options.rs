//! `CLIENT TRACKING` and `CLIENT CACHING` as Redis 7.0 reads them: the options, their checks (with Redis'
//! error texts), and what `CLIENT TRACKINGINFO` shows of them.

use bytes::{Bytes, BytesMut};

use crate::resp::{self, Protocol};

/// A client's tracking options, as its last `CLIENT TRACKING on` left them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Options {
    /// `REDIRECT id` (0: none).
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// `PREFIX`es, as the client names them (in its own key namespace).
    pub prefixes: Vec<Bytes>,
}

/// What a `CLIENT TRACKING` asks.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Switch {
    On(Options),
    Off,
}

const SYNTAX: &str = "ERR syntax error";

/// Reads `CLIENT TRACKING on|off [options]` (`args` from `CLIENT`), checked against `current` (the client's
/// options while it tracks). `exists`: whether a client with an id may be redirected to.
pub(crate) fn parse(
    args: &[Bytes],
    current: Option<&Options>,
    exists: impl Fn(u64) -> bool,
) -> Result<Switch, String> {
    let mut options = Options::default();
    let mut rest = args.get(3..).unwrap_or_default().iter();
    while let Some(arg) = rest.next() {
        let more = rest.len() > 0;
        match &arg.to_ascii_lowercase()[..] {
            b"redirect" if more => {
                let id = rest
                    .next()
                    .map(|id| resp::parse_int(id))
                    .unwrap_or_default();
                if options.redirect != 0 {
                    return Err("ERR A client can only redirect to a single other client".into());
                }
                let Some(id) = id else {
                    return Err("ERR value is not an integer or out of range".into());
                };
                let id = u64::try_from(id).ok().filter(|&id| exists(id));
                let Some(id) = id else {
                    return Err("ERR The client ID you want redirect to does not exist".into());
                };
                options.redirect = id;
            }
            b"bcast" => options.bcast = true,
            b"optin" => options.optin = true,
            b"optout" => options.optout = true,
            b"noloop" => options.noloop = true,
            b"prefix" if more => {
                if let Some(prefix) = rest.next() {
                    options.prefixes.push(prefix.clone());
                }
            }
            _ => return Err(SYNTAX.into()),
        }
    }
    match &args
        .get(2)
        .map(|a| a.to_ascii_lowercase())
        .unwrap_or_default()[..]
    {
        b"on" => check(options, current).map(Switch::On),
        b"off" => Ok(Switch::Off),
        _ => Err(SYNTAX.into()),
    }
}

/// Redis' checks of `CLIENT TRACKING on`, in its order; the options the client tracks with after it.
fn check(mut options: Options, current: Option<&Options>) -> Result<Options, String> {
    if !options.bcast && !options.prefixes.is_empty() {
        return Err("ERR PREFIX option requires BCAST mode to be enabled".into());
    }
    if let Some(current) = current
        && current.bcast != options.bcast
    {
        return Err("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    if options.bcast && (options.optin || options.optout) {
        return Err("ERR OPTIN and OPTOUT are not compatible with BCAST".into());
    }
    if options.optin && options.optout {
        return Err("ERR You can't specify both OPTIN mode and OPTOUT mode".into());
    }
    if let Some(current) = current
        && ((options.optin && current.optout) || (options.optout && current.optin))
    {
        return Err("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    let mut prefixes: Vec<Bytes> = current.map(|c| c.prefixes.clone()).unwrap_or_default();
    for (i, prefix) in options.prefixes.iter().enumerate() {
        let given = options.prefixes[i + 1..].iter();
        for other in prefixes.iter().chain(given) {
            if other != prefix && (other.starts_with(prefix) || prefix.starts_with(other)) {
                let (p, o) = (
                    String::from_utf8_lossy(prefix),
                    String::from_utf8_lossy(other),
                );
                let whose = match prefixes.contains(other) {
                    true => "an existing prefix",
                    false => "another provided prefix",
                };
                return Err(format!(
                    "ERR Prefix '{p}' overlaps with {whose} '{o}'. Prefixes for a single client must not overlap."
                ));
            }
        }
    }
    for prefix in options.prefixes.drain(..) {
        if !prefixes.contains(&prefix) {
            prefixes.push(prefix);
        }
    }
    // Switched on again, tracking takes the new flags and redirect; its prefixes add up.
    options.prefixes = prefixes;
    Ok(options)
}

/// Reads `CLIENT CACHING yes|no` for a client tracking with `options` (`None`: not tracking): whether the next
/// command is an exception to its mode.
pub(crate) fn caching(arg: &[u8], options: Option<&Options>) -> Result<(), &'static str> {
    let Some(options) = options.filter(|o| o.optin || o.optout) else {
        return Err(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        );
    };
    match &arg.to_ascii_lowercase()[..] {
        b"yes" if options.optin => Ok(()),
        b"yes" => {
            Err("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
        }
        b"no" if options.optout => Ok(()),
        b"no" => {
            Err("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
        }
        _ => Err(SYNTAX),
    }
}

/// What `CLIENT TRACKINGINFO` answers, as a tracking client's state is (`None`: not tracking).
pub(crate) struct Info<'a> {
    pub options: Option<&'a Options>,
    /// `CLIENT CACHING` was given for the next command.
    pub caching: bool,
    /// The redirect target went away.
    pub broken: bool,
}

impl Info<'_> {
    pub(crate) fn reply(&self, protocol: Protocol) -> Bytes {
        let mut out = BytesMut::with_capacity(128);
        let flags: Vec<&[u8]> = match self.options {
            None => vec![b"off"],
            Some(o) => [
                (true, &b"on"[..]),
                (o.bcast, b"bcast"),
                (o.optin, b"optin"),
                (o.optin && self.caching, b"caching-yes"),
                (o.optout, b"optout"),
                (o.optout && self.caching, b"caching-no"),
                (o.noloop, b"noloop"),
                (self.broken, b"broken_redirect"),
            ]
            .into_iter()
            .filter_map(|(set, flag)| set.then_some(flag))
            .collect(),
        };
        resp::map_header(&mut out, 3, protocol);
        resp::bulk(&mut out, b"flags");
        resp::set_header(&mut out, flags.len(), protocol);
        for flag in flags {
            resp::bulk(&mut out, flag);
        }
        resp::bulk(&mut out, b"redirect");
        resp::integer(&mut out, self.redirect());
        resp::bulk(&mut out, b"prefixes");
        let prefixes = self.options.map(|o| &o.prefixes[..]).unwrap_or_default();
        resp::array_header(&mut out, prefixes.len());
        for prefix in prefixes {
            resp::bulk(&mut out, prefix);
        }
        out.freeze()
    }

    /// `CLIENT GETREDIR`: the redirect while tracking (0: none), -1 when not tracking.
    pub(crate) fn redirect(&self) -> i64 {
        self.options
            .map_or(-1, |o| i64::try_from(o.redirect).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    fn on(line: &str, current: Option<&Options>) -> Result<Switch, String> {
        parse(&args(line), current, |id| id == 7)
    }

    #[test]
    fn options_are_read_and_checked_as_redis_does() {
        assert_eq!(
            on("CLIENT TRACKING on PREFIX a", None).unwrap_err(),
            "ERR PREFIX option requires BCAST mode to be enabled"
        );
        assert_eq!(
            on("CLIENT TRACKING on OPTIN OPTOUT", None).unwrap_err(),
            "ERR You can't specify both OPTIN mode and OPTOUT mode"
        );
        assert_eq!(
            on("CLIENT TRACKING on REDIRECT 8", None).unwrap_err(),
            "ERR The client ID you want redirect to does not exist"
        );
        assert_eq!(
            on("CLIENT TRACKING on REDIRECT x", None).unwrap_err(),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            on("CLIENT TRACKING on BCAST PREFIX a PREFIX ab", None).unwrap_err(),
            "ERR Prefix 'a' overlaps with another provided prefix 'ab'. Prefixes for a single client must not overlap."
        );
        assert_eq!(on("CLIENT TRACKING maybe", None).unwrap_err(), SYNTAX);
        assert_eq!(on("CLIENT TRACKING on FOO", None).unwrap_err(), SYNTAX);
        let Ok(Switch::On(options)) = on("CLIENT TRACKING on bcast prefix a: REDIRECT 7", None)
        else {
            panic!("on");
        };
        assert_eq!((options.redirect, options.bcast), (7, true));
        assert_eq!(
            on("CLIENT TRACKING on", Some(&options)).unwrap_err(),
            "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."
        );
        assert_eq!(
            on("CLIENT TRACKING on BCAST PREFIX a:b", Some(&options)).unwrap_err(),
            "ERR Prefix 'a:b' overlaps with an existing prefix 'a:'. Prefixes for a single client must not overlap."
        );
        assert_eq!(on("CLIENT TRACKING off", Some(&options)), Ok(Switch::Off));
    }

    #[test]
    fn caching_needs_the_matching_mode() {
        let optin = Options {
            optin: true,
            ..Options::default()
        };
        assert_eq!(caching(b"yes", Some(&optin)), Ok(()));
        assert!(caching(b"no", Some(&optin)).unwrap_err().contains("OPTOUT"));
        assert!(
            caching(b"yes", None)
                .unwrap_err()
                .contains("can be called only")
        );
    }
}
