//! The serving layer's operations, run on the extension's own connections (`host`): `layer`
//! builds and reads the tables (`fct_orders`, `mart_daily`, ...), `refresh` applies changes and
//! reconciles, `replica` serves a mart-only layer from a Paimon mart table, `follow` keeps a layer fresh from a Paimon table in the background, `handoff`
//! passes Rust-made batches to DuckDB through the internal table function, `state` is what a
//! database keeps in memory (follower, last reconcile, storage options) and the `Database` value
//! every SQL function receives. Every write is one
//! transaction: a failure leaves the previous layer exactly as it was.

pub mod follow;
pub mod handoff;
pub mod layer;
pub mod refresh;
pub mod replica;
pub mod state;
