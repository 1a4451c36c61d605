//! Pure decisions for quorate: no I/O and no clocks (time is always an argument), so every
//! rule here can be unit- and property-tested.

pub mod join;
pub mod planner;
