//! `ORDERS_TOPIC`: the orders topics in priority order (docs/protocol.md
//! R57), one type for the worker and every tool.
//!
//! `ORDERS_TOPIC=urgent,work_orders` lists the topics an idle instance
//! takes its next order from, first topic first. The last one is the
//! *main* topic: the core never names it in a record ([`Topic::MAIN`]), so
//! a pool that had one orders topic keeps its claims topic, and its
//! records, when priority topics are put in front of it; the others are
//! [`Topic::named`]. The Kafka names and the core's topics are mapped here
//! and nowhere else.

use crate::env::ConfigError;
use crate::record::{Lane, OrderId, Topic};

/// Most topics `ORDERS_TOPIC` may list (each is read by every instance's
/// one consumer, and asked for its ends at every look at the orders).
pub const MAX_ORDERS_TOPICS: usize = 16;

/// The orders topics, in priority order: Kafka names and the core's
/// [`Topic`]s, the last being [`Topic::MAIN`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrdersTopics {
    names: Vec<String>,
    topics: Vec<Topic>,
}

impl OrdersTopics {
    /// Parses `raw`, the value of the variable (or flag) `var`: names
    /// separated by commas, trimmed, each a legal topic name, none twice,
    /// at most [`MAX_ORDERS_TOPICS`].
    pub fn parse(var: &str, raw: &str) -> Result<OrdersTopics, ConfigError> {
        let names: Vec<String> = raw.split(',').map(|s| s.trim().to_string()).collect();
        if names.iter().all(String::is_empty) {
            return Err(ConfigError(format!("{var} is empty")));
        }
        if names.iter().any(String::is_empty) {
            return Err(ConfigError(format!(
                "{var}='{}' has an empty topic name (give names separated by commas, e.g. urgent,work_orders)",
                raw.escape_default()
            )));
        }
        if names.len() > MAX_ORDERS_TOPICS {
            return Err(ConfigError(format!(
                "{var} lists {} topics; at most {MAX_ORDERS_TOPICS}",
                names.len()
            )));
        }
        for (i, n) in names.iter().enumerate() {
            crate::kafka::broker::check_topic_name(n)
                .map_err(|e| ConfigError(format!("{var}: {e}")))?;
            if names[..i].contains(n) {
                return Err(ConfigError(format!("{var} lists '{n}' twice")));
            }
        }
        let last = names.len() - 1;
        let topics = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if i == last {
                    Ok(Topic::MAIN)
                } else {
                    Topic::named(n).map_err(|e| ConfigError(format!("{var}: {e}")))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(OrdersTopics { names, topics })
    }

    /// Refuses a list that names `other` (the value of the variable
    /// `other_var`: the claims or the results topic).
    pub fn check_apart(&self, var: &str, other_var: &str, other: &str) -> Result<(), ConfigError> {
        if self.names.iter().any(|n| n == other) {
            return Err(ConfigError(format!(
                "{var} and {other_var} both name the topic '{other}'"
            )));
        }
        Ok(())
    }

    /// `ORDERS_TOPIC` as the tools take it: parsed, and apart from
    /// `COORDINATION_TOPIC` (`claims`).
    pub fn beside_claims(orders: &str, claims: &str) -> Result<OrdersTopics, ConfigError> {
        let t = OrdersTopics::parse("ORDERS_TOPIC", orders)?;
        t.check_apart("ORDERS_TOPIC", "COORDINATION_TOPIC", claims)?;
        Ok(t)
    }

    /// The Kafka names, in priority order (the main topic last).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The core's topics, in priority order (`worker::Settings::topics`).
    pub fn topics(&self) -> Vec<Topic> {
        self.topics.clone()
    }

    /// The main topic's Kafka name (the list's last).
    pub fn main_name(&self) -> &str {
        self.names.last().map(String::as_str).unwrap_or_default()
    }

    /// Whether the list has more than the main topic.
    pub fn several(&self) -> bool {
        self.names.len() > 1
    }

    /// Each topic with its Kafka name, in priority order.
    pub fn iter(&self) -> impl Iterator<Item = (Topic, &str)> + '_ {
        self.topics
            .iter()
            .copied()
            .zip(self.names.iter().map(String::as_str))
    }

    /// The Kafka name of `topic`, `None` for a topic not in the list.
    pub fn name_of(&self, topic: Topic) -> Option<&str> {
        self.iter().find(|(t, _)| *t == topic).map(|(_, n)| n)
    }

    /// The topic named `name` in Kafka, `None` if the list has no such topic.
    pub fn topic_of(&self, name: &str) -> Option<Topic> {
        self.iter().find(|(_, n)| *n == name).map(|(t, _)| t)
    }

    /// `topic`'s Kafka name, or a line saying the list lacks it.
    pub fn kafka_name(&self, topic: Topic) -> Result<&str, String> {
        self.name_of(topic).ok_or_else(|| {
            format!(
                "topic '{}' is not one of ORDERS_TOPIC ({})",
                topic.name().unwrap_or_default(),
                self.names.join(",")
            )
        })
    }

    /// An order id as typed to a tool: `P:O` in the main topic, `T:P:O`
    /// in another; `T` may also be the main topic's name. A topic not in
    /// the list is refused.
    pub fn parse_order(&self, s: &str) -> Result<OrderId, String> {
        self.listed(s.parse()?)
    }

    /// `order` as the core has it: one naming the main topic by its name
    /// (as a tool's user may type it) is of [`Topic::MAIN`]; one of a topic
    /// not in the list is refused.
    pub fn listed(&self, order: OrderId) -> Result<OrderId, String> {
        if order.topic.name() == Some(self.main_name()) {
            return Ok(Lane::from(order.partition).at(order.offset));
        }
        self.kafka_name(order.topic)?;
        Ok(order)
    }

    /// `lane` in Kafka's terms: its topic's name and its partition.
    pub fn kafka_lane(&self, lane: Lane) -> Option<(&str, i32)> {
        Some((self.name_of(lane.topic)?, lane.partition))
    }

    /// The lane of a message of topic `name`'s `partition`, if `name` is
    /// one of the list.
    pub fn lane_of(&self, name: &str, partition: i32) -> Option<Lane> {
        Some(Lane::new(self.topic_of(name)?, partition))
    }

    /// The list as `ORDERS_TOPIC` writes it.
    pub fn to_var(&self) -> String {
        self.names.join(",")
    }
}

impl std::fmt::Display for OrdersTopics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_var())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_topic_is_the_main_topic() {
        let t = OrdersTopics::parse("ORDERS_TOPIC", " work_orders ").unwrap();
        assert_eq!(t.names(), ["work_orders"]);
        assert_eq!(t.topics(), vec![Topic::MAIN]);
        assert_eq!(t.main_name(), "work_orders");
        assert!(!t.several());
        assert_eq!(t.to_var(), "work_orders");
    }

    #[test]
    fn a_list_is_in_priority_order_and_its_last_is_the_main_topic() {
        let t = OrdersTopics::parse("ORDERS_TOPIC", "urgent, soon ,work").unwrap();
        let (urgent, soon) = (
            Topic::named("urgent").unwrap(),
            Topic::named("soon").unwrap(),
        );
        assert_eq!(t.topics(), vec![urgent, soon, Topic::MAIN]);
        assert_eq!(t.main_name(), "work");
        assert_eq!(t.name_of(Topic::MAIN), Some("work"));
        assert_eq!(t.name_of(urgent), Some("urgent"));
        assert_eq!(t.topic_of("work"), Some(Topic::MAIN));
        assert_eq!(t.topic_of("soon"), Some(soon));
        assert_eq!(t.topic_of("other"), None);
        assert_eq!(t.name_of(Topic::named("other").unwrap()), None);
        assert_eq!(t.lane_of("urgent", 2), Some(Lane::new(urgent, 2)));
        assert_eq!(t.kafka_lane(Lane::from(1)), Some(("work", 1)));
        assert!(t.several());
        assert_eq!(t.to_string(), "urgent,soon,work");
    }

    #[test]
    fn bad_lists_are_refused_with_the_variable_named() {
        let err = |raw: &str| OrdersTopics::parse("ORDERS_TOPIC", raw).unwrap_err().0;
        assert_eq!(err(""), "ORDERS_TOPIC is empty");
        assert_eq!(err(" , "), "ORDERS_TOPIC is empty");
        assert!(err("a,,b").contains("empty topic name"), "{}", err("a,,b"));
        assert!(err("a,").contains("empty topic name"));
        assert_eq!(err("a,b,a"), "ORDERS_TOPIC lists 'a' twice");
        assert!(err("a,b c").starts_with("ORDERS_TOPIC: 'b c' is not a legal topic name"));
        assert!(err("a,..").starts_with("ORDERS_TOPIC: "));
        let many: Vec<String> = (0..17).map(|i| format!("t{i}")).collect();
        assert_eq!(
            err(&many.join(",")),
            "ORDERS_TOPIC lists 17 topics; at most 16"
        );
        assert!(OrdersTopics::parse("ORDERS_TOPIC", &many[..16].join(",")).is_ok());
        let t = OrdersTopics::parse("ORDERS_TOPIC", "urgent,work").unwrap();
        assert_eq!(
            t.check_apart("ORDERS_TOPIC", "COORDINATION_TOPIC", "urgent")
                .unwrap_err()
                .0,
            "ORDERS_TOPIC and COORDINATION_TOPIC both name the topic 'urgent'"
        );
        assert!(t
            .check_apart("ORDERS_TOPIC", "COORDINATION_TOPIC", "claims")
            .is_ok());
    }

    #[test]
    fn order_ids_name_a_listed_topic_or_the_main_one() {
        let t = OrdersTopics::parse("ORDERS_TOPIC", "urgent,work").unwrap();
        let urgent = Topic::named("urgent").unwrap();
        assert_eq!(t.parse_order("0:17"), Ok(OrderId::new(0, 17)));
        assert_eq!(t.parse_order("work:0:17"), Ok(OrderId::new(0, 17)));
        assert_eq!(t.parse_order("urgent:1:2"), Ok(Lane::new(urgent, 1).at(2)));
        let e = t.parse_order("other:0:1").unwrap_err();
        assert!(
            e.contains("'other' is not one of ORDERS_TOPIC (urgent,work)"),
            "{e}"
        );
        assert!(t.parse_order("17").is_err());
        assert!(t.parse_order("work:17").is_err(), "work is not a partition");
        let one = OrdersTopics::parse("ORDERS_TOPIC", "work").unwrap();
        assert!(one.parse_order("urgent:0:1").is_err());
    }
}
