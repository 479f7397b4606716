//! Long-context evaluation: generated filler text, head calibration, needle-in-a-haystack, and
//! the charts of their results.
pub mod calibrate;
pub mod charts;
pub mod niah;
pub mod text;
