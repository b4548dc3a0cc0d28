//! The numbers and names the protocol passes around, each its own type
//! (docs/protocol.md §1, §2): a [`Position`] in the claims log, an
//! [`InstanceNo`], an [`Attempt`], an [`Incarnation`]. Each is written as
//! its bare value (`#[serde(transparent)]`): the wire format is that of
//! the bare types.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A newtype over an unsigned number: `new`, `get`, `Display` as the
/// number.
macro_rules! number {
    ($(#[$doc:meta])* $name:ident($t:ty)) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name($t);

        impl $name {
            pub const fn new(n: $t) -> Self {
                $name(n)
            }

            pub const fn get(self) -> $t {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

number! {
    /// A position (Kafka offset) in the claims log.
    Position(u64)
}

number! {
    /// An instance number (`INSTANCE`, 1 ..= `MAX_INSTANCE`; 0 on a cancel,
    /// which is no instance's record). Named so because
    /// [`crate::boot::Instance`] is what the View knows of one.
    InstanceNo(u32)
}

number! {
    /// Which run of an order a record is about: 1 for the first, one more
    /// for each retry; 0 where a record does not say (older writers).
    Attempt(u32)
}

/// For the tests, which name instances by their numbers.
impl From<u32> for InstanceNo {
    fn from(n: u32) -> Self {
        InstanceNo(n)
    }
}

impl Position {
    /// The position after this one.
    pub const fn next(self) -> Position {
        Position(self.0 + 1)
    }
}

impl Attempt {
    /// The first run of an order.
    pub const FIRST: Attempt = Attempt(1);

    /// The next run (a retry).
    pub const fn next(self) -> Attempt {
        Attempt(self.0 + 1)
    }
}

/// One process start of an instance: a random name its `booted` makes
/// current, fencing older ones (docs/protocol.md R10).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Incarnation(String);

impl Incarnation {
    pub fn new(name: impl Into<String>) -> Self {
        Incarnation(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Incarnation {
    fn from(name: &str) -> Self {
        Incarnation(name.to_string())
    }
}
