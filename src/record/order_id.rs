//! Where an order is: its orders topic ([`Topic`]), partition and offset
//! ([`OrderId`]); a topic's partition is a [`Lane`], where the claim
//! frontier is kept (docs/protocol.md R13, R57).
//!
//! The pool reads several orders topics in priority order (`ORDERS_TOPIC`
//! is a list). The last of them is the *main* topic: records about its
//! orders do not name it, so that a pool's claims topic stays valid, and
//! its records byte for byte the same, when priority topics are put in
//! front of its one topic. Records about the others carry `topic`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Mutex, OnceLock};

/// Most topic names one process takes in (a bound on what a stray record
/// can make it keep); a record naming one more is foreign.
pub const MAX_TOPICS: usize = 1_000;

/// Kafka's longest topic name.
pub const MAX_TOPIC_BYTES: usize = 249;

/// An orders topic. The main topic (the last of `ORDERS_TOPIC`) is
/// unnamed ([`Topic::MAIN`]); any other is its name. A topic is a
/// reference to its name, interned once per process ([`Topic::named`]),
/// so that an order id stays `Copy`; compared and ordered by name, so
/// every process orders them alike.
#[derive(Clone, Copy, Default)]
pub struct Topic(&'static str);

/// By name; interned names compare by address first. A replay looks an
/// order up in maps of thousands of contests for every record it folds,
/// and every comparison of an [`OrderId`] starts with its topic: as the
/// derived comparison of two `&str`, that was a call of `memcmp` (of zero
/// bytes, for the main topic), most of `View::apply`'s time (bench/RESULTS.md).
impl PartialEq for Topic {
    fn eq(&self, other: &Topic) -> bool {
        self.0.len() == other.0.len()
            && (std::ptr::eq(self.0.as_ptr(), other.0.as_ptr())
                || self.0.is_empty()
                || self.0 == other.0)
    }
}

impl Eq for Topic {}

/// By name, as equality is.
impl std::hash::Hash for Topic {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl Ord for Topic {
    fn cmp(&self, other: &Topic) -> std::cmp::Ordering {
        if self == other {
            std::cmp::Ordering::Equal
        } else {
            self.0.cmp(other.0)
        }
    }
}

impl PartialOrd for Topic {
    fn partial_cmp(&self, other: &Topic) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Topic {
    /// The main orders topic: the last of `ORDERS_TOPIC`, never named in
    /// a record.
    pub const MAIN: Topic = Topic("");

    /// The topic named `name` (Kafka's rules: 1 to 249 bytes of ASCII
    /// letters, digits, `.`, `_` and `-`; not `.` or `..`).
    pub fn named(name: &str) -> Result<Topic, String> {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if name.is_empty()
            || name.len() > MAX_TOPIC_BYTES
            || !name.chars().all(legal)
            || name == "."
            || name == ".."
        {
            return Err(format!(
                "'{}' is not a topic name (1 to {MAX_TOPIC_BYTES} of letters, digits, '.', '_', '-')",
                name.escape_default()
            ));
        }
        static NAMES: OnceLock<Mutex<BTreeSet<&'static str>>> = OnceLock::new();
        let mut names = NAMES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = names.get(name) {
            return Ok(Topic(n));
        }
        if names.len() >= MAX_TOPICS {
            return Err(format!("more than {MAX_TOPICS} topic names"));
        }
        let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
        names.insert(n);
        Ok(Topic(n))
    }

    /// Its name, `None` for the main topic.
    pub fn name(self) -> Option<&'static str> {
        (!self.0.is_empty()).then_some(self.0)
    }

    pub fn is_main(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "Topic({n})"),
            None => f.write_str("Topic::MAIN"),
        }
    }
}

impl Serialize for Topic {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for Topic {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Topic, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Topic::named(&s).map_err(serde::de::Error::custom)
    }
}

/// A partition of an orders topic: `P` in the main topic, `TOPIC:P` in
/// another (so written as a key of a record's `next`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Lane {
    pub topic: Topic,
    pub partition: i32,
}

impl Lane {
    pub const fn new(topic: Topic, partition: i32) -> Lane {
        Lane { topic, partition }
    }

    /// The order at `offset` of this lane.
    pub const fn at(self, offset: i64) -> OrderId {
        OrderId {
            topic: self.topic,
            partition: self.partition,
            offset,
        }
    }
}

/// A partition of the main topic.
impl From<i32> for Lane {
    fn from(partition: i32) -> Lane {
        Lane::new(Topic::MAIN, partition)
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.topic.name() {
            Some(t) => write!(f, "{t}:{}", self.partition),
            None => write!(f, "{}", self.partition),
        }
    }
}

impl std::str::FromStr for Lane {
    type Err = String;
    fn from_str(s: &str) -> Result<Lane, String> {
        let (topic, p) = match s.rsplit_once(':') {
            Some((t, p)) => (Topic::named(t)?, p),
            None => (Topic::MAIN, s),
        };
        match p.parse::<i32>() {
            Ok(partition) if partition >= 0 => Ok(Lane { topic, partition }),
            _ => Err(format!("bad partition in '{s}'")),
        }
    }
}

impl Serialize for Lane {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Lane {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Lane, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An order's identity: its topic, partition and offset in the orders
/// topics. Written `P:O` in the main topic, `TOPIC:P:O` in another.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct OrderId {
    #[serde(default, skip_serializing_if = "Topic::is_main")]
    pub topic: Topic,
    pub partition: i32,
    pub offset: i64,
}

impl OrderId {
    /// The order at `offset` of the main topic's `partition`.
    pub const fn new(partition: i32, offset: i64) -> Self {
        OrderId {
            topic: Topic::MAIN,
            partition,
            offset,
        }
    }

    /// Its topic and partition.
    pub const fn lane(self) -> Lane {
        Lane::new(self.topic, self.partition)
    }
}

impl fmt::Display for OrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.lane(), self.offset)
    }
}

impl std::str::FromStr for OrderId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = "give PARTITION:OFFSET or TOPIC:PARTITION:OFFSET, e.g. 0:17";
        let (lane, o) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("order '{s}' is not PARTITION:OFFSET"))?;
        let lane: Lane = lane.parse().map_err(|e| format!("{e} ({usage})"))?;
        let offset: i64 = o
            .parse()
            .map_err(|_| format!("bad offset in '{s}' ({usage})"))?;
        if offset < 0 {
            return Err(format!("order '{s}' has a negative partition or offset"));
        }
        Ok(lane.at(offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_topic_ids_are_written_as_before_and_others_carry_their_topic() {
        let main = OrderId::new(0, 17);
        assert_eq!(main.to_string(), "0:17");
        assert_eq!(
            serde_json::to_string(&main).unwrap(),
            r#"{"partition":0,"offset":17}"#
        );
        let urgent = Lane::new(Topic::named("urgent").unwrap(), 0).at(17);
        assert_eq!(urgent.to_string(), "urgent:0:17");
        assert_eq!(
            serde_json::to_string(&urgent).unwrap(),
            r#"{"topic":"urgent","partition":0,"offset":17}"#
        );
        assert_ne!(
            main, urgent,
            "one partition and offset in two topics: two orders"
        );
        for id in [main, urgent] {
            assert_eq!(id.to_string().parse::<OrderId>(), Ok(id));
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(serde_json::from_str::<OrderId>(&json).unwrap(), id);
        }
        assert_eq!("3".parse::<Lane>(), Ok(Lane::from(3)));
        assert_eq!(
            "a.b-c_d:2".parse::<Lane>().unwrap().topic.name(),
            Some("a.b-c_d")
        );
    }

    #[test]
    fn bad_names_and_ids_are_refused() {
        for bad in ["", ".", "..", "a b", "a:b", "é", &"x".repeat(250)] {
            assert!(Topic::named(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "17", "a:b", "0:-1", "-1:3", "x y:0:1", "t::1", ":0:1", "0:1:2:3",
        ] {
            assert!(bad.parse::<OrderId>().is_err(), "{bad:?}");
        }
        assert!(
            serde_json::from_str::<OrderId>(r#"{"topic":"","partition":0,"offset":1}"#).is_err()
        );
        assert!(
            serde_json::from_str::<OrderId>(r#"{"topic":"a/b","partition":0,"offset":1}"#).is_err()
        );
    }

    #[test]
    fn topics_are_interned_and_ordered_by_name() {
        let a = Topic::named("alpha").unwrap();
        let b = Topic::named("beta").unwrap();
        assert_eq!(a, Topic::named("alpha").unwrap());
        assert!(Topic::MAIN < a && a < b);
    }

    /// The address is only a shortcut: a name at another address (not
    /// interned) is the same topic and orders alike, and so is an empty
    /// name anywhere.
    #[test]
    fn topics_compare_by_name_wherever_the_name_lives() {
        use std::cmp::Ordering::*;
        let interned = Topic::named("gamma").unwrap();
        let elsewhere = Topic(Box::leak(String::from("gamma").into_boxed_str()));
        assert!(!std::ptr::eq(interned.0.as_ptr(), elsewhere.0.as_ptr()));
        assert_eq!(interned, elsewhere);
        assert_eq!(interned.cmp(&elsewhere), Equal);
        let empty = Topic(Box::leak(String::new().into_boxed_str()));
        assert_eq!(empty, Topic::MAIN);
        assert_eq!(Topic::MAIN.cmp(&empty), Equal);
        let (g, gg) = (Topic::named("g").unwrap(), Topic::named("gg").unwrap());
        assert_eq!((g.cmp(&gg), gg.cmp(&g)), (Less, Greater));
        assert_eq!((elsewhere.cmp(&g), g.cmp(&elsewhere)), (Greater, Less));
        assert_ne!(g, gg);
        assert_eq!(g.partial_cmp(&Topic::MAIN), Some(Greater));
    }
}
