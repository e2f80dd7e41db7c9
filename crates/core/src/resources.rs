//! What the daemon hands a service's `build`: the resources it made from the service's
//! [`Manifest`](crate::Manifest) (the queue monitor, the writers of its log files, what
//! its [`Start`](crate::Start)s started) and the clock the service measures its own work
//! with. Building a chain therefore does no I/O:
//! whatever opens a file or starts a thread was done by the daemon, once, beforehand.

use std::any::{Any, TypeId};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The resources of one service, found by type. Cheap to clone (handles only).
///
/// A test or a tool builds a service with [`Resources::new`] (nothing: a service then
/// runs without what it would have been given, e.g. the IDS without its EVE log) or adds
/// what it wants the service to see ([`Resources::with`]).
#[derive(Clone, Default)]
pub struct Resources {
    items: Vec<(TypeId, Arc<dyn Any + Send + Sync>)>,
    clock: Clock,
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resources")
            .field("items", &self.items.len())
            .field("clock", &self.clock)
            .finish()
    }
}

impl Resources {
    /// No resources, the monotonic clock.
    pub fn new() -> Resources {
        Resources::default()
    }

    /// These resources and `value` (replacing one of the same type).
    pub fn with<T: Any + Send + Sync>(mut self, value: Arc<T>) -> Resources {
        self.insert(value);
        self
    }

    /// Adds `value`, replacing one of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        self.insert_any(value);
    }

    /// Adds `value` by the type it holds, replacing one of the same type (what a
    /// [`LogFile`](crate::LogFile)'s or a [`Start`](crate::Start)'s start made).
    pub fn insert_any(&mut self, value: Arc<dyn Any + Send + Sync>) {
        let id = (*value).type_id();
        self.items.retain(|(t, _)| *t != id);
        self.items.push((id, value));
    }

    /// The resource of type `T`, if the daemon made one.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.items
            .iter()
            .find(|(t, _)| *t == TypeId::of::<T>())
            .and_then(|(_, v)| Arc::clone(v).downcast::<T>().ok())
    }

    /// These resources with `clock`.
    pub fn with_clock(mut self, clock: Clock) -> Resources {
        self.clock = clock;
        self
    }

    /// The clock a service measures its own work with.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }
}

/// The clock a service reads when it times its own work (compression's cost C): the
/// monotonic clock (the default), or a manual one that a test advances, so that a result
/// that depends on measured time can be checked exactly. The time a packet arrived is
/// [`Context::now`](crate::Context::now), not this.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    manual: Option<Arc<ManualTime>>,
}

#[derive(Debug)]
struct ManualTime {
    base: Instant,
    nanos: AtomicU64,
}

impl Clock {
    /// The monotonic clock ([`Instant::now`]).
    pub fn monotonic() -> Clock {
        Clock::default()
    }

    /// A clock that stands at `base` until [`Clock::advance`] moves it (clones share it).
    pub fn manual(base: Instant) -> Clock {
        Clock {
            manual: Some(Arc::new(ManualTime {
                base,
                nanos: AtomicU64::new(0),
            })),
        }
    }

    /// Moves a manual clock on by `by` (no effect on the monotonic clock).
    pub fn advance(&self, by: Duration) {
        if let Some(m) = &self.manual {
            let n = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
            m.nanos.fetch_add(n, Relaxed);
        }
    }

    /// The current time on this clock.
    #[inline]
    pub fn now(&self) -> Instant {
        match &self.manual {
            None => Instant::now(),
            Some(m) => m.base + Duration::from_nanos(m.nanos.load(Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_found_by_type_and_replaced() {
        let r = Resources::new().with(Arc::new(7u32)).with(Arc::new("x"));
        assert_eq!(r.get::<u32>().as_deref(), Some(&7));
        assert_eq!(r.get::<&str>().as_deref(), Some(&"x"));
        assert!(r.get::<u64>().is_none());
        let r = r.with(Arc::new(8u32));
        assert_eq!(r.get::<u32>().as_deref(), Some(&8));
        let mut r = r;
        r.insert_any(Arc::new(9u32));
        assert_eq!(r.get::<u32>().as_deref(), Some(&9));
    }

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let t = Instant::now();
        let c = Clock::manual(t);
        assert_eq!(c.now(), t);
        c.clone().advance(Duration::from_micros(20));
        assert_eq!(c.now(), t + Duration::from_micros(20));
        assert!(Clock::monotonic().now() >= t);
    }
}
