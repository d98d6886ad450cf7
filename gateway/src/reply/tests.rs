//! The reply queue's ordering, redirects, split handles and lost replies.

use std::cell::Cell;

use super::*;

fn ready(queue: &ReplyQueue) -> Vec<u8> {
    let mut out = BytesMut::new();
    queue.drain_ready(&mut out, |_| {});
    out.to_vec()
}

/// Answers every error it sees with a fixed reply, counting the calls (and the failures it is told of).
struct Rewrite(Cell<usize>, Cell<usize>);

impl Redirector for Rewrite {
    fn on_error(&self, _reply: Bytes, handle: ReplyHandle, redirect: Redirect) {
        self.0.set(self.0.get() + 1);
        handle.deliver(Bytes::from(format!("+resent {}\r\n", redirect.attempts)));
    }

    fn on_failure(&self) {
        self.1.set(self.1.get() + 1);
    }
}

#[test]
fn a_message_goes_after_the_replies_ready_when_it_came() {
    let queue = Rc::new(ReplyQueue::default());
    let now = Instant::now();
    let first = queue.reserve(now);
    let second = queue.reserve(now);
    first.deliver(Bytes::from_static(b"+1\r\n"));
    queue.push_message(Bytes::from_static(b">m1\r\n"));
    let third = queue.reserve(now);
    third.deliver(Bytes::from_static(b"+3\r\n"));
    queue.push_message(Bytes::from_static(b">m2\r\n"));
    assert_eq!(ready(&queue), b"+1\r\n>m1\r\n>m2\r\n");
    assert_eq!(queue.messages(), 0);
    second.deliver(Bytes::from_static(b"+2\r\n"));
    queue.push_message(Bytes::from_static(b">m3\r\n"));
    assert_eq!(ready(&queue), b"+2\r\n+3\r\n>m3\r\n");
    assert!(queue.is_empty());
}

#[test]
fn an_invalidation_goes_after_every_reply_owed_when_it_came() {
    let queue = Rc::new(ReplyQueue::default());
    let now = Instant::now();
    let read = queue.reserve(now);
    // The invalidation comes before the read's reply (it rides another backend connection): it waits for it.
    queue.push_after_sent(Bytes::from_static(b">inv\r\n"));
    assert_eq!(ready(&queue), b"");
    let later = queue.reserve(now);
    read.deliver(Bytes::from_static(b"$3\r\nold\r\n"));
    // A message that comes next keeps its place after it.
    queue.push_message(Bytes::from_static(b">m\r\n"));
    assert_eq!(ready(&queue), b"$3\r\nold\r\n>inv\r\n>m\r\n");
    later.deliver(Bytes::from_static(b"+ok\r\n"));
    // With nothing owed, it goes at once.
    queue.push_after_sent(Bytes::from_static(b">inv2\r\n"));
    assert_eq!(ready(&queue), b"+ok\r\n>inv2\r\n");
}

#[test]
fn only_error_replies_go_through_the_redirector() {
    let queue = Rc::new(ReplyQueue::default());
    let redirector = Rc::new(Rewrite(Cell::new(0), Cell::new(0)));
    let redirect = || Redirect {
        via: Rc::clone(&redirector) as Rc<dyn Redirector>,
        raw: Bytes::from_static(b"*1\r\n$3\r\nGET\r\n"),
        count: 1,
        attempts: 2,
        affinity: 0,
        slot: Some(1),
    };
    let now = Instant::now();
    queue
        .reserve(now)
        .with_redirect(redirect())
        .deliver(Bytes::from_static(b"-MOVED 1 h:1\r\n"));
    queue
        .reserve(now)
        .with_redirect(redirect())
        .deliver(Bytes::from_static(b"+OK\r\n"));
    assert_eq!(ready(&queue), b"+resent 2\r\n+OK\r\n");
    assert_eq!(redirector.0.get(), 1);
    // A node that could not answer: the redirector hears of it, whatever the error's text.
    queue
        .reserve(now)
        .with_redirect(redirect())
        .failed(Bytes::from_static(
            b"-ERR backend h:1 timed out after 1 ms\r\n",
        ));
    assert_eq!(ready(&queue), b"+resent 2\r\n");
    assert_eq!((redirector.0.get(), redirector.1.get()), (2, 1));
}

#[test]
fn a_split_handle_delivers_once_every_part_has_answered() {
    let queue = Rc::new(ReplyQueue::default());
    let combine: Combine = Box::new(|parts: Vec<Bytes>| Bytes::from(parts.concat()));
    let mut parts = queue.reserve(Instant::now()).split(3, combine);
    let last = parts.pop().unwrap();
    for (i, part) in parts.into_iter().enumerate() {
        part.deliver(Bytes::from(format!(":{i}\r\n")));
        assert!(ready(&queue).is_empty());
    }
    last.deliver(Bytes::from_static(b":2\r\n"));
    assert_eq!(ready(&queue), b":0\r\n:1\r\n:2\r\n");
    ReplyHandle::discard().deliver(Bytes::from_static(b"+OK\r\n"));
}

#[test]
fn a_handle_dropped_unanswered_answers_reply_lost_for_each_of_its_requests() {
    let queue = Rc::new(ReplyQueue::default());
    let now = Instant::now();
    let before = REPLIES_LOST.load(Ordering::Relaxed);
    let first = queue.reserve(now);
    drop(queue.reserve_run(now, &Bytes::new(), 2));
    let mut parts = queue.reserve_parts(
        now,
        2,
        1,
        Box::new(|parts: Vec<Bytes>| Bytes::from(parts.concat())),
        None,
    );
    drop(parts.pop());
    assert!(
        ready(&queue).is_empty(),
        "the first request has no reply yet"
    );
    first.deliver(Bytes::from_static(b"+1\r\n"));
    // The gathering slot failed as a whole: its other part's reply, when it comes, is dropped.
    parts
        .pop()
        .unwrap()
        .deliver(Bytes::from_static(b"+late\r\n"));
    let lost = "-ERR internal: reply lost\r\n";
    assert_eq!(
        String::from_utf8(ready(&queue)).unwrap(),
        format!("+1\r\n{lost}{lost}{lost}")
    );
    assert!(queue.is_empty());
    assert_eq!(queue.requests(), 0);
    assert!(REPLIES_LOST.load(Ordering::Relaxed) - before >= 3);
    // Delivered, redirected or discarded handles lose nothing.
    ReplyHandle::discard().deliver(Bytes::from_static(b"+OK\r\n"));
}

#[test]
fn a_closed_queue_drops_what_still_comes() {
    let queue = Rc::new(ReplyQueue::default());
    let now = Instant::now();
    let pending = queue.reserve(now);
    queue.close();
    pending.deliver(Bytes::from_static(b"+late\r\n"));
    queue.push_message(Bytes::from_static(b">m\r\n"));
    drop(queue.reserve(now));
    assert!(ready(&queue).is_empty());
    assert_eq!(queue.messages(), 0);
}

/// Replies that may hold an error reply are handed to the drain's caller (which counts them), runs and gathered
/// replies included; the others are not looked into.
#[test]
fn replies_with_errors_are_told_apart_when_drained() {
    let queue = Rc::new(ReplyQueue::default());
    let now = Instant::now();
    queue.reserve(now).deliver(Bytes::from_static(b"+OK\r\n"));
    queue
        .reserve_run(now, &Bytes::new(), 2)
        .deliver_run(Bytes::from_static(b"+OK\r\n-ERR x\r\n"), true);
    let parts = queue.reserve_parts(now, 2, 1, Box::new(|parts| parts[0].clone()), None);
    for (part, reply) in parts.into_iter().zip([&b":1\r\n"[..], b"-ERR y\r\n"]) {
        part.deliver(Bytes::copy_from_slice(reply));
    }
    queue.push_ready(Bytes::from_static(b"-ERR z\r\n"), now);
    let mut errors = Vec::new();
    queue.drain_ready(&mut BytesMut::new(), |answered| {
        errors.push(answered.error.map(<[u8]>::to_vec));
    });
    let some = |bytes: &[u8]| Some(bytes.to_vec());
    assert_eq!(
        errors,
        [
            None,
            some(b"+OK\r\n-ERR x\r\n"),
            some(b":1\r\n"),
            some(b"-ERR z\r\n")
        ]
    );
}

#[test]
fn a_tagged_slot_gives_its_request_back_with_its_reply() {
    let queue = Rc::new(ReplyQueue::default());
    let now = Instant::now();
    let ping = Bytes::from_static(b"*1\r\n$4\r\nPING\r\n");
    let run = Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n");
    let open = |queue: &Rc<ReplyQueue>| {
        queue.tag(Some(&ping));
        let tagged = queue.reserve(now);
        queue.tag(None);
        let untagged = queue.reserve(now);
        let run_slot = queue.reserve_run(now, &run, 2);
        let lanes = queue.reserve_parts(
            now,
            2,
            2,
            Box::new(|parts| parts.concat().into()),
            Some(&run),
        );
        tagged.deliver(Bytes::from_static(b"+PONG\r\n"));
        untagged.deliver(Bytes::from_static(b"+PONG\r\n"));
        run_slot.deliver_run(Bytes::from_static(b"$-1\r\n$-1\r\n"), false);
        for lane in lanes {
            lane.deliver(Bytes::from_static(b"$-1\r\n"));
        }
        let mut requests = Vec::new();
        queue.drain_ready(&mut BytesMut::new(), |answered| {
            requests.push(answered.request.map(|tag| (tag.raw, tag.aligned)));
        });
        requests
    };
    // Off by default: no slot keeps anything.
    assert!(open(&queue).iter().all(Option::is_none));
    queue.keep_requests(true);
    assert_eq!(
        open(&queue),
        [
            Some((ping.clone(), true)),
            None,
            Some((run.clone(), true)),
            // A cluster run's over several masters: the first master's requests, not in the reply's order.
            Some((run.clone(), false)),
        ]
    );
}
