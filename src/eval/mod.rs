//! Long-context evaluation: generated filler text, head calibration, needle-in-a-haystack, the
//! accuracy suite (`accuracy`, `tasks`), the selection-recall diagnostic (`recall`), and the
//! charts of their results.
pub mod accuracy;
pub mod calibrate;
pub mod charts;
pub mod niah;
pub mod recall;
pub mod tasks;
pub mod text;
