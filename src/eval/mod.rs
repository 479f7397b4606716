//! Long-context evaluation: generated filler text, head calibration, needle-in-a-haystack, the
//! accuracy suite (`accuracy`, `tasks`) and the selection-recall diagnostic (`recall`).
pub mod accuracy;
pub mod calibrate;
pub mod heatmap;
pub mod niah;
pub mod recall;
pub mod tasks;
pub mod text;
