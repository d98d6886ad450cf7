//! The dedicated connection's reading of pub/sub messages and its bound on a write the node never takes.

use super::*;

#[test]
fn tells_messages_from_replies() {
    assert!(is_message(
        b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"
    ));
    assert!(is_message(
        b"*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$2\r\nch\r\n$1\r\nx\r\n"
    ));
    assert!(is_message(
        b"*3\r\n$8\r\nsmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"
    ));
    assert!(!is_message(b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"));
    assert!(!is_message(b"-ERR x\r\n"));
}

/// A node that takes none of a blocking command's bytes (stopped, its socket full): the write is bounded by
/// the command timeout, although the command's reply is not.
#[tokio::test]
async fn a_write_the_node_never_takes_times_out_even_for_a_blocking_command() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stream = Stream::Plain(tokio::net::TcpStream::connect(addr).await.unwrap());
    let (_stopped, _) = listener.accept().await.unwrap();
    // Far more than the two sockets' buffers hold.
    let command = Outgoing {
        raw: Bytes::from(vec![b'x'; 64 << 20]),
        replies: vec![ReplyHandle::discard()],
        wait: Wait::Unbounded,
        blocked: None,
    };
    let inner = Inner {
        node: NodeSpec {
            addr: addr.to_string(),
            username: None,
            password: None,
            db: 0,
            role: Default::default(),
            script_user: None,
            protocol: Default::default(),
            tls: None,
        },
        cluster: None,
        queue: RefCell::new(VecDeque::from([command])),
        wake: LocalSignal::default(),
        closed: Cell::new(false),
        failed: Cell::new(false),
        pushes: None,
        pending: Cell::new(1),
        reusable: Cell::new(true),
        spares: Rc::new(Spares::new(0, Duration::from_secs(1), Default::default())),
    };
    let timeout = Duration::from_millis(200);
    let served = tokio::time::timeout(
        Duration::from_secs(5),
        serve(&inner, stream, timeout, &mut VecDeque::new()),
    )
    .await
    .expect("the write ends at the command timeout");
    assert_eq!(served.err().as_deref(), Some("timed out after 200 ms"));
}
