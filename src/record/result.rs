//! The results topic's message for a completion (seed 000's result
//! publication): key `PARTITION:OFFSET`, value the order, instance, attempt
//! and outcome as one JSON object. Built here, in the core, with its size
//! rule beside it. The worker machine asks for it to be published
//! (`worker::Action::PublishResult`); the shell (`Kafka::publish_result`)
//! only produces it.

use super::{Outcome, Record, MAX_TAIL_BYTES};

/// One completion's message for the results topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultMessage {
    /// `PARTITION:OFFSET` of the order.
    pub key: String,
    rec: Record,
    outcome: Outcome,
}

impl ResultMessage {
    /// The message of `rec`, a completion (`None` for any other record),
    /// with each output tail cut to [`MAX_TAIL_BYTES`] as in the record.
    pub fn of(rec: &Record) -> Option<ResultMessage> {
        let order = rec.order()?;
        let outcome = rec.outcome()?.clone().fit(MAX_TAIL_BYTES);
        Some(ResultMessage {
            key: order.to_string(),
            rec: rec.clone(),
            outcome,
        })
    }

    /// The message's value: one JSON object.
    pub fn value(&self) -> String {
        let (rec, outcome) = (&self.rec, &self.outcome);
        let Some(order) = rec.order() else {
            return String::new();
        };
        serde_json::json!({
            "order": order.to_string(),
            "topic": order.topic.name(),
            "partition": order.partition,
            "offset": order.offset,
            "instance": rec.instance,
            "attempt": rec.attempt(),
            "status": outcome.status,
            "exit_code": outcome.exit_code,
            "duration_ms": outcome.duration_ms,
            "reason": outcome.reason,
            "stdout": outcome.stdout_tail,
            "stderr": outcome.stderr_tail,
            "ts": rec.ts,
            "traceparent": outcome.traceparent,
            "retry_of": outcome.retry_of,
        })
        .to_string()
    }

    /// After the broker refused the message as too large: halves the longer
    /// output tail's budget and cuts both to it. False when there is no
    /// output left to cut (the message cannot be made smaller).
    pub fn shrink(&mut self) -> bool {
        let half = super::size::halved_tail_budget(&self.outcome);
        if half == 0 {
            return false;
        }
        self.outcome = self.outcome.clone().fit(half);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Body, Incarnation, InstanceNo, OrderId, Status};

    fn completed(stdout: &str) -> Record {
        let mut outcome = Outcome::not_run(Status::Ok, "");
        outcome.exit_code = Some(0);
        outcome.stdout_tail = stdout.to_string();
        Record::new(
            InstanceNo::new(3),
            Body::completed(OrderId::new(2, 41), outcome),
            &Incarnation::new("abc".to_string()),
            1_700_000_000_000,
        )
    }

    #[test]
    fn a_completion_makes_a_message_keyed_by_its_order() {
        let msg = ResultMessage::of(&completed("hello\n")).unwrap();
        assert_eq!(msg.key, "2:41");
        let v: serde_json::Value = serde_json::from_str(&msg.value()).unwrap();
        assert_eq!(v["order"], "2:41");
        assert_eq!(
            (v["partition"].as_i64(), v["offset"].as_i64()),
            (Some(2), Some(41))
        );
        assert_eq!(v["instance"], 3);
        assert_eq!(v["status"], "ok");
        assert_eq!(v["exit_code"], 0);
        assert_eq!(v["stdout"], "hello\n");
        assert_eq!(v["ts"], 1_700_000_000_000u64);
        let claim = Record::new(
            InstanceNo::new(3),
            Body::claim(OrderId::new(2, 41)),
            &Incarnation::new("abc".to_string()),
            1,
        );
        assert!(
            ResultMessage::of(&claim).is_none(),
            "only a completion has one"
        );
    }

    #[test]
    fn shrinking_halves_the_output_until_none_is_left() {
        let mut msg = ResultMessage::of(&completed(&"x".repeat(10_000))).unwrap();
        let mut len = msg.value().len();
        let mut steps = 0;
        while msg.shrink() {
            let now = msg.value().len();
            assert!(now < len, "each step makes the message smaller");
            len = now;
            steps += 1;
            assert!(steps < 64, "shrinking ends");
        }
        assert!(steps > 5, "{steps}");
        let mut empty = ResultMessage::of(&completed("")).unwrap();
        assert!(!empty.shrink(), "nothing to cut: the message cannot shrink");
    }
}
