//! Federation-side controllers run by `fedctl server` (level-triggered reconcile loops over the API layer).

pub mod informer;
pub mod propagation;
pub mod workqueue;
