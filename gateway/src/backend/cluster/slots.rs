//! Reading a cluster's slot map: `CLUSTER SLOTS`, asked of each candidate node in turn.

use std::io;
use std::time::Duration;

use super::{ClusterSpec, SLOTS};
use crate::backend::NodeRole;
use crate::backend::direct::{DirectConnection, Value};
use crate::resp::Protocol;

/// One range of `CLUSTER SLOTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SlotRange {
    pub(super) start: u16,
    pub(super) end: u16,
    pub(super) master: String,
    pub(super) replicas: Vec<String>,
}

/// Asks each candidate in turn for `CLUSTER SLOTS` until one gives a usable answer.
pub(super) async fn fetch_slots(
    candidates: &[String],
    spec: &ClusterSpec,
    timeout: Duration,
) -> io::Result<Vec<SlotRange>> {
    let mut last_error = io::Error::other("no seed nodes");
    for addr in candidates {
        let attempt = async {
            let mut connection = DirectConnection::open(
                &spec.node(addr, NodeRole::Any).speaking(Protocol::Resp2),
                timeout,
            )
            .await?;
            let reply = connection.call(&[b"CLUSTER", b"SLOTS"]).await?;
            parse_slots(&reply, addr)
                .filter(|ranges| !ranges.is_empty())
                .ok_or_else(|| io::Error::other("unusable CLUSTER SLOTS reply"))
        };
        match attempt.await {
            Ok(ranges) => return Ok(ranges),
            Err(e) => last_error = io::Error::other(format!("{addr}: {e}")),
        }
    }
    Err(last_error)
}

/// Reads a `CLUSTER SLOTS` reply: `[[start, end, [ip, port, id, ...], replica...], ...]`. A node without an
/// address (`""` or `?`) is the one that answered.
fn parse_slots(reply: &Value, answered_by: &str) -> Option<Vec<SlotRange>> {
    let host_of_answer = answered_by
        .rsplit_once(':')
        .map_or(answered_by, |(host, _)| host);
    let node = |value: &Value| -> Option<String> {
        let fields = value.array()?;
        let ip = fields.first()?.text()?;
        let port = fields.get(1)?.int().and_then(|p| u16::try_from(p).ok())?;
        let host = match ip {
            "" | "?" => host_of_answer,
            ip => ip,
        };
        Some(format!("{host}:{port}"))
    };
    let mut ranges = Vec::new();
    for entry in reply.array()? {
        let fields = entry.array()?;
        let start = u16::try_from(fields.first()?.int()?).ok()?;
        let end = u16::try_from(fields.get(1)?.int()?).ok()?;
        if start > end || usize::from(end) >= SLOTS {
            return None;
        }
        let master = node(fields.get(2)?)?;
        let replicas = fields
            .get(3..)
            .unwrap_or_default()
            .iter()
            .filter_map(node)
            .collect();
        ranges.push(SlotRange {
            start,
            end,
            master,
            replicas,
        });
    }
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn parses_cluster_slots_and_refuses_bad_ranges() {
        let reply = Bytes::from_static(
            b"*2\r\n\
              *4\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n*2\r\n$0\r\n\r\n:7003\r\n\
              *3\r\n:8192\r\n:16383\r\n*2\r\n$9\r\n127.0.0.2\r\n:7001\r\n",
        );
        let ranges = parse_slots(&Value::parse(&reply).unwrap(), "10.0.0.9:7000").unwrap();
        assert_eq!(
            ranges,
            vec![
                SlotRange {
                    start: 0,
                    end: 8191,
                    master: "127.0.0.1:7000".into(),
                    replicas: vec!["10.0.0.9:7003".into()]
                },
                SlotRange {
                    start: 8192,
                    end: 16383,
                    master: "127.0.0.2:7001".into(),
                    replicas: vec![]
                },
            ]
        );
        for bad in [
            &b"*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n"[..],
            b"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",
            b"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:70000\r\n",
            b"*1\r\n*2\r\n:0\r\n:1\r\n",
            b"+OK\r\n",
        ] {
            let value = Value::parse(&Bytes::from_static(bad)).unwrap();
            assert_eq!(parse_slots(&value, "h:1"), None, "{bad:?}");
        }
    }
}
