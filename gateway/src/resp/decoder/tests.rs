use super::*;
use proptest::prelude::*;

impl RequestDecoder {
    fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Request>, ProtocolError> {
        Ok(self.decode(buf)?.map(|frame| self.request(frame)))
    }
}

fn decode_all(
    decoder: &mut RequestDecoder,
    input: &[u8],
) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    while let Some(request) = decoder.next(&mut buf)? {
        out.push(request.args().iter().map(|a| a.to_vec()).collect());
    }
    Ok(out)
}

fn args(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|a| a.as_bytes().to_vec()).collect()
}

#[test]
fn multibulk_and_inline() {
    let mut decoder = RequestDecoder::default();
    let got = decode_all(
        &mut decoder,
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*0\r\nPING\r\n\r\n  set \"a b\\x41\\n\" 'it\\'s'\r\n*1\r\n$4\r\nPI",
    )
    .unwrap();
    assert_eq!(
        got,
        vec![
            args(&["GET", "k"]),
            args(&["PING"]),
            args(&["set", "a bA\n", "it's"])
        ]
    );
}

#[test]
fn keeps_the_raw_frame_for_forwarding() {
    let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nget k\r\n"[..]);
    let mut decoder = RequestDecoder::default();
    let first = decoder.next(&mut buf).unwrap().unwrap();
    assert_eq!(&first.raw()[..], b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    let inline = decoder.next(&mut buf).unwrap().unwrap();
    assert_eq!(&inline.raw()[..], b"*2\r\n$3\r\nget\r\n$1\r\nk\r\n");
    assert!(buf.is_empty());
}

#[test]
fn errors_match_redis() {
    let limits = Limits {
        max_bulk_len: 10,
        max_args: 3,
        max_inline_len: 16,
        unauthenticated: false,
    };
    let cases: &[(&[u8], &str)] = &[
        (b"*x\r\n", "Protocol error: invalid multibulk length"),
        (b"*4\r\n", "Protocol error: invalid multibulk length"),
        (b"*1\r\n+PING\r\n", "Protocol error: expected '+', got '+'"),
        (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$11\r\n", "Protocol error: invalid bulk length"),
        (b"*1\r\n$1x\r\n", "Protocol error: invalid bulk length"),
        (
            b"*11111111111111111111",
            "Protocol error: too big mbulk count string",
        ),
        (
            b"*1\r\n$11111111111111111111",
            "Protocol error: too big bulk count string",
        ),
        (
            b"get aaaaaaaaaaaaaaaaaaaaaaaaa",
            "Protocol error: too big inline request",
        ),
        (
            b"get \"a\r\n",
            "Protocol error: unbalanced quotes in request",
        ),
        (
            b"get \"a\"b\r\n",
            "Protocol error: unbalanced quotes in request",
        ),
        (
            b"get 'a\r\n",
            "Protocol error: unbalanced quotes in request",
        ),
    ];
    for (input, expected) in cases {
        let mut decoder = RequestDecoder::new(limits);
        let err = decode_all(&mut decoder, input).unwrap_err();
        let expected = expected.replace("expected '+'", "expected '$'");
        assert_eq!(
            err.to_string(),
            expected,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn unauthenticated_clients_get_redis_stricter_limits() {
    let strict = Limits::default().unauthenticated();
    let err = |input: &[u8]| {
        decode_all(&mut RequestDecoder::new(strict), input)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(b"*11\r\n"),
        "Protocol error: unauthenticated multibulk length"
    );
    assert_eq!(
        err(b"*1\r\n$16385\r\n"),
        "Protocol error: unauthenticated bulk length"
    );
    let ok = decode_all(
        &mut RequestDecoder::new(strict),
        b"*2\r\n$4\r\nAUTH\r\n$1\r\np\r\n",
    )
    .unwrap();
    assert_eq!(ok.len(), 1);
}

#[test]
fn a_large_value_is_not_rescanned() {
    let mut decoder = RequestDecoder::default();
    let mut buf = BytesMut::from(&b"*2\r\n$3\r\nSET\r\n$100\r\n"[..]);
    assert_eq!(decoder.next(&mut buf).unwrap(), None);
    assert_eq!(decoder.bytes_wanted(buf.len()), 102);
    buf.extend_from_slice(&[b'v'; 60]);
    assert_eq!(decoder.next(&mut buf).unwrap(), None);
    assert_eq!(decoder.bytes_wanted(buf.len()), 42);
    buf.extend_from_slice(&[b'v'; 40]);
    buf.extend_from_slice(b"\r\n");
    let request = decoder.next(&mut buf).unwrap().unwrap();
    assert_eq!(request.args()[1].len(), 100);
}

/// Any byte string that encodes as a valid request.
fn frame() -> impl Strategy<Value = (Vec<u8>, Vec<Vec<u8>>)> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6).prop_map(|args| {
        let mut raw = BytesMut::new();
        crate::resp::command(&mut raw, &args);
        (raw.to_vec(), args)
    })
}

proptest! {
    #[test]
    fn every_split_decodes_the_same((raw, expected) in frame(), extra in frame()) {
        let mut input = raw.clone();
        input.extend_from_slice(&extra.0);
        for split in 0..=input.len() {
            let mut decoder = RequestDecoder::default();
            let mut buf = BytesMut::from(&input[..split]);
            let mut got = Vec::new();
            while let Some(r) = decoder.next(&mut buf).unwrap() {
                got.push(r);
            }
            buf.extend_from_slice(&input[split..]);
            while let Some(r) = decoder.next(&mut buf).unwrap() {
                got.push(r);
            }
            prop_assert_eq!(got.len(), 2);
            prop_assert_eq!(&got[0].raw()[..], &raw[..]);
            let args: Vec<Vec<u8>> = got[0].args().iter().map(|a| a.to_vec()).collect();
            prop_assert_eq!(&args, &expected);
            prop_assert!(buf.is_empty());
        }
    }

    #[test]
    fn garbage_never_panics(input in prop::collection::vec(any::<u8>(), 0..300), cut in 0usize..300) {
        let mut decoder = RequestDecoder::new(Limits { max_bulk_len: 64, max_args: 8, max_inline_len: 32, unauthenticated: false });
        let cut = cut.min(input.len());
        let mut buf = BytesMut::from(&input[..cut]);
        while let Ok(Some(_)) = decoder.next(&mut buf) {}
        buf.extend_from_slice(&input[cut..]);
        while let Ok(Some(_)) = decoder.next(&mut buf) {}
    }
}
