//! Long-context evaluation: generated filler text, head calibration, and needle-in-a-haystack.
pub mod calibrate;
pub mod heatmap;
pub mod niah;
pub mod text;
