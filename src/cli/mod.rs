//! The one-shot commands `fedctl join`, `fedctl unjoin` and `fedctl token`, and the small
//! federation API client they share; uses `pki`, `api::federation`, `agent::config` and
//! `server::bootstrap`.

pub mod client;
pub mod join;
pub mod token;
pub mod unjoin;
