//! In-memory revisioned backend of [`super::Storage`] (used by fedsim and tests).
