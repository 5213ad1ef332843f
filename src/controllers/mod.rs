//! Federation-side controllers run by `fedctl server` (level-triggered reconcile loops over the API
//! layer) and the task groups that stop them together; uses `api`, `storage` and `telemetry`.

pub mod informer;
pub mod propagation;
pub mod tasks;
pub mod workqueue;
